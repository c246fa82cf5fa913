//! The server's own routes: info, liveness, readiness and metrics.

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
        .route("/_ready", get(ready))
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

/// `GET /_ready`: whether this node can serve its calls now: the registry and the adapter
/// of every service answer (engines reachable, the data directory writable and not full).
/// 200 `{ok:true, checks}`, else 503 `{ok:false, status, msg, checks}` naming what is
/// wrong, with `Retry-After`; `checks` maps `registry` and each service type to `"ok"` or
/// the reason. `/_health` stays liveness: the process answers.
async fn ready(State(state): State<AppState>) -> Response {
    let outcomes = state.services.readiness().await;
    let mut checks = serde_json::Map::new();
    let mut problems = Vec::new();
    for (name, outcome) in outcomes {
        let value = match outcome {
            Ok(()) => "ok".to_owned(),
            Err(e) => {
                let why = e.public_message();
                problems.push(format!("{name}: {why}"));
                why
            }
        };
        checks.insert(name.to_owned(), serde_json::Value::String(value));
    }
    if problems.is_empty() {
        return reply::json(StatusCode::OK, &json!({"ok": true, "checks": checks}));
    }
    let mut res = reply::json(
        StatusCode::SERVICE_UNAVAILABLE,
        &json!({
            "ok": false,
            "status": 503,
            "msg": format!("not ready: {}", problems.join("; ")),
            "checks": checks,
        }),
    );
    res.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from_static(crate::error::RETRY_AFTER_SECS),
    );
    res
}

/// `GET /_metrics`: OpenMetrics text (see [`crate::scrape`]).
async fn metrics(State(state): State<AppState>) -> Response {
    let mut res = crate::scrape::render(&state).await.into_response();
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(crate::scrape::CONTENT_TYPE),
    );
    res
}
