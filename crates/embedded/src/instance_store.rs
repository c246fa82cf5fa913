//! Per-instance storage units: SQLite tables named after the instance id, or directories.
//!
//! Giving every instance its own tables (or directory) makes destroying an instance a
//! `DROP TABLE` (or a directory removal) instead of a delete of every row, and lets `sweep`
//! find leftovers of instances the registry forgot by name alone.

use std::{collections::HashSet, fs, path::PathBuf};

use quintet_core::{InstanceId, Result, ports::Keep};
use rusqlite::Connection;

use crate::sqlite::sql_error;

/// Tables of one service in one database: the instance's main table is `<prefix><id>`; any
/// auxiliary table it owns is named `<prefix><id>_<suffix>`.
#[derive(Debug, Clone, Copy)]
pub struct InstanceTables {
    /// Table-name prefix, a few lowercase letters unique within the database.
    pub prefix: &'static str,
}

impl InstanceTables {
    /// The main table of instance `id`.
    pub fn table(&self, id: InstanceId) -> String {
        format!("{}{}", self.prefix, id.0)
    }

    /// Every table belonging to an instance, by instance id.
    fn owned_tables(&self, conn: &Connection) -> Result<Vec<(InstanceId, String)>> {
        let mut stmt = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE ?1")
            .map_err(sql_error)?;
        let names = stmt
            .query_map([format!("{}%", self.prefix)], |r| r.get::<_, String>(0))
            .map_err(sql_error)?
            .collect::<rusqlite::Result<Vec<String>>>()
            .map_err(sql_error)?;
        Ok(names
            .into_iter()
            .filter_map(|name| self.owner(&name).map(|id| (id, name)))
            .collect())
    }

    /// The instance owning table `name`, if the name follows this prefix's scheme.
    fn owner(&self, name: &str) -> Option<InstanceId> {
        let rest = name.strip_prefix(self.prefix)?;
        let digits = rest.split('_').next()?;
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok().map(InstanceId)
    }

    /// Drop every table of instance `id`; inside the caller's write transaction.
    pub fn drop_instance(&self, conn: &Connection, id: InstanceId) -> Result<()> {
        for (owner, name) in self.owned_tables(conn)? {
            if owner == id {
                conn.execute_batch(&format!("DROP TABLE IF EXISTS \"{name}\""))
                    .map_err(sql_error)?;
            }
        }
        Ok(())
    }

    /// Drop the tables of every instance `keep` does not keep; returns how many instances.
    pub fn sweep(&self, conn: &Connection, keep: &Keep) -> Result<usize> {
        let mut orphans = HashSet::new();
        for (owner, name) in self.owned_tables(conn)? {
            if !keep.keeps(owner) {
                conn.execute_batch(&format!("DROP TABLE IF EXISTS \"{name}\""))
                    .map_err(sql_error)?;
                orphans.insert(owner);
            }
        }
        Ok(orphans.len())
    }
}

/// One directory per instance under a root: `<root>/<id>/`.
#[derive(Debug, Clone)]
pub struct InstanceDirs {
    root: PathBuf,
}

impl InstanceDirs {
    /// Instance directories under `root`, which is created when missing.
    pub fn open(root: PathBuf) -> Result<Self> {
        fs::create_dir_all(&root)?;
        Ok(Self { root })
    }

    /// The directory of instance `id`.
    pub fn dir(&self, id: InstanceId) -> PathBuf {
        self.root.join(id.0.to_string())
    }

    /// Create the (empty) directory of instance `id`.
    pub fn create(&self, id: InstanceId) -> Result<PathBuf> {
        let dir = self.dir(id);
        fs::create_dir_all(&dir)?;
        Ok(dir)
    }

    /// Remove the directory of instance `id` and everything in it; fine when missing.
    pub fn remove(&self, id: InstanceId) -> Result<()> {
        remove_dir_if_exists(self.dir(id))
    }

    /// Remove the directory of every instance `keep` does not keep; returns how many.
    pub fn sweep(&self, keep: &Keep) -> Result<usize> {
        let mut removed = 0;
        for entry in fs::read_dir(&self.root)? {
            let entry = entry?;
            let Some(id) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<i64>().ok())
                .map(InstanceId)
            else {
                continue;
            };
            if !keep.keeps(id) {
                remove_dir_if_exists(entry.path())?;
                removed += 1;
            }
        }
        Ok(removed)
    }
}

fn remove_dir_if_exists(path: PathBuf) -> Result<()> {
    match fs::remove_dir_all(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_parses_only_this_prefix_scheme() {
        let t = InstanceTables { prefix: "d" };
        assert_eq!(t.owner("d12"), Some(InstanceId(12)));
        assert_eq!(t.owner("d12_idx3"), Some(InstanceId(12)));
        assert_eq!(t.owner("d"), None);
        assert_eq!(t.owner("dx12"), None);
        assert_eq!(t.owner("c12"), None);
    }
}

/// Lifecycle of per-instance tables in one database: the shared part of every SQLite-backed
/// service adapter.
#[derive(Debug, Clone)]
pub struct TableLifecycle {
    db: crate::sqlite::SqliteDb,
    tables: InstanceTables,
    ddl: fn(&str) -> String,
}

impl TableLifecycle {
    /// Tables named with `prefix` in `db`; `ddl(table)` creates an instance's tables.
    pub fn new(db: crate::sqlite::SqliteDb, prefix: &'static str, ddl: fn(&str) -> String) -> Self {
        Self {
            db,
            tables: InstanceTables { prefix },
            ddl,
        }
    }

    /// The database holding the tables.
    pub fn db(&self) -> &crate::sqlite::SqliteDb {
        &self.db
    }

    /// The main table of instance `id`.
    pub fn table(&self, id: InstanceId) -> String {
        self.tables.table(id)
    }

    /// Create the tables of instance `id`.
    pub async fn create(&self, id: InstanceId) -> Result<()> {
        let sql = (self.ddl)(&self.tables.table(id));
        self.db
            .write(move |c| c.execute_batch(&sql).map_err(sql_error))
            .await
    }

    /// Drop every table of instance `id`.
    pub async fn drop(&self, id: InstanceId) -> Result<()> {
        let tables = self.tables;
        self.db.write(move |c| tables.drop_instance(c, id)).await
    }

    /// Drop the tables of instances `keep` does not keep.
    pub async fn sweep(&self, keep: &Keep) -> Result<usize> {
        let (tables, keep) = (self.tables, keep.clone());
        self.db.write(move |c| tables.sweep(c, &keep)).await
    }
}

/// Run filesystem work on tokio's blocking pool.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| quintet_core::Error::internal(format!("a file task failed: {e}")))?
}
