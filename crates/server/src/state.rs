//! Shared state of the HTTP layer: the ports, the instance directory and the configuration.

use std::sync::{Arc, Weak};

use futures_util::future::BoxFuture;

use quintet_core::{
    Clock, Result, ServiceType, SystemClock,
    ports::{
        Keep, Lifecycle,
        cache::Cache,
        data::DocStore,
        queue::{DueListener, JobQueue},
        registry::{ChangeListener, Registry},
        search::SearchIndex,
        storage::ObjectStorage,
    },
};

use crate::{
    admission::ConnectionLimits, auth::Auth, changes::CacheInvalidator, config::Config,
    dispatch::Dispatcher, instances::Instances, metrics::Metrics,
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
    /// Credentials: the admin token, the domain auth mode, access keys.
    pub auth: Arc<Auth>,
    /// The registry's listener keeping the caches true to changes made by other nodes.
    pub invalidator: Arc<CacheInvalidator>,
    /// The source of time.
    pub clock: Arc<dyn Clock>,
    /// Delivers queued jobs to workers.
    pub dispatcher: Arc<Dispatcher>,
    /// The open connections and their bounds.
    pub connections: Arc<ConnectionLimits>,
}

impl AppState {
    /// State over `services` with `config`, on the system clock.
    pub fn new(services: Services, config: Config) -> Self {
        Self::with_clock(services, config, Arc::new(SystemClock))
    }

    /// State over `services` with `config`, reading time from `clock`.
    pub fn with_clock(services: Services, config: Config, clock: Arc<dyn Clock>) -> Self {
        let services = Arc::new(services);
        let auth = Auth::new(
            config.domain_auth.clone(),
            config.admin_token.clone(),
            Arc::clone(&services.registry),
            Arc::clone(&clock),
        );
        let dispatcher = Dispatcher::new(
            Arc::clone(&services.queue),
            Arc::clone(&services.registry),
            Arc::clone(&clock),
            config.dispatch_settings(),
        );
        // Jobs due through other nodes wake this node's pumps (adapters shared by nodes).
        let due: Weak<Dispatcher> = Arc::downgrade(&dispatcher);
        let due: Weak<dyn DueListener> = due;
        services.queue.subscribe(due);
        let instances = Arc::new(Instances::new(
            Arc::clone(&services),
            Arc::clone(&dispatcher),
        ));
        let invalidator = Arc::new(CacheInvalidator::new(
            Arc::clone(&instances),
            Arc::clone(&auth.keys),
        ));
        // Held weakly by the registry: it stops being called when this state is dropped.
        let listener: Weak<CacheInvalidator> = Arc::downgrade(&invalidator);
        let listener: Weak<dyn ChangeListener> = listener;
        services.registry.subscribe(listener);
        let connections = ConnectionLimits::new(
            config.connections.max_connections,
            config.connections.max_connections_per_client,
        );
        Self {
            connections,
            instances,
            services,
            config: Arc::new(config),
            metrics: Arc::new(Metrics::default()),
            auth: Arc::new(auth),
            invalidator,
            clock,
            dispatcher,
        }
    }
}
