//! Strategic merge patch for the built-in kinds, through the patch metadata `capstan-api`
//! keeps for each type; kinds without metadata answer as upstream does for custom resources.

use capstan_api::catalog::Resource;
use capstan_api::strategic;
use serde_json::Value;

use crate::status::ApiError;

/// Applies a strategic merge patch to an object of `resource`.
pub(crate) fn apply(
    resource: &Resource,
    original: &Value,
    patch: &Value,
) -> Result<Value, ApiError> {
    let Some(meta) = strategic::for_kind(resource.group, resource.version, resource.kind) else {
        return Err(strategic::custom_resource_rejection().into());
    };
    strategic::apply(original, patch, meta).map_err(|e| e.to_status().into())
}
