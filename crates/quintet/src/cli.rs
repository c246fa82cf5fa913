//! Command-line arguments, `QUINTET_*` environment variables and the optional TOML file,
//! merged into one validated configuration.
//!
//! Precedence, highest first: flag, environment variable, TOML file, built-in default.
//! clap resolves flag over environment; the file fills what both left unset.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use quintet_core::keys::Secret;
use quintet_server::config::{DomainAuth, TlsFiles};
use serde::Deserialize;

use crate::{
    adapters::{Adapters, CacheChoice, PgChoice, StorageChoice},
    admin,
    limits::{FileLimits, LimitArgs, Limits},
};

/// quintet: data, cache, search, queue and storage for applications, in one program.
#[derive(Debug, Parser)]
#[command(name = "quintet", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
// Parsed once per process: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP server.
    Serve(ServeArgs),
    /// Manage accounts (and their plans) on a running server.
    #[command(subcommand)]
    Account(admin::AccountCommand),
    /// Manage applications on a running server.
    #[command(subcommand)]
    App(admin::AppCommand),
    /// Manage the access keys of an application on a running server.
    #[command(subcommand)]
    Key(admin::KeyCommand),
    /// Print an access token signed with a key's connection string (for curl and scripts).
    Token(crate::token::TokenArgs),
}

/// How domain-form requests are authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// No authentication; only loopback addresses unless --insecure-no-auth.
    None,
    /// HS256 JWTs signed with --jwt-secret.
    Jwt,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Settings of `quintet serve`. Every one can also be set by its environment variable or
/// in the TOML file given with `--config` (key = the flag's name with `_` for `-`).
#[derive(Debug, Default, Args)]
pub struct ServeArgs {
    /// TOML file with settings; flags and environment variables override it.
    #[arg(long, env = "QUINTET_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Address and port to listen on [default: 127.0.0.1:6363]
    #[arg(long, env = "QUINTET_LISTEN", value_name = "ADDR")]
    pub listen: Option<SocketAddr>,

    /// Directory holding all data of the embedded stores [default: ./quintet-data]
    #[arg(long, env = "QUINTET_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// Where accounts, applications, keys and instances are recorded: `embedded` (in the
    /// data directory, one node) or a PostgreSQL URL shared by every node, e.g.
    /// postgres://quintet:secret@db:5432/quintet [default: embedded]
    #[arg(
        long,
        env = "QUINTET_REGISTRY",
        value_name = "URL",
        hide_env_values = true
    )]
    pub registry: Option<String>,

    /// Where documents are kept: `embedded` (in the data directory, one node) or a
    /// PostgreSQL URL shared by every node; the registry follows it to PostgreSQL unless
    /// --registry says otherwise [default: embedded]
    #[arg(long, env = "QUINTET_DATA", value_name = "URL", hide_env_values = true)]
    pub data: Option<String>,

    /// Where cache entries are kept: `embedded` (in the data directory, one node) or a
    /// Redis URL shared by every node, e.g. redis://:secret@cache:6379/0. Use it with a
    /// PostgreSQL --registry, whose identity namespaces the keys [default: embedded]
    #[arg(
        long,
        env = "QUINTET_CACHE",
        value_name = "URL",
        hide_env_values = true
    )]
    pub cache: Option<String>,
    /// Where queued jobs are kept: `embedded` (in the data directory, one node) or a
    /// PostgreSQL URL shared by every node, which then all deliver jobs (needs a PostgreSQL
    /// --registry) [default: embedded]
    #[arg(
        long,
        env = "QUINTET_QUEUE",
        value_name = "URL",
        hide_env_values = true
    )]
    pub queue: Option<String>,

    /// Where storage objects are kept: `embedded` (files in the data directory) or an
    /// S3-compatible store shared by every node, e.g.
    /// s3://bucket[/prefix]?endpoint=http://127.0.0.1:9000&region=us-east-1 with credentials
    /// as access_key_id and secret_access_key parameters or from AWS_ACCESS_KEY_ID and
    /// AWS_SECRET_ACCESS_KEY; needs --registry postgres://… [default: embedded]
    #[arg(
        long,
        env = "QUINTET_STORAGE",
        value_name = "URL",
        hide_env_values = true
    )]
    pub storage: Option<String>,

    /// Where search indexes live: `embedded` (tantivy, in the data directory) or a
    /// PostgreSQL URL shared by every node (needs a PostgreSQL --registry)
    /// [default: embedded]
    #[arg(
        long,
        env = "QUINTET_SEARCH",
        value_name = "URL",
        hide_env_values = true
    )]
    pub search: Option<String>,

    /// Largest JSON request body, in bytes; larger bodies get 413 [default: 16777216]
    #[arg(long, env = "QUINTET_MAX_BODY_BYTES", value_name = "BYTES")]
    pub max_body_bytes: Option<usize>,

    /// Deepest nesting of arrays and objects in a JSON body [default: 64]
    #[arg(long, env = "QUINTET_MAX_JSON_DEPTH", value_name = "LEVELS")]
    pub max_json_depth: Option<usize>,

    /// Seconds in-flight requests may run after SIGINT/SIGTERM [default: 30]
    #[arg(long, env = "QUINTET_SHUTDOWN_TIMEOUT", value_name = "SECONDS")]
    pub shutdown_timeout: Option<u64>,

    /// Seconds a client may take to send a whole request head, and that an idle kept-alive
    /// connection is kept; past them the connection is closed [default: 30]
    #[arg(long, env = "QUINTET_HEADER_TIMEOUT", value_name = "SECONDS")]
    pub header_timeout: Option<u64>,

    /// URL clients reach this server at, for the absolute URLs it hands out (pre-signed
    /// URLs, connection strings) [default: built from each request's Host header]
    #[arg(long, env = "QUINTET_PUBLIC_URL", value_name = "URL")]
    pub public_url: Option<String>,

    /// How domain-form requests are authenticated: `none`, or `jwt` (HS256 tokens signed
    /// with --jwt-secret). The application form always needs a token signed with one of the
    /// application's keys [default: none]
    #[arg(long, env = "QUINTET_AUTH", value_name = "MODE")]
    pub auth: Option<AuthMode>,

    /// With --auth jwt: the HMAC secret domain-form tokens are signed with (at least 32
    /// bytes)
    #[arg(
        long,
        env = "QUINTET_JWT_SECRET",
        value_name = "SECRET",
        hide_env_values = true
    )]
    pub jwt_secret: Option<String>,

    /// With --auth jwt: the `sub` claim domain-form tokens must carry [default: any]
    #[arg(long, env = "QUINTET_JWT_SUB", value_name = "SUB")]
    pub jwt_sub: Option<String>,

    /// With --auth none: listen on a non-loopback address anyway (only when something in
    /// front of quintet authenticates requests)
    #[arg(long, env = "QUINTET_INSECURE_NO_AUTH")]
    pub insecure_no_auth: bool,

    /// Bearer token of the admin API (/_admin), at least 16 characters [default: generated
    /// on first start, printed once and kept in <data-dir>/admin-token]
    #[arg(
        long,
        env = "QUINTET_ADMIN_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub admin_token: Option<String>,

    /// PEM certificate chain to serve HTTPS with (needs --tls-key) [default: plain HTTP]
    #[arg(long, env = "QUINTET_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert
    #[arg(long, env = "QUINTET_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// Most bytes (keys plus values) the cache entries of all instances may take; when a
    /// write would go beyond, the least recently used entries are evicted [default: no
    /// limit, nothing is evicted]
    #[arg(long, env = "QUINTET_CACHE_MAX_BYTES", value_name = "BYTES")]
    pub cache_max_bytes: Option<u64>,

    /// Keep cache entries in memory only: nothing written to disk, every entry gone after
    /// a restart [default: false, entries are durable]
    #[arg(
        long,
        env = "QUINTET_CACHE_MEMORY_ONLY",
        value_name = "BOOL",
        num_args = 0..=1,
        default_missing_value = "true",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub cache_memory_only: Option<bool>,

    /// Refuse queue targets on loopback, private and link-local addresses, when a queue is
    /// created and at every delivery (after DNS resolution) [default: false]
    #[arg(long, env = "QUINTET_QUEUE_DENY_PRIVATE", value_name = "BOOL",
          num_args = 0..=1, default_missing_value = "true")]
    pub queue_deny_private: Option<bool>,

    /// Milliseconds before the first retry of an unreachable queue worker; doubles with each
    /// retry (with jitter), up to an hour [default: 5000]
    #[arg(long, env = "QUINTET_QUEUE_BACKOFF_MS", value_name = "MS")]
    pub queue_backoff_ms: Option<u64>,

    /// Log filter, e.g. `info`, `warn`, `quintet=debug` [default: info]
    #[arg(long, env = "QUINTET_LOG", value_name = "FILTER")]
    pub log: Option<String>,

    /// Log format [default: text]
    #[arg(long, env = "QUINTET_LOG_FORMAT", value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,

    // Limits on what clients, the disk and the engines can cost a node (crate::limits).
    #[command(flatten)]
    #[allow(missing_docs)]
    pub limits: LimitArgs,
}

/// The TOML file: the same settings as the flags, all optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileConfig {
    pub(crate) listen: Option<SocketAddr>,
    pub(crate) data_dir: Option<PathBuf>,
    registry: Option<String>,
    data: Option<String>,
    cache: Option<String>,
    queue: Option<String>,
    storage: Option<String>,
    search: Option<String>,
    max_body_bytes: Option<usize>,
    max_json_depth: Option<usize>,
    shutdown_timeout: Option<u64>,
    header_timeout: Option<u64>,
    public_url: Option<String>,
    auth: Option<AuthMode>,
    jwt_secret: Option<String>,
    jwt_sub: Option<String>,
    insecure_no_auth: Option<bool>,
    pub(crate) admin_token: Option<String>,
    pub(crate) tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    cache_max_bytes: Option<u64>,
    cache_memory_only: Option<bool>,
    queue_deny_private: Option<bool>,
    queue_backoff_ms: Option<u64>,
    log: Option<String>,
    log_format: Option<LogFormat>,

    // crate::limits
    body_timeout: Option<u64>,
    body_min_rate: Option<u64>,
    max_connections: Option<usize>,
    max_connections_per_client: Option<usize>,
    disk_reserve: Option<u64>,
    engine_connect_timeout: Option<u64>,
}

impl FileConfig {
    /// The keys of [`crate::limits`].
    pub(crate) fn limits(&self) -> FileLimits {
        FileLimits {
            body_timeout: self.body_timeout,
            body_min_rate: self.body_min_rate,
            max_connections: self.max_connections,
            max_connections_per_client: self.max_connections_per_client,
            disk_reserve: self.disk_reserve,
            engine_connect_timeout: self.engine_connect_timeout,
        }
    }
}

/// Shortest admin token accepted.
pub const MIN_ADMIN_TOKEN_LEN: usize = 16;

/// Shortest JWT secret accepted (RFC 7518: an HS256 key is at least as long as the hash).
pub const MIN_JWT_SECRET_LEN: usize = 32;

/// Longest `--header-timeout` accepted: a day (far beyond any use, and far from the
/// instant arithmetic's limits).
pub const MAX_HEADER_TIMEOUT: Duration = Duration::from_secs(86_400);

/// Everything `quintet serve` needs, each setting resolved.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The HTTP server's settings.
    pub server: quintet_server::Config,
    /// The embedded stores' directory.
    pub data_dir: PathBuf,
    /// The embedded cache's bound and durability.
    pub cache: quintet_embedded::cache::CacheOptions,
    /// Which adapter serves each port.
    pub adapters: Adapters,
    /// Log filter.
    pub log: String,
    /// Log format.
    pub log_format: LogFormat,
    /// Bounds on connections, bodies, disk use and engine connections.
    pub limits: Limits,
}

impl ServeArgs {
    /// Merge flags and environment (already in `self`) over the TOML file and defaults.
    pub fn resolve(self) -> anyhow::Result<ServeConfig> {
        let file = match &self.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        let defaults = quintet_server::Config::default();
        let limits = self
            .limits
            .clone()
            .resolve(file.limits(), crate::limits::fd_limit())?;
        let max_json_depth = self
            .max_json_depth
            .or(file.max_json_depth)
            .unwrap_or(defaults.max_json_depth);
        if max_json_depth == 0 {
            bail!("max-json-depth must be at least 1");
        }
        let max_body_bytes = self
            .max_body_bytes
            .or(file.max_body_bytes)
            .unwrap_or(defaults.max_body_bytes);
        if max_body_bytes == 0 {
            bail!("max-body-bytes must be at least 1");
        }
        let header_timeout = self
            .header_timeout
            .or(file.header_timeout)
            .map_or(defaults.header_timeout, Duration::from_secs);
        if header_timeout.is_zero() || header_timeout > MAX_HEADER_TIMEOUT {
            bail!(
                "header-timeout must be 1 to {} seconds",
                MAX_HEADER_TIMEOUT.as_secs()
            );
        }
        let listen = self.listen.or(file.listen).unwrap_or(defaults.listen);
        let domain_auth = domain_auth(
            self.auth.or(file.auth).unwrap_or(AuthMode::None),
            self.jwt_secret.or(file.jwt_secret),
            self.jwt_sub.or(file.jwt_sub),
        )?;
        let insecure_no_auth = self.insecure_no_auth || file.insecure_no_auth.unwrap_or(false);
        if domain_auth == DomainAuth::None && !listen.ip().is_loopback() && !insecure_no_auth {
            bail!(
                "refusing to listen on {listen} without authentication: with --auth none (the \
                 default) anyone who reaches that address can read and change every \
                 domain-form instance. Use --auth jwt with --jwt-secret, listen on a loopback \
                 address such as 127.0.0.1, or pass --insecure-no-auth when something in front \
                 of quintet authenticates requests"
            );
        }
        let admin_token = self
            .admin_token
            .or(file.admin_token)
            .map(|t| check_admin_token(&t))
            .transpose()?;
        let tls = match (
            self.tls_cert.or(file.tls_cert),
            self.tls_key.or(file.tls_key),
        ) {
            (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
            (None, None) => None,
            _ => bail!("--tls-cert and --tls-key go together: give both files, or neither"),
        };
        let adapters = adapters(
            self.registry.or(file.registry),
            self.data.or(file.data),
            self.cache.or(file.cache),
            self.queue.or(file.queue),
            self.storage.or(file.storage),
            self.search.or(file.search),
        )?;
        let mut adapters = adapters;
        adapters.set_connect_timeout(limits.engine_connect_timeout);
        let cache_max_bytes = self.cache_max_bytes.or(file.cache_max_bytes);
        if cache_max_bytes == Some(0) {
            bail!("cache-max-bytes must be at least 1; leave it unset for no limit");
        }
        Ok(ServeConfig {
            server: quintet_server::Config {
                listen,
                max_body_bytes,
                max_json_depth,
                shutdown_timeout: self
                    .shutdown_timeout
                    .or(file.shutdown_timeout)
                    .map(Duration::from_secs)
                    .unwrap_or(defaults.shutdown_timeout),
                header_timeout,
                public_url: self
                    .public_url
                    .or(file.public_url)
                    .map(|u| check_public_url(&u))
                    .transpose()?,
                domain_auth,
                admin_token,
                tls,
                queue_deny_private: self
                    .queue_deny_private
                    .or(file.queue_deny_private)
                    .unwrap_or(defaults.queue_deny_private),
                queue_backoff: self
                    .queue_backoff_ms
                    .or(file.queue_backoff_ms)
                    .map(Duration::from_millis)
                    .unwrap_or(defaults.queue_backoff),
                connections: limits.connections.clone(),
            },
            data_dir: self
                .data_dir
                .or(file.data_dir)
                .unwrap_or_else(|| PathBuf::from("quintet-data")),
            cache: quintet_embedded::cache::CacheOptions {
                max_bytes: cache_max_bytes,
                memory_only: self
                    .cache_memory_only
                    .or(file.cache_memory_only)
                    .unwrap_or(false),
            },
            adapters,
            log: self.log.or(file.log).unwrap_or_else(|| "info".to_owned()),
            log_format: self
                .log_format
                .or(file.log_format)
                .unwrap_or(LogFormat::Text),
            limits,
        })
    }
}

/// The adapters named by `--registry`, `--data`, `--cache`, `--queue`, `--storage` and
/// `--search`, checked for consistency. Without `--registry`, the registry follows
/// `--data` to PostgreSQL: nodes sharing documents must share the registry.
fn adapters(
    registry: Option<String>,
    data: Option<String>,
    cache: Option<String>,
    queue: Option<String>,
    storage: Option<String>,
    search: Option<String>,
) -> anyhow::Result<Adapters> {
    let pg = |setting: &str, value: Option<String>| {
        value
            .map(|v| PgChoice::parse(setting, &v))
            .transpose()
            .map(Option::unwrap_or_default)
    };
    let data = pg("data", data)?;
    let registry = match registry {
        Some(r) => PgChoice::parse("registry", &r)?,
        None => data.clone(),
    };
    let adapters = Adapters {
        registry,
        data,
        cache: cache
            .map(|c| CacheChoice::parse(&c))
            .transpose()?
            .unwrap_or_default(),
        queue: pg("queue", queue)?,
        storage: storage
            .map(|s| StorageChoice::parse(&s, |var| std::env::var(var).ok()))
            .transpose()?
            .unwrap_or_default(),
        search: pg("search", search)?,
    };
    adapters.check()?;
    Ok(adapters)
}

/// The domain auth mode with its settings, checked for consistency.
fn domain_auth(
    mode: AuthMode,
    secret: Option<String>,
    sub: Option<String>,
) -> anyhow::Result<DomainAuth> {
    match mode {
        AuthMode::None => {
            if secret.is_some() || sub.is_some() {
                bail!(
                    "--jwt-secret and --jwt-sub only apply with --auth jwt; add --auth jwt to \
                     require tokens on the domain form"
                );
            }
            Ok(DomainAuth::None)
        }
        AuthMode::Jwt => {
            let Some(secret) = secret else {
                bail!(
                    "--auth jwt needs --jwt-secret, the secret domain-form tokens are signed with"
                );
            };
            if secret.len() < MIN_JWT_SECRET_LEN {
                bail!(
                    "--jwt-secret must be at least {MIN_JWT_SECRET_LEN} bytes long for HS256 \
                     (it has {})",
                    secret.len()
                );
            }
            if sub.as_deref() == Some("") {
                bail!("--jwt-sub must not be empty; leave it out to accept any sub");
            }
            Ok(DomainAuth::Jwt {
                secret: Secret::from_stored(secret),
                sub,
            })
        }
    }
}

/// An admin token long enough, and fit for an HTTP header.
fn check_admin_token(token: &str) -> anyhow::Result<Secret> {
    if token.len() < MIN_ADMIN_TOKEN_LEN {
        bail!("--admin-token must be at least {MIN_ADMIN_TOKEN_LEN} characters long");
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        bail!("--admin-token must be visible ASCII characters without spaces");
    }
    Ok(Secret::from_stored(token))
}

/// An absolute http(s) URL, returned without a trailing slash.
fn check_public_url(url: &str) -> anyhow::Result<String> {
    let trimmed = url.trim_end_matches('/');
    let ok = (trimmed.starts_with("http://") || trimmed.starts_with("https://"))
        && trimmed
            .split("://")
            .nth(1)
            .is_some_and(|rest| !rest.is_empty());
    if !ok {
        bail!(
            "public-url \"{url}\" must be an absolute http or https URL, e.g. https://quintet.example.com"
        );
    }
    Ok(trimmed.to_owned())
}

/// Read and check the TOML file at `path`.
pub(crate) fn read_file(path: &Path) -> anyhow::Result<FileConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("config file {} is not valid", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::{DataChoice, QueueChoice, RegistryChoice, SearchChoice};
    use std::io::Write;

    fn parse(args: &[&str]) -> ServeArgs {
        let mut argv = vec!["quintet", "serve"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Serve(a) => a,
            other => panic!("not serve: {other:?}"),
        }
    }

    fn toml_file(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        f
    }

    #[test]
    fn defaults_apply_when_nothing_is_set() {
        let c = ServeArgs::default().resolve().unwrap();
        assert_eq!(c.server.listen.to_string(), "127.0.0.1:6363");
        assert_eq!(c.data_dir, PathBuf::from("quintet-data"));
        assert_eq!(c.server.max_json_depth, 64);
        assert_eq!(c.log_format, LogFormat::Text);
    }

    #[test]
    fn a_flag_beats_the_file_and_the_file_beats_the_default() {
        let f = toml_file(
            "listen = \"127.0.0.1:7000\"\ndata_dir = \"/from/file\"\nmax_json_depth = 9\n",
        );
        let path = f.path().to_str().unwrap();
        let c = parse(&["--config", path, "--listen", "127.0.0.1:8000"])
            .resolve()
            .unwrap();
        assert_eq!(c.server.listen.to_string(), "127.0.0.1:8000");
        assert_eq!(c.data_dir, PathBuf::from("/from/file"));
        assert_eq!(c.server.max_json_depth, 9);
    }

    #[test]
    fn the_header_timeout_is_bounded() {
        let c = ServeArgs::default().resolve().unwrap();
        assert_eq!(c.server.header_timeout, Duration::from_secs(30));
        let f = toml_file("header_timeout = 5\n");
        let c = parse(&["--config", f.path().to_str().unwrap()])
            .resolve()
            .unwrap();
        assert_eq!(c.server.header_timeout, Duration::from_secs(5));
        for bad in ["0", "86401", "18446744073709551615"] {
            let err = parse(&["--header-timeout", bad]).resolve().unwrap_err();
            assert!(
                format!("{err:#}").contains("header-timeout must be 1 to 86400 seconds"),
                "{bad}: {err:#}"
            );
        }
    }

    #[test]
    fn unknown_keys_in_the_file_are_errors() {
        let f = toml_file("lisen = \"127.0.0.1:7000\"\n");
        let err = parse(&["--config", f.path().to_str().unwrap()])
            .resolve()
            .unwrap_err();
        assert!(format!("{err:#}").contains("lisen"), "{err:#}");
    }

    #[test]
    fn a_missing_file_is_an_error() {
        let err = parse(&["--config", "/nonexistent/q.toml"])
            .resolve()
            .unwrap_err();
        assert!(format!("{err:#}").contains("/nonexistent/q.toml"));
    }

    #[test]
    fn public_url_is_checked_and_trimmed() {
        let c = parse(&["--public-url", "https://q.example.com/"])
            .resolve()
            .unwrap();
        assert_eq!(
            c.server.public_url.as_deref(),
            Some("https://q.example.com")
        );
        assert!(parse(&["--public-url", "q.example.com"]).resolve().is_err());
    }

    #[test]
    fn the_registry_is_embedded_unless_configured() {
        let c = ServeArgs::default().resolve().unwrap();
        assert_eq!(c.adapters.registry, RegistryChoice::Embedded);
        let f = toml_file("registry = \"embedded\"\n");
        let c = parse(&["--config", f.path().to_str().unwrap()])
            .resolve()
            .unwrap();
        assert_eq!(c.adapters.registry, RegistryChoice::Embedded);
        let err = parse(&["--registry", "sqlite:///tmp/x"])
            .resolve()
            .unwrap_err();
        assert!(format!("{err}").contains("--registry must be"), "{err}");
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn a_postgres_registry_comes_from_a_flag_or_the_file() {
        let f = toml_file("registry = \"postgres://q@file-host/q\"\n");
        let path = f.path().to_str().unwrap();
        let url = |c: ServeConfig| match c.adapters.registry {
            RegistryChoice::Postgres(pg) => pg.url,
            other => panic!("{other:?}"),
        };
        let c = parse(&["--config", path]).resolve().unwrap();
        assert_eq!(url(c), "postgres://q@file-host/q");
        let c = parse(&["--config", path, "--registry", "postgresql://q@flag-host/q"])
            .resolve()
            .unwrap();
        assert_eq!(url(c), "postgresql://q@flag-host/q");
    }

    #[test]
    fn the_cache_is_embedded_unless_configured() {
        let c = ServeArgs::default().resolve().unwrap();
        assert_eq!(c.adapters.cache, CacheChoice::Embedded);
        let f = toml_file("cache = \"embedded\"\n");
        let c = parse(&["--config", f.path().to_str().unwrap()])
            .resolve()
            .unwrap();
        assert_eq!(c.adapters.cache, CacheChoice::Embedded);
        let err = parse(&["--cache", "memcached://h:11211"])
            .resolve()
            .unwrap_err();
        assert!(format!("{err}").contains("--cache must be"), "{err}");
    }

    #[cfg(all(feature = "redis", feature = "postgres"))]
    #[test]
    fn a_redis_cache_comes_from_a_flag_or_the_file() {
        let f = toml_file(
            "registry = \"postgres://q@h/q\"\ncache = \"redis://file-host:6379/1\"\n\
             cache_max_bytes = 10\n",
        );
        let path = f.path().to_str().unwrap();
        let url = |c: ServeConfig| match c.adapters.cache {
            CacheChoice::Redis(r) => r.url,
            other => panic!("{other:?}"),
        };
        let c = parse(&["--config", path]).resolve().unwrap();
        assert_eq!(url(c), "redis://file-host:6379/1");
        let c = parse(&["--config", path, "--cache", "redis://flag-host:6379/2"])
            .resolve()
            .unwrap();
        assert_eq!(url(c), "redis://flag-host:6379/2");
    }

    #[test]
    fn the_queue_is_embedded_unless_configured() {
        let c = ServeArgs::default().resolve().unwrap();
        assert_eq!(c.adapters.queue, QueueChoice::Embedded);
        let err = parse(&["--queue", "amqp://h"]).resolve().unwrap_err();
        assert!(format!("{err}").contains("--queue must be"), "{err}");
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn a_postgres_queue_comes_from_a_flag_or_the_file_and_needs_a_shared_registry() {
        let f = toml_file(
            "registry = \"postgres://q@file-host/q\"\nqueue = \"postgres://q@file-host/q\"\n",
        );
        let path = f.path().to_str().unwrap();
        let url = |c: ServeConfig| match c.adapters.queue {
            QueueChoice::Postgres(pg) => pg.url,
            other => panic!("{other:?}"),
        };
        let c = parse(&["--config", path]).resolve().unwrap();
        assert_eq!(url(c), "postgres://q@file-host/q");
        let c = parse(&["--config", path, "--queue", "postgresql://q@flag-host/q"])
            .resolve()
            .unwrap();
        assert_eq!(url(c), "postgresql://q@flag-host/q");
        let err = parse(&["--queue", "postgres://q@h/q"])
            .resolve()
            .unwrap_err();
        assert!(format!("{err}").contains("needs --registry"), "{err}");
    }

    #[test]
    fn storage_is_embedded_unless_configured() {
        let c = parse(&[]).resolve().unwrap();
        assert_eq!(c.adapters.storage, StorageChoice::Embedded);
        let err = parse(&["--storage", "s3://?secret_access_key=hidden"])
            .resolve()
            .unwrap_err();
        assert!(format!("{err:#}").contains("storage"), "{err:#}");
        assert!(!format!("{err:#}").contains("hidden"), "{err:#}");
        let err = parse(&["--storage", "file:///tmp/x"])
            .resolve()
            .unwrap_err();
        assert!(format!("{err}").contains("--storage must be"), "{err}");
    }

    #[cfg(all(feature = "s3", feature = "postgres"))]
    #[test]
    fn s3_storage_comes_from_a_flag_or_the_file_and_needs_a_shared_registry() {
        let url = "s3://media?endpoint=http://127.0.0.1:18333&access_key_id=k\
                   &secret_access_key=hidden";
        let err = parse(&["--storage", url]).resolve().unwrap_err();
        assert!(format!("{err}").contains("--registry postgres://"), "{err}");
        assert!(!format!("{err}").contains("hidden"), "{err}");
        let f = toml_file(&format!(
            "registry = \"postgres://q@h/q\"\nstorage = \"{url}\"\n"
        ));
        let c = parse(&["--config", f.path().to_str().unwrap()])
            .resolve()
            .unwrap();
        let StorageChoice::S3(s3) = c.adapters.storage else {
            panic!("S3 from the file")
        };
        assert_eq!(s3.bucket, "media");
        assert!(!format!("{s3:?}").contains("hidden"));
    }

    #[test]
    fn search_is_embedded_unless_configured() {
        let c = ServeArgs::default().resolve().unwrap();
        assert_eq!(c.adapters.search, SearchChoice::Embedded);
        let err = parse(&["--search", "tantivy"]).resolve().unwrap_err();
        assert!(format!("{err}").contains("--search must be"), "{err}");
        let err = parse(&["--search", "postgres://q@h/q"])
            .resolve()
            .unwrap_err();
        #[cfg(feature = "postgres")]
        assert!(format!("{err}").contains("needs --registry"), "{err}");
        #[cfg(not(feature = "postgres"))]
        assert!(format!("{err}").contains("without PostgreSQL"), "{err}");
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn search_on_postgres_comes_from_a_flag_or_the_file() {
        let f = toml_file(
            "registry = \"postgres://q@file-host/q\"\nsearch = \"postgres://q@file-host/q\"\n",
        );
        let path = f.path().to_str().unwrap();
        let url = |c: ServeConfig| match c.adapters.search {
            SearchChoice::Postgres(pg) => pg.url,
            other => panic!("{other:?}"),
        };
        let c = parse(&["--config", path]).resolve().unwrap();
        assert_eq!(url(c), "postgres://q@file-host/q");
        let c = parse(&["--config", path, "--search", "postgresql://q@flag-host/q"])
            .resolve()
            .unwrap();
        assert_eq!(url(c), "postgresql://q@flag-host/q");
    }

    #[test]
    fn data_is_embedded_unless_configured() {
        let c = ServeArgs::default().resolve().unwrap();
        assert_eq!(c.adapters.data, DataChoice::Embedded);
        let err = parse(&["--data", "mongodb://h/db"]).resolve().unwrap_err();
        assert!(format!("{err}").contains("--data must be"), "{err}");
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn the_registry_follows_data_to_postgres() {
        let url = |c: &PgChoice| match c {
            PgChoice::Postgres(pg) => pg.url.clone(),
            other => panic!("{other:?}"),
        };
        let c = parse(&["--data", "postgres://q@flag-host/q"])
            .resolve()
            .unwrap();
        assert_eq!(url(&c.adapters.data), "postgres://q@flag-host/q");
        assert_eq!(url(&c.adapters.registry), "postgres://q@flag-host/q");
        let f = toml_file("data = \"postgres://q@file-host/q\"\n");
        let path = f.path().to_str().unwrap();
        let c = parse(&["--config", path]).resolve().unwrap();
        assert_eq!(url(&c.adapters.registry), "postgres://q@file-host/q");
        let c = parse(&["--config", path, "--registry", "postgres://q@other/q"])
            .resolve()
            .unwrap();
        assert_eq!(url(&c.adapters.data), "postgres://q@file-host/q");
        assert_eq!(url(&c.adapters.registry), "postgres://q@other/q");
        let err = parse(&["--config", path, "--registry", "embedded"])
            .resolve()
            .unwrap_err();
        assert!(
            format!("{err}").contains("--data postgres://… needs --registry"),
            "{err}"
        );
    }

    #[cfg(feature = "redis")]
    #[test]
    fn a_redis_cache_needs_a_shared_registry() {
        let err = parse(&["--cache", "redis://127.0.0.1:6379/0"])
            .resolve()
            .unwrap_err();
        assert!(
            format!("{err}").contains("--cache redis://… needs --registry"),
            "{err}"
        );
    }

    #[test]
    fn queue_settings_resolve_from_flags_and_file() {
        let c = ServeArgs::default().resolve().unwrap();
        assert!(!c.server.queue_deny_private);
        assert_eq!(c.server.queue_backoff, Duration::from_secs(5));
        let c = parse(&["--queue-deny-private", "--queue-backoff-ms", "20"])
            .resolve()
            .unwrap();
        assert!(c.server.queue_deny_private);
        assert_eq!(c.server.queue_backoff, Duration::from_millis(20));
        let f = toml_file("queue_deny_private = true\nqueue_backoff_ms = 700\n");
        let path = f.path().to_str().unwrap();
        let c = parse(&["--config", path]).resolve().unwrap();
        assert!(c.server.queue_deny_private);
        assert_eq!(c.server.queue_backoff, Duration::from_millis(700));
        let c = parse(&["--config", path, "--queue-deny-private=false"])
            .resolve()
            .unwrap();
        assert!(!c.server.queue_deny_private, "the flag beats the file");
    }

    #[test]
    fn zero_limits_are_refused() {
        assert!(parse(&["--max-json-depth", "0"]).resolve().is_err());
        assert!(parse(&["--max-body-bytes", "0"]).resolve().is_err());
        assert!(parse(&["--cache-max-bytes", "0"]).resolve().is_err());
    }

    #[test]
    fn cache_settings_from_flags_and_the_file() {
        let c = ServeArgs::default().resolve().unwrap();
        assert_eq!(c.cache, quintet_embedded::cache::CacheOptions::default());
        let c = parse(&["--cache-max-bytes", "1048576", "--cache-memory-only"])
            .resolve()
            .unwrap();
        assert_eq!(c.cache.max_bytes, Some(1_048_576));
        assert!(c.cache.memory_only);
        assert!(
            !parse(&["--cache-memory-only=false"])
                .resolve()
                .unwrap()
                .cache
                .memory_only
        );
        let f = toml_file("cache_max_bytes = 4096\ncache_memory_only = true\n");
        let path = f.path().to_str().unwrap();
        let c = parse(&["--config", path]).resolve().unwrap();
        assert_eq!(c.cache.max_bytes, Some(4096));
        assert!(c.cache.memory_only);
        let c = parse(&[
            "--config",
            path,
            "--cache-memory-only=false",
            "--cache-max-bytes",
            "9",
        ])
        .resolve()
        .unwrap();
        assert_eq!(c.cache.max_bytes, Some(9));
        assert!(!c.cache.memory_only, "a flag beats the file");
    }

    #[test]
    fn no_auth_refuses_non_loopback_addresses_unless_told() {
        let err = parse(&["--listen", "0.0.0.0:6363"]).resolve().unwrap_err();
        assert!(
            format!("{err}").contains("refusing to listen on 0.0.0.0:6363"),
            "{err}"
        );
        assert!(
            parse(&["--listen", "0.0.0.0:6363", "--insecure-no-auth"])
                .resolve()
                .is_ok()
        );
        assert!(parse(&["--listen", "[::1]:6363"]).resolve().is_ok());
        let secret = "s".repeat(32);
        let c = parse(&[
            "--listen",
            "0.0.0.0:6363",
            "--auth",
            "jwt",
            "--jwt-secret",
            &secret,
        ])
        .resolve()
        .unwrap();
        assert_eq!(
            c.server.domain_auth,
            DomainAuth::Jwt {
                secret: Secret::from_stored(secret),
                sub: None
            }
        );
    }

    #[test]
    fn jwt_settings_are_checked() {
        let msg = |args: &[&str]| format!("{}", parse(args).resolve().unwrap_err());
        assert!(msg(&["--auth", "jwt"]).contains("needs --jwt-secret"));
        assert!(msg(&["--auth", "jwt", "--jwt-secret", "short"]).contains("at least 32 bytes"));
        assert!(msg(&["--jwt-secret", &"s".repeat(32)]).contains("only apply with --auth jwt"));
        assert!(msg(&["--jwt-sub", "me"]).contains("only apply with --auth jwt"));
    }

    #[test]
    fn auth_settings_come_from_the_file_too() {
        let f = toml_file(&format!(
            "auth = \"jwt\"\njwt_secret = \"{}\"\njwt_sub = \"svc\"\nadmin_token = \"{}\"\n",
            "j".repeat(40),
            "a".repeat(20)
        ));
        let c = parse(&["--config", f.path().to_str().unwrap()])
            .resolve()
            .unwrap();
        assert!(matches!(
            c.server.domain_auth,
            DomainAuth::Jwt { ref sub, .. } if sub.as_deref() == Some("svc")
        ));
        assert_eq!(
            c.server.admin_token,
            Some(Secret::from_stored("a".repeat(20)))
        );
    }

    #[test]
    fn admin_tokens_and_tls_files_are_checked() {
        let msg = |args: &[&str]| format!("{}", parse(args).resolve().unwrap_err());
        assert!(msg(&["--admin-token", "short"]).contains("at least 16"));
        assert!(msg(&["--admin-token", "with spaces in it ok"]).contains("visible ASCII"));
        assert!(msg(&["--tls-cert", "c.pem"]).contains("go together"));
        let c = parse(&["--tls-cert", "c.pem", "--tls-key", "k.pem"])
            .resolve()
            .unwrap();
        assert_eq!(
            c.server.tls,
            Some(TlsFiles {
                cert: "c.pem".into(),
                key: "k.pem".into()
            })
        );
    }
}
