//! The cache port: JSON values by key, with time-to-live and glob queries.

use std::time::Duration;

use async_trait::async_trait;

use crate::{
    Instance, Result,
    ports::{
        Lifecycle,
        data::{Document, RawJson},
    },
};

/// How a write treats an entry that does not exist yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetMode {
    /// Create the entry when missing (domain-form PUT).
    Upsert,
    /// Fail with [`crate::Error::NotFound`] when missing (application-form PUT).
    UpdateExisting,
}

/// What a write does to the entry's expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// Keep the current expiry of an existing entry (a new entry never expires).
    Keep,
    /// Never expire.
    Never,
    /// Expire this long after the write.
    After(Duration),
}

/// Key/value entries with optional expiry.
///
/// # Contract
/// - An expired entry is never returned and never blocks `add`.
/// - Writes are durable before they return (unless the operator chose a memory-only cache).
/// - `query` answers entries sorted by key.
#[async_trait]
pub trait Cache: Lifecycle {
    /// Add an entry; [`crate::Error::Conflict`] when a live entry has the key.
    async fn add(&self, instance: &Instance, key: &str, value: Document, ttl: Expiry)
    -> Result<()>;

    /// The live value under `key`.
    async fn get(&self, instance: &Instance, key: &str) -> Result<Option<RawJson>>;

    /// Replace the value under `key`.
    async fn set(
        &self,
        instance: &Instance,
        key: &str,
        value: Document,
        ttl: Expiry,
        mode: SetMode,
    ) -> Result<()>;

    /// Remove the entry; [`crate::Error::NotFound`] when there is no live entry.
    async fn remove(&self, instance: &Instance, key: &str) -> Result<()>;

    /// Live entries whose key matches `pattern` (`*` matches any run), sorted by key.
    async fn query(&self, instance: &Instance, pattern: &str) -> Result<Vec<(String, RawJson)>>;
}
