//! Test harness: real quintet servers on ephemeral loopback ports, talked to over HTTP.
//!
//! - [`TestServer`] runs a node in-process (the binary's own wiring) on a temporary data
//!   directory, with an injectable clock, and can be restarted on the same directory.
//! - [`Process`] runs the real `quintet` binary, for tests that kill it.
//! - [`Worker`] is a queue worker that records deliveries and answers as told.
//! - [`Proxy`] stands in front of a real engine, and can be cut and restored, for outage
//!   tests.
//! - [`TestServer::new_app`] makes an account, an application and an access key through the
//!   admin API; [`TestServer::token`] signs a token for it. [`TestCerts`] makes a throwaway
//!   certificate authority and server certificate for HTTPS tests.
//! - [`engines`] (the `quintet-engine-test` crate) finds the real PostgreSQL, Redis and S3
//!   of `scripts/engines` and gives each test a namespace of its own;
//!   [`Builder::registry`] starts a node on a shared registry, so several `TestServer`s
//!   form a cluster.
//!
//! A service test is a few lines:
//! ```no_run
//! # async fn t() {
//! use quintet_testkit::TestServer;
//! use serde_json::json;
//! let s = TestServer::start().await;
//! s.create("data", "movies", None).await;
//! let r = s.post("/data/movies", json!({"title": "Ghostbusters"})).await;
//! assert_eq!(r.status, 201);
//! # }
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod browser;
pub mod hyper_connect;
mod process;
mod proxy;
mod tls;
mod worker;

use std::{
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use quintet::{
    cli::{ServeArgs, ServeConfig},
    node::Node,
};
use quintet_core::{Clock, SystemClock};
use quintet_server::AppState;
use reqwest::{Method, RequestBuilder, header::HeaderMap};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::{sync::oneshot, task::JoinHandle};

pub use process::Process;
pub use proxy::Proxy;
pub use quintet::cli::{AuthMode, PrivateTargetsArg, ServeArgs as Args};
pub use quintet_engine_test as engines;
pub use tls::TestCerts;
pub use worker::{Answer, Received, Worker, eventually};

/// An answer: status, headers, the body as text and parsed as JSON (`Null` when it is not
/// JSON).
#[derive(Debug)]
pub struct Reply {
    /// HTTP status code.
    pub status: u16,
    /// Response headers.
    pub headers: HeaderMap,
    /// The body as text.
    pub text: String,
    /// The body parsed as JSON, `Value::Null` when it is not JSON.
    pub body: Value,
}

impl Reply {
    /// A response header as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Read a response fully.
    pub async fn read(res: reqwest::Response) -> Self {
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        let text = res.text().await.expect("response body");
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Self {
            status,
            headers,
            text,
            body,
        }
    }

    /// Assert the status, showing the body when it differs.
    #[track_caller]
    pub fn expect(self, status: u16) -> Self {
        assert_eq!(
            self.status, status,
            "unexpected status; body: {}",
            self.text
        );
        self
    }
}

/// An HTTP client bound to one base URL.
#[derive(Debug, Clone)]
pub struct Client {
    base: String,
    http: reqwest::Client,
}

impl Client {
    /// A client for the server at `base` (e.g. `http://127.0.0.1:6363`).
    pub fn new(base: &str) -> Self {
        Self::build(base, None)
    }

    /// A client for an HTTPS server whose certificate is signed by the PEM `ca`.
    pub fn with_ca(base: &str, ca: &[u8]) -> Self {
        Self::build(base, Some(ca))
    }

    fn build(base: &str, ca: Option<&[u8]>) -> Self {
        quintet_server::tls::install_crypto_provider();
        let mut builder = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(60));
        if let Some(ca) = ca {
            let cert = reqwest::Certificate::from_pem(ca).expect("CA certificate");
            builder = builder.tls_certs_only([cert]);
        }
        Self {
            base: base.trim_end_matches('/').to_owned(),
            http: builder.build().expect("HTTP client"),
        }
    }

    /// The absolute URL of `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The underlying client, for requests the helpers do not cover.
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// A request builder for `method` on `path`.
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.http.request(method, self.url(path))
    }

    /// Send a prepared request and read the answer.
    pub async fn send(&self, req: RequestBuilder) -> Reply {
        Reply::read(req.send().await.expect("request sent")).await
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Reply {
        self.send(self.request(Method::GET, path)).await
    }

    /// `DELETE path`.
    pub async fn delete(&self, path: &str) -> Reply {
        self.send(self.request(Method::DELETE, path)).await
    }

    /// `POST path` with a JSON body.
    pub async fn post(&self, path: &str, body: Value) -> Reply {
        self.send(self.request(Method::POST, path).json(&body))
            .await
    }

    /// `PUT path` with a JSON body, or none.
    pub async fn put(&self, path: &str, body: Option<Value>) -> Reply {
        let req = self.request(Method::PUT, path);
        let req = match body {
            Some(b) => req.json(&b),
            None => req,
        };
        self.send(req).await
    }

    /// Create instance `name` of `kind` (with its configuration, if any); asserts 201.
    pub async fn create(&self, kind: &str, name: &str, config: Option<Value>) -> Reply {
        self.put(&format!("/{kind}/{name}"), config)
            .await
            .expect(201)
    }
}

/// An application with an access key, made through the admin API.
#[derive(Debug, Clone)]
pub struct AppKey {
    /// The owning account.
    pub account: String,
    /// The application.
    pub app: String,
    /// The key id.
    pub key: String,
    /// The key's secret.
    pub secret: String,
    /// `cloud://key:secret@host/app`.
    pub connection_string: String,
}

impl AppKey {
    /// An HS256 token over `claims`, signed with this key's secret.
    pub fn sign(&self, claims: Value) -> String {
        quintet_core::jwt::sign_hs256(self.secret.as_bytes(), &claims)
    }
}

/// The master key of every node this process starts (unless a test sets its own): nodes
/// sharing a registry must share it, as in production.
pub fn test_master_key() -> &'static str {
    static KEY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    KEY.get_or_init(|| {
        quintet_core::keyring::MasterKey::generate()
            .expect("random source")
            .to_text()
    })
}

/// A name no other caller in this process got: `<prefix>-<n>`.
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("{prefix}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// How to start a [`TestServer`].
#[derive(Debug)]
pub struct Builder {
    clock: Arc<dyn Clock>,
    args: ServeArgs,
    tls: bool,
}

impl Builder {
    /// Use `clock` as every store's source of time.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Adjust the settings, as flags would.
    pub fn args(mut self, f: impl FnOnce(&mut ServeArgs)) -> Self {
        f(&mut self.args);
        self
    }

    /// Keep the registry at `url` (`--registry`): nodes started with the same PostgreSQL
    /// URL share accounts, applications, keys and instances, each with a data directory of
    /// its own.
    pub fn registry(mut self, url: &str) -> Self {
        self.args.registry = Some(url.to_owned());
        self
    }

    /// Serve HTTPS with a fresh [`TestCerts`] certificate for `127.0.0.1` and `localhost`;
    /// the server's client trusts it.
    pub fn tls(mut self) -> Self {
        self.tls = true;
        self
    }

    /// Start the server on a fresh temporary data directory.
    pub async fn start(self) -> TestServer {
        let dir = Arc::new(tempfile::tempdir().expect("temporary directory"));
        let mut args = self.args;
        args.data_dir = Some(dir.path().join("data"));
        args.listen = Some("127.0.0.1:0".parse().expect("address"));
        if args.master_key.is_none() && args.master_key_file.is_none() {
            args.master_key = Some(test_master_key().to_owned());
        }
        let certs = self
            .tls
            .then(|| TestCerts::generate(&dir.path().join("tls")));
        if let Some(certs) = &certs {
            args.tls_cert = Some(certs.cert.clone());
            args.tls_key = Some(certs.key.clone());
        }
        let config = args.resolve().expect("test configuration");
        TestServer::launch(dir, config, self.clock, certs).await
    }
}

/// A quintet node running in this process on an ephemeral loopback port.
#[derive(Debug)]
pub struct TestServer {
    client: Client,
    dir: Arc<TempDir>,
    config: ServeConfig,
    clock: Arc<dyn Clock>,
    certs: Option<TestCerts>,
    admin_token: String,
    state: AppState,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl std::ops::Deref for TestServer {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

impl TestServer {
    /// A server with default settings on a fresh data directory.
    pub async fn start() -> Self {
        Self::builder().start().await
    }

    /// Settings for a server to start.
    pub fn builder() -> Builder {
        Builder {
            clock: Arc::new(SystemClock),
            args: ServeArgs::default(),
            tls: false,
        }
    }

    async fn launch(
        dir: Arc<TempDir>,
        config: ServeConfig,
        clock: Arc<dyn Clock>,
        certs: Option<TestCerts>,
    ) -> Self {
        let node = Node::open(&config, Arc::clone(&clock))
            .await
            .expect("node opens");
        let admin_token = node.admin_token().expose().to_owned();
        let state = node.state().clone();
        let listener = tokio::net::TcpListener::bind(config.server.listen)
            .await
            .expect("bind");
        let base = format!(
            "{}://{}",
            node.scheme(),
            listener.local_addr().expect("address")
        );
        let client = match &certs {
            Some(c) => Client::with_ca(&base, c.ca_pem.as_bytes()),
            None => Client::new(&base),
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopped.await;
            };
            node.serve(listener, shutdown).await.expect("server ran");
        });
        Self {
            client,
            dir,
            config,
            clock,
            certs,
            admin_token,
            state,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// The admin token the node uses.
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// The node's HTTP state (its ports and caches), for checks below the HTTP surface.
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// The certificates of a server started with [`Builder::tls`].
    pub fn certs(&self) -> Option<&TestCerts> {
        self.certs.as_ref()
    }

    /// `req` with the admin token.
    pub fn as_admin(&self, req: RequestBuilder) -> RequestBuilder {
        req.bearer_auth(&self.admin_token)
    }

    /// An admin API call: `method path` with the admin token and an optional JSON body.
    pub async fn admin(&self, method: Method, path: &str, body: Option<Value>) -> Reply {
        let req = self.as_admin(self.request(method, path));
        let req = match body {
            Some(b) => req.json(&b),
            None => req,
        };
        self.send(req).await
    }

    /// A fresh account (starter plan), an application in it and an access key of it.
    pub async fn new_app(&self) -> AppKey {
        let account = unique("acct");
        let app = unique("app");
        self.admin(
            Method::POST,
            "/_admin/accounts",
            Some(json!({"name": account, "plan": "starter"})),
        )
        .await
        .expect(201);
        self.admin(
            Method::POST,
            "/_admin/apps",
            Some(json!({"name": app, "account": account})),
        )
        .await
        .expect(201);
        self.new_key(&account, &app).await
    }

    /// Another access key of `app` (of `account`).
    pub async fn new_key(&self, account: &str, app: &str) -> AppKey {
        let r = self
            .admin(Method::POST, &format!("/_admin/apps/{app}/keys"), None)
            .await
            .expect(201);
        AppKey {
            account: account.to_owned(),
            app: app.to_owned(),
            key: r.body["key"].as_str().expect("key").to_owned(),
            secret: r.body["secret"].as_str().expect("secret").to_owned(),
            connection_string: r.body["connectionString"]
                .as_str()
                .expect("connection string")
                .to_owned(),
        }
    }

    /// A token for `key` as hyper-connect makes them: `{sub: key, exp: now + 10 min}` on
    /// the server's clock.
    pub fn token(&self, key: &AppKey) -> String {
        let exp = self.clock.now_ms() / 1000 + 600;
        key.sign(json!({"sub": key.key, "exp": exp}))
    }

    /// `req` with a token for `key`.
    pub fn as_app(&self, key: &AppKey, req: RequestBuilder) -> RequestBuilder {
        req.bearer_auth(self.token(key))
    }

    /// The data directory the node uses.
    pub fn data_dir(&self) -> &Path {
        &self.config.data_dir
    }

    /// Shut down gracefully (in-flight requests finish, stores close).
    pub async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("server task");
        }
    }

    /// Shut down gracefully and start again on the same data directory (on a new port).
    pub async fn restart(&mut self) {
        self.stop().await;
        let next = Self::launch(
            Arc::clone(&self.dir),
            self.config.clone(),
            Arc::clone(&self.clock),
            self.certs.clone(),
        )
        .await;
        *self = next;
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
