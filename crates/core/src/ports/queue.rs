//! The queue port: durable jobs delivered by POST to a worker URL.

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::{
    Error, Instance, Result,
    ports::{
        Lifecycle,
        data::{Document, RawJson},
    },
};

/// Longest accepted queue secret, in bytes.
pub const MAX_SECRET_LEN: usize = 256;

/// Configuration of a queue instance, given at creation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueConfig {
    /// The worker URL jobs are POSTed to (http or https).
    pub target: String,
    /// When present, every delivery is signed with it.
    pub secret: Option<String>,
}

impl QueueConfig {
    /// Validate `{target: http(s) URL, secret?: string}`.
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
        Ok(Self { target, secret })
    }

    /// The configuration in its wire shape, secret included.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("target".into(), Value::String(self.target.clone()));
        if let Some(s) = &self.secret {
            m.insert("secret".into(), Value::String(s.clone()));
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

/// The states a job can be listed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobStatus {
    /// Waiting for delivery, or being delivered.
    Ready,
    /// The worker failed it, or delivery gave up.
    Error,
}

/// A job as the queue records it.
#[derive(Debug)]
pub struct JobRecord {
    /// The job's id.
    pub id: String,
    /// Its state.
    pub status: JobStatus,
    /// The payload as submitted.
    pub job: RawJson,
    /// Delivery attempts made so far.
    pub attempts: u32,
    /// The worker's answer or the delivery error, for ERROR jobs.
    pub error: Option<String>,
    /// When it was enqueued, milliseconds since the epoch.
    pub created_ms: i64,
    /// When it last changed, milliseconds since the epoch.
    pub updated_ms: i64,
}

/// Durable jobs of queue instances.
///
/// # Contract
/// - `enqueue` returns only once the job is durable.
/// - A job stays `Ready` until the worker answers; a job whose delivery was interrupted by
///   a crash is delivered again (at-least-once).
#[async_trait]
pub trait JobQueue: Lifecycle {
    /// Store a new job; [`crate::Error::Conflict`] when `idempotency_key` names a job that
    /// still exists. Returns the job's id.
    async fn enqueue(
        &self,
        instance: &Instance,
        job: Document,
        idempotency_key: Option<&str>,
    ) -> Result<String>;

    /// Jobs in `status`, oldest first.
    async fn list(&self, instance: &Instance, status: JobStatus) -> Result<Vec<JobRecord>>;

    /// Put an `Error` job back to `Ready`; [`crate::Error::NotFound`] when no such job.
    async fn retry(&self, instance: &Instance, id: &str) -> Result<()>;

    /// Remove a `Ready` or `Error` job; [`crate::Error::NotFound`] when no such job.
    async fn cancel(&self, instance: &Instance, id: &str) -> Result<()>;
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
        assert_eq!(c.secret, None);
        let c = parse(json!({"target": "https://w.example/x", "secret": "abc"})).unwrap();
        assert_eq!(c.secret.as_deref(), Some("abc"));
        assert_eq!(c.to_public_json()["secret"], "[redacted]");
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
        ];
        for (body, field) in cases {
            match parse(body.clone()) {
                Err(Error::Invalid(msg)) => assert!(msg.contains(field), "{body}: {msg}"),
                other => panic!("{body}: {other:?}"),
            }
        }
    }
}
