//! quintet's HTTP layer: both address forms over one set of handlers.
//!
//! A request passes, outermost first: [`middleware::observe`] (request id, log line,
//! metrics) → [`hosts::check_host`] (DNS rebinding guard) → [`cors::cors`] (which pages
//! may call) → [`middleware::json_errors`] → [`scope::resolve_scope`] (application
//! form → domain form) → [`auth::authorize`] (401/403, or the caller's
//! [`auth::Principal`]) → [`rate::limit`] (429 past a client's or a key's rate) → the
//! router of [`routes`], whose handlers extract a typed instance ([`extract::Inst`]), call
//! one port, and shape the answer ([`reply`]). Errors become
//! statuses in exactly one place, [`error::status_of`].
//!
//! The crate knows no engine: it receives its ports as trait objects in [`Services`].

pub mod admission;
pub mod archive;
pub mod auth;
pub mod backups;
pub mod body_deadline;
pub mod changes;
pub mod config;
pub mod console;
pub mod cors;
pub mod dispatch;
pub mod error;
pub mod extract;
pub mod failpoint;
pub mod feed;
pub mod hosts;
pub mod instances;
pub mod metrics;
pub mod middleware;
pub mod openapi;
pub mod quota;
pub mod rate;
pub mod reply;
mod routes;
pub mod scope;
pub mod scrape;
mod serve;
pub mod services;
pub mod state;
pub mod tls;
mod unread_body;

use std::{convert::Infallible, future::Future, pin::Pin, sync::Arc};

use axum::{extract::Request, response::Response};
use quintet_core::{Error, Result};
use tokio::net::TcpListener;
use tokio_rustls::rustls::ServerConfig;
use tower::{Service, ServiceBuilder, util::MapRequestLayer};

pub use config::Config;

/// The address of the client a request came from (the TCP peer); in every request's
/// extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub std::net::SocketAddr);
pub use services::Services;
pub use state::AppState;

/// The whole HTTP stack over `state`, as a tower service.
pub fn app(
    state: AppState,
) -> impl Service<Request, Response = Response, Error = Infallible, Future: Send> + Clone + Send + 'static
{
    let router = routes::router(state.clone());
    ServiceBuilder::new()
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state.metrics),
            middleware::observe,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            hosts::check_host,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            cors::cors,
        ))
        .layer(axum::middleware::from_fn(middleware::json_errors))
        .layer(MapRequestLayer::new(scope::resolve_scope))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state.auth),
            auth::authorize,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            rate::limit,
        ))
        .service(router)
}

/// Prepare the stores for serving: remove contents of instances destroyed by an
/// interrupted request before the last shutdown; start recording key use.
pub async fn startup(state: &AppState) -> Result<()> {
    state.services.sweep().await?;
    state.auth.keys.start_flusher();
    state.feeds.start_compactor(
        Arc::clone(&state.services.data),
        Arc::clone(&state.services.queue),
        Arc::clone(&state.services.storage_events),
        Arc::clone(&state.clock),
    );
    Ok(())
}

/// Serve `state` on `listener` (HTTPS when `tls` is given, see [`tls::load`]) until
/// `shutdown` resolves; then let in-flight requests and queue deliveries finish for up to
/// the configured timeout, and close every store.
pub fn serve(
    listener: TcpListener,
    tls: Option<Arc<ServerConfig>>,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Pin<Box<dyn Future<Output = Result<()>> + Send>> {
    serve_boxed(listener, tls, state, Box::pin(shutdown))
}

/// [`serve`] behind boxes, so that the server's code (connections, the router, TLS) is
/// compiled once, in this crate, and not again in each crate that serves with a shutdown
/// future of its own type (the binary, every test). Never inlined into the caller, which
/// would bring the future's code along with it.
#[inline(never)]
fn serve_boxed(
    listener: TcpListener,
    tls: Option<Arc<ServerConfig>>,
    state: AppState,
    shutdown: Pin<Box<dyn Future<Output = ()> + Send>>,
) -> Pin<Box<dyn Future<Output = Result<()>> + Send>> {
    Box::pin(serve_until(listener, tls, state, shutdown))
}

async fn serve_until(
    listener: TcpListener,
    tls: Option<Arc<ServerConfig>>,
    state: AppState,
    shutdown: Pin<Box<dyn Future<Output = ()> + Send>>,
) -> Result<()> {
    if let Ok(addr) = listener.local_addr() {
        state.dispatcher.listening_on(addr);
    }
    state.dispatcher.start().await?;
    let listener = admission::AdmittingListener::new(listener, Arc::clone(&state.connections));
    match tls {
        Some(config) => {
            let listener = tls::TlsListener::new(listener, config)
                .map_err(|e| Error::internal(format!("TLS listener: {e}")))?;
            serve_on(listener, state, shutdown).await
        }
        None => serve_on(listener, state, shutdown).await,
    }
}

async fn serve_on<L>(
    listener: L,
    state: AppState,
    shutdown: Pin<Box<dyn Future<Output = ()> + Send>>,
) -> Result<()>
where
    L: axum::serve::Listener<Addr = std::net::SocketAddr>,
{
    let (stopping_tx, stopping_rx) = tokio::sync::oneshot::channel::<()>();
    let dispatcher = Arc::clone(&state.dispatcher);
    let feeds = Arc::clone(&state.feeds);
    let signal = async move {
        shutdown.await;
        tracing::info!("shutting down: finishing in-flight requests and deliveries");
        dispatcher.begin_shutdown();
        feeds.stop();
        let _ = stopping_tx.send(());
    };
    let server = serve::serve(
        listener,
        app(state.clone()),
        state.config.header_timeout,
        state.config.connections.body_limits(),
        signal,
    );
    let grace = state.config.shutdown_timeout;
    let deadline = async move {
        if stopping_rx.await.is_ok() {
            tokio::time::sleep(grace).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        () = server => {}
        () = deadline => tracing::warn!(?grace, "shutdown timeout: dropping unfinished requests"),
    }
    state.dispatcher.finish().await;
    if let Err(e) = state.auth.keys.close().await {
        tracing::error!(error = %e, "recording when access keys were last used failed");
    }
    state.services.close().await
}
