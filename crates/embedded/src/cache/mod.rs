//! The cache service: every entry indexed in memory, every write appended to a log
//! (`cache.log`) or, when the operator chooses, kept in memory only.
//!
//! # Layout
//! `index::Index` holds, for every entry of every instance, its key, size, expiry, where its
//! value lies in the log (and its recency when the cache is bounded), plus the values of the
//! most recently used entries (up to [`HELD_VALUE_BYTES`]; every value when memory-only).
//! Point reads check the index first: a missing or expired key never touches the disk, a
//! held value is answered from memory, anything else is one read of the log at the value's
//! place. Queries walk the index's sorted keys (only the range sharing the pattern's literal
//! prefix) and read the values of the matches that are not held.
//!
//! # Writes
//! In durable mode a write is one closure on the log's writer thread (`log::Log`): it plans
//! against the index (conflict? missing? what to evict?), appends its records, applies the
//! plan to the index, and is acknowledged once its batch is on disk. Only that thread
//! changes the index, so the order of the index is the order of the log. Should a write to
//! the log fail, the index is rebuilt from the log on the same thread before anything else. In memory-only mode
//! the same plan is applied under the index lock.
//!
//! # Expiry and eviction
//! Reads compare the expiry with the clock, so an entry vanishes at its instant. A
//! background task wakes every second and removes expired entries in batches of
//! [`REAP_BATCH`] (each batch one write, so requests interleave). With a size bound, a write
//! that would exceed it first removes expired entries, then the least recently used; a
//! `get` marks an entry used in memory only, so reads never write to disk.

mod index;
mod index_key;
mod legacy;
mod log;
mod lru;
mod record;

use std::{
    fs::File,
    path::Path,
    sync::{
        Arc, Mutex, MutexGuard, Weak,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use quintet_core::{
    Clock, Error, Instance, Result,
    cache::{CacheKey, CacheValue, Glob, Ttl},
    ports::{
        Keep, Lifecycle, PoolUsage,
        cache::{Cache, CacheEntry, CacheUsage, SetMode},
    },
};
use tokio::{sync::watch, task::JoinHandle};

use crate::disk::DiskSpace;

use self::{
    index::{Index, Lookup, PutOp, Span, Stored, Values, Victim, entry_size},
    index_key::IndexKey,
    log::{Appender, Log, read_value},
    record::Record,
};

/// Most entries one background reclaim removes in one write.
pub const REAP_BATCH: usize = 256;

/// How often the background task looks for expired entries.
const REAP_EVERY: Duration = Duration::from_secs(1);

/// Values up to this size are read on the calling thread; larger ones on the blocking pool.
const INLINE_READ_BYTES: u64 = 64 * 1024;

/// Keys a query examines per hold of the index lock, so a long scan lets other requests in.
const SCAN_CHUNK: usize = 4096;

/// In durable mode, the values of the most recently used entries are also kept in memory,
/// up to this many bytes, so reading them needs no disk at all.
pub const HELD_VALUE_BYTES: u64 = 64 * 1024 * 1024;

/// How the operator set up the cache.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheOptions {
    /// Bound on the bytes of keys plus values of all entries of the server; when a write
    /// would exceed it, least-recently-used entries are evicted. `None`: no bound.
    pub max_bytes: Option<u64>,
    /// Keep entries in memory only: nothing is written to disk, and everything is gone
    /// after a restart.
    pub memory_only: bool,
}

/// Entries held and the bytes they count for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheStats {
    /// Entries held, including expired ones not yet reclaimed.
    pub entries: u64,
    /// Bytes of their keys plus values.
    pub bytes: u64,
    /// Bytes of values kept in memory (all of them when memory-only).
    pub values_in_memory: u64,
}

/// The embedded cache adapter.
#[derive(Debug, Clone)]
pub struct EmbeddedCache {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    index: Arc<Mutex<Index>>,
    clock: Arc<dyn Clock>,
    /// `None` in memory-only mode.
    log: Option<Log>,
    reaper_started: AtomicBool,
    reaper: Mutex<Option<(watch::Sender<bool>, JoinHandle<()>)>>,
    /// Admits writes to the log (not removals) while the disk has room.
    disk: Arc<DiskSpace>,
}

/// Lock the index. A panic while holding the lock cannot leave the index half-updated in a
/// way that matters more than refusing every request would, so poisoning is ignored.
fn lock_index(index: &Mutex<Index>) -> MutexGuard<'_, Index> {
    index.lock().unwrap_or_else(|e| e.into_inner())
}

impl EmbeddedCache {
    /// Open the cache: on the log at `path` (`cache.log`), or in memory only when `options`
    /// say so (then a log left at `path` by an earlier durable run is removed, so its entries
    /// cannot come back later). Every stored entry is indexed before this returns. Entries
    /// an earlier version kept in `cache.db` beside `path` are moved into the log first.
    pub fn open(path: &Path, clock: Arc<dyn Clock>, options: &CacheOptions) -> Result<Self> {
        Self::open_on(path, clock, options, Arc::new(DiskSpace::unchecked(path)))
    }

    /// [`EmbeddedCache::open`], with writes admitted by `disk` (its reserve is kept for
    /// deletes; see [`crate::disk`]).
    pub fn open_on(
        path: &Path,
        clock: Arc<dyn Clock>,
        options: &CacheOptions,
        disk: Arc<DiskSpace>,
    ) -> Result<Self> {
        let values = if options.memory_only {
            Values::All
        } else {
            Values::Recent(HELD_VALUE_BYTES)
        };
        let index = Arc::new(Mutex::new(Index::new(options.max_bytes, values)));
        let log = if options.memory_only {
            remove_files(path)?;
            None
        } else {
            legacy::import(path)?;
            Some(Log::open(path, Arc::clone(&index), Arc::clone(&disk))?)
        };
        let cache = Self {
            inner: Arc::new(Inner {
                index,
                clock,
                log,
                reaper_started: AtomicBool::new(false),
                reaper: Mutex::new(None),
                disk,
            }),
        };
        cache.ensure_reaper();
        Ok(cache)
    }

    /// The log and the end of its records now (`None` in memory-only mode): a prefix that
    /// holds every write answered so far and never changes (see [`crate::backup`]).
    pub(crate) async fn log_snapshot(&self) -> Result<Option<(Arc<std::fs::File>, u64)>> {
        match &self.inner.log {
            Some(log) => log.snapshot().await.map(Some),
            None => Ok(None),
        }
    }

    /// Entries held and their bytes.
    pub fn stats(&self) -> CacheStats {
        let (entries, bytes, values_in_memory) = self.inner.lock().stats();
        CacheStats {
            entries,
            bytes,
            values_in_memory,
        }
    }

    /// Rewrite the log with only the live entries now, as happens on its own once most of
    /// it is records of removed or overwritten entries. Nothing to do when memory-only.
    pub async fn compact_now(&self) -> Result<()> {
        match &self.inner.log {
            Some(log) => log.compact().await,
            None => Ok(()),
        }
    }

    /// Reclaim every expired entry now (and trim to the bound), as the background task
    /// does; returns how many entries were removed.
    pub async fn reap_now(&self) -> Result<usize> {
        let mut total = 0;
        loop {
            let n = self.inner.reap_batch().await?;
            total += n;
            if n < REAP_BATCH {
                return Ok(total);
            }
        }
    }

    /// Start the background reclaim on the current tokio runtime, once.
    fn ensure_reaper(&self) {
        if self.inner.reaper_started.load(Ordering::Acquire) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // opened outside a runtime: started by the first async call
        };
        if self.inner.reaper_started.swap(true, Ordering::AcqRel) {
            return;
        }
        let (stop, stopped) = watch::channel(false);
        let task = runtime.spawn(reap_loop(Arc::downgrade(&self.inner), stopped));
        if let Ok(mut slot) = self.inner.reaper.lock() {
            *slot = Some((stop, task));
        }
    }

    async fn put(
        &self,
        instance: &Instance,
        key: &CacheKey,
        value: CacheValue,
        op: PutOp,
    ) -> Result<()> {
        self.ensure_reaper();
        let now = self.inner.clock.now_ms();
        let size = entry_size(key.as_str(), value.len());
        let (inst, name) = (instance.id, instance.name.clone());
        let Some(log) = &self.inner.log else {
            let mut index = self.inner.lock();
            let plan = index.plan_put(inst, &name, key, size, now, op)?;
            index.apply_put(inst, key, size, &plan, value, 0);
            return Ok(());
        };
        self.inner.disk.admit()?;
        let inner = Arc::clone(&self.inner);
        let key = key.clone();
        log.write(move |app| {
            let plan = inner.lock().plan_put(inst, &name, &key, size, now, op)?;
            append_removals(app, &plan.victims);
            let offset = app.append(&Record::Put {
                inst,
                key: key.as_str(),
                value: value.as_str().as_bytes(),
                expires_ms: plan.expires_ms,
            });
            inner
                .lock()
                .apply_put(inst, &key, size, &plan, value, offset);
            Ok(())
        })
        .await
    }
}

fn append_removals(app: &mut Appender, victims: &[Victim]) {
    for v in victims {
        app.append(&Record::Remove {
            inst: v.inst,
            key: v.key.as_str(),
        });
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Index> {
        lock_index(&self.index)
    }

    /// Remove one batch of expired (or, over the bound, least recently used) entries.
    async fn reap_batch(self: &Arc<Self>) -> Result<usize> {
        let now = self.clock.now_ms();
        let Some(log) = &self.log else {
            let mut index = self.lock();
            let victims = index.plan_reap(now, REAP_BATCH);
            index.remove_victims(&victims);
            return Ok(victims.len());
        };
        if self.lock().plan_reap(now, 1).is_empty() {
            return Ok(0); // nothing to do: no write, no commit
        }
        let inner = Arc::clone(self);
        log.write(move |app| {
            let victims = inner.lock().plan_reap(now, REAP_BATCH);
            append_removals(app, &victims);
            inner.lock().remove_victims(&victims);
            Ok(victims.len())
        })
        .await
    }
}

async fn reap_loop(inner: Weak<Inner>, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(REAP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let Some(inner) = inner.upgrade() else {
            return; // the cache was dropped
        };
        while !*stop.borrow() {
            match inner.reap_batch().await {
                Ok(n) if n == REAP_BATCH => tokio::task::yield_now().await,
                Ok(_) => break,
                Err(Error::Unavailable(_)) => return, // closing
                Err(e) => {
                    tracing::warn!(error = %e, "reclaiming expired cache entries failed");
                    break;
                }
            }
        }
    }
}

/// Remove a memory-only cache's leftover files: the log and an earlier version's database.
fn remove_files(path: &Path) -> Result<()> {
    let mut removed = false;
    let legacy = legacy::database_files(&legacy::database_beside(path));
    for file in std::iter::once(path.to_owned()).chain(legacy) {
        removed |= crate::datadir::remove_file_if_present(&file)?;
    }
    if removed {
        tracing::warn!(
            path = %path.display(),
            "the cache is memory-only: removed the entries a durable run left on disk"
        );
    }
    Ok(())
}

#[async_trait]
impl Cache for EmbeddedCache {
    async fn add(
        &self,
        instance: &Instance,
        key: &CacheKey,
        value: CacheValue,
        ttl: Option<Ttl>,
    ) -> Result<()> {
        self.put(instance, key, value, PutOp::Add(ttl)).await
    }

    async fn expiry(&self, instance: &Instance, key: &CacheKey) -> Result<Option<Option<i64>>> {
        let now = self.inner.clock.now_ms();
        Ok(self.inner.lock().expiry(instance.id, key.as_str(), now))
    }

    async fn get(&self, instance: &Instance, key: &CacheKey) -> Result<Option<CacheValue>> {
        self.ensure_reaper();
        let now = self.inner.clock.now_ms();
        let (span, version, file) = {
            let mut index = self.inner.lock();
            match index.lookup(instance.id, key.as_str(), now) {
                Lookup::Missing => return Ok(None),
                Lookup::Live {
                    value: Stored::Held(v),
                    ..
                } => return Ok(Some(v)),
                Lookup::Live {
                    value: Stored::Logged(span),
                    version,
                } => match &self.inner.log {
                    // Under the index lock: a compaction moves the file and the places
                    // together.
                    Some(log) => (span, version, log.file()),
                    None => return Ok(None), // memory-only: every value is held
                },
            }
        };
        let value = if span.len <= INLINE_READ_BYTES {
            read_value(&file, span)?
        } else {
            tokio::task::spawn_blocking(move || read_value(&file, span))
                .await
                .map_err(|e| Error::internal(format!("a read task failed: {e}")))??
        };
        // Keep it in memory for the next read, unless a write came in between.
        self.inner
            .lock()
            .hold_read(instance.id, key.as_str(), version, value.clone());
        Ok(Some(value))
    }

    async fn set(
        &self,
        instance: &Instance,
        key: &CacheKey,
        value: CacheValue,
        ttl: Option<Ttl>,
        mode: SetMode,
    ) -> Result<()> {
        self.put(instance, key, value, PutOp::Set(ttl, mode)).await
    }

    async fn remove(&self, instance: &Instance, key: &CacheKey) -> Result<()> {
        self.ensure_reaper();
        let now = self.inner.clock.now_ms();
        let (inst, name) = (instance.id, instance.name.clone());
        let victim = Victim {
            inst,
            key: IndexKey::new(key.as_str()),
        };
        let Some(log) = &self.inner.log else {
            let mut index = self.inner.lock();
            index.plan_remove(inst, &name, key, now)?;
            index.remove_victims(&[victim]);
            return Ok(());
        };
        let inner = Arc::clone(&self.inner);
        let key = key.clone();
        log.write(move |app| {
            inner.lock().plan_remove(inst, &name, &key, now)?;
            let victims = [victim];
            append_removals(app, &victims);
            inner.lock().remove_victims(&victims);
            Ok(())
        })
        .await
    }

    async fn usage(&self, instance: &Instance) -> Result<CacheUsage> {
        let now = self.inner.clock.now_ms();
        let (entries, bytes) = self.inner.lock().instance_usage(instance.id, now);
        Ok(CacheUsage { entries, bytes })
    }

    async fn query(&self, instance: &Instance, pattern: &Glob) -> Result<Vec<CacheEntry>> {
        self.ensure_reaper();
        let now = self.inner.clock.now_ms();
        // Each match with its value, or the file and place to read it from. The file is
        // taken under the index lock with the places: a compaction moves both at once.
        let mut found: Vec<(IndexKey, Option<i64>, Result<CacheValue, (Arc<File>, Span)>)> =
            Vec::new();
        let mut after = None;
        loop {
            let (chunk, resume, file) = {
                let index = self.inner.lock();
                let (chunk, resume) =
                    index.scan(instance.id, pattern, now, after.as_ref(), SCAN_CHUNK);
                (chunk, resume, self.inner.log.as_ref().map(Log::file))
            };
            for (key, stored, expires_ms) in chunk {
                match (stored, &file) {
                    (Stored::Held(v), _) => found.push((key, expires_ms, Ok(v))),
                    (Stored::Logged(span), Some(f)) => {
                        found.push((key, expires_ms, Err((Arc::clone(f), span))))
                    }
                    (Stored::Logged(_), None) => {} // memory-only: every value is held
                }
            }
            match resume {
                Some(r) => after = Some(r),
                None => break,
            }
        }
        let all_held = found.iter().all(|(_, _, value)| value.is_ok());
        let entries = move || {
            found
                .into_iter()
                .map(|(key, expires_ms, value)| {
                    let value = match value {
                        Ok(v) => v,
                        Err((file, span)) => read_value(&file, span)?,
                    };
                    Ok(CacheEntry {
                        key: key.as_str().parse()?,
                        value,
                        expires_ms,
                    })
                })
                .collect()
        };
        if all_held {
            return entries();
        }
        tokio::task::spawn_blocking(entries)
            .await
            .map_err(|e| Error::internal(format!("a read task failed: {e}")))?
    }
}

#[async_trait]
impl Lifecycle for EmbeddedCache {
    async fn create_instance(&self, instance: &Instance) -> Result<()> {
        self.ensure_reaper();
        let id = instance.id;
        let Some(log) = &self.inner.log else {
            self.inner.lock().create_shelf(id);
            return Ok(());
        };
        // In the writer's order, after any drop of the same instance.
        let inner = Arc::clone(&self.inner);
        log.write(move |_| {
            inner.lock().create_shelf(id);
            Ok(())
        })
        .await
    }

    async fn drop_instance(&self, instance: &Instance) -> Result<()> {
        let id = instance.id;
        let Some(log) = &self.inner.log else {
            self.inner.lock().drop_shelf(id);
            return Ok(());
        };
        let inner = Arc::clone(&self.inner);
        log.write(move |app| {
            app.append(&Record::Drop { inst: id });
            inner.lock().drop_shelf(id);
            Ok(())
        })
        .await
    }

    async fn sweep(&self, keep: &Keep) -> Result<usize> {
        self.ensure_reaper();
        let Some(log) = &self.inner.log else {
            return Ok(self.inner.lock().retain(|i| keep.keeps(i)));
        };
        let inner = Arc::clone(&self.inner);
        let keep = keep.clone();
        log.write(move |app| {
            let mut index = inner.lock();
            for inst in index.instances().filter(|i| !keep.keeps(*i)) {
                app.append(&Record::Drop { inst });
            }
            Ok(index.retain(|i| keep.keeps(i)))
        })
        .await
    }

    async fn ready(&self) -> Result<()> {
        match &self.inner.log {
            Some(_) => self.inner.disk.ready(),
            None => Ok(()),
        }
    }

    fn pool(&self) -> Option<PoolUsage> {
        // Memory and a file of the node's own: no engine connections.
        None
    }

    async fn close(&self) -> Result<()> {
        // Stop the background reclaim first, so it does not race the closing writer.
        self.inner.reaper_started.store(true, Ordering::Release);
        let reaper = self.inner.reaper.lock().ok().and_then(|mut r| r.take());
        if let Some((stop, task)) = reaper {
            let _ = stop.send(true);
            let _ = task.await;
        }
        if let Some(log) = &self.inner.log {
            log.close().await;
        }
        Ok(())
    }
}
