//! API errors as HTTP responses. The `Status` bodies themselves are built in one place,
//! [`capstan_api::StatusError`]; this wraps them for axum. It also words failed dials as Go
//! does ([`dial_error`]), for the errors upstream passes on from its proxy and webhook clients.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use capstan_api::{RequestInfo, StatusError};

/// A failed request, as the API answers it.
#[derive(Debug)]
pub(crate) struct ApiError(Box<StatusError>);

impl ApiError {
    /// 401: the request carried no valid credentials.
    pub(crate) fn unauthorized() -> Self {
        ApiError(Box::new(StatusError::unauthorized("Unauthorized")))
    }

    /// 403: `user` may not make this request, for the authorizers' `reason` (if any).
    pub(crate) fn forbidden_because(info: &RequestInfo, user: &str, reason: &str) -> Self {
        ApiError(Box::new(info.forbidden_because(user, reason)))
    }

    /// 404: nothing is served here.
    pub(crate) fn not_found() -> Self {
        ApiError(Box::new(StatusError::path_not_found()))
    }

    /// The `Status` this error answers with.
    pub(crate) fn status(&self) -> &StatusError {
        &self.0
    }

    /// Whether this is a 409 `AlreadyExists`: the object to create exists.
    pub(crate) fn is_already_exists(&self) -> bool {
        self.0.status.reason.as_deref() == Some("AlreadyExists")
    }
}

impl From<StatusError> for ApiError {
    fn from(error: StatusError) -> Self {
        ApiError(Box::new(error))
    }
}

impl IntoResponse for ApiError {
    /// The `Status` written as upstream's encoder writes it: Go's member order, and a newline.
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.0.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut body = capstan_api::gojson::to_vec_meta("Status", &self.0.to_json());
        body.push(b'\n');
        (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
    }
}

/// Go's words for the usual ways a dial fails (`connect: connection refused`), else the
/// error's own text.
pub(crate) fn dial_error(address: &str, error: &std::io::Error) -> String {
    use std::io::ErrorKind;
    let why = match error.kind() {
        ErrorKind::ConnectionRefused => "connect: connection refused".to_owned(),
        ErrorKind::TimedOut => "i/o timeout".to_owned(),
        ErrorKind::HostUnreachable => "connect: no route to host".to_owned(),
        ErrorKind::NetworkUnreachable => "connect: network is unreachable".to_owned(),
        _ => {
            let text = error.to_string();
            match text.find(" (os error") {
                Some(i) => text[..i].to_lowercase(),
                None => text,
            }
        }
    };
    format!("dial tcp {address}: {why}")
}
