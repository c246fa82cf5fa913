//! A circuit breaker for an engine client (PostgreSQL, Redis, S3), so that while an engine
//! is down the calls that need it fail at once instead of each waiting for a connection
//! that will not come.
//!
//! - **Closed** (the engine answers): calls go through. A call that could not reach the
//!   engine at all (connection refused, connect timeout; not a query error, and not a
//!   pool merely busy) opens the breaker: [`Breaker::trip`].
//! - **Open**: [`Breaker::check`] refuses every call with [`Error::Unavailable`] naming the
//!   engine, in microseconds. The adapter probes the engine in the background
//!   ([`recover`]: a connection and the cheapest round trip, every [`PROBE_EVERY`]) and
//!   closes the breaker as soon as one probe succeeds, so recovery needs no restart and no
//!   client call pays for a probe.
//!
//! The HTTP layer answers `503` with `Retry-After` for [`Error::Unavailable`]; calls that
//! need another engine, or none, are not affected.
//!
//! Pure logic: the state machine takes no time and spawns nothing; adapters run
//! [`recover`] on their runtime.

use std::{
    fmt,
    future::Future,
    sync::{
        Mutex, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use crate::{Error, Result};

/// How often an open breaker probes its engine.
pub const PROBE_EVERY: Duration = Duration::from_millis(250);

/// The state of one engine's client.
pub struct Breaker {
    engine: String,
    open: AtomicBool,
    /// Why it opened, for the refusals' log and `/_ready`.
    cause: Mutex<String>,
}

impl fmt::Debug for Breaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Breaker")
            .field("engine", &self.engine)
            .field("open", &self.is_open())
            .finish()
    }
}

impl Breaker {
    /// A closed breaker for `engine`, named in messages as a person would ("Redis at
    /// redis://cache:6379/0"; no secrets).
    pub fn new(engine: impl Into<String>) -> Self {
        Self {
            engine: engine.into(),
            open: AtomicBool::new(false),
            cause: Mutex::new(String::new()),
        }
    }

    /// The engine, as named in messages.
    pub fn engine(&self) -> &str {
        &self.engine
    }

    /// Whether calls are being refused.
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// Before a call: `Ok` while the engine is believed up, else the refusal to answer.
    pub fn check(&self) -> Result<()> {
        if self.is_open() {
            return Err(self.refusal());
        }
        Ok(())
    }

    /// The error calls get while the breaker is open.
    pub fn refusal(&self) -> Error {
        Error::Unavailable(format!(
            "{} is unreachable; retry shortly (quintet retries the connection in the \
             background)",
            self.engine
        ))
    }

    /// A call could not reach the engine because of `cause`: refuse calls from now on.
    /// Returns `true` when this opened the breaker, and the caller must start [`recover`].
    #[must_use = "when it opened the breaker, the caller starts recover()"]
    pub fn trip(&self, cause: impl fmt::Display) -> bool {
        let cause = cause.to_string();
        let opened = !self.open.swap(true, Ordering::AcqRel);
        if opened {
            *self.cause.lock().unwrap_or_else(PoisonError::into_inner) = cause;
        }
        opened
    }

    /// Why the breaker is open (empty while closed).
    pub fn cause(&self) -> String {
        if !self.is_open() {
            return String::new();
        }
        self.cause
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The engine answered a probe: let calls through again.
    pub fn reset(&self) {
        self.open.store(false, Ordering::Release);
    }
}

/// While `breaker` is open, run `probe` every [`PROBE_EVERY`] (waiting with `sleep`) and
/// close the breaker after the first success. `on_change(true)` is called when the probing
/// starts and `on_change(false)` when the engine answered: core logs nothing itself, the
/// adapter does.
pub async fn recover<P, PF, S, SF>(
    breaker: &Breaker,
    mut probe: P,
    mut sleep: S,
    on_change: impl Fn(bool),
) where
    P: FnMut() -> PF,
    PF: Future<Output = Result<()>>,
    S: FnMut(Duration) -> SF,
    SF: Future<Output = ()>,
{
    on_change(true);
    while breaker.is_open() {
        sleep(PROBE_EVERY).await;
        if probe().await.is_ok() {
            breaker.reset();
            on_change(false);
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{
        cell::{Cell, RefCell},
        pin::pin,
        task::{Context, Poll, Waker},
    };

    use super::*;

    #[test]
    fn a_trip_refuses_calls_until_reset() {
        let b = Breaker::new("Redis at redis://h:6379/0");
        assert!(b.check().is_ok());
        assert!(b.trip("connection refused"), "the first trip opens");
        assert!(
            !b.trip("connection refused"),
            "a second one does not reopen"
        );
        let refused = b.check().unwrap_err();
        assert!(
            matches!(&refused, Error::Unavailable(m) if m.contains("Redis at redis://h:6379/0")),
            "{refused:?}"
        );
        assert_eq!(b.cause(), "connection refused");
        b.reset();
        assert!(b.check().is_ok());
        assert_eq!(b.cause(), "");
    }

    fn run<F: Future>(f: F) -> F::Output {
        let mut f = pin!(f);
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            if let Poll::Ready(out) = f.as_mut().poll(&mut cx) {
                return out;
            }
        }
    }

    #[test]
    fn recover_probes_until_the_engine_answers_then_closes() {
        let b = Breaker::new("PostgreSQL");
        assert!(b.trip("refused"));
        let probes = Cell::new(0);
        let slept = RefCell::new(Vec::new());
        let changes = RefCell::new(Vec::new());
        run(recover(
            &b,
            || {
                probes.set(probes.get() + 1);
                let up = probes.get() >= 3;
                async move {
                    if up {
                        Ok(())
                    } else {
                        Err(Error::Unavailable("down".into()))
                    }
                }
            },
            |d| {
                slept.borrow_mut().push(d);
                async {}
            },
            |probing| changes.borrow_mut().push(probing),
        ));
        assert_eq!(probes.get(), 3);
        assert_eq!(*slept.borrow(), vec![PROBE_EVERY; 3]);
        assert_eq!(*changes.borrow(), vec![true, false]);
        assert!(!b.is_open());
    }

    #[test]
    fn recover_stops_when_something_else_closed_the_breaker() {
        let b = Breaker::new("S3");
        assert!(b.trip("refused"));
        let probes = Cell::new(0);
        run(recover(
            &b,
            || {
                probes.set(probes.get() + 1);
                async { Err(Error::Unavailable("down".into())) }
            },
            |_| {
                b.reset();
                async {}
            },
            |_| {},
        ));
        assert_eq!(probes.get(), 1);
    }
}
