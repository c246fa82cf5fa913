//! One `/_metrics` scrape: the long-lived families of [`crate::metrics::Metrics`] plus
//! what is measured when asked (connections, instances, bytes kept, the process), encoded
//! as OpenMetrics text.
//!
//! Measuring bytes walks every instance of the node's engines, so those figures are kept
//! for [`MEASURE_TTL`] and shared by the scrapes within it: a scraper polling every second
//! costs the stores one walk per [`MEASURE_TTL`].

use std::{
    borrow::Cow,
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};
use quintet_core::{Error, ServiceType};

use crate::state::AppState;

/// How long measured sizes are reused.
pub const MEASURE_TTL: Duration = Duration::from_secs(15);

/// The content type of the answer.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TypeLabels {
    r#type: &'static str,
}

/// Sizes measured through the ports at one time.
#[derive(Debug, Clone, Default)]
struct Measured {
    instances: Vec<(ServiceType, i64)>,
    cache_bytes: i64,
    storage_bytes: i64,
}

/// The last measurement, shared by the scrapes within [`MEASURE_TTL`].
#[derive(Debug, Default)]
pub struct MeasureCache(Mutex<Option<(Instant, Measured)>>);

/// The text of one scrape of `state`.
pub async fn render(state: &AppState) -> String {
    let mut root = Registry::default();
    let ours = root.sub_registry_with_prefix("quintet");
    state.metrics.register(ours);
    connections(state, ours);
    match measured(state).await {
        Ok(m) => sizes(&m, ours),
        Err(e) => tracing::warn!(error = %e, "measuring sizes for /_metrics failed"),
    }
    process(&mut root);
    let mut out = String::with_capacity(8192);
    // Writing into a String cannot fail.
    let _ = encode(&mut out, &root);
    out
}

fn connections(state: &AppState, registry: &mut Registry) {
    let open = Gauge::<i64>::default();
    open.set(i64::try_from(state.connections.open()).unwrap_or(i64::MAX));
    registry.register("connections_open", "Connections open now", open);
    let refused = Family::<ReasonLabels, Counter>::default();
    for (why, n) in state.connections.refused() {
        refused
            .get_or_create(&ReasonLabels {
                reason: why.as_str(),
            })
            .inc_by(n);
    }
    registry.register(
        "connections_refused",
        "Connections closed on arrival, by reason",
        refused,
    );
}

async fn measured(state: &AppState) -> quintet_core::Result<Measured> {
    {
        let last = state
            .measured
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((at, m)) = last.as_ref()
            && at.elapsed() < MEASURE_TTL
        {
            return Ok(m.clone());
        }
    }
    let services = &state.services;
    let mut m = Measured {
        instances: ServiceType::ALL.iter().map(|t| (*t, 0)).collect(),
        ..Measured::default()
    };
    for instance in services.registry.list_instances(None).await? {
        let kind = instance.kind();
        if let Some(slot) = m.instances.iter_mut().find(|(t, _)| *t == kind) {
            slot.1 += 1;
        }
        let bytes = match kind {
            ServiceType::Cache => services.cache.stored_bytes(&instance).await,
            ServiceType::Storage => services.storage.stored_bytes(&instance).await,
            _ => continue,
        };
        let bytes = match bytes {
            Ok(b) => i64::try_from(b).unwrap_or(i64::MAX),
            // Destroyed meanwhile: it keeps nothing.
            Err(Error::NotFound(_)) => 0,
            Err(e) => return Err(e),
        };
        let total = match kind {
            ServiceType::Cache => &mut m.cache_bytes,
            _ => &mut m.storage_bytes,
        };
        *total = total.saturating_add(bytes);
    }
    *state
        .measured
        .0
        .lock()
        .unwrap_or_else(PoisonError::into_inner) = Some((Instant::now(), m.clone()));
    Ok(m)
}

fn sizes(m: &Measured, registry: &mut Registry) {
    let instances = Family::<TypeLabels, Gauge>::default();
    for (kind, n) in &m.instances {
        instances
            .get_or_create(&TypeLabels {
                r#type: kind.as_str(),
            })
            .set(*n);
    }
    registry.register("instances", "Instances by service type", instances);
    let cache = Gauge::<i64>::default();
    cache.set(m.cache_bytes);
    registry.register(
        "cache_stored_bytes",
        "Bytes the cache instances keep (keys and values)",
        cache,
    );
    let storage = Gauge::<i64>::default();
    storage.set(m.storage_bytes);
    registry.register(
        "storage_stored_bytes",
        "Bytes the storage instances keep (object contents)",
        storage,
    );
}

/// The standard process gauges (names as Prometheus' client libraries write them), where
/// the platform tells them.
fn process(registry: &mut Registry) {
    if let Some(rss) = resident_bytes() {
        let g = Gauge::<i64>::default();
        g.set(rss);
        registry.register(
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            g,
        );
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        let g = Gauge::<i64>::default();
        g.set(i64::try_from(fds.count()).unwrap_or(i64::MAX));
        registry.register("process_open_fds", "Number of open file descriptors", g);
    }
    let up = Gauge::<i64>::default();
    up.set(i64::try_from(started().elapsed().as_secs()).unwrap_or(i64::MAX));
    registry.register(
        Cow::Borrowed("quintet_uptime_seconds"),
        Cow::Borrowed("Seconds since this server started"),
        up,
    );
}

/// When the process first asked (the server's state is built at start).
fn started() -> Instant {
    static STARTED: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *STARTED.get_or_init(Instant::now)
}

/// Resident set size from `/proc/self/status` (`VmRSS`, in KiB whatever the page size).
fn resident_bytes() -> Option<i64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: i64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

/// Start the uptime clock (called when the state is built).
pub fn start_clock() {
    started();
}
