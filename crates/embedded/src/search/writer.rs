//! The writer of one index: a thread owning the tantivy `IndexWriter`, started by the
//! first write and stopped after a quiet spell, that commits waiting writes together.
//!
//! Writes are jobs sent over a channel. The thread takes every job waiting (group commit),
//! checks and applies each against the last committed view plus the batch's own earlier
//! jobs, commits once, reloads the reader so the next query sees the batch, and only then
//! answers the jobs. A job that fails its check (a key that exists, or is missing) changes
//! nothing; a failed commit is rolled back and fails the whole batch.
//!
//! Jobs are sent while holding the slot's lock, and the thread retires only while holding
//! it with an empty channel, so no job is ever left in a channel nobody reads.

use std::{
    collections::HashMap,
    ops::Deref,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicU64, Ordering},
        mpsc::{self, RecvTimeoutError, TryRecvError},
    },
    thread::JoinHandle,
    time::Duration,
};

use quintet_core::{
    Error, Result,
    search::{self, SearchDoc, SearchKey},
};
use tantivy::{IndexWriter, indexer::IndexWriterOptions};
use tokio::sync::oneshot;

use super::{
    Settings, engine_error,
    handle::{IndexHandle, Keys},
};

/// Most jobs committed together.
const MAX_BATCH: usize = 512;

/// What the writers of one adapter have done: writes handed to them and commits made.
#[derive(Debug, Default)]
pub(super) struct Counters {
    writes: AtomicU64,
    commits: AtomicU64,
    /// Lets a test hold every writer at the start of its next batch.
    #[cfg(test)]
    pub gate: gate::Gate,
}

impl Counters {
    /// Writes queued so far and commits made so far.
    pub fn get(&self) -> (u64, u64) {
        (
            self.writes.load(Ordering::Relaxed),
            self.commits.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
pub(super) mod gate {
    use std::sync::{Condvar, Mutex, PoisonError};

    /// A barrier a test closes to hold writer threads and opens to let them go on.
    #[derive(Debug, Default)]
    pub struct Gate {
        closed: Mutex<bool>,
        changed: Condvar,
    }

    impl Gate {
        pub fn set_closed(&self, closed: bool) {
            *self.closed.lock().unwrap_or_else(PoisonError::into_inner) = closed;
            self.changed.notify_all();
        }

        pub(in crate::search) fn pass(&self) {
            let mut closed = self.closed.lock().unwrap_or_else(PoisonError::into_inner);
            while *closed {
                closed = self
                    .changed
                    .wait(closed)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        }
    }
}

/// A write to an index.
pub(super) use quintet_core::ports::search::SearchWrite as Write;

/// A write and where to answer it.
#[derive(Debug)]
pub(super) struct Job {
    write: Write,
    reply: oneshot::Sender<Result<()>>,
}

/// The state of an index's writer.
#[derive(Debug, Default)]
pub(super) enum WriterSlot {
    /// No thread: the next write starts one.
    #[default]
    Idle,
    /// A thread reads jobs from this channel.
    Running {
        jobs: mpsc::Sender<Job>,
        thread: JoinHandle<()>,
    },
    /// The index is closed or dropped: writes fail with this error.
    Closed(Error),
}

/// An open index with its writer: what the adapter keeps per open index. Reads use the
/// index (through `Deref`); writes go through the slot.
#[derive(Debug)]
pub(super) struct OpenIndex {
    handle: Arc<IndexHandle>,
    /// The writer thread, started on the first write and stopped when idle.
    slot: Mutex<WriterSlot>,
}

impl OpenIndex {
    /// `handle` with no writer yet.
    pub fn new(handle: Arc<IndexHandle>) -> Self {
        Self {
            handle,
            slot: Mutex::default(),
        }
    }

    /// Whether a writer thread is running.
    pub fn has_writer(&self) -> bool {
        matches!(&*lock(self), WriterSlot::Running { .. })
    }
}

impl Deref for OpenIndex {
    type Target = IndexHandle;

    fn deref(&self) -> &IndexHandle {
        &self.handle
    }
}

fn lock(handle: &OpenIndex) -> MutexGuard<'_, WriterSlot> {
    handle.slot.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Queue `write` on the index's writer, starting it when needed. Blocking (it may open a
/// writer); the answer arrives on the returned channel once the write is committed.
pub(super) fn submit(
    handle: &Arc<OpenIndex>,
    settings: Settings,
    counters: &Arc<Counters>,
    write: Write,
) -> Result<oneshot::Receiver<Result<()>>> {
    let (reply, answer) = oneshot::channel();
    let mut job = Job { write, reply };
    let mut slot = lock(handle);
    match &*slot {
        WriterSlot::Closed(e) => return Err(e.clone()),
        WriterSlot::Running { jobs, .. } => match jobs.send(job) {
            Ok(()) => {
                counters.writes.fetch_add(1, Ordering::Relaxed);
                return Ok(answer);
            }
            // The thread ended (it failed); start another below.
            Err(mpsc::SendError(back)) => job = back,
        },
        WriterSlot::Idle => {}
    }
    let writer: IndexWriter = handle
        .index
        .writer_with_options(
            IndexWriterOptions::builder()
                .memory_budget_per_thread(settings.writer_heap_bytes)
                .num_worker_threads(settings.writer_threads.max(1))
                .num_merge_threads(1)
                .build(),
        )
        .map_err(engine_error)?;
    let (jobs, inbox) = mpsc::channel();
    // Cannot fail: the receiver is alive until the thread below ends.
    let _ = jobs.send(job);
    let me = Arc::clone(handle);
    let counted = Arc::clone(counters);
    let thread = std::thread::Builder::new()
        .name(format!("search-writer-{}", handle.name))
        .spawn(move || run(&me, &counted, writer, &inbox, settings.writer_idle))
        .map_err(|e| Error::internal(format!("starting a search writer thread: {e}")))?;
    *slot = WriterSlot::Running { jobs, thread };
    counters.writes.fetch_add(1, Ordering::Relaxed);
    Ok(answer)
}

/// Stop the index's writer for good: later writes fail with `reason`. Waits for the batch
/// in progress to be committed and answered. Blocking.
pub(super) fn close(handle: &OpenIndex, reason: Error) {
    let previous = std::mem::replace(&mut *lock(handle), WriterSlot::Closed(reason));
    if let WriterSlot::Running { jobs, thread } = previous {
        drop(jobs);
        if thread.join().is_err() {
            tracing::error!(index = %handle.name, "a search writer thread panicked");
        }
    }
}

/// The writer thread: batches until the channel closes or nothing arrives for `idle`.
fn run(
    handle: &OpenIndex,
    counters: &Counters,
    mut writer: IndexWriter,
    inbox: &mpsc::Receiver<Job>,
    idle: Duration,
) {
    loop {
        let first = match inbox.recv_timeout(idle) {
            Ok(job) => job,
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => {
                let mut slot = lock(handle);
                match inbox.try_recv() {
                    Ok(job) => {
                        drop(slot);
                        batch(handle, counters, &mut writer, job, inbox);
                        continue;
                    }
                    Err(TryRecvError::Disconnected) => break,
                    Err(TryRecvError::Empty) => {}
                }
                // Quiet: release the writer (and its lock on the index) before a successor
                // can be started, which needs the slot this thread holds.
                if let Err(e) = writer.wait_merging_threads() {
                    tracing::warn!(index = %handle.name, error = %e, "finishing search merges");
                }
                if matches!(&*slot, WriterSlot::Running { .. }) {
                    *slot = WriterSlot::Idle;
                }
                return;
            }
        };
        batch(handle, counters, &mut writer, first, inbox);
    }
    if let Err(e) = writer.wait_merging_threads() {
        tracing::warn!(index = %handle.name, error = %e, "finishing search merges");
    }
}

/// Apply `first` and every job waiting behind it, commit once, answer them all.
fn batch(
    handle: &IndexHandle,
    counters: &Counters,
    writer: &mut IndexWriter,
    first: Job,
    inbox: &mpsc::Receiver<Job>,
) {
    #[cfg(test)]
    counters.gate.pass();
    let mut jobs = vec![first];
    while jobs.len() < MAX_BATCH {
        match inbox.try_recv() {
            Ok(job) => jobs.push(job),
            Err(_) => break,
        }
    }
    let searcher = handle.reader.searcher();
    let keys = match handle.keys(&searcher) {
        Ok(keys) => keys,
        Err(e) => {
            for job in jobs {
                let _ = job.reply.send(Err(e.clone()));
            }
            return;
        }
    };
    let mut batch = Batch {
        handle,
        writer,
        keys,
        pending: HashMap::new(),
    };
    let mut outcomes: Vec<(oneshot::Sender<Result<()>>, Result<()>)> = Vec::new();
    let mut changed = false;
    let mut broken: Option<Error> = None;
    for job in jobs {
        let outcome = if broken.is_some() {
            Ok(()) // replaced below
        } else {
            match batch.apply(job.write) {
                Ok(()) => {
                    changed = true;
                    Ok(())
                }
                Err(Applied::Refused(e)) => Err(e),
                Err(Applied::Broken(e)) => {
                    broken = Some(e);
                    Ok(())
                }
            }
        };
        outcomes.push((job.reply, outcome));
    }
    if broken.is_none() && changed {
        let started = std::time::Instant::now();
        let committed = writer
            .commit()
            .and_then(|_| handle.reader.reload())
            .map_err(engine_error);
        tracing::debug!(
            index = %handle.name,
            writes = outcomes.len(),
            elapsed_ms = started.elapsed().as_secs_f64() * 1000.0,
            "search commit"
        );
        match committed {
            Ok(()) => {
                counters.commits.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => broken = Some(e),
        }
    }
    if let Some(e) = broken {
        tracing::error!(index = %handle.name, error = %e, "a search commit failed; rolling back");
        if let Err(rb) = writer.rollback() {
            tracing::error!(index = %handle.name, error = %rb, "rolling back a search writer");
        }
        for (_, outcome) in &mut outcomes {
            if outcome.is_ok() {
                *outcome = Err(e.clone());
            }
        }
    }
    for (reply, outcome) in outcomes {
        let _ = reply.send(outcome);
    }
}

/// Why a write was not applied.
enum Applied {
    /// The write breaks a rule; it changed nothing and the batch goes on.
    Refused(Error),
    /// The engine failed; the batch must be rolled back.
    Broken(Error),
}

/// The writes of one batch so far.
struct Batch<'a> {
    handle: &'a IndexHandle,
    writer: &'a mut IndexWriter,
    /// Lookups in the last committed view.
    keys: Keys<'a>,
    /// Keys written earlier in this batch → whether they exist after those writes.
    pending: HashMap<SearchKey, bool>,
}

impl Batch<'_> {
    fn exists(&self, key: &SearchKey) -> Result<bool, Applied> {
        match self.pending.get(key) {
            Some(present) => Ok(*present),
            None => self
                .keys
                .find(key)
                .map(|found| found.is_some())
                .map_err(Applied::Broken),
        }
    }

    fn put(&mut self, doc: &SearchDoc, replace: bool) -> Result<(), Applied> {
        if replace {
            self.writer.delete_term(self.handle.key_term(doc.key()));
        }
        self.writer
            .add_document(self.handle.tantivy_doc(doc))
            .map_err(|e| Applied::Broken(engine_error(e)))?;
        self.pending.insert(doc.key().clone(), true);
        Ok(())
    }

    fn apply(&mut self, write: Write) -> Result<(), Applied> {
        let name = &self.handle.name;
        match write {
            Write::Index(doc) => {
                if self.exists(doc.key())? {
                    return Err(Applied::Refused(search::exists(name, doc.key().as_str())));
                }
                self.put(&doc, false)
            }
            Write::Update(doc) => {
                if !self.exists(doc.key())? {
                    return Err(Applied::Refused(search::missing(name, doc.key().as_str())));
                }
                self.put(&doc, true)
            }
            Write::Remove(key) => {
                if !self.exists(&key)? {
                    return Err(Applied::Refused(search::missing(name, key.as_str())));
                }
                self.writer.delete_term(self.handle.key_term(&key));
                self.pending.insert(key, false);
                Ok(())
            }
            Write::Bulk(docs) => {
                for doc in &docs {
                    let replace = self.exists(doc.key())?;
                    self.put(doc, replace)?;
                }
                Ok(())
            }
        }
    }
}
