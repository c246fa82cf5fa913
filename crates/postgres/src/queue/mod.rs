//! The queue service on PostgreSQL, shared by every node: [`PgJobQueue`].
//!
//! One table holds the jobs of every queue (`quintet_jobs`, keyed by the queue's instance
//! id), and `quintet_queues` lists the queues that exist, so that jobs of a dropped queue
//! go with it (`ON DELETE CASCADE`) and its operations answer NotFound.
//!
//! # Leases in the job row
//! Unlike the embedded adapter, which keeps leases in memory because it is alone, nodes
//! here must see each other's claims, so a claim is a write: `SELECT … FOR UPDATE SKIP
//! LOCKED` picks due READY rows that no concurrent claim is taking, and the same statement
//! records the lease on them: a token from a sequence (unique across nodes), the claiming
//! node, and the lease's expiry *as the job's due time*. A leased job is thus simply not
//! due until its lease runs out; then any node's claim takes it again (at-least-once), and
//! no separate expiry sweep is needed. A claim counts its attempt at once (`attempts + 1`);
//! `Released` takes it back.
//!
//! `settle` applies an outcome only where the row still carries the claim's token: a job
//! cancelled, retried, or claimed again by another node after the lease ran out is left
//! alone.
//!
//! # Waking other nodes
//! Each enqueue (and retry, and a job given back unsent) sends `NOTIFY` with the queue's id
//! in the same statement, so it is heard only once committed; every node's `wake` task
//! listens and tells the dispatcher ([`DueListener`]), so a job enqueued through a busy
//! node is claimed at once by an idle one. The same task polls every [`POLL_EVERY`] for
//! queues with due jobs, for what notifications cannot carry: leases of a dead node that
//! ran out, retries falling due on a node that stopped, notifications lost while the
//! `LISTEN` connection was down.
//!
//! # Events
//! Enqueues, deliveries, failures, cancellations and retries append to the queue's event
//! log in the statement that changes the job: see [`events`].

mod events;
mod wake;

use std::{
    fmt,
    sync::{Arc, Weak},
};

use async_trait::async_trait;
use futures_util::future::try_join_all;
use quintet_core::{
    Clock, Instance, ManualClock, Result,
    hmac::to_hex,
    id::{IdGenerator, random_bytes},
    ports::{
        Keep, Lifecycle, PoolUsage,
        changes::{ChangesPage, FeedListener},
        queue::{
            CarriedJob, Claim, ClaimedJob, DueListener, IdempotencyKey, JobBody, JobEvent,
            JobEventKind, JobQueue, JobRecord, JobStatus, LeaseToken, ListJobs, Outcome,
            QueueDepth, Settlement, idempotency_key_taken, job_missing, job_not_failed,
            queue_missing, stored_job,
        },
    },
};
use tokio_postgres::error::SqlState;

use self::events::{Wake, recorded};
pub use self::wake::POLL_EVERY;
use crate::{
    database::{PgClient, PgDatabase},
    error::pg_error,
};

/// Schema migrations of the queue; append only (see [`PgDatabase::migrate`]).
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE quintet_queues (
    instance_id  BIGINT PRIMARY KEY
);

CREATE SEQUENCE quintet_job_leases;

CREATE TABLE quintet_jobs (
    seq         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue       BIGINT NOT NULL REFERENCES quintet_queues (instance_id) ON DELETE CASCADE,
    id          TEXT COLLATE "C" NOT NULL,
    status      TEXT NOT NULL,
    job         TEXT NOT NULL,
    attempts    INTEGER NOT NULL DEFAULT 0,
    error       TEXT,
    idem        TEXT COLLATE "C",
    due_ms      BIGINT NOT NULL,
    lease       BIGINT,
    lease_node  TEXT,
    created_ms  BIGINT NOT NULL,
    updated_ms  BIGINT NOT NULL,
    UNIQUE (queue, id),
    UNIQUE (queue, idem)
);

CREATE INDEX quintet_jobs_due ON quintet_jobs (queue, due_ms, seq) WHERE status = 'READY';
CREATE INDEX quintet_jobs_due_any ON quintet_jobs (due_ms) WHERE status = 'READY';
"#,
    events::MIGRATION,
];

/// Jobs of every queue instance, in PostgreSQL, claimed with leases by any node.
pub struct PgJobQueue {
    db: PgDatabase,
    ids: IdGenerator,
    /// This node's id, recorded with its leases (for operators: who holds a job).
    node: String,
    /// The channel enqueues notify: `quintet_jobs_` + md5 of the schema.
    channel: String,
    wake: wake::Waker,
}

impl fmt::Debug for PgJobQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgJobQueue")
            .field("db", &self.db)
            .field("node", &self.node)
            .field("channel", &self.channel)
            .finish_non_exhaustive()
    }
}

impl PgJobQueue {
    /// Bring the queue tables of `db`'s schema up to date and start listening for jobs
    /// enqueued through other nodes; `clock` dates the periodic look for due jobs.
    pub async fn open(db: PgDatabase, clock: Arc<dyn Clock>) -> Result<Self> {
        db.migrate("queue", MIGRATIONS).await?;
        let channel: String = db
            .client()
            .await?
            .query_one("SELECT 'quintet_jobs_' || md5(current_schema())", &[])
            .await
            .map_err(pg_error)?
            .try_get(0)
            .map_err(pg_error)?;
        let wake = wake::Waker::start(&db, &channel, clock).await?;
        Ok(Self {
            db,
            ids: IdGenerator::new(),
            node: to_hex(&random_bytes(8)?),
            channel,
            wake,
        })
    }

    /// The database it lives in.
    pub fn database(&self) -> &PgDatabase {
        &self.db
    }

    /// This node's id, as recorded in the leases it takes.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Whether the queue's storage exists (it was created and not dropped).
    async fn exists(&self, client: &PgClient, instance: &Instance) -> Result<bool> {
        Ok(client
            .query_opt(
                "SELECT 1 FROM quintet_queues WHERE instance_id = $1",
                &[&instance.id.0],
            )
            .await
            .map_err(pg_error)?
            .is_some())
    }
}

fn is(e: &tokio_postgres::Error, state: &SqlState) -> bool {
    e.code() == Some(state)
}

#[async_trait]
impl Lifecycle for PgJobQueue {
    async fn create_instance(&self, instance: &Instance) -> Result<()> {
        self.db
            .client()
            .await?
            .execute(
                "INSERT INTO quintet_queues (instance_id) VALUES ($1) ON CONFLICT DO NOTHING",
                &[&instance.id.0],
            )
            .await
            .map_err(pg_error)?;
        Ok(())
    }

    async fn drop_instance(&self, instance: &Instance) -> Result<()> {
        self.db
            .client()
            .await?
            .execute(
                "DELETE FROM quintet_queues WHERE instance_id = $1",
                &[&instance.id.0],
            )
            .await
            .map_err(pg_error)?;
        Ok(())
    }

    async fn ready(&self) -> Result<()> {
        self.db.ping().await
    }

    async fn sweep(&self, keep: &Keep) -> Result<usize> {
        let live: Vec<i64> = keep.listed().map(|id| id.0).collect();
        let client = self.db.client().await?;
        // With the registry in the same schema (the usual setup), a queue it records is
        // never an orphan, even one created through another node after `live` was read.
        let beside_registry: bool = client
            .query_one("SELECT to_regclass('quintet_instances') IS NOT NULL", &[])
            .await
            .map_err(pg_error)?
            .try_get(0)
            .map_err(pg_error)?;
        let sql = if beside_registry {
            "DELETE FROM quintet_queues AS q WHERE NOT q.instance_id = ANY($1) \
             AND q.instance_id <= $2 \
             AND NOT EXISTS (SELECT 1 FROM quintet_instances AS i WHERE i.id = q.instance_id)"
        } else {
            "DELETE FROM quintet_queues WHERE NOT instance_id = ANY($1) AND instance_id <= $2"
        };
        let removed = client
            .execute(sql, &[&live, &keep.kept_above()])
            .await
            .map_err(pg_error)?;
        Ok(usize::try_from(removed).unwrap_or(usize::MAX))
    }

    fn pool(&self) -> Option<PoolUsage> {
        Some(self.db.pool_usage())
    }

    async fn close(&self) -> Result<()> {
        // The pool may be shared with the registry, which closes it.
        self.wake.stop();
        Ok(())
    }
}

#[async_trait]
impl JobQueue for PgJobQueue {
    async fn enqueue(
        &self,
        instance: &Instance,
        job: &JobBody,
        idempotency_key: Option<&IdempotencyKey>,
        now_ms: i64,
    ) -> Result<String> {
        let id = self.ids.next_id(&ManualClock::new(now_ms))?;
        let key = idempotency_key.map(IdempotencyKey::as_str);
        let client = self.db.client().await?;
        // One statement: the notification goes out if and only if the job is committed.
        let inserted = client
            .execute(
                &recorded(
                    "INSERT INTO quintet_jobs (queue, id, status, job, idem, due_ms, created_ms, updated_ms) \
                     VALUES ($1, $2, 'READY', $3, $4, $5, $5, $5) RETURNING queue, id",
                    JobEventKind::Ready,
                    "NULL",
                    "$6",
                    Wake::Due,
                ),
                &[
                    &instance.id.0,
                    &id,
                    &job.as_str(),
                    &key,
                    &now_ms,
                    &self.channel,
                ],
            )
            .await;
        match inserted {
            Ok(_) => {
                self.wake.tell(instance.id);
                Ok(id)
            }
            Err(e) if is(&e, &SqlState::FOREIGN_KEY_VIOLATION) => {
                Err(queue_missing(&instance.name))
            }
            Err(e) if is(&e, &SqlState::UNIQUE_VIOLATION) && key.is_some() => {
                let existing: Option<String> = client
                    .query_opt(
                        "SELECT id FROM quintet_jobs WHERE queue = $1 AND idem = $2",
                        &[&instance.id.0, &key],
                    )
                    .await
                    .map_err(pg_error)?
                    .map(|r| r.try_get(0))
                    .transpose()
                    .map_err(pg_error)?;
                Err(idempotency_key_taken(
                    key.unwrap_or_default(),
                    existing.unwrap_or_default(),
                ))
            }
            Err(e) => Err(pg_error(e)),
        }
    }

    async fn restore(&self, instance: &Instance, job: &CarriedJob, now_ms: i64) -> Result<String> {
        let id = self.ids.next_id(&ManualClock::new(now_ms))?;
        let attempts = i32::try_from(job.attempts).unwrap_or(i32::MAX);
        let client = self.db.client().await?;
        // As for an enqueue: other nodes hear of a READY job once it is committed.
        let inserted = client
            .execute(
                "WITH job AS ( \
                   INSERT INTO quintet_jobs \
                     (queue, id, status, job, attempts, error, due_ms, created_ms, updated_ms) \
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $7) RETURNING queue, status) \
                 SELECT pg_notify($9, queue::text) FROM job WHERE status = 'READY'",
                &[
                    &instance.id.0,
                    &id,
                    &job.status.as_str(),
                    &job.body.as_str(),
                    &attempts,
                    &job.error,
                    &now_ms,
                    &job.created_ms,
                    &self.channel,
                ],
            )
            .await;
        match inserted {
            Ok(_) => Ok(id),
            Err(e) if is(&e, &SqlState::FOREIGN_KEY_VIOLATION) => {
                Err(queue_missing(&instance.name))
            }
            Err(e) => Err(pg_error(e)),
        }
    }

    async fn list(&self, instance: &Instance, query: &ListJobs) -> Result<Vec<JobRecord>> {
        let client = self.db.client().await?;
        let status = query.status.map(JobStatus::as_str);
        let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
        let rows = client
            .query(
                "SELECT id, status, job, attempts, error, created_ms, updated_ms \
                 FROM quintet_jobs \
                 WHERE queue = $1 AND ($2::text IS NULL OR status = $2) \
                   AND seq > coalesce( \
                     (SELECT seq FROM quintet_jobs WHERE queue = $1 AND id = $3), 0) \
                 ORDER BY seq LIMIT $4",
                &[&instance.id.0, &status, &query.after, &limit],
            )
            .await
            .map_err(pg_error)?;
        if rows.is_empty() && !self.exists(&client, instance).await? {
            return Err(queue_missing(&instance.name));
        }
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let id: String = row.try_get(0).map_err(pg_error)?;
            let status: String = row.try_get(1).map_err(pg_error)?;
            let job: String = row.try_get(2).map_err(pg_error)?;
            let attempts: i32 = row.try_get(3).map_err(pg_error)?;
            let job = stored_job(&id, job)?;
            let status = JobStatus::from_stored(&id, &status)?;
            out.push(JobRecord {
                status,
                job,
                attempts: u32::try_from(attempts).unwrap_or(0),
                error: row.try_get(4).map_err(pg_error)?,
                created_ms: row.try_get(5).map_err(pg_error)?,
                updated_ms: row.try_get(6).map_err(pg_error)?,
                id,
            });
        }
        Ok(out)
    }

    async fn retry(&self, instance: &Instance, id: &str, now_ms: i64) -> Result<()> {
        let client = self.db.client().await?;
        let changed = client
            .execute(
                &recorded(
                    "UPDATE quintet_jobs SET status = 'READY', attempts = 0, error = NULL, \
                       due_ms = $3, updated_ms = $3, lease = NULL, lease_node = NULL \
                     WHERE queue = $1 AND id = $2 AND status = 'ERROR' RETURNING queue, id",
                    JobEventKind::Retried,
                    "NULL",
                    "$4",
                    Wake::Due,
                ),
                &[&instance.id.0, &id, &now_ms, &self.channel],
            )
            .await
            .map_err(pg_error)?;
        if changed == 1 {
            self.wake.tell(instance.id);
            return Ok(());
        }
        let found = client
            .query_opt(
                "SELECT 1 FROM quintet_jobs WHERE queue = $1 AND id = $2",
                &[&instance.id.0, &id],
            )
            .await
            .map_err(pg_error)?;
        match found {
            None if !self.exists(&client, instance).await? => Err(queue_missing(&instance.name)),
            None => Err(job_missing(id)),
            Some(_) => Err(job_not_failed(id)),
        }
    }

    async fn cancel(&self, instance: &Instance, id: &str) -> Result<()> {
        let client = self.db.client().await?;
        let removed = client
            .execute(
                &recorded(
                    "DELETE FROM quintet_jobs WHERE queue = $1 AND id = $2 RETURNING queue, id",
                    JobEventKind::Cancelled,
                    "NULL",
                    "$3",
                    Wake::Feeds,
                ),
                &[&instance.id.0, &id, &self.channel],
            )
            .await
            .map_err(pg_error)?;
        if removed > 0 {
            self.wake.tell(instance.id);
            Ok(())
        } else if self.exists(&client, instance).await? {
            Err(job_missing(id))
        } else {
            Err(queue_missing(&instance.name))
        }
    }

    async fn claim(
        &self,
        instance: &Instance,
        now_ms: i64,
        lease_until_ms: i64,
        max: usize,
    ) -> Result<Claim> {
        let client = self.db.client().await?;
        let max = i64::try_from(max).unwrap_or(i64::MAX);
        // Rows another claim is taking are skipped, not waited for: concurrent claims (any
        // node) split the due jobs between them. The lease's expiry becomes the due time.
        let rows = client
            .query(
                "WITH picked AS ( \
                   SELECT seq, due_ms FROM quintet_jobs \
                   WHERE queue = $1 AND status = 'READY' AND due_ms <= $2 \
                   ORDER BY due_ms, seq LIMIT $3 \
                   FOR UPDATE SKIP LOCKED) \
                 UPDATE quintet_jobs AS j \
                 SET attempts = j.attempts + 1, lease = nextval('quintet_job_leases'), \
                     lease_node = $4, due_ms = $5 \
                 FROM picked WHERE j.seq = picked.seq \
                 RETURNING j.id, j.job, j.attempts, j.lease, picked.due_ms, picked.seq",
                &[&instance.id.0, &now_ms, &max, &self.node, &lease_until_ms],
            )
            .await
            .map_err(pg_error)?;
        let mut picked = Vec::with_capacity(rows.len());
        for row in rows {
            let attempts: i32 = row.try_get(2).map_err(pg_error)?;
            let job = ClaimedJob {
                id: row.try_get(0).map_err(pg_error)?,
                body: row.try_get(1).map_err(pg_error)?,
                attempt: u32::try_from(attempts).unwrap_or(1),
                lease: LeaseToken(row.try_get(3).map_err(pg_error)?),
            };
            let order: (i64, i64) = (
                row.try_get(4).map_err(pg_error)?,
                row.try_get(5).map_err(pg_error)?,
            );
            picked.push((order, job));
        }
        // RETURNING keeps no order: oldest due first, as picked.
        picked.sort_by_key(|(order, _)| *order);
        let next = client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM quintet_queues WHERE instance_id = $1), \
                        (SELECT min(due_ms) FROM quintet_jobs WHERE queue = $1 AND status = 'READY')",
                &[&instance.id.0],
            )
            .await
            .map_err(pg_error)?;
        if !next.try_get::<_, bool>(0).map_err(pg_error)? {
            return Err(queue_missing(&instance.name));
        }
        Ok(Claim {
            jobs: picked.into_iter().map(|(_, job)| job).collect(),
            // Due jobs left (more than `max`, or taken by a concurrent claim), retries and
            // other leases running out: whichever comes first.
            next_due_ms: next.try_get(1).map_err(pg_error)?,
        })
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
        let client = self.db.client().await?;
        let q = instance.id.0;
        let delete = client
            .prepare_cached(&recorded(
                "DELETE FROM quintet_jobs WHERE queue = $1 AND id = $2 AND lease = $3 \
                 RETURNING queue, id",
                JobEventKind::Delivered,
                "NULL",
                "$4",
                Wake::Feeds,
            ))
            .await
            .map_err(pg_error)?;
        let fail = client
            .prepare_cached(&recorded(
                "UPDATE quintet_jobs SET status = 'ERROR', error = $4, updated_ms = $5, \
                   lease = NULL, lease_node = NULL \
                 WHERE queue = $1 AND id = $2 AND lease = $3 RETURNING queue, id",
                JobEventKind::Error,
                "$4",
                "$6",
                Wake::Feeds,
            ))
            .await
            .map_err(pg_error)?;
        let later = client
            .prepare_cached(
                "UPDATE quintet_jobs SET due_ms = $4, error = $5, updated_ms = $6, \
                   lease = NULL, lease_node = NULL \
                 WHERE queue = $1 AND id = $2 AND lease = $3",
            )
            .await
            .map_err(pg_error)?;
        // Given back unsent: due now, the claim's attempt not counted; other nodes hear of
        // it (this one is stopping).
        let release = client
            .prepare_cached(
                "WITH job AS ( \
                   UPDATE quintet_jobs SET due_ms = $4, attempts = greatest(attempts - 1, 0), \
                     lease = NULL, lease_node = NULL \
                   WHERE queue = $1 AND id = $2 AND lease = $3 RETURNING queue) \
                 SELECT pg_notify($5, queue::text) FROM job",
            )
            .await
            .map_err(pg_error)?;
        // Sent together on the one connection (pipelined); each statement stands alone.
        let applied = try_join_all(settlements.iter().map(|s| {
            let (id, lease) = (s.id.as_str(), s.lease.0);
            let client = &client;
            let (delete, fail, later, release) = (&delete, &fail, &later, &release);
            async move {
                match &s.outcome {
                    Outcome::Delivered => {
                        client
                            .execute(delete, &[&q, &id, &lease, &self.channel])
                            .await
                    }
                    Outcome::Failed { error } => {
                        client
                            .execute(fail, &[&q, &id, &lease, error, &now_ms, &self.channel])
                            .await
                    }
                    Outcome::RetryAt { due_ms, error } => {
                        client
                            .execute(later, &[&q, &id, &lease, due_ms, error, &now_ms])
                            .await
                    }
                    Outcome::Released => {
                        client
                            .execute(release, &[&q, &id, &lease, &now_ms, &self.channel])
                            .await
                    }
                }
            }
        }))
        .await
        .map_err(pg_error)?;
        let applied = applied.iter().filter(|n| **n > 0).count();
        if applied > 0 {
            self.wake.tell(instance.id);
        }
        Ok(applied)
    }

    async fn recover(&self, now_ms: i64) -> Result<usize> {
        // Which leases belong to live nodes cannot be known here; those that ran out are
        // claimable already (due at their expiry) and are merely marked released.
        let released = self
            .db
            .client()
            .await?
            .execute(
                "UPDATE quintet_jobs SET lease = NULL, lease_node = NULL \
                 WHERE status = 'READY' AND lease IS NOT NULL AND due_ms <= $1",
                &[&now_ms],
            )
            .await
            .map_err(pg_error)?;
        Ok(usize::try_from(released).unwrap_or(usize::MAX))
    }

    async fn depth(&self, instance: &Instance) -> Result<QueueDepth> {
        let client = self.db.client().await?;
        let rows = client
            .query(
                "SELECT status, count(*) FROM quintet_jobs WHERE queue = $1 GROUP BY status",
                &[&instance.id.0],
            )
            .await
            .map_err(pg_error)?;
        if rows.is_empty() && !self.exists(&client, instance).await? {
            return Err(queue_missing(&instance.name));
        }
        let mut depth = QueueDepth::default();
        for row in rows {
            let status: String = row.try_get(0).map_err(pg_error)?;
            let n: i64 = row.try_get(1).map_err(pg_error)?;
            let n = u64::try_from(n).unwrap_or(0);
            match JobStatus::from_stored("(count)", &status)? {
                JobStatus::Ready => depth.ready = n,
                JobStatus::Error => depth.error = n,
            }
        }
        Ok(depth)
    }

    async fn events(
        &self,
        instance: &Instance,
        since: u64,
        limit: usize,
    ) -> Result<ChangesPage<JobEvent>> {
        events::page(&self.db, instance, since, limit).await
    }

    async fn event_head(&self, instance: &Instance) -> Result<u64> {
        events::head(&self.db, instance).await
    }

    async fn compact_events(&self, before_ms: i64) -> Result<u64> {
        events::compact(&self.db, before_ms).await
    }

    fn subscribe_events(&self, listener: Weak<dyn FeedListener>) {
        self.wake.subscribe_feed(listener);
    }

    fn subscribe(&self, listener: Weak<dyn DueListener>) {
        self.wake.subscribe(listener);
    }
}
