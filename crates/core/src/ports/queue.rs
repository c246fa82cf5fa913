//! The queue port: durable jobs delivered by POST to a worker URL.
//!
//! The HTTP layer enqueues, lists, retries and cancels jobs; the dispatcher (in the server)
//! claims due jobs with a lease, delivers them, and settles each claim with its outcome.
//! Leases, not an in-process flag, mark a job as being delivered, so several nodes can share
//! one queue store: a node that dies holding a lease simply lets it expire.

use std::{fmt, str::FromStr, sync::Weak};

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::{
    Error, Instance, InstanceId, Result, js_json,
    ports::{
        Lifecycle,
        changes::{ChangesPage, FeedListener, Numbered},
        data::{Document, RawJson},
    },
};

/// Longest accepted queue secret, in bytes.
pub const MAX_SECRET_LEN: usize = 256;
/// Deliveries of one queue in flight at once, unless configured.
pub const DEFAULT_CONCURRENCY: u32 = 8;
/// Most deliveries of one queue in flight at once.
pub const MAX_CONCURRENCY: u32 = 256;
/// Seconds a delivery may take (connect, send, answer), unless configured.
pub const DEFAULT_TIMEOUT_SECS: u32 = 30;
/// Longest configurable delivery timeout, seconds.
pub const MAX_TIMEOUT_SECS: u32 = 3600;
/// Retries after a failed connection or a timeout, unless configured.
pub const DEFAULT_RETRIES: u32 = 5;
/// Most configurable retries.
pub const MAX_RETRIES: u32 = 25;
/// Largest job, in bytes of its JSON text.
pub const MAX_JOB_BYTES: usize = 1024 * 1024;
/// Longest idempotency key, in bytes.
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;
/// Most of a worker's answer recorded as a job's error, in bytes.
pub const MAX_ERROR_BYTES: usize = 64 * 1024;
/// Most jobs one list call answers.
pub const MAX_LIST_LIMIT: usize = 10_000;
/// Jobs a list call answers when it names no limit.
pub const DEFAULT_LIST_LIMIT: usize = 1_000;

/// Configuration of a queue instance, given at creation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueConfig {
    /// The worker URL jobs are POSTed to (http or https).
    pub target: String,
    /// When present, every delivery is signed with it.
    pub secret: Option<String>,
    /// Deliveries in flight at once (1–256).
    pub concurrency: u32,
    /// Seconds one delivery may take before it counts as failed and is retried (1–3600).
    pub timeout_secs: u32,
    /// Retries after a connection failure or timeout before the job goes to ERROR (0–25).
    pub retries: u32,
    /// Sign the job's id with the body (`"signJobId": true`), so a delivery cannot be
    /// replayed under another id; see [`crate::delivery`].
    pub sign_job_id: bool,
}

impl QueueConfig {
    /// A configuration delivering to `target`, unsigned, with the default settings.
    pub fn new(target: impl Into<String>) -> Self {
        Self {
            target: target.into(),
            secret: None,
            concurrency: DEFAULT_CONCURRENCY,
            timeout_secs: DEFAULT_TIMEOUT_SECS,
            retries: DEFAULT_RETRIES,
            sign_job_id: false,
        }
    }

    /// Validate `{target: http(s) URL, secret?: string, concurrency?: 1–256, timeout?:
    /// seconds 1–3600, retries?: 0–25}`.
    pub fn from_json(body: &Map<String, Value>) -> Result<Self> {
        let target = match body.get("target") {
            None | Some(Value::Null) => {
                return Err(Error::invalid(
                    "\"target\" is required: the http or https URL jobs are delivered to",
                ));
            }
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(Error::invalid("\"target\" must be a string URL")),
        };
        let parsed = url::Url::parse(&target).map_err(|e| {
            Error::invalid(format!("\"target\" \"{target}\" is not a valid URL: {e}"))
        })?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
            return Err(Error::invalid(format!(
                "\"target\" \"{target}\" must be an http or https URL with a host"
            )));
        }
        let secret = match body.get("secret") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if !s.is_empty() && s.len() <= MAX_SECRET_LEN => Some(s.clone()),
            Some(_) => {
                return Err(Error::invalid(format!(
                    "\"secret\" must be a non-empty string of at most {MAX_SECRET_LEN} bytes"
                )));
            }
        };
        let sign_job_id = match body.get("signJobId") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) if !*b || secret.is_some() => *b,
            Some(Value::Bool(_)) => {
                return Err(Error::invalid(
                    "\"signJobId\" needs a \"secret\" to sign with",
                ));
            }
            Some(_) => return Err(Error::invalid("\"signJobId\" must be true or false")),
        };
        Ok(Self {
            target,
            secret,
            concurrency: whole(body, "concurrency", 1, MAX_CONCURRENCY, DEFAULT_CONCURRENCY)?,
            timeout_secs: whole(body, "timeout", 1, MAX_TIMEOUT_SECS, DEFAULT_TIMEOUT_SECS)?,
            retries: whole(body, "retries", 0, MAX_RETRIES, DEFAULT_RETRIES)?,
            sign_job_id,
        })
    }

    /// The configuration in its wire shape, secret included.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("target".into(), Value::String(self.target.clone()));
        if let Some(s) = &self.secret {
            m.insert("secret".into(), Value::String(s.clone()));
        }
        m.insert("concurrency".into(), Value::from(self.concurrency));
        m.insert("timeout".into(), Value::from(self.timeout_secs));
        m.insert("retries".into(), Value::from(self.retries));
        if self.sign_job_id {
            m.insert("signJobId".into(), Value::Bool(true));
        }
        Value::Object(m)
    }

    /// The configuration for display, the secret redacted.
    pub fn to_public_json(&self) -> Value {
        let mut v = self.to_json();
        if let (Some(m), Some(_)) = (v.as_object_mut(), &self.secret) {
            m.insert("secret".into(), Value::String("[redacted]".into()));
        }
        v
    }
}

/// An optional whole number field within `[min, max]`, `default` when absent.
fn whole(body: &Map<String, Value>, field: &str, min: u32, max: u32, default: u32) -> Result<u32> {
    let unit = if field == "timeout" { " seconds" } else { "" };
    match body.get(field) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| (min..=max).contains(n))
            .ok_or_else(|| out_of_range(field, min, max, unit, default)),
        Some(_) => Err(out_of_range(field, min, max, unit, default)),
    }
}

fn out_of_range(field: &str, min: u32, max: u32, unit: &str, default: u32) -> Error {
    Error::invalid(format!(
        "\"{field}\" must be a whole number from {min} to {max}{unit} (default {default})"
    ))
}

/// The states a job can be listed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobStatus {
    /// Waiting for delivery, waiting to be retried, or being delivered.
    Ready,
    /// The worker failed it, or delivery gave up.
    Error,
}

impl JobStatus {
    /// The wire name: `READY` or `ERROR`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ready => "READY",
            Self::Error => "ERROR",
        }
    }
}

impl fmt::Display for JobStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for JobStatus {
    type Err = Error;

    /// `READY` or `ERROR`, in any case.
    fn from_str(s: &str) -> Result<Self> {
        if s.eq_ignore_ascii_case("READY") {
            Ok(Self::Ready)
        } else if s.eq_ignore_ascii_case("ERROR") {
            Ok(Self::Error)
        } else {
            Err(Error::invalid(format!(
                "status \"{s}\" is not a job status: use status=READY or status=ERROR"
            )))
        }
    }
}

/// A job's payload as delivered: the JSON text of an object, written as JavaScript's
/// `JSON.stringify` writes it (see [`crate::js_json`]), at most [`MAX_JOB_BYTES`].
///
/// The same bytes are stored, listed, sent as the body and signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobBody(String);

impl JobBody {
    /// The delivery text of `doc`; [`Error::TooLarge`] beyond [`MAX_JOB_BYTES`].
    pub fn from_document(doc: &Document) -> Result<Self> {
        let mut text = String::with_capacity(256);
        js_json::write_object(doc, &mut text);
        if text.len() > MAX_JOB_BYTES {
            return Err(Error::TooLarge(format!(
                "the job is {} bytes of JSON; a job may be at most {MAX_JOB_BYTES} bytes \
                 (store large data elsewhere and enqueue a reference to it)",
                text.len()
            )));
        }
        Ok(Self(text))
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A client-chosen key that makes an enqueue idempotent: 1–255 printable ASCII characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

impl FromStr for IdempotencyKey {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let ok = !s.is_empty()
            && s.len() <= MAX_IDEMPOTENCY_KEY_LEN
            && s.bytes().all(|b| (0x20..0x7f).contains(&b));
        if ok {
            Ok(Self(s.to_owned()))
        } else {
            Err(Error::invalid(format!(
                "the Idempotency-Key header must be 1 to {MAX_IDEMPOTENCY_KEY_LEN} printable \
                 ASCII characters"
            )))
        }
    }
}

impl IdempotencyKey {
    /// The key.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Which jobs a list call answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListJobs {
    /// Only jobs in this state; every job when `None`.
    pub status: Option<JobStatus>,
    /// At most this many (1–[`MAX_LIST_LIMIT`]).
    pub limit: usize,
    /// Only jobs enqueued after the job with this id (for paging); every job when the id is
    /// unknown.
    pub after: Option<String>,
}

impl ListJobs {
    /// The first [`DEFAULT_LIST_LIMIT`] jobs in `status`.
    pub fn status(status: JobStatus) -> Self {
        Self {
            status: Some(status),
            limit: DEFAULT_LIST_LIMIT,
            after: None,
        }
    }
}

/// A job as the queue records it.
#[derive(Debug)]
pub struct JobRecord {
    /// The job's id.
    pub id: String,
    /// Its state.
    pub status: JobStatus,
    /// The payload as delivered.
    pub job: RawJson,
    /// Delivery attempts since it was enqueued or last retried (see the contract for one in
    /// flight).
    pub attempts: u32,
    /// The worker's answer or the delivery error: of the failure that made it ERROR, or of
    /// the last failed attempt of a READY job waiting to be retried.
    pub error: Option<String>,
    /// When it was enqueued, milliseconds since the epoch.
    pub created_ms: i64,
    /// When it last changed, milliseconds since the epoch.
    pub updated_ms: i64,
}

/// A job carried from another node, as an archive's import stores it
/// ([`JobQueue::restore`]).
#[derive(Debug, Clone)]
pub struct CarriedJob {
    /// The payload.
    pub body: JobBody,
    /// Its state where it was: READY (waiting or being retried) or ERROR (failed).
    pub status: JobStatus,
    /// Its delivery attempts there.
    pub attempts: u32,
    /// Its recorded error there (at most [`MAX_ERROR_BYTES`]).
    pub error: Option<String>,
    /// When it was first enqueued, milliseconds since the epoch.
    pub created_ms: i64,
}

/// Proof of a claim: settling with a token that no longer holds the job does nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseToken(pub i64);

/// A job claimed for delivery.
#[derive(Debug, Clone)]
pub struct ClaimedJob {
    /// The job's id.
    pub id: String,
    /// The body to send (the stored [`JobBody`] text).
    pub body: String,
    /// The number of this attempt, 1 for the first since enqueue or retry.
    pub attempt: u32,
    /// The claim's token, for [`JobQueue::settle`].
    pub lease: LeaseToken,
}

/// What a claim found.
#[derive(Debug, Clone, Default)]
pub struct Claim {
    /// The claimed jobs, oldest due first.
    pub jobs: Vec<ClaimedJob>,
    /// The earliest time any READY job left unclaimed becomes claimable (a retry's due time
    /// or a lease's expiry); `None` when the queue holds no other READY job.
    pub next_due_ms: Option<i64>,
}

/// How a delivery ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The worker answered 2xx: the job is done and removed.
    Delivered,
    /// The worker failed the job, or delivery gave up: the job goes to ERROR with `error`.
    Failed {
        /// The worker's answer or the reason delivery gave up.
        error: String,
    },
    /// The job was not sent (the node is stopping): it is claimable again at once and the
    /// claim's attempt is not counted.
    Released,
    /// The worker could not be reached: the job stays READY, claimable again at `due_ms`.
    RetryAt {
        /// When to try again, milliseconds since the epoch.
        due_ms: i64,
        /// What went wrong this time.
        error: String,
    },
}

/// The outcome of one claimed job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    /// The job's id.
    pub id: String,
    /// The claim's token.
    pub lease: LeaseToken,
    /// How the delivery ended.
    pub outcome: Outcome,
}

/// How many jobs a queue holds, by state (see [`JobQueue::depth`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueDepth {
    /// READY jobs: waiting, waiting to be retried, or being delivered.
    pub ready: u64,
    /// ERROR jobs, waiting for a retry or a cancel.
    pub error: u64,
}

/// Hears that jobs of a queue may have become claimable through something this node did
/// not do itself: an enqueue or a retry through another node, a lease of a dead node run
/// out. The dispatcher implements it to wake the queue's pump.
pub trait DueListener: Send + Sync + 'static {
    /// Jobs of the queue `queue` may be claimable now.
    fn due(&self, queue: InstanceId);
}

/// What happened to a job, as a queue's event log records it (see [`JobQueue::events`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobEventKind {
    /// Enqueued: READY, due now.
    Ready,
    /// Delivered (the worker answered 2xx): removed.
    Delivered,
    /// Failed: ERROR, with the error.
    Error,
    /// Cancelled: removed.
    Cancelled,
    /// Put back from ERROR to READY.
    Retried,
}

impl JobEventKind {
    /// The wire name: `ready`, `delivered`, `error`, `cancelled` or `retried`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ready => "ready",
            Self::Delivered => "delivered",
            Self::Error => "error",
            Self::Cancelled => "cancelled",
            Self::Retried => "retried",
        }
    }

    /// The job's state after the event; `None` once it is gone.
    pub fn status(self) -> Option<JobStatus> {
        match self {
            Self::Ready | Self::Retried => Some(JobStatus::Ready),
            Self::Error => Some(JobStatus::Error),
            Self::Delivered | Self::Cancelled => None,
        }
    }

    /// The kind stored as `text` ([`JobEventKind::as_str`]).
    pub fn from_stored(text: &str) -> Result<Self> {
        Ok(match text {
            "ready" => Self::Ready,
            "delivered" => Self::Delivered,
            "error" => Self::Error,
            "cancelled" => Self::Cancelled,
            "retried" => Self::Retried,
            other => {
                return Err(Error::internal(format!(
                    "a stored job event is {other:?}, which is no event"
                )));
            }
        })
    }
}

/// One entry of a queue's event log: job `id` went through `event` in the commit
/// numbered `seq`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEvent {
    /// The entry's number in its queue's log.
    pub seq: u64,
    /// The job's id.
    pub id: String,
    /// What happened.
    pub event: JobEventKind,
    /// The error of an [`JobEventKind::Error`] event.
    pub error: Option<String>,
}

impl Numbered for JobEvent {
    fn seq(&self) -> u64 {
        self.seq
    }
}

/// Durable jobs of queue instances, claimed for delivery with leases.
///
/// # Contract
/// - `enqueue` returns only once the job is durable. With an idempotency key, it fails with
///   [`Error::Conflict`] while a job enqueued with the same key still exists (READY or
///   ERROR) in the same queue; once that job is gone the key is free again.
/// - Jobs are READY or ERROR. A READY job is claimable when its due time has come; enqueue
///   and retry make it due at once.
/// - `claim(now, lease_until, max)` takes up to `max` claimable jobs, oldest due first, and
///   makes each unclaimable until `lease_until` (the lease). Each claimed job carries its
///   attempt number: one more than its recorded attempts, counting a claim whose lease
///   expired unsettled as an attempt. Claimed jobs stay READY for listing; whether their
///   attempt in flight already shows in `attempts` is the adapter's choice, once settled it
///   does. When a lease expires without being settled (the node died), the job is claimable
///   again: delivery is at-least-once. Concurrent claims (from several nodes) never return
///   the same job while its lease holds.
/// - `settle` applies each outcome only if the job still carries that claim's lease token;
///   otherwise (cancelled, retried, or re-claimed after expiry) the settlement is ignored.
///   `Delivered` removes the job; `Failed` makes it ERROR with the error; `RetryAt` releases
///   it, due at the given time, with the error recorded; `Released` gives it back unsent,
///   due now, without counting the attempt.
/// - `retry` makes an ERROR job READY and due now, with its attempts reset to 0 and its
///   error cleared: [`Error::NotFound`] for an unknown job, [`Error::Conflict`] for a job
///   that is READY.
/// - `cancel` removes a READY or ERROR job, even one being delivered (the delivery's
///   settlement is then ignored); [`Error::NotFound`] for an unknown job.
/// - `list` answers jobs oldest enqueued first.
/// - `restore` stores a job carried from another node (an import) under a new id, with the
///   status, attempts, error and creation time it had there: a READY one is due now and its
///   next claim is attempt `attempts + 1`; an ERROR one waits for `retry` like any failed
///   job. It carries no idempotency key.
/// - `recover` releases leases that the adapter knows no live node holds. An adapter whose
///   store only one node can open (the embedded one locks its data directory, and keeps
///   leases in memory) has none left from a crash, so jobs in flight then are delivered
///   again at once; an adapter shared by nodes cannot tell a live node's lease from a dead
///   one's, so it releases only leases that expired (claims take those anyway). It is
///   called once at start-up.
/// - Operations on a queue whose storage was dropped fail with [`Error::NotFound`].
/// - Times are milliseconds since the epoch, given by the caller's clock.
/// - Every enqueue, delivery (`Delivered`), failure (`Failed`), cancellation and retry
///   that changed a job appends one [`JobEvent`] to the queue's event log in the same
///   transaction (claims, postponed retries and releases do not). Entries are numbered
///   without gaps in commit order, like a data instance's change log (see
///   [`crate::ports::changes`]); `events` answers them as `DocStore::changes` does, and
///   subscribed [`FeedListener`]s are told after each commit (on a shared engine, also of
///   commits through other nodes).
#[async_trait]
pub trait JobQueue: Lifecycle {
    /// Store a new job, due now; returns its id (unique, time-ordered).
    async fn enqueue(
        &self,
        instance: &Instance,
        job: &JobBody,
        idempotency_key: Option<&IdempotencyKey>,
        now_ms: i64,
    ) -> Result<String>;

    /// Store a job carried from another node under a new id; returns the id.
    async fn restore(&self, instance: &Instance, job: &CarriedJob, now_ms: i64) -> Result<String>;

    /// Jobs selected by `query`, oldest enqueued first.
    async fn list(&self, instance: &Instance, query: &ListJobs) -> Result<Vec<JobRecord>>;

    /// Put an ERROR job back to READY, due now.
    async fn retry(&self, instance: &Instance, id: &str, now_ms: i64) -> Result<()>;

    /// Remove a READY or ERROR job.
    async fn cancel(&self, instance: &Instance, id: &str) -> Result<()>;

    /// Claim up to `max` due jobs, leased until `lease_until_ms`.
    async fn claim(
        &self,
        instance: &Instance,
        now_ms: i64,
        lease_until_ms: i64,
        max: usize,
    ) -> Result<Claim>;

    /// Apply delivery outcomes; returns how many still held their lease and were applied.
    async fn settle(
        &self,
        instance: &Instance,
        now_ms: i64,
        settlements: Vec<Settlement>,
    ) -> Result<usize>;

    /// Release leases no live node holds; returns how many jobs were released.
    async fn recover(&self, now_ms: i64) -> Result<usize>;

    /// How many jobs the queue holds in each state now (READY counts jobs being
    /// delivered), for the metrics. May count every job: callers cache it.
    async fn depth(&self, instance: &Instance) -> Result<QueueDepth>;
    /// Events after entry `since`, at most `limit` (capped at
    /// [`crate::ports::changes::MAX_CHANGES_PAGE`]); [`Error::Gone`] when entries after
    /// `since` were compacted away or `since` is beyond the head
    /// ([`crate::ports::changes::check_since`]).
    async fn events(
        &self,
        instance: &Instance,
        since: u64,
        limit: usize,
    ) -> Result<ChangesPage<JobEvent>>;

    /// The number of the queue's latest event.
    async fn event_head(&self, instance: &Instance) -> Result<u64>;

    /// Remove events recorded before `before_ms` (of every queue, a prefix of each log);
    /// returns how many.
    async fn compact_events(&self, before_ms: i64) -> Result<u64>;

    /// Tell `listener` after every commit that recorded events (held weakly).
    fn subscribe_events(&self, listener: Weak<dyn FeedListener>);

    /// Call `listener` when jobs may have become claimable through other nodes (held
    /// weakly: a dropped listener is no longer called). An adapter only one node uses
    /// hears of nothing this node did not do, so by default this does nothing.
    fn subscribe(&self, listener: Weak<dyn DueListener>) {
        let _ = listener;
    }
}

impl JobStatus {
    /// The status stored with job `id`, as the adapter wrote it ([`JobStatus::as_str`]).
    pub fn from_stored(id: &str, stored: &str) -> Result<Self> {
        match stored {
            "READY" => Ok(Self::Ready),
            "ERROR" => Ok(Self::Error),
            other => Err(Error::internal(format!(
                "stored job {id} has unknown status {other}"
            ))),
        }
    }
}

/// The payload stored with job `id`, answered as stored.
pub fn stored_job(id: &str, text: String) -> Result<RawJson> {
    serde_json::value::RawValue::from_string(text)
        .map_err(|e| Error::internal(format!("stored job {id} is not JSON: {e}")))
}

/// The answer for a queue instance whose storage is gone.
pub fn queue_missing(name: impl fmt::Display) -> Error {
    Error::not_found(format!("queue instance \"{name}\" does not exist"))
}

/// The answer for job `id` missing from its queue.
pub fn job_missing(id: impl fmt::Display) -> Error {
    Error::not_found(format!("job \"{id}\" does not exist in this queue"))
}

/// The answer for retrying job `id`, which is READY.
pub fn job_not_failed(id: impl fmt::Display) -> Error {
    Error::conflict(format!(
        "job \"{id}\" is READY, not ERROR: it is waiting for delivery already"
    ))
}

/// The answer for enqueueing with `key` while job `existing` holds it.
pub fn idempotency_key_taken(key: impl fmt::Display, existing: impl fmt::Display) -> Error {
    Error::conflict(format!(
        "a job with Idempotency-Key \"{key}\" is already queued (id \"{existing}\"); the key \
         can be used again once that job is gone"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<QueueConfig> {
        QueueConfig::from_json(v.as_object().unwrap())
    }

    #[test]
    fn valid_configs() {
        let c = parse(json!({"target": "http://127.0.0.1:9000/jobs"})).unwrap();
        assert_eq!(c, QueueConfig::new("http://127.0.0.1:9000/jobs"));
        assert_eq!((c.concurrency, c.timeout_secs, c.retries), (8, 30, 5));
        let c = parse(json!({"target": "https://w.example/x", "secret": "abc",
            "concurrency": 256, "timeout": 1, "retries": 0}))
        .unwrap();
        assert_eq!(c.secret.as_deref(), Some("abc"));
        assert_eq!((c.concurrency, c.timeout_secs, c.retries), (256, 1, 0));
        assert_eq!(c.to_public_json()["secret"], "[redacted]");
        assert_eq!(parse(c.to_json()).unwrap(), c);
    }

    #[test]
    fn invalid_configs_name_the_field() {
        let cases = [
            (json!({}), "\"target\""),
            (json!({"target": 5}), "\"target\""),
            (json!({"target": "ftp://x/y"}), "\"target\""),
            (json!({"target": "not a url"}), "\"target\""),
            (json!({"target": "http://x", "secret": 5}), "\"secret\""),
            (json!({"target": "http://x", "secret": ""}), "\"secret\""),
            (
                json!({"target": "http://x", "concurrency": 0}),
                "\"concurrency\"",
            ),
            (
                json!({"target": "http://x", "concurrency": 257}),
                "\"concurrency\"",
            ),
            (
                json!({"target": "http://x", "concurrency": 1.5}),
                "\"concurrency\"",
            ),
            (
                json!({"target": "http://x", "concurrency": "8"}),
                "\"concurrency\"",
            ),
            (json!({"target": "http://x", "timeout": 0}), "\"timeout\""),
            (
                json!({"target": "http://x", "timeout": 3601}),
                "\"timeout\"",
            ),
            (json!({"target": "http://x", "retries": -1}), "\"retries\""),
            (json!({"target": "http://x", "retries": 26}), "\"retries\""),
        ];
        for (body, field) in cases {
            match parse(body.clone()) {
                Err(Error::Invalid(msg)) => assert!(msg.contains(field), "{body}: {msg}"),
                other => panic!("{body}: {other:?}"),
            }
        }
        let Err(Error::Invalid(msg)) = parse(json!({"target": "http://x", "timeout": 0})) else {
            panic!()
        };
        assert_eq!(
            msg,
            "\"timeout\" must be a whole number from 1 to 3600 seconds (default 30)"
        );
    }

    #[test]
    fn status_parses_in_any_case_and_names_the_fix() {
        assert_eq!("READY".parse::<JobStatus>().unwrap(), JobStatus::Ready);
        assert_eq!("error".parse::<JobStatus>().unwrap(), JobStatus::Error);
        let err = "DONE".parse::<JobStatus>().unwrap_err();
        assert!(err.to_string().contains("status=READY"), "{err}");
    }

    #[test]
    fn job_bodies_are_javascript_text_and_limited() {
        let doc = json!({"b": 1.0, "1": "x"});
        let body = JobBody::from_document(doc.as_object().unwrap()).unwrap();
        assert_eq!(body.as_str(), r#"{"1":"x","b":1}"#);
        let big = json!({"x": "a".repeat(MAX_JOB_BYTES)});
        assert!(matches!(
            JobBody::from_document(big.as_object().unwrap()),
            Err(Error::TooLarge(_))
        ));
    }

    #[test]
    fn idempotency_keys() {
        assert!("order-42".parse::<IdempotencyKey>().is_ok());
        assert!("a b".parse::<IdempotencyKey>().is_ok());
        assert!("".parse::<IdempotencyKey>().is_err());
        assert!("é".parse::<IdempotencyKey>().is_err());
        assert!("x".repeat(256).parse::<IdempotencyKey>().is_err());
    }
}
