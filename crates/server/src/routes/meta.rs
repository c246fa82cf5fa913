//! The server's own routes: info, health and metrics.

use axum::{
    Router,
    extract::State,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use quintet_core::ServiceType;
use serde_json::json;

use crate::{reply, state::AppState};

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(info))
        .route("/_health", get(health))
        .route("/_metrics", get(metrics))
}

/// `GET /`: what this server is and which services it offers (hyper-connect reads
/// `services`).
async fn info() -> Response {
    let services: Vec<&str> = ServiceType::ALL.iter().map(|t| t.as_str()).collect();
    reply::json(
        StatusCode::OK,
        &json!({
            "ok": true,
            "name": "quintet",
            "version": env!("CARGO_PKG_VERSION"),
            "services": services,
        }),
    )
}

/// `GET /_health`: the process answers HTTP. Kept trivial: it is also the benchmarks'
/// bare-HTTP ceiling.
async fn health() -> Response {
    reply::ok(StatusCode::OK)
}

/// `GET /_metrics`: Prometheus text.
async fn metrics(State(state): State<AppState>) -> Response {
    let mut res = state.metrics.render().into_response();
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    res
}
