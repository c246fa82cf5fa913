//! The cache service: every entry indexed in memory, values in SQLite (`cache.db`, one
//! table per instance) or, when the operator chooses, in memory only.
//!
//! # Layout
//! `index::Index` holds, for every entry of every instance, its key, size and expiry (and
//! its recency when the cache is bounded), plus the values of the most recently used
//! entries (up to [`HELD_VALUE_BYTES`]; every value when memory-only). Point reads check
//! the index first: a missing or expired key never touches SQLite, a held value is answered
//! from memory, anything else is one row read by primary key. Queries walk the index's
//! sorted keys (only the range sharing the pattern's literal prefix) and read the values of
//! the matches that are not held.
//!
//! # Writes
//! In durable mode a write is one closure on the SQLite writer thread: it plans against the
//! index (conflict? missing? what to evict?), runs its SQL, applies the plan to the index,
//! and is acknowledged once its batch committed. Only that thread changes the index, so
//! the order of the index is the order of the commits. Should a commit fail, the index is
//! rebuilt from the tables on the same thread. In memory-only mode the same plan is applied
//! under the index lock.
//!
//! # Expiry and eviction
//! Reads compare the expiry with the clock, so an entry vanishes at its instant. A
//! background task wakes every second and removes expired entries in batches of
//! [`REAP_BATCH`] (each batch one write, so requests interleave). With a size bound, a write
//! that would exceed it first removes expired entries, then the least recently used; a
//! `get` marks an entry used in memory only, so reads never write to disk.

mod index;
mod index_key;
mod lru;

use std::{
    collections::HashSet,
    path::Path,
    sync::{
        Arc, Mutex, MutexGuard, Weak,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use quintet_core::{
    Clock, Error, Instance, InstanceId, Result,
    cache::{CacheKey, CacheValue, Glob, Ttl},
    ports::{
        Lifecycle,
        cache::{Cache, CacheEntry, SetMode},
    },
};
use rusqlite::{Connection, OptionalExtension};
use tokio::{sync::watch, task::JoinHandle};

use self::{
    index::{Index, Lookup, PutOp, PutPlan, Values, Victim, entry_size},
    index_key::IndexKey,
};
use crate::{
    instance_store::InstanceTables,
    sqlite::{INSTANCE_GONE, SqliteDb, SqliteOptions, is_missing_table, sql_error},
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
/// up to this many bytes, so reading them needs no SQLite at all.
pub const HELD_VALUE_BYTES: u64 = 64 * 1024 * 1024;

const TABLES: InstanceTables = InstanceTables { prefix: "c" };

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
    index: Mutex<Index>,
    clock: Arc<dyn Clock>,
    /// `None` in memory-only mode.
    db: Option<SqliteDb>,
    reaper_started: AtomicBool,
    reaper: Mutex<Option<(watch::Sender<bool>, JoinHandle<()>)>>,
}

fn table(id: InstanceId) -> String {
    TABLES.table(id)
}

fn ddl(table: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS \"{table}\" (\
           key        TEXT PRIMARY KEY, \
           value      TEXT NOT NULL, \
           expires_ms INTEGER\
         ) STRICT;"
    )
}

impl EmbeddedCache {
    /// Open the cache: on the SQLite file at `path`, or in memory only when `options` say so
    /// (then a file left at `path` by an earlier durable run is removed, so its entries
    /// cannot come back later). Every stored entry is indexed before this returns.
    pub fn open(path: &Path, clock: Arc<dyn Clock>, options: &CacheOptions) -> Result<Self> {
        let values = if options.memory_only {
            Values::All
        } else {
            Values::Recent(HELD_VALUE_BYTES)
        };
        let mut index = Index::new(options.max_bytes, values);
        let db = if options.memory_only {
            remove_files(path)?;
            None
        } else {
            let db = SqliteDb::open(path, &[], SqliteOptions::default())?;
            db.read_now(|conn| load_all(conn, &mut index))?;
            Some(db)
        };
        let cache = Self {
            inner: Arc::new(Inner {
                index: Mutex::new(index),
                clock,
                db,
                reaper_started: AtomicBool::new(false),
                reaper: Mutex::new(None),
            }),
        };
        cache.ensure_reaper();
        Ok(cache)
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
        let Some(db) = &self.inner.db else {
            let mut index = self.inner.lock();
            let plan = index.plan_put(inst, &name, key, size, now, op)?;
            index.apply_put(inst, key, size, &plan, value);
            return Ok(());
        };
        let inner = Arc::clone(&self.inner);
        let key = key.clone();
        let written = db
            .write(move |conn| {
                let plan = inner.lock().plan_put(inst, &name, &key, size, now, op)?;
                write_sql(conn, inst, &key, &value, &plan)?;
                inner.lock().apply_put(inst, &key, size, &plan, value);
                Ok(())
            })
            .await;
        self.inner.repair_after(written).await
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Index> {
        // A panic while holding the lock cannot leave the index half-updated in a way
        // that matters more than refusing every request would, so poisoning is ignored.
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// After a failed durable write the index may be ahead of the tables (its batch was
    /// rolled back), or may know an instance whose table is missing (writes plan against
    /// the index first, so only a disagreement gets that far): rebuild it from the
    /// tables, in commit order, on the writer thread.
    async fn repair_after<T>(self: &Arc<Self>, result: Result<T>) -> Result<T> {
        let detail = match &result {
            Err(Error::Internal(detail)) => Some(detail.as_str()),
            Err(Error::NotFound(msg)) if msg == INSTANCE_GONE => Some(INSTANCE_GONE),
            _ => None,
        };
        if let (Some(detail), Some(db)) = (detail, &self.db) {
            tracing::warn!(error = %detail, "a cache write failed; rebuilding the cache index");
            let inner = Arc::clone(self);
            let rebuilt = db
                .write(move |conn| {
                    let mut fresh = inner.lock().emptied();
                    load_all(conn, &mut fresh)?;
                    *inner.lock() = fresh;
                    Ok(())
                })
                .await;
            if let Err(e) = rebuilt {
                tracing::error!(error = %e, "rebuilding the cache index failed");
            }
        }
        result
    }

    /// Remove one batch of expired (or, over the bound, least recently used) entries.
    async fn reap_batch(self: &Arc<Self>) -> Result<usize> {
        let now = self.clock.now_ms();
        let Some(db) = &self.db else {
            let mut index = self.lock();
            let victims = index.plan_reap(now, REAP_BATCH);
            index.remove_victims(&victims);
            return Ok(victims.len());
        };
        if self.lock().plan_reap(now, 1).is_empty() {
            return Ok(0); // nothing to do: no write, no commit
        }
        let inner = Arc::clone(self);
        let reaped = db
            .write(move |conn| {
                let victims = inner.lock().plan_reap(now, REAP_BATCH);
                delete_sql(conn, &victims)?;
                inner.lock().remove_victims(&victims);
                Ok(victims.len())
            })
            .await;
        self.repair_after(reaped).await
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

/// Remove a memory-only cache's leftover database files.
fn remove_files(path: &Path) -> Result<()> {
    let mut removed = false;
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.as_os_str().to_owned();
        file.push(suffix);
        match std::fs::remove_file(&file) {
            Ok(()) => removed = true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
    }
    if removed {
        tracing::warn!(
            path = %path.display(),
            "the cache is memory-only: removed the entries a durable run left on disk"
        );
    }
    Ok(())
}

/// Index every entry of every cache table.
fn load_all(conn: &Connection, index: &mut Index) -> Result<()> {
    let names: Vec<String> = {
        let mut stmt = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name GLOB 'c[0-9]*'")
            .map_err(sql_error)?;
        stmt.query_map([], |r| r.get(0))
            .map_err(sql_error)?
            .collect::<rusqlite::Result<_>>()
            .map_err(sql_error)?
    };
    for name in names {
        let Some(id) = name[1..].parse::<i64>().ok().map(InstanceId) else {
            continue; // an auxiliary table `c<id>_<suffix>`
        };
        index.create_shelf(id);
        let mut stmt = conn
            .prepare(&format!(
                "SELECT key, octet_length(value), expires_ms FROM \"{name}\""
            ))
            .map_err(sql_error)?;
        let mut rows = stmt.query([]).map_err(sql_error)?;
        while let Some(row) = rows.next().map_err(sql_error)? {
            let key: String = row.get(0).map_err(sql_error)?;
            let value_len: i64 = row.get(1).map_err(sql_error)?;
            let expires: Option<i64> = row.get(2).map_err(sql_error)?;
            let size = entry_size(&key, usize::try_from(value_len).unwrap_or(0));
            index.load(id, &key, size, expires);
        }
    }
    Ok(())
}

/// The SQL of a planned write: prepare the table if needed, evict, upsert.
fn write_sql(
    conn: &Connection,
    inst: InstanceId,
    key: &CacheKey,
    value: &CacheValue,
    plan: &PutPlan,
) -> Result<()> {
    let t = table(inst);
    if plan.new_shelf {
        conn.execute_batch(&ddl(&t)).map_err(sql_error)?;
    }
    delete_sql(conn, &plan.victims)?;
    conn.prepare_cached(&format!(
        "INSERT INTO \"{t}\" (key, value, expires_ms) VALUES (?1, ?2, ?3) \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value, expires_ms = excluded.expires_ms"
    ))
    .and_then(|mut stmt| {
        stmt.execute(rusqlite::params![
            key.as_str(),
            value.as_str(),
            plan.expires_ms
        ])
    })
    .map_err(sql_error)?;
    Ok(())
}

fn delete_sql(conn: &Connection, victims: &[Victim]) -> Result<()> {
    for v in victims {
        conn.prepare_cached(&format!("DELETE FROM \"{}\" WHERE key = ?1", table(v.inst)))
            .and_then(|mut stmt| stmt.execute([v.key.as_str()]))
            .map_err(sql_error)?;
    }
    Ok(())
}

/// The value under `key` if its row is still there and live at `now`.
fn read_value(conn: &Connection, table: &str, key: &str, now: i64) -> Result<Option<CacheValue>> {
    let mut stmt = match conn.prepare_cached(&format!(
        "SELECT value, expires_ms FROM \"{table}\" WHERE key = ?1"
    )) {
        Ok(stmt) => stmt,
        Err(e) if is_missing_table(&e) => return Ok(None),
        Err(e) => return Err(sql_error(e)),
    };
    stmt.query_row([key], |row| {
        let expires: Option<i64> = row.get(1)?;
        if expires.is_some_and(|e| now >= e) {
            return Ok(None);
        }
        let text = row.get_ref(0)?.as_str().map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e))
        })?;
        Ok(Some(CacheValue::from_stored(text)))
    })
    .optional()
    .map(Option::flatten)
    .map_err(sql_error)
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

    async fn get(&self, instance: &Instance, key: &CacheKey) -> Result<Option<CacheValue>> {
        self.ensure_reaper();
        let now = self.inner.clock.now_ms();
        let found = self.inner.lock().lookup(instance.id, key.as_str(), now);
        let (size, version) = match found {
            Lookup::Missing => return Ok(None),
            Lookup::Live { value: Some(v), .. } => return Ok(Some(v)),
            Lookup::Live {
                size,
                value: None,
                version,
            } => (size, version),
        };
        let Some(db) = &self.inner.db else {
            return Ok(None);
        };
        let t = table(instance.id);
        let value = if size <= INLINE_READ_BYTES {
            db.read_now(|conn| read_value(conn, &t, key.as_str(), now))?
        } else {
            let key = key.clone();
            db.read(move |conn| read_value(conn, &t, key.as_str(), now))
                .await?
        };
        if let Some(v) = &value {
            // Keep it in memory for the next read, unless a write came in between.
            self.inner
                .lock()
                .hold_read(instance.id, key.as_str(), version, v.clone());
        }
        Ok(value)
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
        let Some(db) = &self.inner.db else {
            let mut index = self.inner.lock();
            index.plan_remove(inst, &name, key, now)?;
            index.remove_victims(&[victim]);
            return Ok(());
        };
        let inner = Arc::clone(&self.inner);
        let key = key.clone();
        let removed = db
            .write(move |conn| {
                inner.lock().plan_remove(inst, &name, &key, now)?;
                let victims = [victim];
                delete_sql(conn, &victims)?;
                inner.lock().remove_victims(&victims);
                Ok(())
            })
            .await;
        self.inner.repair_after(removed).await
    }

    async fn query(&self, instance: &Instance, pattern: &Glob) -> Result<Vec<CacheEntry>> {
        self.ensure_reaper();
        let now = self.inner.clock.now_ms();
        let mut found = Vec::new();
        let mut after = None;
        loop {
            let (chunk, resume) =
                self.inner
                    .lock()
                    .scan(instance.id, pattern, now, after.as_ref(), SCAN_CHUNK);
            found.extend(chunk);
            match resume {
                Some(r) => after = Some(r),
                None => break,
            }
        }
        let all_held = found.iter().all(|(_, value)| value.is_some());
        let db = match &self.inner.db {
            Some(db) if !all_held => db,
            _ => {
                return found
                    .into_iter()
                    .filter_map(|(key, value)| value.map(|v| (key, v)))
                    .map(|(key, value)| {
                        Ok(CacheEntry {
                            key: key.as_str().parse()?,
                            value,
                        })
                    })
                    .collect();
            }
        };
        let t = table(instance.id);
        db.read(move |conn| {
            // One read transaction: every value read from the same snapshot.
            let tx = conn.unchecked_transaction().map_err(sql_error)?;
            let mut entries = Vec::with_capacity(found.len());
            for (key, held) in found {
                let value = match held {
                    Some(v) => Some(v),
                    None => read_value(&tx, &t, key.as_str(), now)?,
                };
                if let Some(value) = value {
                    entries.push(CacheEntry {
                        key: key.as_str().parse()?,
                        value,
                    });
                }
            }
            Ok(entries)
        })
        .await
    }
}

#[async_trait]
impl Lifecycle for EmbeddedCache {
    async fn create_instance(&self, instance: &Instance) -> Result<()> {
        self.ensure_reaper();
        let id = instance.id;
        let Some(db) = &self.inner.db else {
            self.inner.lock().create_shelf(id);
            return Ok(());
        };
        let inner = Arc::clone(&self.inner);
        db.write(move |conn| {
            conn.execute_batch(&ddl(&table(id))).map_err(sql_error)?;
            inner.lock().create_shelf(id);
            Ok(())
        })
        .await
    }

    async fn drop_instance(&self, instance: &Instance) -> Result<()> {
        let id = instance.id;
        let Some(db) = &self.inner.db else {
            self.inner.lock().drop_shelf(id);
            return Ok(());
        };
        let inner = Arc::clone(&self.inner);
        db.write(move |conn| {
            TABLES.drop_instance(conn, id)?;
            inner.lock().drop_shelf(id);
            Ok(())
        })
        .await
    }

    async fn sweep(&self, live: &[InstanceId]) -> Result<usize> {
        self.ensure_reaper();
        let live: HashSet<InstanceId> = live.iter().copied().collect();
        let Some(db) = &self.inner.db else {
            return Ok(self.inner.lock().retain(&live));
        };
        let inner = Arc::clone(&self.inner);
        db.write(move |conn| {
            let ids: Vec<InstanceId> = live.iter().copied().collect();
            let removed = TABLES.sweep(conn, &ids)?;
            inner.lock().retain(&live);
            Ok(removed)
        })
        .await
    }

    async fn close(&self) -> Result<()> {
        // Stop the background reclaim first, so it does not race the closing writer.
        self.inner.reaper_started.store(true, Ordering::Release);
        let reaper = self.inner.reaper.lock().ok().and_then(|mut r| r.take());
        if let Some((stop, task)) = reaper {
            let _ = stop.send(true);
            let _ = task.await;
        }
        match &self.inner.db {
            Some(db) => db.close().await,
            None => Ok(()),
        }
    }
}
