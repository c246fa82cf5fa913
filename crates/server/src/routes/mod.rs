//! Every route, declared once. Each service module exports `routes()` with its paths in the
//! domain form; the application form reaches the same routes through [`crate::scope`].

use axum::{Router, extract::DefaultBodyLimit};

use crate::state::AppState;

mod lifecycle;
mod meta;
mod search;

/// The router over `state`: lifecycle and service routes plus the server's own.
pub fn router(state: AppState) -> Router {
    let limit = state.config.max_body_bytes;
    Router::new()
        .merge(meta::routes())
        .merge(lifecycle::routes())
        .merge(search::routes())
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}
