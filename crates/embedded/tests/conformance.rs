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
async fn lifecycle_of_every_adapter() {
    let (_dir, e) = open();
    let search = InstanceConfig::Search(SearchConfig {
        fields: vec!["title".into()],
        store_fields: vec![],
    });
    let queue = InstanceConfig::Queue(QueueConfig {
        target: "http://127.0.0.1:9/".into(),
        secret: None,
    });
    conformance::lifecycle::run_all(&*e.data, InstanceConfig::Data).await;
    conformance::lifecycle::run_all(&*e.cache, InstanceConfig::Cache).await;
    conformance::lifecycle::run_all(&*e.search, search).await;
    conformance::lifecycle::run_all(&*e.queue, queue).await;
    conformance::lifecycle::run_all(&*e.storage, InstanceConfig::Storage).await;
    assert_eq!(ServiceType::ALL.len(), 5);
}

#[tokio::test]
async fn search() {
    let (_dir, e) = open();
    conformance::search::run_all(&*e.search).await;
}
