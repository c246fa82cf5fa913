//! The registry on SQLite (`registry.db`): accounts, applications, keys and instances.

use std::{path::Path, sync::Arc};

use async_trait::async_trait;
use quintet_core::{
    AppName, Clock, Error, Instance, InstanceConfig, InstanceId, InstanceName, Result, ServiceType,
    ports::registry::Registry,
};
use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::sqlite::{SqliteDb, SqliteOptions, is_unique_violation, sql_error};

/// Schema migrations; append only. Version 1 models everything the application, key and
/// instance features need, so none of them has to reshape stored data.
const MIGRATIONS: &[&str] = &[r#"
CREATE TABLE accounts (
    name        TEXT PRIMARY KEY,
    plan        TEXT NOT NULL,
    created_ms  INTEGER NOT NULL
) STRICT;

CREATE TABLE apps (
    name        TEXT PRIMARY KEY,
    account     TEXT REFERENCES accounts(name) ON DELETE RESTRICT,
    created_ms  INTEGER NOT NULL
) STRICT;
CREATE INDEX apps_by_account ON apps(account);

CREATE TABLE keys (
    key           TEXT PRIMARY KEY,
    app           TEXT NOT NULL REFERENCES apps(name) ON DELETE CASCADE,
    secret        TEXT NOT NULL,
    created_ms    INTEGER NOT NULL,
    last_used_ms  INTEGER,
    revoked_ms    INTEGER
) STRICT;
CREATE INDEX keys_by_app ON keys(app);

CREATE TABLE instances (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    app         TEXT NOT NULL REFERENCES apps(name) ON DELETE CASCADE,
    type        TEXT NOT NULL,
    name        TEXT NOT NULL,
    config      TEXT NOT NULL,
    created_ms  INTEGER NOT NULL,
    UNIQUE (app, type, name)
) STRICT;

INSERT INTO apps (name, account, created_ms) VALUES ('_domain', NULL, 0);
"#];

/// The registry kept in a SQLite file.
#[derive(Debug, Clone)]
pub struct SqliteRegistry {
    db: SqliteDb,
    clock: Arc<dyn Clock>,
}

impl SqliteRegistry {
    /// Open (or create) the registry database at `path`.
    pub fn open(path: &Path, clock: Arc<dyn Clock>) -> Result<Self> {
        let db = SqliteDb::open(path, MIGRATIONS, SqliteOptions::default())?;
        Ok(Self { db, clock })
    }

    /// The underlying database, for the features that extend the registry.
    pub fn db(&self) -> &SqliteDb {
        &self.db
    }
}

const INSTANCE_COLUMNS: &str = "id, app, type, name, config, created_ms";

fn instance_from_row(row: &Row<'_>) -> rusqlite::Result<Result<Instance>> {
    let id: i64 = row.get(0)?;
    let app: String = row.get(1)?;
    let kind: String = row.get(2)?;
    let name: String = row.get(3)?;
    let config: String = row.get(4)?;
    let created_ms: i64 = row.get(5)?;
    Ok((|| {
        let kind: ServiceType = kind.parse()?;
        let config: serde_json::Value = serde_json::from_str(&config)
            .map_err(|e| Error::internal(format!("instance {id}: stored config: {e}")))?;
        Ok(Instance {
            id: InstanceId(id),
            app: AppName::from_stored(&app)?,
            name: name.parse()?,
            config: InstanceConfig::from_stored(kind, &config)?,
            created_ms,
        })
    })())
}

fn get_instance(
    conn: &Connection,
    app: &str,
    kind: ServiceType,
    name: &str,
) -> Result<Option<Instance>> {
    conn.prepare_cached(&format!(
        "SELECT {INSTANCE_COLUMNS} FROM instances WHERE app = ?1 AND type = ?2 AND name = ?3"
    ))
    .map_err(sql_error)?
    .query_row(params![app, kind.as_str(), name], instance_from_row)
    .optional()
    .map_err(sql_error)?
    .transpose()
}

#[async_trait]
impl Registry for SqliteRegistry {
    async fn create_instance(
        &self,
        app: &AppName,
        name: &InstanceName,
        config: InstanceConfig,
    ) -> Result<Instance> {
        let (app, name) = (app.clone(), name.clone());
        let created_ms = self.clock.now_ms();
        self.db
            .write(move |conn| {
                let app_exists = conn
                    .prepare_cached("SELECT 1 FROM apps WHERE name = ?1")
                    .and_then(|mut s| s.exists([app.as_str()]))
                    .map_err(sql_error)?;
                if !app_exists {
                    return Err(Error::not_found(format!(
                        "application \"{app}\" does not exist"
                    )));
                }
                let kind = config.kind();
                conn.prepare_cached(
                    "INSERT INTO instances (app, type, name, config, created_ms) \
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .and_then(|mut s| {
                    s.execute(params![
                        app.as_str(),
                        kind.as_str(),
                        name.as_str(),
                        config.to_json().to_string(),
                        created_ms
                    ])
                })
                .map_err(|e| {
                    if is_unique_violation(&e) {
                        Error::conflict(format!("{kind} instance \"{name}\" already exists"))
                    } else {
                        sql_error(e)
                    }
                })?;
                Ok(Instance {
                    id: InstanceId(conn.last_insert_rowid()),
                    app,
                    name,
                    config,
                    created_ms,
                })
            })
            .await
    }

    async fn get_instance(
        &self,
        app: &AppName,
        kind: ServiceType,
        name: &InstanceName,
    ) -> Result<Option<Instance>> {
        let (app, name) = (app.clone(), name.clone());
        self.db
            .read(move |conn| get_instance(conn, app.as_str(), kind, name.as_str()))
            .await
    }

    async fn delete_instance(
        &self,
        app: &AppName,
        kind: ServiceType,
        name: &InstanceName,
    ) -> Result<Instance> {
        let (app, name) = (app.clone(), name.clone());
        self.db
            .write(move |conn| {
                let inst =
                    get_instance(conn, app.as_str(), kind, name.as_str())?.ok_or_else(|| {
                        Error::not_found(format!("{kind} instance \"{name}\" does not exist"))
                    })?;
                conn.prepare_cached("DELETE FROM instances WHERE id = ?1")
                    .and_then(|mut s| s.execute([inst.id.0]))
                    .map_err(sql_error)?;
                Ok(inst)
            })
            .await
    }

    async fn list_instances(&self, app: Option<&AppName>) -> Result<Vec<Instance>> {
        let app = app.map(|a| a.as_str().to_owned());
        self.db
            .read(move |conn| {
                let mut stmt = conn
                    .prepare_cached(&format!(
                        "SELECT {INSTANCE_COLUMNS} FROM instances \
                         WHERE ?1 IS NULL OR app = ?1 ORDER BY app, type, name"
                    ))
                    .map_err(sql_error)?;
                let rows = stmt
                    .query_map([app], instance_from_row)
                    .map_err(sql_error)?;
                let mut out = Vec::new();
                for row in rows {
                    out.push(row.map_err(sql_error)??);
                }
                Ok(out)
            })
            .await
    }

    async fn close(&self) -> Result<()> {
        self.db.close().await
    }
}
