//! The storage service on the filesystem, with its metadata in SQLite.
//!
//! ```text
//! <data-dir>/storage.db        per instance: table o<id> (path → blob, size, type, etag, mtime),
//!                              o<id>_inline (path → content of objects up to 64 KiB) and
//!                              o<id>_ev (the event log: uploads and removals, see `events`)
//! <data-dir>/storage/<id>/     the instance's blob files, one per large object version
//! ```
//!
//! Pre-signed URLs are signed with keys derived from the master key
//! ([`quintet_core::keyring`]), not kept in the data directory.
//!
//! Small objects are kept inline in the database with their row. A larger upload streams
//! into a new blob file under a random name (hashing it for the ETag),
//! fsyncs the file and the directory, then commits the object's row, which is the moment
//! the new version becomes visible; the previous blob is removed after the commit. A failed
//! or abandoned upload removes its blob and never touched the row, so the previous version
//! stays. Paths are keys in the table, never file names, so nothing a client sends can name
//! a file outside the instance, `a` and `a/b` coexist, and listing is an index range scan.
//! Blobs left behind by a crash (written but not committed, or replaced but not yet
//! removed) are collected by `sweep` at start-up.
//!
//! Recently downloaded inline objects are also held in memory ([`crate::hot`], 32 MiB):
//! downloading a popular small object again reads no SQLite page. Every write of a path
//! (upload, removal) drops it there once committed, before it is acknowledged.
//!
//! Every upload and removal appends its event to the bucket's event log in the transaction
//! that commits the object's row ([`events`]), and tells the feed listeners once committed.

mod blobs;
mod events;

pub(crate) use blobs::is_blob_name;

use std::{
    collections::HashSet,
    fs,
    path::Path,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use async_trait::async_trait;
use quintet_core::{
    Clock, Error, Instance, InstanceId, Result,
    object::{ObjectPath, PresignMethod, RangeSpec, UrlSigner, presign::Grant},
    ports::{
        Keep, Lifecycle, PoolUsage,
        storage::{
            BlobStore, ByteStream, Bytes, ListQuery, Object, ObjectMeta, Presign, object_missing,
            upload_interrupted,
        },
        storage_events::ObjectEventKind,
    },
};
use rusqlite::{Connection, OptionalExtension, params};

use crate::{
    changelog::{Listeners, tell},
    disk::DiskSpace,
    hot::{Held, HotCache},
    instance_store::{InstanceDirs, TableLifecycle, blocking},
    sqlite::{SqliteDb, SqliteOptions, is_missing_table, sql_error},
};

/// Bytes of inline objects held in memory at most (every instance together).
pub const HOT_OBJECTS_BYTES: usize = 32 << 20;

/// Object metadata's file in the data directory.
pub const DB: &str = "storage.db";
/// The directory of blob files in the data directory.
pub const DIR: &str = "storage";
/// Where versions before the master key kept the pre-signing key (removed at start).
pub const KEY: &str = "presign.key";

/// Objects of every storage instance: blob files per instance directory, metadata in
/// `storage.db`.
#[derive(Debug, Clone)]
pub struct FsBlobStore {
    dirs: InstanceDirs,
    tables: TableLifecycle,
    signer: UrlSigner,
    clock: Arc<dyn Clock>,
    hot: Arc<HotCache<HotObject>>,
    /// Admits uploads while the disk has room; deletions are not asked.
    disk: Arc<DiskSpace>,
    /// Buckets whose event log is known to exist (created, or written once by this
    /// process); the others get theirs created by their next write.
    logged: Arc<Mutex<HashSet<InstanceId>>>,
    /// Told after every commit that recorded events.
    listeners: Listeners,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// An inline object held in memory: its metadata and its whole content.
#[derive(Debug, Clone)]
struct HotObject(Arc<(ObjectMeta, Bytes)>);

impl Held for HotObject {
    fn held_bytes(&self) -> usize {
        let (meta, data) = &*self.0;
        data.len() + meta.path.as_str().len() + meta.content_type.len() + meta.etag.len()
    }
}

/// An instance's objects (`blob` is NULL for small objects kept inline) and the content
/// of its inline objects.
fn ddl(table: &str) -> String {
    format!(
        "CREATE TABLE \"{table}\" (\
           path         TEXT PRIMARY KEY, \
           blob         TEXT, \
           size         INTEGER NOT NULL, \
           content_type TEXT NOT NULL, \
           etag         TEXT NOT NULL, \
           modified_ms  INTEGER NOT NULL\
         ) STRICT, WITHOUT ROWID; \
         CREATE TABLE \"{table}_inline\" (\
           path TEXT PRIMARY KEY, \
           data BLOB NOT NULL\
         ) STRICT, WITHOUT ROWID; {}",
        events::ddl(table)
    )
}

const COLUMNS: &str = "path, blob, size, content_type, etag, modified_ms";

/// How many times a read retries when the blob it looked up was replaced before it could
/// be opened.
const READ_ATTEMPTS: usize = 5;

impl FsBlobStore {
    /// Open the store in `data_dir` (see the module documentation for the layout), with
    /// `clock` as the time of writes and of URL expiry, signing URLs with `signer`.
    pub fn open(data_dir: &Path, clock: Arc<dyn Clock>, signer: UrlSigner) -> Result<Self> {
        let db = SqliteDb::open(&data_dir.join(DB), &[], SqliteOptions::default())?;
        // Versions before the master key kept the signing key here, where a copy of the data
        // directory could forge URLs; URLs it signed stop working.
        let legacy = data_dir.join(KEY);
        if legacy.exists() {
            crate::datadir::remove_file_if_present(&legacy)?;
            tracing::warn!(
                "removed presign.key: pre-signed URLs are now signed with a key derived from \
                 the master key, and URLs handed out before this start no longer work"
            );
        }
        Ok(Self {
            dirs: InstanceDirs::open(data_dir.join(DIR))?,
            tables: TableLifecycle::new(db, "o", ddl),
            signer,
            clock,
            hot: Arc::new(HotCache::new(HOT_OBJECTS_BYTES)),
            disk: Arc::new(DiskSpace::unchecked(data_dir)),
            logged: Arc::default(),
            listeners: Arc::default(),
        })
    }

    /// The same store with uploads admitted by `disk` (see [`crate::disk`]).
    pub fn with_disk(mut self, disk: Arc<DiskSpace>) -> Self {
        self.disk = disk;
        self
    }

    fn db(&self) -> &SqliteDb {
        self.tables.db()
    }

    /// Run `f` on the metadata's writer thread, so no object is committed (and no blob
    /// replaced by a commit is removed) while it runs: a backup captures the rows and
    /// their blobs together (see [`crate::backup`]).
    pub(crate) async fn with_writes_held<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce() -> Result<T> + Send + 'static,
    {
        self.db().write(move |_| f()).await
    }

    /// The row of `path`; with `data`, also the content of an inline object.
    fn lookup(&self, instance: &Instance, path: &ObjectPath, data: bool) -> Result<Option<Row>> {
        let table = self.tables.table(instance.id);
        let sql = if data {
            // A correlated subquery rather than a join: SQLite re-prepares the join form on
            // every run (its plan depends on the bound path), costing a parse per download.
            format!(
                "SELECT o.path, o.blob, o.size, o.content_type, o.etag, o.modified_ms, \
                 (SELECT i.data FROM \"{table}_inline\" i WHERE i.path = o.path) \
                 FROM \"{table}\" o WHERE o.path = ?1"
            )
        } else {
            format!("SELECT {COLUMNS} FROM \"{table}\" WHERE path = ?1")
        };
        let path = path.as_str();
        self.db().read_now(|c| {
            c.prepare_cached(&sql)
                .and_then(|mut st| st.query_row([path], row).optional())
                .map_err(|e| map_sql(e, instance))
        })
    }

    /// Commit `meta` as the current version of its path, its content in blob file `blob`
    /// or `inline`; returns the blob file it replaced, if any.
    async fn commit(
        &self,
        instance: &Instance,
        meta: &ObjectMeta,
        blob: Option<String>,
        inline: Option<Bytes>,
    ) -> Result<Option<String>> {
        let table = self.tables.table(instance.id);
        let meta = meta.clone();
        let gone = gone(instance);
        let forget = self.forget(instance.id, &meta.path);
        let create_log = !lock(&self.logged).contains(&instance.id);
        let old = self
            .db()
            .write_then(
                move |c| {
                    let sql = |e| map_sql_gone(e, &gone);
                    let path = meta.path.as_str();
                    let old: Option<String> = c
                        .prepare_cached(&format!("SELECT blob FROM \"{table}\" WHERE path = ?1"))
                        .and_then(|mut st| st.query_row([path], |r| r.get(0)).optional())
                        .map_err(sql)?
                        .flatten();
                    c.prepare_cached(&format!(
                        "INSERT INTO \"{table}\" ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
                     ON CONFLICT (path) DO UPDATE SET blob = excluded.blob, \
                     size = excluded.size, content_type = excluded.content_type, \
                     etag = excluded.etag, modified_ms = excluded.modified_ms"
                    ))
                    .and_then(|mut st| {
                        st.execute(params![
                            path,
                            blob,
                            i64::try_from(meta.size).unwrap_or(i64::MAX),
                            meta.content_type,
                            meta.etag,
                            meta.modified_ms
                        ])
                    })
                    .map_err(sql)?;
                    match inline {
                        Some(data) => c
                            .prepare_cached(&format!(
                                "INSERT INTO \"{table}_inline\" (path, data) VALUES (?1, ?2) \
                             ON CONFLICT (path) DO UPDATE SET data = excluded.data"
                            ))
                            .and_then(|mut st| st.execute(params![path, &data[..]])),
                        None => c
                            .prepare_cached(&format!(
                                "DELETE FROM \"{table}_inline\" WHERE path = ?1"
                            ))
                            .and_then(|mut st| st.execute([path])),
                    }
                    .map_err(sql)?;
                    let event = ObjectEventKind::written(&meta);
                    events::record(c, &table, create_log, path, &event, meta.modified_ms)?;
                    Ok(old)
                },
                forget,
            )
            .await?;
        lock(&self.logged).insert(instance.id);
        Ok(old)
    }

    /// What a write of `path` runs once committed: drop the object from the held ones, and
    /// tell the feed listeners that the bucket's log may have grown.
    fn forget(&self, instance: InstanceId, path: &ObjectPath) -> impl FnOnce() + Send + 'static {
        let (hot, path) = (Arc::clone(&self.hot), path.as_str().to_owned());
        let listeners = Arc::clone(&self.listeners);
        move || {
            hot.invalidate(instance, [path.as_str()]);
            tell(&listeners, instance);
        }
    }

    /// Remove blob files of live instances that no row references (left by a crash).
    fn collect_garbage(&self, live: &[InstanceId]) -> Result<usize> {
        let mut removed = 0;
        for &id in live {
            let dir = self.dirs.dir(id);
            let Ok(entries) = fs::read_dir(&dir) else {
                continue;
            };
            let sql = format!(
                "SELECT blob FROM \"{}\" WHERE blob IS NOT NULL",
                self.tables.table(id)
            );
            let referenced: HashSet<String> = match self.db().read_now(|c| {
                let mut st = c.prepare(&sql).map_err(sql_error)?;
                st.query_map([], |r| r.get::<_, String>(0))
                    .map_err(sql_error)?
                    .collect::<rusqlite::Result<HashSet<String>>>()
                    .map_err(sql_error)
            }) {
                Ok(names) => names,
                Err(_) => continue, // no table: the instance holds nothing yet
            };
            for entry in entries.flatten() {
                let name = entry.file_name();
                let Some(name) = name.to_str() else { continue };
                if blobs::is_blob_name(name) && !referenced.contains(name) {
                    blobs::remove_quietly(&entry.path());
                    removed += 1;
                }
            }
        }
        Ok(removed)
    }
}

/// An object's row as stored.
struct Row {
    path: String,
    /// The blob file; `None` for an inline object.
    blob: Option<String>,
    size: i64,
    content_type: String,
    etag: String,
    modified_ms: i64,
    /// An inline object's content, when it was asked for.
    data: Option<Vec<u8>>,
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok(Row {
        path: r.get(0)?,
        blob: r.get(1)?,
        size: r.get(2)?,
        content_type: r.get(3)?,
        etag: r.get(4)?,
        modified_ms: r.get(5)?,
        data: if r.as_ref().column_count() > 6 {
            r.get(6)?
        } else {
            None
        },
    })
}

impl Row {
    /// The metadata, its path validated again.
    fn meta(&self) -> Result<ObjectMeta> {
        let path = self.path.parse::<ObjectPath>().map_err(|e| {
            Error::internal(format!(
                "stored object path {:?} is invalid: {e}",
                self.path
            ))
        })?;
        Ok(ObjectMeta {
            path,
            size: u64::try_from(self.size).unwrap_or(0),
            content_type: self.content_type.clone(),
            etag: self.etag.clone(),
            modified_ms: self.modified_ms,
        })
    }
}

/// An inline object read whole from `data`, or the part `range` asks for.
fn inline_object(meta: ObjectMeta, data: &Bytes, range: Option<RangeSpec>) -> Result<Object> {
    let range = range.map(|r| r.resolve(meta.size)).transpose()?;
    let (start, len) = match range {
        Some(r) => (r.start, r.len()),
        None => (0, meta.size),
    };
    let part = usize::try_from(start)
        .ok()
        .zip(usize::try_from(start + len).ok())
        .and_then(|(from, to)| data.get(from..to))
        .map(|s| data.slice_ref(s))
        .ok_or_else(|| {
            Error::internal(format!(
                "inline object {} is shorter than its size",
                meta.path
            ))
        })?;
    Ok(Object {
        meta,
        range,
        body: blobs::once(part),
    })
}

fn gone(instance: &Instance) -> Error {
    Error::not_found(format!(
        "storage instance \"{}\" does not exist any more",
        instance.name
    ))
}

/// An engine error, where a missing table means the instance was destroyed meanwhile.
fn map_sql(e: rusqlite::Error, instance: &Instance) -> Error {
    map_sql_gone(e, &gone(instance))
}

fn map_sql_gone(e: rusqlite::Error, gone: &Error) -> Error {
    if is_missing_table(&e) {
        gone.clone()
    } else {
        sql_error(e)
    }
}

fn missing_object(instance: &Instance, path: &ObjectPath) -> Error {
    object_missing(&instance.name, path)
}

fn list_rows(
    c: &Connection,
    table: &str,
    query: ListQuery<'_>,
    instance: &Instance,
) -> Result<Vec<ObjectMeta>> {
    // Start at the later of the prefix (inclusive) and `after` (exclusive), so a page
    // costs its own rows, not those before it; stop at the first path past the prefix.
    let (bound, op) = match query.after {
        Some(after) if after >= query.prefix => (after, ">"),
        _ => (query.prefix, ">="),
    };
    let sql = format!("SELECT {COLUMNS} FROM \"{table}\" WHERE path {op} ?1 ORDER BY path");
    let mut st = c.prepare_cached(&sql).map_err(|e| map_sql(e, instance))?;
    let mut rows = st.query([bound]).map_err(sql_error)?;
    let mut out = Vec::new();
    while out.len() < query.limit {
        let Some(r) = rows.next().map_err(sql_error)? else {
            break;
        };
        let row = row(r).map_err(sql_error)?;
        if !row.path.starts_with(query.prefix) {
            break;
        }
        out.push(row.meta()?);
    }
    Ok(out)
}

#[async_trait]
impl Lifecycle for FsBlobStore {
    async fn create_instance(&self, instance: &Instance) -> Result<()> {
        self.disk.admit()?;
        self.tables.create(instance.id).await?;
        lock(&self.logged).insert(instance.id);
        let (dirs, id) = (self.dirs.clone(), instance.id);
        blocking(move || {
            let dir = dirs.create(id)?;
            if let Some(root) = dir.parent() {
                crate::datadir::sync_dir(root)?;
            }
            Ok(())
        })
        .await
    }

    async fn drop_instance(&self, instance: &Instance) -> Result<()> {
        let dropped = self.tables.drop(instance.id).await;
        // Forgotten even when the drop failed: what is held may be gone in part.
        self.hot.forget_instance(instance.id);
        lock(&self.logged).remove(&instance.id);
        dropped?;
        let (dirs, id) = (self.dirs.clone(), instance.id);
        blocking(move || dirs.remove(id)).await
    }

    async fn ready(&self) -> Result<()> {
        self.disk.ready()
    }

    async fn sweep(&self, keep: &Keep) -> Result<usize> {
        let tables = self.tables.sweep(keep).await;
        self.hot.retain_instances(|i| keep.keeps(i));
        lock(&self.logged).retain(|i| keep.keeps(*i));
        let tables = tables?;
        let (this, keep) = (self.clone(), keep.clone());
        let dirs = blocking(move || {
            let dirs = this.dirs.sweep(&keep)?;
            let live: Vec<InstanceId> = keep.listed().collect();
            let blobs = this.collect_garbage(&live)?;
            if blobs > 0 {
                tracing::warn!(blobs, "removed blob files no object referenced");
            }
            Ok(dirs)
        })
        .await?;
        Ok(tables.max(dirs))
    }

    fn pool(&self) -> Option<PoolUsage> {
        // Files of the node's own: no engine connections.
        None
    }

    async fn close(&self) -> Result<()> {
        self.db().close().await
    }
}

#[async_trait]
impl BlobStore for FsBlobStore {
    async fn put(
        &self,
        instance: &Instance,
        path: &ObjectPath,
        content_type: &str,
        body: ByteStream,
    ) -> Result<ObjectMeta> {
        self.disk.admit()?;
        let dir = self.dirs.dir(instance.id);
        let name = blobs::new_name()?;
        let received = blobs::receive(&dir, &name, body)
            .await
            .map_err(|e| match e {
                blobs::WriteError::Body(e) => upload_interrupted(e),
                blobs::WriteError::Io(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    gone(instance)
                }
                blobs::WriteError::Io(e) => Error::io("writing a blob", &e),
            })?;
        // From here on the upload completes even if the request is dropped, so that no
        // finished blob is left unreferenced.
        let (this, instance, path, content_type) = (
            self.clone(),
            instance.clone(),
            path.clone(),
            content_type.to_owned(),
        );
        tokio::spawn(async move {
            let blob_path = dir.join(&name); // the writer removes it if it fails
            let written = match received.finish().await {
                Ok(w) => w,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(gone(&instance)),
                Err(e) => return Err(Error::io("writing a blob", &e)),
            };
            let meta = ObjectMeta {
                path,
                size: written.size,
                content_type,
                etag: written.etag,
                modified_ms: this.clock.now_ms(),
            };
            let blob = written.inline.is_none().then_some(name);
            match this.commit(&instance, &meta, blob, written.inline).await {
                Ok(old) => {
                    if let Some(old) = old {
                        let old = dir.join(old);
                        let _ = blocking(move || {
                            blobs::remove_quietly(&old);
                            Ok(())
                        })
                        .await;
                    }
                    Ok(meta)
                }
                Err(e) => {
                    let _ = blocking(move || {
                        blobs::remove_quietly(&blob_path);
                        Ok(())
                    })
                    .await;
                    Err(e)
                }
            }
        })
        .await
        .map_err(|e| Error::internal(format!("an upload task failed: {e}")))?
    }

    async fn head(&self, instance: &Instance, path: &ObjectPath) -> Result<Option<ObjectMeta>> {
        if let Ok(held) = self.hot.get(instance.id, path.as_str()) {
            return Ok(Some(held.0.0.clone()));
        }
        self.lookup(instance, path, false)?
            .map(|row| row.meta())
            .transpose()
    }

    async fn get(
        &self,
        instance: &Instance,
        path: &ObjectPath,
        range: Option<RangeSpec>,
    ) -> Result<Option<Object>> {
        let miss = match self.hot.get(instance.id, path.as_str()) {
            Ok(held) => {
                let (meta, data) = &*held.0;
                return inline_object(meta.clone(), data, range).map(Some);
            }
            Err(miss) => miss,
        };
        let dir = self.dirs.dir(instance.id);
        for _ in 0..READ_ATTEMPTS {
            let Some(row) = self.lookup(instance, path, true)? else {
                return Ok(None);
            };
            let meta = row.meta()?;
            let blob = match (row.data, row.blob) {
                (Some(data), _) => {
                    let data = Bytes::from(data);
                    let object = inline_object(meta.clone(), &data, range)?;
                    let held = HotObject(Arc::new((meta, data)));
                    self.hot.fill(instance.id, path.as_str(), &held, miss);
                    return Ok(Some(object));
                }
                (None, Some(blob)) => blob,
                (None, None) => {
                    return Err(Error::internal(format!(
                        "object {path} has neither a blob nor inline content"
                    )));
                }
            };
            let range = range.map(|r| r.resolve(meta.size)).transpose()?;
            let (start, len) = match range {
                Some(r) => (r.start, r.len()),
                None => (0, meta.size),
            };
            match blobs::read(dir.join(&blob), start, len).await {
                Ok(body) => return Ok(Some(Object { meta, range, body })),
                // Replaced or removed between the lookup and the open: look again.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::internal(format!("reading blob {blob}: {e}"))),
            }
        }
        Err(Error::Unavailable(format!(
            "object {:?} is being replaced too often to be read; retry",
            path.as_str()
        )))
    }

    async fn delete(&self, instance: &Instance, path: &ObjectPath) -> Result<()> {
        let table = self.tables.table(instance.id);
        let (gone, missing) = (gone(instance), missing_object(instance, path));
        let key = path.as_str().to_owned();
        let forget = self.forget(instance.id, path);
        let create_log = !lock(&self.logged).contains(&instance.id);
        let now_ms = self.clock.now_ms();
        let blob = self
            .db()
            .write_then(
                move |c| {
                    let blob = c
                        .prepare_cached(&format!(
                            "DELETE FROM \"{table}\" WHERE path = ?1 RETURNING blob"
                        ))
                        .and_then(|mut st| {
                            st.query_row([&key], |r| r.get::<_, Option<String>>(0))
                                .optional()
                        })
                        .map_err(|e| map_sql_gone(e, &gone))?
                        .ok_or(missing)?;
                    c.prepare_cached(&format!("DELETE FROM \"{table}_inline\" WHERE path = ?1"))
                        .and_then(|mut st| st.execute([&key]))
                        .map_err(|e| map_sql_gone(e, &gone))?;
                    let event = ObjectEventKind::Removed;
                    events::record(c, &table, create_log, &key, &event, now_ms)?;
                    Ok(blob)
                },
                forget,
            )
            .await?;
        lock(&self.logged).insert(instance.id);
        let Some(blob) = blob else {
            return Ok(()); // an inline object: nothing on disk
        };
        let blob = self.dirs.dir(instance.id).join(blob);
        blocking(move || {
            blobs::remove_quietly(&blob);
            Ok(())
        })
        .await
    }

    async fn list(&self, instance: &Instance, query: ListQuery<'_>) -> Result<Vec<ObjectMeta>> {
        let table = self.tables.table(instance.id);
        let (prefix, after, limit) = (
            query.prefix.to_owned(),
            query.after.map(str::to_owned),
            query.limit,
        );
        let instance = instance.clone();
        self.db()
            .read(move |c| {
                let query = ListQuery {
                    prefix: &prefix,
                    after: after.as_deref(),
                    limit,
                };
                list_rows(c, &table, query, &instance)
            })
            .await
    }

    async fn stored_bytes(&self, instance: &Instance) -> Result<u64> {
        let table = self.tables.table(instance.id);
        self.db()
            .read(move |c| {
                let sum: i64 = c
                    .query_row(
                        &format!("SELECT COALESCE(SUM(size), 0) FROM \"{table}\""),
                        [],
                        |r| r.get(0),
                    )
                    .map_err(sql_error)?;
                Ok(u64::try_from(sum).unwrap_or(0))
            })
            .await
    }
}

#[async_trait]
impl Presign for FsBlobStore {
    async fn presign(
        &self,
        instance: &Instance,
        path: &ObjectPath,
        method: PresignMethod,
        expires: Duration,
        base_url: &str,
    ) -> Result<String> {
        let now_s = self.clock.now_ms().div_euclid(1000);
        let grant = Grant {
            method,
            instance: instance.id,
            path,
            expires_at_s: now_s
                .saturating_add(i64::try_from(expires.as_secs()).unwrap_or(i64::MAX)),
        };
        Ok(self.signer.url(base_url, instance, &grant))
    }

    async fn check_presigned(
        &self,
        instance: &Instance,
        path: &ObjectPath,
        method: PresignMethod,
        expires_at_s: i64,
        signature: &str,
    ) -> Result<()> {
        let grant = Grant {
            method,
            instance: instance.id,
            path,
            expires_at_s,
        };
        self.signer.verify(&grant, signature, self.clock.now_ms())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
