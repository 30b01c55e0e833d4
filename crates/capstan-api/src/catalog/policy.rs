//! The `policy/v1` kinds.

use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use super::{Resource, of, printer, status, typed};
use crate::printers::other as p;
use crate::strategy::Hooks;
use crate::validation as v;

pub(super) static RESOURCES: &[Resource] = &[Resource {
    short_names: &["pdb"],
    subresources: &[status("PodDisruptionBudget")],
    printer: printer(p::POD_DISRUPTION_BUDGET_COLUMNS, p::pod_disruption_budget),
    strategy: || {
        typed::<PodDisruptionBudget>(Hooks {
            validate: v::misc::validate_pod_disruption_budget,
            validate_update: v::misc::validate_pod_disruption_budget_update,
            validate_status_update: v::misc::validate_pod_disruption_budget_status_update,
            ..Hooks::workload()
        })
    },
    ..of::<PodDisruptionBudget>("poddisruptionbudget")
}];
