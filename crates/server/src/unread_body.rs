//! Closing a connection whose request body was not read to its end.
//!
//! An answer given before the body was read (an unknown instance, a refused token, an
//! unknown route) leaves the rest of the body on the connection. hyper then closes the
//! connection after the answer, but without saying so, and a client that reuses it for
//! its next request finds it dead. Saying `Connection: close` on such answers lets the
//! client open a new connection instead (RFC 9112 §9.6).

use std::{
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll},
};

use axum::{
    body::{Body, Bytes},
    extract::Request,
    http::{HeaderValue, Version, header},
    response::Response,
};
use http_body::{Frame, SizeHint};

/// Whether the request's body was read to its end; see [`track`].
#[derive(Debug, Clone)]
pub struct BodyRead(Option<Arc<AtomicBool>>);

/// Wrap the body of `req`, when it has one, so that [`BodyRead::finish`] can tell whether
/// it was read to its end.
pub fn track(req: &mut Request) -> BodyRead {
    let has_body = req.headers().contains_key(header::TRANSFER_ENCODING)
        || req
            .headers()
            .get(header::CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() != b"0");
    if !has_body || req.version() > Version::HTTP_11 {
        return BodyRead(None);
    }
    let done = Arc::new(AtomicBool::new(false));
    let body = std::mem::take(req.body_mut());
    *req.body_mut() = Body::new(Tracked {
        inner: body,
        done: Arc::clone(&done),
    });
    BodyRead(Some(done))
}

impl BodyRead {
    /// Add `Connection: close` to `res` when the request's body was left unread.
    pub fn finish(self, res: &mut Response) {
        if let Some(done) = self.0
            && !done.load(Ordering::Acquire)
        {
            res.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
    }
}

struct Tracked {
    inner: Body,
    done: Arc<AtomicBool>,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.done.store(true, Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
