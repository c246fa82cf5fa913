//! The event log of queues on PostgreSQL: `quintet_queue_events`, numbered per queue in
//! commit order.
//!
//! Every statement that changes a job the way an event records (enqueue, delivery,
//! failure, cancellation, retry) is wrapped by [`recorded`]: in the same statement — so in
//! the same transaction — it takes the next number from the queue's counter
//! (`quintet_queues.event_seq`), appends the event, and sends `NOTIFY` (sent at commit).
//! The counter's row lock is taken after the job's row lock (the counter's update reads
//! the job's `RETURNING`), and held until the commit right after it: the next statement of
//! the same queue numbers its event only once this one is visible, so a reader that saw
//! number `n` never meets a later commit numbered `n` or below. A `bigserial` would not do
//! (see `data::changes`). Statements that record events on one queue are serialised for
//! that moment only; claims, which record nothing, never wait for it.
//!
//! Notifications go to the queue channel the dispatchers already listen on: the queue id
//! alone when jobs became due (enqueue, retry), `e<id>` when only the event log grew, so a
//! delivery does not wake every node's dispatcher. Each node's listening task
//! (`wake`) passes both kinds to the change feeds.

use quintet_core::{
    Instance, Result,
    ports::{
        changes::ChangesPage,
        queue::{JobEvent, JobEventKind, queue_missing},
    },
};

use crate::{changelog, database::PgDatabase};

/// The migration adding event logs (the second of the queue's migrations).
pub(super) const MIGRATION: &str = r#"
ALTER TABLE quintet_queues ADD COLUMN event_seq BIGINT NOT NULL DEFAULT 0;

CREATE TABLE quintet_queue_events (
    queue     BIGINT NOT NULL REFERENCES quintet_queues (instance_id) ON DELETE CASCADE,
    seq       BIGINT NOT NULL,
    id        TEXT COLLATE "C" NOT NULL,
    event     TEXT NOT NULL,
    error     TEXT,
    at_ms     BIGINT NOT NULL,
    PRIMARY KEY (queue, seq)
);
CREATE INDEX quintet_queue_events_by_age ON quintet_queue_events (at_ms);
"#;

/// Whom a recorded statement's notification wakes.
#[derive(Debug, Clone, Copy)]
pub(super) enum Wake {
    /// The dispatchers (jobs became due) and the change feeds.
    Due,
    /// The change feeds only.
    Feeds,
}

/// `change` — one statement changing at most one row of `quintet_jobs`, `RETURNING queue,
/// id` — with its event `event` recorded (`error`: an SQL expression, a parameter or
/// `NULL`) and a notification on the channel in parameter `channel` (`$n`). The statement
/// answers one row when the job changed, none otherwise.
pub(super) fn recorded(
    change: &str,
    event: JobEventKind,
    error: &str,
    channel: &str,
    wake: Wake,
) -> String {
    let payload = match wake {
        Wake::Due => "n.instance_id::text",
        Wake::Feeds => "'e' || n.instance_id::text",
    };
    format!(
        "WITH job AS ({change}), \
         n AS ( \
           UPDATE quintet_queues q SET event_seq = q.event_seq + 1 FROM job \
           WHERE q.instance_id = job.queue RETURNING q.instance_id, q.event_seq), \
         ev AS ( \
           INSERT INTO quintet_queue_events (queue, seq, id, event, error, at_ms) \
           SELECT n.instance_id, n.event_seq, job.id, '{}', {error}, \
                  (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint \
           FROM n, job) \
         SELECT pg_notify({channel}, {payload}) FROM n",
        event.as_str()
    )
}

/// The head, the oldest kept entry and the page, in one statement (one snapshot). No row
/// when the queue is gone.
const PAGE: &str = "
SELECT q.event_seq,
       (SELECT min(seq) FROM quintet_queue_events WHERE queue = $1),
       (SELECT coalesce(json_agg(json_build_array(e.seq, e.id, e.event, e.error) ORDER BY e.seq), '[]')::text
          FROM (SELECT seq, id, event, error FROM quintet_queue_events
                WHERE queue = $1 AND seq > $2 ORDER BY seq LIMIT $3) e)
FROM quintet_queues q WHERE q.instance_id = $1";

/// Events after `since` (see `JobQueue::events`).
pub(super) async fn page(
    db: &PgDatabase,
    instance: &Instance,
    since: u64,
    limit: usize,
) -> Result<ChangesPage<JobEvent>> {
    let rows: Vec<(i64, String, String, Option<String>)> =
        changelog::page_rows(db, PAGE, instance, since, limit, || {
            queue_missing(&instance.name)
        })
        .await?;
    let events = rows
        .into_iter()
        .map(|(seq, id, event, error)| {
            Ok(JobEvent {
                seq: seq as u64,
                id,
                event: JobEventKind::from_stored(&event)?,
                error,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(ChangesPage::after(since, events))
}

/// The number of the queue's latest event.
pub(super) async fn head(db: &PgDatabase, instance: &Instance) -> Result<u64> {
    changelog::head(
        db,
        "SELECT event_seq FROM quintet_queues WHERE instance_id = $1",
        instance,
        || queue_missing(&instance.name),
    )
    .await
}

/// Remove events recorded before `before_ms`, of every queue.
pub(super) async fn compact(db: &PgDatabase, before_ms: i64) -> Result<u64> {
    changelog::compact(db, "quintet_queue_events", "queue", before_ms).await
}
