//! The queue service on SQLite (`queue.db`): one table per instance.

use std::path::Path;

use async_trait::async_trait;
use quintet_core::{Instance, InstanceId, Result, ports::Lifecycle};

use crate::{
    instance_store::TableLifecycle,
    sqlite::{SqliteDb, SqliteOptions},
};

/// Jobs of every queue instance, in one SQLite file.
#[derive(Debug, Clone)]
pub struct SqliteJobQueue {
    tables: TableLifecycle,
}

fn ddl(table: &str) -> String {
    format!(
        "CREATE TABLE \"{table}\" (\
           seq        INTEGER PRIMARY KEY AUTOINCREMENT, \
           id         TEXT NOT NULL UNIQUE, \
           status     TEXT NOT NULL, \
           job        TEXT NOT NULL, \
           attempts   INTEGER NOT NULL DEFAULT 0, \
           error      TEXT, \
           created_ms INTEGER NOT NULL, \
           updated_ms INTEGER NOT NULL\
         ) STRICT;"
    )
}

impl SqliteJobQueue {
    /// Open (or create) the job database at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let db = SqliteDb::open(path, &[], SqliteOptions::default())?;
        Ok(Self {
            tables: TableLifecycle::new(db, "q", ddl),
        })
    }
}

#[async_trait]
impl Lifecycle for SqliteJobQueue {
    async fn create_instance(&self, instance: &Instance) -> Result<()> {
        self.tables.create(instance.id).await
    }

    async fn drop_instance(&self, instance: &Instance) -> Result<()> {
        self.tables.drop(instance.id).await
    }

    async fn sweep(&self, live: &[InstanceId]) -> Result<usize> {
        self.tables.sweep(live).await
    }

    async fn close(&self) -> Result<()> {
        self.tables.db().close().await
    }
}
