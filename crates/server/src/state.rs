//! Shared state of the HTTP layer: the ports, the instance directory and the configuration.

use std::sync::{Arc, Weak};

use quintet_core::{
    Clock, InstanceId, Result, ServiceType, SystemClock,
    ports::{
        Lifecycle,
        cache::Cache,
        data::DocStore,
        queue::{DueListener, JobQueue},
        registry::{ChangeListener, Registry},
        search::SearchIndex,
        storage::ObjectStorage,
    },
};

use crate::{
    auth::Auth,
    changes::CacheInvalidator,
    config::Config,
    cors::OriginPolicy,
    dispatch::Dispatcher,
    hosts::HostPolicy,
    instances::Instances,
    metrics::Metrics,
    quota::{Quotas, Usage},
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
    /// [`Lifecycle::sweep`]). Run once at start-up.
    pub async fn sweep(&self) -> Result<()> {
        let all = self.registry.list_instances(None).await?;
        for kind in ServiceType::ALL {
            let live = kept_by_sweep(&all, kind);
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

/// How many ids above the highest one the registry listed a sweep leaves alone.
const SWEEP_SPARED_IDS: i64 = 1024;

/// The ids of `kind` a start-up sweep must keep: every instance the registry listed, and
/// the next [`SWEEP_SPARED_IDS`] ids after the highest of any type. Registries hand out
/// increasing ids that are never reused, so an instance another node creates while this
/// one sweeps (after the listing) gets one of those and keeps its contents; an orphan
/// among them is removed by a later sweep, once newer instances exist.
fn kept_by_sweep(all: &[quintet_core::Instance], kind: ServiceType) -> Vec<InstanceId> {
    let highest = all.iter().map(|i| i.id.0).max().unwrap_or(0);
    all.iter()
        .filter(|i| i.kind() == kind)
        .map(|i| i.id)
        .chain((1..=SWEEP_SPARED_IDS).map(|n| InstanceId(highest.saturating_add(n))))
        .collect()
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
    /// Credentials: the admin token, the domain auth mode, access keys.
    pub auth: Arc<Auth>,
    /// The registry's listener keeping the caches true to changes made by other nodes.
    pub invalidator: Arc<CacheInvalidator>,
    /// The source of time.
    pub clock: Arc<dyn Clock>,
    /// Delivers queued jobs to workers.
    pub dispatcher: Arc<Dispatcher>,
    /// The `Host` values served with `--auth none`.
    pub hosts: Arc<HostPolicy>,
    /// The web origins that may call from a browser.
    pub origins: Arc<OriginPolicy>,
    /// Each application's plan limits.
    pub quotas: Arc<Quotas>,
    /// The bytes each application keeps, for its plan's quotas.
    pub usage: Arc<Usage>,
}

impl AppState {
    /// State over `services` with `config`, on the system clock.
    pub fn new(services: Services, config: Config) -> Self {
        Self::with_clock(services, config, Arc::new(SystemClock))
    }

    /// State over `services` with `config`, reading time from `clock`.
    pub fn with_clock(services: Services, config: Config, clock: Arc<dyn Clock>) -> Self {
        let services = Arc::new(services);
        let auth = Auth::new(&config, Arc::clone(&services.registry), Arc::clone(&clock));
        let quotas = Arc::new(Quotas::new(
            Arc::clone(&services.registry),
            Arc::clone(&clock),
            config.plan_limits.clone(),
        ));
        let dispatcher = Dispatcher::new(
            Arc::clone(&services.queue),
            Arc::clone(&services.registry),
            Arc::clone(&clock),
            config.dispatch_settings(),
            Arc::clone(&quotas),
        );
        // Jobs due through other nodes wake this node's pumps (adapters shared by nodes).
        let due: Weak<Dispatcher> = Arc::downgrade(&dispatcher);
        let due: Weak<dyn DueListener> = due;
        services.queue.subscribe(due);
        let instances = Arc::new(Instances::new(
            Arc::clone(&services),
            Arc::clone(&dispatcher),
            Arc::clone(&quotas),
        ));
        let invalidator = Arc::new(CacheInvalidator::new(
            Arc::clone(&instances),
            Arc::clone(&auth.keys),
        ));
        // Held weakly by the registry: it stops being called when this state is dropped.
        let listener: Weak<CacheInvalidator> = Arc::downgrade(&invalidator);
        let listener: Weak<dyn ChangeListener> = listener;
        services.registry.subscribe(listener);
        let hosts = Arc::new(HostPolicy::new(
            config.listen,
            config.public_url.as_deref(),
            &config.allowed_hosts,
        ));
        let origins = Arc::new(OriginPolicy::new(
            &config.cors_origins,
            config.tls.is_some(),
            config.public_url.as_deref(),
        ));
        let usage = Arc::new(Usage::new(Arc::clone(&services), Arc::clone(&clock)));
        Self {
            instances,
            services,
            hosts,
            origins,
            quotas,
            usage,
            config: Arc::new(config),
            metrics: Arc::new(Metrics::default()),
            auth: Arc::new(auth),
            invalidator,
            clock,
            dispatcher,
        }
    }
}

#[cfg(test)]
mod tests {
    use quintet_core::{AppName, Instance, InstanceConfig};

    use super::*;

    fn instance(id: i64, config: InstanceConfig) -> Instance {
        Instance {
            id: InstanceId(id),
            app: AppName::domain(),
            name: format!("i{id}").parse().unwrap(),
            config,
            created_ms: 0,
        }
    }

    #[test]
    fn a_sweep_keeps_listed_instances_and_ids_handed_out_after_the_listing() {
        let all = [
            instance(3, InstanceConfig::Data),
            instance(7, InstanceConfig::Cache),
            instance(9, InstanceConfig::Data),
        ];
        let kept = kept_by_sweep(&all, ServiceType::Data);
        assert!(kept.contains(&InstanceId(3)) && kept.contains(&InstanceId(9)));
        // Another type's instance is not kept, nor are unlisted ids below the highest.
        for gone in [7, 8, 1] {
            assert!(!kept.contains(&InstanceId(gone)), "{gone}");
        }
        // Ids created through another node after the listing are spared.
        assert!(kept.contains(&InstanceId(10)) && kept.contains(&InstanceId(9 + 1024)));
        assert!(!kept.contains(&InstanceId(9 + 1025)));
        let empty = kept_by_sweep(&[], ServiceType::Cache);
        assert!(empty.contains(&InstanceId(1)));
    }
}
