//! One `/_metrics` scrape: the long-lived families of [`crate::metrics::Metrics`] plus
//! what is measured when asked (connections, instances, bytes kept, the process), encoded
//! as OpenMetrics text.
//!
//! Measuring sizes walks every instance of the node's engines (bytes and entries of each
//! cache, bytes of each storage, jobs of each queue, documents of each index), so those
//! figures are kept for [`MEASURE_TTL`] and shared by the scrapes within it: a scraper
//! polling every second costs the stores one walk per [`MEASURE_TTL`]. Per-instance
//! families label the first [`MAX_LABELLED`] instances by name (`app/name`, in name order)
//! and add the rest up under [`OTHER`]. Engine pools are read on every scrape: they are
//! counters the adapters keep.

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
use quintet_core::{Error, ServiceType, ports::queue::QueueDepth};

use crate::{
    metrics::{MAX_LABELLED, OTHER},
    state::AppState,
};

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

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    queue: String,
    status: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct IndexLabels {
    index: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabels {
    service: &'static str,
    engine: &'static str,
}

/// Sizes measured through the ports at one time.
#[derive(Debug, Clone, Default)]
struct Measured {
    instances: Vec<(ServiceType, i64)>,
    cache_bytes: i64,
    cache_entries: i64,
    storage_bytes: i64,
    /// Jobs by queue (`app/name`), bounded as the module says.
    queues: Vec<(String, QueueDepth)>,
    /// Documents by index (`app/name`), bounded as the module says.
    documents: Vec<(String, u64)>,
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
    pools(state, ours);
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
    let mut queues = Vec::new();
    let mut documents = Vec::new();
    for instance in services.registry.list_instances(None).await? {
        let kind = instance.kind();
        if let Some(slot) = m.instances.iter_mut().find(|(t, _)| *t == kind) {
            slot.1 += 1;
        }
        let label = || format!("{}/{}", instance.app, instance.name);
        match kind {
            ServiceType::Cache => {
                if let Some(usage) = present(services.cache.usage(&instance).await)? {
                    m.cache_bytes = m.cache_bytes.saturating_add(gauge(usage.bytes));
                    m.cache_entries = m.cache_entries.saturating_add(gauge(usage.entries));
                }
            }
            ServiceType::Storage => {
                if let Some(bytes) = present(services.storage.stored_bytes(&instance).await)? {
                    m.storage_bytes = m.storage_bytes.saturating_add(gauge(bytes));
                }
            }
            ServiceType::Queue => {
                if let Some(depth) = present(services.queue.depth(&instance).await)? {
                    queues.push((label(), depth));
                }
            }
            ServiceType::Search => {
                if let Some(n) = present(services.search.count(&instance).await)? {
                    documents.push((label(), n));
                }
            }
            ServiceType::Data => {}
        }
    }
    m.queues = bounded(queues, |a, b| QueueDepth {
        ready: a.ready + b.ready,
        error: a.error + b.error,
    });
    m.documents = bounded(documents, |a, b| a + b);
    *state
        .measured
        .0
        .lock()
        .unwrap_or_else(PoisonError::into_inner) = Some((Instant::now(), m.clone()));
    Ok(m)
}

/// `Ok(None)` for an instance destroyed since it was listed: it keeps nothing.
fn present<T>(measured: quintet_core::Result<T>) -> quintet_core::Result<Option<T>> {
    match measured {
        Ok(v) => Ok(Some(v)),
        Err(Error::NotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

fn gauge(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The first [`MAX_LABELLED`] of `items` by label, and the rest added up with `add` under
/// [`OTHER`].
fn bounded<T: Copy>(mut items: Vec<(String, T)>, add: impl Fn(T, T) -> T) -> Vec<(String, T)> {
    items.sort_by(|a, b| a.0.cmp(&b.0));
    if items.len() <= MAX_LABELLED {
        return items;
    }
    let rest = items.split_off(MAX_LABELLED);
    let mut others = rest.into_iter().map(|(_, v)| v);
    if let Some(first) = others.next() {
        items.push((OTHER.to_owned(), others.fold(first, add)));
    }
    items
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
    let entries = Gauge::<i64>::default();
    entries.set(m.cache_entries);
    registry.register(
        "cache_entries",
        "Live entries the cache instances keep",
        entries,
    );
    let jobs = Family::<QueueLabels, Gauge>::default();
    for (queue, depth) in &m.queues {
        for (status, n) in [("ready", depth.ready), ("error", depth.error)] {
            jobs.get_or_create(&QueueLabels {
                queue: queue.clone(),
                status,
            })
            .set(gauge(n));
        }
    }
    registry.register(
        "queue_jobs",
        "Jobs each queue holds, by status (ready includes those being delivered)",
        jobs,
    );
    let documents = Family::<IndexLabels, Gauge>::default();
    for (index, n) in &m.documents {
        documents
            .get_or_create(&IndexLabels {
                index: index.clone(),
            })
            .set(gauge(*n));
    }
    registry.register(
        "search_documents",
        "Documents each search index holds",
        documents,
    );
}

/// The engine connection pools of the node's adapters, one series per service that uses
/// one (services sharing one PostgreSQL pool each show the same figures).
fn pools(state: &AppState, registry: &mut Registry) {
    let max = Family::<PoolLabels, Gauge>::default();
    let open = Family::<PoolLabels, Gauge>::default();
    let in_use = Family::<PoolLabels, Gauge>::default();
    let waiting = Family::<PoolLabels, Gauge>::default();
    for kind in ServiceType::ALL {
        let Some(usage) = state.services.lifecycle(kind).pool() else {
            continue;
        };
        let labels = PoolLabels {
            service: kind.as_str(),
            engine: usage.engine,
        };
        max.get_or_create(&labels).set(gauge(usage.max));
        open.get_or_create(&labels).set(gauge(usage.open));
        if let Some(n) = usage.in_use {
            in_use.get_or_create(&labels).set(gauge(n));
        }
        if let Some(n) = usage.waiting {
            waiting.get_or_create(&labels).set(gauge(n));
        }
    }
    registry.register(
        "engine_connections_max",
        "Most connections a service's adapter opens to its engine",
        max,
    );
    registry.register(
        "engine_connections_open",
        "Connections a service's adapter holds open to its engine now",
        open,
    );
    registry.register(
        "engine_connections_in_use",
        "Pooled connections lent to a call now",
        in_use,
    );
    registry.register(
        "engine_connections_waiting",
        "Calls waiting for a pooled connection now",
        waiting,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_beyond_the_bound_are_added_up_under_other() {
        let few = vec![("b".to_owned(), 1u64), ("a".to_owned(), 2)];
        assert_eq!(
            bounded(few, |a, b| a + b),
            [("a".to_owned(), 2), ("b".to_owned(), 1)]
        );
        let many: Vec<(String, u64)> = (0..MAX_LABELLED + 3)
            .map(|n| (format!("q{n:04}"), 1))
            .collect();
        let kept = bounded(many, |a, b| a + b);
        assert_eq!(kept.len(), MAX_LABELLED + 1);
        assert_eq!(kept[0], ("q0000".to_owned(), 1));
        assert_eq!(kept[MAX_LABELLED], (OTHER.to_owned(), 3));
    }
}
