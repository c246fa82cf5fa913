//! Creating, destroying and resolving instances, with an in-memory cache of the registry
//! so that resolving an instance on a request does not touch the disk.
//!
//! The cache forgets an instance when this node destroys it, and when the registry's
//! change feed reports that another node did ([`Instances::apply`]). Every invalidation
//! bumps an epoch, and an instance read from the registry is cached only when no
//! invalidation happened while it was read, so a read racing a destroy on another node
//! cannot put the destroyed instance back.

use std::{
    collections::HashMap,
    sync::{
        Arc, RwLock,
        atomic::{AtomicU64, Ordering},
    },
};

use quintet_core::{
    AppName, Error, Instance, InstanceConfig, InstanceName, Result, ServiceType,
    accounts::{App, Limits},
    ports::registry::{RegistryChange, answers},
};

use crate::{dispatch::Dispatcher, quota::Quotas, services::Services};

type ByName = HashMap<String, Arc<Instance>>;

/// The instance directory of the server.
#[derive(Debug)]
pub struct Instances {
    services: Arc<Services>,
    /// Told when a queue is destroyed, and asked to check a new queue's target.
    dispatcher: Arc<Dispatcher>,
    /// Application name → per-type maps of name → instance, indexed by `ServiceType`.
    cache: RwLock<HashMap<String, [ByName; 5]>>,
    /// Bumped by every invalidation.
    epoch: AtomicU64,
    /// Each application's plan limits.
    quotas: Arc<Quotas>,
    /// Held while an instance of an application with limits is counted and created, so
    /// that concurrent creations on this node cannot both take the last place.
    counting: tokio::sync::Mutex<()>,
    /// Held (shared) by every creation and destruction of an instance, and exclusively
    /// while a backup fixes its point in time ([`Instances::hold_changes`]).
    changes: Arc<tokio::sync::RwLock<()>>,
}

fn slot(kind: ServiceType) -> usize {
    match kind {
        ServiceType::Data => 0,
        ServiceType::Cache => 1,
        ServiceType::Search => 2,
        ServiceType::Queue => 3,
        ServiceType::Storage => 4,
    }
}

impl Instances {
    /// A directory over `services`' registry and adapters; queue lifecycles are reported to
    /// `dispatcher`.
    pub fn new(services: Arc<Services>, dispatcher: Arc<Dispatcher>, quotas: Arc<Quotas>) -> Self {
        Self {
            services,
            dispatcher,
            cache: RwLock::new(HashMap::new()),
            epoch: AtomicU64::new(0),
            quotas,
            counting: tokio::sync::Mutex::new(()),
            changes: Arc::default(),
        }
    }

    /// The instance `(app, kind, name)`, or [`Error::NotFound`].
    pub async fn resolve(
        &self,
        app: &AppName,
        kind: ServiceType,
        name: &str,
    ) -> Result<Arc<Instance>> {
        if let Some(hit) = self.cached(app, kind, name) {
            return Ok(hit);
        }
        let missing = || {
            Error::not_found(format!(
                "{kind} instance \"{name}\" does not exist; create it with PUT {}",
                quintet_core::instance::path(app, kind, name)
            ))
        };
        let Ok(parsed) = name.parse::<InstanceName>() else {
            return Err(missing());
        };
        let epoch = self.epoch.load(Ordering::SeqCst);
        let found = self
            .services
            .registry
            .get_instance(app, kind, &parsed)
            .await?
            .ok_or_else(missing)?;
        let found = Arc::new(found);
        if let Ok(mut cache) = self.cache.write()
            && self.epoch.load(Ordering::SeqCst) == epoch
        {
            cache.entry(app.as_str().to_owned()).or_default()[slot(kind)]
                .insert(name.to_owned(), Arc::clone(&found));
        }
        Ok(found)
    }

    fn cached(&self, app: &AppName, kind: ServiceType, name: &str) -> Option<Arc<Instance>> {
        let cache = self.cache.read().ok()?;
        cache.get(app.as_str())?[slot(kind)].get(name).cloned()
    }

    fn forget(&self, app: &AppName, kind: ServiceType, name: &str) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut cache) = self.cache.write()
            && let Some(by_type) = cache.get_mut(app.as_str())
        {
            by_type[slot(kind)].remove(name);
        }
    }

    fn forget_app(&self, app: &AppName) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut cache) = self.cache.write() {
            cache.remove(app.as_str());
        }
    }

    fn forget_all(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut cache) = self.cache.write() {
            cache.clear();
        }
    }

    /// Bring the cache in line with a change to the registry, made by this node or
    /// another: instances created or deleted and applications deleted are forgotten (a
    /// created one may replace a deleted one this node missed), a resync forgets
    /// everything. Changes to keys do not concern instances.
    pub fn apply(&self, change: &RegistryChange) {
        // Queues destroyed through another node stop delivering here too.
        match change {
            RegistryChange::InstanceDeleted {
                kind: ServiceType::Queue,
                id,
                ..
            } => self.dispatcher.stop(*id),
            RegistryChange::AppDeleted { app } => self.dispatcher.stop_app(app),
            _ => {}
        }
        match change {
            RegistryChange::InstanceCreated {
                app, kind, name, ..
            }
            | RegistryChange::InstanceDeleted {
                app, kind, name, ..
            } => self.forget(app, *kind, name.as_str()),
            RegistryChange::AppDeleted { app } => self.forget_app(app),
            RegistryChange::Resync => self.forget_all(),
            RegistryChange::KeyCreated { .. } | RegistryChange::KeyRevoked { .. } => {}
        }
    }

    /// Wait until no instance is being created or destroyed, and keep it so until the
    /// guard is dropped: a backup fixes the registry's and the stores' points meanwhile,
    /// so that they agree (no instance recorded without its contents, no contents of an
    /// instance the registry never handed out).
    pub async fn hold_changes(&self) -> tokio::sync::OwnedRwLockWriteGuard<()> {
        Arc::clone(&self.changes).write_owned().await
    }

    /// Record a new instance in the registry, then prepare its storage. When the adapter
    /// fails, the registry entry is removed again so no half-created instance remains.
    pub async fn create(
        &self,
        app: &AppName,
        name: &InstanceName,
        config: InstanceConfig,
    ) -> Result<Instance> {
        let kind = config.kind();
        let _change = self.changes.read().await;
        if let InstanceConfig::Queue(queue) = &config {
            self.dispatcher.check_target(app, queue).await?;
        }
        let _counting = match self.quotas.of(app).await? {
            Some((plan, limits)) => {
                let guard = self.counting.lock().await;
                let existing = self.services.registry.list_instances(Some(app)).await?;
                Limits::check_count(plan, "instances", limits.instances_per_app, existing.len())?;
                if kind == ServiceType::Queue {
                    let queues = existing
                        .iter()
                        .filter(|i| i.kind() == ServiceType::Queue)
                        .count();
                    Limits::check_count(plan, "queues", limits.queues_per_app, queues)?;
                }
                Some(guard)
            }
            None => None,
        };
        let instance = self
            .services
            .registry
            .create_instance(app, name, config)
            .await?;
        if let Err(e) = self
            .services
            .lifecycle(kind)
            .create_instance(&instance)
            .await
        {
            if let Err(undo) = self
                .services
                .registry
                .delete_instance(app, kind, name)
                .await
            {
                tracing::error!(error = %undo, instance = %instance.id, "undoing a failed create");
            }
            return Err(e);
        }
        Ok(instance)
    }

    /// Remove the instance from the registry (it is gone for every request from then on),
    /// then drop its contents. A crash in between leaves contents that the start-up sweep
    /// removes.
    pub async fn destroy(&self, app: &AppName, kind: ServiceType, name: &str) -> Result<Instance> {
        let parsed: InstanceName = name
            .parse()
            .map_err(|_| answers::instance_missing(kind, name))?;
        let _change = self.changes.read().await;
        let instance = self
            .services
            .registry
            .delete_instance(app, kind, &parsed)
            .await;
        self.forget(app, kind, name);
        let instance = instance?;
        crate::failpoint::hit("instance-destroyed");
        if kind == ServiceType::Queue {
            // No delivery of the queue may run once its contents are dropped.
            self.dispatcher.forget(instance.id).await;
        }
        self.services
            .lifecycle(kind)
            .drop_instance(&instance)
            .await?;
        Ok(instance)
    }

    /// Forget the application with its keys and instance records (it is gone for every
    /// request from then on) and return it with its instances, whose contents the caller
    /// then removes with [`Instances::drop_contents`]. A crash in between leaves contents
    /// that the start-up sweep removes.
    pub async fn delete_app(&self, app: &AppName) -> Result<(App, Vec<Instance>)> {
        let _change = self.changes.read().await;
        let deleted = self.services.registry.delete_app(app).await;
        self.forget_app(app);
        deleted
    }

    /// Remove the contents of instances already removed from the registry. Tries every
    /// instance and reports the first failure.
    pub async fn drop_contents(&self, instances: &[Instance]) -> Result<()> {
        let mut first = Ok(());
        for (i, instance) in instances.iter().enumerate() {
            if i == 1 {
                crate::failpoint::hit("app-contents-midway");
            }
            if instance.kind() == ServiceType::Queue {
                // No delivery of the queue may run once its contents are dropped.
                self.dispatcher.forget(instance.id).await;
            }
            let dropped = self
                .services
                .lifecycle(instance.kind())
                .drop_instance(instance)
                .await;
            if let Err(e) = dropped {
                tracing::error!(error = %e, instance = %instance.id, "dropping an instance's contents");
                first = first.and(Err(e));
            }
        }
        first
    }
}
