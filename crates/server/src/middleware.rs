//! Layers every request passes through: request ids, the request log line and metrics,
//! JSON bodies for errors that axum produces itself (unknown route, wrong method). CORS is
//! [`crate::cors`], the `Host` check [`crate::hosts`].

use std::{
    sync::{
        Arc, OnceLock,
        atomic::{AtomicU64, Ordering},
    },
    time::Instant,
};

use axum::{
    extract::{Request, State},
    http::{HeaderName, HeaderValue, Method, StatusCode, header},
    middleware::Next,
    response::Response,
};

use crate::{
    error::{InternalDetail, error_response},
    metrics::Metrics,
};

/// The header carrying the request id, both ways.
pub static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The id of the request being served; in the request's extensions.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

fn next_request_id() -> String {
    static PREFIX: OnceLock<u32> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let prefix = PREFIX.get_or_init(|| {
        quintet_core::id::random_bytes(4)
            .ok()
            .and_then(|b| b.try_into().ok())
            .map(u32::from_be_bytes)
            .unwrap_or(0)
    });
    format!("{prefix:08x}-{:x}", COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// An incoming request id is kept when it is short printable ASCII; otherwise a new one.
fn request_id_of(req: &Request) -> String {
    req.headers()
        .get(&REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_owned)
        .unwrap_or_else(next_request_id)
}

/// Assign the request id, answer it in `x-request-id`, write one log line per request and
/// count it in the metrics. Internal errors are logged with their detail here. An answer
/// that left the request's body unread says `Connection: close` ([`crate::unread_body`]).
pub async fn observe(
    State(metrics): State<Arc<Metrics>>,
    mut req: Request,
    next: Next,
) -> Response {
    let start = Instant::now();
    let id = request_id_of(&req);
    req.extensions_mut().insert(RequestId(id.clone()));
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let body_read = crate::unread_body::track(&mut req);

    let mut res = next.run(req).await;

    body_read.finish(&mut res);
    let elapsed = start.elapsed();
    let status = res.status().as_u16();
    let route = res.extensions().get::<crate::metrics::Route>().copied();
    metrics.record(&method, route, status, elapsed);
    if let Ok(v) = HeaderValue::from_str(&id) {
        res.headers_mut().insert(REQUEST_ID.clone(), v);
    }
    // Microsecond precision: `ms=0.043`, not `0.043443999999999997`.
    let ms = (elapsed.as_secs_f64() * 1_000_000.0).round() / 1000.0;
    if let Some(InternalDetail(detail)) = res.extensions().get::<InternalDetail>() {
        tracing::error!(
            target: "quintet::http",
            request_id = %id, %method, %path, status, ms, error = %detail,
            "request failed"
        );
    } else {
        tracing::info!(target: "quintet::http", request_id = %id, %method, %path, status, ms, "request");
    }
    res
}

/// Give every error response a JSON body `{ok:false, status, msg}`; handlers already do,
/// this covers what the router answers on its own (unknown route, wrong method).
pub async fn json_errors(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let res = next.run(req).await;
    let status = res.status();
    let is_json = res
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if status.as_u16() < 400 || is_json {
        return res;
    }
    let allow = res
        .headers()
        .get(header::ALLOW)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let msg = match status {
        StatusCode::NOT_FOUND => format!("no route matches {method} {path}"),
        StatusCode::METHOD_NOT_ALLOWED => match &allow {
            Some(a) => format!("{method} is not allowed on {path}; allowed: {a}"),
            None => format!("{method} is not allowed on {path}"),
        },
        StatusCode::PAYLOAD_TOO_LARGE => "the request body is too large".to_owned(),
        other => other
            .canonical_reason()
            .unwrap_or("the request failed")
            .to_owned(),
    };
    let mut out = error_response(status, &msg);
    if let Some(a) = allow.and_then(|a| HeaderValue::from_str(&a).ok()) {
        out.headers_mut().insert(header::ALLOW, a);
    }
    if method == Method::HEAD {
        *out.body_mut() = axum::body::Body::empty();
    }
    out
}
