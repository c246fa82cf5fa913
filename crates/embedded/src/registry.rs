//! The registry on SQLite (`registry.db`): accounts, applications, keys and instances.

use std::{
    path::Path,
    sync::{Arc, Weak},
};

use async_trait::async_trait;
use quintet_core::{
    AppName, Clock, Error, Instance, InstanceConfig, InstanceId, InstanceName, Result, ServiceType,
    account_tokens::{AccountToken, AccountTokenId, token_missing},
    accounts::{Account, AccountName, AccountUsage, App, Plan},
    keyring::Keyring,
    keyring::TokenDigest,
    keys::{AccessKey, KeyId},
    ports::registry::{
        ChangeListener, Registry,
        answers::{self, account_missing, app_missing},
    },
};
use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::{
    disk::DiskSpace,
    sqlite::{SqliteDb, SqliteOptions, is_unique_violation, sql_error},
};

/// Schema migrations; append only. Version 1 models everything the application, key and
/// instance features need, so none of them has to reshape stored data.
const MIGRATIONS: &[&str] = &[
    r#"
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
"#,
    r#"
CREATE TABLE account_tokens (
    id          TEXT PRIMARY KEY,
    account     TEXT NOT NULL REFERENCES accounts(name) ON DELETE CASCADE,
    digest      TEXT NOT NULL,
    created_ms  INTEGER NOT NULL,
    revoked_ms  INTEGER
) STRICT;
CREATE INDEX account_tokens_by_account ON account_tokens(account);
"#,
];

/// The registry kept in a SQLite file. Access-key secrets and queue secrets are stored
/// sealed with the node's master key ([`Keyring`]).
#[derive(Debug, Clone)]
pub struct SqliteRegistry {
    db: SqliteDb,
    clock: Arc<dyn Clock>,
    ring: Arc<Keyring>,
    /// Admits new records while the disk has room; deletions and revocations are not
    /// asked.
    disk: Arc<DiskSpace>,
}

impl SqliteRegistry {
    /// Record `key` (sealing its secret); `taken` answers when its id exists.
    async fn insert_key(
        &self,
        key: AccessKey,
        taken: impl FnOnce() -> Error + Send + 'static,
    ) -> Result<AccessKey> {
        self.disk.admit()?;
        answers::check_may_have_keys(&key.app)?;
        let stored = self.ring.seal_key_secret(&key.key, &key.secret)?;
        self.db
            .write(move |conn| {
                if get_app(conn, key.app.as_str())?.is_none() {
                    return Err(app_missing(&key.app));
                }
                conn.prepare_cached(
                    "INSERT INTO keys (key, app, secret, created_ms) VALUES (?1, ?2, ?3, ?4)",
                )
                .and_then(|mut s| {
                    s.execute(params![
                        key.key.as_str(),
                        key.app.as_str(),
                        stored,
                        key.created_ms
                    ])
                })
                .map_err(|e| {
                    if is_unique_violation(&e) {
                        taken()
                    } else {
                        sql_error(e)
                    }
                })?;
                Ok(key)
            })
            .await
    }

    /// Open (or create) the registry database at `path`, sealing secrets with `ring`.
    /// Secrets stored in plaintext (before sealing existed) or sealed with a previous key
    /// of the ring are resealed with its current key now; a secret no key of the ring
    /// opens fails the start.
    pub fn open(path: &Path, clock: Arc<dyn Clock>, ring: Arc<Keyring>) -> Result<Self> {
        let db = SqliteDb::open(path, MIGRATIONS, SqliteOptions::default())?;
        // Before the writer takes its first write: a connection of its own, one transaction.
        let mut conn = Connection::open(path).map_err(sql_error)?;
        let tx = conn.transaction().map_err(sql_error)?;
        let resealed = reseal(&tx, &ring)?;
        tx.commit().map_err(sql_error)?;
        if resealed > 0 {
            tracing::info!(
                secrets = resealed,
                "sealed stored secrets with the current master key"
            );
        }
        Ok(Self {
            db,
            clock,
            ring,
            disk: Arc::new(DiskSpace::unchecked(path)),
        })
    }

    /// The same registry with new records admitted by `disk` (see [`crate::disk`]).
    pub fn with_disk(mut self, disk: Arc<DiskSpace>) -> Self {
        self.disk = disk;
        self
    }

    /// The underlying database, for the features that extend the registry.
    pub fn db(&self) -> &SqliteDb {
        &self.db
    }
}

/// Reseal every stored secret of `conn`'s registry that needs it (see
/// [`SqliteRegistry::open`]); returns how many were rewritten.
fn reseal(conn: &Connection, ring: &Keyring) -> Result<usize> {
    let mut count = 0;
    let keys: Vec<(String, String)> = {
        let mut stmt = conn
            .prepare("SELECT key, secret FROM keys")
            .map_err(sql_error)?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(sql_error)?;
        rows.collect::<rusqlite::Result<_>>().map_err(sql_error)?
    };
    for (key, stored) in keys {
        let id: KeyId = key.parse()?;
        let secret = ring.open_key_secret(&id, &stored)?;
        if ring.needs_reseal(&stored) {
            conn.execute(
                "UPDATE keys SET secret = ?2 WHERE key = ?1",
                params![key, ring.seal_key_secret(&id, &secret)?],
            )
            .map_err(sql_error)?;
            count += 1;
        }
    }
    let configs: Vec<(i64, String, String, String)> = {
        let mut stmt = conn
            .prepare("SELECT id, app, name, config FROM instances")
            .map_err(sql_error)?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .map_err(sql_error)?;
        rows.collect::<rusqlite::Result<_>>().map_err(sql_error)?
    };
    for (id, app, name, config) in configs {
        let stored: serde_json::Value = serde_json::from_str(&config)
            .map_err(|e| Error::internal(format!("instance {id}: stored config: {e}")))?;
        let app = AppName::from_stored(&app)?;
        let open = ring.open_config(&app, &name, stored.clone())?;
        if ring.config_needs_reseal(&stored) {
            let sealed = ring.seal_config(&app, &name, open)?;
            conn.execute(
                "UPDATE instances SET config = ?2 WHERE id = ?1",
                params![id, sealed.to_string()],
            )
            .map_err(sql_error)?;
            count += 1;
        }
    }
    Ok(count)
}

const INSTANCE_COLUMNS: &str = "id, app, type, name, config, created_ms";

fn instance_from_row(row: &Row<'_>, ring: &Keyring) -> rusqlite::Result<Result<Instance>> {
    let id: i64 = row.get(0)?;
    let app: String = row.get(1)?;
    let kind: String = row.get(2)?;
    let name: String = row.get(3)?;
    let config: String = row.get(4)?;
    let created_ms: i64 = row.get(5)?;
    Ok((|| {
        let config: serde_json::Value = serde_json::from_str(&config)
            .map_err(|e| Error::internal(format!("instance {id}: stored config: {e}")))?;
        let config = ring.open_config(&AppName::from_stored(&app)?, &name, config)?;
        Instance::from_stored(id, &app, &kind, &name, &config, created_ms)
    })())
}

fn get_instance(
    conn: &Connection,
    ring: &Keyring,
    app: &str,
    kind: ServiceType,
    name: &str,
) -> Result<Option<Instance>> {
    conn.prepare_cached(&format!(
        "SELECT {INSTANCE_COLUMNS} FROM instances WHERE app = ?1 AND type = ?2 AND name = ?3"
    ))
    .map_err(sql_error)?
    .query_row(params![app, kind.as_str(), name], |r| {
        instance_from_row(r, ring)
    })
    .optional()
    .map_err(sql_error)?
    .transpose()
}

fn account_usage_from_row(row: &Row<'_>) -> rusqlite::Result<Result<AccountUsage>> {
    let name: String = row.get(0)?;
    let plan: String = row.get(1)?;
    let created_ms: i64 = row.get(2)?;
    let apps: i64 = row.get(3)?;
    Ok((|| {
        Ok(AccountUsage {
            account: Account {
                name: name.parse()?,
                plan: plan.parse().map_err(|e| answers::stored_plan(&name, e))?,
                created_ms,
            },
            apps: usize::try_from(apps).unwrap_or(0),
        })
    })())
}

const ACCOUNT_USAGE: &str = "SELECT a.name, a.plan, a.created_ms, \
     (SELECT COUNT(*) FROM apps WHERE apps.account = a.name) FROM accounts a";

fn get_account(conn: &Connection, name: &str) -> Result<Option<AccountUsage>> {
    conn.prepare_cached(&format!("{ACCOUNT_USAGE} WHERE a.name = ?1"))
        .map_err(sql_error)?
        .query_row([name], account_usage_from_row)
        .optional()
        .map_err(sql_error)?
        .transpose()
}

fn app_from_row(row: &Row<'_>) -> rusqlite::Result<Result<App>> {
    let name: String = row.get(0)?;
    let account: Option<String> = row.get(1)?;
    let created_ms: i64 = row.get(2)?;
    Ok((|| {
        Ok(App {
            name: AppName::from_stored(&name)?,
            account: account.map(|a| a.parse()).transpose()?,
            created_ms,
        })
    })())
}

fn get_app(conn: &Connection, name: &str) -> Result<Option<App>> {
    conn.prepare_cached("SELECT name, account, created_ms FROM apps WHERE name = ?1")
        .map_err(sql_error)?
        .query_row([name], app_from_row)
        .optional()
        .map_err(sql_error)?
        .transpose()
}

const KEY_COLUMNS: &str = "key, app, secret, created_ms, last_used_ms, revoked_ms";

fn key_from_row(row: &Row<'_>, ring: &Keyring) -> rusqlite::Result<Result<AccessKey>> {
    let key: String = row.get(0)?;
    let app: String = row.get(1)?;
    let secret: String = row.get(2)?;
    let created_ms: i64 = row.get(3)?;
    let last_used_ms: Option<i64> = row.get(4)?;
    let revoked_ms: Option<i64> = row.get(5)?;
    Ok((|| {
        let key: KeyId = key.parse()?;
        Ok(AccessKey {
            secret: ring.open_key_secret(&key, &secret)?,
            key,
            app: AppName::from_stored(&app)?,
            created_ms,
            last_used_ms,
            revoked_ms,
        })
    })())
}

fn get_key(conn: &Connection, ring: &Keyring, key: &str) -> Result<Option<AccessKey>> {
    conn.prepare_cached(&format!("SELECT {KEY_COLUMNS} FROM keys WHERE key = ?1"))
        .map_err(sql_error)?
        .query_row([key], |r| key_from_row(r, ring))
        .optional()
        .map_err(sql_error)?
        .transpose()
}

const TOKEN_COLUMNS: &str = "id, account, digest, created_ms, revoked_ms";

fn token_from_row(r: &Row<'_>) -> rusqlite::Result<Result<AccountToken>> {
    let id: String = r.get(0)?;
    let account: String = r.get(1)?;
    let digest: String = r.get(2)?;
    let created_ms: i64 = r.get(3)?;
    let revoked_ms: Option<i64> = r.get(4)?;
    Ok((|| {
        Ok(AccountToken {
            id: id.parse()?,
            account: account.parse()?,
            digest: TokenDigest::from_text(&digest)
                .ok_or_else(|| Error::internal(format!("account token {id}: stored digest")))?,
            created_ms,
            revoked_ms,
        })
    })())
}

fn get_token(conn: &Connection, id: &str) -> Result<Option<AccountToken>> {
    conn.prepare_cached(&format!(
        "SELECT {TOKEN_COLUMNS} FROM account_tokens WHERE id = ?1"
    ))
    .map_err(sql_error)?
    .query_row([id], token_from_row)
    .optional()
    .map_err(sql_error)?
    .transpose()
}

fn collect<T>(rows: impl Iterator<Item = rusqlite::Result<Result<T>>>) -> Result<Vec<T>> {
    let mut out = Vec::new();
    for row in rows {
        out.push(row.map_err(sql_error)??);
    }
    Ok(out)
}

#[async_trait]
impl Registry for SqliteRegistry {
    async fn create_instance(
        &self,
        app: &AppName,
        name: &InstanceName,
        config: InstanceConfig,
    ) -> Result<Instance> {
        self.disk.admit()?;
        let (app, name) = (app.clone(), name.clone());
        let created_ms = self.clock.now_ms();
        let stored = self
            .ring
            .seal_config(&app, name.as_str(), config.to_json())?
            .to_string();
        self.db
            .write(move |conn| {
                let app_exists = conn
                    .prepare_cached("SELECT 1 FROM apps WHERE name = ?1")
                    .and_then(|mut s| s.exists([app.as_str()]))
                    .map_err(sql_error)?;
                if !app_exists {
                    return Err(app_missing(&app));
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
                        stored,
                        created_ms
                    ])
                })
                .map_err(|e| {
                    if is_unique_violation(&e) {
                        answers::instance_exists(kind, &name)
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
        let ring = Arc::clone(&self.ring);
        self.db
            .read(move |conn| get_instance(conn, &ring, app.as_str(), kind, name.as_str()))
            .await
    }

    async fn delete_instance(
        &self,
        app: &AppName,
        kind: ServiceType,
        name: &InstanceName,
    ) -> Result<Instance> {
        let (app, name) = (app.clone(), name.clone());
        let ring = Arc::clone(&self.ring);
        self.db
            .write(move |conn| {
                let inst = get_instance(conn, &ring, app.as_str(), kind, name.as_str())?
                    .ok_or_else(|| answers::instance_missing(kind, &name))?;
                conn.prepare_cached("DELETE FROM instances WHERE id = ?1")
                    .and_then(|mut s| s.execute([inst.id.0]))
                    .map_err(sql_error)?;
                Ok(inst)
            })
            .await
    }

    async fn list_instances(&self, app: Option<&AppName>) -> Result<Vec<Instance>> {
        let app = app.map(|a| a.as_str().to_owned());
        let ring = Arc::clone(&self.ring);
        self.db
            .read(move |conn| {
                let mut stmt = conn
                    .prepare_cached(&format!(
                        "SELECT {INSTANCE_COLUMNS} FROM instances \
                         WHERE ?1 IS NULL OR app = ?1 ORDER BY app, type, name"
                    ))
                    .map_err(sql_error)?;
                let rows = stmt
                    .query_map([app], |r| instance_from_row(r, &ring))
                    .map_err(sql_error)?;
                let mut out = Vec::new();
                for row in rows {
                    out.push(row.map_err(sql_error)??);
                }
                Ok(out)
            })
            .await
    }

    async fn instances_for_sweep(&self) -> Result<(Vec<Instance>, InstanceId)> {
        let ring = Arc::clone(&self.ring);
        self.db
            .read(move |conn| {
                // One read transaction: the listing and the counter from one snapshot.
                let tx = conn.unchecked_transaction().map_err(sql_error)?;
                let mut stmt = tx
                    .prepare(&format!("SELECT {INSTANCE_COLUMNS} FROM instances"))
                    .map_err(sql_error)?;
                let mut all = Vec::new();
                for row in stmt
                    .query_map([], |r| instance_from_row(r, &ring))
                    .map_err(sql_error)?
                {
                    all.push(row.map_err(sql_error)??);
                }
                drop(stmt);
                // AUTOINCREMENT keeps the highest id ever handed out in sqlite_sequence.
                let highest: i64 = tx
                    .query_row(
                        "SELECT COALESCE(MAX(seq), 0) FROM sqlite_sequence WHERE name = 'instances'",
                        [],
                        |r| r.get(0),
                    )
                    .map_err(sql_error)?;
                tx.commit().map_err(sql_error)?;
                Ok((all, InstanceId(highest)))
            })
            .await
    }

    async fn create_account(&self, name: &AccountName, plan: Plan) -> Result<Account> {
        self.disk.admit()?;
        let name = name.clone();
        let created_ms = self.clock.now_ms();
        self.db
            .write(move |conn| {
                conn.prepare_cached(
                    "INSERT INTO accounts (name, plan, created_ms) VALUES (?1, ?2, ?3)",
                )
                .and_then(|mut s| s.execute(params![name.as_str(), plan.as_str(), created_ms]))
                .map_err(|e| {
                    if is_unique_violation(&e) {
                        answers::account_exists(&name)
                    } else {
                        sql_error(e)
                    }
                })?;
                Ok(Account {
                    name,
                    plan,
                    created_ms,
                })
            })
            .await
    }

    async fn get_account(&self, name: &AccountName) -> Result<Option<AccountUsage>> {
        let name = name.clone();
        self.db
            .read(move |conn| get_account(conn, name.as_str()))
            .await
    }

    async fn list_accounts(&self) -> Result<Vec<AccountUsage>> {
        self.db
            .read(|conn| {
                let mut stmt = conn
                    .prepare_cached(&format!("{ACCOUNT_USAGE} ORDER BY a.name"))
                    .map_err(sql_error)?;
                let rows = stmt
                    .query_map([], account_usage_from_row)
                    .map_err(sql_error)?;
                collect(rows)
            })
            .await
    }

    async fn set_plan(&self, name: &AccountName, plan: Plan) -> Result<Account> {
        self.disk.admit()?;
        let name = name.clone();
        self.db
            .write(move |conn| {
                let usage =
                    get_account(conn, name.as_str())?.ok_or_else(|| account_missing(&name))?;
                plan.check_downgrade(&name, usage.apps)?;
                conn.prepare_cached("UPDATE accounts SET plan = ?2 WHERE name = ?1")
                    .and_then(|mut s| s.execute(params![name.as_str(), plan.as_str()]))
                    .map_err(sql_error)?;
                Ok(Account {
                    plan,
                    ..usage.account
                })
            })
            .await
    }

    async fn create_app(&self, name: &AppName, account: &AccountName) -> Result<App> {
        self.disk.admit()?;
        let (name, account) = (name.clone(), account.clone());
        let created_ms = self.clock.now_ms();
        self.db
            .write(move |conn| {
                // Count and insert in one transaction of the single writer: concurrent
                // creations cannot both see room for one more.
                let usage = get_account(conn, account.as_str())?
                    .ok_or_else(|| account_missing(&account))?;
                if get_app(conn, name.as_str())?.is_some() {
                    return Err(answers::app_exists(&name));
                }
                usage.account.plan.check_new_app(&account, usage.apps)?;
                conn.prepare_cached(
                    "INSERT INTO apps (name, account, created_ms) VALUES (?1, ?2, ?3)",
                )
                .and_then(|mut s| s.execute(params![name.as_str(), account.as_str(), created_ms]))
                .map_err(sql_error)?;
                Ok(App {
                    name,
                    account: Some(account),
                    created_ms,
                })
            })
            .await
    }

    async fn get_app(&self, name: &AppName) -> Result<Option<App>> {
        let name = name.clone();
        self.db.read(move |conn| get_app(conn, name.as_str())).await
    }

    async fn list_apps(&self, account: Option<&AccountName>) -> Result<Vec<App>> {
        let account = account.cloned();
        self.db
            .read(move |conn| {
                if let Some(a) = &account
                    && get_account(conn, a.as_str())?.is_none()
                {
                    return Err(account_missing(a));
                }
                let mut stmt = conn
                    .prepare_cached(
                        "SELECT name, account, created_ms FROM apps \
                         WHERE account IS NOT NULL AND (?1 IS NULL OR account = ?1) \
                         ORDER BY name",
                    )
                    .map_err(sql_error)?;
                let rows = stmt
                    .query_map([account.as_ref().map(|a| a.as_str())], app_from_row)
                    .map_err(sql_error)?;
                collect(rows)
            })
            .await
    }

    async fn delete_app(&self, name: &AppName) -> Result<(App, Vec<Instance>)> {
        answers::check_deletable(name)?;
        let name = name.clone();
        let ring = Arc::clone(&self.ring);
        self.db
            .write(move |conn| {
                let app = get_app(conn, name.as_str())?.ok_or_else(|| app_missing(&name))?;
                let instances = {
                    let mut stmt = conn
                        .prepare_cached(&format!(
                            "SELECT {INSTANCE_COLUMNS} FROM instances WHERE app = ?1 \
                             ORDER BY type, name"
                        ))
                        .map_err(sql_error)?;
                    let rows = stmt
                        .query_map([name.as_str()], |r| instance_from_row(r, &ring))
                        .map_err(sql_error)?;
                    collect(rows)?
                };
                // Explicit deletes rather than relying on ON DELETE CASCADE alone, so the
                // outcome does not depend on the connection's foreign-key setting.
                for sql in [
                    "DELETE FROM instances WHERE app = ?1",
                    "DELETE FROM keys WHERE app = ?1",
                    "DELETE FROM apps WHERE name = ?1",
                ] {
                    conn.prepare_cached(sql)
                        .and_then(|mut s| s.execute([name.as_str()]))
                        .map_err(sql_error)?;
                }
                Ok((app, instances))
            })
            .await
    }

    async fn create_key(&self, app: &AppName) -> Result<AccessKey> {
        let key = AccessKey::generate(app, self.clock.now_ms())?;
        self.insert_key(key, answers::key_id_collision).await
    }

    async fn restore_key(&self, key: &AccessKey) -> Result<()> {
        let id = key.key.clone();
        let fresh = AccessKey {
            last_used_ms: None,
            revoked_ms: None,
            ..key.clone()
        };
        self.insert_key(fresh, move || answers::key_exists(&id))
            .await
            .map(|_| ())
    }

    async fn get_key(&self, key: &KeyId) -> Result<Option<AccessKey>> {
        let key = key.clone();
        let ring = Arc::clone(&self.ring);
        self.db
            .read(move |conn| get_key(conn, &ring, key.as_str()))
            .await
    }

    async fn list_keys(&self, app: &AppName) -> Result<Vec<AccessKey>> {
        let app = app.clone();
        let ring = Arc::clone(&self.ring);
        self.db
            .read(move |conn| {
                if get_app(conn, app.as_str())?.is_none() {
                    return Err(app_missing(&app));
                }
                let mut stmt = conn
                    .prepare_cached(&format!(
                        "SELECT {KEY_COLUMNS} FROM keys WHERE app = ?1 ORDER BY created_ms, rowid"
                    ))
                    .map_err(sql_error)?;
                let rows = stmt
                    .query_map([app.as_str()], |r| key_from_row(r, &ring))
                    .map_err(sql_error)?;
                collect(rows)
            })
            .await
    }

    async fn revoke_key(&self, app: &AppName, key: &KeyId) -> Result<AccessKey> {
        let (app, key) = (app.clone(), key.clone());
        let now = self.clock.now_ms();
        let ring = Arc::clone(&self.ring);
        self.db
            .write(move |conn| {
                let found = get_key(conn, &ring, key.as_str())?
                    .filter(|k| k.app == app)
                    .ok_or_else(|| answers::key_missing(&app, &key))?;
                if found.is_revoked() {
                    return Ok(found);
                }
                conn.prepare_cached("UPDATE keys SET revoked_ms = ?2 WHERE key = ?1")
                    .and_then(|mut s| s.execute(params![key.as_str(), now]))
                    .map_err(sql_error)?;
                Ok(AccessKey {
                    revoked_ms: Some(now),
                    ..found
                })
            })
            .await
    }

    async fn record_key_use(&self, uses: &[(KeyId, i64)]) -> Result<()> {
        if uses.is_empty() {
            return Ok(());
        }
        let uses = uses.to_vec();
        self.db
            .write(move |conn| {
                let mut stmt = conn
                    .prepare_cached(
                        "UPDATE keys SET last_used_ms = MAX(COALESCE(last_used_ms, ?2), ?2) \
                         WHERE key = ?1",
                    )
                    .map_err(sql_error)?;
                for (key, at) in &uses {
                    stmt.execute(params![key.as_str(), at]).map_err(sql_error)?;
                }
                Ok(())
            })
            .await
    }

    async fn create_account_token(&self, token: &AccountToken) -> Result<()> {
        self.disk.admit()?;
        let token = token.clone();
        self.db
            .write(move |conn| {
                if get_account(conn, token.account.as_str())?.is_none() {
                    return Err(account_missing(&token.account));
                }
                conn.prepare_cached(
                    "INSERT INTO account_tokens (id, account, digest, created_ms) \
                     VALUES (?1, ?2, ?3, ?4)",
                )
                .and_then(|mut s| {
                    s.execute(params![
                        token.id.as_str(),
                        token.account.as_str(),
                        token.digest.to_text(),
                        token.created_ms
                    ])
                })
                .map_err(|e| {
                    if is_unique_violation(&e) {
                        Error::internal("a generated account token id already exists")
                    } else {
                        sql_error(e)
                    }
                })?;
                Ok(())
            })
            .await
    }

    async fn get_account_token(&self, id: &AccountTokenId) -> Result<Option<AccountToken>> {
        let id = id.clone();
        self.db.read(move |conn| get_token(conn, id.as_str())).await
    }

    async fn list_account_tokens(&self, account: &AccountName) -> Result<Vec<AccountToken>> {
        let account = account.clone();
        self.db
            .read(move |conn| {
                if get_account(conn, account.as_str())?.is_none() {
                    return Err(account_missing(&account));
                }
                let mut stmt = conn
                    .prepare_cached(&format!(
                        "SELECT {TOKEN_COLUMNS} FROM account_tokens WHERE account = ?1 \
                         ORDER BY created_ms, rowid"
                    ))
                    .map_err(sql_error)?;
                let rows = stmt
                    .query_map([account.as_str()], token_from_row)
                    .map_err(sql_error)?;
                collect(rows)
            })
            .await
    }

    async fn revoke_account_token(
        &self,
        account: &AccountName,
        id: &AccountTokenId,
    ) -> Result<AccountToken> {
        let (account, id) = (account.clone(), id.clone());
        let now = self.clock.now_ms();
        self.db
            .write(move |conn| {
                let found = get_token(conn, id.as_str())?
                    .filter(|t| t.account == account)
                    .ok_or_else(|| token_missing(&account, &id))?;
                if found.revoked_ms.is_some() {
                    return Ok(found);
                }
                conn.prepare_cached("UPDATE account_tokens SET revoked_ms = ?2 WHERE id = ?1")
                    .and_then(|mut s| s.execute(params![id.as_str(), now]))
                    .map_err(sql_error)?;
                Ok(AccountToken {
                    revoked_ms: Some(now),
                    ..found
                })
            })
            .await
    }

    /// Calls no listener: the registry lives in the locked data directory, so one process
    /// alone uses it, and that process's handlers update its caches in the same request
    /// that changes the registry. There is no other node to hear from.
    fn subscribe(&self, _listener: Weak<dyn ChangeListener>) {}

    async fn ready(&self) -> Result<()> {
        self.disk.ready()
    }

    async fn close(&self) -> Result<()> {
        self.db.close().await
    }
}
