//! Errors in upstream's `Status` shape, written once for every handler.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, Status};

use capstan_api::k8s_openapi;

/// A failed request, as the API answers it.
#[derive(Debug)]
pub(crate) struct ApiError {
    code: StatusCode,
    reason: &'static str,
    message: String,
}

impl ApiError {
    /// 401: the request carried no valid credentials.
    pub(crate) fn unauthorized() -> Self {
        ApiError {
            code: StatusCode::UNAUTHORIZED,
            reason: "Unauthorized",
            message: "Unauthorized".into(),
        }
    }

    /// 403: the user may not do this.
    pub(crate) fn forbidden(user: &str, verb: &str, path: &str) -> Self {
        ApiError {
            code: StatusCode::FORBIDDEN,
            reason: "Forbidden",
            message: format!("forbidden: User \"{user}\" cannot {verb} path \"{path}\""),
        }
    }

    /// 404: nothing is served here.
    pub(crate) fn not_found() -> Self {
        ApiError {
            code: StatusCode::NOT_FOUND,
            reason: "NotFound",
            message: "the server could not find the requested resource".into(),
        }
    }

    fn status(&self) -> Status {
        Status {
            code: Some(i32::from(self.code.as_u16())),
            message: Some(self.message.clone()),
            metadata: ListMeta::default(),
            reason: Some(self.reason.to_owned()),
            status: Some("Failure".into()),
            details: None,
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
