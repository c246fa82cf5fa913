//! [`PgStorageEventLog`]: the event logs of storage instances whose objects are on S3,
//! which has no database to record them in (see [`quintet_core::ports::storage_events`]).
//!
//! `quintet_storage_events` holds the entries, `quintet_storage_buckets` one counter row
//! per bucket. An append is one statement — so one transaction — that takes the next
//! number from the counter (creating the row for a bucket older than event logs), inserts
//! the entry and sends `NOTIFY`. The counter's row lock is held until the commit right
//! after it, so the next append of the same bucket numbers its entry only once this one is
//! visible: a reader that saw number `n` never meets a later entry numbered `n` or below.
//!
//! Wake-ups: `NOTIFY quintet_storage_<md5 of the schema>` with the bucket's id, heard by a
//! `LISTEN` connection per node (`listen::FeedWaker`); an append through this node
//! also tells its listeners directly, before the write is acknowledged.

use std::{fmt, sync::Weak};

use async_trait::async_trait;
use quintet_core::{
    Instance, Result,
    object::ObjectPath,
    ports::{
        Keep, Lifecycle, PoolUsage,
        changes::{ChangesPage, FeedListener},
        storage_events::{ObjectEvent, ObjectEventKind, StorageEventLog, StorageEvents},
    },
};

use crate::{changelog, database::PgDatabase, error::pg_error, listen::FeedWaker};

/// The schema migrations of storage events, append only (see [`PgDatabase::migrate`]).
const MIGRATIONS: &[&str] = &[r#"
CREATE TABLE quintet_storage_buckets (
    bucket     BIGINT PRIMARY KEY,
    event_seq  BIGINT NOT NULL DEFAULT 0
);

CREATE TABLE quintet_storage_events (
    bucket        BIGINT NOT NULL,
    seq           BIGINT NOT NULL,
    path          TEXT COLLATE "C" NOT NULL,
    event         TEXT NOT NULL,
    size          BIGINT,
    etag          TEXT,
    content_type  TEXT,
    at_ms         BIGINT NOT NULL,
    PRIMARY KEY (bucket, seq)
);
CREATE INDEX quintet_storage_events_by_age ON quintet_storage_events (at_ms);
"#];

/// Append an event: bucket `$1`, path `$2`, event `$3`, size `$4`, etag `$5`, type `$6`,
/// notifying channel `$7`; answers the entry's number.
const APPEND: &str = "
WITH n AS (
    INSERT INTO quintet_storage_buckets AS b (bucket, event_seq) VALUES ($1, 1)
    ON CONFLICT (bucket) DO UPDATE SET event_seq = b.event_seq + 1
    RETURNING b.bucket, b.event_seq
), ev AS (
    INSERT INTO quintet_storage_events (bucket, seq, path, event, size, etag, content_type, at_ms)
    SELECT n.bucket, n.event_seq, $2, $3, $4, $5, $6,
           (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint
    FROM n
)
SELECT n.event_seq, pg_notify($7, n.bucket::text) FROM n";

/// The head, the oldest kept entry and the page, in one statement (one snapshot). A bucket
/// without a counter row (never written) has an empty log.
const PAGE: &str = "
SELECT coalesce((SELECT event_seq FROM quintet_storage_buckets WHERE bucket = $1), 0),
       (SELECT min(seq) FROM quintet_storage_events WHERE bucket = $1),
       (SELECT coalesce(json_agg(json_build_array(e.seq, e.path, e.event, e.size, e.etag,
                                                  e.content_type) ORDER BY e.seq), '[]')::text
          FROM (SELECT seq, path, event, size, etag, content_type FROM quintet_storage_events
                WHERE bucket = $1 AND seq > $2 ORDER BY seq LIMIT $3) e)";

/// The event logs of every storage instance, in PostgreSQL tables shared by all nodes.
pub struct PgStorageEventLog {
    db: PgDatabase,
    /// `quintet_storage_` + md5 of the schema.
    channel: String,
    wake: FeedWaker,
}

impl fmt::Debug for PgStorageEventLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgStorageEventLog")
            .field("db", &self.db)
            .field("channel", &self.channel)
            .finish_non_exhaustive()
    }
}

impl PgStorageEventLog {
    /// Bring the storage event tables of `db`'s schema up to date and start listening for
    /// events recorded through other nodes.
    pub async fn open(db: PgDatabase) -> Result<Self> {
        db.migrate("storage", MIGRATIONS).await?;
        let channel: String = db
            .client()
            .await?
            .query_one("SELECT 'quintet_storage_' || md5(current_schema())", &[])
            .await
            .map_err(pg_error)?
            .try_get(0)
            .map_err(pg_error)?;
        let wake = FeedWaker::start(&db, "storage-listen", "storage events", &channel).await?;
        Ok(Self { db, channel, wake })
    }
}

#[async_trait]
impl Lifecycle for PgStorageEventLog {
    async fn create_instance(&self, instance: &Instance) -> Result<()> {
        self.db
            .client()
            .await?
            .execute(
                "INSERT INTO quintet_storage_buckets (bucket) VALUES ($1) ON CONFLICT DO NOTHING",
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
                "WITH ev AS (DELETE FROM quintet_storage_events WHERE bucket = $1) \
                 DELETE FROM quintet_storage_buckets WHERE bucket = $1",
                &[&instance.id.0],
            )
            .await
            .map_err(pg_error)?;
        Ok(())
    }

    async fn sweep(&self, keep: &Keep) -> Result<usize> {
        let live: Vec<i64> = keep.listed().map(|id| id.0).collect();
        let client = self.db.client().await?;
        // With the registry in the same schema (the usual setup), a bucket it records is
        // never an orphan, even one created through another node after `live` was read.
        let beside_registry: bool = client
            .query_one("SELECT to_regclass('quintet_instances') IS NOT NULL", &[])
            .await
            .map_err(pg_error)?
            .try_get(0)
            .map_err(pg_error)?;
        let registered = if beside_registry {
            "AND NOT EXISTS (SELECT 1 FROM quintet_instances AS i WHERE i.id = b.bucket)"
        } else {
            ""
        };
        let sql = format!(
            "WITH gone AS ( \
                 DELETE FROM quintet_storage_buckets AS b \
                 WHERE NOT b.bucket = ANY($1) AND b.bucket <= $2 {registered} \
                 RETURNING b.bucket), \
             ev AS (DELETE FROM quintet_storage_events WHERE bucket IN (SELECT bucket FROM gone)) \
             SELECT count(*) FROM gone"
        );
        let removed: i64 = client
            .query_one(&sql, &[&live, &keep.kept_above()])
            .await
            .map_err(pg_error)?
            .try_get(0)
            .map_err(pg_error)?;
        Ok(usize::try_from(removed).unwrap_or(0))
    }

    async fn ready(&self) -> Result<()> {
        self.db.ping().await
    }

    fn pool(&self) -> Option<PoolUsage> {
        Some(self.db.pool_usage())
    }

    async fn close(&self) -> Result<()> {
        // The pool is shared with the registry, which closes it.
        self.wake.stop();
        Ok(())
    }
}

#[async_trait]
impl StorageEvents for PgStorageEventLog {
    async fn events(
        &self,
        instance: &Instance,
        since: u64,
        limit: usize,
    ) -> Result<ChangesPage<ObjectEvent>> {
        type Row = (
            i64,
            String,
            String,
            Option<i64>,
            Option<String>,
            Option<String>,
        );
        let rows: Vec<Row> = changelog::page_rows(&self.db, PAGE, instance, since, limit, || {
            quintet_core::Error::internal("the page of a storage event log answered no row")
        })
        .await?;
        let events = rows
            .into_iter()
            .map(|(seq, path, event, size, etag, content_type)| {
                Ok(ObjectEvent {
                    seq: seq.max(0) as u64,
                    path,
                    event: ObjectEventKind::from_stored(&event, size, etag, content_type)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(ChangesPage::after(since, events))
    }

    async fn event_head(&self, instance: &Instance) -> Result<u64> {
        changelog::head(
            &self.db,
            "SELECT coalesce((SELECT event_seq FROM quintet_storage_buckets WHERE bucket = $1), 0)",
            instance,
            || quintet_core::Error::internal("the head of a storage event log answered no row"),
        )
        .await
    }

    async fn compact_events(&self, before_ms: i64) -> Result<u64> {
        changelog::compact(&self.db, "quintet_storage_events", "bucket", before_ms).await
    }

    fn subscribe_events(&self, listener: Weak<dyn FeedListener>) {
        self.wake.subscribe(listener);
    }
}

#[async_trait]
impl StorageEventLog for PgStorageEventLog {
    async fn append(
        &self,
        instance: &Instance,
        path: &ObjectPath,
        event: &ObjectEventKind,
    ) -> Result<u64> {
        let (size, etag, content_type) = event.columns();
        let row = self
            .db
            .client()
            .await?
            .query_one(
                APPEND,
                &[
                    &instance.id.0,
                    &path.as_str(),
                    &event.as_str(),
                    &size,
                    &etag,
                    &content_type,
                    &self.channel,
                ],
            )
            .await
            .map_err(pg_error)?;
        let seq: i64 = row.try_get(0).map_err(pg_error)?;
        self.wake.tell(instance.id);
        Ok(seq.max(0) as u64)
    }
}
