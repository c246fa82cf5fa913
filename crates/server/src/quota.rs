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
    accounts::{Limits, Plan},
    ports::registry::Registry,
};

/// How long a looked-up plan is used before it is looked up again, in milliseconds.
pub const TTL_MS: i64 = 5_000;

/// The plan of each application, cached; see the module documentation.
#[derive(Debug)]
pub struct Quotas {
    registry: Arc<dyn Registry>,
    clock: Arc<dyn Clock>,
    cache: Mutex<HashMap<AppName, (i64, Option<Plan>)>>,
}

impl Quotas {
    /// Plans looked up in `registry`, timed by `clock`.
    pub fn new(registry: Arc<dyn Registry>, clock: Arc<dyn Clock>) -> Self {
        Self {
            registry,
            clock,
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
            return Ok(plan.map(|p| (p, p.limits())));
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
        Ok(plan.map(|p| (p, p.limits())))
    }

    /// Forget every cached plan (a plan changed).
    pub fn forget_all(&self) {
        self.lock().clear();
    }
}
