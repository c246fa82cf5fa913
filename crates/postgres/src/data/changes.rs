//! The change log of data on PostgreSQL, and telling every node about new entries.
//!
//! **Numbering in commit order.** A `bigserial` would number entries in the order
//! transactions *ask* for a number, not the order they commit: a reader could see entry 7
//! committed while entry 6 is still running, move past it, and never see 6. Here each
//! instance has a counter row (`quintet_data_seq`), and a deferred constraint trigger on
//! `quintet_data_docs` takes the next number from it *at commit time*, after every other
//! statement of the transaction ran: the counter's row lock is then held only from the
//! first number taken to the commit, while the transaction waits for nothing else (so no
//! deadlock with the document locks writes take), and the next transaction of the same
//! instance gets its numbers only after this one committed and became visible. Writers of
//! one instance are serialised for that short moment; writers of different instances never
//! meet. Since the trigger is on the documents table, every path that writes a document
//! (create, replace, remove, bulk) records its change in its own transaction.
//!
//! A bulk write records its changes itself instead, one per applied entry in entry order
//! (the trigger would see each document's final state only), as its last statement
//! before the commit, under the same counter lock (`RECORD_BULK`).
//!
//! Dropping an instance deletes its counter row in the same transaction as its documents,
//! so the trigger finds no counter and records nothing for them.
//!
//! **Wake-ups.** The trigger also sends `NOTIFY quintet_data_<md5 of the schema>` with the
//! instance id (PostgreSQL sends it at commit, once per transaction and instance). One task
//! per node holds a dedicated `LISTEN` connection and tells the node's listeners; when the
//! connection is restored after a loss it tells them to re-read everything
//! ([`FeedListener::resync`]), since notifications sent meanwhile are gone. A write made
//! through this node also tells its listeners directly, before it is acknowledged.

use std::{
    sync::{Arc, Mutex, MutexGuard, PoisonError, Weak},
    time::Duration,
};

use quintet_core::{
    Instance, InstanceId, Result,
    ports::changes::{Change, ChangesPage, FeedListener},
};
use tokio::task::JoinHandle;

use super::instance_gone;
use crate::{changelog, database::PgDatabase, listen::Session};

/// The migration adding the change log (the second of data's migrations).
pub(super) const MIGRATION: &str = r#"
CREATE TABLE quintet_data_seq (
    instance  BIGINT PRIMARY KEY,
    seq       BIGINT NOT NULL DEFAULT 0
);
INSERT INTO quintet_data_seq (instance) SELECT instance FROM quintet_data_instances;

CREATE TABLE quintet_data_changes (
    instance  BIGINT NOT NULL,
    seq       BIGINT NOT NULL,
    id        TEXT COLLATE "C" NOT NULL,
    deleted   BOOLEAN NOT NULL,
    at_ms     BIGINT NOT NULL,
    PRIMARY KEY (instance, seq)
);
CREATE INDEX quintet_data_changes_by_age ON quintet_data_changes (at_ms);

CREATE FUNCTION quintet_data_change() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
    n    BIGINT;
    inst BIGINT;
    doc  TEXT;
    del  BOOLEAN;
BEGIN
    IF current_setting('quintet.feed', true) = 'explicit' THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'DELETE' THEN
        inst := OLD.instance; doc := OLD.id; del := true;
    ELSE
        inst := NEW.instance; doc := NEW.id; del := false;
    END IF;
    UPDATE quintet_data_seq SET seq = seq + 1 WHERE instance = inst RETURNING seq INTO n;
    IF FOUND THEN
        INSERT INTO quintet_data_changes (instance, seq, id, deleted, at_ms)
        VALUES (inst, n, doc, del, (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint);
        PERFORM pg_notify('quintet_data_' || md5(current_schema()), inst::text);
    END IF;
    RETURN NULL;
END
$fn$;

CREATE CONSTRAINT TRIGGER quintet_data_change
    AFTER INSERT OR UPDATE OR DELETE ON quintet_data_docs
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION quintet_data_change();
"#;

/// Said by a transaction that records its changes itself ([`RECORD_BULK`]).
pub(super) const RECORD_EXPLICITLY: &str = "SET LOCAL quintet.feed = 'explicit'";

/// Record `$2` changes of instance `$1` — ids `$3`, deletions `$4`, in order — as the
/// last statement before the commit: the counter's lock is then held only for the commit.
pub(super) const RECORD_BULK: &str = "
WITH n AS (
    UPDATE quintet_data_seq SET seq = seq + $2 WHERE instance = $1 RETURNING seq
), ins AS (
    INSERT INTO quintet_data_changes (instance, seq, id, deleted, at_ms)
    SELECT $1, n.seq - $2 + u.ord, u.id, u.del,
           (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint
    FROM n, unnest($3::text[], $4::bool[]) WITH ORDINALITY AS u(id, del, ord)
)
SELECT pg_notify('quintet_data_' || md5(current_schema()), $1::text) FROM n";

/// The head, the oldest kept entry and the page, in one statement (one snapshot). No row
/// when the instance is gone.
const PAGE: &str = "
SELECT s.seq,
       (SELECT min(seq) FROM quintet_data_changes WHERE instance = $1),
       (SELECT coalesce(json_agg(json_build_array(c.seq, c.id, c.deleted) ORDER BY c.seq), '[]')::text
          FROM (SELECT seq, id, deleted FROM quintet_data_changes
                WHERE instance = $1 AND seq > $2 ORDER BY seq LIMIT $3) c)
FROM quintet_data_seq s WHERE s.instance = $1";

/// Entries after `since` (see `DocStore::changes`).
pub(super) async fn page(
    db: &PgDatabase,
    instance: &Instance,
    since: u64,
    limit: usize,
) -> Result<ChangesPage> {
    let rows: Vec<(i64, String, bool)> =
        changelog::page_rows(db, PAGE, instance, since, limit, || instance_gone(instance)).await?;
    let changes: Vec<Change> = rows
        .into_iter()
        .map(|(seq, id, deleted)| Change {
            seq: seq as u64,
            id,
            deleted,
        })
        .collect();
    Ok(ChangesPage::after(since, changes))
}

/// The number of the instance's latest change.
pub(super) async fn head(db: &PgDatabase, instance: &Instance) -> Result<u64> {
    changelog::head(
        db,
        "SELECT seq FROM quintet_data_seq WHERE instance = $1",
        instance,
        || instance_gone(instance),
    )
    .await
}

/// Remove entries written before `before_ms`, of every instance.
pub(super) async fn compact(db: &PgDatabase, before_ms: i64) -> Result<u64> {
    changelog::compact(db, "quintet_data_changes", "instance", before_ms).await
}

/// First wait before reconnecting the `LISTEN` connection; doubled up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(100);

/// Longest wait between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

type Listeners = Arc<Mutex<Vec<Weak<dyn FeedListener>>>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn live(listeners: &Listeners) -> Vec<Arc<dyn FeedListener>> {
    let mut all = lock(listeners);
    all.retain(|l| l.strong_count() > 0);
    all.iter().filter_map(Weak::upgrade).collect()
}

/// The listening task, and who to tell.
pub(super) struct Waker {
    listeners: Listeners,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Waker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waker")
            .field("listeners", &lock(&self.listeners).len())
            .finish_non_exhaustive()
    }
}

impl Waker {
    /// Listen on `channel` of `db`; fails when the first `LISTEN` fails, later losses are
    /// repaired in the background.
    pub(super) async fn start(db: &PgDatabase, channel: &str) -> Result<Self> {
        let listeners: Listeners = Arc::new(Mutex::new(Vec::new()));
        let first = Session::open(db, "data-listen", channel).await?;
        let task = tokio::spawn(run(
            db.clone(),
            channel.to_owned(),
            Arc::clone(&listeners),
            first,
        ));
        Ok(Self {
            listeners,
            task: Mutex::new(Some(task)),
        })
    }

    pub(super) fn subscribe(&self, listener: Weak<dyn FeedListener>) {
        lock(&self.listeners).push(listener);
    }

    /// Tell this node's listeners that `instance` changed.
    pub(super) fn tell(&self, instance: InstanceId) {
        for l in live(&self.listeners) {
            l.changed(instance);
        }
    }

    /// Stop listening.
    pub(super) fn stop(&self) {
        if let Some(task) = lock(&self.task).take() {
            task.abort();
        }
    }
}

impl Drop for Waker {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn run(db: PgDatabase, channel: String, listeners: Listeners, first: Session) {
    let mut session = Some(first);
    let mut backoff = MIN_BACKOFF;
    loop {
        let Some(current) = session.as_mut() else {
            tokio::time::sleep(backoff).await;
            match Session::open(&db, "data-listen", &channel).await {
                Ok(s) => {
                    tracing::info!("listening for data changes again");
                    session = Some(s);
                    backoff = MIN_BACKOFF;
                    for l in live(&listeners) {
                        l.resync();
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?backoff, "cannot listen for data changes");
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
            continue;
        };
        match current.payloads.recv().await {
            Some(Some(payload)) => match payload.parse::<i64>() {
                Ok(id) => {
                    for l in live(&listeners) {
                        l.changed(InstanceId(id));
                    }
                }
                Err(_) => tracing::warn!(payload, "unreadable data change notification"),
            },
            _ => {
                tracing::warn!("lost the connection listening for data changes; reconnecting");
                session = None;
            }
        }
    }
}
