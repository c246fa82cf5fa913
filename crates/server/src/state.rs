//! Shared state of the HTTP layer: the ports, the instance directory and the configuration.

use std::sync::{Arc, Weak};

use quintet_core::{
    Clock, SystemClock,
    ports::{changes::FeedListener, queue::DueListener, registry::ChangeListener},
};

use crate::{
    admission::ConnectionLimits,
    auth::Auth,
    changes::CacheInvalidator,
    config::Config,
    cors::OriginPolicy,
    dispatch::Dispatcher,
    feed::FeedHub,
    hosts::HostPolicy,
    instances::Instances,
    metrics::Metrics,
    quota::{Quotas, Usage},
    services::Services,
};

/// The state every handler can reach: one shared allocation, so that the copies the
/// router and the extractors make of it for each request cost one reference count, not
/// one per member (eighteen atomic increments and decrements a request, contended
/// between cores, were a twentieth of a search node's time under load).
#[derive(Debug, Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What [`AppState`] holds.
#[derive(Debug, Clone)]
pub struct Shared {
    /// The ports.
    pub services: Arc<Services>,
    /// Instance lookup with its cache.
    pub instances: Arc<Instances>,
    /// Server settings.
    pub config: Arc<Config>,
    /// Request counters.
    pub metrics: Arc<Metrics>,
    /// Sizes measured for `/_metrics`, reused for a while.
    pub measured: Arc<crate::scrape::MeasureCache>,
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
    /// Request rates per client address and per access key.
    pub rates: Arc<crate::rate::RateLimits>,
    /// The bytes each application keeps, for its plan's quotas.
    pub usage: Arc<Usage>,
    /// The open connections and their bounds.
    pub connections: Arc<ConnectionLimits>,
    /// The change feeds' wake-ups and open streams.
    pub feeds: Arc<FeedHub>,
    /// When this state was made (the node started), milliseconds since the Unix epoch.
    pub started_ms: i64,
    /// Writes the node's backups (`/_admin/backups`); `None` where the node keeps nothing
    /// a backup copies (every service on shared engines).
    pub backups: Option<Arc<dyn crate::backups::Backups>>,
}

impl AppState {
    /// This state with `backups` writing the node's backups.
    #[must_use]
    pub fn with_backups(self, backups: Arc<dyn crate::backups::Backups>) -> Self {
        let mut shared = Arc::unwrap_or_clone(self.0);
        shared.backups = Some(backups);
        Self(Arc::new(shared))
    }

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
        let metrics = Arc::new(Metrics::default());
        crate::scrape::start_clock();
        let dispatcher = Dispatcher::new(
            Arc::clone(&services.queue),
            Arc::clone(&services.registry),
            Arc::clone(&clock),
            config.dispatch_settings(),
            Arc::clone(&quotas),
            Arc::clone(&metrics),
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
        let feeds = Arc::new(FeedHub::new(config.feed.clone()));
        // Held weakly by the data adapter, like the registry's listener.
        let feed_listener: Weak<FeedHub> = Arc::downgrade(&feeds);
        let feed_listener: Weak<dyn FeedListener> = feed_listener;
        services.data.subscribe_changes(feed_listener.clone());
        services.queue.subscribe_events(feed_listener.clone());
        services.storage_events.subscribe_events(feed_listener);
        let usage = Arc::new(Usage::new(Arc::clone(&services), Arc::clone(&clock)));
        let connections = ConnectionLimits::new(
            config.connections.max_connections,
            config.connections.max_connections_per_client,
        );
        Self(Arc::new(Shared {
            feeds,
            started_ms: clock.now_ms(),
            connections,
            instances,
            services,
            hosts,
            origins,
            quotas,
            rates: Arc::new(crate::rate::RateLimits::new(
                config.rate_limit_per_client,
                Arc::clone(&clock),
            )),
            usage,
            config: Arc::new(config),
            metrics,
            measured: Arc::default(),
            auth: Arc::new(auth),
            invalidator,
            clock,
            dispatcher,
            backups: None,
        }))
    }
}
