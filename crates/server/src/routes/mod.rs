//! Every route, declared once. Each service module exports `routes()` with its paths in the
//! domain form; the application form reaches the same routes through [`crate::scope`].

use axum::{Router, extract::DefaultBodyLimit};

use crate::state::AppState;

mod admin;
mod archive;
mod backups;
mod cache;
mod data;
mod feed;
mod lifecycle;
mod meta;
mod queue;
mod search;
mod storage;

/// The router over `state`: lifecycle and service routes plus the server's own. Bodies are
/// limited to the configured size, except object uploads and archive imports, which are
/// streamed.
pub fn router(state: AppState) -> Router {
    let limit = state.config.max_body_bytes;
    Router::new()
        .merge(meta::routes())
        .merge(crate::openapi::routes())
        .merge(lifecycle::routes())
        .merge(queue::routes())
        .merge(admin::routes())
        .merge(backups::routes())
        .merge(cache::routes())
        .merge(data::routes())
        .merge(feed::routes())
        .merge(search::routes())
        .merge(crate::console::routes())
        .layer(DefaultBodyLimit::max(limit))
        .merge(storage::routes().layer(DefaultBodyLimit::disable()))
        .merge(archive::routes().layer(DefaultBodyLimit::disable()))
        .route_layer(axum::middleware::from_fn(crate::metrics::mark_route))
        .with_state(state)
}
