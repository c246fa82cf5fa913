//! One delivery: POST the job to the worker and turn what happened into an [`Outcome`].
//!
//! | what happened | outcome |
//! |---|---|
//! | the worker answered 2xx | `Delivered`: the job is removed |
//! | the worker answered anything else (3xx are not followed) | `Failed` with the first 64 KiB of its answer: the job goes to ERROR |
//! | the worker could not be reached, or did not answer within the timeout | `RetryAt` after the backoff, or `Failed` once the retries are used up |
//! | the target is refused by the queue's [`TargetPolicy`] | `Failed`: retrying cannot help |
//! | the application already has its plan's deliveries in flight, for the whole timeout | `Released`: claimed again later, the attempt not counted |
//!
//! The job's error is what its owner reads back, so it never carries what an internal
//! service said: when a queue that may reach private addresses is not the operator's own
//! (`--queue-private-targets allow`), the answer of a worker at a private address is
//! recorded as its status only, and a failure to reach one as a plain "could not connect".

use std::{sync::Arc, time::Duration};

use quintet_core::{
    AppName, Clock,
    delivery::{
        JOB_ID_HEADER, SIGNATURE_HEADER, backoff_ms, is_forbidden_target, signature_header,
        signature_header_with_id,
    },
    id::random_bytes,
    ports::queue::{ClaimedJob, MAX_ERROR_BYTES, Outcome, Settlement},
};
use reqwest::{Url, header::CONTENT_TYPE};

use super::{
    AppSlots,
    guard::{self, TargetPolicy},
};

/// Everything a delivery of one queue needs; shared by its in-flight deliveries.
#[derive(Debug)]
pub(super) struct Delivery {
    pub client: reqwest::Client,
    pub clock: Arc<dyn Clock>,
    pub target: Url,
    pub secret: Option<String>,
    pub sign_job_id: bool,
    pub timeout: Duration,
    pub retries: u32,
    pub backoff_base_ms: u64,
    pub policy: Arc<TargetPolicy>,
    pub app: AppName,
    pub app_slots: Arc<AppSlots>,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The queue as metrics name it: `app/name`.
    pub label: String,
}

impl Delivery {
    /// Whether what a worker at `addr` says may be recorded for the queue's owner.
    fn may_record(&self, addr: Option<std::net::SocketAddr>) -> bool {
        self.app.is_domain() || addr.is_none_or(|a| !is_forbidden_target(a.ip()))
    }

    /// Deliver `job` once and say how it went.
    pub async fn deliver(&self, job: ClaimedJob) -> Settlement {
        let ClaimedJob {
            id,
            body,
            attempt,
            lease,
        } = job;
        let outcome = match self.app_slots.acquire(&self.app, self.timeout).await {
            Ok(_permit) => self.attempt(&id, body, attempt).await,
            Err(limit) => {
                tracing::debug!(app = %self.app, limit, "delivery slots of the plan in use: job released");
                Outcome::Released
            }
        };
        Settlement { id, lease, outcome }
    }

    async fn attempt(&self, id: &str, body: String, attempt: u32) -> Outcome {
        if let Err(denied) = self.policy.check_literal(&self.target) {
            return Outcome::Failed {
                error: denied.to_string(),
            };
        }
        let sent_at = self.clock.now_ms();
        let mut req = self
            .client
            .post(self.target.clone())
            .timeout(self.timeout)
            .header(CONTENT_TYPE, "application/json")
            .header(JOB_ID_HEADER, id);
        if let Some(secret) = &self.secret {
            let signature = if self.sign_job_id {
                signature_header_with_id(secret, sent_at, id, body.as_bytes())
            } else {
                signature_header(secret, sent_at, body.as_bytes())
            };
            req = req.header(SIGNATURE_HEADER, signature);
        }
        match req.body(body).send().await {
            Ok(res) if res.status().is_success() => Outcome::Delivered,
            Ok(res) if self.may_record(res.remote_addr()) => Outcome::Failed {
                error: worker_answer(res).await,
            },
            Ok(res) => Outcome::Failed {
                error: format!(
                    "the worker answered {} (its body is not recorded: the worker is at a \
                     private address)",
                    res.status()
                ),
            },
            Err(e) => match guard::denial(&e) {
                Some(denied) => Outcome::Failed {
                    error: denied.to_string(),
                },
                None if self.app.is_domain() || !self.policy.private_allowed => {
                    self.unreachable(attempt, self.describe(&e))
                }
                // A tenant's queue that may reach private addresses learns nothing of them.
                None => self.unreachable(
                    attempt,
                    format!("could not deliver to the worker at {}", self.target),
                ),
            },
        }
    }

    /// The worker could not be reached: try again later, or give up.
    fn unreachable(&self, attempt: u32, error: String) -> Outcome {
        if attempt <= self.retries {
            let wait = backoff_ms(self.backoff_base_ms, attempt, jitter());
            Outcome::RetryAt {
                due_ms: self
                    .clock
                    .now_ms()
                    .saturating_add(i64::try_from(wait).unwrap_or(i64::MAX)),
                error,
            }
        } else {
            let tries = if attempt == 1 { "attempt" } else { "attempts" };
            Outcome::Failed {
                error: format!("{error} (gave up after {attempt} {tries})"),
            }
        }
    }

    /// A transport error as one sentence, with its causes.
    fn describe(&self, e: &reqwest::Error) -> String {
        if e.is_timeout() {
            return format!(
                "the worker at {} did not answer within {} s",
                self.target,
                self.timeout.as_secs()
            );
        }
        let mut text = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(cause) = source {
            let part = cause.to_string();
            if !text.contains(&part) {
                text.push_str(": ");
                text.push_str(&part);
            }
            source = cause.source();
        }
        text
    }
}

/// A fraction in `[0, 1)` from the system's random source (0.5 if it fails).
fn jitter() -> f64 {
    random_bytes(4)
        .ok()
        .and_then(|b| <[u8; 4]>::try_from(b.as_slice()).ok())
        .map_or(0.5, |b| {
            f64::from(u32::from_le_bytes(b)) / (f64::from(u32::MAX) + 1.0)
        })
}

/// The worker's failure as the job's error: its body, at most [`MAX_ERROR_BYTES`]; when the
/// body is empty or unreadable, the status says what happened.
async fn worker_answer(mut res: reqwest::Response) -> String {
    let status = res.status();
    let mut body: Vec<u8> = Vec::new();
    let mut broken = None;
    while body.len() < MAX_ERROR_BYTES {
        match res.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) => break,
            Err(e) => {
                broken = Some(e);
                break;
            }
        }
    }
    truncate_utf8(&mut body, MAX_ERROR_BYTES);
    let text = String::from_utf8_lossy(&body).into_owned();
    let redirect = if status.is_redirection() {
        " (redirects are not followed)"
    } else {
        ""
    };
    match (text.is_empty(), broken) {
        (false, _) => text,
        (true, None) => format!("the worker answered {status} with an empty body{redirect}"),
        (true, Some(e)) => {
            format!("the worker answered {status}{redirect}; its body could not be read: {e}")
        }
    }
}

/// Cut `bytes` to at most `max`, not inside a UTF-8 character.
fn truncate_utf8(bytes: &mut Vec<u8>, max: usize) {
    if bytes.len() <= max {
        return;
    }
    bytes.truncate(max);
    if let Err(e) = std::str::from_utf8(bytes)
        && e.error_len().is_none()
    {
        bytes.truncate(e.valid_up_to());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_never_splits_a_character() {
        let mut b = "aé".repeat(10).into_bytes(); // 'é' is two bytes
        truncate_utf8(&mut b, 2);
        assert_eq!(b, b"a");
        let mut b = b"abc".to_vec();
        truncate_utf8(&mut b, 5);
        assert_eq!(b, b"abc");
    }

    #[test]
    fn jitter_is_a_fraction() {
        for _ in 0..100 {
            let j = jitter();
            assert!((0.0..1.0).contains(&j), "{j}");
        }
    }
}
