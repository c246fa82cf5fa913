//! The server's validated configuration. Built by the binary from flags, environment and
//! an optional TOML file; every setting has a value here.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use quintet_core::{keyring::TokenDigest, keys::Secret};

/// Default address: loopback only, hyper's port.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:6363";
/// Default limit on JSON request bodies (16 MiB: room for a 10 MB cache value).
pub const DEFAULT_MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
/// Default time in-flight requests get to finish at shutdown.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// Default time a client has to send a whole request head.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// Default delay before the first retry of an unreachable queue worker.
pub const DEFAULT_QUEUE_BACKOFF: Duration = Duration::from_secs(5);
/// Default longest pause in a request body, and the allowance every body starts with.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Default rate (bytes per second) that earns a request body more time.
pub const DEFAULT_BODY_MIN_RATE: u64 = 1024;
/// Most connections one client address may hold unless configured (or a quarter of the
/// server's bound, when that is lower).
pub const DEFAULT_MAX_CONNECTIONS_PER_CLIENT: usize = 256;

/// Settings of the HTTP server.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Largest JSON request body accepted, in bytes; larger bodies get 413.
    pub max_body_bytes: usize,
    /// Deepest nesting of arrays and objects accepted in a JSON body.
    pub max_json_depth: usize,
    /// How long in-flight requests may run after a shutdown signal.
    pub shutdown_timeout: Duration,
    /// How long a client may take to send a whole request head (counted from the
    /// connection's start, or from the head's first byte on a reused connection); past it
    /// the connection is closed, so half-sent heads cannot hold connections forever. An
    /// HTTP/1 connection idle for longer is closed too.
    pub header_timeout: Duration,
    /// The URL clients reach this server at (scheme, host, port, no trailing slash), for
    /// absolute URLs the server hands out; when absent, they are built from the request's
    /// `Host` header. Its host is an accepted `Host` (see [`crate::hosts`]).
    pub public_url: Option<String>,
    /// With [`DomainAuth::None`]: `Host` values accepted besides loopback ones, the listen
    /// address and the public URL's host (lower-case `host[:port]`, or `*` for any).
    pub allowed_hosts: Vec<String>,
    /// Origins (lower-case `scheme://host[:port]`, or `*`) whose pages may call the domain
    /// form and the admin API from a browser; see [`crate::cors`].
    pub cors_origins: Vec<String>,
    /// Which queues may deliver to loopback, private and link-local addresses.
    pub queue_private_targets: PrivateTargets,
    /// An HTTP(S) proxy every delivery goes through, when set.
    pub queue_egress_proxy: Option<String>,
    /// What each plan allows an application.
    pub plan_limits: quintet_core::accounts::PlanLimits,
    /// Where each store keeps its data, as shown to the admin (`GET /_admin/node`):
    /// `(store, description)` for `registry` and each service type, such as
    /// `("cache", "Redis")` or `("data", "embedded (SQLite in the data directory)")`.
    pub places: Vec<(String, String)>,
    /// Answer a GET of a document or cache entry that names no `X-SVC-LEGACY-GET` header
    /// with the bare document (old hyper clients), instead of `{ok, doc}`.
    pub legacy_get_default: bool,
    /// Delay before the first retry of an unreachable queue worker; it doubles with each
    /// further retry (with jitter), up to an hour.
    pub queue_backoff: Duration,
    /// How requests of the domain form are authenticated.
    pub domain_auth: DomainAuth,
    /// Longest validity accepted for a token (from now to its `exp`), in either form.
    pub jwt_max_ttl: Option<Duration>,
    /// Digests of the bearer tokens the admin API (`/_admin/...`) accepts; empty refuses
    /// every admin call. Only digests are kept, so no memory dump or file shows a token.
    pub admin_tokens: Vec<TokenDigest>,
    /// Digest of the token `/_metrics` needs (the admin token works too); `/_metrics` is
    /// public when `None`.
    pub metrics_token: Option<TokenDigest>,
    /// Requests per second one client address may send; unlimited when `None`.
    pub rate_limit_per_client: Option<u32>,
    /// Requests per second any one access key may send, whatever its plan allows; only the
    /// plan's rate when `None`.
    pub rate_limit_per_key: Option<u32>,
    /// Certificate chain and private key for HTTPS; plain HTTP when absent.
    pub tls: Option<TlsFiles>,
    /// Connections: how many, from whom, and how fast their bodies must arrive.
    pub connections: ConnectionSettings,
    /// Change feeds: open streams and how long changes are kept.
    pub feed: crate::feed::FeedSettings,
}

/// Bounds on connections and request bodies, so that slow or stalled clients cannot take
/// every connection or file descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionSettings {
    /// Longest pause in a request body, and the time every body starts with; see
    /// [`crate::body_deadline`].
    pub body_timeout: Duration,
    /// Bytes per second that earn a request body another second (0: pauses alone count).
    pub body_min_rate: u64,
    /// Most connections open at once (0: no bound); more are closed as they arrive.
    pub max_connections: usize,
    /// Most connections open at once from one client address, IPv6 clients counted per
    /// /64 (0: no bound).
    pub max_connections_per_client: usize,
}

impl Default for ConnectionSettings {
    fn default() -> Self {
        Self {
            body_timeout: DEFAULT_BODY_TIMEOUT,
            body_min_rate: DEFAULT_BODY_MIN_RATE,
            max_connections: 0,
            max_connections_per_client: DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
        }
    }
}

impl ConnectionSettings {
    /// The limits on request bodies.
    pub fn body_limits(&self) -> crate::body_deadline::BodyLimits {
        crate::body_deadline::BodyLimits {
            timeout: self.body_timeout,
            min_rate: self.body_min_rate,
        }
    }
}

/// Which queues may deliver to loopback, private and link-local addresses (internal
/// services). A delivery never reaches quintet's own listener, whatever this says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PrivateTargets {
    /// No queue.
    Deny,
    /// Queues of the domain application only: the operator's own (with `--auth none` a
    /// developer on this machine), never those of applications served to tenants.
    #[default]
    DomainOnly,
    /// Every queue: for one trusted user, never with tenants.
    Allow,
}

impl PrivateTargets {
    /// Whether a queue of `app` may deliver to a private address.
    pub fn allows(self, app: &quintet_core::AppName) -> bool {
        match self {
            Self::Deny => false,
            Self::DomainOnly => app.is_domain(),
            Self::Allow => true,
        }
    }
}

/// How requests of the domain form (`/<type>/<instance>/...`) are authenticated. The
/// application form always needs a token signed with one of the application's keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum DomainAuth {
    /// No authentication (the default); the binary then listens on loopback addresses only
    /// unless told otherwise.
    #[default]
    None,
    /// `Authorization: Bearer <JWT>`, HS256, signed with `secret`; when `sub` is set, the
    /// token's `sub` must equal it.
    Jwt {
        /// The HMAC key, its UTF-8 bytes as written.
        secret: Secret,
        /// The required `sub` claim, if any.
        sub: Option<String>,
        /// The required `aud` claim, if any.
        aud: Option<String>,
    },
}

/// PEM files for HTTPS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 6363)),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_json_depth: quintet_core::json::DEFAULT_MAX_DEPTH,
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            public_url: None,
            allowed_hosts: Vec::new(),
            cors_origins: Vec::new(),
            queue_private_targets: PrivateTargets::default(),
            queue_egress_proxy: None,
            plan_limits: quintet_core::accounts::PlanLimits::default(),
            legacy_get_default: false,
            places: Vec::new(),
            queue_backoff: DEFAULT_QUEUE_BACKOFF,
            domain_auth: DomainAuth::None,
            jwt_max_ttl: None,
            admin_tokens: Vec::new(),
            metrics_token: None,
            rate_limit_per_client: None,
            rate_limit_per_key: None,
            tls: None,
            connections: ConnectionSettings::default(),
            feed: crate::feed::FeedSettings::default(),
        }
    }
}

impl Config {
    /// The queue dispatcher's share of the settings.
    pub fn dispatch_settings(&self) -> crate::dispatch::Settings {
        crate::dispatch::Settings {
            private_targets: self.queue_private_targets,
            egress_proxy: self.queue_egress_proxy.clone(),
            own_listener: self.listen,
            public_url: self.public_url.clone(),
            backoff_base: self.queue_backoff,
            shutdown_timeout: self.shutdown_timeout,
        }
    }
}
