//! One PostgreSQL database (and schema) shared by the adapters of a node: a connection
//! pool, the schema everything lives in, and versioned migrations.
//!
//! Every call of every adapter takes its connection through [`PgDatabase::client`], which
//! is where the node's circuit breaker for PostgreSQL sits ([`quintet_core::breaker`]):
//! when a connection cannot be opened (refused, or not within the connect timeout) the
//! breaker opens, calls fail at once with [`Error::Unavailable`] (503), and a background
//! probe closes it as soon as PostgreSQL answers again. A pool that is only busy does not
//! open it.

use std::{fmt, sync::Arc, time::Duration};

use deadpool_postgres::{
    Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod, Runtime, TimeoutType,
};
use quintet_core::{
    Error, Result,
    breaker::{self, Breaker},
    ports::PoolUsage,
};
use tokio_postgres::{Client, Connection, NoTls, Socket, error::SqlState, tls::NoTlsStream};

use crate::{
    config::{POOL_WAIT, PgConfig},
    error::{pg_error, pool_error},
};

/// Longest a probe of an open breaker waits for its answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// A pooled connection to the database.
pub type PgClient = Object;

/// A connection pool over one database and schema, cheap to clone; every adapter of a
/// node that uses the same URL shares one.
#[derive(Clone)]
pub struct PgDatabase {
    pool: Pool,
    client_config: tokio_postgres::Config,
    schema: String,
    shown_url: String,
    breaker: Arc<Breaker>,
}

impl fmt::Debug for PgDatabase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgDatabase")
            .field("url", &self.shown_url)
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl PgDatabase {
    /// Open a pool per `config` and check that the database answers and that its
    /// `search_path` names an existing schema.
    pub async fn connect(config: &PgConfig) -> Result<Self> {
        let client_config = config.client_config()?;
        let manager = Manager::from_config(
            client_config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(config.pool_size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(POOL_WAIT))
            .create_timeout(Some(config.connect_timeout))
            .recycle_timeout(Some(config.connect_timeout))
            .build()
            .map_err(|e| Error::internal(format!("PostgreSQL pool: {e}")))?;
        let shown_url = config.redacted_url();
        // At start-up the cause goes into the message: the operator reads it, no client.
        let client = pool.get().await.map_err(|e| {
            let cause = match &e {
                deadpool_postgres::PoolError::Backend(e) => crate::error::detail(e),
                other => other.to_string(),
            };
            Error::Unavailable(format!(
                "cannot connect to PostgreSQL at {shown_url}: {cause}"
            ))
        })?;
        let schema: Option<String> = client
            .query_one("SELECT current_schema()::text", &[])
            .await
            .map_err(pg_error)?
            .get(0);
        let Some(schema) = schema else {
            return Err(Error::invalid(format!(
                "the search_path of {shown_url} names no schema that exists: create the schema \
                 (CREATE SCHEMA name) or set options=-c search_path=<schema> in the URL"
            )));
        };
        drop(client);
        let breaker = Arc::new(Breaker::new(format!("PostgreSQL at {shown_url}")));
        Ok(Self {
            pool,
            client_config,
            schema,
            shown_url,
            breaker,
        })
    }

    /// A connection from the pool; [`Error::Unavailable`] at once while PostgreSQL is
    /// known to be unreachable.
    pub async fn client(&self) -> Result<PgClient> {
        self.breaker.check()?;
        match self.pool.get().await {
            Ok(client) => Ok(client),
            Err(e) => {
                if unreachable(&e) {
                    self.trip(&e);
                }
                Err(pool_error(e))
            }
        }
    }

    /// How the pool's connections are used now (the adapters sharing this database report
    /// the same pool).
    pub fn pool_usage(&self) -> PoolUsage {
        let status = self.pool.status();
        let n = |v: usize| u64::try_from(v).unwrap_or(u64::MAX);
        PoolUsage {
            engine: "postgres",
            max: n(status.max_size),
            open: n(status.size),
            in_use: Some(n(status.size.saturating_sub(status.available))),
            waiting: Some(n(status.waiting)),
        }
    }

    /// The breaker of this node's calls to PostgreSQL.
    pub fn breaker(&self) -> &Breaker {
        &self.breaker
    }

    /// Whether PostgreSQL answers now: a connection and `SELECT 1`, bounded in time.
    pub async fn ping(&self) -> Result<()> {
        let answered = tokio::time::timeout(PROBE_TIMEOUT, async {
            let client = self.client().await?;
            client.simple_query("SELECT 1").await.map_err(pg_error)?;
            Ok(())
        })
        .await;
        match answered {
            Ok(outcome) => outcome,
            Err(_) => Err(Error::Unavailable(format!(
                "{} did not answer within {PROBE_TIMEOUT:?}",
                self.breaker.engine()
            ))),
        }
    }

    /// Open the breaker after `e`, and probe until PostgreSQL answers again.
    fn trip(&self, e: &PoolError) {
        if !self.breaker.trip(e) {
            return;
        }
        tracing::error!(
            url = %self.shown_url,
            error = %e,
            "PostgreSQL is unreachable: calls that need it answer 503 until it answers again"
        );
        let db = self.clone();
        tokio::spawn(async move {
            let probe = || async {
                let client = db.pool.get().await.map_err(pool_error)?;
                let answer = client.simple_query("SELECT 1");
                match tokio::time::timeout(PROBE_TIMEOUT, answer).await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(e)) => Err(pg_error(e)),
                    Err(_) => Err(Error::Unavailable("probe timed out".into())),
                }
            };
            breaker::recover(&db.breaker, probe, tokio::time::sleep, |probing| {
                if !probing {
                    tracing::info!(url = %db.shown_url, "PostgreSQL answers again");
                }
            })
            .await;
        });
    }

    /// The schema the tables live in (the connection's `current_schema()`).
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// Remove every row of instance `id` in one transaction: its row of `instances` (the
    /// lock its writers take) first, then its rows of `tables`, each keyed by `instance`.
    pub(crate) async fn drop_instance_rows(
        &self,
        instances: &str,
        tables: &[&str],
        id: i64,
    ) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        for table in std::iter::once(&instances).chain(tables) {
            tx.execute(&format!("DELETE FROM {table} WHERE instance = $1"), &[&id])
                .await
                .map_err(pg_error)?;
        }
        tx.commit().await.map_err(pg_error)
    }

    /// The URL without its password, for logs and messages.
    pub fn shown_url(&self) -> &str {
        &self.shown_url
    }

    /// A connection of its own, outside the pool, for a session that must outlive any one
    /// request (such as `LISTEN`). `role` is shown in `pg_stat_activity` as
    /// `application_name` `quintet-<role> <schema>`. The caller polls the [`Connection`].
    pub async fn dedicated(&self, role: &str) -> Result<(Client, Connection<Socket, NoTlsStream>)> {
        let mut config = self.client_config.clone();
        // PostgreSQL keeps 63 bytes of it.
        let mut name = format!("quintet-{role} {}", self.schema);
        while name.len() > 63 {
            name.pop();
        }
        config.application_name(name);
        config.connect(NoTls).await.map_err(pg_error)
    }

    /// Apply the migrations of `component` that the schema does not have yet.
    ///
    /// `migrations[i]` brings `component` from version `i` to `i + 1`; the list is append
    /// only. All pending ones run in one transaction holding an advisory lock of the
    /// schema, so nodes starting at once apply each exactly once and none of them sees a
    /// half-migrated schema. A schema newer than `migrations` (a downgraded binary) is
    /// refused.
    pub async fn migrate(&self, component: &str, migrations: &[&str]) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('quintet migrations ' || current_schema(), 0))",
            &[],
        )
        .await
        .map_err(pg_error)?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS quintet_migrations (
                component   TEXT COLLATE \"C\" NOT NULL,
                version     INTEGER NOT NULL,
                applied_ms  BIGINT NOT NULL,
                PRIMARY KEY (component, version)
            )",
        )
        .await
        .map_err(pg_error)?;
        let current: i32 = tx
            .query_one(
                "SELECT COALESCE(MAX(version), 0) FROM quintet_migrations WHERE component = $1",
                &[&component],
            )
            .await
            .map_err(pg_error)?
            .get(0);
        let known =
            i32::try_from(migrations.len()).map_err(|_| Error::internal("too many migrations"))?;
        if current > known {
            return Err(Error::invalid(format!(
                "the {component} tables in schema \"{}\" are at version {current}, newer than this \
                 quintet knows ({known}): run a quintet at least as new as the one that last \
                 used them",
                self.schema
            )));
        }
        for (version, sql) in (current + 1..).zip(migrations.iter().skip(current as usize)) {
            tx.batch_execute(sql).await.map_err(pg_error)?;
            tx.execute(
                "INSERT INTO quintet_migrations (component, version, applied_ms) \
                 VALUES ($1, $2, (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint)",
                &[&component, &version],
            )
            .await
            .map_err(pg_error)?;
            tracing::info!(component, version, schema = %self.schema, "applied a PostgreSQL migration");
        }
        tx.commit().await.map_err(pg_error)
    }

    /// Close the pool: connections are closed as they are returned.
    pub fn close(&self) {
        self.pool.close();
    }
}

/// Whether a pool's failure says PostgreSQL cannot be reached (rather than busy or
/// refusing the request): no connection could be opened, or it is shutting down or
/// starting.
fn unreachable(e: &PoolError) -> bool {
    match e {
        PoolError::Timeout(TimeoutType::Create | TimeoutType::Recycle) => true,
        PoolError::Backend(e) => match e.code() {
            Some(code) => [
                SqlState::ADMIN_SHUTDOWN,
                SqlState::CRASH_SHUTDOWN,
                SqlState::CANNOT_CONNECT_NOW,
            ]
            .contains(code),
            None => true,
        },
        PoolError::Timeout(TimeoutType::Wait)
        | PoolError::Closed
        | PoolError::NoRuntimeSpecified
        | PoolError::PostCreateHook(_) => false,
    }
}
