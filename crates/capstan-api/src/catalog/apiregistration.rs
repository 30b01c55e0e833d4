//! The `apiregistration.k8s.io/v1` kind: APIServices, which register group-versions served
//! here or by extension API servers (`capstan-apiserver`'s `aggregator` reads them).

use super::{Resource, of, printer, status, typed};
use crate::apiregistration::{
    APIService, default_api_service, validate_api_service, validate_api_service_status_update,
    validate_api_service_update,
};
use crate::printers::other as p;
use crate::strategy::Hooks;

pub(super) static RESOURCES: &[Resource] = &[Resource {
    categories: &["api-extensions"],
    storage_prefix: "apiregistration.k8s.io/apiservices",
    subresources: &[status("APIService")],
    printer: printer(p::API_SERVICE_COLUMNS, p::api_service),
    strategy: || {
        typed::<APIService>(Hooks {
            default: default_api_service,
            validate: validate_api_service,
            validate_update: validate_api_service_update,
            validate_status_update: validate_api_service_status_update,
            ..Hooks::with_status()
        })
    },
    ..of::<APIService>("apiservice")
}];
