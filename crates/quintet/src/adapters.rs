//! Which adapter serves each port: the embedded ones by default, a scale-out one where the
//! configuration names an engine. This is the one place that knows every adapter crate;
//! the scale-out crates are compiled in by the cargo features of the same names.
//!
//! | setting | embedded (default) | scale-out |
//! |---|---|---|
//! | `--registry` | `registry.db` in the data directory | `postgres://…` (feature `postgres`); follows `--data` when not given |
//! | `--data` | `data.db` in the data directory | `postgres://…` (feature `postgres`; needs a PostgreSQL registry) |
//! | `--cache` | `cache.log` in the data directory | `redis://…` (feature `redis`) |
//! | `--queue` | `queue.db` in the data directory | `postgres://…` (feature `postgres`; needs a PostgreSQL registry) |
//! | `--storage` | files under the data directory | `s3://bucket?endpoint=…` (feature `s3`; needs a PostgreSQL registry) |
//! | `--search` | tantivy indexes in the data directory | `postgres://…` (feature `postgres`; needs a PostgreSQL registry) |
//!
//! Adapters on the same PostgreSQL URL share one connection pool.

use std::sync::Arc;

use anyhow::bail;
use quintet_core::{
    Clock,
    ports::{
        cache::Cache, data::DocStore, queue::JobQueue, registry::Registry, search::SearchIndex,
        storage::ObjectStorage,
    },
};
use quintet_embedded::Embedded;
use quintet_server::Services;

/// Where something that can move to PostgreSQL lives: the registry (accounts,
/// applications, keys, instances), documents, queued jobs or search indexes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum PgChoice {
    /// The embedded store in the data directory: one node.
    #[default]
    Embedded,
    /// PostgreSQL, shared by every node on the same database and schema.
    #[cfg(feature = "postgres")]
    Postgres(quintet_postgres::PgConfig),
}

/// Where the registry lives.
pub type RegistryChoice = PgChoice;
/// Where documents live.
pub type DataChoice = PgChoice;
/// Where queued jobs live.
pub type QueueChoice = PgChoice;
/// Where search indexes live.
pub type SearchChoice = PgChoice;

impl PgChoice {
    /// Parse the value of `--<setting>`: `embedded`, or a `postgres://` URL.
    pub fn parse(setting: &str, value: &str) -> anyhow::Result<Self> {
        let value = value.trim();
        if value == "embedded" {
            return Ok(Self::Embedded);
        }
        if value.starts_with("postgres://") || value.starts_with("postgresql://") {
            #[cfg(feature = "postgres")]
            return Ok(Self::Postgres(quintet_postgres::PgConfig::new(value)?));
            #[cfg(not(feature = "postgres"))]
            bail!(
                "this quintet was built without PostgreSQL support: rebuild it with the cargo \
                 feature \"postgres\" (on by default) to use --{setting} postgres://…"
            );
        }
        bail!(
            "--{setting} must be \"embedded\" or a PostgreSQL URL such as \
             postgres://user@host:5432/database, not \"{}\"",
            redact(value)
        )
    }

    /// Whether this names PostgreSQL.
    pub fn is_postgres(&self) -> bool {
        *self != Self::Embedded
    }
}

/// Where cache entries live.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum CacheChoice {
    /// The embedded cache in the data directory: one node.
    #[default]
    Embedded,
    /// Redis, shared by every node on the same server and database.
    #[cfg(feature = "redis")]
    Redis(quintet_redis::RedisConfig),
}

impl CacheChoice {
    /// Parse a `--cache` value: `embedded`, or a `redis://` URL.
    pub fn parse(value: &str) -> anyhow::Result<Self> {
        let value = value.trim();
        if value == "embedded" {
            return Ok(Self::Embedded);
        }
        if value.starts_with("redis://") {
            return redis(value);
        }
        bail!(
            "--cache must be \"embedded\" or a Redis URL such as redis://host:6379/0, not \"{}\"",
            redact(value)
        )
    }
}

#[cfg(feature = "redis")]
fn redis(url: &str) -> anyhow::Result<CacheChoice> {
    Ok(CacheChoice::Redis(quintet_redis::RedisConfig::new(url)?))
}

#[cfg(not(feature = "redis"))]
fn redis(_url: &str) -> anyhow::Result<CacheChoice> {
    bail!(
        "this quintet was built without Redis support: rebuild it with the cargo feature \
         \"redis\" (on by default) to use --cache redis://…"
    )
}

/// A value shown in an error with the password of its user part hidden, in case it was a
/// URL with one.
fn redact(value: &str) -> String {
    let Some((scheme, rest)) = value.split_once("://") else {
        return value.to_owned();
    };
    match rest.rsplit_once('@') {
        Some((user, host)) if user.contains(':') => {
            let name = user.split(':').next().unwrap_or_default();
            format!("{scheme}://{name}:***@{host}")
        }
        _ => value.to_owned(),
    }
}

/// Where storage objects live.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum StorageChoice {
    /// Files (and small objects in `storage.db`) in the data directory: one node.
    #[default]
    Embedded,
    /// An S3-compatible store, shared by every node on the same bucket and prefix.
    #[cfg(feature = "s3")]
    S3(quintet_s3::S3Config),
}

impl StorageChoice {
    /// Parse a `--storage` value: `embedded`, or an `s3://` URL. Credentials the URL leaves
    /// out are taken from `env` (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`).
    pub fn parse(value: &str, env: impl Fn(&str) -> Option<String>) -> anyhow::Result<Self> {
        let value = value.trim();
        if value == "embedded" {
            return Ok(Self::Embedded);
        }
        if value.starts_with("s3://") {
            return s3(value, env);
        }
        bail!(
            "--storage must be \"embedded\" or an S3 URL such as \
             s3://bucket?endpoint=http://127.0.0.1:9000&region=us-east-1, not \"{}\"",
            redact_storage(value)
        )
    }
}

#[cfg(feature = "s3")]
fn s3(url: &str, env: impl Fn(&str) -> Option<String>) -> anyhow::Result<StorageChoice> {
    let mut config = quintet_s3::S3Config::parse(url)?;
    let from_env = |var: &str| env(var).filter(|v| !v.trim().is_empty());
    if config.access_key_id.is_none() {
        config.access_key_id = from_env("AWS_ACCESS_KEY_ID");
    }
    if config.secret_access_key.is_none() {
        config.secret_access_key = from_env("AWS_SECRET_ACCESS_KEY");
    }
    if config.access_key_id.is_none() || config.secret_access_key.is_none() {
        bail!(
            "--storage {} has no credentials: add access_key_id and secret_access_key to the \
             URL, or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
            redact_storage(url)
        );
    }
    Ok(StorageChoice::S3(config))
}

#[cfg(not(feature = "s3"))]
fn s3(_url: &str, _env: impl Fn(&str) -> Option<String>) -> anyhow::Result<StorageChoice> {
    bail!(
        "this quintet was built without S3 support: rebuild it with the cargo feature \
         \"s3\" (on by default) to use --storage s3://…"
    )
}

/// A `--storage` value for messages, its secret hidden.
fn redact_storage(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    const NAME: &str = "secret_access_key=";
    while let Some(at) = rest.find(NAME) {
        out.push_str(&rest[..at + NAME.len()]);
        out.push_str("***");
        rest = &rest[at + NAME.len()..];
        rest = rest.find('&').map_or("", |end| &rest[end..]);
    }
    out.push_str(rest);
    redact(&out)
}

/// The adapters a node is configured with.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Adapters {
    /// Where the registry lives.
    pub registry: RegistryChoice,
    /// Where documents live.
    pub data: DataChoice,
    /// Where cache entries live.
    pub cache: CacheChoice,
    /// Where queued jobs live.
    pub queue: QueueChoice,
    /// Where storage objects live.
    pub storage: StorageChoice,
    /// Where search indexes live.
    pub search: SearchChoice,
}
impl Adapters {
    /// Give every engine client `timeout` to open a connection (`--engine-connect-timeout`).
    pub fn set_connect_timeout(&mut self, timeout: std::time::Duration) {
        for choice in [
            &mut self.registry,
            &mut self.data,
            &mut self.queue,
            &mut self.search,
        ] {
            #[cfg(feature = "postgres")]
            if let PgChoice::Postgres(config) = choice {
                config.connect_timeout = timeout;
            }
            #[cfg(not(feature = "postgres"))]
            let _ = choice;
        }
        #[cfg(feature = "redis")]
        if let CacheChoice::Redis(config) = &mut self.cache {
            config.connect_timeout = timeout;
        }
        #[cfg(feature = "s3")]
        if let StorageChoice::S3(config) = &mut self.storage {
            config.connect_timeout = timeout;
        }
        let _ = timeout;
    }

    /// Refuse combinations that cannot work: contents shared by nodes need the registry
    /// they share.
    pub fn check(&self) -> anyhow::Result<()> {
        if self.registry.is_postgres() {
            return Ok(());
        }
        // Instance ids come from the registry: nodes sharing contents must share the
        // registry too, or their ids would collide and each node's start-up sweep would
        // remove the instances of the others.
        let shared = [
            (
                "data",
                "postgres",
                "documents on PostgreSQL",
                self.data.is_postgres(),
            ),
            (
                "queue",
                "postgres",
                "queues on PostgreSQL",
                self.queue.is_postgres(),
            ),
            (
                "search",
                "postgres",
                "search indexes on PostgreSQL",
                self.search.is_postgres(),
            ),
            (
                "cache",
                "redis",
                "cache entries on Redis",
                self.cache != CacheChoice::Embedded,
            ),
            (
                "storage",
                "s3",
                "objects on S3",
                self.storage != StorageChoice::Embedded,
            ),
        ];
        if let Some((setting, engine, what, _)) = shared.iter().find(|s| s.3) {
            bail!(
                "--{setting} {engine}://… needs --registry postgres://… as well: {what} are \
                 shared by nodes, and they must share the registry that names their instances"
            );
        }
        Ok(())
    }
}

/// PostgreSQL pools opened so far, one per URL, so that adapters on one database share
/// connections.
#[cfg(feature = "postgres")]
#[derive(Debug, Default)]
struct PgPools(Vec<(String, quintet_postgres::PgDatabase)>);

#[cfg(feature = "postgres")]
impl PgPools {
    /// The pool of `config`'s URL, opened on first use.
    async fn get(
        &mut self,
        config: &quintet_postgres::PgConfig,
    ) -> quintet_core::Result<quintet_postgres::PgDatabase> {
        if let Some((_, db)) = self.0.iter().find(|(url, _)| *url == config.url) {
            return Ok(db.clone());
        }
        let db = quintet_postgres::PgDatabase::connect(config).await?;
        self.0.push((config.url.clone(), db.clone()));
        Ok(db)
    }
}

/// What [`open`] opened.
#[derive(Debug)]
pub struct Opened {
    /// One adapter per port, for the HTTP layer.
    pub services: Services,
    /// Names the registry the node uses, for [`crate::binding`]: `embedded`, or
    /// `postgres:<the registry's id>`.
    pub registry_identity: String,
}

/// Open the adapters `adapters` names over the already opened `embedded` stores.
pub async fn open(
    adapters: &Adapters,
    embedded: &Embedded,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<Opened> {
    #[cfg(feature = "postgres")]
    let mut pools = PgPools::default();
    let (registry, registry_identity): (Arc<dyn Registry>, String) = match &adapters.registry {
        RegistryChoice::Embedded => (embedded.registry.clone(), "embedded".to_owned()),
        #[cfg(feature = "postgres")]
        RegistryChoice::Postgres(config) => {
            use anyhow::Context as _;
            let db = pools
                .get(config)
                .await
                .context("cannot open the registry on PostgreSQL")?;
            let registry = quintet_postgres::PgRegistry::open(db, Arc::clone(&clock))
                .await
                .with_context(|| {
                    format!(
                        "cannot open the registry on PostgreSQL at {}",
                        config.redacted_url()
                    )
                })?;
            tracing::info!(
                url = %config.redacted_url(),
                schema = %registry.database().schema(),
                "registry on PostgreSQL, shared by every node"
            );
            let identity = format!("postgres:{}", registry.id());
            (Arc::new(registry), identity)
        }
    };
    let cache = open_cache(&adapters.cache, embedded, &registry_identity, &clock).await?;
    let queue: Arc<dyn JobQueue> = match &adapters.queue {
        QueueChoice::Embedded => embedded.queue.clone(),
        #[cfg(feature = "postgres")]
        QueueChoice::Postgres(config) => {
            use anyhow::Context as _;
            let opened = async {
                let db = pools.get(config).await?;
                quintet_postgres::PgJobQueue::open(db, Arc::clone(&clock)).await
            };
            let queue = opened.await.with_context(|| {
                format!(
                    "cannot open the queue on PostgreSQL at {}",
                    config.redacted_url()
                )
            })?;
            tracing::info!(
                url = %config.redacted_url(),
                schema = %queue.database().schema(),
                node = %queue.node(),
                "queue on PostgreSQL, shared by every node"
            );
            Arc::new(queue)
        }
    };
    let data: Arc<dyn DocStore> = match &adapters.data {
        DataChoice::Embedded => embedded.data.clone(),
        #[cfg(feature = "postgres")]
        DataChoice::Postgres(config) => {
            use anyhow::Context as _;
            let opened = async {
                let db = pools.get(config).await?;
                quintet_postgres::PgDocStore::open(db, Arc::clone(&clock)).await
            };
            let data = opened.await.with_context(|| {
                format!(
                    "cannot open data on PostgreSQL at {}",
                    config.redacted_url()
                )
            })?;
            tracing::info!(
                url = %config.redacted_url(),
                schema = %data.database().schema(),
                "documents on PostgreSQL, shared by every node"
            );
            Arc::new(data)
        }
    };
    let search: Arc<dyn SearchIndex> = match &adapters.search {
        SearchChoice::Embedded => embedded.search.clone(),
        #[cfg(feature = "postgres")]
        SearchChoice::Postgres(config) => {
            use anyhow::Context as _;
            let opened =
                async { quintet_postgres::PgSearchIndex::open(pools.get(config).await?).await };
            let search = opened.await.with_context(|| {
                format!(
                    "cannot open search on PostgreSQL at {}",
                    config.redacted_url()
                )
            })?;
            tracing::info!(
                url = %config.redacted_url(),
                schema = %search.database().schema(),
                "search on PostgreSQL, shared by every node"
            );
            Arc::new(search)
        }
    };
    #[cfg(not(feature = "postgres"))]
    let _ = clock;
    let storage: Arc<dyn ObjectStorage> = match &adapters.storage {
        StorageChoice::Embedded => embedded.storage.clone(),
        #[cfg(feature = "s3")]
        StorageChoice::S3(config) => {
            use anyhow::Context as _;
            let store = quintet_s3::S3BlobStore::open(config)
                .await
                .context("cannot open storage on S3")?;
            // Before the start-up sweep, which removes what this registry does not know.
            store
                .bind(&registry_identity)
                .await
                .context("cannot open storage on S3")?;
            tracing::info!(store = %config.describe(), "storage on S3");
            Arc::new(store)
        }
    };
    Ok(Opened {
        services: Services {
            registry,
            data,
            cache,
            search,
            queue,
            storage,
        },
        registry_identity,
    })
}

/// The cache `choice` names. Redis keys go under `quintet:<registry identity>:`, so
/// deployments on different registries can share a Redis database without meeting (nor
/// sweeping) each other's entries.
async fn open_cache(
    choice: &CacheChoice,
    embedded: &Embedded,
    registry_identity: &str,
    clock: &Arc<dyn Clock>,
) -> anyhow::Result<Arc<dyn Cache>> {
    #[cfg(not(feature = "redis"))]
    let _ = (registry_identity, clock);
    match choice {
        CacheChoice::Embedded => Ok(embedded.cache.clone()),
        #[cfg(feature = "redis")]
        CacheChoice::Redis(config) => {
            use anyhow::Context as _;
            let config = config
                .clone()
                .with_prefix(format!("quintet:{registry_identity}:"));
            let cache = quintet_redis::RedisCache::connect(&config, Arc::clone(clock))
                .await
                .with_context(|| {
                    format!(
                        "cannot open the cache on Redis at {}",
                        config.redacted_url()
                    )
                })?;
            tracing::info!(url = %config.redacted_url(), prefix = %config.prefix, "cache on Redis");
            Ok(Arc::new(cache))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_values() {
        assert_eq!(
            RegistryChoice::parse("registry", "embedded").unwrap(),
            RegistryChoice::Embedded
        );
        let err = RegistryChoice::parse("registry", "mysql://u:pw@h/db").unwrap_err();
        assert!(err.to_string().contains("mysql://u:***@h/db"), "{err}");
        assert!(!err.to_string().contains("pw"), "{err}");
        let pg = RegistryChoice::parse("registry", "postgres://quintet@db.internal:5432/quintet");
        #[cfg(feature = "postgres")]
        assert!(
            matches!(pg, Ok(RegistryChoice::Postgres(ref c)) if c.url.contains("db.internal")),
            "{pg:?}"
        );
        #[cfg(not(feature = "postgres"))]
        assert!(
            pg.is_err_and(|e| e.to_string().contains("built without PostgreSQL")),
            "PostgreSQL URLs need the postgres feature"
        );
    }

    #[test]
    fn cache_values() {
        assert_eq!(
            CacheChoice::parse("embedded").unwrap(),
            CacheChoice::Embedded
        );
        let err = CacheChoice::parse("memcached://u:pw@h:11211").unwrap_err();
        assert!(err.to_string().contains("--cache must be"), "{err}");
        assert!(!err.to_string().contains("pw"), "{err}");
        let redis = CacheChoice::parse("redis://cache.internal:6379/2");
        #[cfg(feature = "redis")]
        assert!(
            matches!(redis, Ok(CacheChoice::Redis(ref c)) if c.url.contains("cache.internal")),
            "{redis:?}"
        );
        #[cfg(not(feature = "redis"))]
        assert!(
            redis.is_err_and(|e| e.to_string().contains("built without Redis")),
            "Redis URLs need the redis feature"
        );
    }

    #[test]
    fn queue_values() {
        assert_eq!(
            QueueChoice::parse("queue", "embedded").unwrap(),
            QueueChoice::Embedded
        );
        let err = QueueChoice::parse("queue", "redis://u:pw@h/0").unwrap_err();
        assert!(err.to_string().contains("--queue must be"), "{err}");
        assert!(!err.to_string().contains("pw"), "{err}");
        let pg = QueueChoice::parse("queue", "postgresql://quintet@db.internal/quintet");
        #[cfg(feature = "postgres")]
        assert!(
            matches!(pg, Ok(QueueChoice::Postgres(ref c)) if c.url.contains("db.internal")),
            "{pg:?}"
        );
        #[cfg(not(feature = "postgres"))]
        assert!(pg.is_err_and(|e| e.to_string().contains("built without PostgreSQL")));
    }

    #[test]
    fn search_values() {
        assert_eq!(
            SearchChoice::parse("search", "embedded").unwrap(),
            SearchChoice::Embedded
        );
        let err = SearchChoice::parse("search", "elastic://u:pw@h").unwrap_err();
        assert!(err.to_string().contains("--search must be"), "{err}");
        assert!(!err.to_string().contains("pw"), "{err}");
        let pg = SearchChoice::parse("search", "postgresql://quintet@db.internal/quintet");
        #[cfg(feature = "postgres")]
        assert!(
            matches!(pg, Ok(SearchChoice::Postgres(ref c)) if c.url.contains("db.internal")),
            "{pg:?}"
        );
        #[cfg(not(feature = "postgres"))]
        assert!(pg.is_err_and(|e| e.to_string().contains("built without PostgreSQL")));
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn search_on_postgres_needs_a_postgres_registry() {
        let search = SearchChoice::parse("search", "postgres://q@h/q").unwrap();
        let alone = Adapters {
            search: search.clone(),
            ..Adapters::default()
        };
        let err = alone.check().unwrap_err();
        assert!(err.to_string().contains("needs --registry"), "{err}");
        let shared = Adapters {
            registry: RegistryChoice::parse("registry", "postgres://q@h/q").unwrap(),
            search,
            ..Adapters::default()
        };
        shared.check().unwrap();
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn bad_postgres_urls_are_refused_at_configuration() {
        let err =
            RegistryChoice::parse("registry", "postgres://u:pw@h/db?sslmode=require").unwrap_err();
        assert!(err.to_string().contains("without TLS"), "{err}");
        assert!(!err.to_string().contains("pw@"), "{err}");
    }

    #[test]
    fn storage_values() {
        let no_env = |_: &str| None;
        assert_eq!(
            StorageChoice::parse("embedded", no_env).unwrap(),
            StorageChoice::Embedded
        );
        let err = StorageChoice::parse("gs://b?secret_access_key=hidden", no_env).unwrap_err();
        assert!(err.to_string().contains("--storage must be"), "{err}");
        assert!(!err.to_string().contains("hidden"), "{err}");
        let url = "s3://media/prod?endpoint=http://127.0.0.1:18333&region=us-east-1\
                   &access_key_id=AK&secret_access_key=hidden";
        let s3 = StorageChoice::parse(url, no_env);
        #[cfg(feature = "s3")]
        match s3 {
            Ok(StorageChoice::S3(ref c)) => {
                assert_eq!(c.bucket, "media");
                assert_eq!(c.prefix, "prod/");
                assert_eq!(c.endpoint.as_deref(), Some("http://127.0.0.1:18333"));
                assert!(c.allow_http());
                assert!(!format!("{c:?}").contains("hidden"));
            }
            other => panic!("{other:?}"),
        }
        #[cfg(not(feature = "s3"))]
        assert!(s3.is_err_and(|e| e.to_string().contains("built without S3")));
    }

    #[cfg(feature = "s3")]
    #[test]
    fn s3_credentials_come_from_the_url_or_the_environment() {
        let env = |var: &str| match var {
            "AWS_ACCESS_KEY_ID" => Some("env-id".to_owned()),
            "AWS_SECRET_ACCESS_KEY" => Some("env-secret".to_owned()),
            _ => None,
        };
        let Ok(StorageChoice::S3(c)) = StorageChoice::parse("s3://b?endpoint=http://h:1", env)
        else {
            panic!("credentials from the environment")
        };
        assert_eq!(c.access_key_id.as_deref(), Some("env-id"));
        assert_eq!(c.secret_access_key.as_deref(), Some("env-secret"));
        let Ok(StorageChoice::S3(c)) =
            StorageChoice::parse("s3://b?access_key_id=u&secret_access_key=s", env)
        else {
            panic!("credentials from the URL")
        };
        assert_eq!(c.access_key_id.as_deref(), Some("u"));
        assert_eq!(c.secret_access_key.as_deref(), Some("s"));
        let err = StorageChoice::parse("s3://b?endpoint=http://h:1", |_| None).unwrap_err();
        assert!(err.to_string().contains("AWS_SECRET_ACCESS_KEY"), "{err}");
        let err = StorageChoice::parse("s3://b?endpoint=ftp://h&secret_access_key=hidden", env)
            .unwrap_err();
        assert!(err.to_string().contains("endpoint"), "{err}");
        assert!(!err.to_string().contains("hidden"), "{err}");
        let s3 = StorageChoice::parse("s3://b", env).unwrap();
        let embedded_registry = Adapters {
            registry: RegistryChoice::Embedded,
            storage: s3,
            ..Adapters::default()
        };
        let err = embedded_registry.check().unwrap_err();
        assert!(err.to_string().contains("--registry postgres://"), "{err}");
    }
}
