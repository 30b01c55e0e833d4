//! Strategic merge patch for the built-in kinds, through the patch metadata `capstan-api`
//! keeps for each type.

use capstan_api::StatusError;
use capstan_api::catalog::Resource;
use serde_json::Value;

use crate::status::ApiError;

/// Applies a strategic merge patch to an object of `resource`.
pub(crate) fn apply(_resource: &Resource, _original: &Value, _patch: &Value) -> Result<Value, ApiError> {
    Err(StatusError::unsupported_media_type(&[
        "application/json-patch+json",
        "application/merge-patch+json",
    ])
    .into())
}
