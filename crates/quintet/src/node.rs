//! Assembling a node: open the adapters the configuration names, build the HTTP state,
//! serve. Shared by the binary and the in-process test harness, so tests run the same
//! wiring as production.

use std::{future::Future, sync::Arc};

use anyhow::Context;
use quintet_core::{Clock, keyring::TokenDigest, keys::Secret};
use quintet_embedded::{Embedded, EmbeddedOptions};
use quintet_server::{AppState, tls};
use tokio::net::TcpListener;

use crate::{adapters, admin_token, binding, cli::ServeConfig, master_key};

/// An opened node: its stores and the HTTP state over them.
#[derive(Debug)]
pub struct Node {
    embedded: Embedded,
    state: AppState,
    tls: Option<Arc<tls::ServerConfig>>,
    admin_token: Secret,
    show_admin_token: bool,
    master_key_file: Option<std::path::PathBuf>,
}

impl Node {
    /// Open the stores named by `config` (see [`adapters`]), with `clock` as the source of
    /// time, check that the data directory belongs to the configured registry
    /// ([`binding`]), and repair what an interrupted shutdown left behind. The master key is
    /// read (or created, see [`master_key`]); without a configured admin token, the one
    /// derived from it is used.
    pub async fn open(config: &ServeConfig, clock: Arc<dyn Clock>) -> anyhow::Result<Self> {
        // TLS files first: a bad certificate should fail before anything is opened.
        let tls = config.server.tls.as_ref().map(tls::load).transpose()?;
        let created = !config.data_dir.exists();
        if !created {
            admin_token::protect_data_dir(&config.data_dir, false, config.shared_data_dir)?;
        }
        let (ring, new_key) = config.master_key.load_or_create()?;
        let ring = Arc::new(ring);
        let options = EmbeddedOptions {
            cache: config.cache.clone(),
            keyring: Arc::clone(&ring),
        };
        let embedded = Embedded::open_with(&config.data_dir, Arc::clone(&clock), &options)
            .with_context(|| format!("cannot open data directory {}", config.data_dir.display()))?;
        if created {
            admin_token::protect_data_dir(embedded.dir.root(), true, config.shared_data_dir)?;
        }
        let mut server = config.server.clone();
        let configured = config.admin_token.clone();
        let admin_token = configured
            .clone()
            .unwrap_or_else(|| Secret::from_stored(master_key::derived_admin_token(&ring)));
        server.admin_tokens = vec![TokenDigest::of(admin_token.as_bytes())];
        if configured.is_none()
            && let Some(legacy) = admin_token::legacy_digest(embedded.dir.root())?
        {
            server.admin_tokens.push(legacy);
        }
        let opened = adapters::open(
            &config.adapters,
            &embedded,
            Arc::clone(&clock),
            Arc::clone(&ring),
        )
        .await?;
        // Before the start-up sweep, which trusts the registry to know every instance.
        binding::check(embedded.dir.root(), created, &opened.registry_identity)?;
        let state = AppState::with_clock(opened.services, server, clock);
        quintet_server::startup(&state).await?;
        Ok(Self {
            embedded,
            state,
            tls,
            admin_token,
            show_admin_token: configured.is_none() && new_key,
            master_key_file: config.master_key.file().map(ToOwned::to_owned),
        })
    }

    /// The HTTP state, for inspection in tests.
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// The admin token the node accepts (configured, or derived from the master key). Kept
    /// in memory only; for the harness and for [`Node::generated_admin_token`].
    pub fn admin_token(&self) -> &Secret {
        &self.admin_token
    }

    /// The admin token derived from a master key this start created, to be shown to the
    /// operator once (`quintet admin-token` prints it again), with the key's file.
    pub fn generated_admin_token(&self) -> Option<(&Secret, Option<&std::path::Path>)> {
        self.show_admin_token
            .then_some((&self.admin_token, self.master_key_file.as_deref()))
    }

    /// `https` when serving TLS, else `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }

    /// Serve on `listener` until `shutdown` resolves, then close every store and release
    /// the data directory.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let record = crate::discovery::Record::new(self.scheme(), listener.local_addr()?);
        let dir = self.embedded.dir.root().to_owned();
        if let Err(e) = record.write(&dir) {
            tracing::warn!(error = %e, "cannot record the server's address for the admin commands");
        }
        let served = quintet_server::serve(listener, self.tls, self.state, shutdown).await;
        crate::discovery::Record::remove(&dir);
        served?;
        drop(self.embedded); // the directory lock goes last, after every store closed
        Ok(())
    }
}
