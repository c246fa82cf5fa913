//! Backups of a data directory: a consistent copy of every store while the server keeps
//! serving, with a manifest written last ([`manifest`]).
//!
//! A backup is taken in two steps. [`Source::capture`] fixes the point in time: it is quick
//! (it copies no content) and the caller runs it while no instance is being created or
//! destroyed, so the registry and the stores agree. [`Captured::write`] then copies what was
//! captured, while writes go on, hashes every file and writes the manifest. How each store
//! is captured, so that what is copied is exactly its state at the point:
//!
//! - SQLite files (`registry.db`, `data.db`, `queue.db`, `storage.db`): a read transaction
//!   is opened on each; SQLite's online backup copies that transaction's snapshot, page by
//!   page, while the writer commits to the WAL (readers never block it).
//! - `cache.log`: the log's writer thread answers with the file and the end of its records
//!   between two batches; that prefix holds every answered write and is never changed
//!   (later writes append after it; a compaction writes a new file).
//! - Search indexes: tantivy's files are written once and never changed, and `meta.json`
//!   (replaced atomically) names the committed ones. The capture reads `meta.json`, takes
//!   every file it names (a hard link, or an open file), and reads `meta.json` again: if it
//!   changed, a commit or merge may have removed a file, and the capture starts over.
//! - Storage blobs: written once under fresh names, never changed. The capture runs on the
//!   metadata's writer thread (no object is committed meanwhile), opens its read
//!   transaction there and takes every blob a row names: a replaced blob is removed only
//!   after the commit that replaced it, which cannot happen before the capture ends.
//!
//! "Takes" a file: a hard link into the backup when it is on the same file system (the
//! file cannot change: it is only ever removed), else an open file, copied in the second
//! step. Nothing is ever copied from a file that is being written.

pub mod manifest;

use std::{
    collections::BTreeSet,
    fs::{self, File},
    io,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use quintet_core::{Error, Result};
use rusqlite::{Connection, OpenFlags};

use crate::{cache::EmbeddedCache, datadir, storage::FsBlobStore};
pub use manifest::{FileEntry, MANIFEST, Manifest, RestoreError, VerifyError, restore, verify};

/// Files of the data directory a backup leaves out: the lock, the running server's
/// address, and what SQLite and the cache log keep beside their files while open.
const SKIPPED: &[&str] = &["LOCK", "server.json"];

/// What a backup is copied from: the data directory, and the running stores that must be
/// asked for their consistent point (`None` when the store is not open, e.g. on a stopped
/// node: the directory is locked and nothing changes).
#[derive(Debug, Clone)]
pub struct Source {
    root: PathBuf,
    /// Paths inside the data directory that are not part of it (the backups directory).
    exclude: Vec<PathBuf>,
    cache: Option<Arc<EmbeddedCache>>,
    storage: Option<Arc<FsBlobStore>>,
}

/// How far a backup is, for a progress bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// `"copy"` or `"hash"`.
    pub phase: &'static str,
    /// Bytes done in this phase.
    pub done: u64,
    /// Bytes in all.
    pub total: u64,
}

/// One captured file, not yet copied.
#[derive(Debug)]
enum Piece {
    /// A SQLite database in an open read transaction, copied with the online backup.
    Sqlite { rel: String, conn: Connection },
    /// The first `len` bytes of an open file.
    Prefix {
        rel: String,
        file: Arc<File>,
        len: u64,
    },
    /// A file already linked into the backup.
    Linked { rel: String, len: u64 },
    /// A small file's content, read at the capture.
    Bytes { rel: String, bytes: Vec<u8> },
}

impl Piece {
    fn rel(&self) -> &str {
        match self {
            Piece::Sqlite { rel, .. }
            | Piece::Prefix { rel, .. }
            | Piece::Linked { rel, .. }
            | Piece::Bytes { rel, .. } => rel,
        }
    }

    fn len(&self) -> u64 {
        match self {
            Piece::Sqlite { conn, .. } => sqlite_bytes(conn).unwrap_or(0),
            Piece::Prefix { len, .. } | Piece::Linked { len, .. } => *len,
            Piece::Bytes { bytes, .. } => bytes.len() as u64,
        }
    }
}

/// A backup whose point in time is fixed: [`Captured::write`] copies it.
#[derive(Debug)]
pub struct Captured {
    dest: PathBuf,
    created_ms: i64,
    pieces: Vec<Piece>,
    dirs: BTreeSet<String>,
}

fn io_error(what: &Path, e: &io::Error) -> Error {
    if e.kind() == io::ErrorKind::StorageFull || e.kind() == io::ErrorKind::QuotaExceeded {
        return Error::InsufficientStorage(format!(
            "the disk holding {} is full: the backup was stopped; free some space or choose \
             another place",
            what.display()
        ));
    }
    Error::internal(format!("backup: {}: {e}", what.display()))
}

fn sql(path: &Path) -> impl Fn(rusqlite::Error) -> Error + '_ {
    move |e| Error::internal(format!("backup: {}: {e}", path.display()))
}

/// Bytes of a database as its connection sees it (page count times page size).
fn sqlite_bytes(conn: &Connection) -> rusqlite::Result<u64> {
    let pages: i64 = conn.pragma_query_value(None, "page_count", |r| r.get(0))?;
    let size: i64 = conn.pragma_query_value(None, "page_size", |r| r.get(0))?;
    Ok(u64::try_from(pages * size).unwrap_or(0))
}

/// A connection to `path` in a read transaction: its snapshot is the state now.
fn read_snapshot(path: &Path) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(sql(path))?;
    conn.busy_timeout(Duration::from_secs(30))
        .map_err(sql(path))?;
    conn.pragma_update(None, "query_only", "ON")
        .map_err(sql(path))?;
    // A read transaction starts at its first read.
    conn.execute_batch("BEGIN; SELECT count(*) FROM sqlite_master;")
        .map_err(sql(path))?;
    Ok(conn)
}

/// Take `from` into the backup as `rel`: a hard link when the file system allows, else an
/// open file. `Ok(None)`: the file is gone.
fn take(from: &Path, dest: &Path, rel: &str) -> Result<Option<Piece>> {
    let to = dest.join(rel);
    match fs::hard_link(from, &to) {
        Ok(()) => {
            let len = fs::metadata(&to).map_err(|e| io_error(&to, &e))?.len();
            return Ok(Some(Piece::Linked {
                rel: rel.to_owned(),
                len,
            }));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound && !to.parent().is_some_and(Path::exists) => {
            return Err(io_error(&to, &e));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(_) => {}
    }
    match File::open(from) {
        Ok(file) => {
            let len = file.metadata().map_err(|e| io_error(from, &e))?.len();
            Ok(Some(Piece::Prefix {
                rel: rel.to_owned(),
                file: Arc::new(file),
                len,
            }))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error(from, &e)),
    }
}

impl Source {
    /// The data directory at `root`, with the running cache and storage (if open).
    pub fn new(
        root: &Path,
        cache: Option<Arc<EmbeddedCache>>,
        storage: Option<Arc<FsBlobStore>>,
    ) -> Self {
        Self {
            root: root.to_owned(),
            exclude: Vec::new(),
            cache,
            storage,
        }
    }

    /// Leave `path` out (the backups directory, when it lies inside the data directory).
    pub fn excluding(mut self, path: &Path) -> Self {
        self.exclude.push(path.to_owned());
        self
    }

    /// The data directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn excluded(&self, path: &Path) -> bool {
        let canonical = fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
        self.exclude.iter().any(|x| {
            let x = fs::canonicalize(x).unwrap_or_else(|_| x.clone());
            canonical == x
        })
    }

    /// Fix the backup's point in time and create `dest` (which must not exist; its parent
    /// must). Quick: no content is copied, files are linked or opened. Run it while no
    /// instance is created or destroyed.
    pub async fn capture(&self, dest: &Path) -> Result<Captured> {
        fs::create_dir(dest).map_err(|e| match e.kind() {
            io::ErrorKind::AlreadyExists => {
                Error::conflict(format!("{} exists already", dest.display()))
            }
            _ => io_error(dest, &e),
        })?;
        let created_ms = quintet_core::Clock::now_ms(&quintet_core::SystemClock);
        let mut captured = Captured {
            dest: dest.to_owned(),
            created_ms,
            pieces: Vec::new(),
            dirs: BTreeSet::new(),
        };
        // Storage first: its capture holds uploads' commits, briefly.
        self.capture_storage(&mut captured).await?;
        let (this, mut captured) = (self.clone(), captured);
        let mut captured = tokio::task::spawn_blocking(move || {
            this.capture_files(&mut captured)?;
            this.capture_search(&mut captured)?;
            Ok::<_, Error>(captured)
        })
        .await
        .map_err(|e| Error::internal(format!("backup capture: {e}")))??;
        self.capture_cache(&mut captured).await?;
        Ok(captured)
    }

    /// The SQLite files (but storage's) and the small files at the top of the directory.
    fn capture_files(&self, captured: &mut Captured) -> Result<()> {
        let entries = fs::read_dir(&self.root).map_err(|e| io_error(&self.root, &e))?;
        let mut names: Vec<(String, PathBuf, bool)> = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io_error(&self.root, &e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let is_file = entry.file_type().is_ok_and(|t| t.is_file());
            names.push((name, entry.path(), is_file));
        }
        names.sort();
        for (name, path, is_file) in names {
            let skip = !is_file
                || SKIPPED.contains(&name.as_str())
                || name == datadir::CACHE
                || name == crate::storage::DB
                || name.ends_with("-wal")
                || name.ends_with("-shm")
                || name.ends_with("-journal")
                || name.ends_with(".tmp")
                || name.ends_with(".compact")
                || self.excluded(&path);
            if skip {
                continue;
            }
            if name.ends_with(".db") {
                captured.pieces.push(Piece::Sqlite {
                    rel: name,
                    conn: read_snapshot(&path)?,
                });
            } else {
                match fs::read(&path) {
                    Ok(bytes) => captured.pieces.push(Piece::Bytes { rel: name, bytes }),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io_error(&path, &e)),
                }
            }
        }
        Ok(())
    }

    /// The cache log's prefix of answered writes.
    async fn capture_cache(&self, captured: &mut Captured) -> Result<()> {
        let rel = datadir::CACHE.to_owned();
        let snapshot = match &self.cache {
            Some(cache) => cache.log_snapshot().await?,
            None => None,
        };
        let (file, len) = match snapshot {
            Some(s) => s,
            None => {
                // Not open here: the directory is locked (a stopped node), or the cache lives
                // elsewhere and a log left here is not the node's.
                if self.cache.is_some() {
                    return Ok(());
                }
                let path = self.root.join(&rel);
                match File::open(&path) {
                    Ok(f) => {
                        let len = f.metadata().map_err(|e| io_error(&path, &e))?.len();
                        (Arc::new(f), len)
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                    Err(e) => return Err(io_error(&path, &e)),
                }
            }
        };
        captured.pieces.push(Piece::Prefix { rel, file, len });
        Ok(())
    }

    /// Every search index's committed files.
    fn capture_search(&self, captured: &mut Captured) -> Result<()> {
        let root = self.root.join(datadir::SEARCH);
        let entries = match fs::read_dir(&root) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_error(&root, &e)),
        };
        let mut ids: Vec<String> = entries
            .filter_map(std::result::Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .collect();
        ids.sort();
        for id in ids {
            let rel_dir = format!("{}/{id}", datadir::SEARCH);
            fs::create_dir_all(captured.dest.join(&rel_dir))
                .map_err(|e| io_error(&captured.dest, &e))?;
            captured.dirs.insert(rel_dir.clone());
            capture_index(&root.join(&id), &rel_dir, captured)?;
        }
        Ok(())
    }

    /// Storage's metadata and every blob its rows name, with commits held meanwhile.
    async fn capture_storage(&self, captured: &mut Captured) -> Result<()> {
        let db = self.root.join(crate::storage::DB);
        if !db.exists() {
            return Ok(());
        }
        let (root, dest) = (self.root.clone(), captured.dest.clone());
        let capture = move || storage_snapshot(&root, &dest);
        let (conn, blobs, dirs) = match &self.storage {
            Some(storage) => storage.with_writes_held(capture).await?,
            None => tokio::task::spawn_blocking(capture)
                .await
                .map_err(|e| Error::internal(format!("backup capture: {e}")))??,
        };
        captured.pieces.push(Piece::Sqlite {
            rel: crate::storage::DB.to_owned(),
            conn,
        });
        captured.pieces.extend(blobs);
        captured.dirs.extend(dirs);
        Ok(())
    }
}

/// `storage.db` in a read transaction, every blob its rows name taken into `dest`, and the
/// instance directories.
fn storage_snapshot(root: &Path, dest: &Path) -> Result<(Connection, Vec<Piece>, Vec<String>)> {
    let path = root.join(crate::storage::DB);
    let conn = read_snapshot(&path)?;
    let tables: Vec<String> = {
        let mut st = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name GLOB 'o[0-9]*'")
            .map_err(sql(&path))?;
        st.query_map([], |r| r.get::<_, String>(0))
            .map_err(sql(&path))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(sql(&path))?
            .into_iter()
            .filter(|t| t[1..].bytes().all(|b| b.is_ascii_digit()))
            .collect()
    };
    let (mut pieces, mut dirs) = (Vec::new(), Vec::new());
    for table in tables {
        let id = &table[1..];
        let rel_dir = format!("{}/{id}", crate::storage::DIR);
        fs::create_dir_all(dest.join(&rel_dir)).map_err(|e| io_error(dest, &e))?;
        dirs.push(rel_dir.clone());
        let blobs: Vec<String> = {
            let mut st = conn
                .prepare(&format!(
                    "SELECT blob FROM \"{table}\" WHERE blob IS NOT NULL"
                ))
                .map_err(sql(&path))?;
            st.query_map([], |r| r.get::<_, String>(0))
                .map_err(sql(&path))?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(sql(&path))?
        };
        for blob in blobs {
            if !crate::storage::is_blob_name(&blob) {
                continue;
            }
            let rel = format!("{rel_dir}/{blob}");
            match take(&root.join(&rel), dest, &rel)? {
                Some(piece) => pieces.push(piece),
                None => {
                    return Err(Error::internal(format!(
                        "backup: blob {rel} named by a committed object is missing"
                    )));
                }
            }
        }
    }
    Ok((conn, pieces, dirs))
}

/// The committed files of the tantivy index in `dir`, taken into the backup under
/// `rel_dir`, with a `.managed.json` listing them (what tantivy may collect later).
fn capture_index(dir: &Path, rel_dir: &str, captured: &mut Captured) -> Result<()> {
    let meta_path = dir.join("meta.json");
    for _attempt in 0..100 {
        let before = match fs::read(&meta_path) {
            Ok(b) => b,
            // An index created but never opened has no meta.json yet: nothing to copy.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_error(&meta_path, &e)),
        };
        let meta = tantivy::Index::open_in_dir(dir)
            .and_then(|index| index.load_metas())
            .map_err(|e| Error::internal(format!("backup: {}: {e}", dir.display())))?;
        let mut files: Vec<String> = meta
            .list_segment_files()
            .into_iter()
            .filter_map(|p| p.to_str().map(ToOwned::to_owned))
            .collect();
        files.sort();
        let mut taken = Vec::new();
        for name in &files {
            let rel = format!("{rel_dir}/{name}");
            if let Some(piece) = take(&dir.join(name), &captured.dest, &rel)? {
                taken.push((name.clone(), piece));
            }
        }
        let after = fs::read(&meta_path).map_err(|e| io_error(&meta_path, &e))?;
        if after != before {
            // A commit or merge meanwhile: what was taken may not be what `before` names.
            for (_, piece) in taken {
                if let Piece::Linked { rel, .. } = piece {
                    let _ = fs::remove_file(captured.dest.join(rel));
                }
            }
            continue;
        }
        let mut managed: Vec<String> = taken.iter().map(|(n, _)| n.clone()).collect();
        managed.push("meta.json".into());
        managed.sort();
        let mut managed_json =
            serde_json::to_vec(&managed).map_err(|e| Error::internal(format!("backup: {e}")))?;
        managed_json.push(b'\n');
        captured.pieces.extend(taken.into_iter().map(|(_, p)| p));
        captured.pieces.push(Piece::Bytes {
            rel: format!("{rel_dir}/meta.json"),
            bytes: before,
        });
        captured.pieces.push(Piece::Bytes {
            rel: format!("{rel_dir}/.managed.json"),
            bytes: managed_json,
        });
        return Ok(());
    }
    Err(Error::Unavailable(format!(
        "the search index in {} changed on every attempt to capture it; retry the backup",
        dir.display()
    )))
}

impl Captured {
    /// Bytes the backup will hold.
    pub fn total_bytes(&self) -> u64 {
        self.pieces.iter().map(Piece::len).sum()
    }

    /// Where the backup is written.
    pub fn dest(&self) -> &Path {
        &self.dest
    }

    /// Copy what was captured into the backup, hash every file and write the manifest
    /// last. Blocking: run it on a thread of its own. `progress` is told how far it is.
    ///
    /// The work runs on threads of its own at a lower CPU priority ([`BACKUP_NICE`] more
    /// than the caller's), so that on a busy machine the backup yields the processor to
    /// the requests the server is answering; the caller's thread (often one of tokio's
    /// blocking pool) keeps its priority.
    pub fn write(self, progress: &(dyn Fn(Progress) + Sync)) -> Result<Manifest> {
        std::thread::scope(|s| {
            std::thread::Builder::new()
                .name("backup".into())
                .spawn_scoped(s, move || {
                    lower_priority();
                    self.write_here(progress)
                })
                .map_err(|e| Error::internal(format!("cannot start the backup thread: {e}")))?
                .join()
                .unwrap_or_else(|_| Err(Error::internal("the backup thread panicked")))
        })
    }

    fn write_here(self, progress: &(dyn Fn(Progress) + Sync)) -> Result<Manifest> {
        let total = self.total_bytes();
        let done = AtomicU64::new(0);
        let mut rels = Vec::with_capacity(self.pieces.len());
        for piece in self.pieces {
            let rel = piece.rel().to_owned();
            let to = self.dest.join(&rel);
            let len = piece.len();
            match piece {
                Piece::Sqlite { conn, .. } => copy_sqlite(&conn, &to)?,
                Piece::Prefix { file, len, .. } => copy_prefix(&file, len, &to)?,
                Piece::Linked { .. } => {}
                Piece::Bytes { bytes, .. } => {
                    write_synced(&to, &bytes).map_err(|e| io_error(&to, &e))?;
                }
            }
            let now = done.fetch_add(len, Ordering::Relaxed) + len;
            progress(Progress {
                phase: "copy",
                done: now,
                total,
            });
            rels.push(rel);
        }
        rels.sort();
        rels.dedup();
        let hashed = AtomicU64::new(0);
        let hash_total = AtomicU64::new(0);
        let entries = std::sync::Mutex::new(Vec::with_capacity(rels.len()));
        let dest = &self.dest;
        parallel(&rels, |rel: &String| -> Result<()> {
            let path = dest.join(rel);
            let (size, sha256) = manifest::hash_file(&path).map_err(|e| io_error(&path, &e))?;
            hash_total.fetch_add(size, Ordering::Relaxed);
            let now = hashed.fetch_add(size, Ordering::Relaxed) + size;
            progress(Progress {
                phase: "hash",
                done: now.min(total.max(now)),
                total: total.max(now),
            });
            entries
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(FileEntry {
                    path: rel.clone(),
                    size,
                    sha256,
                });
            Ok(())
        })?;
        let mut files = entries
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        files.sort_by(|a, b| a.path.cmp(&b.path));
        // Every directory's entries reach the disk before the manifest says it is complete.
        let mut dirs: BTreeSet<PathBuf> = self.dirs.iter().map(|d| dest.join(d)).collect();
        for f in &files {
            if let Some(parent) = dest.join(&f.path).parent() {
                dirs.insert(parent.to_path_buf());
            }
        }
        for d in &dirs {
            datadir::sync_dir(d).map_err(|e| io_error(d, &e))?;
        }
        let manifest = Manifest {
            format: manifest::FORMAT.to_owned(),
            version: manifest::VERSION,
            created: quintet_core::clock::format_rfc3339_ms(self.created_ms),
            quintet: env!("CARGO_PKG_VERSION").to_owned(),
            bytes: files.iter().map(|f| f.size).sum(),
            dirs: self.dirs.into_iter().collect(),
            files,
        };
        manifest.write(dest).map_err(|e| io_error(dest, &e))?;
        Ok(manifest)
    }
}

/// How much lower than its caller's the CPU priority of a backup's threads is (nice
/// values; 19 at most). At nice +10 a busy thread gets about a tenth of the processor
/// time of a busy thread at +0.
pub const BACKUP_NICE: i32 = 10;

/// Lower the calling thread's CPU priority by [`BACKUP_NICE`]. On Linux the nice value
/// belongs to the thread (`setpriority(PRIO_PROCESS, 0, …)` changes the caller only), and
/// the threads it starts inherit it. Best effort: a failure leaves the priority as it was.
fn lower_priority() {
    let Ok(now) = rustix::process::getpriority_process(None) else {
        return;
    };
    let lower = (now + BACKUP_NICE).min(19);
    if let Err(e) = rustix::process::setpriority_process(None, lower) {
        tracing::debug!(error = %e, "cannot lower the backup's CPU priority");
    }
}

/// Copy the snapshot of `conn`'s read transaction into a new database file `to`.
fn copy_sqlite(conn: &Connection, to: &Path) -> Result<()> {
    let mut out = Connection::open(to).map_err(sql(to))?;
    {
        let backup = rusqlite::backup::Backup::new(conn, &mut out).map_err(sql(to))?;
        // One step: every page under the read transaction already open on `conn`.
        loop {
            match backup.step(-1).map_err(sql(to))? {
                rusqlite::backup::StepResult::Done => break,
                rusqlite::backup::StepResult::More => {}
                rusqlite::backup::StepResult::Busy | rusqlite::backup::StepResult::Locked => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                _ => {}
            }
        }
    }
    // The copy carries the source's WAL mode in its header; leave it one self-contained
    // file (nothing in a WAL beside it), synced.
    out.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
        .map_err(sql(to))?;
    out.close().map_err(|(_, e)| sql(to)(e))?;
    let wal = PathBuf::from(format!("{}-wal", to.display()));
    let _ = datadir::remove_file_if_present(&wal);
    let _ = datadir::remove_file_if_present(&PathBuf::from(format!("{}-shm", to.display())));
    File::open(to)
        .and_then(|f| f.sync_all())
        .map_err(|e| io_error(to, &e))
}

/// Copy the first `len` bytes of `file` into a new file `to`, synced.
fn copy_prefix(file: &File, len: u64, to: &Path) -> Result<()> {
    use std::io::{Read, Seek, Write};
    let mut out = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(to)
        .map_err(|e| io_error(to, &e))?;
    // A handle of our own: the shared one's position is not ours to move.
    let mut input = file.try_clone().map_err(|e| io_error(to, &e))?;
    input
        .seek(io::SeekFrom::Start(0))
        .map_err(|e| io_error(to, &e))?;
    let mut limited = (&mut input).take(len);
    let copied = io::copy(&mut limited, &mut out).map_err(|e| io_error(to, &e))?;
    if copied != len {
        return Err(Error::internal(format!(
            "backup: {} ended after {copied} of {len} bytes",
            to.display()
        )));
    }
    out.flush()
        .and_then(|()| out.sync_all())
        .map_err(|e| io_error(to, &e))
}

fn write_synced(to: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let mut out = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(to)?;
    out.write_all(bytes)?;
    out.sync_all()
}

/// Run `f` on every item, on as many threads as the machine has cores (at most 4); the
/// first error wins.
pub(crate) fn parallel<T: Sync, E: Send>(
    items: &[T],
    f: impl Fn(&T) -> std::result::Result<(), E> + Sync,
) -> std::result::Result<(), E> {
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZero::get)
        .clamp(1, 4);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failed = std::sync::atomic::AtomicBool::new(false);
    let first: std::sync::Mutex<Option<E>> = std::sync::Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    if failed.load(Ordering::Relaxed) {
                        return;
                    }
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else { return };
                    if let Err(e) = f(item) {
                        failed.store(true, Ordering::Relaxed);
                        let mut slot = first
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        slot.get_or_insert(e);
                        return;
                    }
                }
            });
        }
    });
    match first
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
    {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
