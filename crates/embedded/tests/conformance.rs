//! The core conformance suites, run against every embedded adapter.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use quintet_core::{
    InstanceConfig, ServiceType, SystemClock, conformance,
    ports::{queue::QueueConfig, search::SearchConfig},
};
use quintet_embedded::Embedded;

fn open() -> (tempfile::TempDir, Embedded) {
    let dir = tempfile::tempdir().unwrap();
    let embedded = Embedded::open(dir.path(), Arc::new(SystemClock)).unwrap();
    (dir, embedded)
}

#[tokio::test]
async fn registry() {
    let (_dir, e) = open();
    conformance::registry::run_all(&*e.registry).await;
}

#[tokio::test]
async fn data() {
    let (_dir, e) = open();
    conformance::data::run_all(&*e.data).await;
}

#[tokio::test]
async fn lifecycle_of_every_adapter() {
    let (_dir, e) = open();
    let search = InstanceConfig::Search(SearchConfig {
        fields: vec!["title".into()],
        store_fields: vec![],
    });
    let queue = InstanceConfig::Queue(QueueConfig::new("http://127.0.0.1:9/"));
    conformance::lifecycle::run_all(&*e.data, InstanceConfig::Data).await;
    conformance::lifecycle::run_all(&*e.cache, InstanceConfig::Cache).await;
    conformance::lifecycle::run_all(&*e.search, search).await;
    conformance::lifecycle::run_all(&*e.queue, queue).await;
    conformance::lifecycle::run_all(&*e.storage, InstanceConfig::Storage).await;
    assert_eq!(ServiceType::ALL.len(), 5);
}

#[tokio::test]
async fn queue() {
    let (_dir, e) = open();
    conformance::queue::run_all(&*e.queue).await;
}

#[tokio::test]
async fn storage() {
    let (_dir, e) = open();
    conformance::storage::run_all(&*e.storage).await;
}

/// The embedded cache on `clock`, with `options`.
fn open_cache(
    options: quintet_embedded::cache::CacheOptions,
    clock: Arc<quintet_core::ManualClock>,
) -> (tempfile::TempDir, Embedded) {
    let dir = tempfile::tempdir().unwrap();
    let options = quintet_embedded::EmbeddedOptions {
        cache: options,
        disk_reserve: None,
    };
    let embedded = Embedded::open_with(dir.path(), clock, &options).unwrap();
    (dir, embedded)
}

#[tokio::test]
async fn cache_durable() {
    let clock = Arc::new(quintet_core::ManualClock::new(1_700_000_000_000));
    let (_dir, e) = open_cache(Default::default(), Arc::clone(&clock));
    conformance::cache::run_all(&*e.cache, &clock).await;
}

#[tokio::test]
async fn cache_memory_only() {
    let clock = Arc::new(quintet_core::ManualClock::new(1_700_000_000_000));
    let options = quintet_embedded::cache::CacheOptions {
        memory_only: true,
        max_bytes: None,
    };
    let (_dir, e) = open_cache(options, Arc::clone(&clock));
    conformance::cache::run_all(&*e.cache, &clock).await;
    conformance::lifecycle::run_all(&*e.cache, InstanceConfig::Cache).await;
}

#[tokio::test]
async fn cache_bounded() {
    // A bound far above what the suite stores: the recency bookkeeping runs on every call
    // and must not change any answer.
    let clock = Arc::new(quintet_core::ManualClock::new(1_700_000_000_000));
    let options = quintet_embedded::cache::CacheOptions {
        memory_only: false,
        max_bytes: Some(1 << 30),
    };
    let (_dir, e) = open_cache(options, Arc::clone(&clock));
    conformance::cache::run_all(&*e.cache, &clock).await;
}

#[tokio::test]
async fn search() {
    let (_dir, e) = open();
    conformance::search::run_all(&*e.search).await;
}
