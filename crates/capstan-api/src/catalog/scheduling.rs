//! The `scheduling.k8s.io/v1` kinds.

use k8s_openapi::api::scheduling::v1::PriorityClass;

use super::{Resource, of, printer, typed};
use crate::defaults as d;
use crate::printers::other as p;
use crate::strategy::Hooks;
use crate::validation as v;

pub(super) static RESOURCES: &[Resource] = &[Resource {
    short_names: &["pc"],
    printer: printer(p::PRIORITY_CLASS_COLUMNS, p::priority_class),
    strategy: || {
        typed::<PriorityClass>(Hooks {
            default: d::misc::default_priority_class,
            validate: v::misc::validate_priority_class,
            validate_update: v::misc::validate_priority_class_update,
            ..Hooks::plain()
        })
    },
    ..of::<PriorityClass>("priorityclass")
}];
