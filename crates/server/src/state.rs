//! Shared state of the HTTP layer: the ports, the instance directory and the configuration.

use std::sync::Arc;

use quintet_core::{
    Result, ServiceType,
    ports::{Lifecycle, registry::Registry, search::SearchIndex},
};

use crate::{config::Config, instances::Instances, metrics::Metrics};

/// One adapter per port, chosen by the binary.
#[derive(Debug, Clone)]
pub struct Services {
    /// Applications, keys and instances.
    pub registry: Arc<dyn Registry>,
    /// Documents.
    pub data: Arc<dyn Lifecycle>,
    /// Cache entries.
    pub cache: Arc<dyn Lifecycle>,
    /// Full-text indexes.
    pub search: Arc<dyn SearchIndex>,
    /// Jobs.
    pub queue: Arc<dyn Lifecycle>,
    /// Objects.
    pub storage: Arc<dyn Lifecycle>,
}

impl Services {
    /// The adapter serving instances of `kind`, seen as its lifecycle.
    pub fn lifecycle(&self, kind: ServiceType) -> &dyn Lifecycle {
        match kind {
            ServiceType::Data => &*self.data,
            ServiceType::Cache => &*self.cache,
            ServiceType::Search => &*self.search,
            ServiceType::Queue => &*self.queue,
            ServiceType::Storage => &*self.storage,
        }
    }

    /// Remove contents of instances the registry no longer knows (see
    /// [`Lifecycle::sweep`]). Run once at start-up.
    pub async fn sweep(&self) -> Result<()> {
        let all = self.registry.list_instances(None).await?;
        for kind in ServiceType::ALL {
            let live: Vec<_> = all
                .iter()
                .filter(|i| i.kind() == kind)
                .map(|i| i.id)
                .collect();
            let removed = self.lifecycle(kind).sweep(&live).await?;
            if removed > 0 {
                tracing::warn!(%kind, removed, "removed contents of destroyed instances");
            }
        }
        Ok(())
    }

    /// Close every adapter, then the registry; report the first failure.
    pub async fn close(&self) -> Result<()> {
        let mut first = Ok(());
        for kind in ServiceType::ALL {
            if let Err(e) = self.lifecycle(kind).close().await {
                tracing::error!(%kind, error = %e, "closing the store failed");
                first = first.and(Err(e));
            }
        }
        if let Err(e) = self.registry.close().await {
            tracing::error!(error = %e, "closing the registry failed");
            first = first.and(Err(e));
        }
        first
    }
}

/// The state every handler can reach.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The ports.
    pub services: Arc<Services>,
    /// Instance lookup with its cache.
    pub instances: Arc<Instances>,
    /// Server settings.
    pub config: Arc<Config>,
    /// Request counters.
    pub metrics: Arc<Metrics>,
}

impl AppState {
    /// State over `services` with `config`.
    pub fn new(services: Services, config: Config) -> Self {
        let services = Arc::new(services);
        Self {
            instances: Arc::new(Instances::new(Arc::clone(&services))),
            services,
            config: Arc::new(config),
            metrics: Arc::new(Metrics::default()),
        }
    }
}
