//! Which adapter serves each port: the embedded ones by default, a scale-out one where the
//! configuration names an engine. This module and [`crate::open`] are the only places that
//! know the adapter crates; the scale-out crates are compiled in by the cargo features of
//! the same names.
//!
//! Every setting is a [`Place`]: the data directory, or a shared engine with its settings.
//! See `docs/configuration.md` for the values each setting takes.

use anyhow::bail;

#[cfg(not(feature = "postgres"))]
pub use absent::PgConfig;
#[cfg(not(feature = "redis"))]
pub use absent::RedisConfig;
#[cfg(not(feature = "s3"))]
pub use absent::S3Config;
#[cfg(feature = "postgres")]
pub use quintet_postgres::PgConfig;
#[cfg(feature = "redis")]
pub use quintet_redis::RedisConfig;
#[cfg(feature = "s3")]
pub use quintet_s3::S3Config;

/// Stand-ins for the settings of the engines a build leaves out: they have no value, so
/// such a build can name no such engine, and the code that opens one is not compiled.
#[allow(dead_code)]
mod absent {
    /// PostgreSQL is not in this build.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum PgConfig {}
    /// Redis is not in this build.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum RedisConfig {}
    /// S3 is not in this build.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum S3Config {}
}

/// Where a service keeps its state.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Place<E> {
    /// In the data directory: one node.
    #[default]
    Embedded,
    /// On an engine shared by every node, with these settings.
    Shared(E),
}

impl<E> Place<E> {
    /// Whether this names a shared engine.
    pub fn is_shared(&self) -> bool {
        matches!(self, Self::Shared(_))
    }
}

impl Place<PgConfig> {
    /// Parse the value of `--<setting>`: `embedded`, or a `postgres://` URL.
    pub fn postgres(setting: &str, value: &str) -> anyhow::Result<Self> {
        let value = value.trim();
        if value == "embedded" {
            return Ok(Self::Embedded);
        }
        if value.starts_with("postgres://") || value.starts_with("postgresql://") {
            #[cfg(feature = "postgres")]
            return Ok(Self::Shared(PgConfig::new(value)?));
            #[cfg(not(feature = "postgres"))]
            bail!(
                "this quintet was built without PostgreSQL support (the embedded-only default): \
                 rebuild it with `--features scale-out` to use --{setting} postgres://…"
            );
        }
        bail!(
            "--{setting} must be \"embedded\" or a PostgreSQL URL such as \
             postgres://user@host:5432/database, not \"{}\"",
            quintet_core::redact::url(value)
        )
    }
}

impl Place<RedisConfig> {
    /// Parse a `--cache` value: `embedded`, or a `redis://` URL.
    pub fn redis(value: &str) -> anyhow::Result<Self> {
        let value = value.trim();
        if value == "embedded" {
            return Ok(Self::Embedded);
        }
        if value.starts_with("redis://") {
            #[cfg(feature = "redis")]
            return Ok(Self::Shared(RedisConfig::new(value)?));
            #[cfg(not(feature = "redis"))]
            bail!(
                "this quintet was built without Redis support (the embedded-only default): \
                 rebuild it with `--features scale-out` to use --cache redis://…"
            );
        }
        bail!(
            "--cache must be \"embedded\" or a Redis URL such as redis://host:6379/0, not \"{}\"",
            quintet_core::redact::url(value)
        )
    }
}

impl Place<S3Config> {
    /// Parse a `--storage` value: `embedded`, or an `s3://` URL. Credentials the URL leaves
    /// out are taken from `env` (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`).
    pub fn s3(value: &str, env: impl Fn(&str) -> Option<String>) -> anyhow::Result<Self> {
        let value = value.trim();
        if value == "embedded" {
            return Ok(Self::Embedded);
        }
        if value.starts_with("s3://") {
            return s3_settings(value, env).map(Self::Shared);
        }
        bail!(
            "--storage must be \"embedded\" or an S3 URL such as \
             s3://bucket?endpoint=http://127.0.0.1:9000&region=us-east-1, not \"{}\"",
            quintet_core::redact::url(value)
        )
    }
}

/// The S3 settings of `url`, with the credentials it leaves out taken from `env`.
#[cfg(not(feature = "s3"))]
fn s3_settings(_url: &str, _env: impl Fn(&str) -> Option<String>) -> anyhow::Result<S3Config> {
    bail!(
        "this quintet was built without S3 support (the embedded-only default): rebuild it \
         with `--features scale-out` to use --storage s3://…"
    )
}

/// The S3 settings of `url`, with the credentials it leaves out taken from `env`.
#[cfg(feature = "s3")]
fn s3_settings(url: &str, env: impl Fn(&str) -> Option<String>) -> anyhow::Result<S3Config> {
    let mut config = S3Config::parse(url)?;
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
            quintet_core::redact::url(url)
        );
    }
    Ok(config)
}

/// The adapters a node is configured with.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Adapters {
    /// Where the registry lives.
    pub registry: Place<PgConfig>,
    /// Where documents live.
    pub data: Place<PgConfig>,
    /// Where cache entries live.
    pub cache: Place<RedisConfig>,
    /// Where queued jobs live.
    pub queue: Place<PgConfig>,
    /// Where storage objects live.
    pub storage: Place<S3Config>,
    /// Where search indexes live.
    pub search: Place<PgConfig>,
}

impl Adapters {
    /// Where each store keeps its data, in words for the admin (`GET /_admin/node`): the
    /// engine's name only, never its URL, which may carry a password. `memory_cache`: the
    /// embedded cache keeps nothing on disk (`--cache-memory-only`).
    pub fn places(&self, memory_cache: bool) -> Vec<(String, String)> {
        fn place<E>(p: &Place<E>, embedded: &str, shared: &str) -> String {
            if p.is_shared() {
                shared.to_owned()
            } else {
                format!("embedded: {embedded} in the data directory")
            }
        }
        [
            ("registry", place(&self.registry, "SQLite", "PostgreSQL")),
            ("data", place(&self.data, "SQLite", "PostgreSQL")),
            (
                "cache",
                if memory_cache && !self.cache.is_shared() {
                    "embedded: in memory only".to_owned()
                } else {
                    place(&self.cache, "an append-only log", "Redis")
                },
            ),
            (
                "search",
                place(&self.search, "tantivy indexes", "PostgreSQL"),
            ),
            ("queue", place(&self.queue, "SQLite", "PostgreSQL")),
            ("storage", place(&self.storage, "files", "S3")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }
}

/// The values of `--registry`, `--data`, `--cache`, `--queue`, `--storage` and `--search`,
/// unparsed; `None` where not given.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// `--registry`.
    pub registry: Option<String>,
    /// `--data`.
    pub data: Option<String>,
    /// `--cache`.
    pub cache: Option<String>,
    /// `--queue`.
    pub queue: Option<String>,
    /// `--storage`.
    pub storage: Option<String>,
    /// `--search`.
    pub search: Option<String>,
}

impl Adapters {
    /// The adapters `settings` name, checked for consistency ([`Adapters::check`]); S3
    /// credentials missing from `--storage` come from `env`. Without `--registry`, the
    /// registry follows `--data` to PostgreSQL: nodes sharing documents must share the
    /// registry.
    pub fn parse(settings: Settings, env: impl Fn(&str) -> Option<String>) -> anyhow::Result<Self> {
        let pg = |setting: &str, value: Option<String>| match value {
            Some(v) => Place::postgres(setting, &v),
            None => Ok(Place::Embedded),
        };
        let data = pg("data", settings.data)?;
        let registry = match settings.registry {
            Some(r) => Place::postgres("registry", &r)?,
            None => data.clone(),
        };
        let adapters = Self {
            registry,
            data,
            cache: match settings.cache {
                Some(c) => Place::redis(&c)?,
                None => Place::Embedded,
            },
            queue: pg("queue", settings.queue)?,
            storage: match settings.storage {
                Some(s) => Place::s3(&s, env)?,
                None => Place::Embedded,
            },
            search: pg("search", settings.search)?,
        };
        adapters.check()?;
        Ok(adapters)
    }

    /// Give every engine client `timeout` to open a connection (`--engine-connect-timeout`).
    pub fn set_connect_timeout(&mut self, timeout: std::time::Duration) {
        for place in [
            &mut self.registry,
            &mut self.data,
            &mut self.queue,
            &mut self.search,
        ] {
            #[cfg(feature = "postgres")]
            if let Place::Shared(config) = place {
                config.connect_timeout = timeout;
            }
            #[cfg(not(feature = "postgres"))]
            let _ = place;
        }
        #[cfg(feature = "redis")]
        if let Place::Shared(config) = &mut self.cache {
            config.connect_timeout = timeout;
        }
        #[cfg(feature = "s3")]
        if let Place::Shared(config) = &mut self.storage {
            config.connect_timeout = timeout;
        }
        let _ = timeout;
    }

    /// Refuse combinations that cannot work: contents shared by nodes need the registry
    /// they share.
    pub fn check(&self) -> anyhow::Result<()> {
        if self.registry.is_shared() {
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
                self.data.is_shared(),
            ),
            (
                "queue",
                "postgres",
                "queues on PostgreSQL",
                self.queue.is_shared(),
            ),
            (
                "search",
                "postgres",
                "search indexes on PostgreSQL",
                self.search.is_shared(),
            ),
            (
                "cache",
                "redis",
                "cache entries on Redis",
                self.cache.is_shared(),
            ),
            ("storage", "s3", "objects on S3", self.storage.is_shared()),
        ];
        if let Some((setting, engine, what, _)) = shared.iter().find(|s| s.3) {
            bail!(
                "--{setting} {engine}://… needs --registry postgres://… as well: {what} are \
                 shared by nodes, and they must share the registry that names their instances"
            );
        }
        Ok(())
    }

    /// Whether any service keeps its state in the data directory.
    pub fn use_data_dir(&self) -> bool {
        !(self.registry.is_shared()
            && self.data.is_shared()
            && self.cache.is_shared()
            && self.queue.is_shared()
            && self.storage.is_shared()
            && self.search.is_shared())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_values() {
        assert_eq!(
            Place::postgres("registry", "embedded").unwrap(),
            Place::Embedded
        );
        for (setting, bad) in [
            ("registry", "mysql://u:pw@h/db"),
            ("queue", "redis://u:pw@h/0"),
            ("search", "elastic://u:pw@h"),
        ] {
            let err = Place::postgres(setting, bad).unwrap_err().to_string();
            assert!(err.contains(&format!("--{setting} must be")), "{err}");
            assert!(err.contains("u:***@h") && !err.contains("pw"), "{err}");
        }
        let pg = Place::postgres("data", "postgres://quintet@db.internal:5432/quintet");
        #[cfg(feature = "postgres")]
        assert!(
            matches!(pg, Ok(Place::Shared(ref c)) if c.url.contains("db.internal")),
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
        assert_eq!(Place::redis("embedded").unwrap(), Place::Embedded);
        let err = Place::redis("memcached://u:pw@h:11211").unwrap_err();
        assert!(err.to_string().contains("--cache must be"), "{err}");
        assert!(!err.to_string().contains("pw"), "{err}");
        let redis = Place::redis("redis://cache.internal:6379/2");
        #[cfg(feature = "redis")]
        assert!(
            matches!(redis, Ok(Place::Shared(ref c)) if c.url.contains("cache.internal")),
            "{redis:?}"
        );
        #[cfg(not(feature = "redis"))]
        assert!(
            redis.is_err_and(|e| e.to_string().contains("built without Redis")),
            "Redis URLs need the redis feature"
        );
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn shared_contents_need_a_shared_registry() {
        let settings = |registry: Option<&str>| Settings {
            registry: registry.map(str::to_owned),
            search: Some("postgres://q@h/q".into()),
            ..Settings::default()
        };
        let err = Adapters::parse(settings(Some("embedded")), |_| None).unwrap_err();
        assert!(err.to_string().contains("needs --registry"), "{err}");
        let shared = Adapters::parse(settings(Some("postgres://q@h/q")), |_| None).unwrap();
        assert!(shared.search.is_shared() && shared.use_data_dir());
        // Without --registry, the registry follows --data.
        let follows = Settings {
            data: Some("postgres://q@h/q".into()),
            ..Settings::default()
        };
        let follows = Adapters::parse(follows, |_| None).unwrap();
        assert!(follows.registry.is_shared());
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn bad_postgres_urls_are_refused_at_configuration() {
        let err = Place::postgres("registry", "postgres://u:pw@h/db?sslmode=require").unwrap_err();
        assert!(err.to_string().contains("without TLS"), "{err}");
        assert!(!err.to_string().contains("pw@"), "{err}");
    }

    #[test]
    fn storage_values() {
        let no_env = |_: &str| None;
        assert_eq!(Place::s3("embedded", no_env).unwrap(), Place::Embedded);
        let err = Place::s3("gs://b?secret_access_key=hidden", no_env).unwrap_err();
        assert!(err.to_string().contains("--storage must be"), "{err}");
        assert!(!err.to_string().contains("hidden"), "{err}");
        let url = "s3://media/prod?endpoint=http://127.0.0.1:18333&region=us-east-1\
                   &access_key_id=AK&secret_access_key=hidden";
        let s3 = Place::s3(url, no_env);
        #[cfg(feature = "s3")]
        match s3 {
            Ok(Place::Shared(ref c)) => {
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
        let Ok(Place::Shared(c)) = Place::s3("s3://b?endpoint=http://h:1", env) else {
            panic!("credentials from the environment")
        };
        assert_eq!(c.access_key_id.as_deref(), Some("env-id"));
        assert_eq!(c.secret_access_key.as_deref(), Some("env-secret"));
        let Ok(Place::Shared(c)) = Place::s3("s3://b?access_key_id=u&secret_access_key=s", env)
        else {
            panic!("credentials from the URL")
        };
        assert_eq!(c.access_key_id.as_deref(), Some("u"));
        assert_eq!(c.secret_access_key.as_deref(), Some("s"));
        let err = Place::s3("s3://b?endpoint=http://h:1", |_| None).unwrap_err();
        assert!(err.to_string().contains("AWS_SECRET_ACCESS_KEY"), "{err}");
        let err = Place::s3("s3://b?endpoint=ftp://h&secret_access_key=hidden", env).unwrap_err();
        assert!(err.to_string().contains("endpoint"), "{err}");
        assert!(!err.to_string().contains("hidden"), "{err}");
        let embedded_registry = Settings {
            storage: Some("s3://b".into()),
            ..Settings::default()
        };
        let err = Adapters::parse(embedded_registry, env).unwrap_err();
        assert!(err.to_string().contains("--registry postgres://"), "{err}");
    }

    #[cfg(all(feature = "postgres", feature = "redis", feature = "s3"))]
    #[test]
    fn only_a_node_with_every_service_shared_uses_no_data_directory() {
        assert!(Adapters::default().use_data_dir());
        let pg = "postgres://q@h/q".to_owned();
        let mut all = Settings {
            registry: Some(pg.clone()),
            data: Some(pg.clone()),
            cache: Some("redis://h:6379/0".into()),
            queue: Some(pg.clone()),
            storage: Some("s3://b?access_key_id=a&secret_access_key=s".into()),
            search: Some(pg),
        };
        assert!(
            !Adapters::parse(all.clone(), |_| None)
                .unwrap()
                .use_data_dir()
        );
        all.search = Some("embedded".into());
        assert!(Adapters::parse(all, |_| None).unwrap().use_data_dir());
    }
}
