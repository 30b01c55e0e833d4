//! The `admissionregistration.k8s.io/v1` kinds: the configurations of admission webhooks, which
//! the API server's webhook admission (`capstan-apiserver`'s `admission::webhook`) reads, and
//! ValidatingAdmissionPolicies with their bindings (its `admission::policy`).

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    ValidatingWebhookConfiguration,
};

use super::{Resource, of, printer, status, typed};
use crate::defaults as d;
use crate::printers::other as p;
use crate::strategy::Hooks;
use crate::validation::admissionpolicy as policy;
use crate::validation::admissionregistration as v;

pub(super) static RESOURCES: &[Resource] = &[
    Resource {
        categories: &["api-extensions"],
        printer: printer(p::WEBHOOK_CONFIGURATION_COLUMNS, p::webhook_configuration),
        strategy: || {
            typed::<MutatingWebhookConfiguration>(Hooks {
                default: d::misc::default_mutating_webhook_configuration,
                validate: v::validate_mutating_configuration,
                validate_update: v::validate_mutating_configuration_update,
                generation: true,
                ..Hooks::plain()
            })
        },
        ..of::<MutatingWebhookConfiguration>("mutatingwebhookconfiguration")
    },
    Resource {
        categories: &["api-extensions"],
        printer: printer(p::WEBHOOK_CONFIGURATION_COLUMNS, p::webhook_configuration),
        strategy: || {
            typed::<ValidatingWebhookConfiguration>(Hooks {
                default: d::misc::default_validating_webhook_configuration,
                validate: v::validate_validating_configuration,
                validate_update: v::validate_validating_configuration_update,
                generation: true,
                ..Hooks::plain()
            })
        },
        ..of::<ValidatingWebhookConfiguration>("validatingwebhookconfiguration")
    },
    Resource {
        categories: &["api-extensions"],
        subresources: &[status("ValidatingAdmissionPolicy")],
        printer: printer(p::ADMISSION_POLICY_COLUMNS, p::admission_policy),
        strategy: || {
            typed::<ValidatingAdmissionPolicy>(Hooks {
                default: d::misc::default_validating_admission_policy,
                validate: policy::validate_policy,
                validate_update: policy::validate_policy_update,
                validate_status_update: policy::validate_policy_status_update,
                ..Hooks::workload()
            })
        },
        ..of::<ValidatingAdmissionPolicy>("validatingadmissionpolicy")
    },
    Resource {
        categories: &["api-extensions"],
        printer: printer(
            p::ADMISSION_POLICY_BINDING_COLUMNS,
            p::admission_policy_binding,
        ),
        strategy: || {
            typed::<ValidatingAdmissionPolicyBinding>(Hooks {
                default: d::misc::default_validating_admission_policy_binding,
                validate: policy::validate_binding,
                validate_update: policy::validate_binding_update,
                generation: true,
                ..Hooks::plain()
            })
        },
        ..of::<ValidatingAdmissionPolicyBinding>("validatingadmissionpolicybinding")
    },
];
