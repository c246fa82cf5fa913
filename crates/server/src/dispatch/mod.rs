//! The queue dispatcher: delivers jobs to workers.
//!
//! One [`pump`] task per queue claims due jobs from the [`JobQueue`] port with a lease,
//! delivers each with a POST ([`deliver`]) up to the queue's concurrency, and settles the
//! outcomes. Enqueues wake the queue's pump at once, so a job is on its way within
//! milliseconds; retries wake it when they fall due.
//!
//! - Queues never wait for each other: each has its own pump and delivery slots.
//! - [`Dispatcher::start`] (from `serve`) releases leases left by a crash and starts a pump
//!   for every existing queue, so READY jobs are delivered after a restart.
//! - [`Dispatcher::forget`] (on destroy) stops a queue's pump and abandons its deliveries.
//! - Jobs enqueued through other nodes, and leases of dead nodes running out, are
//!   announced by adapters shared by nodes ([`DueListener`]): the queue's pump here is
//!   woken, or started after finding the queue in the registry.
//! - [`Dispatcher::begin_shutdown`] stops claiming; [`Dispatcher::finish`] lets deliveries in
//!   flight end, up to the shutdown timeout. Deliveries cut off keep their leases and are
//!   delivered again at the next start (at-least-once).
//!
//! Time comes from the [`Clock`]: signature timestamps, due times, leases.

mod deliver;
pub mod guard;
mod pump;

use std::{
    collections::{HashMap, HashSet},
    net::SocketAddr,
    sync::{Arc, Mutex, Weak},
    time::Duration,
};

use quintet_core::{
    AppName, Clock, Error, Instance, InstanceConfig, InstanceId, Result, ServiceType,
    ports::{
        queue::{DueListener, JobQueue, QueueConfig},
        registry::Registry,
    },
};
use tokio::{
    sync::{Notify, OwnedSemaphorePermit, Semaphore, watch},
    task::JoinHandle,
    time::Instant,
};

use crate::{config::PrivateTargets, quota::Quotas};

use self::{
    deliver::Delivery,
    guard::TargetPolicy,
    pump::{Mode, Pump},
};

/// Dispatcher settings, from the server configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Which queues may deliver to loopback, private and link-local addresses.
    pub private_targets: PrivateTargets,
    /// The HTTP(S) proxy every delivery goes through, if any.
    pub egress_proxy: Option<String>,
    /// The configured listen address (its port is replaced by the bound one, see
    /// [`Dispatcher::listening_on`]).
    pub own_listener: SocketAddr,
    /// The public URL, another name of this server.
    pub public_url: Option<String>,
    /// Delay before the first retry of an unreachable worker; doubles with each retry.
    pub backoff_base: Duration,
    /// How long deliveries in flight may finish after a shutdown signal.
    pub shutdown_timeout: Duration,
}

/// The delivery slots each application's plan allows across all its queues.
#[derive(Debug)]
pub(crate) struct AppSlots {
    quotas: Arc<Quotas>,
    slots: Mutex<HashMap<AppName, (usize, Arc<Semaphore>)>>,
}

impl AppSlots {
    /// A slot for one delivery of `app`: `Ok(None)` when its plan has no limit, `Err` with
    /// the limit when none came free within `wait`.
    pub(crate) async fn acquire(
        &self,
        app: &AppName,
        wait: Duration,
    ) -> std::result::Result<Option<OwnedSemaphorePermit>, usize> {
        let limit = match self.quotas.of(app).await {
            Ok(Some((_, limits))) => limits.deliveries_per_app,
            // No plan, or the registry cannot say: do not hold deliveries up.
            Ok(None) | Err(_) => return Ok(None),
        };
        let semaphore = {
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            let entry = slots
                .entry(app.clone())
                .or_insert_with(|| (limit, Arc::new(Semaphore::new(limit))));
            if entry.0 != limit {
                // The plan changed: deliveries holding slots of the old size finish there.
                *entry = (limit, Arc::new(Semaphore::new(limit)));
            }
            Arc::clone(&entry.1)
        };
        match tokio::time::timeout(wait, semaphore.acquire_owned()).await {
            Ok(Ok(permit)) => Ok(Some(permit)),
            _ => Err(limit),
        }
    }
}

/// Delivers the jobs of every queue; see the module documentation.
#[derive(Debug)]
pub struct Dispatcher {
    port: Arc<dyn JobQueue>,
    registry: Arc<dyn Registry>,
    clock: Arc<dyn Clock>,
    settings: Settings,
    /// Where this server listens, once bound.
    own: Mutex<Vec<SocketAddr>>,
    app_slots: Arc<AppSlots>,
    metrics: Arc<crate::metrics::Metrics>,
    inner: Mutex<Inner>,
    /// Itself, for the tasks it starts when another node announces due jobs.
    me: Weak<Dispatcher>,
}

#[derive(Debug, Default)]
struct Inner {
    pumps: HashMap<InstanceId, PumpHandle>,
    /// Destroyed queues: never pumped again (instance ids are never reused).
    gone: HashSet<InstanceId>,
    /// Queues announced as due whose pump is being started (looked up in the registry).
    finding: HashSet<InstanceId>,
    /// Whether pumps may be started (between `start` and `begin_shutdown`).
    accepting: bool,
    /// When deliveries in flight at shutdown are cut off.
    deadline: Option<Instant>,
}

#[derive(Debug)]
struct PumpHandle {
    app: AppName,
    wake: Arc<Notify>,
    mode: watch::Sender<Mode>,
    task: JoinHandle<()>,
}

impl Dispatcher {
    /// A dispatcher over `port`, finding queues in `registry`, taking time from `clock`.
    /// It hears of jobs due through other nodes once subscribed to `port`
    /// ([`JobQueue::subscribe`]).
    pub fn new(
        port: Arc<dyn JobQueue>,
        registry: Arc<dyn Registry>,
        clock: Arc<dyn Clock>,
        settings: Settings,
        quotas: Arc<Quotas>,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            port,
            registry,
            clock,
            own: Mutex::new(vec![settings.own_listener]),
            settings,
            app_slots: Arc::new(AppSlots {
                quotas,
                slots: Mutex::new(HashMap::new()),
            }),
            metrics,
            inner: Mutex::new(Inner::default()),
            me: me.clone(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding this lock leaves plain maps behind; keep using them.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The server is listening on `addr` (with the port actually bound): deliveries there
    /// are refused. Called before [`Dispatcher::start`].
    pub fn listening_on(&self, addr: SocketAddr) {
        let mut own = self.own.lock().unwrap_or_else(|p| p.into_inner());
        own.retain(|a| a.port() != 0);
        if !own.contains(&addr) {
            own.push(addr);
        }
    }

    /// What a queue of `app` may reach.
    fn policy(&self, app: &AppName) -> TargetPolicy {
        let public = self.settings.public_url.as_deref().and_then(|u| {
            let url = reqwest::Url::parse(u).ok()?;
            Some((
                url.host_str()?.to_ascii_lowercase(),
                url.port_or_known_default()?,
            ))
        });
        TargetPolicy {
            private_allowed: self.settings.private_targets.allows(app),
            own: self.own.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            public,
        }
    }

    /// The HTTP client of one queue, whose resolver enforces `policy` for a target on
    /// `port` (or which goes through the egress proxy).
    fn client(&self, policy: &Arc<TargetPolicy>, port: u16) -> Result<reqwest::Client> {
        crate::tls::install_crypto_provider();
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("quintet/", env!("CARGO_PKG_VERSION")))
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(60));
        builder = match &self.settings.egress_proxy {
            Some(proxy) => builder.proxy(reqwest::Proxy::all(proxy).map_err(|e| {
                Error::internal(format!("the queue egress proxy is not usable: {e}"))
            })?),
            None => builder.no_proxy().dns_resolver(guard::GuardedResolver {
                policy: Arc::clone(policy),
                port,
            }),
        };
        builder
            .build()
            .map_err(|e| Error::internal(format!("cannot build the queue's HTTP client: {e}")))
    }

    /// Release leases left by a crash, and start a pump for every queue. Called once, when
    /// the server starts serving.
    pub async fn start(&self) -> Result<()> {
        let released = self.port.recover(self.clock.now_ms()).await?;
        if released > 0 {
            tracing::warn!(
                jobs = released,
                "jobs in flight when the server stopped will be delivered again"
            );
        }
        let queues: Vec<Instance> = self
            .registry
            .list_instances(None)
            .await?
            .into_iter()
            .filter(|i| i.kind() == ServiceType::Queue)
            .collect();
        self.lock().accepting = true;
        for queue in queues {
            self.wake(&Arc::new(queue));
        }
        Ok(())
    }

    /// Something may be due in `queue` (a job was enqueued or retried): make its pump look
    /// now, starting it if needed.
    pub fn wake(&self, queue: &Arc<Instance>) {
        let mut inner = self.lock();
        if !inner.accepting || inner.gone.contains(&queue.id) {
            return;
        }
        if let Some(pump) = inner.pumps.get(&queue.id)
            && !pump.task.is_finished()
        {
            pump.wake.notify_one();
            return;
        }
        match self.spawn(queue) {
            Ok(handle) => {
                inner.pumps.insert(queue.id, handle);
            }
            Err(e) => tracing::error!(queue = %queue.name, error = %e, "cannot start deliveries"),
        }
    }

    /// Start the pump of the queue with id `queue`, found in the registry: it has none here
    /// yet because the queue was created, or only used, through another node.
    fn find_and_wake(&self, queue: InstanceId) {
        let (Some(me), Ok(runtime)) = (self.me.upgrade(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        if !self.lock().finding.insert(queue) {
            return; // a lookup is under way
        }
        runtime.spawn(async move {
            let found = me.registry.list_instances(None).await;
            me.lock().finding.remove(&queue);
            match found {
                Ok(all) => {
                    if let Some(instance) = all
                        .into_iter()
                        .find(|i| i.id == queue && i.kind() == ServiceType::Queue)
                    {
                        me.wake(&Arc::new(instance));
                    }
                }
                Err(e) => tracing::warn!(%queue, error = %e, "cannot find an announced queue"),
            }
        });
    }

    fn spawn(&self, queue: &Arc<Instance>) -> std::result::Result<PumpHandle, String> {
        let InstanceConfig::Queue(config) = &queue.config else {
            return Err("not a queue".to_owned());
        };
        let target = reqwest::Url::parse(&config.target)
            .map_err(|e| format!("target \"{}\" is not a valid URL: {e}", config.target))?;
        let policy = Arc::new(self.policy(&queue.app));
        let port = target.port_or_known_default().unwrap_or(80);
        let client = self.client(&policy, port).map_err(|e| e.to_string())?;
        let backoff_base_ms =
            u64::try_from(self.settings.backoff_base.as_millis()).unwrap_or(u64::MAX);
        let delivery = Delivery {
            client,
            clock: Arc::clone(&self.clock),
            target,
            secret: config.secret.clone(),
            sign_job_id: config.sign_job_id,
            timeout: Duration::from_secs(u64::from(config.timeout_secs)),
            retries: config.retries,
            backoff_base_ms,
            policy,
            app: queue.app.clone(),
            app_slots: Arc::clone(&self.app_slots),
            metrics: Arc::clone(&self.metrics),
            label: format!("{}/{}", queue.app, queue.name),
        };
        let wake = Arc::new(Notify::new());
        let (mode, mode_rx) = watch::channel(Mode::Run);
        let pump = Pump {
            port: Arc::clone(&self.port),
            instance: Arc::clone(queue),
            delivery: Arc::new(delivery),
            concurrency: usize::try_from(config.concurrency).unwrap_or(1).max(1),
            wake: Arc::clone(&wake),
            mode: mode_rx,
        };
        let task = tokio::spawn(pump.run());
        Ok(PumpHandle {
            app: queue.app.clone(),
            wake,
            mode,
            task,
        })
    }

    /// The queue was destroyed: stop its pump and abandon its deliveries in flight. Returns
    /// once the pump has stopped, so no delivery of the queue starts afterwards.
    pub async fn forget(&self, queue: InstanceId) {
        let handle = {
            let mut inner = self.lock();
            inner.gone.insert(queue);
            inner.pumps.remove(&queue)
        };
        if let Some(handle) = handle {
            let _ = handle.mode.send(Mode::Stop);
            if let Err(e) = handle.task.await
                && e.is_panic()
            {
                tracing::error!(%queue, "the queue's pump panicked");
            }
        }
    }

    /// The queue was destroyed, possibly through another node: stop its pump now, without
    /// waiting ([`Dispatcher::forget`] waits).
    pub fn stop(&self, queue: InstanceId) {
        let mut inner = self.lock();
        inner.gone.insert(queue);
        if let Some(pump) = inner.pumps.get(&queue) {
            let _ = pump.mode.send(Mode::Stop);
        }
    }

    /// The application was deleted, possibly through another node: stop the pumps of its
    /// queues now.
    pub fn stop_app(&self, app: &AppName) {
        let mut inner = self.lock();
        let ids: Vec<InstanceId> = inner
            .pumps
            .iter()
            .filter(|(_, pump)| &pump.app == app)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            inner.gone.insert(id);
            if let Some(pump) = inner.pumps.get(&id) {
                let _ = pump.mode.send(Mode::Stop);
            }
        }
    }

    /// The check of a new queue's target for `app` (422 when refused; see [`guard`]).
    pub async fn check_target(&self, app: &AppName, config: &QueueConfig) -> Result<()> {
        if self.settings.egress_proxy.is_some() {
            // The proxy resolves names; literals and the server's own names are still ours.
            let url = reqwest::Url::parse(&config.target).map_err(|e| {
                Error::invalid(format!(
                    "\"target\" \"{}\" is not a valid URL: {e}",
                    config.target
                ))
            })?;
            return self
                .policy(app)
                .check_literal(&url)
                .map_err(|d| Error::invalid(format!("\"target\" \"{}\": {d}", config.target)));
        }
        self.policy(app).check_target(&config.target).await
    }

    /// Stop claiming jobs; deliveries in flight go on until [`Dispatcher::finish`]'s
    /// deadline, the shutdown timeout from now.
    pub fn begin_shutdown(&self) {
        let mut inner = self.lock();
        if inner.deadline.is_none() {
            inner.deadline = Some(Instant::now() + self.settings.shutdown_timeout);
        }
        inner.accepting = false;
        for pump in inner.pumps.values() {
            let _ = pump.mode.send(Mode::Drain);
        }
    }

    /// Wait for deliveries in flight to finish and be recorded, until the shutdown
    /// deadline; then abandon the rest (their jobs are delivered again at the next start).
    pub async fn finish(&self) {
        self.begin_shutdown();
        let (pumps, deadline) = {
            let mut inner = self.lock();
            let pumps: Vec<PumpHandle> = inner.pumps.drain().map(|(_, p)| p).collect();
            (pumps, inner.deadline.unwrap_or_else(Instant::now))
        };
        for mut pump in pumps {
            if tokio::time::timeout_at(deadline, &mut pump.task)
                .await
                .is_err()
            {
                tracing::warn!("shutdown timeout: abandoning deliveries in flight");
                pump.task.abort();
            }
        }
    }
}

impl DueListener for Dispatcher {
    /// Another node enqueued or retried a job of `queue`, or a lease ran out: look now.
    fn due(&self, queue: InstanceId) {
        {
            let inner = self.lock();
            if !inner.accepting || inner.gone.contains(&queue) {
                return;
            }
            if let Some(pump) = inner.pumps.get(&queue)
                && !pump.task.is_finished()
            {
                pump.wake.notify_one();
                return;
            }
        }
        self.find_and_wake(queue);
    }
}
