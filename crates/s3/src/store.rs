//! [`S3BlobStore`]: the storage port on an S3-compatible store.
//!
//! # Layout
//! Under the configured prefix `P` (empty or ending with `/`):
//! - `P<app>/<instance id>/<key>`: the objects, `<key>` being the object's path in an
//!   order-preserving escape ([`encode`]: `docs/a.txt` is `docs.0/a..txt`). The application name keeps a
//!   bucket readable by people; the instance *id* (not its name) isolates instances, since
//!   ids are never reused: a destroyed-then-recreated instance of the same name can never
//!   meet leftovers.
//! - `P_instances/<instance id>`: one marker per created instance, holding its application's
//!   name. The sweep finds orphans by listing markers (an instance without objects is still
//!   an instance), and `drop_instance` removes the marker last, so a crash mid-drop leaves
//!   an orphan the next sweep finds. (`_` names are reserved, no application is called
//!   `_instances`.)
//! - `P_registry`: which registry this prefix belongs to ([`S3BlobStore::bind`]).
//!
//! # Guarantees and costs
//! S3 gives strong read-after-write consistency and atomic replacement of whole objects,
//! which is what the port asks. An upload of at most [`PART_SIZE`] bytes is one `PUT`;
//! larger bodies go up as a multipart upload, [`PART_SIZE`] bytes per part and at most
//! [`PARTS_IN_FLIGHT`] parts at a time, so an upload holds at most about
//! `(PARTS_IN_FLIGHT + 1) * PART_SIZE` in memory, whatever its size. The object appears
//! only when the upload completes; a failing body aborts it. (An upload abandoned by a
//! crash stays as an invisible incomplete multipart upload until the bucket's lifecycle
//! rule for incomplete uploads removes it.) S3 listings carry no content type, so a
//! listing asks `HEAD` of every object it answers (concurrently). A ranged read asks
//! `HEAD`, resolves the range exactly as the embedded store does, then reads it with
//! `If-Match` on the ETag seen, so range and bytes always belong to the same version.

use std::{fmt, sync::Arc, time::Duration};

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt, stream};
use object_store::{
    Attribute, AttributeValue, Attributes, BackoffConfig, ClientOptions, GetOptions, GetRange,
    GetResult, ObjectStore, ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload,
    RetryConfig, WriteMultipart,
    aws::{AmazonS3, AmazonS3Builder},
    list::{PaginatedListOptions, PaginatedListStore},
    path::Path,
    signer::Signer,
};
use quintet_core::{
    Error, Instance, InstanceId, Result,
    breaker::{self, Breaker},
    object::{DEFAULT_CONTENT_TYPE, ObjectPath, PresignMethod, RangeSpec},
    ports::{
        Keep, Lifecycle, PoolUsage,
        storage::{
            BlobStore, ByteStream, ListQuery, Object, ObjectMeta, Presign, object_missing,
            upload_interrupted,
        },
    },
};

use crate::{S3Config, error::s3_error};

/// Size of each part of a multipart upload, and the largest body sent as one `PUT`
/// (S3's smallest allowed part is 5 MiB).
pub const PART_SIZE: usize = 5 * 1024 * 1024;
/// Parts of one upload sent concurrently.
pub const PARTS_IN_FLIGHT: usize = 2;
/// Longest key S3 accepts, in bytes.
const MAX_KEY_LEN: usize = 1024;
/// Longest segment (between two `/`) of a key, in bytes: S3 servers that keep keys as
/// file names (SeaweedFS, for one) refuse longer ones.
const MAX_SEGMENT_LEN: usize = 255;
/// Retries of a request that failed transiently (connection refused, 5xx, timeouts).
const RETRIES: usize = 3;
/// No retry after this long from the first attempt, so an unreachable store answers
/// requests (and a start-up check) with an error in seconds rather than minutes.
const RETRY_TIMEOUT: Duration = Duration::from_secs(10);
/// First wait before a retry (doubling, with jitter): a refused connection is retried
/// and reported within about half a second.
const RETRY_BACKOFF: Duration = Duration::from_millis(50);
/// Longest a probe of an open breaker waits for the store.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// `HEAD` requests a listing runs at once.
const HEADS_IN_FLIGHT: usize = 16;
/// Folder of the instance markers under the prefix.
const INSTANCES: &str = "_instances";
/// Name of the registry marker under the prefix.
const REGISTRY: &str = "_registry";

/// Storage on an S3-compatible store, shared by every node configured with the same
/// bucket and prefix. See the [module documentation](self) for layout and guarantees.
#[derive(Clone)]
pub struct S3BlobStore {
    store: Arc<AmazonS3>,
    prefix: String,
    describe: String,
    /// Open while the store cannot be reached: calls fail at once (see
    /// [`quintet_core::breaker`]).
    breaker: Arc<Breaker>,
}

impl fmt::Debug for S3BlobStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3BlobStore")
            .field("store", &self.describe)
            .finish_non_exhaustive()
    }
}

impl S3BlobStore {
    /// A store over `config`, checked by listing the bucket once (so a wrong endpoint,
    /// bucket or credential fails here, at start-up, with a message saying which).
    pub async fn open(config: &S3Config) -> Result<Self> {
        let (Some(key), Some(secret)) = (&config.access_key_id, &config.secret_access_key) else {
            return Err(Error::Unavailable(format!(
                "no credentials for {}: give access_key_id and secret_access_key in the \
                 storage URL, or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
                config.describe()
            )));
        };
        // object_store's HTTP client (reqwest over rustls) is built without a crypto
        // provider of its own: ring, as everywhere in quintet. An error says one is
        // installed already.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = AmazonS3Builder::new()
            // First: the builder's own settings below (plain HTTP) go into these options.
            .with_client_options(ClientOptions::new().with_connect_timeout(config.connect_timeout))
            .with_bucket_name(&config.bucket)
            .with_region(&config.region)
            .with_access_key_id(key)
            .with_secret_access_key(secret)
            // Path-style addressing (`endpoint/bucket/key`) for custom endpoints, which is
            // what MinIO, SeaweedFS or Garage expect; AWS itself prefers virtual-hosted
            // style (`bucket.s3.<region>.amazonaws.com/key`).
            .with_virtual_hosted_style_request(config.endpoint.is_none())
            .with_allow_http(config.allow_http())
            .with_retry(RetryConfig {
                backoff: BackoffConfig {
                    init_backoff: RETRY_BACKOFF,
                    ..BackoffConfig::default()
                },
                max_retries: RETRIES,
                retry_timeout: RETRY_TIMEOUT,
            });
        if let Some(endpoint) = &config.endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        let store = builder.build().map_err(|e| {
            Error::Unavailable(format!("cannot use {} as storage: {e}", config.describe()))
        })?;
        let this = Self {
            store: Arc::new(store),
            prefix: config.prefix.clone(),
            describe: config.describe(),
            breaker: Arc::new(Breaker::new(format!("the S3 store {}", config.describe()))),
        };
        list_one(&this.store, &this.prefix).await.map_err(|e| {
            tracing::error!(store = %this.describe, error = %e, "S3 store check failed");
            Error::Unavailable(format!(
                "cannot list {}: check the endpoint, bucket, region and credentials \
                     ({e})",
                this.describe
            ))
        })?;
        Ok(this)
    }

    /// Record that this bucket prefix belongs to the registry named `identity`, or refuse
    /// when it already belongs to another: the start-up sweep removes every instance the
    /// registry does not know, so a node started against the wrong registry would delete
    /// everyone's objects.
    pub async fn bind(&self, identity: &str) -> Result<()> {
        let key = self.raw_key(REGISTRY)?;
        match self.store()?.get(&key).await {
            Ok(found) => {
                let bytes = found.bytes().await.map_err(|e| self.failed("bind", e))?;
                let bound = String::from_utf8_lossy(&bytes).trim().to_owned();
                if bound != identity {
                    return Err(Error::Conflict(format!(
                        "{} belongs to registry \"{bound}\", but this node uses registry \
                         \"{identity}\": starting would delete the objects of every instance \
                         that registry does not know. Use the --registry it was used with, \
                         or another bucket or prefix",
                        self.describe
                    )));
                }
                Ok(())
            }
            Err(object_store::Error::NotFound { .. }) => {
                let body = PutPayload::from(format!("{identity}\n"));
                self.store()?
                    .put(&key, body)
                    .await
                    .map_err(|e| self.failed("bind", e))?;
                Ok(())
            }
            Err(e) => Err(self.failed("bind", e)),
        }
    }

    /// The store, unless the breaker is open.
    fn store(&self) -> Result<&AmazonS3> {
        self.breaker.check()?;
        Ok(&self.store)
    }

    /// The breaker of this node's calls to the store.
    pub fn breaker(&self) -> &Breaker {
        &self.breaker
    }

    /// Whether the store answers now: a listing of one key, bounded in time.
    pub async fn ping(&self) -> Result<()> {
        self.breaker.check()?;
        match tokio::time::timeout(PROBE_TIMEOUT, list_one(&self.store, &self.prefix)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(self.failed("ping", e)),
            Err(_) => Err(Error::Unavailable(format!(
                "{} did not answer within {PROBE_TIMEOUT:?}",
                self.describe
            ))),
        }
    }

    /// `e` of `op` as the caller's error; when it says the store could not be reached,
    /// the breaker opens and probes until the store answers again.
    fn failed(&self, op: &'static str, e: object_store::Error) -> Error {
        if unreachable(&e) && self.breaker.trip(&e) {
            tracing::error!(
                store = %self.describe,
                error = %e,
                "the S3 store is unreachable: calls that need it answer 503 until it answers again"
            );
            let (store, prefix, breaker) = (
                Arc::clone(&self.store),
                self.prefix.clone(),
                Arc::clone(&self.breaker),
            );
            let describe = self.describe.clone();
            tokio::spawn(async move {
                let probe = || async {
                    match tokio::time::timeout(PROBE_TIMEOUT, list_one(&store, &prefix)).await {
                        Ok(Ok(())) => Ok(()),
                        Ok(Err(e)) => Err(Error::Unavailable(e.to_string())),
                        Err(_) => Err(Error::Unavailable("probe timed out".into())),
                    }
                };
                breaker::recover(&breaker, probe, tokio::time::sleep, |probing| {
                    if !probing {
                        tracing::info!(store = %describe, "the S3 store answers again");
                    }
                })
                .await;
            });
        }
        s3_error(op, e)
    }

    fn raw_key(&self, rest: &str) -> Result<Path> {
        Path::parse(format!("{}{rest}", self.prefix))
            .map_err(|e| Error::internal(format!("S3 key {}{rest}: {e}", self.prefix)))
    }

    /// Key text of the folder of `instance`'s objects, ending with `/`.
    fn folder(&self, instance: &Instance) -> String {
        format!("{}{}/{}/", self.prefix, instance.app.as_str(), instance.id)
    }

    fn key(&self, instance: &Instance, path: &ObjectPath) -> Result<Path> {
        let key = format!("{}{}", self.folder(instance), encode(path.as_str()));
        if key.len() > MAX_KEY_LEN {
            return Err(Error::invalid(format!(
                "the object path is too long for this storage: on S3 it becomes a key of {} \
                 bytes, and S3 keys hold at most {MAX_KEY_LEN} (each `.` counts twice and each \
                 `/` three times); use a shorter path",
                key.len()
            )));
        }
        if key
            .split('/')
            .any(|segment| segment.len() > MAX_SEGMENT_LEN)
        {
            return Err(Error::invalid(format!(
                "a segment of the object path is too long for this storage: S3 servers on file \
                 systems hold at most {MAX_SEGMENT_LEN} bytes between two `/` (each `.` counts \
                 twice, the `/` after a segment two more); use shorter segments"
            )));
        }
        // ObjectPath already refuses what S3 keys cannot hold (empty, `.`, `..`, control
        // characters), so this only fails on a broken invariant.
        Path::parse(&key).map_err(|e| Error::internal(format!("S3 key {key}: {e}")))
    }

    fn marker(&self, id: InstanceId) -> Result<Path> {
        self.raw_key(&format!("{INSTANCES}/{id}"))
    }

    /// The metadata and content type S3 answers for `key` (a `HEAD`), `None` if missing.
    async fn head_key(&self, path: &ObjectPath, key: &Path) -> Result<Option<ObjectMeta>> {
        let opts = GetOptions {
            head: true,
            ..Default::default()
        };
        match self.store()?.get_opts(key, opts).await {
            Ok(found) => Ok(Some(meta_of(path, &found))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.failed("head", e)),
        }
    }

    /// Remove every object of `instance`, then its marker.
    async fn remove(&self, app: &str, id: InstanceId) -> Result<()> {
        let folder = Path::parse(format!("{}{app}/{id}", self.prefix))
            .map_err(|e| Error::internal(format!("S3 folder of instance {id}: {e}")))?;
        let keys = self
            .store()?
            .list(Some(&folder))
            .map_ok(|m| m.location)
            .boxed();
        self.store()?
            .delete_stream(keys)
            .try_for_each(|_| async { Ok(()) })
            .await
            .map_err(|e| self.failed("drop_instance", e))?;
        match self.store()?.delete(&self.marker(id)?).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.failed("drop_instance", e)),
        }
    }

    /// Upload a body larger than one part as a multipart upload: `first` (what was read
    /// so far) and the rest of `body`, aborted when the body fails.
    async fn put_multipart(
        &self,
        key: &Path,
        attributes: Attributes,
        first: Vec<Bytes>,
        body: &mut ByteStream,
    ) -> Result<()> {
        let opts = PutMultipartOptions {
            attributes,
            ..Default::default()
        };
        let upload = self
            .store()?
            .put_multipart_opts(key, opts)
            .await
            .map_err(|e| self.failed("put", e))?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
        for chunk in first {
            writer.put(chunk);
        }
        loop {
            let next = match writer.wait_for_capacity(PARTS_IN_FLIGHT).await {
                Ok(()) => body.next().await,
                Err(e) => {
                    abort(writer).await;
                    return Err(self.failed("put", e));
                }
            };
            match next {
                Some(Ok(chunk)) => writer.put(chunk),
                Some(Err(e)) => {
                    abort(writer).await;
                    return Err(upload_interrupted(e));
                }
                None => break,
            }
        }
        writer.finish().await.map_err(|e| self.failed("put", e))?;
        Ok(())
    }
}

/// The key of an object path below its instance's folder: `.` is written `..`, and every
/// `/` is written `.0/` (`docs/a.txt` → `docs.0/a..txt`).
///
/// Why: the port lists in bytewise path order (`a`, `a-b`, `a.b`, `a/b`), but S3 servers
/// that keep keys as directory trees (SeaweedFS, for one) list depth first, as if `/` sorted
/// below everything (`a`, `a/b`, `a-b`). With the escape, a folder's name ends with `.0`,
/// which sorts exactly where `/` does (`.` 0x2e < `/` 0x2f < `0` 0x30 becomes `..` < `.0`
/// < `0`), so depth first and bytewise order agree, and every escape is two bytes starting
/// with `.`, so prefixes and `after` bounds translate one to one. It also keeps an object
/// `a` and a folder `a.0` apart on servers that cannot hold a file and a directory of the
/// same name.
pub fn encode(path: &str) -> String {
    let mut out = String::with_capacity(path.len() + 8);
    for c in path.chars() {
        match c {
            '.' => out.push_str(".."),
            '/' => out.push_str(".0/"),
            c => out.push(c),
        }
    }
    out
}

/// The object path of a key written by [`encode`]; `None` for a key it cannot have
/// written.
pub fn decode(key: &str) -> Option<String> {
    let mut out = String::with_capacity(key.len());
    let mut chars = key.chars();
    while let Some(c) = chars.next() {
        match c {
            '.' => match chars.next()? {
                '.' => out.push('.'),
                '0' if chars.next()? == '/' => out.push('/'),
                _ => return None,
            },
            '/' => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

async fn abort(writer: WriteMultipart) {
    if let Err(e) = writer.abort().await {
        tracing::warn!(error = %e, "could not abort an S3 multipart upload");
    }
}

/// List one key under `prefix`: the cheapest request that needs the store, its bucket
/// and the credentials.
async fn list_one(store: &AmazonS3, prefix: &str) -> object_store::Result<()> {
    let opts = PaginatedListOptions {
        max_keys: Some(1),
        ..Default::default()
    };
    store.list_paginated(Some(prefix), opts).await.map(|_| ())
}

/// Whether `e` says the store could not be reached (no connection, or no answer in
/// time), as opposed to an answer refusing the request.
fn unreachable(e: &object_store::Error) -> bool {
    let object_store::Error::Generic { source, .. } = e else {
        return false;
    };
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(source.as_ref());
    while let Some(c) = cause {
        if let Some(http) = c.downcast_ref::<object_store::client::HttpError>() {
            return matches!(
                http.kind(),
                object_store::client::HttpErrorKind::Connect
                    | object_store::client::HttpErrorKind::Timeout
            );
        }
        cause = c.source();
    }
    false
}

/// The port's metadata of an object read with `found` (a `GET` or `HEAD`).
fn meta_of(path: &ObjectPath, found: &GetResult) -> ObjectMeta {
    let content_type = found
        .attributes
        .get(&Attribute::ContentType)
        .map(|v| v.as_ref().trim())
        .filter(|v| !v.is_empty())
        .unwrap_or(DEFAULT_CONTENT_TYPE)
        .to_owned();
    ObjectMeta {
        path: path.clone(),
        size: found.meta.size,
        content_type,
        etag: found
            .meta
            .e_tag
            .as_deref()
            .unwrap_or_default()
            .trim_start_matches("W/")
            .trim_matches('"')
            .to_owned(),
        modified_ms: found.meta.last_modified.timestamp_millis(),
    }
}

fn body_of(found: GetResult) -> ByteStream {
    Box::pin(found.into_stream().map_err(std::io::Error::other))
}

#[async_trait]
impl Lifecycle for S3BlobStore {
    async fn create_instance(&self, instance: &Instance) -> Result<()> {
        let body = PutPayload::from(instance.app.as_str().to_owned());
        self.store()?
            .put(&self.marker(instance.id)?, body)
            .await
            .map_err(|e| self.failed("create_instance", e))?;
        Ok(())
    }

    async fn drop_instance(&self, instance: &Instance) -> Result<()> {
        self.remove(instance.app.as_str(), instance.id).await
    }

    async fn sweep(&self, keep: &Keep) -> Result<usize> {
        let folder = self.raw_key(INSTANCES)?;
        let markers: Vec<_> = self
            .store()?
            .list(Some(&folder))
            .try_collect()
            .await
            .map_err(|e| self.failed("sweep", e))?;
        let mut removed = 0;
        for marker in markers {
            let Some(id) = marker
                .location
                .filename()
                .and_then(|n| n.parse::<i64>().ok())
                .map(InstanceId)
            else {
                continue;
            };
            if keep.keeps(id) {
                continue;
            }
            let app = match self.store()?.get(&marker.location).await {
                Ok(found) => found.bytes().await.map_err(|e| self.failed("sweep", e))?,
                Err(object_store::Error::NotFound { .. }) => continue,
                Err(e) => return Err(self.failed("sweep", e)),
            };
            let app = String::from_utf8_lossy(&app).trim().to_owned();
            tracing::info!(instance = %id, app = %app, "removing the objects of an orphaned storage instance");
            self.remove(&app, id).await?;
            removed += 1;
        }
        Ok(removed)
    }

    async fn ready(&self) -> Result<()> {
        self.ping().await
    }

    fn pool(&self) -> Option<PoolUsage> {
        // The SDK keeps its HTTP connections to itself and tells nothing of them.
        None
    }

    async fn close(&self) -> Result<()> {
        // Every acknowledged write is already in the store; nothing is buffered.
        Ok(())
    }
}

#[async_trait]
impl BlobStore for S3BlobStore {
    async fn put(
        &self,
        instance: &Instance,
        path: &ObjectPath,
        content_type: &str,
        mut body: ByteStream,
    ) -> Result<ObjectMeta> {
        let key = self.key(instance, path)?;
        let mut attributes = Attributes::new();
        attributes.insert(
            Attribute::ContentType,
            AttributeValue::from(content_type.to_owned()),
        );
        // Read up to one part: a body that ends first is one PUT, a larger one becomes a
        // multipart upload that starts with what was read.
        let mut first = Vec::new();
        let mut read = 0;
        let small = loop {
            match body.next().await {
                Some(Ok(chunk)) => {
                    read += chunk.len();
                    first.push(chunk);
                    if read > PART_SIZE {
                        break false;
                    }
                }
                Some(Err(e)) => return Err(upload_interrupted(e)),
                None => break true,
            }
        };
        if small {
            let opts = PutOptions {
                attributes,
                ..Default::default()
            };
            self.store()?
                .put_opts(&key, PutPayload::from_iter(first), opts)
                .await
                .map_err(|e| self.failed("put", e))?;
        } else {
            self.put_multipart(&key, attributes, first, &mut body)
                .await?;
        }
        // S3 answers a PUT with the ETag only; size, type and time come from a HEAD, so
        // the answer equals what `head` says afterwards.
        self.head_key(path, &key).await?.ok_or_else(|| {
            Error::Unavailable("the object was removed while it was being stored".into())
        })
    }

    async fn head(&self, instance: &Instance, path: &ObjectPath) -> Result<Option<ObjectMeta>> {
        self.head_key(path, &self.key(instance, path)?).await
    }

    async fn get(
        &self,
        instance: &Instance,
        path: &ObjectPath,
        range: Option<RangeSpec>,
    ) -> Result<Option<Object>> {
        let key = self.key(instance, path)?;
        let Some(spec) = range else {
            return match self.store()?.get_opts(&key, GetOptions::default()).await {
                Ok(found) => Ok(Some(Object {
                    meta: meta_of(path, &found),
                    range: None,
                    body: body_of(found),
                })),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(self.failed("get", e)),
            };
        };
        // Resolve the range against the version a HEAD sees, then read exactly that
        // version; if it was replaced in between, start over with the new one.
        for _ in 0..5 {
            let Some(meta) = self.head_key(path, &key).await? else {
                return Ok(None);
            };
            let served = spec.resolve(meta.size)?;
            let opts = GetOptions {
                if_match: Some(format!("\"{}\"", meta.etag)),
                range: Some(GetRange::Bounded(served.start..served.end + 1)),
                ..Default::default()
            };
            match self.store()?.get_opts(&key, opts).await {
                Ok(found) => {
                    return Ok(Some(Object {
                        meta: meta_of(path, &found),
                        range: Some(served),
                        body: body_of(found),
                    }));
                }
                Err(object_store::Error::NotFound { .. }) => return Ok(None),
                Err(object_store::Error::Precondition { .. }) => continue,
                Err(e) => return Err(self.failed("get", e)),
            }
        }
        Err(Error::Unavailable(
            "the object keeps changing while being read; try again".into(),
        ))
    }

    async fn delete(&self, instance: &Instance, path: &ObjectPath) -> Result<()> {
        let key = self.key(instance, path)?;
        // S3 deletes missing objects silently; the port says NotFound.
        if self.head_key(path, &key).await?.is_none() {
            return Err(object_missing(&instance.name, path));
        }
        self.store()?
            .delete(&key)
            .await
            .map_err(|e| self.failed("delete", e))
    }

    async fn list(&self, instance: &Instance, query: ListQuery<'_>) -> Result<Vec<ObjectMeta>> {
        let folder = self.folder(instance);
        // S3 lists in UTF-8 byte order, filters by a raw prefix and starts after a raw
        // key: exactly the port's prefix, after and limit. (Through `list_paginated`, not
        // `list_with_offset`: that one takes the prefix as whole path segments, so `a`
        // would not find `a-b`, and has no page size.)
        let prefix = format!("{folder}{}", encode(query.prefix));
        let mut opts = PaginatedListOptions {
            offset: query.after.map(|a| format!("{folder}{}", encode(a))),
            ..Default::default()
        };
        let mut found = Vec::new();
        while found.len() < query.limit {
            opts.max_keys = Some((query.limit - found.len()).min(1000));
            let page = self
                .store
                .list_paginated(Some(&prefix), opts.clone())
                .await
                .map_err(|e| self.failed("list", e))?;
            for meta in page.result.objects {
                let Some(rel) = meta.location.as_ref().strip_prefix(&folder) else {
                    continue;
                };
                if let Some(path) = decode(rel).and_then(|p| p.parse::<ObjectPath>().ok()) {
                    found.push((path, meta.location));
                }
            }
            match page.page_token {
                Some(token) => opts.page_token = Some(token),
                None => break,
            }
        }
        found.truncate(query.limit);
        // The listing has no content types: ask each object, a few at a time, in order.
        // An object removed in between is left out.
        let metas: Vec<Option<ObjectMeta>> = stream::iter(found)
            .map(|(path, key)| async move { self.head_key(&path, &key).await })
            .buffered(HEADS_IN_FLIGHT)
            .try_collect()
            .await?;
        Ok(metas.into_iter().flatten().collect())
    }

    async fn stored_bytes(&self, instance: &Instance) -> Result<u64> {
        // The listing carries sizes: one request per thousand objects, no HEADs.
        let folder = self.folder(instance);
        let mut opts = PaginatedListOptions {
            max_keys: Some(1000),
            ..Default::default()
        };
        let mut total = 0u64;
        loop {
            let page = self
                .store
                .list_paginated(Some(&folder), opts.clone())
                .await
                .map_err(|e| s3_error("list", e))?;
            total += page
                .result
                .objects
                .iter()
                .filter(|m| m.location.as_ref().starts_with(&folder))
                .map(|m| m.size)
                .sum::<u64>();
            match page.page_token {
                Some(token) => opts.page_token = Some(token),
                None => return Ok(total),
            }
        }
    }
}

#[async_trait]
impl Presign for S3BlobStore {
    async fn presign(
        &self,
        instance: &Instance,
        path: &ObjectPath,
        method: PresignMethod,
        expires: Duration,
        _base_url: &str,
    ) -> Result<String> {
        let key = self.key(instance, path)?;
        let method = match method {
            PresignMethod::Get => object_store::signer::Method::GET,
            PresignMethod::Put => object_store::signer::Method::PUT,
        };
        let url = self
            .store()?
            .signed_url(method, &key, expires)
            .await
            .map_err(|e| self.failed("presign", e))?;
        Ok(url.to_string())
    }

    async fn check_presigned(
        &self,
        _instance: &Instance,
        _path: &ObjectPath,
        _method: PresignMethod,
        _expires_at_s: i64,
        _signature: &str,
    ) -> Result<()> {
        Err(Error::Forbidden(
            "this storage keeps its objects on S3 and its pre-signed URLs point at the S3 \
             store itself, not at quintet: ask for a new pre-signed URL and use it as given"
                .into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn keys_keep_order_and_round_trip() {
        let mut paths = vec![
            "b", "a/z", "a-b", "a/b", "a", "ab", "a.b", "é", "Z", "a..b", "a./b", "a/.b", "...",
            "a.0", "a0", "a/b/c", "a/b-c", "a/b.c", "a-/b", "a 0/b",
        ];
        paths.sort();
        let keys: Vec<String> = paths.iter().map(|p| encode(p)).collect();
        let mut bytewise = keys.clone();
        bytewise.sort();
        assert_eq!(keys, bytewise);
        // Depth first, as stores on directory trees list: segment by segment.
        let mut depth_first = keys.clone();
        depth_first.sort_by(|a, b| a.split('/').cmp(b.split('/')));
        assert_eq!(keys, depth_first);
        for (p, k) in paths.iter().zip(&keys) {
            assert_eq!(decode(k).as_deref(), Some(*p));
            for q in &paths {
                assert_eq!(p.starts_with(q), k.starts_with(&encode(q)), "{p} {q}");
            }
        }
        assert_eq!(encode("docs/a.txt"), "docs.0/a..txt");
        for bad in ["a.x", "a.", "a.0", "a.0x", "a/b"] {
            assert_eq!(decode(bad), None, "{bad}");
        }
    }
}
