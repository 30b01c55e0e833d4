//! The `discovery.k8s.io/v1` kinds.

use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::{Resource, of, printer, typed};
use crate::defaults as d;
use crate::printers::other as p;
use crate::strategy::Hooks;
use crate::validation as v;

pub(super) static RESOURCES: &[Resource] = &[Resource {
    printer: printer(p::ENDPOINT_SLICE_COLUMNS, p::endpoint_slice),
    strategy: || {
        typed::<EndpointSlice>(Hooks {
            default: d::misc::default_endpoint_slice,
            validate: v::misc::validate_endpoint_slice,
            validate_update: v::misc::validate_endpoint_slice_update,
            ..Hooks::creatable_by_put()
        })
    },
    ..of::<EndpointSlice>("endpointslice")
}];
