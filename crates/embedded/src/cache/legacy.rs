//! Entries of a data directory written before the cache log: `cache.db`, SQLite, one table
//! `c<instance id>` per instance. They are copied into a new log once, then the database is
//! removed.

use std::{
    fs::{self, OpenOptions},
    io::{BufWriter, Write},
    path::{Path, PathBuf},
};

use quintet_core::{InstanceId, Result, cache::key::MAX_KEY_BYTES};
use rusqlite::{Connection, OpenFlags};

use super::record::Record;
use crate::{
    datadir::{dir_of, remove_file_if_present, sync_dir},
    sqlite::sql_error,
};

/// The SQLite database an earlier quintet kept beside `log`.
pub(crate) fn database_beside(log: &Path) -> PathBuf {
    log.with_file_name("cache.db")
}

/// The database's files: itself, its WAL and its shared-memory index.
pub(crate) fn database_files(db: &Path) -> [PathBuf; 3] {
    ["", "-wal", "-shm"].map(|suffix| {
        let mut p = db.as_os_str().to_owned();
        p.push(suffix);
        PathBuf::from(p)
    })
}

/// When there is no log at `log` but an earlier `cache.db` beside it, write its entries
/// into a new log and remove the database. Returns how many entries were copied.
pub(crate) fn import(log: &Path) -> Result<usize> {
    let db = database_beside(log);
    if log.exists() || !db.exists() {
        return Ok(0);
    }
    let conn =
        Connection::open_with_flags(&db, OpenFlags::SQLITE_OPEN_READ_WRITE).map_err(sql_error)?;
    let mut staged = log.as_os_str().to_owned();
    staged.push(".import");
    let staged = PathBuf::from(staged);
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&staged)?;
    let mut out = BufWriter::new(&file);
    let copied = copy_tables(&conn, &mut out)?;
    out.flush()?;
    drop(out);
    file.sync_all()?;
    drop(conn);
    fs::rename(&staged, log)?;
    sync_dir(&dir_of(log))?;
    for f in database_files(&db) {
        remove_file_if_present(&f)?;
    }
    tracing::info!(
        entries = copied,
        "moved the cache entries of cache.db into cache.log"
    );
    Ok(copied)
}

fn copy_tables(conn: &Connection, out: &mut impl Write) -> Result<usize> {
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name GLOB 'c[0-9]*'")
        .and_then(|mut stmt| {
            stmt.query_map([], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()
        })
        .map_err(sql_error)?;
    let mut copied = 0;
    let mut record = Vec::new();
    for table in tables {
        let Ok(id) = table[1..].parse::<i64>() else {
            continue; // an auxiliary table `c<id>_<suffix>`
        };
        let mut stmt = conn
            .prepare(&format!("SELECT key, value, expires_ms FROM \"{table}\""))
            .map_err(sql_error)?;
        let mut rows = stmt.query([]).map_err(sql_error)?;
        while let Some(row) = rows.next().map_err(sql_error)? {
            let key: String = row.get(0).map_err(sql_error)?;
            let value: String = row.get(1).map_err(sql_error)?;
            let expires_ms: Option<i64> = row.get(2).map_err(sql_error)?;
            if key.is_empty() || key.len() > MAX_KEY_BYTES || value.is_empty() {
                tracing::warn!(
                    table,
                    key,
                    "skipped a cache row that breaks the key or value rules"
                );
                continue;
            }
            record.clear();
            Record::Put {
                inst: InstanceId(id),
                key: &key,
                value: value.as_bytes(),
                expires_ms,
            }
            .encode(&mut record);
            out.write_all(&record)?;
            copied += 1;
        }
    }
    Ok(copied)
}
