//! The `storage.k8s.io/v1` kinds.

use k8s_openapi::api::storage::v1::StorageClass;

use super::{Resource, of, printer, typed};
use crate::defaults as d;
use crate::printers::other as p;
use crate::strategy::Hooks;
use crate::validation as v;

pub(super) static RESOURCES: &[Resource] = &[Resource {
    short_names: &["sc"],
    printer: printer(p::STORAGE_CLASS_COLUMNS, p::storage_class),
    strategy: || {
        typed::<StorageClass>(Hooks {
            default: d::misc::default_storage_class,
            validate: v::storage_class::validate_storage_class,
            validate_update: v::storage_class::validate_storage_class_update,
            ..Hooks::plain()
        })
    },
    ..of::<StorageClass>("storageclass")
}];
