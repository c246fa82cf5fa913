//! What the logs behind the change feeds share on PostgreSQL: a data instance's change log
//! (`quintet_data_changes`) and a queue's event log (`quintet_queue_events`). Each is
//! `(<owner>, seq, …, at_ms)` with primary key `(<owner>, seq)`, numbered in commit order
//! from a counter row per owner (see `data::changes` and `queue::events` for how).

use quintet_core::{
    Error, Instance, Result,
    ports::changes::{MAX_CHANGES_PAGE, check_since},
};
use serde::de::DeserializeOwned;

use crate::{database::PgDatabase, error::pg_error};

/// The rows of a page after `since` (at most `limit`), read by `sql`: with parameters
/// owner id, `since`, limit, it answers one row — the head, the oldest kept entry, and the
/// page as a JSON array of rows — or none when the owner is gone (`gone`). The position is
/// checked against the head and the oldest entry of the same snapshot.
pub(crate) async fn page_rows<T: DeserializeOwned>(
    db: &PgDatabase,
    sql: &str,
    instance: &Instance,
    since: u64,
    limit: usize,
    gone: impl FnOnce() -> Error,
) -> Result<Vec<T>> {
    let limit = limit.min(MAX_CHANGES_PAGE) as i64;
    let since_i = i64::try_from(since).unwrap_or(i64::MAX);
    let row = db
        .client()
        .await?
        .query_opt(sql, &[&instance.id.0, &since_i, &limit])
        .await
        .map_err(pg_error)?
        .ok_or_else(gone)?;
    let head: i64 = row.try_get(0).map_err(pg_error)?;
    let oldest: Option<i64> = row.try_get(1).map_err(pg_error)?;
    check_since(
        instance,
        since,
        head.max(0) as u64,
        oldest.map(|n| n as u64),
    )?;
    let text: String = row.try_get(2).map_err(pg_error)?;
    serde_json::from_str(&text).map_err(|e| Error::internal(format!("reading a change log: {e}")))
}

/// The head read by `sql` (owner id as its parameter; no row when the owner is `gone`).
pub(crate) async fn head(
    db: &PgDatabase,
    sql: &str,
    instance: &Instance,
    gone: impl FnOnce() -> Error,
) -> Result<u64> {
    let row = db
        .client()
        .await?
        .query_opt(sql, &[&instance.id.0])
        .await
        .map_err(pg_error)?
        .ok_or_else(gone)?;
    let n: i64 = row.try_get(0).map_err(pg_error)?;
    Ok(n.max(0) as u64)
}

/// Remove the entries of log table `log` (owned by column `owner`) written before
/// `before_ms`, of every owner, but only a prefix of each log: an entry goes only with
/// every entry before it, so a clock that stepped back never leaves a hole readers would
/// not notice. `log` and `owner` are identifiers of this crate, never user text.
pub(crate) async fn compact(
    db: &PgDatabase,
    log: &'static str,
    owner: &'static str,
    before_ms: i64,
) -> Result<u64> {
    let sql = format!(
        "WITH keep AS ( \
             SELECT {owner} AS o, min(seq) AS first FROM {log} \
             WHERE at_ms >= $1 GROUP BY {owner} \
         ) \
         DELETE FROM {log} c \
         WHERE c.at_ms < $1 \
           AND c.seq < coalesce((SELECT first FROM keep WHERE keep.o = c.{owner}), \
                                9223372036854775807)"
    );
    db.client()
        .await?
        .execute(&sql, &[&before_ms])
        .await
        .map_err(pg_error)
}
