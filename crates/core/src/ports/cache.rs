//! The cache port: JSON values by key, with time-to-live and glob queries.

use async_trait::async_trait;

use crate::{
    Instance, Result,
    cache::{CacheKey, CacheValue, Glob, Ttl},
    ports::Lifecycle,
};

/// How a write treats a key that has no live entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetMode {
    /// Create the entry when missing (domain-form PUT).
    Upsert,
    /// Fail with [`crate::Error::NotFound`] when missing (application-form PUT).
    UpdateExisting,
}

/// One entry of a query answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheEntry {
    /// The key.
    pub key: CacheKey,
    /// The value, as stored.
    pub value: CacheValue,
    /// When the entry expires, milliseconds since the epoch (`None`: never); what an export
    /// turns into the entry's remaining time to live.
    pub expires_ms: Option<i64>,
}

/// Key/value entries with optional expiry.
///
/// # Contract
/// - **Time** is the adapter's [`crate::Clock`], read once per call. An entry written at
///   `t` with a [`Ttl`] of `d` is live while the clock reads less than `t + d` (to the
///   millisecond) and expired from then on.
/// - **Expired entries** are never returned by `get` or `query`, never block `add`, and
///   count as missing for `set` in [`SetMode::UpdateExisting`] and for `remove`. Their
///   space is reclaimed in the background, without blocking requests.
/// - **Values** come back byte for byte as they were written.
/// - **Errors**: [`crate::Error::Conflict`] from [`crate::cache::existing_key`] and
///   [`crate::Error::NotFound`] from [`crate::cache::missing_key`], so every adapter words
///   them alike.
/// - **Durability**: a write is durable before it returns, unless the operator chose a
///   memory-only cache; reads see every write that returned.
/// - **Bounds**: an adapter configured with a size bound evicts least-recently-used
///   entries (a `get` or a write is a use; a `query` is not) to make room, and refuses with
///   [`crate::Error::TooLarge`] an entry larger than the whole bound. Without a bound
///   nothing is evicted.
/// - Concurrent writes to one key take effect one after the other: of two concurrent
///   `add`s of a key, exactly one succeeds.
#[async_trait]
pub trait Cache: Lifecycle {
    /// Add an entry, expiring after `ttl` (never when `None`). [`crate::Error::Conflict`]
    /// when a live entry has the key; an expired entry is replaced.
    async fn add(
        &self,
        instance: &Instance,
        key: &CacheKey,
        value: CacheValue,
        ttl: Option<Ttl>,
    ) -> Result<()>;

    /// The live value under `key`, `None` when missing or expired.
    async fn get(&self, instance: &Instance, key: &CacheKey) -> Result<Option<CacheValue>>;

    /// When the live entry under `key` expires (milliseconds since the Unix epoch):
    /// `None` when there is no live entry, `Some(None)` when it never expires. Not a use
    /// (the entry's recency is unchanged).
    async fn expiry(&self, instance: &Instance, key: &CacheKey) -> Result<Option<Option<i64>>>;

    /// Replace the value under `key`. With a `ttl` the entry expires that long after this
    /// write; without one a live entry keeps its current expiry and a new entry never
    /// expires. In [`SetMode::UpdateExisting`], [`crate::Error::NotFound`] when the key has
    /// no live entry (and nothing is written).
    async fn set(
        &self,
        instance: &Instance,
        key: &CacheKey,
        value: CacheValue,
        ttl: Option<Ttl>,
        mode: SetMode,
    ) -> Result<()>;

    /// Remove the entry; [`crate::Error::NotFound`] when there is no live entry.
    async fn remove(&self, instance: &Instance, key: &CacheKey) -> Result<()>;

    /// Live entries whose key matches `pattern`, sorted by key (byte order).
    async fn query(&self, instance: &Instance, pattern: &Glob) -> Result<Vec<CacheEntry>>;

    /// The instance's live entries and the bytes (keys plus values) they take; the bytes
    /// are what a plan's cache share counts. May visit every entry: callers cache it.
    async fn usage(&self, instance: &Instance) -> Result<CacheUsage>;
}

/// What a cache instance keeps (see [`Cache::usage`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheUsage {
    /// Live entries.
    pub entries: u64,
    /// Bytes of their keys plus values.
    pub bytes: u64,
}
