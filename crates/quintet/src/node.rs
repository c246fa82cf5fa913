//! Assembling a node: open the adapters the configuration names, build the HTTP state,
//! serve. Shared by the binary and the in-process test harness, so tests run the same
//! wiring as production.

use std::{future::Future, sync::Arc};

use anyhow::Context;
use quintet_core::Clock;
use quintet_embedded::{Embedded, EmbeddedOptions};
use quintet_server::{AppState, Services};
use tokio::net::TcpListener;

use crate::cli::ServeConfig;

/// An opened node: its stores and the HTTP state over them.
#[derive(Debug)]
pub struct Node {
    embedded: Embedded,
    state: AppState,
}

impl Node {
    /// Open the stores named by `config`, with `clock` as the source of time, and repair
    /// what an interrupted shutdown left behind.
    pub async fn open(config: &ServeConfig, clock: Arc<dyn Clock>) -> anyhow::Result<Self> {
        let options = EmbeddedOptions {
            cache: config.cache.clone(),
        };
        let embedded = Embedded::open_with(&config.data_dir, clock, &options)
            .with_context(|| format!("cannot open data directory {}", config.data_dir.display()))?;
        let services = Services {
            registry: embedded.registry.clone(),
            data: embedded.data.clone(),
            cache: embedded.cache.clone(),
            search: embedded.search.clone(),
            queue: embedded.queue.clone(),
            storage: embedded.storage.clone(),
        };
        let state = AppState::new(services, config.server.clone());
        quintet_server::startup(&state).await?;
        Ok(Self { embedded, state })
    }

    /// The HTTP state, for inspection in tests.
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serve on `listener` until `shutdown` resolves, then close every store and release
    /// the data directory.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        quintet_server::serve(listener, self.state, shutdown).await?;
        drop(self.embedded); // the directory lock goes last, after every store closed
        Ok(())
    }
}
