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
    sync::{Arc, Mutex, OnceLock, Weak},
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
    sync::{Notify, watch},
    task::JoinHandle,
    time::Instant,
};

use self::{
    deliver::Delivery,
    pump::{Mode, Pump},
};

/// Dispatcher settings, from the server configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Refuse targets on loopback, private and link-local addresses.
    pub deny_private: bool,
    /// Delay before the first retry of an unreachable worker; doubles with each retry.
    pub backoff_base: Duration,
    /// How long deliveries in flight may finish after a shutdown signal.
    pub shutdown_timeout: Duration,
}

/// Delivers the jobs of every queue; see the module documentation.
#[derive(Debug)]
pub struct Dispatcher {
    port: Arc<dyn JobQueue>,
    registry: Arc<dyn Registry>,
    clock: Arc<dyn Clock>,
    settings: Settings,
    client: OnceLock<reqwest::Client>,
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
    ) -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            port,
            registry,
            clock,
            settings,
            client: OnceLock::new(),
            inner: Mutex::new(Inner::default()),
            me: me.clone(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding this lock leaves plain maps behind; keep using them.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Build the HTTP client, release leases left by a crash, and start a pump for every
    /// queue. Called once, when the server starts serving.
    pub async fn start(&self) -> Result<()> {
        let mut builder = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("quintet/", env!("CARGO_PKG_VERSION")))
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(60));
        if self.settings.deny_private {
            builder = builder.dns_resolver(guard::GuardedResolver);
        }
        let client = builder
            .build()
            .map_err(|e| Error::internal(format!("cannot build the queue's HTTP client: {e}")))?;
        let _ = self.client.set(client);
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
        let client = self
            .client
            .get()
            .cloned()
            .ok_or_else(|| "the dispatcher has not started".to_owned())?;
        let backoff_base_ms =
            u64::try_from(self.settings.backoff_base.as_millis()).unwrap_or(u64::MAX);
        let delivery = Delivery::new(
            config,
            client,
            Arc::clone(&self.clock),
            backoff_base_ms,
            self.settings.deny_private,
        )?;
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

    /// The `--queue-deny-private` check of a new queue's target (422 when refused).
    pub async fn check_target(&self, config: &QueueConfig) -> Result<()> {
        if self.settings.deny_private {
            guard::check_target(&config.target).await
        } else {
            Ok(())
        }
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
