//! The storage port: binary objects addressed by path, and pre-signed URLs.

use std::{fmt, pin::Pin, time::Duration};

use async_trait::async_trait;
pub use futures_core::Stream;

pub use crate::object::{ByteRange, ObjectPath, PresignMethod, RangeSpec};
use crate::{Instance, Result, ports::Lifecycle};
pub use bytes::Bytes;

/// Object bytes as a stream; objects are never held whole in memory.
pub type ByteStream = Pin<Box<dyn Stream<Item = std::io::Result<Bytes>> + Send>>;

/// What the store knows about an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    /// The object's path within its instance.
    pub path: ObjectPath,
    /// Its length in bytes.
    pub size: u64,
    /// Its media type.
    pub content_type: String,
    /// A strong entity tag, without quotes, that changes whenever the content does.
    pub etag: String,
    /// When it was last written, milliseconds since the epoch.
    pub modified_ms: i64,
}

/// An object being read: its metadata, the range served, and the bytes.
pub struct Object {
    /// The object's metadata (of the whole object, also when a range is served).
    pub meta: ObjectMeta,
    /// The bytes served when a range was asked for; `None` for the whole object.
    pub range: Option<ByteRange>,
    /// The bytes: `range` of the object, or all of it.
    pub body: ByteStream,
}

impl fmt::Debug for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Object")
            .field("meta", &self.meta)
            .field("range", &self.range)
            .finish_non_exhaustive()
    }
}

/// Which objects a listing answers.
#[derive(Debug, Clone, Copy)]
pub struct ListQuery<'a> {
    /// Only paths starting with this text (empty: all).
    pub prefix: &'a str,
    /// Only paths sorting after this one (for the next page).
    pub after: Option<&'a str>,
    /// At most this many objects.
    pub limit: usize,
}

/// Objects by path.
///
/// # Contract
/// - Paths are [`ObjectPath`]s, already validated; `a` and `a/b` are two independent
///   objects (paths are keys, not directories).
/// - `put` replaces atomically: readers see the previous object or the new one, never a
///   mix. When `body` yields an error, or the call is dropped before it returns, the
///   previous object stays intact and nothing partial is visible. It returns only once the
///   object and its metadata are durable (they survive `kill -9`).
/// - `get` with a range resolves it against the object it reads
///   ([`RangeSpec::resolve`]), so range and bytes always belong to the same version;
///   [`crate::Error::RangeNotSatisfiable`] when the range misses it.
/// - Reads never hold an object whole in memory; a stream keeps serving the version it
///   started with even if the object is replaced or removed meanwhile.
/// - `list` answers in path order (bytewise on UTF-8), `prefix` and `after` applied before
///   `limit`.
/// - `delete` of a missing object is [`crate::Error::NotFound`]; `head` and `get` answer
///   `None`.
#[async_trait]
pub trait BlobStore: Lifecycle {
    /// Store `body` as the object at `path` with `content_type`; its metadata as stored.
    async fn put(
        &self,
        instance: &Instance,
        path: &ObjectPath,
        content_type: &str,
        body: ByteStream,
    ) -> Result<ObjectMeta>;

    /// The object's metadata.
    async fn head(&self, instance: &Instance, path: &ObjectPath) -> Result<Option<ObjectMeta>>;

    /// The object's metadata and bytes (only `range` of them when given).
    async fn get(
        &self,
        instance: &Instance,
        path: &ObjectPath,
        range: Option<RangeSpec>,
    ) -> Result<Option<Object>>;

    /// Remove the object; [`crate::Error::NotFound`] when missing.
    async fn delete(&self, instance: &Instance, path: &ObjectPath) -> Result<()>;

    /// Objects matching `query`, in path order.
    async fn list(&self, instance: &Instance, query: ListQuery<'_>) -> Result<Vec<ObjectMeta>>;

    /// The bytes the instance's objects take, as `head` reports their sizes; what a plan's
    /// storage quota counts. May read every object's metadata: callers cache it.
    async fn stored_bytes(&self, instance: &Instance) -> Result<u64>;
}

/// Stores that hand out URLs granting one operation on one object until they expire.
///
/// # Contract
/// - `presign` answers an absolute URL; a client needs nothing else to `GET` (for
///   [`PresignMethod::Get`]) or to `PUT` the raw body (for [`PresignMethod::Put`]).
/// - Stores whose URLs are served by quintet itself (under
///   [`crate::object::presign::PRESIGNED_PREFIX`]) check them in `check_presigned`;
///   [`crate::Error::Forbidden`] when the signature does not match or the URL expired.
///   Stores whose URLs point elsewhere (S3) answer `Forbidden` there: they issued no such
///   URL.
#[async_trait]
pub trait Presign: Send + Sync {
    /// An absolute URL for `method` on `path`, valid for `expires`. `base_url` is where this
    /// server is reachable, for stores that serve the URL themselves.
    async fn presign(
        &self,
        instance: &Instance,
        path: &ObjectPath,
        method: PresignMethod,
        expires: Duration,
        base_url: &str,
    ) -> Result<String>;

    /// Whether a request that arrived at quintet's pre-signed route for `method` on `path`,
    /// carrying `expires_at_s` and `signature`, is granted.
    async fn check_presigned(
        &self,
        instance: &Instance,
        path: &ObjectPath,
        method: PresignMethod,
        expires_at_s: i64,
        signature: &str,
    ) -> Result<()>;
}

/// The whole storage service: objects plus pre-signed URLs. Implemented for every type
/// that is both.
pub trait ObjectStorage: BlobStore + Presign {}

impl<T: BlobStore + Presign> ObjectStorage for T {}

/// The answer for object `path` missing from storage instance `instance`.
pub fn object_missing(instance: impl fmt::Display, path: &ObjectPath) -> crate::Error {
    crate::Error::not_found(format!(
        "object {:?} does not exist in storage instance \"{instance}\"",
        path.as_str()
    ))
}

/// The answer for an upload whose body failed before its end.
pub fn upload_interrupted(e: impl fmt::Display) -> crate::Error {
    crate::Error::BadRequest(format!("the upload was interrupted: {e}"))
}
