//! Assembling a node: lock the data directory, open the adapters the configuration names,
//! build the HTTP state, serve. Shared by the binary and the in-process test harness, so
//! tests run the same wiring as production.

use std::{future::Future, sync::Arc};

use anyhow::Context;
use quintet_core::{Clock, keyring::TokenDigest, keys::Secret};
use quintet_embedded::datadir::{DataDir, Found};
use quintet_server::{AppState, tls};
use tokio::net::TcpListener;

use crate::{admin_token, binding, cli::ServeConfig, discovery, master_key, open};

/// An opened node: its locked data directory and the HTTP state over its adapters.
#[derive(Debug)]
pub struct Node {
    dir: DataDir,
    state: AppState,
    tls: Option<Arc<tls::ServerConfig>>,
    admin: AdminToken,
}

/// The admin token a node accepts, and whether to show it.
#[derive(Debug)]
struct AdminToken {
    token: Secret,
    /// Derived from a master key this start created: shown once.
    show: bool,
    master_key_file: Option<std::path::PathBuf>,
}

impl Node {
    /// Lock the data directory, open the adapters named by `config` (see [`open`]) with
    /// `clock` as the source of time, and repair what an interrupted shutdown left behind.
    /// A data directory that belongs to another registry, or that other users can read, is
    /// refused ([`binding`], [`admin_token::protect_data_dir`]). The master key is read (or
    /// created, see [`master_key`]); without a configured admin token, the one derived from
    /// it is used. A start that fails leaves the data directory as it found it.
    pub async fn open(config: &ServeConfig, clock: Arc<dyn Clock>) -> anyhow::Result<Self> {
        // TLS files first: a bad certificate should fail before anything is opened.
        let tls = config.server.tls.as_ref().map(tls::load).transpose()?;
        let dir = DataDir::open(&config.data_dir)
            .with_context(|| format!("cannot open data directory {}", config.data_dir.display()))?;
        match assemble(config, clock, &dir).await {
            Ok((state, admin)) => Ok(Self {
                dir,
                state,
                tls,
                admin,
            }),
            Err(e) => {
                dir.abandon();
                Err(e)
            }
        }
    }

    /// The HTTP state, for inspection in tests.
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// The admin token the node accepts (configured, or derived from the master key). Kept
    /// in memory only; for the harness and for [`Node::generated_admin_token`].
    pub fn admin_token(&self) -> &Secret {
        &self.admin.token
    }

    /// The admin token derived from a master key this start created, to be shown to the
    /// operator once (`quintet admin-token` prints it again), with the key's file.
    pub fn generated_admin_token(&self) -> Option<(&Secret, Option<&std::path::Path>)> {
        self.admin
            .show
            .then_some((&self.admin.token, self.admin.master_key_file.as_deref()))
    }

    /// `https` when serving TLS, else `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }

    /// Close every store and release the data directory without having served: for
    /// commands that use a node's ports in-process (`quintet migrate`).
    pub async fn close(self) -> anyhow::Result<()> {
        self.state.services.close().await?;
        drop(self.dir);
        Ok(())
    }

    /// Serve on `listener` until `shutdown` resolves, then close every store and release
    /// the data directory.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let record = discovery::Record::new(self.scheme(), listener.local_addr()?);
        let root = self.dir.root().to_owned();
        if let Err(e) = record.write(&root) {
            tracing::warn!(error = %e, "cannot record the server's address for the admin commands");
        }
        let served = quintet_server::serve(listener, self.tls, self.state, shutdown).await;
        discovery::Record::remove(&root);
        served?;
        drop(self.dir); // the directory lock goes last, after every store closed
        Ok(())
    }
}

/// Open the adapters in `dir` and prepare them for serving. Everything that can refuse the
/// start runs before anything is written into the directory.
async fn assemble(
    config: &ServeConfig,
    clock: Arc<dyn Clock>,
    dir: &DataDir,
) -> anyhow::Result<(AppState, AdminToken)> {
    admin_token::protect_data_dir(
        dir.root(),
        dir.found() != Found::Used,
        config.shared_data_dir,
    )?;
    let (ring, new_key) = config.master_key.load_or_create()?;
    let ring = Arc::new(ring);
    let opened = open::open(
        &config.adapters,
        dir,
        &config.cache,
        config.limits.disk_reserve,
        Arc::clone(&clock),
        Arc::clone(&ring),
        // Before the start-up sweep, which trusts the registry to know every instance.
        |identity| binding::check(dir, identity),
    )
    .await?;
    if config.adapters.use_data_dir() {
        binding::record(dir.root(), &opened.registry_identity)?;
    }
    let mut server = config.server.clone();
    let configured = config.admin_token.clone();
    let token = configured
        .clone()
        .unwrap_or_else(|| Secret::from_stored(master_key::derived_admin_token(&ring)));
    server.admin_tokens = vec![TokenDigest::of(token.as_bytes())];
    if configured.is_none()
        && let Some(legacy) = admin_token::legacy_digest(dir.root())?
    {
        server.admin_tokens.push(legacy);
    }
    let mut state = AppState::with_clock(opened.services, server, clock);
    if let Some(source) = opened.backup_source {
        state = state.with_backups(Arc::new(crate::backup::NodeBackups::new(
            config.backup_dir.clone(),
            source,
        )));
    }
    quintet_server::startup(&state).await?;
    let admin = AdminToken {
        token,
        show: configured.is_none() && new_key,
        master_key_file: config.master_key.file().map(ToOwned::to_owned),
    };
    Ok((state, admin))
}
