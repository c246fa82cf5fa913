//! One SQLite database file behind a dedicated writer thread and a pool of readers.
//!
//! # Writes: one thread, group commit
//! Every write is a closure sent to the file's writer thread. The thread takes every closure
//! waiting in its queue (up to [`MAX_BATCH`]), runs each inside its own savepoint of one
//! transaction and commits once. With [`Durability::Full`] it then `fsync`s the WAL file and
//! only then answers the batch's callers; writes that arrive meanwhile wait in the queue and
//! form the next batch. Under load many writes share one commit and one `fsync`, and every
//! acknowledged write is durable. (An earlier design handed the `fsync` to a second thread
//! so that it overlapped with the next batch; on the 2-core benchmark machine the hand-offs
//! cost more CPU than the overlap saved: 27 µs against 23 µs of server CPU per cache PUT.)
//! A closure that fails rolls back to its savepoint and does not disturb the others in its
//! batch.
//!
//! # Reads: pooled connections, no await while holding one
//! [`SqliteDb::read`] runs a closure on tokio's blocking pool with a pooled connection;
//! [`SqliteDb::read_now`] runs it on the calling thread and is meant for point lookups that
//! finish in microseconds. No connection ever crosses an `.await`. WAL mode lets readers
//! run concurrently with the writer and see every committed write.
//!
//! Pooled readers map the file into memory (`mmap_size`), which makes lookups cheap, but
//! every page a mapped reader touches stays resident in the process (and counts in its
//! RSS) until the kernel needs the memory. [`SqliteDb::scan`] is for walks over a whole
//! table (a list, an export): it reads through connections that map nothing and keep a
//! small page cache, so a walk over a database larger than memory leaves the server's
//! footprint where it was; the kernel's page cache, not the process, holds what it read.

use std::{
    panic::{AssertUnwindSafe, catch_unwind},
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    thread,
    time::Duration,
};

use quintet_core::{Error, Result};
use rusqlite::{Connection, OpenFlags};
use tokio::sync::oneshot;

/// SQLite virtual-machine steps between two looks at a bounded read's deadline and
/// cancellation: frequent enough to stop within milliseconds, rare enough to cost nothing.
const PROGRESS_OPS: i32 = 10_000;

/// Most writes committed together in one transaction.
pub const MAX_BATCH: usize = 1024;

/// Page cache of the writer connection, KiB (an upper bound; pages are allocated as used).
const WRITER_CACHE_KIB: i64 = 64 * 1024;

/// Bytes of the file a pooled reader maps into memory.
const READER_MMAP_BYTES: i64 = 256 * 1024 * 1024;

/// Page cache of a scanning connection, KiB: a walk reads each page once, so a small cache
/// loses nothing and bounds the memory a walk holds.
const SCANNER_CACHE_KIB: i64 = 2 * 1024;

/// Idle scanning connections kept open: walks are few at once.
const MAX_IDLE_SCANNERS: usize = 2;

/// How hard a commit tries to reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// The WAL is `fsync`ed before a write is acknowledged (one `fsync` per batch): an
    /// acknowledged write survives power loss.
    Full,
    /// No `fsync`: an acknowledged write survives a crash of the process (`kill -9`) but
    /// not of the machine. For data the operator accepts to lose, such as a cache.
    Normal,
}

/// Options for opening a database file.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// Commit durability.
    pub durability: Durability,
    /// Most idle reader connections kept open.
    pub max_idle_readers: usize,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            durability: Durability::Full,
            max_idle_readers: 8,
        }
    }
}

type Deliver = Box<dyn FnOnce(Result<()>) + Send>;

/// A queued write: run it inside the batch's transaction, or refuse it unrun.
trait Job: Send {
    /// Run the write; answers whether it succeeded and how to report the commit's outcome.
    fn run(self: Box<Self>, conn: &Connection) -> (bool, Deliver);
    /// Answer the caller with `err` without running the write.
    fn fail(self: Box<Self>, err: Error);
}

type WriteJob = Box<dyn Job>;

/// What to do once a write's batch committed (or failed), before its caller is answered.
type AfterCommit = Box<dyn FnOnce() + Send>;

struct TypedJob<T, F> {
    f: F,
    reply: oneshot::Sender<Result<T>>,
    after: Option<AfterCommit>,
}

impl<T, F> Job for TypedJob<T, F>
where
    T: Send + 'static,
    F: FnOnce(&Connection) -> Result<T> + Send + 'static,
{
    fn run(self: Box<Self>, conn: &Connection) -> (bool, Deliver) {
        let Self { f, reply, after } = *self;
        let outcome = match catch_unwind(AssertUnwindSafe(|| f(conn))) {
            Ok(r) => r,
            Err(_) => Err(Error::internal("a write panicked; it was rolled back")),
        };
        let ok = outcome.is_ok();
        let deliver: Deliver = Box::new(move |commit: Result<()>| {
            if let Some(after) = after {
                after();
            }
            let _ = reply.send(commit.and(outcome));
        });
        (ok, deliver)
    }

    fn fail(self: Box<Self>, err: Error) {
        if let Some(after) = self.after {
            after();
        }
        let _ = self.reply.send(Err(err));
    }
}

enum Msg {
    Write(WriteJob),
    Close(oneshot::Sender<()>),
}

/// A SQLite database file with a writer thread and pooled readers; cheap to clone.
#[derive(Debug, Clone)]
pub struct SqliteDb {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    writer: mpsc::Sender<Msg>,
    readers: Mutex<Vec<Connection>>,
    max_idle_readers: usize,
    /// Readers without memory mapping, for [`SqliteDb::scan`].
    scanners: Mutex<Vec<Connection>>,
}

impl SqliteDb {
    /// Open (creating if needed) the database at `path`, bring its schema up to date with
    /// `migrations`, and start its writer thread.
    ///
    /// `migrations[i]` is the SQL that takes the schema from version `i` to `i + 1`; the
    /// version is kept in `PRAGMA user_version`. Migrations only ever get appended.
    pub fn open(path: &Path, migrations: &[&str], options: SqliteOptions) -> Result<Self> {
        let conn = Connection::open(path).map_err(|e| open_error(path, e))?;
        configure_writer(&conn).map_err(|e| open_error(path, e))?;
        migrate(&conn, migrations)?;

        let (tx, rx) = mpsc::channel::<Msg>();
        let name = format!(
            "sqlite-writer-{}",
            path.file_stem().and_then(|s| s.to_str()).unwrap_or("db")
        );
        let wal = match options.durability {
            Durability::Full => Some(WalSync::new(path)),
            Durability::Normal => None,
        };
        thread::Builder::new()
            .name(name)
            .spawn(move || writer_loop(conn, rx, wal))
            .map_err(|e| Error::internal(format!("cannot start the SQLite writer: {e}")))?;

        Ok(Self {
            inner: Arc::new(Inner {
                path: path.to_owned(),
                writer: tx,
                readers: Mutex::new(Vec::new()),
                max_idle_readers: options.max_idle_readers,
                scanners: Mutex::new(Vec::new()),
            }),
        })
    }

    /// The database file's path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Run `f` in a write transaction; resolves once its batch is committed and durable.
    ///
    /// When `f` returns an error, its changes are rolled back and the error is returned;
    /// other writes of the same batch are unaffected.
    pub async fn write<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        self.submit(f, None).await
    }

    /// Like [`SqliteDb::write`], and `after_commit` runs once the batch committed (or
    /// failed) and before the caller is answered, even when the caller stopped waiting:
    /// for caches of what the write changes, which must drop an entry only once no reader
    /// can see the old rows any more.
    pub async fn write_then<T, F, A>(&self, f: F, after_commit: A) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
        A: FnOnce() + Send + 'static,
    {
        self.submit(f, Some(Box::new(after_commit))).await
    }

    async fn submit<T, F>(&self, f: F, after: Option<AfterCommit>) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let (reply, rx) = oneshot::channel::<Result<T>>();
        let job: WriteJob = Box::new(TypedJob { f, reply, after });
        if let Err(mpsc::SendError(Msg::Write(job))) = self.inner.writer.send(Msg::Write(job)) {
            job.fail(closed());
        }
        rx.await.map_err(|_| closed())?
    }

    /// Run `f` with a reader connection on tokio's blocking pool. For scans and anything
    /// that may take more than a few microseconds.
    pub async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || inner.with_reader(f))
            .await
            .map_err(|e| Error::internal(format!("a read task failed: {e}")))?
    }

    /// Like [`SqliteDb::read`], on a connection that does not map the file into memory and
    /// keeps a small page cache: for walks over a whole table (lists, exports), whose pages
    /// would otherwise stay resident in the process (see the module's documentation).
    pub async fn scan<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || inner.with_scanner(f))
            .await
            .map_err(|e| Error::internal(format!("a read task failed: {e}")))?
    }

    /// Like [`SqliteDb::read`] for reads that may scan a whole table: SQLite interrupts `f`
    /// once it has run for `limit` (an [`Error::Invalid`] naming the limit: the request asked
    /// for too much work), or as soon as the caller stops waiting (the client went away and
    /// the request's future was dropped).
    pub async fn read_bounded<T, F>(&self, limit: Duration, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        /// Cancels the read when the waiting future is dropped before it finished.
        struct CancelOnDrop(Arc<AtomicBool>);
        impl Drop for CancelOnDrop {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let cancelled = Arc::new(AtomicBool::new(false));
        let _guard = CancelOnDrop(Arc::clone(&cancelled));
        let deadline = std::time::Instant::now() + limit;
        let inner = Arc::clone(&self.inner);
        let out = tokio::task::spawn_blocking(move || {
            inner.with_reader_mut(|conn| {
                let stop = Arc::clone(&cancelled);
                conn.progress_handler(
                    PROGRESS_OPS,
                    Some(move || {
                        stop.load(Ordering::Relaxed) || std::time::Instant::now() >= deadline
                    }),
                )
                .map_err(sql_error)?;
                let out = f(conn);
                conn.progress_handler(0, None::<fn() -> bool>)
                    .map_err(sql_error)?;
                out
            })
        })
        .await
        .map_err(|e| Error::internal(format!("a read task failed: {e}")))?;
        match out {
            Err(_) if std::time::Instant::now() >= deadline => Err(Error::Invalid(format!(
                "the query ran longer than the {} s a query may take; narrow the selector, \
                 use an index (POST …/_index) or page with a range on an indexed field",
                limit.as_secs()
            ))),
            other => other,
        }
    }

    /// Run `f` with a reader connection on the calling thread. Only for point lookups by
    /// key, which finish in microseconds; anything longer belongs in [`SqliteDb::read`].
    pub fn read_now<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        self.inner.with_reader(f)
    }

    /// Finish every queued write, checkpoint the WAL and stop the writer thread. Writes
    /// sent afterwards fail with [`Error::Unavailable`].
    pub async fn close(&self) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        if self.inner.writer.send(Msg::Close(tx)).is_err() {
            return Ok(()); // already closed
        }
        let _ = rx.await;
        if let Ok(mut readers) = self.inner.readers.lock() {
            readers.clear();
        }
        if let Ok(mut scanners) = self.inner.scanners.lock() {
            scanners.clear();
        }
        Ok(())
    }
}

impl Inner {
    fn with_reader<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        self.with_reader_mut(|c| f(c))
    }

    fn with_reader_mut<T>(&self, f: impl FnOnce(&mut Connection) -> Result<T>) -> Result<T> {
        let pooled = self.readers.lock().ok().and_then(|mut pool| pool.pop());
        let mut conn = match pooled {
            Some(c) => c,
            None => open_reader(&self.path)?,
        };
        let result = f(&mut conn);
        if let Ok(mut pool) = self.readers.lock()
            && pool.len() < self.max_idle_readers
        {
            pool.push(conn);
        }
        result
    }

    fn with_scanner<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let pooled = self.scanners.lock().ok().and_then(|mut pool| pool.pop());
        let conn = match pooled {
            Some(c) => c,
            None => open_scanner(&self.path)?,
        };
        let result = f(&conn);
        if let Ok(mut pool) = self.scanners.lock()
            && pool.len() < MAX_IDLE_SCANNERS
        {
            pool.push(conn);
        }
        result
    }
}

fn closed() -> Error {
    Error::Unavailable("the store is shutting down; retry on another node or later".into())
}

fn open_error(path: &Path, e: rusqlite::Error) -> Error {
    Error::internal(format!(
        "cannot open SQLite database {}: {e}",
        path.display()
    ))
}

/// Map an engine error to an internal error; callers map constraint violations they
/// expect (duplicate keys and the like) themselves, before reaching for this. A full disk
/// is [`Error::InsufficientStorage`] (507). A missing
/// table is the one engine error a client can cause: every instance table exists from
/// its instance's creation to its destruction, so the instance was destroyed while the
/// request ran, and that is a 404.
pub fn sql_error(e: rusqlite::Error) -> Error {
    if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull) {
        return Error::InsufficientStorage(quintet_core::error::DISK_FULL.to_owned());
    }
    if is_missing_table(&e) {
        tracing::debug!(error = %e, "a table is missing: its instance was destroyed");
        return Error::not_found(INSTANCE_GONE);
    }
    Error::internal(format!("sqlite: {e}"))
}

/// The message of the error [`sql_error`] makes of a missing table.
pub const INSTANCE_GONE: &str = "the instance was destroyed while this request ran";

/// Whether `e` says a table is gone (its instance was destroyed meanwhile).
pub fn is_missing_table(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(_, Some(msg)) if msg.starts_with("no such table"))
}

fn configure_writer(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(Duration::from_secs(30))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // SQLite's commit does not wait for the disk: with `Durability::Full` the writer makes
    // the WAL durable itself, once per batch, before any caller is answered. Checkpoints
    // still `fsync` the WAL before copying it into the database, so NORMAL never corrupts
    // the file.
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // A large page cache keeps the B-trees that writes land in (index tables take inserts
    // at random positions) in memory; the default 2 MB thrashes on a million-entry index.
    conn.pragma_update(None, "cache_size", -WRITER_CACHE_KIB)?;
    conn.set_prepared_statement_cache_capacity(128);
    Ok(())
}

fn open_reader(path: &Path) -> Result<Connection> {
    open_read_only(path, READER_MMAP_BYTES, None)
}

fn open_scanner(path: &Path) -> Result<Connection> {
    open_read_only(path, 0, Some(SCANNER_CACHE_KIB))
}

/// A reader connection mapping `mmap_bytes` of the file, with a page cache of `cache_kib`
/// (SQLite's default when `None`).
fn open_read_only(path: &Path, mmap_bytes: i64, cache_kib: Option<i64>) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| open_error(path, e))?;
    let setup = || -> rusqlite::Result<()> {
        conn.busy_timeout(Duration::from_secs(30))?;
        conn.pragma_update(None, "query_only", "ON")?;
        conn.pragma_update(None, "mmap_size", mmap_bytes)?;
        if let Some(kib) = cache_kib {
            conn.pragma_update(None, "cache_size", -kib)?;
        }
        conn.set_prepared_statement_cache_capacity(128);
        Ok(())
    };
    setup().map_err(|e| open_error(path, e))?;
    Ok(conn)
}

fn migrate(conn: &Connection, migrations: &[&str]) -> Result<()> {
    let current: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(sql_error)?;
    let current = usize::try_from(current).unwrap_or(0);
    if current > migrations.len() {
        return Err(Error::internal(format!(
            "the database has schema version {current}, newer than this quintet understands \
             ({}); upgrade quintet",
            migrations.len()
        )));
    }
    for (i, sql) in migrations.iter().enumerate().skip(current) {
        conn.execute_batch("BEGIN IMMEDIATE").map_err(sql_error)?;
        let step = conn
            .execute_batch(sql)
            .and_then(|()| conn.pragma_update(None, "user_version", (i + 1) as i64));
        match step {
            Ok(()) => conn.execute_batch("COMMIT").map_err(sql_error)?,
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                return Err(Error::internal(format!(
                    "schema migration {} failed: {e}",
                    i + 1
                )));
            }
        }
    }
    Ok(())
}

/// The `fsync` of a database's WAL file, which makes every commit before it durable.
struct WalSync {
    wal: PathBuf,
    dir: PathBuf,
    /// Opened at the first `fsync`: the WAL exists once something was committed.
    file: Option<std::fs::File>,
}

impl WalSync {
    fn new(db: &Path) -> Self {
        Self {
            wal: PathBuf::from(format!("{}-wal", db.display())),
            dir: crate::datadir::dir_of(db),
            file: None,
        }
    }

    fn sync(&mut self) -> Result<()> {
        let f = match &mut self.file {
            Some(f) => f,
            None => {
                let opened = std::fs::File::open(&self.wal)?;
                // The WAL's directory entry must reach the disk too, once.
                crate::datadir::sync_dir(&self.dir)?;
                self.file.insert(opened)
            }
        };
        f.sync_data()?;
        Ok(())
    }
}

fn writer_loop(conn: Connection, rx: mpsc::Receiver<Msg>, mut wal: Option<WalSync>) {
    let mut batch: Vec<WriteJob> = Vec::with_capacity(64);
    while let Ok(first) = rx.recv() {
        let mut close = None;
        match first {
            Msg::Write(job) => batch.push(job),
            Msg::Close(reply) => close = Some(reply),
        }
        while close.is_none() && batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(Msg::Write(job)) => batch.push(job),
                Ok(Msg::Close(reply)) => close = Some(reply),
                Err(_) => break,
            }
        }
        if !batch.is_empty() {
            let (delivers, mut commit, durable_needed) = run_batch(&conn, &mut batch);
            if let (true, Ok(()), Some(wal)) = (durable_needed, &commit, wal.as_mut())
                && let Err(e) = wal.sync()
            {
                tracing::error!(error = %e, "fsync of the WAL failed; its writes are reported failed");
                commit = Err(e);
            }
            for deliver in delivers {
                deliver(commit.clone());
            }
        }
        if let Some(reply) = close {
            if let Err(e) = conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)") {
                tracing::warn!(error = %e, "WAL checkpoint at close failed");
            }
            drop(conn);
            let _ = reply.send(());
            return;
        }
    }
}

/// Run a batch in one transaction; returns its callers' answers, the commit's outcome and
/// whether anything was committed (and so needs an `fsync` before the answers go out).
fn run_batch(conn: &Connection, batch: &mut Vec<WriteJob>) -> (Vec<Deliver>, Result<()>, bool) {
    if let Err(e) = exec_cached(conn, "BEGIN IMMEDIATE") {
        let err = sql_error(e);
        tracing::error!(error = %err, "cannot begin a write transaction");
        for job in batch.drain(..) {
            job.fail(err.clone());
        }
        return (Vec::new(), Ok(()), false);
    }
    // A lone write needs no savepoint: if it fails, the whole transaction is rolled back.
    let single = batch.len() == 1;
    let mut delivers: Vec<Deliver> = Vec::with_capacity(batch.len());
    let mut any_ok = false;
    for job in batch.drain(..) {
        if !single && let Err(e) = exec_cached(conn, "SAVEPOINT w") {
            job.fail(sql_error(e));
            continue;
        }
        let (ok, deliver) = job.run(conn);
        any_ok |= ok;
        if !single {
            let end = if ok {
                exec_cached(conn, "RELEASE w")
            } else {
                exec_cached(conn, "ROLLBACK TO w").and_then(|()| exec_cached(conn, "RELEASE w"))
            };
            if let Err(e) = end {
                tracing::error!(error = %e, "ending a savepoint failed");
            }
        }
        delivers.push(deliver);
    }
    let end = if any_ok { "COMMIT" } else { "ROLLBACK" };
    let commit = exec_cached(conn, end).map_err(sql_error);
    if let Err(e) = &commit {
        tracing::error!(error = %e, "commit failed; the batch was rolled back");
        let _ = conn.execute_batch("ROLLBACK");
    }
    let durable_needed = any_ok && commit.is_ok();
    (delivers, commit, durable_needed)
}

/// Run a statement without parameters through the connection's statement cache: the
/// transaction-control statements of every batch are parsed once, not once per write.
fn exec_cached(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

/// Whether `e` is a UNIQUE or PRIMARY KEY violation (the row exists already).
pub fn is_unique_violation(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error(),
        Some(err) if err.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
            || err.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(dir: &Path) -> SqliteDb {
        SqliteDb::open(
            &dir.join("t.db"),
            &["CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER NOT NULL) STRICT;"],
            SqliteOptions::default(),
        )
        .unwrap()
    }

    /// A read that never ends on its own.
    const ENDLESS: &str = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) \
                           SELECT count(*) FROM r";

    #[tokio::test]
    async fn scans_map_nothing_and_keep_a_small_cache_while_reads_map_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path());
        db.write(|c| {
            c.execute("INSERT INTO t VALUES ('a', 1)", [])
                .map_err(sql_error)?;
            Ok(())
        })
        .await
        .unwrap();
        let settings = |c: &Connection| -> Result<(i64, i64, i64)> {
            let get = |p: &str| c.pragma_query_value(None, p, |r| r.get::<_, i64>(0));
            let v = c
                .query_row("SELECT v FROM t WHERE k = 'a'", [], |r| r.get(0))
                .map_err(sql_error)?;
            Ok((
                get("mmap_size").map_err(sql_error)?,
                get("cache_size").map_err(sql_error)?,
                v,
            ))
        };
        assert_eq!(
            db.scan(settings).await.unwrap(),
            (0, -SCANNER_CACHE_KIB, 1),
            "a scan sees committed rows without mapping the file"
        );
        let (mmap, _, v) = db.read(settings).await.unwrap();
        assert_eq!((mmap, v), (READER_MMAP_BYTES, 1));
    }

    #[tokio::test]
    async fn a_bounded_read_is_stopped_at_its_limit() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path());
        let err = db
            .read_bounded(Duration::from_millis(50), |c| {
                c.query_row(ENDLESS, [], |r| r.get::<_, i64>(0))
                    .map_err(sql_error)
            })
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::Invalid(m) if m.contains("ran longer than the 0 s")),
            "{err:?}"
        );
        // The reader is fine afterwards.
        let n = db
            .read_bounded(Duration::from_secs(5), |c| {
                c.query_row("SELECT 41 + 1", [], |r| r.get::<_, i64>(0))
                    .map_err(sql_error)
            })
            .await
            .unwrap();
        assert_eq!(n, 42);
    }

    #[tokio::test]
    async fn a_bounded_read_stops_when_its_caller_goes_away() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path());
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let read = db.read_bounded(Duration::from_secs(3600), move |c| {
            let r = c.query_row(ENDLESS, [], |r| r.get::<_, i64>(0));
            let _ = done_tx.send(r.is_err());
            Ok(())
        });
        // The client goes away: the request's future is dropped while the read runs.
        assert!(
            tokio::time::timeout(Duration::from_millis(50), read)
                .await
                .is_err()
        );
        let interrupted = tokio::task::spawn_blocking(move || done_rx.recv().unwrap())
            .await
            .unwrap();
        assert!(interrupted, "the endless read ended, interrupted");
    }

    async fn insert(db: &SqliteDb, k: &str, v: i64) -> Result<()> {
        let k = k.to_owned();
        db.write(move |c| {
            c.execute(
                "INSERT INTO t (k, v) VALUES (?1, ?2)",
                rusqlite::params![k, v],
            )
            .map_err(|e| {
                if is_unique_violation(&e) {
                    Error::conflict("exists")
                } else {
                    sql_error(e)
                }
            })?;
            Ok(())
        })
        .await
    }

    async fn count(db: &SqliteDb) -> i64 {
        db.read(|c| {
            c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
                .map_err(sql_error)
        })
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn a_failed_write_in_a_batch_leaves_the_others_applied() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path());
        insert(&db, "a", 1).await.unwrap();
        // Many concurrent writes land in shared batches; the duplicates fail alone.
        let mut tasks = Vec::new();
        for i in 0..200 {
            let db = db.clone();
            let key = if i % 10 == 0 {
                "a".to_owned()
            } else {
                format!("k{i}")
            };
            tasks.push(tokio::spawn(async move { insert(&db, &key, i).await }));
        }
        let mut conflicts = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(()) => {}
                Err(Error::Conflict(_)) => conflicts += 1,
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(conflicts, 20);
        assert_eq!(count(&db).await, 181);
    }

    #[tokio::test]
    async fn a_failing_closure_rolls_back_its_own_changes() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path());
        let res: Result<()> = db
            .write(|c| {
                c.execute("INSERT INTO t (k, v) VALUES ('x', 1)", [])
                    .map_err(sql_error)?;
                Err(Error::invalid("changed my mind"))
            })
            .await;
        assert!(matches!(res, Err(Error::Invalid(_))));
        assert_eq!(count(&db).await, 0);
    }

    #[tokio::test]
    async fn a_panicking_closure_is_an_error_not_a_dead_writer() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path());
        let res: Result<()> = db.write(|_| panic!("boom")).await;
        assert!(matches!(res, Err(Error::Internal(_))));
        insert(&db, "after", 1).await.unwrap();
        assert_eq!(count(&db).await, 1);
    }

    #[tokio::test]
    async fn writes_survive_close_and_reopen_and_writes_after_close_fail() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path());
        insert(&db, "kept", 7).await.unwrap();
        db.close().await.unwrap();
        assert!(matches!(
            insert(&db, "late", 1).await,
            Err(Error::Unavailable(_))
        ));
        let db = open(dir.path());
        let v: i64 = db
            .read_now(|c| {
                c.query_row("SELECT v FROM t WHERE k = 'kept'", [], |r| r.get(0))
                    .map_err(sql_error)
            })
            .unwrap();
        assert_eq!(v, 7);
    }

    #[tokio::test]
    async fn both_durabilities_acknowledge_every_write_and_close_cleanly() {
        for durability in [Durability::Full, Durability::Normal] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("t.db");
            let opts = SqliteOptions {
                durability,
                ..SqliteOptions::default()
            };
            let migrations = ["CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER NOT NULL) STRICT;"];
            let db = SqliteDb::open(&path, &migrations, opts.clone()).unwrap();
            let mut tasks = Vec::new();
            for i in 0..100 {
                let db = db.clone();
                tasks.push(tokio::spawn(async move {
                    insert(&db, &format!("k{i}"), i).await
                }));
            }
            for t in tasks {
                t.await.unwrap().unwrap();
            }
            // A write whose closure fails is answered with its own error, not a sync error.
            assert!(matches!(
                insert(&db, "k1", 0).await,
                Err(Error::Conflict(_))
            ));
            db.close().await.unwrap();
            let db = SqliteDb::open(&path, &migrations, opts).unwrap();
            assert_eq!(count(&db).await, 100, "{durability:?}");
        }
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        SqliteDb::open(&path, &["SELECT 1;", "SELECT 1;"], SqliteOptions::default()).unwrap();
        let err = SqliteDb::open(&path, &["SELECT 1;"], SqliteOptions::default()).unwrap_err();
        assert!(err.to_string().contains("newer"), "{err}");
    }
}
