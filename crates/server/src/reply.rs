//! Success responses in quintet's JSON shapes.

use axum::{
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::value::RawValue;

/// A JSON response from already-serialized text.
pub fn json_text(status: StatusCode, body: String) -> Response {
    let mut res = (status, body).into_response();
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res
}

/// A JSON response from any serializable value.
pub fn json(status: StatusCode, body: &impl serde::Serialize) -> Response {
    match serde_json::to_string(body) {
        Ok(text) => json_text(status, text),
        Err(e) => crate::error::ApiError(quintet_core::Error::internal(format!(
            "serializing a response: {e}"
        )))
        .into_response(),
    }
}

/// `{ok:true}` with `status`.
pub fn ok(status: StatusCode) -> Response {
    json_text(status, r#"{"ok":true}"#.to_owned())
}

/// `{ok:true, <field>: <raw>}` without re-parsing stored JSON text.
pub fn ok_with_raw(status: StatusCode, field: &str, raw: &RawValue) -> Response {
    let mut body = String::with_capacity(raw.get().len() + field.len() + 16);
    body.push_str(r#"{"ok":true,""#);
    body.push_str(field);
    body.push_str(r#"":"#);
    body.push_str(raw.get());
    body.push('}');
    json_text(status, body)
}

/// The stored JSON text as the whole body (the legacy-GET shape).
pub fn raw(status: StatusCode, raw: &RawValue) -> Response {
    json_text(status, raw.get().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ok_with_raw_wraps_the_stored_text() {
        let raw = RawValue::from_string(r#"{"_id":"a","n":[1,2]}"#.to_owned()).unwrap();
        let res = ok_with_raw(StatusCode::OK, "doc", &raw);
        assert_eq!(res.status(), StatusCode::OK);
        let body = axum::body::to_bytes(res.into_body(), usize::MAX)
            .await
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"ok": true, "doc": {"_id": "a", "n": [1, 2]}})
        );
    }
}
