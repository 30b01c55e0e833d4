//! The `admissionregistration.k8s.io/v1` kinds: the configurations of admission webhooks, which
//! the API server's webhook admission (`capstan-apiserver`'s `admission::webhook`) reads.

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};

use super::{Resource, of, printer, typed};
use crate::defaults as d;
use crate::printers::other as p;
use crate::strategy::Hooks;
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
];
