//! A bucket's event log: `o<id>_ev` in `storage.db`, `(seq, path, event, size, etag,
//! content_type, at_ms)`, one row per upload and removal, written in the transaction that
//! commits (or removes) the object's row (see [`crate::changelog`] for the numbering). A
//! bucket created before event logs existed gets an empty one on its first write.

use std::sync::Weak;

use async_trait::async_trait;
use quintet_core::{
    Instance, Result,
    ports::{
        changes::{ChangesPage, FeedListener, check_since},
        storage_events::{ObjectEvent, ObjectEventKind, StorageEvents},
    },
};
use rusqlite::{Connection, params};

use super::{FsBlobStore, gone};
use crate::{
    changelog::{self, table_exists},
    sqlite::sql_error,
};

/// The DDL of the event log of the bucket whose objects are in `table`.
pub(super) fn ddl(table: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS \"{table}_ev\" (\
           seq          INTEGER PRIMARY KEY AUTOINCREMENT, \
           path         TEXT NOT NULL, \
           event        TEXT NOT NULL, \
           size         INTEGER, \
           etag         TEXT, \
           content_type TEXT, \
           at_ms        INTEGER NOT NULL\
         ) STRICT;"
    )
}

/// Append `event` of `path` to the log of the bucket whose objects are in `table`, in the
/// write's transaction; `create` first makes the log of a bucket older than event logs.
pub(super) fn record(
    c: &Connection,
    table: &str,
    create: bool,
    path: &str,
    event: &ObjectEventKind,
    at_ms: i64,
) -> Result<()> {
    if create {
        c.execute_batch(&ddl(table)).map_err(sql_error)?;
    }
    let (size, etag, content_type) = event.columns();
    c.prepare_cached(&format!(
        "INSERT INTO \"{table}_ev\" (path, event, size, etag, content_type, at_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
    ))
    .and_then(|mut s| {
        s.execute(params![
            path,
            event.as_str(),
            size,
            etag,
            content_type,
            at_ms
        ])
    })
    .map_err(sql_error)?;
    Ok(())
}

#[async_trait]
impl StorageEvents for FsBlobStore {
    async fn events(
        &self,
        instance: &Instance,
        since: u64,
        limit: usize,
    ) -> Result<ChangesPage<ObjectEvent>> {
        let table = self.tables.table(instance.id);
        self.db().read_now(|c| {
            let log = format!("{table}_ev");
            if !table_exists(c, &log)? {
                // A bucket untouched since before event logs existed has none yet.
                return if table_exists(c, &table)? {
                    check_since(instance, since, 0, None)?;
                    Ok(ChangesPage::default())
                } else {
                    Err(gone(instance))
                };
            }
            let columns = "path, event, size, etag, content_type";
            changelog::page(c, &log, columns, instance, since, limit, |r| {
                let event: String = r.get(2)?;
                Ok(ObjectEvent {
                    seq: r.get::<_, i64>(0)? as u64,
                    path: r.get(1)?,
                    event: ObjectEventKind::from_stored(&event, r.get(3)?, r.get(4)?, r.get(5)?)
                        .map_err(|e| {
                            rusqlite::Error::FromSqlConversionFailure(
                                2,
                                rusqlite::types::Type::Text,
                                Box::new(e),
                            )
                        })?,
                })
            })
        })
    }

    async fn event_head(&self, instance: &Instance) -> Result<u64> {
        let table = self.tables.table(instance.id);
        self.db().read_now(|c| {
            if !table_exists(c, &table)? {
                return Err(gone(instance));
            }
            changelog::head(c, &format!("{table}_ev"))
        })
    }

    async fn compact_events(&self, before_ms: i64) -> Result<u64> {
        changelog::compact(self.db(), "o[0-9]*_ev", before_ms).await
    }

    fn subscribe_events(&self, listener: Weak<dyn FeedListener>) {
        changelog::subscribe(&self.listeners, listener);
    }
}
