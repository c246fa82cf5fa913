//! A deadline on reading request bodies, so that a client that sends a head and then
//! trickles or stops sending its body cannot hold a connection (and a file descriptor) as
//! long as it likes.
//!
//! The rule is Apache's `mod_reqtimeout` with a minimum rate: a body may keep the server
//! waiting for [`BodyLimits::timeout`] plus one second for every
//! [`BodyLimits::min_rate`] bytes it delivered, and never longer than `timeout` in one
//! stretch without a byte. So a large upload that keeps moving at the minimum rate or
//! faster always finishes, however long it takes, while a stalled or trickling one is cut
//! off. Only time spent waiting for the client counts: while the handler is busy (writing
//! to disk, waiting on an engine) and not reading, the client is not blamed.
//!
//! A body cut off makes the handler's read fail; [`BodyDeadline`] then answers `408
//! Request Timeout` in place of whatever the handler answered, with `Connection: close`
//! on HTTP/1, since the rest of the body is not read.

use std::{
    convert::Infallible,
    future::Future,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll, ready},
    time::Duration,
};

use axum::{
    body::Body,
    extract::Request,
    http::{HeaderValue, StatusCode, Version, header},
    response::Response,
};
use bytes::Bytes;
use futures_util::future::Either;
use http_body::{Frame, SizeHint};
use tokio::time::{Instant, Sleep};
use tower::Service;

use crate::error::error_response;

/// How long request bodies may keep the server waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyLimits {
    /// Longest wait for the next bytes of a body, and the allowance every body starts with.
    pub timeout: Duration,
    /// Bytes per second that earn a body another second of waiting (0: no rate rule, only
    /// the `timeout` between two reads).
    pub min_rate: u64,
}

/// The answer to a request whose body was cut off.
fn timed_out(limits: BodyLimits, version: Version) -> Response {
    let msg = if limits.min_rate > 0 {
        format!(
            "the request body arrived too slowly: send it without pauses of {} s and at {} \
             bytes per second or more",
            limits.timeout.as_secs(),
            limits.min_rate
        )
    } else {
        format!(
            "the request body stalled: send it without pauses of {} s",
            limits.timeout.as_secs()
        )
    };
    let mut res = error_response(StatusCode::REQUEST_TIMEOUT, &msg);
    if version <= Version::HTTP_11 {
        res.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    res
}

/// A service answering 408 for requests whose body the deadline cut off.
#[derive(Debug, Clone)]
pub struct BodyDeadline<S> {
    inner: S,
    limits: BodyLimits,
}

impl<S> BodyDeadline<S> {
    /// Apply `limits` to the bodies of the requests `inner` serves.
    pub fn new(inner: S, limits: BodyLimits) -> Self {
        Self { inner, limits }
    }
}

impl<S, B> Service<Request<B>> for BodyDeadline<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = Infallible;
    type Future =
        Either<S::Future, Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        // A request without a body (most reads) costs nothing here.
        if req.body().is_end_stream() {
            return Either::Left(self.inner.call(req.map(Body::new)));
        }
        let limits = self.limits;
        let version = req.version();
        let cut = Arc::new(AtomicBool::new(false));
        let req = req.map(|body| Body::new(Deadlined::new(body, limits, Arc::clone(&cut))));
        let served = self.inner.call(req);
        Either::Right(Box::pin(async move {
            let res = served.await?;
            if cut.load(Ordering::Acquire) {
                return Ok(timed_out(limits, version));
            }
            Ok(res)
        }))
    }
}

/// The error a cut-off body reports to its reader.
#[derive(Debug)]
pub struct BodyTimedOut;

impl std::fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request body did not arrive in time")
    }
}

impl std::error::Error for BodyTimedOut {}

/// A request body under the deadline.
struct Deadlined<B> {
    inner: B,
    limits: BodyLimits,
    cut: Arc<AtomicBool>,
    received: u64,
    /// Time spent waiting for the client, before the current wait.
    waited: Duration,
    /// When the current wait for the client began.
    waiting_since: Option<Instant>,
    timer: Option<Pin<Box<Sleep>>>,
}

impl<B> Deadlined<B> {
    fn new(inner: B, limits: BodyLimits, cut: Arc<AtomicBool>) -> Self {
        Self {
            inner,
            limits,
            cut,
            received: 0,
            waited: Duration::ZERO,
            waiting_since: None,
            timer: None,
        }
    }

    /// The latest instant the current wait, begun at `since`, may last until.
    fn limit(&self, since: Instant) -> Instant {
        let stretch = match self.limits.min_rate {
            0 => self.limits.timeout,
            rate => {
                let earned = Duration::from_secs_f64(self.received as f64 / rate as f64);
                (self.limits.timeout + earned)
                    .saturating_sub(self.waited)
                    .min(self.limits.timeout)
            }
        };
        since + stretch
    }

    fn stop_waiting(&mut self) {
        if let Some(since) = self.waiting_since.take() {
            self.waited += since.elapsed();
        }
    }
}

impl<B> http_body::Body for Deadlined<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::BoxError>>> {
        if self.cut.load(Ordering::Relaxed) {
            return Poll::Ready(Some(Err(BodyTimedOut.into())));
        }
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                self.stop_waiting();
                if let Some(Ok(f)) = &frame
                    && let Some(data) = f.data_ref()
                {
                    self.received += data.len() as u64;
                }
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => {
                let now = Instant::now();
                let since = *self.waiting_since.get_or_insert(now);
                let limit = self.limit(since);
                let timer = match &mut self.timer {
                    Some(t) => {
                        if t.deadline() != limit {
                            t.as_mut().reset(limit);
                        }
                        t
                    }
                    None => self.timer.insert(Box::pin(tokio::time::sleep_until(limit))),
                };
                ready!(timer.as_mut().poll(cx));
                self.cut.store(true, Ordering::Release);
                tracing::debug!(received = self.received, "a request body stalled: cut off");
                Poll::Ready(Some(Err(BodyTimedOut.into())))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use http_body_util::BodyExt;

    use super::*;

    /// A body that yields its chunks as the test clock reaches their times.
    struct Script {
        chunks: VecDeque<(Duration, usize)>,
        start: Instant,
        timer: Option<Pin<Box<Sleep>>>,
    }

    impl http_body::Body for Script {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            let Some(&(at, len)) = self.chunks.front() else {
                return Poll::Ready(None);
            };
            let when = self.start + at;
            let timer = self
                .timer
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(when)));
            if timer.deadline() != when {
                timer.as_mut().reset(when);
            }
            ready!(timer.as_mut().poll(cx));
            self.chunks.pop_front();
            Poll::Ready(Some(Ok(Frame::data(Bytes::from(vec![b'x'; len])))))
        }
    }

    /// Read a body sending `chunks` (each: seconds after the start, bytes) under `limits`;
    /// the bytes read, or the time it was cut off.
    async fn read(limits: BodyLimits, chunks: &[(u64, usize)]) -> Result<usize, Duration> {
        let start = Instant::now();
        let script = Script {
            chunks: chunks
                .iter()
                .map(|&(s, n)| (Duration::from_secs(s), n))
                .collect(),
            start,
            timer: None,
        };
        let cut = Arc::new(AtomicBool::new(false));
        let mut body = Deadlined::new(script, limits, Arc::clone(&cut));
        let mut total = 0;
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(f) => total += f.data_ref().map_or(0, Bytes::len),
                Err(e) => {
                    assert!(e.is::<BodyTimedOut>(), "{e}");
                    assert!(cut.load(Ordering::Relaxed));
                    return Err(start.elapsed());
                }
            }
        }
        Ok(total)
    }

    const LIMITS: BodyLimits = BodyLimits {
        timeout: Duration::from_secs(10),
        min_rate: 1000,
    };

    #[tokio::test(start_paused = true)]
    async fn a_stalled_body_is_cut_off_after_the_timeout() {
        assert_eq!(read(LIMITS, &[(0, 10), (3600, 10)]).await, Err(secs(10)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_but_moving_large_body_finishes() {
        // 1,200 bytes every second for ten minutes: above the minimum rate throughout.
        let chunks: Vec<(u64, usize)> = (1..=600).map(|s| (s, 1200)).collect();
        assert_eq!(read(LIMITS, &chunks).await, Ok(600 * 1200));
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickle_below_the_minimum_rate_is_cut_off() {
        // One byte every nine seconds never pauses for ten, but earns nothing: cut off once
        // the allowance (10 s plus a few ms earned) is spent.
        let chunks: Vec<(u64, usize)> = (1..=100).map(|s| (s * 9, 1)).collect();
        let cut = read(LIMITS, &chunks).await.unwrap_err();
        assert!(cut > secs(10) && cut < secs(11), "{cut:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_earns_waiting_time_but_no_pause_is_longer_than_the_timeout() {
        // 20,000 bytes earn 20 s; a pause of 15 s still ends at 10.
        assert_eq!(read(LIMITS, &[(0, 20_000), (15, 1)]).await, Err(secs(10)));
        assert_eq!(
            read(LIMITS, &[(0, 20_000), (9, 1), (18, 1), (27, 1)]).await,
            Ok(20_003)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_rate_only_pauses_count() {
        let limits = BodyLimits {
            min_rate: 0,
            ..LIMITS
        };
        let chunks: Vec<(u64, usize)> = (1..=100).map(|s| (s * 9, 1)).collect();
        assert_eq!(read(limits, &chunks).await, Ok(100));
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }
}
