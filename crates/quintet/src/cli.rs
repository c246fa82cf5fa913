//! Command-line arguments, `QUINTET_*` environment variables and the optional TOML file,
//! merged into one validated configuration.
//!
//! Every setting is defined once, as a field of [`ServeArgs`]: the field's name is the TOML
//! key, its kebab-case form the flag (`--max-body-bytes`), and its upper-case form with a
//! `QUINTET_` prefix the environment variable (`QUINTET_MAX_BODY_BYTES`, added to every
//! flag by [`command`](crate::command::command)); its default and checks live in [`ServeArgs::resolve`]. So a new
//! setting cannot be forgotten in one of the three places, and a test checks all three
//! for every setting.
//!
//! Precedence, highest first: flag, environment variable, TOML file, built-in default.
//! clap resolves flag over environment; the file fills what both left unset. Booleans take
//! an optional value (`--cache-memory-only=false`), so a flag can turn off what the file
//! turned on.

use std::{
    fmt,
    net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs},
    path::{Path, PathBuf},
    str::FromStr,
    time::Duration,
};

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use quintet_core::{keyring::TokenDigest, keys::Secret};
use quintet_server::config::{DomainAuth, PrivateTargets, TlsFiles};
use serde::{Deserialize, Serialize};

use crate::{
    adapters::{self, Adapters},
    limits::{LimitArgs, Limits},
};

/// How domain-form requests are authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// No authentication; only loopback addresses unless --insecure-no-auth.
    None,
    /// HS256 JWTs signed with --jwt-secret.
    Jwt,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Which queues may deliver to loopback, private and link-local addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PrivateTargetsArg {
    /// No queue.
    Deny,
    /// Only queues of the domain application (the operator's own), not the queues of
    /// applications served to tenants.
    Domain,
    /// Every queue (one trusted user; never with tenants).
    Allow,
}

/// An address to listen on: `IP:port`, `host:port` (resolved, e.g. `localhost:7000`),
/// `:port` or a bare port (both on 127.0.0.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenAddr(pub SocketAddr);

impl FromStr for ListenAddr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if let Ok(addr) = s.parse::<SocketAddr>() {
            return Ok(Self(addr));
        }
        let port = s.strip_prefix(':').unwrap_or(s);
        if let Ok(port) = port.parse::<u16>() {
            return Ok(Self(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)));
        }
        let bad = || {
            format!(
                "\"{s}\" is not an address to listen on: use IP:port (127.0.0.1:6363, \
                 0.0.0.0:6363, [::1]:6363), host:port (localhost:6363), :port or a port"
            )
        };
        if !s.contains(':') {
            return Err(bad());
        }
        let mut addrs = s.to_socket_addrs().map_err(|_| bad())?;
        // Prefer IPv4 for names such as localhost that resolve to both.
        let all: Vec<SocketAddr> = addrs.by_ref().collect();
        all.iter()
            .find(|a| a.is_ipv4())
            .or(all.first())
            .copied()
            .map(Self)
            .ok_or_else(bad)
    }
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Serialize for ListenAddr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for ListenAddr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

fn json_value(text: &str) -> Result<serde_json::Value, String> {
    serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))
}

fn boolish() -> clap::builder::BoolishValueParser {
    clap::builder::BoolishValueParser::new()
}

/// Settings of `quintet serve`. Every one can also be set by its environment variable or
/// in the TOML file given with `--config` (see the module documentation).
#[derive(Debug, Default, Clone, Args, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeArgs {
    /// TOML file with settings; flags and environment variables override it.
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    pub config: Option<PathBuf>,

    /// Address and port to listen on: IP:port, host:port, :port or a port (the last two on
    /// 127.0.0.1) [default: 127.0.0.1:6363]
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<ListenAddr>,

    /// Directory holding all data of the embedded stores [default: ./quintet-data]
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// Directory the backups of `POST /_admin/backups` are written into, by name
    /// [default: `backups` in the data directory]
    #[arg(long, value_name = "DIR")]
    pub backup_dir: Option<PathBuf>,

    /// Where accounts, applications, keys and instances are recorded: `embedded` (in the
    /// data directory, one node) or a PostgreSQL URL shared by every node, e.g.
    /// postgres://quintet:secret@db:5432/quintet [default: embedded]
    #[arg(long, value_name = "URL", hide_env_values = true)]
    pub registry: Option<String>,

    /// Where documents are kept: `embedded` (in the data directory, one node) or a
    /// PostgreSQL URL shared by every node; the registry follows it to PostgreSQL unless
    /// --registry says otherwise [default: embedded]
    #[arg(long, value_name = "URL", hide_env_values = true)]
    pub data: Option<String>,

    /// Where cache entries are kept: `embedded` (in the data directory, one node) or a
    /// Redis URL shared by every node, e.g. redis://:secret@cache:6379/0. Use it with a
    /// PostgreSQL --registry, whose identity namespaces the keys [default: embedded]
    #[arg(long, value_name = "URL", hide_env_values = true)]
    pub cache: Option<String>,

    /// Where queued jobs are kept: `embedded` (in the data directory, one node) or a
    /// PostgreSQL URL shared by every node, which then all deliver jobs (needs a PostgreSQL
    /// --registry) [default: embedded]
    #[arg(long, value_name = "URL", hide_env_values = true)]
    pub queue: Option<String>,

    /// Where storage objects are kept: `embedded` (files in the data directory) or an
    /// S3-compatible store shared by every node, e.g.
    /// s3://bucket[/prefix]?endpoint=http://127.0.0.1:9000&region=us-east-1 with credentials
    /// as access_key_id and secret_access_key parameters or from AWS_ACCESS_KEY_ID and
    /// AWS_SECRET_ACCESS_KEY; needs --registry postgres://… [default: embedded]
    #[arg(long, value_name = "URL", hide_env_values = true)]
    pub storage: Option<String>,

    /// Where search indexes live: `embedded` (tantivy, in the data directory) or a
    /// PostgreSQL URL shared by every node (needs a PostgreSQL --registry)
    /// [default: embedded]
    #[arg(long, value_name = "URL", hide_env_values = true)]
    pub search: Option<String>,

    /// Largest JSON request body, in bytes; larger bodies get 413 [default: 16777216]
    #[arg(long, value_name = "BYTES")]
    pub max_body_bytes: Option<usize>,

    /// Deepest nesting of arrays and objects in a JSON body [default: 64]
    #[arg(long, value_name = "LEVELS")]
    pub max_json_depth: Option<usize>,

    /// Seconds in-flight requests may run after SIGINT/SIGTERM [default: 30]
    #[arg(long, value_name = "SECONDS")]
    pub shutdown_timeout: Option<u64>,

    /// Seconds a client may take to send a whole request head, and that an idle kept-alive
    /// connection is kept; past them the connection is closed [default: 30]
    #[arg(long, value_name = "SECONDS")]
    pub header_timeout: Option<u64>,

    /// URL clients reach this server at, for the absolute URLs it hands out (pre-signed
    /// URLs, connection strings); its host is also accepted in Host headers
    /// [default: built from each request's Host header]
    #[arg(long, value_name = "URL")]
    pub public_url: Option<String>,

    /// With --auth none: further Host header values accepted besides loopback names and
    /// addresses, the listen address and --public-url's host (comma-separated host or
    /// host:port; `*` accepts any, which re-opens DNS rebinding) [default: none]
    #[arg(long, value_name = "HOSTS", value_delimiter = ',')]
    pub allowed_hosts: Option<Vec<String>>,

    /// Web origins (scheme://host, or scheme://host:port) whose pages may call the domain form and the
    /// admin API from a browser (CORS), e.g. http://localhost:5173 for a local front end;
    /// `*` allows any. Pages of the server's own origin always may; the application form
    /// and pre-signed URLs answer every origin [default: none]
    #[arg(long, value_name = "ORIGINS", value_delimiter = ',')]
    pub cors_origins: Option<Vec<String>>,

    /// How domain-form requests are authenticated: `none`, or `jwt` (HS256 tokens signed
    /// with --jwt-secret). The application form always needs a token signed with one of the
    /// application's keys [default: none]
    #[arg(long, value_name = "MODE")]
    pub auth: Option<AuthMode>,

    /// With --auth jwt: the HMAC secret domain-form tokens are signed with (at least 32
    /// bytes)
    #[arg(long, value_name = "SECRET", hide_env_values = true)]
    pub jwt_secret: Option<String>,

    /// With --auth jwt: the `sub` claim domain-form tokens must carry [default: any]
    #[arg(long, value_name = "SUB")]
    pub jwt_sub: Option<String>,

    /// With --auth jwt: the `aud` claim domain-form tokens must carry (a string, or an
    /// array holding it) [default: not checked]
    #[arg(long, value_name = "AUD")]
    pub jwt_aud: Option<String>,

    /// Longest validity accepted for any token (domain or application form), in seconds
    /// from now to its exp; tokens valid for longer are refused [default: no limit]
    #[arg(long, value_name = "SECONDS")]
    pub jwt_max_ttl: Option<u64>,

    /// With --auth none: listen on a non-loopback address anyway (only when something in
    /// front of quintet authenticates requests) [default: false]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true",
          value_parser = boolish())]
    pub insecure_no_auth: Option<bool>,

    /// Bearer token of the admin API (/_admin), at least 16 characters; prefer the
    /// environment variable to the flag, which other users can see in the process list
    /// [default: derived from the master key; `quintet admin-token` prints it]
    #[arg(long, value_name = "TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,

    /// Bearer token /_metrics needs (the admin token works too), at least 16 characters;
    /// give it to the scraper so it need not hold the admin token [default: /_metrics is
    /// public]
    #[arg(long, value_name = "TOKEN", hide_env_values = true)]
    pub metrics_token: Option<String>,

    /// Requests per second one client address may send, with a burst of as many; 429 with
    /// Retry-After beyond [default: unlimited]
    #[arg(long, value_name = "N")]
    pub rate_limit_per_client: Option<u32>,

    /// Requests per second any one access key may send, also below what its account's plan
    /// allows (the plan's requests_per_second_per_key, see --plan-limits) [default: the
    /// plan's rate]
    #[arg(long, value_name = "N")]
    pub rate_limit_per_key: Option<u32>,

    /// File holding the master key that seals secrets at rest and derives the admin token
    /// and the pre-signed URL key; created (0600) when missing. Keep it outside the data
    /// directory and give every node the same key [default:
    /// $XDG_CONFIG_HOME/quintet/master.key, else ~/.config/quintet/master.key]
    #[arg(long, value_name = "FILE")]
    pub master_key_file: Option<PathBuf>,

    /// The master key itself (64 hex digits), instead of --master-key-file; prefer the
    /// environment variable to the flag
    #[arg(long, value_name = "KEY", hide_env_values = true)]
    pub master_key: Option<String>,

    /// During a rotation: the previous master key's file; secrets sealed with it are
    /// resealed with the current key at start, and its pre-signed URLs stay valid
    #[arg(long, value_name = "FILE")]
    pub previous_master_key_file: Option<PathBuf>,

    /// Start even though the data directory can be read or entered by other users
    /// [default: false: such a directory is refused]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true",
          value_parser = boolish())]
    pub insecure_shared_data_dir: Option<bool>,

    /// PEM certificate chain to serve HTTPS with (needs --tls-key) [default: plain HTTP]
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,

    /// Most bytes (keys plus values) the cache entries of all instances may take; when a
    /// write would go beyond, the least recently used entries are evicted [default: no
    /// limit, nothing is evicted]
    #[arg(long, value_name = "BYTES")]
    pub cache_max_bytes: Option<u64>,

    /// Keep cache entries in memory only: nothing written to disk, every entry gone after
    /// a restart [default: false, entries are durable]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true",
          value_parser = boolish())]
    pub cache_memory_only: Option<bool>,

    /// Which queues may deliver to loopback, private and link-local addresses: `deny`
    /// (none), `domain` (only the domain application's, never a tenant's) or `allow` (all).
    /// Checked at creation and at every delivery, after DNS resolution; no queue may
    /// deliver to quintet itself [default: domain]
    #[arg(long, value_name = "WHO")]
    pub queue_private_targets: Option<PrivateTargetsArg>,

    /// Older spelling of --queue-private-targets deny [default: false]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true",
          value_parser = boolish())]
    pub queue_deny_private: Option<bool>,

    /// Send every queue delivery through this HTTP(S) proxy, e.g. an egress proxy such as
    /// Smokescreen that enforces what workers may be reached [default: direct]
    #[arg(long, value_name = "URL", hide_env_values = true)]
    pub queue_egress_proxy: Option<String>,

    /// Changes to the limits of the plans, as JSON (in the file, a table): e.g.
    /// {"starter": {"object_bytes": 10485760, "queues_per_app": 2}}. Limits:
    /// instances_per_app, queues_per_app, deliveries_per_app, object_bytes,
    /// stored_bytes_per_app, cache_bytes_per_app, requests_per_second_per_key (see
    /// docs/security.md) [default: the
    /// built-in limits]
    #[arg(long, value_name = "JSON", value_parser = json_value)]
    pub plan_limits: Option<serde_json::Value>,

    /// Milliseconds before the first retry of an unreachable queue worker; doubles with each
    /// retry (with jitter), up to an hour [default: 5000]
    #[arg(long, value_name = "MS")]
    pub queue_backoff_ms: Option<u64>,

    /// Most change feeds (longpoll, continuous, eventsource) open on this node at once;
    /// more are answered 429 [default: 10000]
    #[arg(long, value_name = "N")]
    pub feed_max_streams: Option<usize>,

    /// Most change feeds one client (an access key, a domain token's subject, or else an
    /// address) may hold open on this node; more are answered 429 [default: 100]
    #[arg(long, value_name = "N")]
    pub feed_max_streams_per_client: Option<usize>,

    /// Seconds a data change (or a queue or storage event) stays in its instance's log: a
    /// feed may resume from a sequence that recent, an older one is answered 410
    /// [default: 604800, a week]
    #[arg(long, value_name = "SECONDS")]
    pub feed_retention: Option<u64>,

    /// Answer a GET of a document or cache entry sent without an X-SVC-LEGACY-GET header
    /// with the bare document, as old hyper clients (hyper-connect below 0.2, the Python
    /// client) expect; the header still decides when sent (docs/compatibility.md)
    /// [default: false: {ok, doc}]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true",
          value_parser = boolish())]
    pub legacy_get_default: Option<bool>,

    /// Log filter, e.g. `info`, `warn`, `quintet=debug` [default: info]
    #[arg(long, value_name = "FILTER")]
    pub log: Option<String>,

    /// Log format [default: text]
    #[arg(long, value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,

    /// Seconds a request body may pause, and the time every body starts with; each
    /// --body-min-rate bytes received earn another second, so uploads that keep moving
    /// finish however large they are [default: 30]
    #[arg(long, value_name = "SECONDS")]
    pub body_timeout: Option<u64>,

    /// Bytes per second that earn a request body another second; 0 counts pauses only
    /// [default: 1024]
    #[arg(long, value_name = "BYTES")]
    pub body_min_rate: Option<u64>,

    /// Most connections open at once; more are closed as they arrive [default: half the
    /// process' open-file limit]
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,

    /// Most connections open at once from one client address (IPv6: per /64); 0 for no
    /// bound, e.g. behind a proxy whose address every connection comes from [default: 256,
    /// or a quarter of --max-connections when lower]
    #[arg(long, value_name = "N")]
    pub max_connections_per_client: Option<usize>,

    /// Bytes of free disk space kept for deletes: writes to the data directory answer 507
    /// while less is free, and deletes go on [default: 5 % of the data directory's file
    /// system, at most 64 MiB]
    #[arg(long, value_name = "BYTES")]
    pub disk_reserve: Option<u64>,

    /// Milliseconds to open a connection to PostgreSQL, Redis or S3; an engine that does
    /// not answer in time counts as down [default: 2000]
    #[arg(long, value_name = "MS")]
    pub engine_connect_timeout: Option<u64>,
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
    /// Where `POST /_admin/backups` writes backups.
    pub backup_dir: PathBuf,
    /// The configured admin token; `None` derives it from the master key.
    pub admin_token: Option<Secret>,
    /// Start even if the data directory is open to other users.
    pub shared_data_dir: bool,
    /// Where the master keys come from.
    pub master_key: crate::master_key::MasterKeySource,
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
    /// The settings of [`crate::limits`].
    pub(crate) fn limits(&self) -> LimitArgs {
        LimitArgs {
            body_timeout: self.body_timeout,
            body_min_rate: self.body_min_rate,
            max_connections: self.max_connections,
            max_connections_per_client: self.max_connections_per_client,
            disk_reserve: self.disk_reserve,
            engine_connect_timeout: self.engine_connect_timeout,
        }
    }

    /// These settings over `file`'s: each setting given here wins, the file fills the rest.
    pub fn over(self, file: ServeArgs) -> anyhow::Result<ServeArgs> {
        let config = self.config.clone();
        let mut merged = serde_json::to_value(file).context("reading the config file")?;
        let flags = serde_json::to_value(self).context("reading the flags")?;
        if let (Some(merged), Some(flags)) = (merged.as_object_mut(), flags.as_object()) {
            for (key, value) in flags {
                if !value.is_null() {
                    merged.insert(key.clone(), value.clone());
                }
            }
        }
        let mut out: ServeArgs =
            serde_json::from_value(merged).context("merging flags and the config file")?;
        out.config = config;
        Ok(out)
    }

    /// The settings of flags and environment (already in `self`) over those of the
    /// `--config` file, if any.
    pub fn with_file(self) -> anyhow::Result<ServeArgs> {
        match &self.config {
            Some(path) => {
                let file = read_file(path)?;
                self.over(file)
            }
            None => Ok(self),
        }
    }

    /// Merge flags and environment (already in `self`) over the TOML file and defaults.
    pub fn resolve(self) -> anyhow::Result<ServeConfig> {
        let s = self.with_file()?;
        let defaults = quintet_server::Config::default();
        let limits = s.limits().resolve(crate::limits::fd_limit())?;
        let max_json_depth = s.max_json_depth.unwrap_or(defaults.max_json_depth);
        if max_json_depth == 0 {
            bail!("max-json-depth must be at least 1");
        }
        let max_body_bytes = s.max_body_bytes.unwrap_or(defaults.max_body_bytes);
        if max_body_bytes == 0 {
            bail!("max-body-bytes must be at least 1");
        }
        let header_timeout = s
            .header_timeout
            .map_or(defaults.header_timeout, Duration::from_secs);
        if header_timeout.is_zero() || header_timeout > MAX_HEADER_TIMEOUT {
            bail!(
                "header-timeout must be 1 to {} seconds",
                MAX_HEADER_TIMEOUT.as_secs()
            );
        }
        let listen = s.listen.map_or(defaults.listen, |l| l.0);
        let domain_auth = domain_auth(
            s.auth.unwrap_or(AuthMode::None),
            s.jwt_secret,
            s.jwt_sub,
            s.jwt_aud,
        )?;
        let insecure_no_auth = s.insecure_no_auth.unwrap_or(false);
        if domain_auth == DomainAuth::None && !listen.ip().is_loopback() && !insecure_no_auth {
            bail!(
                "refusing to listen on {listen} without authentication: with --auth none (the \
                 default) anyone who reaches that address can read and change every \
                 domain-form instance. Use --auth jwt with --jwt-secret, listen on a loopback \
                 address such as 127.0.0.1, or pass --insecure-no-auth when something in front \
                 of quintet authenticates requests"
            );
        }
        let jwt_max_ttl = match s.jwt_max_ttl {
            Some(0) => bail!("jwt-max-ttl must be at least 1 second; leave it unset for no limit"),
            other => other.map(Duration::from_secs),
        };
        let admin_token = s.admin_token.map(|t| check_admin_token(&t)).transpose()?;
        let metrics_token = s
            .metrics_token
            .as_deref()
            .map(|t| check_token("--metrics-token", t).map(|t| TokenDigest::of(t.as_bytes())))
            .transpose()?;
        for (flag, rate) in [
            ("--rate-limit-per-client", s.rate_limit_per_client),
            ("--rate-limit-per-key", s.rate_limit_per_key),
        ] {
            if rate == Some(0) {
                bail!("{flag} must be at least 1 request per second; leave it unset for no limit");
            }
        }
        let tls = match (s.tls_cert, s.tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
            (None, None) => None,
            _ => bail!("--tls-cert and --tls-key go together: give both files, or neither"),
        };
        let adapters = Adapters::parse(
            adapters::Settings {
                registry: s.registry,
                data: s.data,
                cache: s.cache,
                queue: s.queue,
                storage: s.storage,
                search: s.search,
            },
            |var| std::env::var(var).ok(),
        )?;
        let mut adapters = adapters;
        adapters.set_connect_timeout(limits.engine_connect_timeout);
        let cache_max_bytes = s.cache_max_bytes;
        if cache_max_bytes == Some(0) {
            bail!("cache-max-bytes must be at least 1; leave it unset for no limit");
        }
        let public_url = s.public_url.map(|u| check_public_url(&u)).transpose()?;
        let allowed_hosts = s
            .allowed_hosts
            .unwrap_or_default()
            .iter()
            .map(|h| check_host(h))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let cors_origins = s
            .cors_origins
            .unwrap_or_default()
            .iter()
            .map(|o| check_origin(o))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let queue_private_targets = match (s.queue_private_targets, s.queue_deny_private) {
            (Some(_), Some(true)) => bail!(
                "--queue-deny-private is the older spelling of --queue-private-targets deny; \
                 give only one of them"
            ),
            (Some(p), _) => p,
            (None, Some(true)) => PrivateTargetsArg::Deny,
            (None, _) => PrivateTargetsArg::Domain,
        };
        let plan_limits = match &s.plan_limits {
            Some(changes) => quintet_core::accounts::PlanLimits::with_changes(changes)?,
            None => quintet_core::accounts::PlanLimits::default(),
        };
        let queue_egress_proxy = s
            .queue_egress_proxy
            .map(|u| check_proxy_url(&u))
            .transpose()?;
        let data_dir = s.data_dir.unwrap_or_else(|| PathBuf::from("quintet-data"));
        let backup_dir = s
            .backup_dir
            .unwrap_or_else(|| data_dir.join(crate::backup::DEFAULT_DIR));
        let master_key = crate::master_key::MasterKeySource::new(
            s.master_key,
            s.master_key_file,
            s.previous_master_key_file,
        )?;
        Ok(ServeConfig {
            server: quintet_server::Config {
                listen,
                max_body_bytes,
                max_json_depth,
                shutdown_timeout: s
                    .shutdown_timeout
                    .map(Duration::from_secs)
                    .unwrap_or(defaults.shutdown_timeout),
                header_timeout,
                public_url,
                allowed_hosts,
                cors_origins,
                domain_auth,
                jwt_max_ttl,
                admin_tokens: Vec::new(),
                metrics_token,
                rate_limit_per_client: s.rate_limit_per_client,
                rate_limit_per_key: s.rate_limit_per_key,
                tls,
                queue_private_targets: match queue_private_targets {
                    PrivateTargetsArg::Deny => PrivateTargets::Deny,
                    PrivateTargetsArg::Domain => PrivateTargets::DomainOnly,
                    PrivateTargetsArg::Allow => PrivateTargets::Allow,
                },
                queue_egress_proxy,
                plan_limits,
                legacy_get_default: s.legacy_get_default.unwrap_or(false),
                places: adapters.places(s.cache_memory_only.unwrap_or(false)),
                queue_backoff: s
                    .queue_backoff_ms
                    .map(Duration::from_millis)
                    .unwrap_or(defaults.queue_backoff),
                connections: limits.connections.clone(),
                feed: feed_settings(
                    s.feed_max_streams,
                    s.feed_max_streams_per_client,
                    s.feed_retention,
                )?,
            },
            data_dir,
            backup_dir,
            admin_token,
            shared_data_dir: s.insecure_shared_data_dir.unwrap_or(false),
            master_key,
            cache: quintet_embedded::cache::CacheOptions {
                max_bytes: cache_max_bytes,
                memory_only: s.cache_memory_only.unwrap_or(false),
            },
            adapters,
            log: s.log.unwrap_or_else(|| "info".to_owned()),
            log_format: s.log_format.unwrap_or(LogFormat::Text),
            limits,
        })
    }
}

/// The domain auth mode with its settings, checked for consistency.
fn domain_auth(
    mode: AuthMode,
    secret: Option<String>,
    sub: Option<String>,
    aud: Option<String>,
) -> anyhow::Result<DomainAuth> {
    match mode {
        AuthMode::None => {
            if secret.is_some() || sub.is_some() || aud.is_some() {
                bail!(
                    "--jwt-secret, --jwt-sub and --jwt-aud only apply with --auth jwt; add \
                     --auth jwt to require tokens on the domain form"
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
            if aud.as_deref() == Some("") {
                bail!("--jwt-aud must not be empty; leave it out to accept any aud");
            }
            Ok(DomainAuth::Jwt {
                secret: Secret::from_stored(secret),
                sub,
                aud,
            })
        }
    }
}

/// An admin token long enough, and fit for an HTTP header.
fn check_admin_token(token: &str) -> anyhow::Result<Secret> {
    check_token("--admin-token", token).map(Secret::from_stored)
}

/// A bearer token given as `flag`: long enough, and fit for an HTTP header.
fn check_token<'t>(flag: &str, token: &'t str) -> anyhow::Result<&'t str> {
    if token.len() < MIN_ADMIN_TOKEN_LEN {
        bail!("{flag} must be at least {MIN_ADMIN_TOKEN_LEN} characters long");
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        bail!("{flag} must be visible ASCII characters without spaces");
    }
    Ok(token)
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

/// An `--allowed-hosts` entry: `*`, or a host name or address with an optional port,
/// lower-cased.
fn check_host(host: &str) -> anyhow::Result<String> {
    let h = host.trim().to_ascii_lowercase();
    if h == "*" || quintet_server::hosts::is_authority(&h) {
        return Ok(h);
    }
    bail!(
        "allowed-hosts entry \"{host}\" must be a host name or IP address with an optional \
         port (example.com, 192.168.1.5:6363, [::1]:6363), or *"
    )
}

/// A `--cors-origins` entry: `*`, or `scheme://host[:port]`, lower-cased.
fn check_origin(origin: &str) -> anyhow::Result<String> {
    let o = origin.trim().trim_end_matches('/').to_ascii_lowercase();
    if o == "*" {
        return Ok(o);
    }
    let ok = o
        .strip_prefix("http://")
        .or_else(|| o.strip_prefix("https://"))
        .is_some_and(quintet_server::hosts::is_authority);
    if ok {
        return Ok(o);
    }
    bail!(
        "cors-origins entry \"{origin}\" must be an origin, scheme://host[:port] without a \
         path (http://localhost:5173, https://app.example.com), or *"
    )
}

/// An http(s) proxy URL for queue deliveries.
fn check_proxy_url(url: &str) -> anyhow::Result<String> {
    let parsed = reqwest::Url::parse(url.trim()).ok();
    match parsed {
        Some(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => {
            Ok(url.trim().to_owned())
        }
        _ => bail!(
            "queue-egress-proxy \"{}\" must be an http or https URL such as \
             http://127.0.0.1:4750",
            quintet_core::redact::url(url)
        ),
    }
}

/// Read and check the TOML file at `path`.
pub(crate) fn read_file(path: &Path) -> anyhow::Result<ServeArgs> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("config file {} is not valid", path.display()))
}

/// The change feeds' settings over their defaults.
fn feed_settings(
    max_streams: Option<usize>,
    per_client: Option<usize>,
    retention: Option<u64>,
) -> anyhow::Result<quintet_server::feed::FeedSettings> {
    let d = quintet_server::feed::FeedSettings::default();
    let settings = quintet_server::feed::FeedSettings {
        max_streams: max_streams.unwrap_or(d.max_streams),
        max_streams_per_client: per_client.unwrap_or(d.max_streams_per_client),
        retention: retention.map_or(d.retention, Duration::from_secs),
    };
    if settings.retention.is_zero() || settings.retention > Duration::from_secs(10 * 365 * 86_400) {
        anyhow::bail!("feed-retention must be 1 second to 10 years");
    }
    Ok(settings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        adapters::Place,
        command::{Command, try_parse_from},
    };
    use quintet_server::config::PrivateTargets;
    use std::io::Write;

    fn parse(args: &[&str]) -> ServeArgs {
        let mut argv = vec!["quintet", "serve"];
        argv.extend_from_slice(args);
        match try_parse_from(argv).unwrap().command {
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
        assert_eq!(c.adapters.registry, Place::Embedded);
        let f = toml_file("registry = \"embedded\"\n");
        let c = parse(&["--config", f.path().to_str().unwrap()])
            .resolve()
            .unwrap();
        assert_eq!(c.adapters.registry, Place::Embedded);
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
            Place::Shared(pg) => pg.url,
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
        assert_eq!(c.adapters.cache, Place::Embedded);
        let f = toml_file("cache = \"embedded\"\n");
        let c = parse(&["--config", f.path().to_str().unwrap()])
            .resolve()
            .unwrap();
        assert_eq!(c.adapters.cache, Place::Embedded);
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
            Place::Shared(r) => r.url,
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
        assert_eq!(c.adapters.queue, Place::Embedded);
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
            Place::Shared(pg) => pg.url,
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
        assert_eq!(c.adapters.storage, Place::Embedded);
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
        let Place::Shared(s3) = c.adapters.storage else {
            panic!("S3 from the file")
        };
        assert_eq!(s3.bucket, "media");
        assert!(!format!("{s3:?}").contains("hidden"));
    }

    #[test]
    fn search_is_embedded_unless_configured() {
        let c = ServeArgs::default().resolve().unwrap();
        assert_eq!(c.adapters.search, Place::Embedded);
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
            Place::Shared(pg) => pg.url,
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
        assert_eq!(c.adapters.data, Place::Embedded);
        let err = parse(&["--data", "mongodb://h/db"]).resolve().unwrap_err();
        assert!(format!("{err}").contains("--data must be"), "{err}");
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn the_registry_follows_data_to_postgres() {
        let url = |c: &Place<crate::adapters::PgConfig>| match c {
            Place::Shared(pg) => pg.url.clone(),
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
        assert_eq!(c.server.queue_private_targets, PrivateTargets::DomainOnly);
        assert_eq!(c.server.queue_backoff, Duration::from_secs(5));
        let c = parse(&["--queue-deny-private", "--queue-backoff-ms", "20"])
            .resolve()
            .unwrap();
        assert_eq!(c.server.queue_private_targets, PrivateTargets::Deny);
        assert_eq!(c.server.queue_backoff, Duration::from_millis(20));
        let f = toml_file("queue_private_targets = \"allow\"\nqueue_backoff_ms = 700\n");
        let path = f.path().to_str().unwrap();
        let c = parse(&["--config", path]).resolve().unwrap();
        assert_eq!(c.server.queue_private_targets, PrivateTargets::Allow);
        assert_eq!(c.server.queue_backoff, Duration::from_millis(700));
        let c = parse(&["--config", path, "--queue-private-targets", "deny"])
            .resolve()
            .unwrap();
        assert_eq!(
            c.server.queue_private_targets,
            PrivateTargets::Deny,
            "the flag beats the file"
        );
        let err = parse(&["--queue-private-targets", "allow", "--queue-deny-private"])
            .resolve()
            .unwrap_err();
        assert!(format!("{err}").contains("older spelling"), "{err}");
        let c = parse(&["--queue-egress-proxy", "http://127.0.0.1:4750"])
            .resolve()
            .unwrap();
        assert_eq!(
            c.server.queue_egress_proxy.as_deref(),
            Some("http://127.0.0.1:4750")
        );
        assert!(
            parse(&["--queue-egress-proxy", "socks5://x"])
                .resolve()
                .is_err()
        );
    }

    /// Every setting of `quintet serve` is one field: its flag, its environment variable
    /// and its TOML key all exist and name it alike.
    #[test]
    fn every_setting_is_a_flag_an_environment_variable_and_a_file_key() {
        let command = crate::command::command();
        let serve = command.find_subcommand("serve").unwrap();
        let keys = serde_json::to_value(ServeArgs::default()).unwrap();
        let keys: Vec<&String> = keys.as_object().unwrap().keys().collect();
        let mut flags = Vec::new();
        for arg in serve.get_arguments() {
            let id = arg.get_id().as_str();
            if matches!(id, "help" | "version") {
                continue;
            }
            let long = arg.get_long().unwrap();
            assert_eq!(long, id.replace('_', "-"), "flag of {id}");
            assert_eq!(
                arg.get_env().and_then(|e| e.to_str()),
                Some(crate::command::env_var(id).as_str()),
                "environment variable of {id}"
            );
            if id != "config" {
                flags.push(id.to_owned());
                assert!(keys.contains(&&id.to_owned()), "no TOML key for {id}");
            }
        }
        assert_eq!(
            flags.len(),
            keys.len(),
            "a TOML key without a flag: {keys:?}"
        );
    }

    #[test]
    fn listen_addresses_take_the_forms_people_type() {
        let listen = |s: &str| s.parse::<ListenAddr>().map(|l| l.0.to_string());
        assert_eq!(listen("127.0.0.1:7000").unwrap(), "127.0.0.1:7000");
        assert_eq!(listen("[::1]:7000").unwrap(), "[::1]:7000");
        assert_eq!(listen("7000").unwrap(), "127.0.0.1:7000");
        assert_eq!(listen(":7000").unwrap(), "127.0.0.1:7000");
        assert_eq!(listen("localhost:7000").unwrap(), "127.0.0.1:7000");
        for bad in ["", "x", "70000", "localhost", "host:port"] {
            assert!(listen(bad).is_err(), "{bad}");
        }
        let f = toml_file("listen = \"localhost:7001\"\n");
        let c = parse(&["--config", f.path().to_str().unwrap()])
            .resolve()
            .unwrap();
        assert_eq!(c.server.listen.to_string(), "127.0.0.1:7001");
    }

    #[test]
    fn browser_settings_are_checked_and_lower_cased() {
        let c = parse(&[
            "--allowed-hosts",
            "LAN-Box:6363,*",
            "--cors-origins",
            "http://LocalHost:5173/",
        ])
        .resolve()
        .unwrap();
        assert_eq!(c.server.allowed_hosts, ["lan-box:6363", "*"]);
        assert_eq!(c.server.cors_origins, ["http://localhost:5173"]);
        let msg = |args: &[&str]| format!("{}", parse(args).resolve().unwrap_err());
        assert!(msg(&["--allowed-hosts", "a/b"]).contains("allowed-hosts entry"));
        assert!(msg(&["--cors-origins", "localhost:5173"]).contains("cors-origins entry"));
        assert!(msg(&["--cors-origins", "http://a.example/app"]).contains("without a path"));
    }

    #[test]
    fn jwt_limits_are_checked() {
        let c = parse(&["--jwt-max-ttl", "3600"]).resolve().unwrap();
        assert_eq!(c.server.jwt_max_ttl, Some(Duration::from_secs(3600)));
        assert!(parse(&["--jwt-max-ttl", "0"]).resolve().is_err());
        assert!(
            format!("{}", parse(&["--jwt-aud", "q"]).resolve().unwrap_err())
                .contains("only apply with --auth jwt")
        );
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
                sub: None,
                aud: None,
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
        assert_eq!(c.admin_token, Some(Secret::from_stored("a".repeat(20))));
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
