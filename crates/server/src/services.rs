//! The ports a node serves, one adapter each, and what is done to all of them at once:
//! the start-up sweep, readiness and closing.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use quintet_core::{
    Result, ServiceType,
    ports::{
        Keep, Lifecycle, cache::Cache, data::DocStore, queue::JobQueue, registry::Registry,
        search::SearchIndex, storage::ObjectStorage, storage_events::StorageEvents,
    },
};

/// One adapter per port, chosen by the binary.
#[derive(Debug, Clone)]
pub struct Services {
    /// Applications, keys and instances.
    pub registry: Arc<dyn Registry>,
    /// Documents.
    pub data: Arc<dyn DocStore>,
    /// Cache entries.
    pub cache: Arc<dyn Cache>,
    /// Full-text indexes.
    pub search: Arc<dyn SearchIndex>,
    /// Jobs.
    pub queue: Arc<dyn JobQueue>,
    /// Objects and their pre-signed URLs.
    pub storage: Arc<dyn ObjectStorage>,
    /// The event logs of storage instances: the embedded store itself, or the log its
    /// S3 store is wrapped with (see [`quintet_core::ports::storage_events`]).
    pub storage_events: Arc<dyn StorageEvents>,
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
    /// [`Lifecycle::sweep`]), on every engine. Run once at start-up, before requests are
    /// served.
    pub async fn sweep(&self) -> Result<()> {
        let (all, highest) = self.registry.instances_for_sweep().await?;
        for kind in ServiceType::ALL {
            let keep = Keep::new(
                all.iter().filter(|i| i.kind() == kind).map(|i| i.id),
                highest,
            );
            let removed = self.lifecycle(kind).sweep(&keep).await?;
            if removed > 0 {
                tracing::warn!(%kind, removed, "removed contents of destroyed instances");
            }
        }
        Ok(())
    }

    /// Ask the registry and every service's adapter whether it can serve now, at once,
    /// each within [`READY_TIMEOUT`]: `(name, outcome)` per check, the registry first.
    pub async fn readiness(&self) -> Vec<(&'static str, Result<()>)> {
        let mut checks = vec![bounded("registry", self.registry.ready())];
        for kind in ServiceType::ALL {
            checks.push(bounded(kind.as_str(), self.lifecycle(kind).ready()));
        }
        futures_util::future::join_all(checks).await
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

/// `check` named `name`, failed when it takes longer than [`READY_TIMEOUT`].
async fn bounded(
    name: &'static str,
    check: BoxFuture<'_, Result<()>>,
) -> (&'static str, Result<()>) {
    let outcome = tokio::time::timeout(READY_TIMEOUT, check)
        .await
        .unwrap_or_else(|_| {
            Err(quintet_core::Error::Unavailable(format!(
                "{name} did not answer within {READY_TIMEOUT:?}"
            )))
        });
    (name, outcome)
}

/// Longest one readiness check may take before it counts as failed.
pub const READY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);
