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
//! per node holds a dedicated `LISTEN` connection and tells the node's listeners
//! ([`crate::listen::FeedWaker`]); a write made through this node also tells its
//! listeners directly, before it is acknowledged.

use quintet_core::{
    Instance, Result,
    ports::changes::{Change, ChangesPage},
};

use super::instance_gone;
use crate::{changelog, database::PgDatabase};

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
