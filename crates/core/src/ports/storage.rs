//! The storage port: binary objects addressed by path.

use std::{pin::Pin, time::Duration};

use async_trait::async_trait;
use bytes::Bytes;
use futures_core::Stream;

use crate::{Instance, Result, ports::Lifecycle};

/// Object bytes as a stream; objects are never held whole in memory.
pub type ByteStream = Pin<Box<dyn Stream<Item = std::io::Result<Bytes>> + Send>>;

/// What the store knows about an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    /// The object's path within its instance.
    pub path: String,
    /// Its length in bytes.
    pub size: u64,
    /// Its media type.
    pub content_type: String,
    /// An opaque validator that changes whenever the content does.
    pub etag: String,
    /// When it was last written, milliseconds since the epoch.
    pub modified_ms: i64,
}

/// A single byte range of a download, already checked against the object's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    /// First byte, inclusive.
    pub start: u64,
    /// Last byte, inclusive.
    pub end: u64,
}

/// Objects by path.
///
/// # Contract
/// - `put` replaces atomically: a failed or interrupted upload leaves the previous object
///   intact and no partial object visible. It returns only once the object is durable.
/// - `list` answers in path order.
#[async_trait]
pub trait BlobStore: Lifecycle {
    /// Store `body` as the object at `path`.
    async fn put(
        &self,
        instance: &Instance,
        path: &str,
        content_type: &str,
        body: ByteStream,
    ) -> Result<ObjectMeta>;

    /// The object's metadata.
    async fn head(&self, instance: &Instance, path: &str) -> Result<Option<ObjectMeta>>;

    /// The object's metadata and bytes (only `range` of them when given).
    async fn get(
        &self,
        instance: &Instance,
        path: &str,
        range: Option<ByteRange>,
    ) -> Result<Option<(ObjectMeta, ByteStream)>>;

    /// Remove the object; [`crate::Error::NotFound`] when missing.
    async fn delete(&self, instance: &Instance, path: &str) -> Result<()>;

    /// Objects whose path starts with `prefix` and sorts after `after`, in path order.
    async fn list(
        &self,
        instance: &Instance,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<ObjectMeta>>;
}

/// The method a pre-signed URL allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PresignMethod {
    /// Download.
    Get,
    /// Upload.
    Put,
}

/// Stores that hand out URLs granting one operation on one object until they expire.
#[async_trait]
pub trait Presign: Send + Sync {
    /// An absolute URL for `method` on `path`, valid for `expires`. `base_url` is where this
    /// server is reachable, for stores that serve the URL themselves.
    async fn presign(
        &self,
        instance: &Instance,
        path: &str,
        method: PresignMethod,
        expires: Duration,
        base_url: &str,
    ) -> Result<String>;
}
