//! The accept loop: every connection served by hyper (HTTP/1.1 and HTTP/2), with time
//! limits on request heads, and graceful shutdown.
//!
//! `axum::serve` does the same but installs no timer, and without one hyper's limit on
//! reading a request head never applies: a client that sends half a head and then waits
//! (Slowloris) would hold its connection forever. Here:
//! - a connection must bring its first request within the limit, whatever the protocol
//!   (hyper's own timer starts only once it knows the connection is HTTP/1);
//! - on HTTP/1 every later head must arrive within the limit of its first byte, and a
//!   connection idle for longer than the limit is closed (hyper's timer);
//! - on HTTP/2, pings every limit's length drop peers that stopped answering;
//! - request bodies must keep arriving ([`crate::body_deadline`]).
//!
//! Which connections are taken at all (bounds in all and per client, running out of file
//! descriptors) is the listener's business: [`crate::admission`].

use std::{
    convert::Infallible,
    future::Future,
    pin::pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use axum::{extract::Request, response::Response, serve::Listener};
use hyper::body::Incoming;
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::conn::auto::Builder,
    service::TowerToHyperService,
};
use tokio::sync::watch;
use tower::{Service, ServiceExt};

use crate::body_deadline::{BodyDeadline, BodyLimits};

/// Serve `service` on every connection `listener` accepts until `shutdown` completes; then
/// stop accepting, let every connection finish its requests in flight, and return. A
/// client gets `header_timeout` to send its first request head, and each later one, and
/// its request bodies must arrive within `body` (see the module documentation).
pub async fn serve<L, S>(
    mut listener: L,
    service: S,
    header_timeout: Duration,
    body: BodyLimits,
    shutdown: impl Future<Output = ()>,
) where
    L: Listener<Addr = std::net::SocketAddr>,
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send,
{
    // Connections hold a receiver each; dropping the sender asks them to finish.
    let (stop_tx, stop_rx) = watch::channel(());
    // Connections hold a sender each; `closed` on the last receiver's side says all ended.
    let (done_tx, mut done_rx) = watch::channel(());
    let mut shutdown = pin!(shutdown);
    loop {
        let (io, addr) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let started = Arc::new(AtomicBool::new(false));
        let first = Arc::clone(&started);
        let service = TowerToHyperService::new(
            BodyDeadline::new(service.clone(), body).map_request(move |req: Request<Incoming>| {
                first.store(true, Ordering::Relaxed);
                let mut req = req;
                req.extensions_mut().insert(crate::ClientAddr(addr));
                req
            }),
        );
        let (mut stop_rx, done_tx) = (stop_rx.clone(), done_tx.clone());
        tokio::spawn(async move {
            let mut builder = Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout);
            builder
                .http2()
                .timer(TokioTimer::new())
                .keep_alive_interval(header_timeout)
                .keep_alive_timeout(header_timeout);
            let mut conn = pin!(builder.serve_connection_with_upgrades(TokioIo::new(io), service));
            let mut first_deadline = pin!(tokio::time::sleep(header_timeout));
            let (mut stopping, mut awaiting_first) = (false, true);
            loop {
                tokio::select! {
                    served = conn.as_mut() => {
                        if let Err(e) = served {
                            tracing::trace!(error = %e, "connection ended with an error");
                        }
                        break;
                    }
                    _ = stop_rx.changed(), if !stopping => {
                        stopping = true;
                        conn.as_mut().graceful_shutdown();
                    }
                    () = &mut first_deadline, if awaiting_first => {
                        awaiting_first = false;
                        if !started.load(Ordering::Relaxed) {
                            tracing::debug!("no request within the header timeout: closed");
                            break;
                        }
                    }
                }
            }
            drop(done_tx);
        });
    }
    drop(listener);
    drop(stop_tx);
    drop(done_tx);
    // Every connection task holds a sender; this returns once the last one ended.
    while done_rx.changed().await.is_ok() {}
}
