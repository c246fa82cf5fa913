//! Conformance suites: one per port, written once against the trait and run against every
//! adapter (enable the `conformance` feature in an adapter's dev-dependencies).
//!
//! Each suite function takes the port as a trait object and panics with a message on the
//! first broken rule. Functions create their own fresh instances, so suites can share an
//! engine and run in parallel.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod cache;
pub mod data;
pub mod lifecycle;
pub mod queue;
pub mod registry;
pub mod search;
pub mod storage;

use std::sync::atomic::{AtomicU64, Ordering};

use crate::{AppName, Instance, InstanceConfig, InstanceId, InstanceName};

static NEXT: AtomicU64 = AtomicU64::new(1);

/// A name no other suite function in this process uses.
pub fn unique_name(prefix: &str) -> InstanceName {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{prefix}-{n}-{nanos}").parse().expect("valid name")
}

/// An instance value for adapter-level suites that do not go through a registry. Ids are
/// taken from a high range so they never meet a registry's own ids in a shared engine.
pub fn instance(config: InstanceConfig) -> Instance {
    let n = NEXT.fetch_add(1, Ordering::Relaxed) as i64;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::from(d.subsec_nanos()))
        .unwrap_or(0);
    Instance {
        id: InstanceId((1 << 40) + (nanos << 12) + n),
        app: AppName::domain(),
        name: unique_name(config.kind().as_str()),
        config,
        created_ms: 0,
    }
}
