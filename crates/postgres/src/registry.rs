//! The registry on PostgreSQL: accounts, applications, keys and instances shared by every
//! node on the same database and schema, with a change feed across them.
//!
//! It answers exactly as the SQLite registry does (same rules, same messages; both run
//! `core::conformance::registry`). What differs is concurrency: several nodes write at
//! once, so rules that read before they write lock what they read. Creating an
//! application and changing a plan lock the account row (`FOR UPDATE`), so concurrent
//! creations never exceed the plan; deleting an application locks its row, so an instance
//! created at the same moment either lands before (and is returned) or fails with "does not
//! exist". Instance ids come from an identity column, whose sequence never gives a value
//! twice. Text keys use the `"C"` collation, so listings are ordered byte-wise like
//! SQLite's.

use std::{
    collections::BTreeMap,
    sync::{Arc, Weak},
};

use async_trait::async_trait;
use quintet_core::{
    AppName, Clock, Error, Instance, InstanceConfig, InstanceId, InstanceName, Result, ServiceType,
    account_tokens::{AccountToken, AccountTokenId, token_missing},
    accounts::{Account, AccountName, AccountUsage, App, Plan},
    keyring::{Keyring, TokenDigest},
    keys::{AccessKey, KeyId},
    ports::registry::{
        ChangeListener, Registry, RegistryChange,
        answers::{self, account_missing, app_exists, app_missing},
    },
};
use tokio_postgres::Row;

use crate::{
    database::PgDatabase,
    error::{pg_error, unique_as, violation_as},
    feed::Feed,
};

/// Schema migrations of the registry; append only (see [`PgDatabase::migrate`]).
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE quintet_accounts (
    name        TEXT COLLATE "C" PRIMARY KEY,
    plan        TEXT NOT NULL,
    created_ms  BIGINT NOT NULL
);

CREATE TABLE quintet_apps (
    name        TEXT COLLATE "C" PRIMARY KEY,
    account     TEXT COLLATE "C" REFERENCES quintet_accounts(name) ON DELETE RESTRICT,
    created_ms  BIGINT NOT NULL
);
CREATE INDEX quintet_apps_by_account ON quintet_apps(account);

CREATE TABLE quintet_keys (
    key           TEXT COLLATE "C" PRIMARY KEY,
    app           TEXT COLLATE "C" NOT NULL REFERENCES quintet_apps(name) ON DELETE CASCADE,
    secret        TEXT NOT NULL,
    created_ms    BIGINT NOT NULL,
    last_used_ms  BIGINT,
    revoked_ms    BIGINT,
    seq           BIGINT GENERATED ALWAYS AS IDENTITY
);
CREATE INDEX quintet_keys_by_app ON quintet_keys(app);

CREATE TABLE quintet_instances (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    app         TEXT COLLATE "C" NOT NULL REFERENCES quintet_apps(name) ON DELETE CASCADE,
    type        TEXT COLLATE "C" NOT NULL,
    name        TEXT COLLATE "C" NOT NULL,
    config      JSONB NOT NULL,
    created_ms  BIGINT NOT NULL,
    UNIQUE (app, type, name)
);

INSERT INTO quintet_apps (name, account, created_ms) VALUES ('_domain', NULL, 0);

CREATE TABLE quintet_registry (
    single      BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (single),
    id          TEXT NOT NULL,
    created_ms  BIGINT NOT NULL
);
CREATE TABLE quintet_nodes (
    id       TEXT COLLATE "C" PRIMARY KEY,
    seen_ms  BIGINT NOT NULL
);

INSERT INTO quintet_registry (id, created_ms) VALUES (
    md5(random()::text || clock_timestamp()::text),
    (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint
);
"#,
    r#"
CREATE TABLE quintet_account_tokens (
    id          TEXT COLLATE "C" PRIMARY KEY,
    account     TEXT COLLATE "C" NOT NULL REFERENCES quintet_accounts(name) ON DELETE CASCADE,
    digest      TEXT NOT NULL,
    created_ms  BIGINT NOT NULL,
    revoked_ms  BIGINT,
    seq         BIGINT GENERATED ALWAYS AS IDENTITY
);
CREATE INDEX quintet_account_tokens_by_account ON quintet_account_tokens(account);
"#,
];

const TOKEN_COLUMNS: &str = "id, account, digest, created_ms, revoked_ms";

fn token_from_row(r: &Row) -> Result<AccountToken> {
    let id: String = r.try_get(0).map_err(pg_error)?;
    let account: String = r.try_get(1).map_err(pg_error)?;
    let digest: String = r.try_get(2).map_err(pg_error)?;
    Ok(AccountToken {
        digest: TokenDigest::from_text(&digest)
            .ok_or_else(|| Error::internal(format!("account token {id}: stored digest")))?,
        id: id.parse()?,
        account: account.parse()?,
        created_ms: r.try_get(3).map_err(pg_error)?,
        revoked_ms: r.try_get(4).map_err(pg_error)?,
    })
}

/// The registry kept in PostgreSQL.
#[derive(Debug)]
pub struct PgRegistry {
    db: PgDatabase,
    clock: Arc<dyn Clock>,
    feed: Feed,
    id: String,
    ring: Arc<Keyring>,
}

impl PgRegistry {
    /// Bring the registry tables of `db`'s schema up to date and start listening for
    /// changes made by other nodes. Access-key and queue secrets are sealed with `ring`;
    /// those stored in plaintext or sealed with a previous key are resealed now, and a
    /// secret no key of the ring opens (another node's master key) fails the start.
    pub async fn open(db: PgDatabase, clock: Arc<dyn Clock>, ring: Arc<Keyring>) -> Result<Self> {
        db.migrate("registry", MIGRATIONS).await?;
        let resealed = reseal(&db, &ring).await?;
        if resealed > 0 {
            tracing::info!(
                secrets = resealed,
                "sealed stored secrets with the current master key"
            );
        }
        let id: String = db
            .client()
            .await?
            .query_one("SELECT id FROM quintet_registry", &[])
            .await
            .map_err(pg_error)?
            .try_get(0)
            .map_err(pg_error)?;
        let feed = Feed::start(&db).await?;
        Ok(Self {
            db,
            clock,
            feed,
            id,
            ring,
        })
    }

    /// The database it lives in.
    pub fn database(&self) -> &PgDatabase {
        &self.db
    }

    /// A random id given to this registry when its tables were created: the same for
    /// every node on it, different for a registry created anew (even at the same URL).
    pub fn id(&self) -> &str {
        &self.id
    }
}

const INSTANCE_COLUMNS: &str = "id, app, type, name, config, created_ms";

/// Reseal every stored secret that needs it, in one transaction with the rows locked; see
/// [`PgRegistry::open`]. Returns how many were rewritten.
async fn reseal(db: &PgDatabase, ring: &Keyring) -> Result<usize> {
    let mut client = db.client().await?;
    let tx = client.transaction().await.map_err(pg_error)?;
    let mut count = 0;
    for row in tx
        .query("SELECT key, secret FROM quintet_keys FOR UPDATE", &[])
        .await
        .map_err(pg_error)?
    {
        let key: String = row.try_get(0).map_err(pg_error)?;
        let stored: String = row.try_get(1).map_err(pg_error)?;
        let id: KeyId = key.parse()?;
        let secret = ring.open_key_secret(&id, &stored)?;
        if ring.needs_reseal(&stored) {
            let sealed = ring.seal_key_secret(&id, &secret)?;
            tx.execute(
                "UPDATE quintet_keys SET secret = $2 WHERE key = $1",
                &[&key, &sealed],
            )
            .await
            .map_err(pg_error)?;
            count += 1;
        }
    }
    for row in tx
        .query(
            "SELECT id, app, name, config FROM quintet_instances FOR UPDATE",
            &[],
        )
        .await
        .map_err(pg_error)?
    {
        let id: i64 = row.try_get(0).map_err(pg_error)?;
        let app: String = row.try_get(1).map_err(pg_error)?;
        let name: String = row.try_get(2).map_err(pg_error)?;
        let stored: serde_json::Value = row.try_get(3).map_err(pg_error)?;
        let app = AppName::from_stored(&app)?;
        let open = ring.open_config(&app, &name, stored.clone())?;
        if ring.config_needs_reseal(&stored) {
            let sealed = ring.seal_config(&app, &name, open)?;
            tx.execute(
                "UPDATE quintet_instances SET config = $2 WHERE id = $1",
                &[&id, &sealed],
            )
            .await
            .map_err(pg_error)?;
            count += 1;
        }
    }
    tx.commit().await.map_err(pg_error)?;
    Ok(count)
}

fn instance_from_row(row: &Row, ring: &Keyring) -> Result<Instance> {
    let id: i64 = row.try_get(0).map_err(pg_error)?;
    let app: String = row.try_get(1).map_err(pg_error)?;
    let kind: String = row.try_get(2).map_err(pg_error)?;
    let name: String = row.try_get(3).map_err(pg_error)?;
    let config: serde_json::Value = row.try_get(4).map_err(pg_error)?;
    let created_ms: i64 = row.try_get(5).map_err(pg_error)?;
    let config = ring.open_config(&AppName::from_stored(&app)?, &name, config)?;
    Instance::from_stored(id, &app, &kind, &name, &config, created_ms)
}

const ACCOUNT_USAGE: &str = "SELECT a.name, a.plan, a.created_ms, \
     (SELECT COUNT(*) FROM quintet_apps WHERE quintet_apps.account = a.name) \
     FROM quintet_accounts a";

fn account_usage_from_row(row: &Row) -> Result<AccountUsage> {
    let name: String = row.try_get(0).map_err(pg_error)?;
    let plan: String = row.try_get(1).map_err(pg_error)?;
    let apps: i64 = row.try_get(3).map_err(pg_error)?;
    Ok(AccountUsage {
        account: Account {
            plan: plan.parse().map_err(|e| answers::stored_plan(&name, e))?,
            name: name.parse()?,
            created_ms: row.try_get(2).map_err(pg_error)?,
        },
        apps: usize::try_from(apps).unwrap_or(0),
    })
}

fn app_from_row(row: &Row) -> Result<App> {
    let name: String = row.try_get(0).map_err(pg_error)?;
    let account: Option<String> = row.try_get(1).map_err(pg_error)?;
    Ok(App {
        name: AppName::from_stored(&name)?,
        account: account.map(|a| a.parse()).transpose()?,
        created_ms: row.try_get(2).map_err(pg_error)?,
    })
}

const KEY_COLUMNS: &str = "key, app, secret, created_ms, last_used_ms, revoked_ms";

fn key_from_row(row: &Row, ring: &Keyring) -> Result<AccessKey> {
    let key: String = row.try_get(0).map_err(pg_error)?;
    let app: String = row.try_get(1).map_err(pg_error)?;
    let secret: String = row.try_get(2).map_err(pg_error)?;
    let key: KeyId = key.parse()?;
    Ok(AccessKey {
        secret: ring.open_key_secret(&key, &secret)?,
        key,
        app: AppName::from_stored(&app)?,
        created_ms: row.try_get(3).map_err(pg_error)?,
        last_used_ms: row.try_get(4).map_err(pg_error)?,
        revoked_ms: row.try_get(5).map_err(pg_error)?,
    })
}

/// Run `$body` (which uses `$tx`) in a transaction on a pooled connection and commit; an
/// early return rolls back.
macro_rules! in_transaction {
    ($db:expr, |$tx:ident| $body:block) => {{
        let mut client = $db.client().await?;
        let $tx = client.transaction().await.map_err(pg_error)?;
        let value = $body;
        $tx.commit().await.map_err(pg_error)?;
        value
    }};
}

/// Keys, written with `in_transaction!` (defined above).
impl PgRegistry {
    /// Record `key` (sealing its secret); `taken` answers when its id exists.
    async fn insert_key(
        &self,
        key: &AccessKey,
        taken: impl Fn() -> quintet_core::Error + Send + Sync,
    ) -> Result<()> {
        let app = &key.app;
        answers::check_may_have_keys(app)?;
        let stored = self.ring.seal_key_secret(&key.key, &key.secret)?;
        let ticket = in_transaction!(self.db, |tx| {
            tx.execute(
                "INSERT INTO quintet_keys (key, app, secret, created_ms) VALUES ($1, $2, $3, $4)",
                &[
                    &key.key.as_str(),
                    &key.app.as_str(),
                    &stored,
                    &key.created_ms,
                ],
            )
            .await
            .map_err(|e| violation_as(e, taken, || app_missing(app)))?;
            let change = RegistryChange::KeyCreated {
                app: app.clone(),
                key: key.key.clone(),
            };
            self.feed.publish(&tx, &change).await?
        });
        ticket.delivered().await;
        Ok(())
    }
}

#[async_trait]
impl Registry for PgRegistry {
    async fn create_instance(
        &self,
        app: &AppName,
        name: &InstanceName,
        config: InstanceConfig,
    ) -> Result<Instance> {
        let kind = config.kind();
        let created_ms = self.clock.now_ms();
        let stored = self
            .ring
            .seal_config(app, name.as_str(), config.to_json())?;
        let (instance, ticket) = in_transaction!(self.db, |tx| {
            let row = tx
                .query_one(
                    "INSERT INTO quintet_instances (app, type, name, config, created_ms) \
                     VALUES ($1, $2, $3, $4, $5) RETURNING id",
                    &[
                        &app.as_str(),
                        &kind.as_str(),
                        &name.as_str(),
                        &stored,
                        &created_ms,
                    ],
                )
                .await
                .map_err(|e| {
                    violation_as(
                        e,
                        || answers::instance_exists(kind, name),
                        || app_missing(app),
                    )
                })?;
            let instance = Instance {
                id: InstanceId(row.try_get(0).map_err(pg_error)?),
                app: app.clone(),
                name: name.clone(),
                config,
                created_ms,
            };
            let change = RegistryChange::InstanceCreated {
                app: app.clone(),
                kind,
                name: name.clone(),
                id: instance.id,
            };
            let ticket = self.feed.publish(&tx, &change).await?;
            (instance, ticket)
        });
        ticket.delivered().await;
        Ok(instance)
    }

    async fn get_instance(
        &self,
        app: &AppName,
        kind: ServiceType,
        name: &InstanceName,
    ) -> Result<Option<Instance>> {
        let client = self.db.client().await?;
        let stmt = client
            .prepare_cached(&format!(
                "SELECT {INSTANCE_COLUMNS} FROM quintet_instances \
                 WHERE app = $1 AND type = $2 AND name = $3"
            ))
            .await
            .map_err(pg_error)?;
        client
            .query_opt(&stmt, &[&app.as_str(), &kind.as_str(), &name.as_str()])
            .await
            .map_err(pg_error)?
            .as_ref()
            .map(|r| instance_from_row(r, &self.ring))
            .transpose()
    }

    async fn delete_instance(
        &self,
        app: &AppName,
        kind: ServiceType,
        name: &InstanceName,
    ) -> Result<Instance> {
        let (instance, ticket) = in_transaction!(self.db, |tx| {
            let row = tx
                .query_opt(
                    &format!(
                        "DELETE FROM quintet_instances WHERE app = $1 AND type = $2 AND name = $3 \
                         RETURNING {INSTANCE_COLUMNS}"
                    ),
                    &[&app.as_str(), &kind.as_str(), &name.as_str()],
                )
                .await
                .map_err(pg_error)?
                .ok_or_else(|| answers::instance_missing(kind, name))?;
            let instance = instance_from_row(&row, &self.ring)?;
            let change = RegistryChange::InstanceDeleted {
                app: app.clone(),
                kind,
                name: name.clone(),
                id: instance.id,
            };
            let ticket = self.feed.publish(&tx, &change).await?;
            (instance, ticket)
        });
        ticket.delivered().await;
        Ok(instance)
    }

    async fn list_instances(&self, app: Option<&AppName>) -> Result<Vec<Instance>> {
        let client = self.db.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT {INSTANCE_COLUMNS} FROM quintet_instances \
                     WHERE $1::text IS NULL OR app = $1 ORDER BY app, type, name"
                ),
                &[&app.map(AppName::as_str)],
            )
            .await
            .map_err(pg_error)?;
        rows.iter()
            .map(|r| instance_from_row(r, &self.ring))
            .collect()
    }

    async fn instances_for_sweep(&self) -> Result<(Vec<Instance>, InstanceId)> {
        let mut client = self.db.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        // SHARE waits for every transaction inserting or deleting instances to finish and
        // keeps new ones out until this one ends: every id the sequence handed out so far
        // is then either listed or gone for good.
        tx.batch_execute("LOCK TABLE quintet_instances IN SHARE MODE")
            .await
            .map_err(pg_error)?;
        let rows = tx
            .query(
                &format!("SELECT {INSTANCE_COLUMNS} FROM quintet_instances"),
                &[],
            )
            .await
            .map_err(pg_error)?;
        let all = rows
            .iter()
            .map(|r| instance_from_row(r, &self.ring))
            .collect::<Result<Vec<_>>>()?;
        let highest: Option<i64> = tx
            .query_one(
                "SELECT pg_sequence_last_value(\
                 pg_get_serial_sequence('quintet_instances', 'id')::regclass)",
                &[],
            )
            .await
            .map_err(pg_error)?
            .get(0);
        tx.commit().await.map_err(pg_error)?;
        Ok((all, InstanceId(highest.unwrap_or(0))))
    }

    async fn create_account(&self, name: &AccountName, plan: Plan) -> Result<Account> {
        let created_ms = self.clock.now_ms();
        self.db
            .client()
            .await?
            .execute(
                "INSERT INTO quintet_accounts (name, plan, created_ms) VALUES ($1, $2, $3)",
                &[&name.as_str(), &plan.as_str(), &created_ms],
            )
            .await
            .map_err(|e| unique_as(e, || answers::account_exists(name).public_message()))?;
        Ok(Account {
            name: name.clone(),
            plan,
            created_ms,
        })
    }

    async fn get_account(&self, name: &AccountName) -> Result<Option<AccountUsage>> {
        self.db
            .client()
            .await?
            .query_opt(
                &format!("{ACCOUNT_USAGE} WHERE a.name = $1"),
                &[&name.as_str()],
            )
            .await
            .map_err(pg_error)?
            .as_ref()
            .map(account_usage_from_row)
            .transpose()
    }

    async fn list_accounts(&self) -> Result<Vec<AccountUsage>> {
        let rows = self
            .db
            .client()
            .await?
            .query(&format!("{ACCOUNT_USAGE} ORDER BY a.name"), &[])
            .await
            .map_err(pg_error)?;
        rows.iter().map(account_usage_from_row).collect()
    }

    async fn set_plan(&self, name: &AccountName, plan: Plan) -> Result<Account> {
        Ok(in_transaction!(self.db, |tx| {
            // The row lock orders this after (or before) any application being created in
            // the account, so the count below stays true until the commit.
            let locked = tx
                .query_opt(
                    "SELECT 1 FROM quintet_accounts WHERE name = $1 FOR UPDATE",
                    &[&name.as_str()],
                )
                .await
                .map_err(pg_error)?;
            if locked.is_none() {
                return Err(account_missing(name));
            }
            let usage = tx
                .query_one(
                    &format!("{ACCOUNT_USAGE} WHERE a.name = $1"),
                    &[&name.as_str()],
                )
                .await
                .map_err(pg_error)?;
            let usage = account_usage_from_row(&usage)?;
            plan.check_downgrade(name, usage.apps)?;
            tx.execute(
                "UPDATE quintet_accounts SET plan = $2 WHERE name = $1",
                &[&name.as_str(), &plan.as_str()],
            )
            .await
            .map_err(pg_error)?;
            Account {
                plan,
                ..usage.account
            }
        }))
    }

    async fn create_app(&self, name: &AppName, account: &AccountName) -> Result<App> {
        let created_ms = self.clock.now_ms();
        Ok(in_transaction!(self.db, |tx| {
            // Lock the account, then count and insert: concurrent creations in one account
            // take turns, so they cannot both see room for one more.
            let plan: Option<String> = tx
                .query_opt(
                    "SELECT plan FROM quintet_accounts WHERE name = $1 FOR UPDATE",
                    &[&account.as_str()],
                )
                .await
                .map_err(pg_error)?
                .map(|row| row.try_get(0))
                .transpose()
                .map_err(pg_error)?;
            let Some(plan) = plan else {
                return Err(account_missing(account));
            };
            let plan: Plan = plan.parse().map_err(|e| answers::stored_plan(account, e))?;
            let taken = tx
                .query_opt(
                    "SELECT 1 FROM quintet_apps WHERE name = $1",
                    &[&name.as_str()],
                )
                .await
                .map_err(pg_error)?;
            if taken.is_some() {
                return Err(app_exists(name));
            }
            let count: i64 = tx
                .query_one(
                    "SELECT COUNT(*) FROM quintet_apps WHERE account = $1",
                    &[&account.as_str()],
                )
                .await
                .map_err(pg_error)?
                .try_get(0)
                .map_err(pg_error)?;
            plan.check_new_app(account, usize::try_from(count).unwrap_or(usize::MAX))?;
            tx.execute(
                "INSERT INTO quintet_apps (name, account, created_ms) VALUES ($1, $2, $3)",
                &[&name.as_str(), &account.as_str(), &created_ms],
            )
            .await
            .map_err(|e| unique_as(e, || app_exists(name).public_message()))?;
            App {
                name: name.clone(),
                account: Some(account.clone()),
                created_ms,
            }
        }))
    }

    async fn get_app(&self, name: &AppName) -> Result<Option<App>> {
        self.db
            .client()
            .await?
            .query_opt(
                "SELECT name, account, created_ms FROM quintet_apps WHERE name = $1",
                &[&name.as_str()],
            )
            .await
            .map_err(pg_error)?
            .as_ref()
            .map(app_from_row)
            .transpose()
    }

    async fn list_apps(&self, account: Option<&AccountName>) -> Result<Vec<App>> {
        let client = self.db.client().await?;
        if let Some(a) = account {
            let exists = client
                .query_opt(
                    "SELECT 1 FROM quintet_accounts WHERE name = $1",
                    &[&a.as_str()],
                )
                .await
                .map_err(pg_error)?;
            if exists.is_none() {
                return Err(account_missing(a));
            }
        }
        let rows = client
            .query(
                "SELECT name, account, created_ms FROM quintet_apps \
                 WHERE account IS NOT NULL AND ($1::text IS NULL OR account = $1) \
                 ORDER BY name",
                &[&account.map(AccountName::as_str)],
            )
            .await
            .map_err(pg_error)?;
        rows.iter().map(app_from_row).collect()
    }

    async fn delete_app(&self, name: &AppName) -> Result<(App, Vec<Instance>)> {
        answers::check_deletable(name)?;
        let (deleted, ticket) = in_transaction!(self.db, |tx| {
            // The row lock makes instances and keys being created for the application wait
            // for this transaction, then fail: nothing is left behind.
            let app = tx
                .query_opt(
                    "SELECT name, account, created_ms FROM quintet_apps WHERE name = $1 FOR UPDATE",
                    &[&name.as_str()],
                )
                .await
                .map_err(pg_error)?
                .ok_or_else(|| app_missing(name))?;
            let app = app_from_row(&app)?;
            let instances = tx
                .query(
                    &format!(
                        "WITH gone AS (DELETE FROM quintet_instances WHERE app = $1 \
                         RETURNING {INSTANCE_COLUMNS}) \
                         SELECT {INSTANCE_COLUMNS} FROM gone ORDER BY type, name"
                    ),
                    &[&name.as_str()],
                )
                .await
                .map_err(pg_error)?
                .iter()
                .map(|r| instance_from_row(r, &self.ring))
                .collect::<Result<Vec<_>>>()?;
            for sql in [
                "DELETE FROM quintet_keys WHERE app = $1",
                "DELETE FROM quintet_apps WHERE name = $1",
            ] {
                tx.execute(sql, &[&name.as_str()]).await.map_err(pg_error)?;
            }
            let change = RegistryChange::AppDeleted { app: name.clone() };
            let ticket = self.feed.publish(&tx, &change).await?;
            ((app, instances), ticket)
        });
        ticket.delivered().await;
        Ok(deleted)
    }

    async fn create_key(&self, app: &AppName) -> Result<AccessKey> {
        let key = AccessKey::generate(app, self.clock.now_ms())?;
        self.insert_key(&key, answers::key_id_collision).await?;
        Ok(key)
    }

    async fn restore_key(&self, key: &AccessKey) -> Result<()> {
        let id = key.key.clone();
        self.insert_key(key, || answers::key_exists(&id)).await
    }

    async fn get_key(&self, key: &KeyId) -> Result<Option<AccessKey>> {
        let client = self.db.client().await?;
        let stmt = client
            .prepare_cached(&format!(
                "SELECT {KEY_COLUMNS} FROM quintet_keys WHERE key = $1"
            ))
            .await
            .map_err(pg_error)?;
        client
            .query_opt(&stmt, &[&key.as_str()])
            .await
            .map_err(pg_error)?
            .as_ref()
            .map(|r| key_from_row(r, &self.ring))
            .transpose()
    }

    async fn list_keys(&self, app: &AppName) -> Result<Vec<AccessKey>> {
        let client = self.db.client().await?;
        let exists = client
            .query_opt(
                "SELECT 1 FROM quintet_apps WHERE name = $1",
                &[&app.as_str()],
            )
            .await
            .map_err(pg_error)?;
        if exists.is_none() {
            return Err(app_missing(app));
        }
        let rows = client
            .query(
                &format!(
                    "SELECT {KEY_COLUMNS} FROM quintet_keys WHERE app = $1 ORDER BY created_ms, seq"
                ),
                &[&app.as_str()],
            )
            .await
            .map_err(pg_error)?;
        rows.iter().map(|r| key_from_row(r, &self.ring)).collect()
    }

    async fn revoke_key(&self, app: &AppName, key: &KeyId) -> Result<AccessKey> {
        let now = self.clock.now_ms();
        let (revoked, ticket) = in_transaction!(self.db, |tx| {
            let found = tx
                .query_opt(
                    &format!(
                        "SELECT {KEY_COLUMNS} FROM quintet_keys WHERE key = $1 AND app = $2 \
                         FOR UPDATE"
                    ),
                    &[&key.as_str(), &app.as_str()],
                )
                .await
                .map_err(pg_error)?
                .ok_or_else(|| answers::key_missing(app, key))?;
            let found = key_from_row(&found, &self.ring)?;
            if found.is_revoked() {
                (found, None)
            } else {
                tx.execute(
                    "UPDATE quintet_keys SET revoked_ms = $2 WHERE key = $1",
                    &[&key.as_str(), &now],
                )
                .await
                .map_err(pg_error)?;
                let change = RegistryChange::KeyRevoked {
                    app: app.clone(),
                    key: key.clone(),
                };
                let ticket = self.feed.publish(&tx, &change).await?;
                (
                    AccessKey {
                        revoked_ms: Some(now),
                        ..found
                    },
                    Some(ticket),
                )
            }
        });
        if let Some(ticket) = ticket {
            ticket.delivered().await;
        }
        Ok(revoked)
    }

    async fn create_account_token(&self, token: &AccountToken) -> Result<()> {
        let client = self.db.client().await?;
        client
            .execute(
                "INSERT INTO quintet_account_tokens (id, account, digest, created_ms) \
                 VALUES ($1, $2, $3, $4)",
                &[
                    &token.id.as_str(),
                    &token.account.as_str(),
                    &token.digest.to_text(),
                    &token.created_ms,
                ],
            )
            .await
            .map_err(|e| {
                violation_as(
                    e,
                    || Error::internal("a generated account token id already exists"),
                    || account_missing(&token.account),
                )
            })?;
        Ok(())
    }

    async fn get_account_token(&self, id: &AccountTokenId) -> Result<Option<AccountToken>> {
        let client = self.db.client().await?;
        client
            .query_opt(
                &format!("SELECT {TOKEN_COLUMNS} FROM quintet_account_tokens WHERE id = $1"),
                &[&id.as_str()],
            )
            .await
            .map_err(pg_error)?
            .as_ref()
            .map(token_from_row)
            .transpose()
    }

    async fn list_account_tokens(&self, account: &AccountName) -> Result<Vec<AccountToken>> {
        let client = self.db.client().await?;
        let exists = client
            .query_opt(
                "SELECT 1 FROM quintet_accounts WHERE name = $1",
                &[&account.as_str()],
            )
            .await
            .map_err(pg_error)?;
        if exists.is_none() {
            return Err(account_missing(account));
        }
        let rows = client
            .query(
                &format!(
                    "SELECT {TOKEN_COLUMNS} FROM quintet_account_tokens WHERE account = $1 \
                     ORDER BY created_ms, seq"
                ),
                &[&account.as_str()],
            )
            .await
            .map_err(pg_error)?;
        rows.iter().map(token_from_row).collect()
    }

    async fn revoke_account_token(
        &self,
        account: &AccountName,
        id: &AccountTokenId,
    ) -> Result<AccountToken> {
        let now = self.clock.now_ms();
        let client = self.db.client().await?;
        // One statement: the first revocation time wins when two nodes revoke at once.
        let row = client
            .query_opt(
                &format!(
                    "UPDATE quintet_account_tokens SET revoked_ms = COALESCE(revoked_ms, $3) \
                     WHERE id = $1 AND account = $2 RETURNING {TOKEN_COLUMNS}"
                ),
                &[&id.as_str(), &account.as_str(), &now],
            )
            .await
            .map_err(pg_error)?
            .ok_or_else(|| token_missing(account, id))?;
        token_from_row(&row)
    }

    async fn record_key_use(&self, uses: &[(KeyId, i64)]) -> Result<()> {
        // The latest time per key, in key order: every node locks rows in the same order,
        // so concurrent flushes of the same keys queue instead of deadlocking.
        let mut latest: BTreeMap<&str, i64> = BTreeMap::new();
        for (key, at) in uses {
            let slot = latest.entry(key.as_str()).or_insert(*at);
            *slot = (*slot).max(*at);
        }
        if latest.is_empty() {
            return Ok(());
        }
        let keys: Vec<&str> = latest.keys().copied().collect();
        let times: Vec<i64> = latest.values().copied().collect();
        in_transaction!(self.db, |tx| {
            tx.execute(
                "SELECT 1 FROM quintet_keys WHERE key = ANY($1) ORDER BY key FOR UPDATE",
                &[&keys],
            )
            .await
            .map_err(pg_error)?;
            tx.execute(
                "UPDATE quintet_keys k \
                 SET last_used_ms = GREATEST(COALESCE(k.last_used_ms, u.at), u.at) \
                 FROM unnest($1::text[], $2::bigint[]) AS u(key, at) WHERE k.key = u.key",
                &[&keys, &times],
            )
            .await
            .map_err(pg_error)?;
        });
        Ok(())
    }

    fn subscribe(&self, listener: Weak<dyn ChangeListener>) {
        self.feed.subscribe(listener);
    }

    fn caches_current(&self) -> bool {
        self.feed.caches_current()
    }

    async fn ready(&self) -> Result<()> {
        self.db.ping().await
    }

    async fn close(&self) -> Result<()> {
        self.feed.close().await;
        self.db.close();
        Ok(())
    }
}
