//! What the logs behind the change feeds share on PostgreSQL: a data instance's change log
//! (`quintet_data_changes`) and a queue's event log (`quintet_queue_events`). Each is
//! `(<owner>, seq, …, at_ms)` with primary key `(<owner>, seq)`, numbered in commit order
//! from a counter row per owner (see `data::changes` and `queue::events` for how).

use quintet_core::Result;

use crate::{database::PgDatabase, error::pg_error};

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
