//! The cache service on SQLite (`cache.db`): one table per instance.

use std::path::Path;

use async_trait::async_trait;
use quintet_core::{Instance, InstanceId, Result, ports::Lifecycle};

use crate::{
    instance_store::TableLifecycle,
    sqlite::{SqliteDb, SqliteOptions},
};

/// Entries of every cache instance, in one SQLite file.
#[derive(Debug, Clone)]
pub struct SqliteCache {
    tables: TableLifecycle,
}

fn ddl(table: &str) -> String {
    format!(
        "CREATE TABLE \"{table}\" (\
           key        TEXT PRIMARY KEY, \
           value      TEXT NOT NULL, \
           expires_ms INTEGER\
         ) STRICT;"
    )
}

impl SqliteCache {
    /// Open (or create) the cache database at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let db = SqliteDb::open(path, &[], SqliteOptions::default())?;
        Ok(Self {
            tables: TableLifecycle::new(db, "c", ddl),
        })
    }
}

#[async_trait]
impl Lifecycle for SqliteCache {
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
