//! The data service on SQLite (`data.db`): one table per instance.

use std::path::Path;

use async_trait::async_trait;
use quintet_core::{Instance, InstanceId, Result, ports::Lifecycle};

use crate::{
    instance_store::TableLifecycle,
    sqlite::{SqliteDb, SqliteOptions},
};

/// Documents of every data instance, in one SQLite file.
#[derive(Debug, Clone)]
pub struct SqliteDocStore {
    tables: TableLifecycle,
}

fn ddl(table: &str) -> String {
    format!(
        "CREATE TABLE \"{table}\" (\
           seq  INTEGER PRIMARY KEY, \
           id   TEXT NOT NULL UNIQUE, \
           body TEXT NOT NULL\
         ) STRICT;"
    )
}

impl SqliteDocStore {
    /// Open (or create) the document database at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let db = SqliteDb::open(path, &[], SqliteOptions::default())?;
        Ok(Self {
            tables: TableLifecycle::new(db, "d", ddl),
        })
    }
}

#[async_trait]
impl Lifecycle for SqliteDocStore {
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
