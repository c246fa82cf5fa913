//! The one place where an error becomes an HTTP status.

use axum::{
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use quintet_core::Error;

/// A port error on its way to the client as `{ok:false, status, msg}`.
#[derive(Debug)]
pub struct ApiError(pub Error);

/// What handlers return.
pub type ApiResult<T = Response> = Result<T, ApiError>;

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        Self(e)
    }
}

/// Detail of an internal error, carried in the response's extensions so the request log
/// can record it with the request id; never sent to the client.
#[derive(Debug, Clone)]
pub struct InternalDetail(pub String);

/// The status table: every error kind maps to exactly one status.
pub fn status_of(e: &Error) -> StatusCode {
    match e {
        Error::BadRequest(_) => StatusCode::BAD_REQUEST,
        Error::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
        Error::NotFound(_) => StatusCode::NOT_FOUND,
        Error::Conflict(_) => StatusCode::CONFLICT,
        Error::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
        Error::Forbidden(_) => StatusCode::FORBIDDEN,
        Error::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
        Error::Gone(_) => StatusCode::GONE,
        Error::RangeNotSatisfiable(_) => StatusCode::RANGE_NOT_SATISFIABLE,
        Error::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        Error::RateLimited(..) => StatusCode::TOO_MANY_REQUESTS,
        Error::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        Error::InsufficientStorage(_) => StatusCode::INSUFFICIENT_STORAGE,
        Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The `Retry-After` of every 503, in seconds.
pub const RETRY_AFTER_SECS: &str = "1";

/// A JSON error response `{ok:false, status, msg}`.
pub fn error_response(status: StatusCode, msg: &str) -> Response {
    let body = serde_json::json!({ "ok": false, "status": status.as_u16(), "msg": msg });
    let mut res = (status, body.to_string()).into_response();
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = status_of(&self.0);
        let mut res = error_response(status, &self.0.public_message());
        if let Error::RateLimited(_, secs) = &self.0 {
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from((*secs).max(1)));
        }
        if let Error::Internal(detail) = self.0 {
            res.extensions_mut().insert(InternalDetail(detail));
        }
        if status == StatusCode::UNAUTHORIZED {
            res.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if status == StatusCode::SERVICE_UNAVAILABLE {
            // An engine the call needs is down (or the node is shutting down): the
            // engine clients probe it every quarter second, so a second is a fair wait.
            res.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from_static(RETRY_AFTER_SECS),
            );
        }
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_detail_never_reaches_the_body() {
        let res = ApiError(Error::internal("disk /secret/path is full")).into_response();
        assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let detail = res.extensions().get::<InternalDetail>().unwrap();
        assert!(detail.0.contains("/secret/path"));
        assert!(!Error::internal("x").public_message().contains('x'));
    }

    #[test]
    fn unavailable_says_when_to_retry() {
        let res = ApiError(Error::Unavailable("Redis is down".into())).into_response();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(res.headers()[header::RETRY_AFTER], RETRY_AFTER_SECS);
        let res = ApiError(Error::InsufficientStorage("full".into())).into_response();
        assert_eq!(res.status(), StatusCode::INSUFFICIENT_STORAGE);
        assert!(res.headers().get(header::RETRY_AFTER).is_none());
    }

    #[test]
    fn status_table() {
        let cases = [
            (Error::BadRequest(String::new()), 400),
            (Error::Invalid(String::new()), 422),
            (Error::NotFound(String::new()), 404),
            (Error::Conflict(String::new()), 409),
            (Error::Unauthenticated(String::new()), 401),
            (Error::Forbidden(String::new()), 403),
            (Error::TooLarge(String::new()), 413),
            (Error::Gone(String::new()), 410),
            (Error::RangeNotSatisfiable(String::new()), 416),
            (Error::UnsupportedMediaType(String::new()), 415),
            (Error::RateLimited(String::new(), 3), 429),
            (Error::Unavailable(String::new()), 503),
            (Error::InsufficientStorage(String::new()), 507),
            (Error::Internal(String::new()), 500),
        ];
        for (e, code) in cases {
            assert_eq!(status_of(&e).as_u16(), code, "{e:?}");
        }
    }
}
