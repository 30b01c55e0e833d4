//! Errors in upstream's `Status` shape, written once for every handler.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use capstan_api::RequestInfo;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, Status, StatusDetails};

use capstan_api::k8s_openapi;

/// A failed request, as the API answers it.
#[derive(Debug)]
pub(crate) struct ApiError {
    code: StatusCode,
    reason: &'static str,
    message: String,
    details: Option<Box<StatusDetails>>,
}

impl ApiError {
    /// 401: the request carried no valid credentials.
    pub(crate) fn unauthorized() -> Self {
        ApiError {
            code: StatusCode::UNAUTHORIZED,
            reason: "Unauthorized",
            message: "Unauthorized".into(),
            details: None,
        }
    }

    /// 403: `user` may not make this request; message and details as upstream's authorization
    /// filter writes them.
    pub(crate) fn forbidden(info: &RequestInfo, user: &str) -> Self {
        let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        let details = if info.is_resource_request {
            StatusDetails {
                group: non_empty(&info.api_group),
                kind: non_empty(&info.resource),
                name: non_empty(&info.name),
                ..StatusDetails::default()
            }
        } else {
            StatusDetails::default()
        };
        ApiError {
            code: StatusCode::FORBIDDEN,
            reason: "Forbidden",
            message: info.forbidden_message(user),
            details: Some(Box::new(details)),
        }
    }

    /// 404: nothing is served here.
    pub(crate) fn not_found() -> Self {
        ApiError {
            code: StatusCode::NOT_FOUND,
            reason: "NotFound",
            message: "the server could not find the requested resource".into(),
            details: None,
        }
    }

    fn status(&self) -> Status {
        Status {
            code: Some(i32::from(self.code.as_u16())),
            message: Some(self.message.clone()),
            metadata: ListMeta::default(),
            reason: Some(self.reason.to_owned()),
            status: Some("Failure".into()),
            details: self.details.as_deref().cloned(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = serde_json::to_value(self.status()).unwrap_or_default();
        if let Some(object) = body.as_object_mut() {
            object.insert("kind".into(), "Status".into());
            object.insert("apiVersion".into(), "v1".into());
        }
        (
            self.code,
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_bodies_have_upstream_fields() {
        let mut body = serde_json::to_value(ApiError::unauthorized().status()).unwrap();
        body.as_object_mut().unwrap().remove("kind");
        body.as_object_mut().unwrap().remove("apiVersion");
        assert_eq!(
            body,
            serde_json::json!({
                "metadata": {},
                "status": "Failure",
                "message": "Unauthorized",
                "reason": "Unauthorized",
                "code": 401
            })
        );
    }
}
