//! What the logs behind the change feeds share on SQLite: a data instance's change log
//! (`d<id>_ch`) and a queue's event log (`q<id>_ev`).
//!
//! A log is a table `(seq INTEGER PRIMARY KEY AUTOINCREMENT, …, at_ms INTEGER)` written in
//! the transaction of the write it records. `AUTOINCREMENT` never reuses a number, even
//! once compaction removed the newest rows, and the one writer thread commits in order, so
//! numbers follow commit order. The head is the table's `sqlite_sequence` entry.

use std::sync::{Arc, Mutex, Weak};

use quintet_core::{
    Instance, InstanceId, Result,
    ports::changes::{ChangesPage, FeedListener, MAX_CHANGES_PAGE, Numbered, check_since},
};
use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::sqlite::{SqliteDb, sql_error};

/// Entries removed per write transaction while compacting.
const COMPACT_BATCH: usize = 10_000;

/// Who is told after a commit that wrote to a log.
pub(crate) type Listeners = Arc<Mutex<Vec<Weak<dyn FeedListener>>>>;

/// Add `listener` to `listeners`.
pub(crate) fn subscribe(listeners: &Listeners, listener: Weak<dyn FeedListener>) {
    if let Ok(mut all) = listeners.lock() {
        all.push(listener);
    }
}

/// Tell every live listener that `instance`'s log may have grown.
pub(crate) fn tell(listeners: &Listeners, instance: InstanceId) {
    let live: Vec<Arc<dyn FeedListener>> = match listeners.lock() {
        Ok(mut all) => {
            all.retain(|l| l.strong_count() > 0);
            all.iter().filter_map(Weak::upgrade).collect()
        }
        Err(_) => return,
    };
    for l in live {
        l.changed(instance);
    }
}

/// The head of log table `log`: the number of its latest entry, kept even once the entry
/// is compacted.
pub(crate) fn head(c: &Connection, log: &str) -> Result<u64> {
    let n: Option<i64> = c
        .prepare_cached("SELECT seq FROM sqlite_sequence WHERE name = ?1")
        .and_then(|mut s| s.query_row([log], |r| r.get(0)).optional())
        .map_err(sql_error)?;
    Ok(n.unwrap_or(0).max(0) as u64)
}

/// Whether table `table` exists.
pub(crate) fn table_exists(c: &Connection, table: &str) -> Result<bool> {
    c.prepare_cached("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1")
        .and_then(|mut s| s.query_row([table], |_| Ok(())).optional())
        .map(|found| found.is_some())
        .map_err(sql_error)
}

/// Entries of log table `log` (of `instance`) after `since`, at most `limit`, in one
/// read transaction so the head, the oldest entry and the page agree. `columns` are
/// selected after `seq`; `entry` builds an entry from a row (`seq` is column 0).
pub(crate) fn page<C: Numbered>(
    c: &Connection,
    log: &str,
    columns: &str,
    instance: &Instance,
    since: u64,
    limit: usize,
    entry: impl Fn(&Row<'_>) -> rusqlite::Result<C>,
) -> Result<ChangesPage<C>> {
    let limit = limit.min(MAX_CHANGES_PAGE) as i64;
    let tx = c.unchecked_transaction().map_err(sql_error)?;
    let head = head(&tx, log)?;
    let oldest: Option<i64> = tx
        .prepare_cached(&format!("SELECT min(seq) FROM \"{log}\""))
        .and_then(|mut s| s.query_row([], |r| r.get(0)))
        .map_err(sql_error)?;
    check_since(instance, since, head, oldest.map(|n| n as u64))?;
    let mut stmt = tx
        .prepare_cached(&format!(
            "SELECT seq, {columns} FROM \"{log}\" WHERE seq > ?1 ORDER BY seq LIMIT ?2"
        ))
        .map_err(sql_error)?;
    let changes = stmt
        .query_map(params![since as i64, limit], |r| entry(r))
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        .map_err(sql_error)?;
    Ok(ChangesPage::after(since, changes))
}

/// Remove the entries written before `before_ms` from every log table whose name matches
/// `glob`; returns how many.
pub(crate) async fn compact(db: &SqliteDb, glob: &'static str, before_ms: i64) -> Result<u64> {
    let logs: Vec<String> = db.read_now(|c| {
        c.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name GLOB ?1")
            .and_then(|mut s| {
                s.query_map([glob], |r| r.get::<_, String>(0))?
                    .collect::<rusqlite::Result<Vec<String>>>()
            })
            .map_err(sql_error)
    })?;
    let mut removed = 0;
    for log in logs {
        // From the oldest entry on, one batch per write (writers go on in between), and
        // only a prefix of the log: an entry is removed only with every entry before it,
        // so a clock that stepped back never leaves a hole readers would not notice.
        loop {
            let log = log.clone();
            let (n, full) = db
                .write(move |c| {
                    let oldest: Vec<(i64, i64)> = c
                        .prepare_cached(&format!(
                            "SELECT seq, at_ms FROM \"{log}\" ORDER BY seq LIMIT {COMPACT_BATCH}"
                        ))
                        .and_then(|mut s| {
                            s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                                .collect::<rusqlite::Result<Vec<_>>>()
                        })
                        .map_err(sql_error)?;
                    let old = oldest.iter().take_while(|(_, at)| *at < before_ms).count();
                    let Some(&(last, _)) = old.checked_sub(1).and_then(|i| oldest.get(i)) else {
                        return Ok((0, false));
                    };
                    let n = c
                        .execute(&format!("DELETE FROM \"{log}\" WHERE seq <= ?1"), [last])
                        .map_err(sql_error)?;
                    Ok((n as u64, old == COMPACT_BATCH))
                })
                .await?;
            removed += n;
            if !full {
                break;
            }
        }
    }
    Ok(removed)
}
