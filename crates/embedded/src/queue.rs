//! The queue service on SQLite (`queue.db`): one table per instance.
//!
//! A row is a job. `status` is `READY` or `ERROR`; a READY job is claimable when `due_ms`
//! has come. `(status, due_ms)` is indexed, so claiming reads only due jobs in due order.
//!
//! # Leases live in memory
//! This process is the only one using `queue.db` (the data directory is locked), so leases
//! need not be shared with anyone: they are kept in memory, per queue, and a claim is a
//! read, not a write. That keeps one `fsync` out of the way between an enqueue and its
//! delivery. A restart forgets every lease, which is exactly right: the process that held
//! them is gone, so jobs in flight at a crash are claimable again at once. The `attempts`
//! column counts settled attempts; a claim's attempt number is recorded when it is settled.
//!
//! # Events
//! `q<id>_ev` is the queue's event log, `(seq, id, event, error, at_ms)`: one row per
//! enqueue, delivery, failure, cancellation and retry, written in the transaction that
//! changes the job (see [`crate::changelog`] for the numbering). A queue created before
//! event logs existed gets an empty one on its first write.

use std::{
    collections::{HashMap, HashSet},
    path::Path,
    sync::{Mutex, MutexGuard, Weak},
};

use async_trait::async_trait;
use quintet_core::{
    Clock, Error, Instance, InstanceId, ManualClock, Result, SystemClock,
    id::{IdGenerator, random_bytes},
    ports::{
        Keep, Lifecycle, PoolUsage,
        changes::{ChangesPage, FeedListener, check_since},
        queue::{
            CarriedJob, Claim, ClaimedJob, IdempotencyKey, JobBody, JobEvent, JobEventKind,
            JobQueue, JobRecord, JobStatus, LeaseToken, ListJobs, Outcome, QueueDepth, Settlement,
            idempotency_key_taken, job_missing, job_not_failed, queue_missing, stored_job,
        },
    },
};
use rusqlite::{Connection, OptionalExtension, params};
use std::sync::Arc;

use crate::{
    changelog::{self, Listeners, table_exists, tell},
    disk::DiskSpace,
    instance_store::TableLifecycle,
    sqlite::{SqliteDb, SqliteOptions, is_missing_table, is_unique_violation, sql_error},
};

/// Jobs of every queue instance, in one SQLite file.
#[derive(Debug, Clone)]
pub struct SqliteJobQueue {
    tables: TableLifecycle,
    ids: Arc<IdGenerator>,
    leases: Arc<Mutex<HashMap<InstanceId, Arc<Mutex<Leases>>>>>,
    /// Admits enqueues and retries while the disk has room; the dispatcher's settlements
    /// and cancellations are not asked.
    disk: Arc<DiskSpace>,
    /// Queues whose event log is known to exist (created, or checked once per process).
    logged: Arc<Mutex<HashSet<InstanceId>>>,
    /// Told after every commit that recorded events.
    listeners: Listeners,
}

/// The leases held on one queue's jobs, by job id.
#[derive(Debug, Default)]
struct Leases {
    held: HashMap<String, Held>,
}

#[derive(Debug, Clone, Copy)]
struct Held {
    token: i64,
    until_ms: i64,
    attempt: u32,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The maps stay consistent whatever panicked while holding them.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn ddl(table: &str) -> String {
    format!(
        "CREATE TABLE \"{table}\" (\
           seq        INTEGER PRIMARY KEY AUTOINCREMENT, \
           id         TEXT NOT NULL UNIQUE, \
           status     TEXT NOT NULL, \
           job        TEXT NOT NULL, \
           attempts   INTEGER NOT NULL DEFAULT 0, \
           error      TEXT, \
           idem       TEXT UNIQUE, \
           due_ms     INTEGER NOT NULL, \
           created_ms INTEGER NOT NULL, \
           updated_ms INTEGER NOT NULL\
         ) STRICT; \
         CREATE INDEX \"{table}_due\" ON \"{table}\" (status, due_ms);{}",
        events_ddl(table)
    )
}

/// The DDL of a queue's event log.
fn events_ddl(table: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS \"{table}_ev\" (\
           seq   INTEGER PRIMARY KEY AUTOINCREMENT, \
           id    TEXT NOT NULL, \
           event TEXT NOT NULL, \
           error TEXT, \
           at_ms INTEGER NOT NULL\
         ) STRICT;"
    )
}

/// Append event `event` of job `id` to the log of queue table `table`, in the write's
/// transaction.
fn record(
    c: &Connection,
    table: &str,
    id: &str,
    event: JobEventKind,
    error: Option<&str>,
    at_ms: i64,
) -> Result<()> {
    c.prepare_cached(&format!(
        "INSERT INTO \"{table}_ev\" (id, event, error, at_ms) VALUES (?1, ?2, ?3, ?4)"
    ))
    .and_then(|mut s| s.execute(params![id, event.as_str(), error, at_ms]))
    .map_err(sql_error)?;
    Ok(())
}

impl SqliteJobQueue {
    /// Open (or create) the job database at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let db = SqliteDb::open(path, &[], SqliteOptions::default())?;
        Ok(Self {
            tables: TableLifecycle::new(db, "q", ddl),
            ids: Arc::new(IdGenerator::new()),
            leases: Arc::new(Mutex::new(HashMap::new())),
            disk: Arc::new(DiskSpace::unchecked(path)),
            logged: Arc::default(),
            listeners: Arc::default(),
        })
    }

    /// The same queue with writes admitted by `disk` (see [`crate::disk`]).
    pub fn with_disk(mut self, disk: Arc<DiskSpace>) -> Self {
        self.disk = disk;
        self
    }

    fn leases(&self, id: InstanceId) -> Arc<Mutex<Leases>> {
        Arc::clone(lock(&self.leases).entry(id).or_default())
    }

    fn db(&self) -> &SqliteDb {
        self.tables.db()
    }

    fn table(&self, instance: &Instance) -> String {
        self.tables.table(instance.id)
    }

    /// Run `f` on the writer, with the queue's event log there, and tell the listeners
    /// once it committed.
    async fn write<T, F>(&self, instance: &Instance, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &str) -> Result<T> + Send + 'static,
    {
        let (id, table) = (instance.id, self.table(instance));
        let logged = Arc::clone(&self.logged);
        let listeners = Arc::clone(&self.listeners);
        self.db()
            .write_then(
                move |c| {
                    if !lock(&logged).contains(&id) {
                        // Only for a queue that exists: a dropped one answers NotFound.
                        if table_exists(c, &table)? {
                            c.execute_batch(&events_ddl(&table)).map_err(sql_error)?;
                            lock(&logged).insert(id);
                        }
                    }
                    f(c, &table)
                },
                move || tell(&listeners, id),
            )
            .await
    }
}

/// Map an engine error, turning a missing table (the queue was destroyed) into NotFound.
fn map_err(instance_name: &str) -> impl Fn(rusqlite::Error) -> Error + '_ {
    move |e| {
        if is_missing_table(&e) {
            queue_missing(instance_name)
        } else {
            sql_error(e)
        }
    }
}

/// `n` random lease tokens, from one read of the random source.
fn random_tokens(n: usize) -> Result<Vec<i64>> {
    let bytes = random_bytes(8 * n)?;
    Ok(bytes
        .chunks_exact(8)
        .map(|c| {
            let mut buf = [0u8; 8];
            buf.copy_from_slice(c);
            // Positive 63-bit values; zero is never issued.
            (i64::from_le_bytes(buf) & i64::MAX).max(1)
        })
        .collect())
}

#[async_trait]
impl Lifecycle for SqliteJobQueue {
    async fn create_instance(&self, instance: &Instance) -> Result<()> {
        self.disk.admit()?;
        self.tables.create(instance.id).await
    }

    async fn drop_instance(&self, instance: &Instance) -> Result<()> {
        self.tables.drop(instance.id).await?;
        lock(&self.leases).remove(&instance.id);
        lock(&self.logged).remove(&instance.id);
        Ok(())
    }

    async fn ready(&self) -> Result<()> {
        self.disk.ready()
    }

    async fn sweep(&self, keep: &Keep) -> Result<usize> {
        let removed = self.tables.sweep(keep).await?;
        lock(&self.leases).retain(|id, _| keep.keeps(*id));
        lock(&self.logged).retain(|id| keep.keeps(*id));
        Ok(removed)
    }

    fn pool(&self) -> Option<PoolUsage> {
        // A file of the node's own: no engine connections.
        None
    }

    async fn close(&self) -> Result<()> {
        self.tables.db().close().await
    }
}

#[async_trait]
impl JobQueue for SqliteJobQueue {
    async fn enqueue(
        &self,
        instance: &Instance,
        job: &JobBody,
        idempotency_key: Option<&IdempotencyKey>,
        now_ms: i64,
    ) -> Result<String> {
        self.disk.admit()?;
        let id = self.ids.next_id(&ManualClock::new(now_ms))?;
        let body = job.as_str().to_owned();
        let key = idempotency_key.map(|k| k.as_str().to_owned());
        let name = instance.name.to_string();
        let job_id = id.clone();
        self.write(instance, move |c, table| {
            let sql = format!(
                "INSERT INTO \"{table}\" (id, status, job, idem, due_ms, created_ms, updated_ms) \
                     VALUES (?1, 'READY', ?2, ?3, ?4, ?4, ?4)"
            );
            let mut stmt = c.prepare_cached(&sql).map_err(map_err(&name))?;
            match stmt.execute(params![job_id, body, key, now_ms]) {
                Ok(_) => record(c, table, &job_id, JobEventKind::Ready, None, now_ms),
                Err(e) if is_unique_violation(&e) => {
                    let existing: Option<String> = c
                        .query_row(
                            &format!("SELECT id FROM \"{table}\" WHERE idem = ?1"),
                            [&key],
                            |r| r.get(0),
                        )
                        .optional()
                        .map_err(sql_error)?;
                    Err(idempotency_key_taken(
                        key.unwrap_or_default(),
                        existing.unwrap_or_default(),
                    ))
                }
                Err(e) => Err(map_err(&name)(e)),
            }
        })
        .await?;
        Ok(id)
    }

    async fn restore(&self, instance: &Instance, job: &CarriedJob, now_ms: i64) -> Result<String> {
        self.disk.admit()?;
        let table = self.table(instance);
        let id = self.ids.next_id(&ManualClock::new(now_ms))?;
        let body = job.body.as_str().to_owned();
        let (status, attempts, error, created_ms) = (
            job.status.as_str(),
            job.attempts,
            job.error.clone(),
            job.created_ms,
        );
        let name = instance.name.to_string();
        let job_id = id.clone();
        self.db()
            .write(move |c| {
                let sql = format!(
                    "INSERT INTO \"{table}\" \
                     (id, status, job, attempts, error, due_ms, created_ms, updated_ms) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?6)"
                );
                c.prepare_cached(&sql)
                    .and_then(|mut stmt| {
                        stmt.execute(params![
                            job_id, status, body, attempts, error, now_ms, created_ms
                        ])
                    })
                    .map_err(map_err(&name))?;
                Ok(())
            })
            .await?;
        Ok(id)
    }

    async fn list(&self, instance: &Instance, query: &ListJobs) -> Result<Vec<JobRecord>> {
        let table = self.table(instance);
        let name = instance.name.to_string();
        let query = query.clone();
        self.db()
            .read(move |c| list_jobs(c, &table, &name, &query))
            .await
    }

    async fn retry(&self, instance: &Instance, id: &str, now_ms: i64) -> Result<()> {
        self.disk.admit()?;
        let name = instance.name.to_string();
        let id = id.to_owned();
        self.write(instance, move |c, table| {
            let changed = c
                .execute(
                    &format!(
                        "UPDATE \"{table}\" SET status = 'READY', attempts = 0, error = NULL, \
                             due_ms = ?2, updated_ms = ?2 \
                             WHERE id = ?1 AND status = 'ERROR'"
                    ),
                    params![id, now_ms],
                )
                .map_err(map_err(&name))?;
            if changed == 1 {
                return record(c, table, &id, JobEventKind::Retried, None, now_ms);
            }
            let status: Option<String> = c
                .query_row(
                    &format!("SELECT status FROM \"{table}\" WHERE id = ?1"),
                    [&id],
                    |r| r.get(0),
                )
                .optional()
                .map_err(map_err(&name))?;
            match status {
                None => Err(job_missing(&id)),
                Some(_) => Err(job_not_failed(&id)),
            }
        })
        .await
    }

    async fn cancel(&self, instance: &Instance, id: &str) -> Result<()> {
        let name = instance.name.to_string();
        let job = id.to_owned();
        // The port gives cancellations no time: the event is dated by this machine's clock.
        let now_ms = SystemClock.now_ms();
        self.write(instance, move |c, table| {
            let removed = c
                .execute(&format!("DELETE FROM \"{table}\" WHERE id = ?1"), [&job])
                .map_err(map_err(&name))?;
            if removed == 0 {
                Err(job_missing(&job))
            } else {
                record(c, table, &job, JobEventKind::Cancelled, None, now_ms)
            }
        })
        .await?;
        lock(&self.leases(instance.id)).held.remove(id);
        Ok(())
    }

    async fn claim(
        &self,
        instance: &Instance,
        now_ms: i64,
        lease_until_ms: i64,
        max: usize,
    ) -> Result<Claim> {
        let table = self.table(instance);
        let name = instance.name.to_string();
        let tokens = random_tokens(max)?;
        let leases = self.leases(instance.id);
        self.db()
            .read(move |c| {
                // Held while reading, so concurrent claims of one queue never pick the same
                // rows (one pump claims per queue, so this lock is not contended).
                let mut leases = lock(&leases);
                claim_jobs(
                    c,
                    &table,
                    &name,
                    &mut leases,
                    now_ms,
                    lease_until_ms,
                    &tokens,
                )
            })
            .await
    }

    async fn settle(
        &self,
        instance: &Instance,
        now_ms: i64,
        settlements: Vec<Settlement>,
    ) -> Result<usize> {
        let leases = self.leases(instance.id);
        // Only settlements whose claim still holds the job count; take each one's attempt.
        let current: Vec<(Settlement, u32)> = {
            let held = lock(&leases);
            settlements
                .into_iter()
                .filter_map(|s| {
                    let h = held.held.get(&s.id).filter(|h| h.token == s.lease.0)?;
                    Some((s, h.attempt))
                })
                .collect()
        };
        if current.is_empty() {
            return Ok(0);
        }
        let name = instance.name.to_string();
        let ops: Vec<(Settlement, u32)> = current
            .iter()
            .filter(|(s, _)| s.outcome != Outcome::Released)
            .cloned()
            .collect();
        if !ops.is_empty() {
            self.write(instance, move |c, table| {
                settle_jobs(c, table, &name, now_ms, &ops)
            })
            .await?;
        }
        // Released only once the outcome is committed, so no claim in between can pick a
        // job that is being removed or postponed.
        let mut held = lock(&leases);
        for (s, _) in &current {
            if held.held.get(&s.id).is_some_and(|h| h.token == s.lease.0) {
                held.held.remove(&s.id);
            }
        }
        Ok(current.len())
    }

    async fn events(
        &self,
        instance: &Instance,
        since: u64,
        limit: usize,
    ) -> Result<ChangesPage<JobEvent>> {
        let table = self.table(instance);
        let name = instance.name.to_string();
        self.db().read_now(|c| {
            let log = format!("{table}_ev");
            if !table_exists(c, &log)? {
                // A queue untouched since before event logs existed has none yet.
                return if table_exists(c, &table)? {
                    check_since(instance, since, 0, None)?;
                    Ok(ChangesPage::default())
                } else {
                    Err(queue_missing(&name))
                };
            }
            changelog::page(c, &log, "id, event, error", instance, since, limit, |r| {
                let event: String = r.get(2)?;
                Ok(JobEvent {
                    seq: r.get::<_, i64>(0)? as u64,
                    id: r.get(1)?,
                    event: JobEventKind::from_stored(&event).map_err(|e| {
                        rusqlite::Error::FromSqlConversionFailure(
                            2,
                            rusqlite::types::Type::Text,
                            Box::new(e),
                        )
                    })?,
                    error: r.get(3)?,
                })
            })
        })
    }

    async fn event_head(&self, instance: &Instance) -> Result<u64> {
        let table = self.table(instance);
        self.db().read_now(|c| {
            if !table_exists(c, &table)? {
                return Err(queue_missing(&instance.name));
            }
            changelog::head(c, &format!("{table}_ev"))
        })
    }

    async fn compact_events(&self, before_ms: i64) -> Result<u64> {
        changelog::compact(self.db(), "q[0-9]*_ev", before_ms).await
    }

    fn subscribe_events(&self, listener: Weak<dyn FeedListener>) {
        changelog::subscribe(&self.listeners, listener);
    }

    async fn recover(&self, _now_ms: i64) -> Result<usize> {
        // Leases live in this process only: a new process starts with none, so every job a
        // dead process had claimed is claimable already.
        let mut all = lock(&self.leases);
        let released = all.values().map(|l| lock(l).held.len()).sum();
        all.clear();
        Ok(released)
    }

    async fn depth(&self, instance: &Instance) -> Result<QueueDepth> {
        let table = self.table(instance);
        let name = instance.name.to_string();
        self.db()
            .read(move |c| {
                let mut stmt = c
                    .prepare_cached(&format!(
                        "SELECT status, count(*) FROM \"{table}\" GROUP BY status"
                    ))
                    .map_err(map_err(&name))?;
                let rows = stmt
                    .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
                    .map_err(map_err(&name))?
                    .collect::<rusqlite::Result<Vec<_>>>()
                    .map_err(sql_error)?;
                let mut depth = QueueDepth::default();
                for (status, n) in rows {
                    let n = u64::try_from(n).unwrap_or(0);
                    match JobStatus::from_stored("(count)", &status)? {
                        JobStatus::Ready => depth.ready = n,
                        JobStatus::Error => depth.error = n,
                    }
                }
                Ok(depth)
            })
            .await
    }
}

fn claim_jobs(
    c: &Connection,
    table: &str,
    name: &str,
    leases: &mut Leases,
    now_ms: i64,
    lease_until_ms: i64,
    tokens: &[i64],
) -> Result<Claim> {
    let max = tokens.len();
    let valid = |h: &Held| h.until_ms > now_ms;
    let held_now = leases.held.values().filter(|h| valid(h)).count();
    // Enough due rows to find `max` unheld ones past the held ones, and one more to tell
    // whether any are left.
    let mut pick = c
        .prepare_cached(&format!(
            "SELECT id, job, attempts FROM \"{table}\" \
             WHERE status = 'READY' AND due_ms <= ?1 ORDER BY due_ms, seq LIMIT ?2"
        ))
        .map_err(map_err(name))?;
    let rows: Vec<(String, String, u32)> = pick
        .query_map(params![now_ms, (max + held_now + 1) as i64], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .map_err(map_err(name))?
        .collect::<rusqlite::Result<_>>()
        .map_err(sql_error)?;
    let mut jobs = Vec::with_capacity(max);
    let mut more_due = false;
    for (id, body, attempts) in rows {
        let previous = leases.held.get(&id).copied();
        if previous.is_some_and(|h| valid(&h)) {
            continue;
        }
        let Some(token) = tokens.get(jobs.len()) else {
            more_due = true;
            break;
        };
        // A lease that expired unsettled may have been sent: it counts as an attempt.
        let attempt = previous
            .map_or(attempts, |h| h.attempt.max(attempts))
            .saturating_add(1);
        leases.held.insert(
            id.clone(),
            Held {
                token: *token,
                until_ms: lease_until_ms,
                attempt,
            },
        );
        jobs.push(ClaimedJob {
            id,
            body,
            attempt,
            lease: LeaseToken(*token),
        });
    }
    let next_due_ms = if more_due {
        Some(now_ms)
    } else {
        let later: Option<i64> = c
            .prepare_cached(&format!(
                "SELECT min(due_ms) FROM \"{table}\" WHERE status = 'READY' AND due_ms > ?1"
            ))
            .and_then(|mut s| s.query_row([now_ms], |r| r.get(0)))
            .map_err(map_err(name))?;
        // Leases held by earlier claims make their jobs claimable when they expire.
        let expiry = leases
            .held
            .values()
            .filter(|h| valid(h) && h.until_ms != lease_until_ms)
            .map(|h| h.until_ms)
            .min();
        match (later, expiry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    };
    Ok(Claim { jobs, next_due_ms })
}

fn settle_jobs(
    c: &Connection,
    table: &str,
    name: &str,
    now_ms: i64,
    settlements: &[(Settlement, u32)],
) -> Result<()> {
    for (s, attempt) in settlements {
        let event = match &s.outcome {
            Outcome::Delivered => Some((JobEventKind::Delivered, None)),
            Outcome::Failed { error } => Some((JobEventKind::Error, Some(error.as_str()))),
            Outcome::RetryAt { .. } | Outcome::Released => None,
        };
        let changed = match &s.outcome {
            Outcome::Delivered => c
                .prepare_cached(&format!("DELETE FROM \"{table}\" WHERE id = ?1"))
                .and_then(|mut st| st.execute(params![s.id])),
            Outcome::Failed { error } => c
                .prepare_cached(&format!(
                    "UPDATE \"{table}\" SET status = 'ERROR', error = ?2, attempts = ?3, \
                     updated_ms = ?4 WHERE id = ?1"
                ))
                .and_then(|mut st| st.execute(params![s.id, error, attempt, now_ms])),
            Outcome::RetryAt { due_ms, error } => c
                .prepare_cached(&format!(
                    "UPDATE \"{table}\" SET due_ms = ?2, error = ?3, attempts = ?4, \
                     updated_ms = ?5 WHERE id = ?1"
                ))
                .and_then(|mut st| st.execute(params![s.id, due_ms, error, attempt, now_ms])),
            Outcome::Released => Ok(0),
        }
        .map_err(map_err(name))?;
        if changed > 0
            && let Some((event, error)) = event
        {
            record(c, table, &s.id, event, error, now_ms)?;
        }
    }
    Ok(())
}

fn list_jobs(c: &Connection, table: &str, name: &str, q: &ListJobs) -> Result<Vec<JobRecord>> {
    let status = q.status.map(JobStatus::as_str);
    let mut stmt = c
        .prepare_cached(&format!(
            "SELECT id, status, job, attempts, error, created_ms, updated_ms FROM \"{table}\" \
             WHERE (?1 IS NULL OR status = ?1) \
               AND seq > coalesce((SELECT seq FROM \"{table}\" WHERE id = ?2), 0) \
             ORDER BY seq LIMIT ?3"
        ))
        .map_err(map_err(name))?;
    let rows = stmt
        .query_map(params![status, q.after, q.limit as i64], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, u32>(3)?,
                r.get::<_, Option<String>>(4)?,
                r.get::<_, i64>(5)?,
                r.get::<_, i64>(6)?,
            ))
        })
        .map_err(map_err(name))?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(sql_error)?;
    rows.into_iter()
        .map(
            |(id, status, job, attempts, error, created_ms, updated_ms)| {
                let job = stored_job(&id, job)?;
                let status = JobStatus::from_stored(&id, &status)?;
                Ok(JobRecord {
                    id,
                    status,
                    job,
                    attempts,
                    error,
                    created_ms,
                    updated_ms,
                })
            },
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use quintet_core::{AppName, InstanceConfig, ports::queue::QueueConfig};

    fn instance(id: i64) -> Instance {
        Instance {
            id: InstanceId(id),
            app: AppName::domain(),
            name: "q".parse().unwrap(),
            config: InstanceConfig::Queue(QueueConfig::new("http://127.0.0.1:9/")),
            created_ms: 0,
        }
    }

    fn body(text: &str) -> JobBody {
        let v: serde_json::Value = serde_json::from_str(text).unwrap();
        JobBody::from_document(v.as_object().unwrap()).unwrap()
    }

    #[tokio::test]
    async fn a_new_process_can_claim_what_a_dead_one_held() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("queue.db");
        let q = SqliteJobQueue::open(&path).unwrap();
        let a = instance(1);
        q.create_instance(&a).await.unwrap();
        q.enqueue(&a, &body(r#"{"n":1}"#), None, 1_000)
            .await
            .unwrap();
        assert_eq!(
            q.claim(&a, 1_000, 1_000_000, 5).await.unwrap().jobs.len(),
            1
        );
        assert!(
            q.claim(&a, 2_000, 1_000_000, 5)
                .await
                .unwrap()
                .jobs
                .is_empty()
        );
        assert_eq!(q.recover(2_000).await.unwrap(), 1);
        q.close().await.unwrap();

        // "Restart": the lease would hold until 1_000_000, but it died with the process.
        let q = SqliteJobQueue::open(&path).unwrap();
        assert_eq!(q.recover(2_000).await.unwrap(), 0);
        let again = q.claim(&a, 2_000, 3_000, 5).await.unwrap();
        assert_eq!(again.jobs.len(), 1);
        q.close().await.unwrap();
    }

    #[tokio::test]
    async fn a_claim_is_a_read_and_settling_records_the_attempt() {
        let dir = tempfile::tempdir().unwrap();
        let q = SqliteJobQueue::open(&dir.path().join("queue.db")).unwrap();
        let a = instance(3);
        q.create_instance(&a).await.unwrap();
        q.enqueue(&a, &body(r#"{"n":1}"#), None, 0).await.unwrap();
        let job = q.claim(&a, 0, 100, 1).await.unwrap().jobs.remove(0);
        let listed = q
            .list(&a, &ListJobs::status(JobStatus::Ready))
            .await
            .unwrap();
        assert_eq!(listed[0].attempts, 0, "not recorded until settled");
        let out = Outcome::RetryAt {
            due_ms: 50,
            error: "e".into(),
        };
        let settlement = Settlement {
            id: job.id,
            lease: job.lease,
            outcome: out,
        };
        assert_eq!(q.settle(&a, 10, vec![settlement.clone()]).await.unwrap(), 1);
        assert_eq!(q.settle(&a, 10, vec![settlement]).await.unwrap(), 0, "once");
        let listed = q
            .list(&a, &ListJobs::status(JobStatus::Ready))
            .await
            .unwrap();
        assert_eq!(listed[0].attempts, 1);
    }

    #[tokio::test]
    async fn a_dropped_queue_answers_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let q = SqliteJobQueue::open(&dir.path().join("queue.db")).unwrap();
        let a = instance(7);
        q.create_instance(&a).await.unwrap();
        q.drop_instance(&a).await.unwrap();
        assert!(matches!(
            q.claim(&a, 0, 1, 1).await,
            Err(Error::NotFound(_))
        ));
        assert!(matches!(
            q.enqueue(&a, &body("{}"), None, 0).await,
            Err(Error::NotFound(_))
        ));
    }
}
