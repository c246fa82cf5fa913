//! Accounts, their plans, and the applications they own.
//!
//! An account is on a [`Plan`] that caps how many applications it may own; an application
//! owns service instances and access keys (see [`crate::keys`]). The built-in domain
//! application ([`AppName::domain`]) belongs to no account.

use std::{fmt, str::FromStr};

use serde::Serialize;

use crate::{AppName, Error, Result, names::check_name};

/// What an account pays for; it caps the number of applications.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Plan {
    /// Up to 3 applications.
    Starter,
    /// Up to 10 applications.
    Pro,
    /// Up to 20 applications.
    Business,
}

impl Plan {
    /// Every plan, smallest first.
    pub const ALL: [Plan; 3] = [Plan::Starter, Plan::Pro, Plan::Business];

    /// The lowercase name used in the API and the registry.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starter => "starter",
            Self::Pro => "pro",
            Self::Business => "business",
        }
    }

    /// The most applications an account on this plan may own.
    pub fn max_apps(self) -> usize {
        match self {
            Self::Starter => 3,
            Self::Pro => 10,
            Self::Business => 20,
        }
    }

    /// What this plan allows each application of an account on it.
    pub fn limits(self) -> Limits {
        const MIB: u64 = 1024 * 1024;
        const GIB: u64 = 1024 * MIB;
        match self {
            Self::Starter => Limits {
                instances_per_app: 25,
                queues_per_app: 5,
                deliveries_per_app: 16,
                object_bytes: 100 * MIB,
                stored_bytes_per_app: 5 * GIB,
                cache_bytes_per_app: 64 * MIB,
                requests_per_second_per_key: 1_000,
            },
            Self::Pro => Limits {
                instances_per_app: 100,
                queues_per_app: 25,
                deliveries_per_app: 64,
                object_bytes: GIB,
                stored_bytes_per_app: 100 * GIB,
                cache_bytes_per_app: 512 * MIB,
                requests_per_second_per_key: 5_000,
            },
            Self::Business => Limits {
                instances_per_app: 500,
                queues_per_app: 100,
                deliveries_per_app: 256,
                object_bytes: 5 * GIB,
                stored_bytes_per_app: 1024 * GIB,
                cache_bytes_per_app: 4 * GIB,
                requests_per_second_per_key: 20_000,
            },
        }
    }

    /// Whether an account on this plan that owns `current` applications may create one more;
    /// [`Error::Forbidden`] naming the plan and its limit when not.
    pub fn check_new_app(self, account: &AccountName, current: usize) -> Result<()> {
        if current < self.max_apps() {
            return Ok(());
        }
        Err(Error::Forbidden(format!(
            "account \"{account}\" is on the {self} plan, which allows at most {} applications; \
             delete an application or move the account to a larger plan",
            self.max_apps()
        )))
    }

    /// Whether an account that owns `current` applications may move to this plan;
    /// [`Error::Conflict`] when it owns more than the plan allows.
    pub fn check_downgrade(self, account: &AccountName, current: usize) -> Result<()> {
        if current <= self.max_apps() {
            return Ok(());
        }
        Err(Error::Conflict(format!(
            "account \"{account}\" owns {current} applications, more than the {self} plan's \
             limit of {}; delete {} of them first",
            self.max_apps(),
            current - self.max_apps()
        )))
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Plan {
    type Err = Error;

    /// Case-insensitive: `Starter` and `starter` are the same plan.
    fn from_str(s: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                Error::invalid(format!(
                    "plan \"{s}\" is not valid: use starter, pro or business"
                ))
            })
    }
}

/// The name of an account: 1–64 characters of `a-z 0-9 _ -`, starting with a letter or digit.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct AccountName(String);

impl AccountName {
    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for AccountName {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        check_name("account", s)?;
        Ok(Self(s.to_owned()))
    }
}

impl fmt::Display for AccountName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a plan allows each application of an account on it (see `docs/security.md`,
/// "Quotas"). The domain application belongs to no account and has no limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Service instances of all types.
    pub instances_per_app: usize,
    /// Queue instances (each delivers on its own, so they are counted apart).
    pub queues_per_app: usize,
    /// Queue deliveries in flight at once, over all the application's queues.
    pub deliveries_per_app: usize,
    /// Largest storage object, uploaded directly or through a pre-signed URL.
    pub object_bytes: u64,
    /// Bytes of storage objects the application may keep in all.
    pub stored_bytes_per_app: u64,
    /// Bytes (keys plus values) the application's cache entries may take in all: its share
    /// of the cache, whatever the server's bound.
    pub cache_bytes_per_app: u64,
    /// Requests per second each access key of the application may send.
    pub requests_per_second_per_key: u64,
}

impl Limits {
    /// [`Error::Forbidden`] naming the plan and the limit when an application of `plan` that
    /// keeps `used` bytes of `what` (limited to `limit`) may not add `adding` more.
    pub fn check_bytes(plan: Plan, what: &str, limit: u64, used: u64, adding: u64) -> Result<()> {
        if used.saturating_add(adding) <= limit {
            return Ok(());
        }
        Err(Error::Forbidden(format!(
            "this application keeps {} of {what}, and its account's {plan} plan allows {} per \
             application; remove some or move the account to a larger plan",
            human_bytes(used),
            human_bytes(limit)
        )))
    }

    /// [`Error::Forbidden`] naming the plan and the limit when an application of `plan`
    /// that has `current` of `what` (counted by `limit`) may not have one more.
    pub fn check_count(plan: Plan, what: &str, limit: usize, current: usize) -> Result<()> {
        if current < limit {
            return Ok(());
        }
        Err(Error::Forbidden(format!(
            "this application's account is on the {plan} plan, which allows at most {limit} \
             {what} per application; delete one or move the account to a larger plan"
        )))
    }
}

/// The limits of every plan: [`Plan::limits`], with an operator's changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanLimits([Limits; 3]);

impl Default for PlanLimits {
    fn default() -> Self {
        Self(Plan::ALL.map(Plan::limits))
    }
}

impl PlanLimits {
    /// The limits of `plan`.
    pub fn of(&self, plan: Plan) -> Limits {
        self.0[plan as usize]
    }

    /// The defaults changed by `changes`: `{"<plan>": {"<limit>": <whole number>, …}, …}`,
    /// limits named as [`Limits`]' fields (`object_bytes`, `queues_per_app`, …).
    pub fn with_changes(changes: &serde_json::Value) -> Result<Self> {
        let mut out = Self::default();
        let bad = |what: String| {
            Error::invalid(format!(
                "plan limits: {what}; write {{\"starter\": {{\"object_bytes\": 10485760}}}} \
                 with the plans starter, pro, business and the limits instances_per_app, \
                 queues_per_app, deliveries_per_app, object_bytes, stored_bytes_per_app, \
                 cache_bytes_per_app, requests_per_second_per_key"
            ))
        };
        let plans = changes
            .as_object()
            .ok_or_else(|| bad("they are not an object".into()))?;
        for (plan, limits) in plans {
            let plan: Plan = plan
                .parse()
                .map_err(|_| bad(format!("unknown plan {plan:?}")))?;
            let limits = limits
                .as_object()
                .ok_or_else(|| bad(format!("the limits of {plan} are not an object")))?;
            let l = &mut out.0[plan as usize];
            for (name, value) in limits {
                let n = value
                    .as_u64()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| bad(format!("{plan}.{name} is not a whole number above 0")))?;
                let count = usize::try_from(n).unwrap_or(usize::MAX);
                match name.as_str() {
                    "instances_per_app" => l.instances_per_app = count,
                    "queues_per_app" => l.queues_per_app = count,
                    "deliveries_per_app" => l.deliveries_per_app = count,
                    "object_bytes" => l.object_bytes = n,
                    "stored_bytes_per_app" => l.stored_bytes_per_app = n,
                    "cache_bytes_per_app" => l.cache_bytes_per_app = n,
                    "requests_per_second_per_key" => l.requests_per_second_per_key = n,
                    other => return Err(bad(format!("unknown limit {other:?}"))),
                }
            }
        }
        Ok(out)
    }
}

/// A byte count for people: `512 MiB`, `1.5 GiB`, `700 bytes`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (unit, size) in UNITS {
        if n >= size {
            let whole = n / size;
            let tenth = (n % size) * 10 / size;
            return if tenth == 0 {
                format!("{whole} {unit}")
            } else {
                format!("{whole}.{tenth} {unit}")
            };
        }
    }
    format!("{n} bytes")
}

/// An account as the registry records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    /// Unique name.
    pub name: AccountName,
    /// Current plan.
    pub plan: Plan,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_ms: i64,
}

/// An account with the number of applications it owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountUsage {
    /// The account.
    pub account: Account,
    /// How many applications it owns.
    pub apps: usize,
}

/// An application as the registry records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct App {
    /// Globally unique name.
    pub name: AppName,
    /// The owning account; `None` only for the built-in domain application.
    pub account: Option<AccountName>,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_ms: i64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn plans_parse_case_insensitively_and_cap_apps() {
        assert_eq!("Starter".parse::<Plan>(), Ok(Plan::Starter));
        assert_eq!("PRO".parse::<Plan>(), Ok(Plan::Pro));
        assert_eq!("business".parse::<Plan>(), Ok(Plan::Business));
        assert_eq!(
            "free".parse::<Plan>(),
            Err(Error::invalid(
                "plan \"free\" is not valid: use starter, pro or business"
            ))
        );
        let limits: Vec<usize> = Plan::ALL.iter().map(|p| p.max_apps()).collect();
        assert_eq!(limits, [3, 10, 20]);
    }

    #[test]
    fn the_limit_error_names_the_plan_and_its_limit() {
        let acme: AccountName = "acme".parse().unwrap();
        assert!(Plan::Starter.check_new_app(&acme, 2).is_ok());
        assert_eq!(
            Plan::Starter.check_new_app(&acme, 3),
            Err(Error::Forbidden(
                "account \"acme\" is on the starter plan, which allows at most 3 applications; \
                 delete an application or move the account to a larger plan"
                    .into()
            ))
        );
        assert_eq!(
            Plan::Starter.check_downgrade(&acme, 5),
            Err(Error::Conflict(
                "account \"acme\" owns 5 applications, more than the starter plan's limit of 3; \
                 delete 2 of them first"
                    .into()
            ))
        );
        assert!(Plan::Pro.check_downgrade(&acme, 10).is_ok());
    }

    proptest! {
        #[test]
        fn creation_is_allowed_exactly_below_the_limit(plan in 0usize..3, current in 0usize..30) {
            let plan = Plan::ALL[plan];
            let acme: AccountName = "acme".parse().unwrap();
            prop_assert_eq!(plan.check_new_app(&acme, current).is_ok(), current < plan.max_apps());
            prop_assert_eq!(plan.check_downgrade(&acme, current).is_ok(), current <= plan.max_apps());
        }
    }

    #[test]
    fn plans_grow_in_every_limit_and_counts_are_checked_with_the_plan_named() {
        for pair in Plan::ALL.windows(2) {
            let (a, b) = (pair[0].limits(), pair[1].limits());
            assert!(a.instances_per_app < b.instances_per_app);
            assert!(a.queues_per_app < b.queues_per_app);
            assert!(a.deliveries_per_app < b.deliveries_per_app);
            assert!(a.object_bytes < b.object_bytes);
            assert!(a.stored_bytes_per_app < b.stored_bytes_per_app);
            assert!(a.cache_bytes_per_app < b.cache_bytes_per_app);
        }
        assert!(Limits::check_count(Plan::Starter, "queues", 5, 4).is_ok());
        assert_eq!(
            Limits::check_count(Plan::Starter, "queues", 5, 5),
            Err(Error::Forbidden(
                "this application's account is on the starter plan, which allows at most 5 \
                 queues per application; delete one or move the account to a larger plan"
                    .into()
            ))
        );
    }

    #[test]
    fn operators_may_change_plan_limits() {
        let l = PlanLimits::with_changes(&serde_json::json!({
            "Pro": {"object_bytes": 10, "queues_per_app": 2}
        }))
        .unwrap();
        assert_eq!(l.of(Plan::Pro).object_bytes, 10);
        assert_eq!(l.of(Plan::Pro).queues_per_app, 2);
        assert_eq!(
            l.of(Plan::Pro).cache_bytes_per_app,
            Plan::Pro.limits().cache_bytes_per_app
        );
        assert_eq!(l.of(Plan::Starter), Plan::Starter.limits());
        for bad in [
            serde_json::json!([]),
            serde_json::json!({"gold": {}}),
            serde_json::json!({"pro": {"objects": 1}}),
            serde_json::json!({"pro": {"object_bytes": 0}}),
            serde_json::json!({"pro": {"object_bytes": "1MB"}}),
        ] {
            assert!(PlanLimits::with_changes(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn byte_limits_name_the_plan_and_read_as_people_write_them() {
        assert_eq!(human_bytes(700), "700 bytes");
        assert_eq!(human_bytes(64 << 20), "64 MiB");
        assert_eq!(human_bytes(3 << 29), "1.5 GiB");
        let limit = Plan::Starter.limits().cache_bytes_per_app;
        assert!(Limits::check_bytes(Plan::Starter, "cache", limit, limit - 10, 10).is_ok());
        assert_eq!(
            Limits::check_bytes(Plan::Starter, "cache entries", limit, limit - 10, 11),
            Err(Error::Forbidden(
                "this application keeps 63.9 MiB of cache entries, and its account's starter \
                 plan allows 64 MiB per application; remove some or move the account to a \
                 larger plan"
                    .into()
            ))
        );
    }

    #[test]
    fn account_names_follow_the_name_rule() {
        assert!("acme-2".parse::<AccountName>().is_ok());
        assert_eq!(
            "Acme".parse::<AccountName>(),
            Err(Error::invalid(
                "account name \"Acme\" is not valid: use lowercase letters a-z, digits, '_' and \
                 '-', starting with a letter or digit"
            ))
        );
    }
}
