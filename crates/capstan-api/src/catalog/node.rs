//! The `node.k8s.io/v1` kinds.

use k8s_openapi::api::node::v1::RuntimeClass;

use super::{Resource, of, printer, typed};
use crate::printers::other as p;
use crate::strategy::Hooks;
use crate::validation as v;

pub(super) static RESOURCES: &[Resource] = &[Resource {
    printer: printer(p::RUNTIME_CLASS_COLUMNS, p::runtime_class),
    strategy: || {
        typed::<RuntimeClass>(Hooks {
            validate: v::runtime_class::validate_runtime_class,
            validate_update: v::runtime_class::validate_runtime_class_update,
            ..Hooks::plain()
        })
    },
    ..of::<RuntimeClass>("runtimeclass")
}];
