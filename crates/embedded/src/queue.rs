//! The queue service on SQLite (`queue.db`): one table per instance.
//!
//! A row is a job. `status` is `READY` or `ERROR`; a READY job is claimable when `due_ms`
//! has come. A claim sets `lease` (a random token) and moves `due_ms` to the lease's expiry,
//! so a job whose claimer died becomes claimable again by itself; settling a claim checks
//! the token. `(status, due_ms)` is indexed, so claiming reads only due jobs in due order.
//!
//! This file is the only node using `queue.db` (the data directory is locked), so at
//! start-up every lease belongs to a process that is gone: [`JobQueue::recover`] releases
//! them all and jobs in flight at a crash are delivered again at once.

use std::path::Path;

use async_trait::async_trait;
use quintet_core::{
    Error, Instance, InstanceId, ManualClock, Result,
    id::{IdGenerator, random_bytes},
    ports::{
        Lifecycle,
        data::RawJson,
        queue::{
            Claim, ClaimedJob, IdempotencyKey, JobBody, JobQueue, JobRecord, JobStatus, LeaseToken,
            ListJobs, Outcome, Settlement,
        },
    },
};
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::value::RawValue;
use std::sync::Arc;

use crate::{
    instance_store::TableLifecycle,
    sqlite::{SqliteDb, SqliteOptions, is_unique_violation, sql_error},
};

const READY: &str = "READY";
const ERROR: &str = "ERROR";

/// Jobs of every queue instance, in one SQLite file.
#[derive(Debug, Clone)]
pub struct SqliteJobQueue {
    tables: TableLifecycle,
    ids: Arc<IdGenerator>,
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
           lease      INTEGER, \
           created_ms INTEGER NOT NULL, \
           updated_ms INTEGER NOT NULL\
         ) STRICT; \
         CREATE INDEX \"{table}_due\" ON \"{table}\" (status, due_ms);"
    )
}

impl SqliteJobQueue {
    /// Open (or create) the job database at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let db = SqliteDb::open(path, &[], SqliteOptions::default())?;
        Ok(Self {
            tables: TableLifecycle::new(db, "q", ddl),
            ids: Arc::new(IdGenerator::new()),
        })
    }

    fn db(&self) -> &SqliteDb {
        self.tables.db()
    }

    fn table(&self, instance: &Instance) -> String {
        self.tables.table(instance.id)
    }
}

/// Map an engine error, turning a missing table (the queue was destroyed) into NotFound.
fn map_err(instance_name: &str) -> impl Fn(rusqlite::Error) -> Error + '_ {
    move |e| {
        if e.to_string().contains("no such table") {
            Error::not_found(format!("queue instance \"{instance_name}\" does not exist"))
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

fn job_missing(id: &str) -> Error {
    Error::not_found(format!("job \"{id}\" does not exist in this queue"))
}

#[async_trait]
impl Lifecycle for SqliteJobQueue {
    async fn create_instance(&self, instance: &Instance) -> Result<()> {
        self.tables.create(instance.id).await
    }

    async fn drop_instance(&self, instance: &Instance) -> Result<()> {
        self.tables.drop(instance.id).await
    }

    async fn sweep(&self, live: &[InstanceId]) -> Result<usize> {
        self.tables.sweep(live).await
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
        let table = self.table(instance);
        let id = self.ids.next_id(&ManualClock::new(now_ms))?;
        let body = job.as_str().to_owned();
        let key = idempotency_key.map(|k| k.as_str().to_owned());
        let name = instance.name.to_string();
        let job_id = id.clone();
        self.db()
            .write(move |c| {
                let sql = format!(
                    "INSERT INTO \"{table}\" (id, status, job, idem, due_ms, created_ms, updated_ms) \
                     VALUES (?1, 'READY', ?2, ?3, ?4, ?4, ?4)"
                );
                let mut stmt = c.prepare_cached(&sql).map_err(map_err(&name))?;
                match stmt.execute(params![job_id, body, key, now_ms]) {
                    Ok(_) => Ok(()),
                    Err(e) if is_unique_violation(&e) => {
                        let existing: Option<String> = c
                            .query_row(
                                &format!("SELECT id FROM \"{table}\" WHERE idem = ?1"),
                                [&key],
                                |r| r.get(0),
                            )
                            .optional()
                            .map_err(sql_error)?;
                        Err(Error::conflict(format!(
                            "a job with Idempotency-Key \"{}\" is already queued (id \"{}\"); \
                             the key can be used again once that job is gone",
                            key.unwrap_or_default(),
                            existing.unwrap_or_default()
                        )))
                    }
                    Err(e) => Err(map_err(&name)(e)),
                }
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
        let table = self.table(instance);
        let name = instance.name.to_string();
        let id = id.to_owned();
        self.db()
            .write(move |c| {
                let changed = c
                    .execute(
                        &format!(
                            "UPDATE \"{table}\" SET status = 'READY', attempts = 0, error = NULL, \
                             lease = NULL, due_ms = ?2, updated_ms = ?2 \
                             WHERE id = ?1 AND status = 'ERROR'"
                        ),
                        params![id, now_ms],
                    )
                    .map_err(map_err(&name))?;
                if changed == 1 {
                    return Ok(());
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
                    Some(_) => Err(Error::conflict(format!(
                        "job \"{id}\" is READY, not ERROR: it is waiting for delivery already"
                    ))),
                }
            })
            .await
    }

    async fn cancel(&self, instance: &Instance, id: &str) -> Result<()> {
        let table = self.table(instance);
        let name = instance.name.to_string();
        let id = id.to_owned();
        self.db()
            .write(move |c| {
                let removed = c
                    .execute(&format!("DELETE FROM \"{table}\" WHERE id = ?1"), [&id])
                    .map_err(map_err(&name))?;
                if removed == 0 {
                    Err(job_missing(&id))
                } else {
                    Ok(())
                }
            })
            .await
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
        self.db()
            .write(move |c| claim_jobs(c, &table, &name, now_ms, lease_until_ms, &tokens))
            .await
    }

    async fn settle(
        &self,
        instance: &Instance,
        now_ms: i64,
        settlements: Vec<Settlement>,
    ) -> Result<usize> {
        if settlements.is_empty() {
            return Ok(0);
        }
        let table = self.table(instance);
        let name = instance.name.to_string();
        self.db()
            .write(move |c| settle_jobs(c, &table, &name, now_ms, &settlements))
            .await
    }

    async fn recover(&self, now_ms: i64) -> Result<usize> {
        self.db()
            .write(move |c| {
                let mut stmt = c
                    .prepare(
                        "SELECT name FROM sqlite_master WHERE type = 'table' AND name GLOB 'q[0-9]*' \
                         AND name NOT GLOB '*_*'",
                    )
                    .map_err(sql_error)?;
                let tables = stmt
                    .query_map([], |r| r.get::<_, String>(0))
                    .map_err(sql_error)?
                    .collect::<rusqlite::Result<Vec<String>>>()
                    .map_err(sql_error)?;
                let mut released = 0;
                for table in tables {
                    released += c
                        .execute(
                            &format!(
                                "UPDATE \"{table}\" SET lease = NULL, due_ms = min(due_ms, ?1) \
                                 WHERE lease IS NOT NULL"
                            ),
                            [now_ms],
                        )
                        .map_err(sql_error)?;
                }
                Ok(released)
            })
            .await
    }
}

fn claim_jobs(
    c: &Connection,
    table: &str,
    name: &str,
    now_ms: i64,
    lease_until_ms: i64,
    tokens: &[i64],
) -> Result<Claim> {
    let max = tokens.len();
    let mut jobs = Vec::with_capacity(max);
    if max > 0 {
        let mut pick = c
            .prepare_cached(&format!(
                "SELECT seq, id, job, attempts FROM \"{table}\" \
                 WHERE status = 'READY' AND due_ms <= ?1 ORDER BY due_ms, seq LIMIT ?2"
            ))
            .map_err(map_err(name))?;
        let due: Vec<(i64, String, String, u32)> = pick
            .query_map(params![now_ms, max as i64], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .map_err(map_err(name))?
            .collect::<rusqlite::Result<_>>()
            .map_err(sql_error)?;
        let mut lease = c
            .prepare_cached(&format!(
                "UPDATE \"{table}\" SET lease = ?2, due_ms = ?3, attempts = attempts + 1, \
                 updated_ms = ?4 WHERE seq = ?1"
            ))
            .map_err(map_err(name))?;
        for ((seq, id, body, attempts), token) in due.into_iter().zip(tokens) {
            lease
                .execute(params![seq, token, lease_until_ms, now_ms])
                .map_err(sql_error)?;
            jobs.push(ClaimedJob {
                id,
                body,
                attempt: attempts.saturating_add(1),
                lease: LeaseToken(*token),
            });
        }
    }
    // Unclaimed jobs (due later, or due now beyond `max`) and leases held elsewhere, whose
    // expiry makes their job claimable again; not the leases this claim just took.
    let next_due_ms: Option<i64> = c
        .prepare_cached(&format!(
            "SELECT min(due_ms) FROM \"{table}\" WHERE status = 'READY' \
             AND (lease IS NULL OR due_ms <> ?1)"
        ))
        .and_then(|mut s| s.query_row([lease_until_ms], |r| r.get(0)))
        .map_err(map_err(name))?;
    Ok(Claim { jobs, next_due_ms })
}

fn settle_jobs(
    c: &Connection,
    table: &str,
    name: &str,
    now_ms: i64,
    settlements: &[Settlement],
) -> Result<usize> {
    let mut applied = 0;
    for s in settlements {
        let changed = match &s.outcome {
            Outcome::Delivered => c
                .prepare_cached(&format!(
                    "DELETE FROM \"{table}\" WHERE id = ?1 AND lease = ?2"
                ))
                .and_then(|mut st| st.execute(params![s.id, s.lease.0])),
            Outcome::Failed { error } => c
                .prepare_cached(&format!(
                    "UPDATE \"{table}\" SET status = 'ERROR', error = ?3, lease = NULL, \
                     updated_ms = ?4 WHERE id = ?1 AND lease = ?2"
                ))
                .and_then(|mut st| st.execute(params![s.id, s.lease.0, error, now_ms])),
            Outcome::Released => c
                .prepare_cached(&format!(
                    "UPDATE \"{table}\" SET lease = NULL, due_ms = ?3, \
                     attempts = max(attempts - 1, 0) WHERE id = ?1 AND lease = ?2"
                ))
                .and_then(|mut st| st.execute(params![s.id, s.lease.0, now_ms])),
            Outcome::RetryAt { due_ms, error } => c
                .prepare_cached(&format!(
                    "UPDATE \"{table}\" SET lease = NULL, due_ms = ?3, error = ?4, \
                     updated_ms = ?5 WHERE id = ?1 AND lease = ?2"
                ))
                .and_then(|mut st| st.execute(params![s.id, s.lease.0, due_ms, error, now_ms])),
        }
        .map_err(map_err(name))?;
        applied += changed;
    }
    Ok(applied)
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
                let job: RawJson = RawValue::from_string(job)
                    .map_err(|e| Error::internal(format!("stored job {id} is not JSON: {e}")))?;
                let status = match status.as_str() {
                    READY => JobStatus::Ready,
                    ERROR => JobStatus::Error,
                    other => {
                        return Err(Error::internal(format!(
                            "stored job {id} has unknown status {other}"
                        )));
                    }
                };
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
    async fn recover_releases_every_lease_of_a_dead_process() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("queue.db");
        let q = SqliteJobQueue::open(&path).unwrap();
        let (a, b) = (instance(1), instance(2));
        for inst in [&a, &b] {
            q.create_instance(inst).await.unwrap();
            q.enqueue(inst, &body(r#"{"n":1}"#), None, 1_000)
                .await
                .unwrap();
        }
        assert_eq!(
            q.claim(&a, 1_000, 1_000_000, 5).await.unwrap().jobs.len(),
            1
        );
        assert_eq!(
            q.claim(&b, 1_000, 1_000_000, 5).await.unwrap().jobs.len(),
            1
        );
        q.close().await.unwrap();

        // "Restart": the leases would hold until 1_000_000; recover frees them now.
        let q = SqliteJobQueue::open(&path).unwrap();
        assert!(q.claim(&a, 2_000, 3_000, 5).await.unwrap().jobs.is_empty());
        assert_eq!(q.recover(2_000).await.unwrap(), 2);
        for inst in [&a, &b] {
            let again = q.claim(inst, 2_000, 3_000, 5).await.unwrap();
            assert_eq!(again.jobs.len(), 1);
            assert_eq!(again.jobs[0].attempt, 2);
        }
        assert_eq!(q.recover(2_000).await.unwrap(), 2);
        q.close().await.unwrap();
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
