//! A queue worker for tests: an HTTP server on a loopback port that records every delivery
//! and answers as told.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
};
use tokio::{net::TcpListener, sync::watch, task::JoinHandle};

/// How the worker answers a delivery.
#[derive(Debug, Clone)]
pub enum Answer {
    /// This status and body, at once.
    Status(u16, String),
    /// Never answer (until the connection is closed).
    Hang,
    /// Wait, then answer this status with an empty body.
    After(Duration, u16),
    /// Wait until [`Worker::release`] (at once if it was already called), then answer this
    /// status with an empty body: a delivery held in flight for as long as a test needs.
    Held(u16),
}

/// One request the worker received.
#[derive(Debug, Clone)]
pub struct Received {
    /// Request headers (names lowercase).
    pub headers: HeaderMap,
    /// The body as text.
    pub body: String,
    /// When it arrived.
    pub at: Instant,
}

impl Received {
    /// A header's value as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

#[derive(Debug)]
struct Shared {
    received: Mutex<Vec<Received>>,
    answer: Mutex<Answer>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    abandoned: AtomicUsize,
    released: watch::Sender<bool>,
}

/// A recording worker on `127.0.0.1`; stops when dropped.
#[derive(Debug)]
pub struct Worker {
    url: String,
    port: u16,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

/// Counts a request in flight; when dropped before answering, the request was abandoned
/// by the sender (its connection closed).
struct InFlight<'a> {
    shared: &'a Shared,
    answered: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.shared.in_flight.fetch_sub(1, Ordering::SeqCst);
        if !self.answered {
            self.shared.abandoned.fetch_add(1, Ordering::SeqCst);
        }
    }
}

async fn handle(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    shared.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let mut guard = InFlight {
        shared: &shared,
        answered: false,
    };
    let answer = shared.answer.lock().unwrap().clone();
    shared.received.lock().unwrap().push(Received {
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
        at: Instant::now(),
    });
    let (status, text) = match answer {
        Answer::Status(code, text) => (code, text),
        Answer::Hang => std::future::pending().await,
        Answer::After(wait, code) => {
            tokio::time::sleep(wait).await;
            (code, String::new())
        }
        Answer::Held(code) => {
            let mut released = shared.released.subscribe();
            let _ = released.wait_for(|r| *r).await;
            (code, String::new())
        }
    };
    guard.answered = true;
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, text).into_response()
}

impl Worker {
    /// Start a worker answering `answer`, on an ephemeral port.
    pub async fn start(answer: Answer) -> Self {
        Self::start_on(0, answer).await
    }

    /// Start a worker answering `answer` on `port` (0 for any).
    pub async fn start_on(port: u16, answer: Answer) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("worker binds");
        let port = listener.local_addr().expect("address").port();
        let shared = Arc::new(Shared {
            received: Mutex::new(Vec::new()),
            answer: Mutex::new(answer),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            abandoned: AtomicUsize::new(0),
            released: watch::Sender::new(false),
        });
        let app = Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&shared));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            url: format!("http://127.0.0.1:{port}/hook"),
            port,
            shared,
            task,
        }
    }

    /// The URL to configure as a queue's target.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Answer later deliveries with `answer`.
    pub fn set_answer(&self, answer: Answer) {
        *self.shared.answer.lock().unwrap() = answer;
    }

    /// Let deliveries held by [`Answer::Held`] be answered, now and from now on.
    pub fn release(&self) {
        self.shared.released.send_replace(true);
    }

    /// Every delivery so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().unwrap().clone()
    }

    /// Wait (up to 60 s) until at least `n` deliveries arrived; returns them all.
    pub async fn wait_for(&self, n: usize) -> Vec<Received> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let got = self.received();
            if got.len() >= n {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "the worker received {} deliveries, expected {n}",
                got.len()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Most requests it had in flight at once.
    pub fn max_in_flight(&self) -> usize {
        self.shared.max_in_flight.load(Ordering::SeqCst)
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::SeqCst)
    }

    /// Requests the sender abandoned before they were answered.
    pub fn abandoned(&self) -> usize {
        self.shared.abandoned.load(Ordering::SeqCst)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Wait (up to 60 s) until `check` holds, polling every 10 ms.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
