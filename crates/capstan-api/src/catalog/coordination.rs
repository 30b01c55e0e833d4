//! The `coordination.k8s.io/v1` kinds.

use k8s_openapi::api::coordination::v1::Lease;

use super::{Resource, of, printer, typed};
use crate::printers::other as p;
use crate::strategy::Hooks;
use crate::validation as v;

pub(super) static RESOURCES: &[Resource] = &[Resource {
    printer: printer(p::LEASE_COLUMNS, p::lease),
    strategy: || {
        typed::<Lease>(Hooks {
            validate: v::misc::validate_lease,
            validate_update: v::misc::validate_lease_update,
            ..Hooks::creatable_by_put()
        })
    },
    ..of::<Lease>("lease")
}];
