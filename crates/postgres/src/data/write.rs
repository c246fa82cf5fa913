//! Writes. A create, and a replace or remove in an instance without indexes, is one
//! statement; every other write is one transaction that locks the documents it touches
//! before it rewrites their index entries.
//!
//! Each write names the version of the index definitions its keys were computed with; the
//! statement writes nothing when the instance's row holds another version (or is gone),
//! and the write is recomputed with the definitions read anew.

use std::collections::{BTreeMap, HashMap, HashSet};

use quintet_core::{
    Error, Instance, Result,
    ports::data::{
        BulkOp, BulkOutcome, DocId, IndexDef, MAX_INDEXES, document_exists, index_name_taken,
        stored_value, too_many_indexes,
    },
};
use serde_json::Value;
use tokio_postgres::types::ToSql;

use super::{
    Indexes, PgDocStore,
    group::{self, Grouped},
    instance_gone, missing,
};
use crate::{
    database::PgClient,
    error::{pg_error, unique_as},
};

/// How often a write is recomputed when the index definitions keep changing under it.
const MAX_ATTEMPTS: usize = 8;

/// Rows of an instance read per round trip while building an index.
const BUILD_PAGE: i32 = 1000;

/// Insert a new document and its index entries, when the instance's definitions are still
/// at version `$2`. Answers how many documents it inserted (0: instance gone or version
/// changed).
const CREATE: &str = "
WITH inst AS (
    SELECT instance FROM quintet_data_instances
    WHERE instance = $1 AND indexes = $2 FOR SHARE
), doc AS (
    INSERT INTO quintet_data_docs (instance, id, body, doc)
    SELECT instance, $3::text, $4::text, CASE WHEN $5::bool THEN NULL ELSE $4::text::jsonb END
    FROM inst
    RETURNING id
), keys AS (
    INSERT INTO quintet_data_keys (instance, num, k, id)
    SELECT $1, u.num, u.k, doc.id FROM doc, unnest($6::int4[], $7::bytea[]) AS u(num, k)
)
SELECT count(*) FROM doc";

/// Replace a document of an instance without indexes (at version `$2`). Answers whether
/// the instance row matched, and how many documents were replaced.
const REPLACE_UNINDEXED: &str = "
WITH inst AS (
    SELECT instance FROM quintet_data_instances
    WHERE instance = $1 AND indexes = $2 FOR SHARE
), upd AS (
    UPDATE quintet_data_docs d
    SET body = $4::text, doc = CASE WHEN $5::bool THEN NULL ELSE $4::text::jsonb END
    FROM inst WHERE d.instance = inst.instance AND d.id = $3::text
    RETURNING 1
)
SELECT (SELECT count(*) FROM inst), (SELECT count(*) FROM upd)";

/// Remove a document of an instance without indexes (at version `$2`); answers as
/// [`REPLACE_UNINDEXED`].
const REMOVE_UNINDEXED: &str = "
WITH inst AS (
    SELECT instance FROM quintet_data_instances
    WHERE instance = $1 AND indexes = $2 FOR SHARE
), del AS (
    DELETE FROM quintet_data_docs d USING inst
    WHERE d.instance = inst.instance AND d.id = $3::text
    RETURNING 1
)
SELECT (SELECT count(*) FROM inst), (SELECT count(*) FROM del)";

const LOCK_INSTANCE: &str =
    "SELECT indexes FROM quintet_data_instances WHERE instance = $1 FOR SHARE";

/// The documents among `$2` that exist, locked, in id order (so two transactions lock
/// common documents in the same order and never deadlock on them).
const LOCK_DOCS: &str = "SELECT id FROM quintet_data_docs \
     WHERE instance = $1 AND id = ANY($2::text[]) ORDER BY id FOR UPDATE";

const UPSERT_DOCS: &str = "
INSERT INTO quintet_data_docs (instance, id, body, doc)
SELECT $1, u.id, u.body, CASE WHEN u.plain THEN NULL ELSE u.body::jsonb END
FROM unnest($2::text[], $3::text[], $4::bool[]) AS u(id, body, plain)
ON CONFLICT (instance, id) DO UPDATE SET body = excluded.body, doc = excluded.doc";

const DELETE_DOCS: &str =
    "DELETE FROM quintet_data_docs WHERE instance = $1 AND id = ANY($2::text[])";

const DELETE_KEYS: &str =
    "DELETE FROM quintet_data_keys WHERE instance = $1 AND id = ANY($2::text[])";

const INSERT_KEYS: &str = "
INSERT INTO quintet_data_keys (instance, num, k, id)
SELECT $1, u.num, u.k, u.id FROM unnest($2::int4[], $3::bytea[], $4::text[]) AS u(num, k, id)";

/// Whether PostgreSQL's `jsonb` cannot hold the document stored as `text`: it refuses
/// `\u0000` and unpaired surrogates (a paired one is refused here too; the document is then
/// only kept as text, and every query re-checks it in Rust instead of in SQL).
pub(super) fn jsonb_refuses(text: &str) -> bool {
    let b = text.as_bytes();
    b.windows(6).any(|w| {
        w[0] == b'\\'
            && w[1] == b'u'
            && (w[2..6] == *b"0000"
                || (w[2].eq_ignore_ascii_case(&b'd')
                    && matches!(w[3].to_ascii_lowercase(), b'8'..=b'9' | b'a'..=b'f')))
    })
}

/// The index entries of the document stored as `text`: (index number, key) per index that
/// holds it. Parses only when the instance has indexes.
fn entries(idx: &Indexes, text: &str) -> Result<Vec<(i32, Vec<u8>)>> {
    if idx.defs.is_empty() {
        return Ok(Vec::new());
    }
    let doc: Value = stored_value(text)?;
    Ok(idx
        .defs
        .iter()
        .zip(&idx.nums)
        .filter_map(|(def, num)| def.key_of(&doc).map(|k| (*num, k)))
        .collect())
}

fn changed_too_often(instance: &Instance) -> Error {
    Error::Unavailable(format!(
        "the indexes of data instance \"{}\" kept changing during the write; retry it",
        instance.name
    ))
}

/// Read the definitions anew, through the connection the write holds (asking the pool for
/// a second one could exhaust it), after a write found another version;
/// [`Error::NotFound`] when the instance is gone.
async fn reload(store: &PgDocStore, client: &PgClient, instance: &Instance) -> Result<()> {
    store.indexes_at(&***client, instance, None).await.map(drop)
}

/// Create a document: in a group with the node's concurrent creates (see `group`), or,
/// when its group cannot take it, in a statement of its own.
pub(super) async fn create(
    store: &PgDocStore,
    instance: &Instance,
    id: &DocId,
    text: &str,
) -> Result<()> {
    let refused = jsonb_refuses(text);
    let idx = store.indexes_guess(instance).await?;
    let grouped = store
        .groups
        .create(group::Create {
            instance: instance.id.0,
            version: idx.version,
            id: id.as_str().to_owned(),
            text: text.to_owned(),
            refused,
            entries: entries(&idx, text)?,
        })
        .await;
    match grouped {
        Grouped::Created => Ok(()),
        Grouped::Exists => Err(document_exists(&instance.name, id)),
        Grouped::Alone => create_alone(store, instance, id, text, refused).await,
    }
}

async fn create_alone(
    store: &PgDocStore,
    instance: &Instance,
    id: &DocId,
    text: &str,
    refused: bool,
) -> Result<()> {
    for _ in 0..MAX_ATTEMPTS {
        let idx = store.indexes_guess(instance).await?;
        let (nums, keys): (Vec<i32>, Vec<Vec<u8>>) = entries(&idx, text)?.into_iter().unzip();
        let client = store.db.client().await?;
        let stmt = client.prepare_cached(CREATE).await.map_err(pg_error)?;
        let params: [&(dyn ToSql + Sync); 7] = [
            &instance.id.0,
            &idx.version,
            &id.as_str(),
            &text,
            &refused,
            &nums,
            &keys,
        ];
        let inserted: i64 = client
            .query_one(&stmt, &params)
            .await
            .map_err(|e| unique_as(e, || document_exists(&instance.name, id).public_message()))?
            .get(0);
        if inserted == 1 {
            return Ok(());
        }
        reload(store, &client, instance).await?;
    }
    Err(changed_too_often(instance))
}

/// Run `sql` (one of the `*_UNINDEXED` statements) while the instance has no index:
/// `Some(true)` when it changed the document, `Some(false)` when there is none,
/// `None` when the instance has indexes (the caller takes the transaction path).
async fn unindexed(
    store: &PgDocStore,
    instance: &Instance,
    sql: &str,
    id: &DocId,
    text: Option<&str>,
) -> Result<Option<bool>> {
    let refused = text.is_some_and(jsonb_refuses);
    for _ in 0..MAX_ATTEMPTS {
        let idx = store.indexes_guess(instance).await?;
        if !idx.defs.is_empty() {
            return Ok(None);
        }
        let client = store.db.client().await?;
        let stmt = client.prepare_cached(sql).await.map_err(pg_error)?;
        let row = match text {
            Some(text) => {
                client
                    .query_one(
                        &stmt,
                        &[&instance.id.0, &idx.version, &id.as_str(), &text, &refused],
                    )
                    .await
            }
            None => {
                client
                    .query_one(&stmt, &[&instance.id.0, &idx.version, &id.as_str()])
                    .await
            }
        }
        .map_err(pg_error)?;
        let (matched, changed): (i64, i64) = (row.get(0), row.get(1));
        if matched == 1 {
            return Ok(Some(changed == 1));
        }
        reload(store, &client, instance).await?;
    }
    Err(changed_too_often(instance))
}

pub(super) async fn replace(
    store: &PgDocStore,
    instance: &Instance,
    id: &DocId,
    text: String,
) -> Result<()> {
    let done = match unindexed(store, instance, REPLACE_UNINDEXED, id, Some(&text)).await? {
        Some(done) => done,
        None => apply(store, instance, &[Op::Update { id, text: &text }]).await?[0],
    };
    if done {
        Ok(())
    } else {
        Err(missing(instance, id))
    }
}

pub(super) async fn remove(store: &PgDocStore, instance: &Instance, id: &DocId) -> Result<()> {
    let done = match unindexed(store, instance, REMOVE_UNINDEXED, id, None).await? {
        Some(done) => done,
        None => apply(store, instance, &[Op::Delete { id }]).await?[0],
    };
    if done {
        Ok(())
    } else {
        Err(missing(instance, id))
    }
}

pub(super) async fn bulk(
    store: &PgDocStore,
    instance: &Instance,
    ops: Vec<BulkOp>,
) -> Result<Vec<BulkOutcome>> {
    let writes: Vec<Op<'_>> = ops
        .iter()
        .filter_map(|op| match op {
            BulkOp::Put { id, text } => Some(Op::Put { id, text }),
            BulkOp::Delete { id } => Some(Op::Delete { id }),
            BulkOp::Reject { .. } => None,
        })
        .collect();
    let mut applied = if writes.is_empty() {
        Vec::new()
    } else {
        apply(store, instance, &writes).await?
    }
    .into_iter();
    let mut out = Vec::with_capacity(ops.len());
    for op in &ops {
        out.push(match op {
            BulkOp::Reject { id, error } => BulkOutcome::failed(id.clone(), error.clone()),
            BulkOp::Put { id, .. } | BulkOp::Delete { id } => {
                if applied.next().unwrap_or(false) {
                    BulkOutcome::applied(id)
                } else {
                    BulkOutcome::failed(
                        Some(id.as_str().to_owned()),
                        missing(instance, id).public_message(),
                    )
                }
            }
        });
    }
    Ok(out)
}

/// One write of a transaction.
#[derive(Debug, Clone, Copy)]
enum Op<'a> {
    /// Create or replace.
    Put { id: &'a DocId, text: &'a str },
    /// Replace an existing document.
    Update { id: &'a DocId, text: &'a str },
    /// Remove an existing document.
    Delete { id: &'a DocId },
}

impl<'a> Op<'a> {
    fn id(&self) -> &'a str {
        match self {
            Op::Put { id, .. } | Op::Update { id, .. } | Op::Delete { id } => id.as_str(),
        }
    }
}

/// Apply `ops` in order in one transaction; for each, whether it applied (an update or
/// delete of a missing document does not). A transaction PostgreSQL ends as a deadlock
/// victim runs again: two writes of overlapping documents can lock them in different
/// orders (a document one found missing may exist by the time it upserts), and each
/// attempt recomputes everything from what it reads.
async fn apply(store: &PgDocStore, instance: &Instance, ops: &[Op<'_>]) -> Result<Vec<bool>> {
    let mut attempt = 0;
    loop {
        match apply_once(store, instance, ops).await {
            Ok(applied) => return Ok(applied),
            Err(Failed::Retry(e)) if attempt < MAX_ATTEMPTS => {
                tracing::debug!(
                    error = %crate::error::detail(&e),
                    attempt,
                    "a write transaction runs again"
                );
                attempt += 1;
            }
            Err(Failed::Retry(e)) => return Err(pg_error(e)),
            Err(Failed::Other(e)) => return Err(e),
        }
    }
}

/// Why [`apply_once`] failed.
enum Failed {
    /// A deadlock or serialization failure: the transaction may simply run again.
    Retry(tokio_postgres::Error),
    /// Anything else.
    Other(Error),
}

impl From<Error> for Failed {
    fn from(e: Error) -> Self {
        Self::Other(e)
    }
}

/// [`pg_error`], keeping apart the failures a new attempt may not meet.
fn pg(e: tokio_postgres::Error) -> Failed {
    use tokio_postgres::error::SqlState;
    match e.code() {
        Some(c)
            if *c == SqlState::T_R_DEADLOCK_DETECTED
                || *c == SqlState::T_R_SERIALIZATION_FAILURE =>
        {
            Failed::Retry(e)
        }
        _ => Failed::Other(pg_error(e)),
    }
}

/// One attempt of [`apply`].
///
/// The documents the transaction touches are locked before their index entries are
/// rewritten, and the final state of each is written once: existing ones locked in id
/// order, the upsert (which waits for a concurrent creator of the same id), then old
/// entries deleted by a statement that sees every committed entry, then the new ones.
async fn apply_once(
    store: &PgDocStore,
    instance: &Instance,
    ops: &[Op<'_>],
) -> std::result::Result<Vec<bool>, Failed> {
    let iid = instance.id.0;
    let mut client = store.db.client().await?;
    let tx = client.transaction().await.map_err(pg)?;
    // This transaction records its changes itself, one per applied entry in entry order
    // (the trigger would see only each document's final state).
    tx.batch_execute(super::changes::RECORD_EXPLICITLY)
        .await
        .map_err(pg)?;
    let version: i64 = tx
        .query_opt(LOCK_INSTANCE, &[&iid])
        .await
        .map_err(pg)?
        .ok_or_else(|| instance_gone(instance))?
        .get(0);
    // Under the shared lock no definition can change until the commit.
    let idx = store.indexes_at(&*tx, instance, Some(version)).await?;

    let mut touched: Vec<&str> = ops.iter().map(Op::id).collect();
    touched.sort_unstable();
    touched.dedup();
    let lock = tx.prepare_cached(LOCK_DOCS).await.map_err(pg)?;
    let existing: HashSet<String> = tx
        .query(&lock, &[&iid, &touched])
        .await
        .map_err(pg)?
        .iter()
        .map(|r| r.get(0))
        .collect();

    // Play the writes in order: what each finds, and each document's final state.
    let mut exists: HashMap<&str, bool> = HashMap::new();
    let mut last: BTreeMap<&str, Option<&str>> = BTreeMap::new();
    let mut applied = Vec::with_capacity(ops.len());
    for op in ops {
        let id = op.id();
        let here = exists.entry(id).or_insert_with(|| existing.contains(id));
        let done = match op {
            Op::Put { text, .. } => {
                *here = true;
                last.insert(id, Some(*text));
                true
            }
            Op::Update { text, .. } if *here => {
                last.insert(id, Some(*text));
                true
            }
            Op::Delete { .. } if *here => {
                *here = false;
                last.insert(id, None);
                true
            }
            Op::Update { .. } | Op::Delete { .. } => false,
        };
        applied.push(done);
    }

    let (mut put_ids, mut put_texts, mut put_refused, mut gone) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (id, state) in &last {
        match state {
            Some(text) => {
                put_ids.push(*id);
                put_texts.push(*text);
                put_refused.push(jsonb_refuses(text));
            }
            // A document deleted in the batch is in the table only if it was there before.
            None if existing.contains(*id) => gone.push(*id),
            None => {}
        }
    }
    if !put_ids.is_empty() {
        let upsert = tx.prepare_cached(UPSERT_DOCS).await.map_err(pg)?;
        tx.execute(&upsert, &[&iid, &put_ids, &put_texts, &put_refused])
            .await
            .map_err(pg)?;
    }
    if !gone.is_empty() {
        let delete = tx.prepare_cached(DELETE_DOCS).await.map_err(pg)?;
        tx.execute(&delete, &[&iid, &gone]).await.map_err(pg)?;
    }
    if !idx.defs.is_empty() {
        let rewritten: Vec<&str> = put_ids.iter().chain(&gone).copied().collect();
        if !rewritten.is_empty() {
            let delete = tx.prepare_cached(DELETE_KEYS).await.map_err(pg)?;
            tx.execute(&delete, &[&iid, &rewritten]).await.map_err(pg)?;
        }
        let (mut nums, mut keys, mut ids) = (Vec::new(), Vec::new(), Vec::new());
        for (id, text) in put_ids.iter().zip(&put_texts) {
            for (num, key) in entries(&idx, text)? {
                nums.push(num);
                keys.push(key);
                ids.push(*id);
            }
        }
        if !nums.is_empty() {
            let insert = tx.prepare_cached(INSERT_KEYS).await.map_err(pg)?;
            tx.execute(&insert, &[&iid, &nums, &keys, &ids])
                .await
                .map_err(pg)?;
        }
    }
    let (mut changed, mut deleted) = (Vec::new(), Vec::new());
    for (op, done) in ops.iter().zip(&applied) {
        if *done {
            changed.push(op.id());
            deleted.push(matches!(op, Op::Delete { .. }));
        }
    }
    if !changed.is_empty() {
        let record = tx
            .prepare_cached(super::changes::RECORD_BULK)
            .await
            .map_err(pg)?;
        let n = changed.len() as i64;
        tx.execute(&record, &[&iid, &n, &changed, &deleted])
            .await
            .map_err(pg)?;
    }
    tx.commit().await.map_err(pg)?;
    Ok(applied)
}

pub(super) async fn create_index(
    store: &PgDocStore,
    instance: &Instance,
    index: IndexDef,
) -> Result<()> {
    let iid = instance.id.0;
    let def = index.to_json();
    let mut client = store.db.client().await?;
    let tx = client.transaction().await.map_err(pg_error)?;
    // Alone on the instance: writes wait until the index is built and committed.
    tx.query_opt(
        "SELECT 1 FROM quintet_data_instances WHERE instance = $1 FOR UPDATE",
        &[&iid],
    )
    .await
    .map_err(pg_error)?
    .ok_or_else(|| instance_gone(instance))?;
    let existing: Option<String> = tx
        .query_opt(
            "SELECT def FROM quintet_data_indexes WHERE instance = $1 AND name = $2",
            &[&iid, &index.name],
        )
        .await
        .map_err(pg_error)?
        .map(|r| r.get(0));
    if let Some(existing) = existing {
        let same = serde_json::from_str::<Value>(&existing).is_ok_and(|v| v == def);
        return if same {
            Ok(())
        } else {
            Err(index_name_taken(&instance.name, &index.name))
        };
    }
    let row = tx
        .query_one(
            "SELECT count(*), COALESCE(max(num), 0) + 1 FROM quintet_data_indexes \
             WHERE instance = $1",
            &[&iid],
        )
        .await
        .map_err(pg_error)?;
    let (count, num): (i64, i32) = (row.get(0), row.get(1));
    if usize::try_from(count).unwrap_or(usize::MAX) >= MAX_INDEXES {
        return Err(too_many_indexes(&instance.name));
    }

    let docs = tx
        .prepare("SELECT id, body FROM quintet_data_docs WHERE instance = $1")
        .await
        .map_err(pg_error)?;
    let insert = tx.prepare_cached(INSERT_KEYS).await.map_err(pg_error)?;
    let portal = tx.bind(&docs, &[&iid]).await.map_err(pg_error)?;
    loop {
        let rows = tx
            .query_portal(&portal, BUILD_PAGE)
            .await
            .map_err(pg_error)?;
        let (mut keys, mut ids) = (Vec::new(), Vec::new());
        for row in &rows {
            let body: &str = row.get(1);
            let doc: Value = stored_value(body)?;
            if let Some(key) = index.key_of(&doc) {
                keys.push(key);
                ids.push(row.get::<_, &str>(0));
            }
        }
        if !keys.is_empty() {
            let nums = vec![num; keys.len()];
            tx.execute(&insert, &[&iid, &nums, &keys, &ids])
                .await
                .map_err(pg_error)?;
        }
        if rows.len() < BUILD_PAGE as usize {
            break;
        }
    }
    tx.execute(
        "INSERT INTO quintet_data_indexes (instance, name, num, def) VALUES ($1, $2, $3, $4)",
        &[&iid, &index.name, &num, &def.to_string()],
    )
    .await
    .map_err(pg_error)?;
    tx.execute(
        "UPDATE quintet_data_instances SET indexes = indexes + 1 WHERE instance = $1",
        &[&iid],
    )
    .await
    .map_err(pg_error)?;
    tx.commit().await.map_err(pg_error)?;
    // Every node learns the new version at its next use of the instance.
    store.forget(instance.id);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_jsonb_refuses_are_recognised() {
        for refused in [
            r#"{"a":"\u0000"}"#,
            r#"{"a":"x\ud800"}"#,
            r#"{"a":"\uDBFF\uDC00"}"#,
            r#"{"a":"\udfff"}"#,
        ] {
            assert!(jsonb_refuses(refused), "{refused}");
        }
        for fine in [
            r#"{"a":"\u00e9"}"#,
            r#"{"a":"\u0001"}"#,
            r#"{"a":"\uc800"}"#,
            r#"{"a":"u0000"}"#,
            r#"{"a":"\\"}"#,
            r#"{}"#,
        ] {
            assert!(!jsonb_refuses(fine), "{fine}");
        }
    }
}
