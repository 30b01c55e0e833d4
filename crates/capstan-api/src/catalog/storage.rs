//! The `storage.k8s.io/v1` kinds.

use k8s_openapi::api::storage::v1::{CSIDriver, StorageClass};

use super::{Resource, of, printer, typed};
use crate::defaults as d;
use crate::printers::other as p;
use crate::strategy::Hooks;
use crate::validation as v;

pub(super) static RESOURCES: &[Resource] = &[
    Resource {
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
    },
    Resource {
        printer: printer(p::CSI_DRIVER_COLUMNS, p::csi_driver),
        strategy: || {
            typed::<CSIDriver>(Hooks {
                default: d::misc::default_csi_driver,
                validate: v::csi_driver::validate_csi_driver,
                validate_update: v::csi_driver::validate_csi_driver_update,
                // Behind `MutableCSINodeAllocatableCount`, alpha in 1.33 and off: dropped unless
                // the stored driver already has it, as upstream drops disabled fields.
                prepare_create: |driver| driver.spec.node_allocatable_update_period_seconds = None,
                prepare_update: |driver, old, _| {
                    if old.spec.node_allocatable_update_period_seconds.is_none() {
                        driver.spec.node_allocatable_update_period_seconds = None;
                    }
                },
                generation: true,
                ..Hooks::plain()
            })
        },
        ..of::<CSIDriver>("csidriver")
    },
];
