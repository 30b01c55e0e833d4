//! API errors as `metav1.Status` objects, with upstream's codes, reasons, details and messages
//! (clients match on the reason and code, people and scripts on the message). Every error the
//! API returns is built here.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    ListMeta, Status, StatusCause, StatusDetails,
};

use crate::field::{FieldError, aggregate, go_quote as quoted};

/// A resource qualified by its API group, as upstream's `GroupResource` prints it: `pods`,
/// `deployments.apps`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupResource<'a> {
    /// The API group; empty for the core group.
    pub group: &'a str,
    /// The resource (plural name).
    pub resource: &'a str,
}

impl<'a> GroupResource<'a> {
    /// A resource of `group`.
    pub fn new(group: &'a str, resource: &'a str) -> Self {
        GroupResource { group, resource }
    }

    /// Whether both parts are empty (a non-resource request).
    pub fn is_empty(&self) -> bool {
        self.group.is_empty() && self.resource.is_empty()
    }
}

impl std::fmt::Display for GroupResource<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            f.write_str(self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

/// An API error: the HTTP code is `status.code`.
#[derive(Clone, Debug, PartialEq)]
pub struct StatusError {
    /// The `Status` object sent to the client.
    pub status: Status,
}

fn non_empty(text: &str) -> Option<String> {
    (!text.is_empty()).then(|| text.to_owned())
}

impl StatusError {
    fn new(code: u16, reason: &str, message: String, details: Option<StatusDetails>) -> Self {
        StatusError {
            status: Status {
                code: Some(i32::from(code)),
                details,
                message: Some(message),
                metadata: ListMeta::default(),
                reason: Some(reason.to_owned()),
                status: Some("Failure".to_owned()),
            },
        }
    }

    fn about(resource: GroupResource<'_>, name: &str) -> StatusDetails {
        StatusDetails {
            group: non_empty(resource.group),
            kind: non_empty(resource.resource),
            name: non_empty(name),
            ..StatusDetails::default()
        }
    }

    fn retry_after(seconds: i32) -> StatusDetails {
        StatusDetails {
            retry_after_seconds: (seconds > 0).then_some(seconds),
            ..StatusDetails::default()
        }
    }

    /// The HTTP status code.
    pub fn code(&self) -> u16 {
        self.status
            .code
            .and_then(|c| u16::try_from(c).ok())
            .unwrap_or(500)
    }

    /// The `Status` as JSON, with `kind` and `apiVersion` as the API writes it.
    pub fn to_json(&self) -> serde_json::Value {
        let mut body = serde_json::to_value(&self.status).unwrap_or_default();
        if let Some(object) = body.as_object_mut() {
            object.insert("kind".into(), "Status".into());
            object.insert("apiVersion".into(), "v1".into());
        }
        body
    }

    /// 404: the named object does not exist.
    pub fn not_found(resource: GroupResource<'_>, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{resource} {} not found", quoted(name)),
            Some(Self::about(resource, name)),
        )
    }

    /// 404: nothing is served at the path.
    pub fn path_not_found() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource".into(),
            None,
        )
    }

    /// 409: the object to create exists already.
    pub fn already_exists(resource: GroupResource<'_>, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{resource} {} already exists", quoted(name)),
            Some(Self::about(resource, name)),
        )
    }

    /// 409: every name made from `generateName` was taken (upstream's
    /// `NewGenerateNameConflict`); the client may try again after a second.
    pub fn generate_name_conflict(resource: GroupResource<'_>, name: &str) -> Self {
        let details = StatusDetails {
            retry_after_seconds: Some(1),
            ..Self::about(resource, name)
        };
        Self::new(
            409,
            "AlreadyExists",
            format!(
                "{resource} {} already exists, the server was not able to generate a unique \
                 name for the object",
                quoted(name)
            ),
            Some(details),
        )
    }

    /// 409: the write lost a race (`reason` says how, e.g. upstream's "the object has been
    /// modified; please apply your changes to the latest version and try again").
    pub fn conflict(resource: GroupResource<'_>, name: &str, reason: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {resource} {}: {reason}",
                quoted(name)
            ),
            Some(Self::about(resource, name)),
        )
    }

    /// 409: a server-side apply would change fields other managers own; one
    /// `FieldManagerConflict` cause per (field, "conflict with ...") pair.
    pub fn apply_conflict(message: &str, causes: &[(String, String)]) -> Self {
        Self::new(
            409,
            "Conflict",
            message.to_owned(),
            Some(StatusDetails {
                causes: Some(
                    causes
                        .iter()
                        .map(|(field, message)| StatusCause {
                            field: Some(field.clone()),
                            message: Some(message.clone()),
                            reason: Some("FieldManagerConflict".to_owned()),
                        })
                        .collect(),
                ),
                ..StatusDetails::default()
            }),
        )
    }

    /// The message of a conflict caused by a stale `resourceVersion`.
    pub const OBJECT_MODIFIED: &'static str = "the object has been modified; please apply your changes to the latest version and try again";

    /// 401: no valid credentials.
    pub fn unauthorized(message: &str) -> Self {
        let message = if message.is_empty() {
            "not authorized"
        } else {
            message
        };
        Self::new(401, "Unauthorized", message.to_owned(), None)
    }

    /// 403: the user may not do this; `reason` is the authorizer's explanation.
    pub fn forbidden(resource: GroupResource<'_>, name: &str, reason: &str) -> Self {
        let message = if resource.is_empty() {
            format!("forbidden: {reason}")
        } else if name.is_empty() {
            format!("{resource} is forbidden: {reason}")
        } else {
            format!("{resource} {} is forbidden: {reason}", quoted(name))
        };
        Self::new(403, "Forbidden", message, Some(Self::about(resource, name)))
    }

    /// 422 `Invalid`: the object of kind `kind` (in `group`) named `name` failed validation;
    /// one cause per field error, and upstream's aggregated message.
    pub fn invalid(group: &str, kind: &str, name: &str, errors: &[FieldError]) -> Self {
        let group_kind = if group.is_empty() {
            kind.to_owned()
        } else {
            format!("{kind}.{group}")
        };
        let message = if errors.is_empty() {
            format!("{group_kind} {} is invalid", quoted(name))
        } else {
            format!(
                "{group_kind} {} is invalid: {}",
                quoted(name),
                aggregate(errors)
            )
        };
        let causes = errors
            .iter()
            .map(|error| StatusCause {
                reason: Some(error.error_type.reason().to_owned()),
                message: Some(error.body()),
                field: Some(error.field.clone()),
            })
            .collect();
        let details = StatusDetails {
            group: non_empty(group),
            kind: non_empty(kind),
            name: non_empty(name),
            causes: Some(causes),
            ..StatusDetails::default()
        };
        Self::new(422, "Invalid", message, Some(details))
    }

    /// 422 for a request that is well formed but cannot be applied (a JSON patch whose operation
    /// fails, for one): upstream's generic response, the failure as its one cause.
    pub fn unprocessable(message: &str) -> Self {
        let mut error = Self::unprocessable_entity();
        if let Some(details) = error.status.details.as_mut() {
            details.causes = Some(vec![StatusCause {
                reason: Some("UnexpectedServerResponse".into()),
                message: Some(message.to_owned()),
                field: None,
            }]);
        }
        error
    }

    /// 400: the request cannot be understood.
    pub fn bad_request(message: &str) -> Self {
        Self::new(400, "BadRequest", message.to_owned(), None)
    }

    /// 405: the resource does not support the action.
    pub fn method_not_supported(resource: GroupResource<'_>, action: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!(
                "{action} is not supported on resources of kind {}",
                quoted(&resource.to_string())
            ),
            Some(Self::about(resource, "")),
        )
    }

    /// 410 `Expired`: the resource version asked for is older than the retained history.
    pub fn resource_expired(message: &str) -> Self {
        Self::new(410, "Expired", message.to_owned(), None)
    }

    /// 410 for a list or watch from a compacted `resourceVersion`, as upstream words it.
    pub fn too_old_resource_version(requested: i64, oldest: i64) -> Self {
        Self::resource_expired(&format!("too old resource version: {requested} ({oldest})"))
    }

    /// 504 `Timeout`: the request took too long; it may still complete.
    pub fn timeout(message: &str, retry_after_seconds: i32) -> Self {
        Self::new(
            504,
            "Timeout",
            format!("Timeout: {message}"),
            Some(Self::retry_after(retry_after_seconds)),
        )
    }

    /// 504 for a `resourceVersion` newer than the server has seen, as upstream reports it.
    pub fn too_large_resource_version(
        requested: i64,
        current: i64,
        retry_after_seconds: i32,
    ) -> Self {
        let mut error = Self::timeout(
            &format!("Too large resource version: {requested}, current: {current}"),
            retry_after_seconds,
        );
        if let Some(details) = error.status.details.as_mut() {
            details.causes = Some(vec![StatusCause {
                reason: Some("ResourceVersionTooLarge".into()),
                message: Some("Too large resource version".into()),
                field: None,
            }]);
        }
        error
    }

    /// 429: try again later.
    pub fn too_many_requests(message: &str, retry_after_seconds: i32) -> Self {
        Self::new(
            429,
            "TooManyRequests",
            format!("Too many requests: {message}"),
            Some(Self::retry_after(retry_after_seconds)),
        )
    }

    /// 406: none of the media types the client accepts can be served.
    pub fn not_acceptable(accepted: &[&str]) -> Self {
        Self::new(
            406,
            "NotAcceptable",
            format!(
                "only the following media types are accepted: {}",
                accepted.join(", ")
            ),
            None,
        )
    }

    /// 406 with upstream's explanation, e.g. a list asked for as a single object's metadata.
    pub fn not_acceptable_because(message: &str) -> Self {
        Self::new(406, "NotAcceptable", message.to_owned(), None)
    }

    /// 413: the request body is too large.
    pub fn request_entity_too_large(message: &str) -> Self {
        Self::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: {message}"),
            None,
        )
    }

    /// An error with `code`, `reason` and `message` and no details, as upstream reports a
    /// backend's (a kubelet's) answer.
    pub fn new_with_reason(code: u16, reason: &str, message: &str) -> Self {
        Self::new(code, reason, message.to_owned(), None)
    }

    /// 503: a dependency (the datastore) is unavailable.
    pub fn service_unavailable(message: &str) -> Self {
        Self::new(503, "ServiceUnavailable", message.to_owned(), None)
    }

    /// 415: the request body's content type is not one the resource accepts; `accepted` lists
    /// the ones it does, in upstream's order.
    pub fn unsupported_media_type(accepted: &[&str]) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                accepted.join(", ")
            ),
            None,
        )
    }

    /// 422 as upstream's `NewGenericServerResponse` builds it: reason `Invalid`, a fixed message
    /// and empty details, whatever went wrong.
    pub fn unprocessable_entity() -> Self {
        Self::new(
            422,
            "Invalid",
            "the server rejected our request due to an error in our request".into(),
            Some(StatusDetails::default()),
        )
    }

    /// 500 for a failure that upstream returns as a plain Go error rather than an API status:
    /// no reason and no details, the error's text as the message.
    pub fn not_a_status(message: &str) -> Self {
        let mut error = Self::new(500, "", message.to_owned(), None);
        error.status.reason = None;
        error
    }

    /// 500: something failed inside the server.
    pub fn internal(message: &str) -> Self {
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {message}"),
            Some(StatusDetails {
                causes: Some(vec![StatusCause {
                    message: Some(message.to_owned()),
                    ..StatusCause::default()
                }]),
                ..StatusDetails::default()
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(error: StatusError, expected: serde_json::Value) {
        let mut expected = expected;
        let object = expected.as_object_mut().unwrap();
        object.insert("kind".into(), "Status".into());
        object.insert("apiVersion".into(), "v1".into());
        object.insert("metadata".into(), json!({}));
        object.insert("status".into(), "Failure".into());
        assert_eq!(error.to_json(), expected);
    }

    #[test]
    fn errors_read_as_upstream_writes_them() {
        let pods = GroupResource::new("", "pods");
        let deployments = GroupResource::new("apps", "deployments");
        check(
            StatusError::not_found(pods, "web"),
            json!({"code": 404, "reason": "NotFound", "message": "pods \"web\" not found",
                   "details": {"name": "web", "kind": "pods"}}),
        );
        check(
            StatusError::already_exists(deployments, "web"),
            json!({"code": 409, "reason": "AlreadyExists",
                   "message": "deployments.apps \"web\" already exists",
                   "details": {"name": "web", "group": "apps", "kind": "deployments"}}),
        );
        check(
            StatusError::conflict(pods, "web", StatusError::OBJECT_MODIFIED),
            json!({"code": 409, "reason": "Conflict",
                   "message": "Operation cannot be fulfilled on pods \"web\": the object has been modified; please apply your changes to the latest version and try again",
                   "details": {"name": "web", "kind": "pods"}}),
        );
        check(
            StatusError::too_old_resource_version(5, 10),
            json!({"code": 410, "reason": "Expired", "message": "too old resource version: 5 (10)"}),
        );
        check(
            StatusError::too_large_resource_version(50, 20, 1),
            json!({"code": 504, "reason": "Timeout",
                   "message": "Timeout: Too large resource version: 50, current: 20",
                   "details": {"retryAfterSeconds": 1, "causes": [
                       {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]}}),
        );
        check(
            StatusError::unauthorized("Unauthorized"),
            json!({"code": 401, "reason": "Unauthorized", "message": "Unauthorized"}),
        );
        check(
            StatusError::forbidden(
                GroupResource::default(),
                "",
                "User \"x\" cannot get path \"/m\"",
            ),
            json!({"code": 403, "reason": "Forbidden",
                   "message": "forbidden: User \"x\" cannot get path \"/m\"", "details": {}}),
        );
        check(
            StatusError::method_not_supported(pods, "deletecollection"),
            json!({"code": 405, "reason": "MethodNotAllowed",
                   "message": "deletecollection is not supported on resources of kind \"pods\"",
                   "details": {"kind": "pods"}}),
        );
        check(
            StatusError::internal("boom"),
            json!({"code": 500, "reason": "InternalError", "message": "Internal error occurred: boom",
                   "details": {"causes": [{"message": "boom"}]}}),
        );
        assert_eq!(StatusError::not_found(pods, "x").code(), 404);

        use crate::field::{FieldError, Path};
        let containers = Path::new("spec").child("containers");
        check(
            StatusError::invalid(
                "apps",
                "Deployment",
                "web",
                &[
                    FieldError::required(&containers.index(0).child("image"), ""),
                    FieldError::invalid(
                        &Path::new("spec").child("replicas"),
                        -1i64,
                        "must be greater than or equal to 0",
                    ),
                ],
            ),
            json!({"code": 422, "reason": "Invalid",
                   "message": "Deployment.apps \"web\" is invalid: [spec.containers[0].image: Required value, spec.replicas: Invalid value: -1: must be greater than or equal to 0]",
                   "details": {"name": "web", "group": "apps", "kind": "Deployment", "causes": [
                       {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers[0].image"},
                       {"reason": "FieldValueInvalid", "message": "Invalid value: -1: must be greater than or equal to 0", "field": "spec.replicas"}]}}),
        );
    }
}
