//! The durable cache's append-only log (`cache.log`).
//!
//! # Writes: one thread, group commit
//! Every write is a closure run on the log's writer thread with an [`Appender`]: it plans
//! against the index, appends its records and applies itself to the index. The thread takes
//! every closure waiting (up to [`MAX_BATCH`]), runs them, writes their records with one
//! `pwrite` and one `fdatasync`, and only then answers the batch's callers. A write is a few
//! dozen bytes more than its key and value, where a B-tree rewrites whole pages; and the
//! file is zero-filled [`PREALLOC`] bytes ahead of its end, so a commit's `fdatasync` seldom
//! has a new file size to write as well.
//!
//! # Reads
//! The index says where each value lies; a value not held in memory is one `pread` of the
//! file. Readers take the file together with the place, under the index lock, so a
//! compaction that moves both at once never splits them.
//!
//! # Start-up
//! The records are replayed into the index in order. The first record that is cut short or
//! fails its checksum (a write torn by a crash: never acknowledged, since acknowledgement
//! waits for the `fdatasync`) ends the log; everything after it is zeroed, so nothing
//! written there before can later be read as a record.
//!
//! # Compaction
//! Once the records of removed or overwritten entries take more than [`COMPACT_MIN_DEAD`]
//! bytes and more than the live ones, a background thread copies the live entries, as of a
//! point between two batches, into `cache.log.compact` while writes go on. The writer thread
//! then appends the records written since that point as they are, `fsync`s, renames the copy
//! over the log and moves every entry's place in the index.

use std::{
    fs::{self, File, OpenOptions},
    io::{BufWriter, Write},
    os::unix::fs::FileExt,
    panic::{AssertUnwindSafe, catch_unwind},
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

use quintet_core::{Error, Result, cache::CacheValue};
use tokio::sync::oneshot;

use crate::{
    datadir::{dir_of, remove_file_if_present, sync_dir},
    disk::DiskSpace,
};

use super::{
    index::{Index, Logged, Span, Victim, entry_size},
    index_key::IndexKey,
    lock_index,
    record::{Decoded, HEADER, Record, decode},
};

/// Most writes committed together.
pub(crate) const MAX_BATCH: usize = 1024;

/// Zeroed bytes kept allocated beyond the log's end.
pub(crate) const PREALLOC: u64 = 8 << 20;

/// Dead bytes (records of removed or overwritten entries) before a compaction is considered;
/// it starts once they are also more than the live bytes.
pub(crate) const COMPACT_MIN_DEAD: u64 = 64 << 20;

/// Wait after a failed compaction before trying again.
const COMPACT_RETRY: Duration = Duration::from_secs(60);

/// Bytes read or copied at a time.
const CHUNK: usize = 1 << 20;

static ZEROS: [u8; 64 << 10] = [0; 64 << 10];

/// The durable cache's log: a writer thread and the file values are read from.
#[derive(Debug)]
pub(crate) struct Log {
    tx: mpsc::Sender<Msg>,
    reader: Arc<Mutex<Arc<File>>>,
}

/// Where a write's records go: the batch's buffer, and where in the file it will land.
#[derive(Debug)]
pub(crate) struct Appender {
    buf: Vec<u8>,
    base: u64,
}

impl Appender {
    /// Append `record`; returns the offset its value will have in the log.
    pub(crate) fn append(&mut self, record: &Record<'_>) -> u64 {
        let at = self.base + self.buf.len() as u64;
        at + record.encode(&mut self.buf) as u64
    }
}

type Deliver = Box<dyn FnOnce(Result<()>) + Send>;

/// A queued write: run it with the batch's appender, or refuse it unrun.
trait Job: Send {
    fn run(self: Box<Self>, app: &mut Appender) -> (bool, Deliver);
    fn fail(self: Box<Self>, err: Error);
}

struct TypedJob<T, F> {
    f: F,
    reply: oneshot::Sender<Result<T>>,
}

impl<T, F> Job for TypedJob<T, F>
where
    T: Send + 'static,
    F: FnOnce(&mut Appender) -> Result<T> + Send + 'static,
{
    fn run(self: Box<Self>, app: &mut Appender) -> (bool, Deliver) {
        let Self { f, reply } = *self;
        let outcome = catch_unwind(AssertUnwindSafe(|| f(app)))
            .unwrap_or_else(|_| Err(Error::internal("a cache write panicked")));
        let ok = outcome.is_ok();
        let deliver: Deliver = Box::new(move |commit: Result<()>| {
            let _ = reply.send(commit.and(outcome));
        });
        (ok, deliver)
    }

    fn fail(self: Box<Self>, err: Error) {
        let _ = self.reply.send(Err(err));
    }
}

enum Msg {
    Write(Box<dyn Job>),
    /// Compact now (whatever the dead bytes), answering once done.
    Compact(oneshot::Sender<Result<()>>),
    /// The background copy of a compaction finished.
    Copied(Result<LiveCopy>),
    /// Stop the thread; answered once every earlier write is done.
    Close(Option<oneshot::Sender<()>>),
    /// The file and the end of its last record, between two batches: every write
    /// answered before lies within (for a backup, see [`crate::backup`]).
    Snapshot(oneshot::Sender<(Arc<File>, u64)>),
}

impl Log {
    /// Open (creating if needed) the log at `path`, replay it into `index` and start the
    /// writer thread.
    pub(crate) fn open(
        path: &Path,
        index: Arc<Mutex<Index>>,
        disk: Arc<DiskSpace>,
    ) -> Result<Self> {
        let dir = dir_of(path);
        remove_file_if_present(&compact_path(path))?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        sync_dir(&dir)?;
        let replayed = {
            let mut ix = lock_index(&index);
            let replayed = replay(&file, u64::MAX, &mut ix)?;
            ix.forget_dropped();
            ix.set_written(replayed.end);
            replayed
        };
        let len = file.metadata()?.len();
        if replayed.damaged {
            tracing::warn!(
                path = %path.display(),
                at = replayed.end,
                discarded = len - replayed.end,
                "the cache log ends in a record cut short or damaged (a write torn by a \
                 crash, never acknowledged); discarding it and everything after it"
            );
        }
        // Nothing written after the last record may ever be read as one.
        zero(&file, replayed.end, len)?;
        file.sync_data()?;
        let file = Arc::new(file);
        let reader = Arc::new(Mutex::new(Arc::clone(&file)));
        let (tx, rx) = mpsc::channel();
        let writer = Writer {
            path: path.to_owned(),
            dir,
            file,
            tail: replayed.end,
            allocated: len.max(replayed.end),
            buf: Vec::new(),
            index,
            reader: Arc::clone(&reader),
            tx: tx.clone(),
            compaction: None,
            waiters: Vec::new(),
            next_compaction: Instant::now(),
            poisoned: None,
            disk,
        };
        thread::Builder::new()
            .name("cache-log-writer".into())
            .spawn(move || writer.run(rx))
            .map_err(|e| Error::internal(format!("cannot start the cache log writer: {e}")))?;
        Ok(Self { tx, reader })
    }

    /// Run `f` on the writer thread; resolves once its records are on disk. When `f` fails,
    /// the records it appended are dropped.
    pub(crate) async fn write<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Appender) -> Result<T> + Send + 'static,
    {
        let (reply, rx) = oneshot::channel();
        if let Err(mpsc::SendError(Msg::Write(job))) =
            self.tx.send(Msg::Write(Box::new(TypedJob { f, reply })))
        {
            job.fail(closed());
        }
        rx.await.map_err(|_| closed())?
    }

    /// Compact the log now.
    pub(crate) async fn compact(&self) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(Msg::Compact(tx)).map_err(|_| closed())?;
        rx.await.map_err(|_| closed())?
    }

    /// The file and the end of its records now: that prefix of the file holds every write
    /// answered so far, and is never changed afterwards (later writes go after it, and a
    /// compaction writes a new file). For a consistent copy while writes go on.
    pub(crate) async fn snapshot(&self) -> Result<(Arc<File>, u64)> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(Msg::Snapshot(tx)).map_err(|_| closed())?;
        rx.await.map_err(|_| closed())
    }

    /// The file values are read from. Take it under the index lock, together with the
    /// places read from the index.
    pub(crate) fn file(&self) -> Arc<File> {
        Arc::clone(&self.reader.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Finish every queued write and stop the writer thread; later writes fail with
    /// [`Error::Unavailable`].
    pub(crate) async fn close(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Msg::Close(Some(tx))).is_ok() {
            let _ = rx.await;
        }
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        let _ = self.tx.send(Msg::Close(None));
    }
}

/// Read the value at `span` of `file`.
pub(crate) fn read_value(file: &File, span: Span) -> Result<CacheValue> {
    let len = usize::try_from(span.len)
        .map_err(|_| Error::internal("a cache value too large for this machine"))?;
    let mut bytes = vec![0; len];
    file.read_exact_at(&mut bytes, span.offset)?;
    let text = String::from_utf8(bytes)
        .map_err(|_| Error::internal("a cache value in the log is not UTF-8"))?;
    Ok(CacheValue::from_stored(text))
}

fn closed() -> Error {
    Error::Unavailable("the cache is shutting down; retry on another node or later".into())
}

/// Where the records of a log end.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Replayed {
    /// Offset just after the last whole record.
    pub end: u64,
    /// Whether a record cut short or damaged ended it (rather than zeros or the file's end).
    pub damaged: bool,
}

/// Apply the records of `file`, up to offset `limit`, to `index` in order.
pub(crate) fn replay(file: &File, limit: u64, index: &mut Index) -> Result<Replayed> {
    let end = file.metadata()?.len().min(limit);
    let mut r = Chunks {
        file,
        end,
        buf: Vec::new(),
        start: 0,
        buf_at: 0,
    };
    loop {
        let at = r.pos();
        let mut need = HEADER;
        let len = loop {
            let b = r.peek(need)?;
            match decode(b) {
                Decoded::Record {
                    record,
                    len,
                    value_at,
                } => {
                    apply(index, &record, at + value_at as u64);
                    break len;
                }
                Decoded::Short { len } if len > need => need = len,
                Decoded::End => {
                    return Ok(Replayed {
                        end: at,
                        damaged: false,
                    });
                }
                Decoded::Short { .. } | Decoded::Damaged => {
                    return Ok(Replayed {
                        end: at,
                        damaged: true,
                    });
                }
            }
        };
        r.advance(len);
    }
}

fn apply(index: &mut Index, record: &Record<'_>, value_at: u64) {
    match *record {
        Record::Put {
            inst,
            key,
            value,
            expires_ms,
        } => index.load(
            inst,
            key,
            entry_size(key, value.len()),
            expires_ms,
            value_at,
        ),
        Record::Remove { inst, key } => index.remove_victims(&[Victim {
            inst,
            key: IndexKey::new(key),
        }]),
        Record::Drop { inst } => index.drop_shelf(inst),
    }
}

/// A file read forward in large chunks.
struct Chunks<'a> {
    file: &'a File,
    end: u64,
    buf: Vec<u8>,
    start: usize,
    buf_at: u64,
}

impl Chunks<'_> {
    fn pos(&self) -> u64 {
        self.buf_at + self.start as u64
    }

    /// The bytes from the current position: at least `need` unless the file ends first.
    fn peek(&mut self, need: usize) -> Result<&[u8]> {
        let have = self.buf.len() - self.start;
        if have < need {
            self.buf.drain(..self.start);
            self.buf_at += self.start as u64;
            self.start = 0;
            let from = self.buf_at + have as u64;
            let more = (need - have).max(CHUNK) as u64;
            let more = more.min(self.end.saturating_sub(from)) as usize;
            self.buf.resize(have + more, 0);
            self.file.read_exact_at(&mut self.buf[have..], from)?;
        }
        Ok(&self.buf[self.start..])
    }

    fn advance(&mut self, n: usize) {
        self.start += n;
    }
}

/// A finished background copy of the live entries.
struct LiveCopy {
    file: File,
    /// Bytes written.
    len: u64,
    /// `(old offset, new offset)` of every value copied, by old offset.
    moves: Vec<(u64, u64)>,
}

struct Running {
    /// The log's end when the copy started: later records are appended as they are.
    from: u64,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

struct Writer {
    path: PathBuf,
    dir: PathBuf,
    file: Arc<File>,
    /// Offset just after the last record on disk.
    tail: u64,
    /// Length of the file, zeros beyond `tail`.
    allocated: u64,
    buf: Vec<u8>,
    index: Arc<Mutex<Index>>,
    reader: Arc<Mutex<Arc<File>>>,
    tx: mpsc::Sender<Msg>,
    compaction: Option<Running>,
    waiters: Vec<oneshot::Sender<Result<()>>>,
    next_compaction: Instant,
    /// Set when a failed write could not be undone: writes are refused until a restart.
    poisoned: Option<String>,
    /// The data directory's free space: the log runs ahead only while it leaves the
    /// reserve free.
    disk: Arc<DiskSpace>,
}

impl Writer {
    fn run(mut self, rx: mpsc::Receiver<Msg>) {
        let mut batch: Vec<Box<dyn Job>> = Vec::with_capacity(64);
        let mut next = rx.recv().ok();
        while let Some(first) = next.take() {
            let mut control = None;
            let mut msg = Some(first);
            while let Some(m) = msg {
                match m {
                    Msg::Write(job) => batch.push(job),
                    other => {
                        control = Some(other);
                        break;
                    }
                }
                msg = if batch.len() < MAX_BATCH {
                    rx.try_recv().ok()
                } else {
                    None
                };
            }
            if !batch.is_empty() && self.commit(&mut batch) {
                self.maybe_compact();
            }
            match control {
                Some(Msg::Close(reply)) => {
                    self.stop();
                    if let Some(reply) = reply {
                        let _ = reply.send(());
                    }
                    // Later messages: refuse the writes, answer the rest.
                    while let Ok(m) = rx.try_recv() {
                        match m {
                            Msg::Write(job) => job.fail(closed()),
                            Msg::Compact(r) => {
                                let _ = r.send(Err(closed()));
                            }
                            Msg::Close(Some(r)) => {
                                let _ = r.send(());
                            }
                            Msg::Close(None) | Msg::Copied(_) | Msg::Snapshot(_) => {}
                        }
                    }
                    return;
                }
                Some(Msg::Compact(reply)) => {
                    self.waiters.push(reply);
                    if self.compaction.is_none() {
                        self.start_compaction();
                    }
                }
                Some(Msg::Copied(copy)) => self.finish_compaction(copy),
                Some(Msg::Snapshot(reply)) => {
                    let _ = reply.send((Arc::clone(&self.file), self.tail));
                }
                Some(Msg::Write(_)) | None => {}
            }
            next = rx.recv().ok();
        }
        self.stop();
    }

    /// Run and write a batch; answers whether its records (if any) reached the disk.
    fn commit(&mut self, batch: &mut Vec<Box<dyn Job>>) -> bool {
        if let Some(why) = &self.poisoned {
            for job in batch.drain(..) {
                job.fail(Error::Unavailable(why.clone()));
            }
            return false;
        }
        let mut app = Appender {
            buf: std::mem::take(&mut self.buf),
            base: self.tail,
        };
        let mut delivers = Vec::with_capacity(batch.len());
        for job in batch.drain(..) {
            let mark = app.buf.len();
            let (ok, deliver) = job.run(&mut app);
            if !ok {
                app.buf.truncate(mark);
            }
            delivers.push(deliver);
        }
        let outcome = if app.buf.is_empty() {
            Ok(())
        } else {
            self.write(&app.buf)
        };
        if outcome.is_err() {
            // The batch changed the index but not the log: put the index back in step
            // before any other write plans against it.
            if let Err(e) = self.rebuild() {
                self.poison(format!(
                    "the cache index could not be rebuilt from the log ({e})"
                ));
            }
        }
        app.buf.clear();
        if app.buf.capacity() <= CHUNK {
            self.buf = app.buf;
        }
        let ok = outcome.is_ok();
        for deliver in delivers {
            deliver(outcome.clone());
        }
        ok
    }

    /// Refuse every later write until a restart (which replays the log from the disk).
    fn poison(&mut self, why: String) {
        let why = format!("{why}; restart the server once the disk is fixed");
        tracing::error!("{why}");
        self.poisoned = Some(why);
    }

    /// Write `records` at the end of the log and make them durable.
    fn write(&mut self, records: &[u8]) -> Result<()> {
        let end = self.tail + records.len() as u64;
        let written = self
            .make_room(end)
            .and_then(|()| Ok(self.file.write_all_at(records, self.tail)?));
        if let Err(e) = written {
            return Err(self.undo(end, e));
        }
        {
            // The values are readable from the file now: the index may let go of its copies.
            let mut ix = lock_index(&self.index);
            ix.set_written(end);
            ix.shed();
        }
        if let Err(e) = self.file.sync_data() {
            // After a failed flush the kernel may report a later one as successful without
            // having written the pages: nothing written from here on could be trusted.
            let e = self.undo(end, e.into());
            self.poison(format!("flushing the cache log failed ({e})"));
            return Err(e);
        }
        self.tail = end;
        Ok(())
    }

    /// Zero the file up to `end` and beyond, so a commit seldom changes its size. Space
    /// zero-filled ahead is space no other store and no delete can use: on a disk short of
    /// room the log grows by what it writes only.
    fn make_room(&mut self, end: u64) -> Result<()> {
        if end > self.allocated {
            let ahead = if self.disk.has_room(end - self.allocated + PREALLOC) {
                PREALLOC
            } else {
                0
            };
            let to = end + ahead;
            zero(&self.file, self.allocated, to)?;
            self.allocated = to;
        }
        Ok(())
    }

    /// After a failed write: zero what may have reached the file, or refuse further writes.
    fn undo(&mut self, end: u64, err: Error) -> Error {
        tracing::error!(error = %err, "writing the cache log failed; the batch is reported failed");
        let undone = zero(&self.file, self.tail, end.min(self.allocated))
            .and_then(|()| Ok(self.file.sync_data()?));
        if let Err(e) = undone {
            self.poison(format!(
                "the cache log could not be written ({err}) nor repaired ({e})"
            ));
        }
        if err.is_disk_full() {
            return err;
        }
        Error::internal(format!("writing the cache log failed: {err}"))
    }

    fn rebuild(&mut self) -> Result<()> {
        let mut fresh = lock_index(&self.index).emptied();
        replay(&self.file, self.tail, &mut fresh)?;
        fresh.set_written(self.tail);
        *lock_index(&self.index) = fresh;
        Ok(())
    }

    fn maybe_compact(&mut self) {
        if self.compaction.is_some() || Instant::now() < self.next_compaction {
            return;
        }
        let (entries, bytes, _) = lock_index(&self.index).stats();
        let live = bytes + entries * HEADER as u64;
        let dead = self.tail.saturating_sub(live);
        if dead >= COMPACT_MIN_DEAD && dead > live {
            self.start_compaction();
        }
    }

    fn start_compaction(&mut self) {
        let entries = lock_index(&self.index).logged();
        let stop = Arc::new(AtomicBool::new(false));
        let (old, path, tx, halt) = (
            Arc::clone(&self.file),
            compact_path(&self.path),
            self.tx.clone(),
            Arc::clone(&stop),
        );
        let spawned = thread::Builder::new()
            .name("cache-log-compact".into())
            .spawn(move || {
                let copied = copy_live(&old, &path, &entries, &halt);
                let _ = tx.send(Msg::Copied(copied));
            });
        match spawned {
            Ok(thread) => {
                self.compaction = Some(Running {
                    from: self.tail,
                    stop,
                    thread,
                })
            }
            Err(e) => self.compaction_failed(Error::internal(format!(
                "cannot start the compaction thread: {e}"
            ))),
        }
    }

    fn finish_compaction(&mut self, copied: Result<LiveCopy>) {
        let Some(running) = self.compaction.take() else {
            return;
        };
        let _ = running.thread.join();
        match copied.and_then(|copy| self.switch_to(copy, running.from)) {
            Ok(()) => {
                for w in self.waiters.drain(..) {
                    let _ = w.send(Ok(()));
                }
            }
            Err(e) => self.compaction_failed(e),
        }
    }

    fn compaction_failed(&mut self, e: Error) {
        tracing::warn!(error = %e, "compacting the cache log failed; trying again later");
        let _ = fs::remove_file(compact_path(&self.path));
        self.next_compaction = Instant::now() + COMPACT_RETRY;
        for w in self.waiters.drain(..) {
            let _ = w.send(Err(e.clone()));
        }
    }

    /// Make the copy the log: append the records written since it started, sync, rename it
    /// over the log and move every entry's place.
    fn switch_to(&mut self, copy: LiveCopy, from: u64) -> Result<()> {
        let mut chunk = vec![0; CHUNK];
        let (mut at, mut to) = (from, copy.len);
        while at < self.tail {
            let n = CHUNK.min((self.tail - at) as usize);
            self.file.read_exact_at(&mut chunk[..n], at)?;
            copy.file.write_all_at(&chunk[..n], to)?;
            at += n as u64;
            to += n as u64;
        }
        copy.file.sync_all()?;
        let dir = File::open(&self.dir)?;
        fs::rename(compact_path(&self.path), &self.path)?;
        // From here on the copy is the log: switch to it whatever happens.
        let before = self.tail;
        let file = Arc::new(copy.file);
        {
            let mut ix = lock_index(&self.index);
            let moves = &copy.moves;
            ix.relocate(|offset| {
                if offset >= from {
                    offset - from + copy.len
                } else {
                    // Every entry older than the copy was copied (the snapshot was taken
                    // between two successful batches, and a failed one rebuilds the index
                    // before anything else runs).
                    moves
                        .binary_search_by_key(&offset, |m| m.0)
                        .map_or(offset, |i| moves[i].1)
                }
            });
            ix.set_written(to);
            *self.reader.lock().unwrap_or_else(|e| e.into_inner()) = Arc::clone(&file);
        }
        self.file = file;
        self.tail = to;
        self.allocated = to;
        if let Err(e) = dir.sync_all() {
            // Should the rename not reach the disk, a crash would bring back the old log
            // without the writes that follow.
            self.poison(format!(
                "the cache log was compacted but its directory could not be synced ({e})"
            ));
        }
        tracing::info!(before, after = to, "compacted the cache log");
        Ok(())
    }

    fn stop(&mut self) {
        if let Some(running) = self.compaction.take() {
            running.stop.store(true, Ordering::Relaxed);
            let _ = running.thread.join();
            let _ = fs::remove_file(compact_path(&self.path));
        }
        for w in self.waiters.drain(..) {
            let _ = w.send(Err(closed()));
        }
    }
}

/// Copy the live entries' records from `old` into a new file at `path`.
fn copy_live(old: &File, path: &Path, entries: &[Logged], stop: &AtomicBool) -> Result<LiveCopy> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    let mut out = BufWriter::with_capacity(CHUNK, &file);
    let (mut value, mut record) = (Vec::new(), Vec::new());
    let mut moves = Vec::with_capacity(entries.len());
    let mut len = 0u64;
    for e in entries {
        if stop.load(Ordering::Relaxed) {
            return Err(closed());
        }
        value.resize(usize::try_from(e.span.len).unwrap_or(0), 0);
        old.read_exact_at(&mut value, e.span.offset)?;
        record.clear();
        let value_at = Record::Put {
            inst: e.inst,
            key: e.key.as_str(),
            value: &value,
            expires_ms: e.expires_ms,
        }
        .encode(&mut record);
        out.write_all(&record)?;
        moves.push((e.span.offset, len + value_at as u64));
        len += record.len() as u64;
    }
    out.flush()?;
    drop(out);
    file.sync_all()?;
    moves.sort_unstable();
    Ok(LiveCopy { file, len, moves })
}

/// Write zeros over `[from, to)` of `file`.
fn zero(file: &File, from: u64, to: u64) -> Result<()> {
    let mut at = from;
    while at < to {
        let n = ZEROS.len().min((to - at) as usize);
        file.write_all_at(&ZEROS[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

fn compact_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".compact");
    PathBuf::from(p)
}
