//! The `flowcontrol.apiserver.k8s.io/v1` kinds, which configure the API server's flow control.

use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};

use super::{Resource, of, printer, status, typed};
use crate::defaults as d;
use crate::printers::other as p;
use crate::strategy::Hooks;
use crate::validation as v;

pub(super) static RESOURCES: &[Resource] = &[
    Resource {
        subresources: &[status("FlowSchema")],
        printer: printer(p::FLOW_SCHEMA_COLUMNS, p::flow_schema),
        strategy: || {
            typed::<FlowSchema>(Hooks {
                default: d::flowcontrol::default_flow_schema,
                validate: v::flowcontrol::validate_flow_schema,
                validate_update: v::flowcontrol::validate_flow_schema_update,
                validate_status_update: v::flowcontrol::validate_flow_schema_status_update,
                ..Hooks::with_status()
            })
        },
        ..of::<FlowSchema>("flowschema")
    },
    Resource {
        subresources: &[status("PriorityLevelConfiguration")],
        printer: printer(p::PRIORITY_LEVEL_COLUMNS, p::priority_level),
        strategy: || {
            typed::<PriorityLevelConfiguration>(Hooks {
                default: d::flowcontrol::default_priority_level,
                validate: v::flowcontrol::validate_priority_level,
                validate_update: v::flowcontrol::validate_priority_level_update,
                validate_status_update: v::flowcontrol::validate_priority_level_status_update,
                ..Hooks::with_status()
            })
        },
        ..of::<PriorityLevelConfiguration>("prioritylevelconfiguration")
    },
];
