//! Storage events: the log of object writes and removals of each storage instance, which
//! the change feed `GET /storage/<bucket>/_changes` follows.
//!
//! Two shapes of store record them:
//! - a store with a database of its own (the embedded one: metadata in SQLite) records the
//!   event in the transaction that commits the object's row, and implements
//!   [`StorageEvents`] itself: an acknowledged write always has its event, an uncommitted
//!   one never does;
//! - a store without one (S3) is wrapped in [`Logged`], which appends the event to a
//!   [`StorageEventLog`] (on PostgreSQL) after the store's write succeeded and before it
//!   is acknowledged. A crash between the two leaves a write that was never acknowledged
//!   without its event; everything acknowledged has one.
//!
//! Entries are numbered like a data instance's change log (see [`crate::ports::changes`]).

use std::{fmt, sync::Weak, time::Duration};

use async_trait::async_trait;

use crate::{
    Error, Instance, Result,
    object::{ObjectPath, PresignMethod},
    ports::{
        Keep, Lifecycle, PoolUsage,
        changes::{ChangesPage, FeedListener, Numbered},
        storage::{BlobStore, ByteStream, ListQuery, Object, ObjectMeta, Presign, RangeSpec},
    },
};

/// What happened to an object, as a bucket's event log records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObjectEventKind {
    /// Uploaded (created or replaced), with what was stored.
    Written {
        /// Its length in bytes.
        size: u64,
        /// Its entity tag, without quotes.
        etag: String,
        /// Its media type.
        content_type: String,
    },
    /// Removed.
    Removed,
}

impl ObjectEventKind {
    /// The event of a write that stored `meta`.
    pub fn written(meta: &ObjectMeta) -> Self {
        Self::Written {
            size: meta.size,
            etag: meta.etag.clone(),
            content_type: meta.content_type.clone(),
        }
    }

    /// The wire name: `written` or `removed`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Written { .. } => "written",
            Self::Removed => "removed",
        }
    }

    /// The kind stored as `event` ([`ObjectEventKind::as_str`]) with the columns of a
    /// written object (present exactly for `written`).
    pub fn from_stored(
        event: &str,
        size: Option<i64>,
        etag: Option<String>,
        content_type: Option<String>,
    ) -> Result<Self> {
        match (event, size, etag, content_type) {
            ("written", Some(size), Some(etag), Some(content_type)) => Ok(Self::Written {
                size: u64::try_from(size).unwrap_or(0),
                etag,
                content_type,
            }),
            ("removed", ..) => Ok(Self::Removed),
            (other, ..) => Err(Error::internal(format!(
                "a stored storage event is {other:?} without its object's columns"
            ))),
        }
    }

    /// The size, entity tag and media type of a written object, as stored columns.
    pub fn columns(&self) -> (Option<i64>, Option<&str>, Option<&str>) {
        match self {
            Self::Written {
                size,
                etag,
                content_type,
            } => (
                Some(i64::try_from(*size).unwrap_or(i64::MAX)),
                Some(etag),
                Some(content_type),
            ),
            Self::Removed => (None, None, None),
        }
    }
}

/// One entry of a bucket's event log: object `path` went through `event` in the write
/// numbered `seq`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectEvent {
    /// The entry's number in its bucket's log.
    pub seq: u64,
    /// The object's path.
    pub path: String,
    /// What happened.
    pub event: ObjectEventKind,
}

impl Numbered for ObjectEvent {
    fn seq(&self) -> u64 {
        self.seq
    }
}

/// Reading the event logs of storage instances.
///
/// # Contract
/// - Every successful `put` of the storage serving the instance appends one
///   [`ObjectEventKind::Written`] event carrying the stored object's size, entity tag and
///   media type, and every successful `delete` one [`ObjectEventKind::Removed`] event;
///   failed writes (an interrupted upload, a delete of a missing object) append none.
/// - Entries are numbered without gaps from 1 per instance, in the order their writes were
///   recorded, like a data instance's change log ([`crate::ports::changes`]); `events`
///   answers them as `DocStore::changes` does ([`crate::ports::changes::check_since`]).
/// - `compact_events` removes a prefix of each log: the entries recorded before a time.
///   The head stays a position once its entry is removed, and numbers are never reused.
/// - Subscribed [`FeedListener`]s are told after each recorded event (on a shared engine,
///   also of events recorded through other nodes).
/// - Once the instance is dropped, its log is gone: reads answer
///   [`Error::NotFound`] or an empty log (the server never asks about an instance the
///   registry does not know).
#[async_trait]
pub trait StorageEvents: Send + Sync + fmt::Debug + 'static {
    /// Events after entry `since`, at most `limit` (capped at
    /// [`crate::ports::changes::MAX_CHANGES_PAGE`]).
    async fn events(
        &self,
        instance: &Instance,
        since: u64,
        limit: usize,
    ) -> Result<ChangesPage<ObjectEvent>>;

    /// The number of the instance's latest event (0 before the first).
    async fn event_head(&self, instance: &Instance) -> Result<u64>;

    /// Remove events recorded before `before_ms` (of every instance, a prefix of each
    /// log); returns how many.
    async fn compact_events(&self, before_ms: i64) -> Result<u64>;

    /// Tell `listener` after every recorded event (held weakly).
    fn subscribe_events(&self, listener: Weak<dyn FeedListener>);
}

/// An event log kept beside a store that has no database of its own (see [`Logged`]).
///
/// # Contract
/// [`StorageEvents`]'s, where `append` is the write: it records `event` of `path` as the
/// instance's next entry and returns its number once it is durable. Its [`Lifecycle`]
/// drops (`drop_instance`) and sweeps (`sweep`) the logs of instances.
#[async_trait]
pub trait StorageEventLog: StorageEvents + Lifecycle {
    /// Record `event` of `path` as `instance`'s next entry; its number.
    async fn append(
        &self,
        instance: &Instance,
        path: &ObjectPath,
        event: &ObjectEventKind,
    ) -> Result<u64>;
}

/// A store `S` whose writes are recorded in `log` (see the [module](self) documentation):
/// a `put` or `delete` answers once the store did it *and* the log recorded it. Every
/// other call goes to the store; the [`StorageEvents`] calls go to the log.
#[derive(Debug)]
pub struct Logged<S> {
    store: S,
    log: std::sync::Arc<dyn StorageEventLog>,
}

impl<S> Logged<S> {
    /// `store`, its writes recorded in `log`.
    pub fn new(store: S, log: std::sync::Arc<dyn StorageEventLog>) -> Self {
        Self { store, log }
    }

    /// The wrapped store.
    pub fn store(&self) -> &S {
        &self.store
    }
}

#[async_trait]
impl<S: Lifecycle> Lifecycle for Logged<S> {
    async fn create_instance(&self, instance: &Instance) -> Result<()> {
        self.store.create_instance(instance).await?;
        self.log.create_instance(instance).await
    }

    async fn drop_instance(&self, instance: &Instance) -> Result<()> {
        self.store.drop_instance(instance).await?;
        self.log.drop_instance(instance).await
    }

    async fn sweep(&self, keep: &Keep) -> Result<usize> {
        let objects = self.store.sweep(keep).await?;
        let logs = self.log.sweep(keep).await?;
        Ok(objects.max(logs))
    }

    async fn ready(&self) -> Result<()> {
        self.store.ready().await?;
        self.log.ready().await
    }

    fn pool(&self) -> Option<PoolUsage> {
        self.store.pool()
    }

    async fn close(&self) -> Result<()> {
        let store = self.store.close().await;
        let log = self.log.close().await;
        store.and(log)
    }
}

#[async_trait]
impl<S: BlobStore> BlobStore for Logged<S> {
    async fn put(
        &self,
        instance: &Instance,
        path: &ObjectPath,
        content_type: &str,
        body: ByteStream,
    ) -> Result<ObjectMeta> {
        let meta = self.store.put(instance, path, content_type, body).await?;
        self.log
            .append(instance, path, &ObjectEventKind::written(&meta))
            .await?;
        Ok(meta)
    }

    async fn head(&self, instance: &Instance, path: &ObjectPath) -> Result<Option<ObjectMeta>> {
        self.store.head(instance, path).await
    }

    async fn get(
        &self,
        instance: &Instance,
        path: &ObjectPath,
        range: Option<RangeSpec>,
    ) -> Result<Option<Object>> {
        self.store.get(instance, path, range).await
    }

    async fn delete(&self, instance: &Instance, path: &ObjectPath) -> Result<()> {
        self.store.delete(instance, path).await?;
        self.log
            .append(instance, path, &ObjectEventKind::Removed)
            .await?;
        Ok(())
    }

    async fn list(&self, instance: &Instance, query: ListQuery<'_>) -> Result<Vec<ObjectMeta>> {
        self.store.list(instance, query).await
    }

    async fn stored_bytes(&self, instance: &Instance) -> Result<u64> {
        self.store.stored_bytes(instance).await
    }
}

#[async_trait]
impl<S: Presign> Presign for Logged<S> {
    async fn presign(
        &self,
        instance: &Instance,
        path: &ObjectPath,
        method: PresignMethod,
        expires: Duration,
        base_url: &str,
    ) -> Result<String> {
        self.store
            .presign(instance, path, method, expires, base_url)
            .await
    }

    async fn check_presigned(
        &self,
        instance: &Instance,
        path: &ObjectPath,
        method: PresignMethod,
        expires_at_s: i64,
        signature: &str,
    ) -> Result<()> {
        self.store
            .check_presigned(instance, path, method, expires_at_s, signature)
            .await
    }
}

#[async_trait]
impl<S: Send + Sync + fmt::Debug + 'static> StorageEvents for Logged<S> {
    async fn events(
        &self,
        instance: &Instance,
        since: u64,
        limit: usize,
    ) -> Result<ChangesPage<ObjectEvent>> {
        self.log.events(instance, since, limit).await
    }

    async fn event_head(&self, instance: &Instance) -> Result<u64> {
        self.log.event_head(instance).await
    }

    async fn compact_events(&self, before_ms: i64) -> Result<u64> {
        self.log.compact_events(before_ms).await
    }

    fn subscribe_events(&self, listener: Weak<dyn FeedListener>) {
        self.log.subscribe_events(listener);
    }
}

/// A store whose writes are events: what the storage events conformance suite checks
/// (`quintet_core::conformance::storage_events`, with the `conformance` feature).
/// Implemented for every type that is both.
pub trait EventedStorage: BlobStore + StorageEvents {}

impl<T: BlobStore + StorageEvents> EventedStorage for T {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_through_their_columns() {
        let written = ObjectEventKind::Written {
            size: 5,
            etag: "e".into(),
            content_type: "text/plain".into(),
        };
        for kind in [written, ObjectEventKind::Removed] {
            let (size, etag, ct) = kind.columns();
            let back = ObjectEventKind::from_stored(
                kind.as_str(),
                size,
                etag.map(str::to_owned),
                ct.map(str::to_owned),
            )
            .unwrap();
            assert_eq!(back, kind);
        }
        assert!(ObjectEventKind::from_stored("written", None, None, None).is_err());
        assert!(ObjectEventKind::from_stored("moved", None, None, None).is_err());
    }
}
