//! Serving an object: whole or one byte range, conditional on its entity tag or date.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::{
    body::Body,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use quintet_core::{
    Instance,
    object::{self, ByteRange, ObjectPath, RangeSpec, if_none_match, if_range_etag},
    ports::storage::ObjectMeta,
};

use super::missing;
use crate::error::{ApiError, ApiResult};

/// Answer a `GET` (or, with `head`, a `HEAD`) of `path` in `instance`: 200 with the whole
/// object, 206 with one range, 304 when the client's copy is current, 416 when the range
/// misses the object, 404 when there is no object.
pub(super) async fn serve(
    state: &crate::state::AppState,
    instance: &Instance,
    path: &ObjectPath,
    headers: &HeaderMap,
    head: bool,
) -> ApiResult {
    let store = &state.services.storage;
    let text = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    let mut range = text(header::RANGE).and_then(RangeSpec::parse);
    let conditional = [
        header::IF_NONE_MATCH,
        header::IF_MODIFIED_SINCE,
        header::IF_RANGE,
    ]
    .into_iter()
    .any(|h| headers.contains_key(h));

    if head || conditional || range.is_some() {
        // Decide from the metadata alone, before any byte is read.
        let meta = store
            .head(instance, path)
            .await?
            .ok_or_else(|| missing(instance, path))?;
        if not_modified(headers, &meta) {
            return Ok(not_modified_response(&meta));
        }
        if !text(header::IF_RANGE).is_none_or(|v| if_range_matches(v, &meta)) {
            range = None;
        }
        if let Some(spec) = range
            && let Err(e) = spec.resolve(meta.size)
        {
            let mut res = ApiError(e).into_response();
            res.headers_mut().insert(
                header::CONTENT_RANGE,
                value(&format!("bytes */{}", meta.size)),
            );
            return Ok(res);
        }
        if head {
            let mut res = Response::new(Body::empty());
            object_headers(res.headers_mut(), &meta, None);
            return Ok(res);
        }
    }

    let obj = store
        .get(instance, path, range)
        .await?
        .ok_or_else(|| missing(instance, path))?;
    let mut res = Response::new(Body::from_stream(obj.body));
    if obj.range.is_some() {
        *res.status_mut() = StatusCode::PARTIAL_CONTENT;
    }
    object_headers(res.headers_mut(), &obj.meta, obj.range);
    Ok(res)
}

/// The headers of an object's answer; with `range`, those of that part.
fn object_headers(h: &mut HeaderMap, meta: &ObjectMeta, range: Option<ByteRange>) {
    let content_type = HeaderValue::from_str(&meta.content_type)
        .unwrap_or_else(|_| HeaderValue::from_static(object::DEFAULT_CONTENT_TYPE));
    h.insert(header::CONTENT_TYPE, content_type);
    let length = match range {
        Some(r) => {
            h.insert(header::CONTENT_RANGE, value(&r.content_range(meta.size)));
            r.len()
        }
        None => meta.size,
    };
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    validators(h, meta);
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    // Objects are whatever tenants uploaded, served from quintet's own origin: an HTML or
    // SVG object must not run script there (with the console's token in reach), nor be
    // sniffed into something executable.
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(OBJECT_CSP),
    );
}

/// The policy objects are served with: a sandbox (unique origin, no script) where nothing
/// is loaded.
pub(crate) const OBJECT_CSP: &str = "sandbox; default-src 'none'; style-src 'unsafe-inline'";

/// `ETag` and `Last-Modified`.
fn validators(h: &mut HeaderMap, meta: &ObjectMeta) {
    h.insert(header::ETAG, value(&format!("\"{}\"", meta.etag)));
    h.insert(header::LAST_MODIFIED, value(&http_date(meta.modified_ms)));
}

fn not_modified_response(meta: &ObjectMeta) -> Response {
    let mut res = Response::new(Body::empty());
    *res.status_mut() = StatusCode::NOT_MODIFIED;
    validators(res.headers_mut(), meta);
    res
}

/// RFC 9110 §13.2.2: `If-None-Match` decides when present; otherwise `If-Modified-Since`.
fn not_modified(headers: &HeaderMap, meta: &ObjectMeta) -> bool {
    if let Some(inm) = headers.get(header::IF_NONE_MATCH) {
        return inm.to_str().is_ok_and(|v| if_none_match(v, &meta.etag));
    }
    headers
        .get(header::IF_MODIFIED_SINCE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| httpdate::parse_http_date(v).ok())
        .is_some_and(|since| seconds(meta.modified_ms) <= unix_seconds(since))
}

/// Whether an `If-Range` value (an entity tag or a date) still describes the object, so
/// that the range may be served.
fn if_range_matches(value: &str, meta: &ObjectMeta) -> bool {
    match if_range_etag(value, &meta.etag) {
        Some(matches) => matches,
        None => httpdate::parse_http_date(value)
            .is_ok_and(|date| unix_seconds(date) == seconds(meta.modified_ms)),
    }
}

fn seconds(ms: i64) -> i64 {
    ms.div_euclid(1000)
}

fn unix_seconds(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// An HTTP date (`Tue, 15 Nov 1994 08:12:31 GMT`).
fn http_date(ms: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    httpdate::fmt_http_date(t)
}

/// A header value from text the server made (always visible ASCII).
fn value(text: &str) -> HeaderValue {
    HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static(""))
}
