//! What each application's plan allows, looked up once in a while rather than per request.
//!
//! The limits themselves are [`quintet_core::accounts::Limits`], per plan; this module
//! finds the plan of an application (its account's) through the registry and keeps it for
//! [`TTL_MS`], so a plan change reaches every node within that time (and this node's at
//! once: the admin API calls [`Quotas::forget_all`]). The domain application and the
//! applications of no account have no limits.

use std::{collections::HashMap, sync::Arc, sync::Mutex};

use quintet_core::{
    AppName, Clock, Result,
    accounts::{Limits, Plan, PlanLimits},
    ports::registry::Registry,
};

/// How long a looked-up plan is used before it is looked up again, in milliseconds.
pub const TTL_MS: i64 = 5_000;

/// The plan of each application, cached; see the module documentation.
#[derive(Debug)]
pub struct Quotas {
    registry: Arc<dyn Registry>,
    clock: Arc<dyn Clock>,
    limits: PlanLimits,
    cache: Mutex<HashMap<AppName, (i64, Option<Plan>)>>,
}

impl Quotas {
    /// Plans looked up in `registry`, timed by `clock`, allowing `limits`.
    pub fn new(registry: Arc<dyn Registry>, clock: Arc<dyn Clock>, limits: PlanLimits) -> Self {
        Self {
            registry,
            clock,
            limits,
            cache: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<AppName, (i64, Option<Plan>)>> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The plan of `app` with its limits; `None` when it has none (the domain
    /// application, or an application that no longer exists).
    pub async fn of(&self, app: &AppName) -> Result<Option<(Plan, Limits)>> {
        if app.is_domain() {
            return Ok(None);
        }
        let now = self.clock.now_ms();
        if let Some(&(at, plan)) = self.lock().get(app)
            && now.saturating_sub(at) < TTL_MS
        {
            return Ok(plan.map(|p| (p, self.limits.of(p))));
        }
        let plan = match self.registry.get_app(app).await? {
            Some(found) => match found.account {
                Some(account) => self
                    .registry
                    .get_account(&account)
                    .await?
                    .map(|u| u.account.plan),
                None => None,
            },
            None => None,
        };
        let mut cache = self.lock();
        if cache.len() > 100_000 {
            cache.clear();
        }
        cache.insert(app.clone(), (now, plan));
        Ok(plan.map(|p| (p, self.limits.of(p))))
    }

    /// Forget every cached plan (a plan changed).
    pub fn forget_all(&self) {
        self.lock().clear();
    }
}

/// How long a measured usage is trusted, in milliseconds. Between measures, this node
/// adds what it writes, so a burst of uploads is counted at once.
pub const USAGE_TTL_MS: i64 = 5_000;

/// What a plan's byte quotas count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Counted {
    /// Storage objects.
    Storage,
    /// Cache entries.
    Cache,
}

/// The bytes each application keeps in storage and in the cache, measured through the
/// ports at most [`USAGE_TTL_MS`] ago. Quotas checked against it are approximate across
/// nodes by that much: another node's writes are seen at the next measure.
#[derive(Debug)]
pub struct Usage {
    services: Arc<crate::services::Services>,
    clock: Arc<dyn Clock>,
    measured: Mutex<HashMap<(AppName, Counted), (i64, u64)>>,
}

impl Usage {
    /// Usage measured through `services`, timed by `clock`.
    pub fn new(services: Arc<crate::services::Services>, clock: Arc<dyn Clock>) -> Self {
        Self {
            services,
            clock,
            measured: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(AppName, Counted), (i64, u64)>> {
        self.measured.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The bytes `app` keeps of `what`.
    pub async fn of(&self, app: &AppName, what: Counted) -> Result<u64> {
        let now = self.clock.now_ms();
        if let Some(&(at, bytes)) = self.lock().get(&(app.clone(), what))
            && now.saturating_sub(at) < USAGE_TTL_MS
        {
            return Ok(bytes);
        }
        let kind = match what {
            Counted::Storage => quintet_core::ServiceType::Storage,
            Counted::Cache => quintet_core::ServiceType::Cache,
        };
        let mut total = 0u64;
        for instance in self.services.registry.list_instances(Some(app)).await? {
            if instance.kind() != kind {
                continue;
            }
            let bytes = match what {
                Counted::Storage => self.services.storage.stored_bytes(&instance).await,
                Counted::Cache => self.services.cache.usage(&instance).await.map(|u| u.bytes),
            };
            match bytes {
                Ok(b) => total = total.saturating_add(b),
                // Destroyed meanwhile: it keeps nothing.
                Err(quintet_core::Error::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        let mut measured = self.lock();
        if measured.len() > 100_000 {
            measured.clear();
        }
        measured.insert((app.clone(), what), (now, total));
        Ok(total)
    }

    /// This node just wrote `bytes` more of `what` for `app`.
    pub fn add(&self, app: &AppName, what: Counted, bytes: u64) {
        if let Some(entry) = self.lock().get_mut(&(app.clone(), what)) {
            entry.1 = entry.1.saturating_add(bytes);
        }
    }
}
