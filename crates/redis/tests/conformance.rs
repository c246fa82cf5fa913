//! The core conformance suites against [`RedisCache`], each run in a key prefix of its own.
//!
//! The cache suite steps a [`ManualClock`]; the adapter reads time from it like the
//! embedded cache does (the expiry instant is stored with each entry), so the suite runs
//! unchanged. Redis' own expiry of each entry is the TTL in real time, longer than the
//! suite takes between a write and the reads that expect it live.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use quintet_core::{InstanceConfig, ManualClock, conformance};
use quintet_redis::{RedisCache, RedisConfig};

async fn open(test: &str, clock: Arc<ManualClock>) -> Option<RedisCache> {
    let target = quintet_engine_test::redis(test)?;
    let config = RedisConfig::new(&target.url)
        .unwrap()
        .with_prefix(target.prefix);
    Some(RedisCache::connect(&config, clock).await.unwrap())
}

#[tokio::test]
async fn cache() {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let Some(cache) = open("redis_cache_conformance", Arc::clone(&clock)).await else {
        return;
    };
    conformance::cache::run_all(&cache, &clock).await;
}

#[tokio::test]
async fn cache_in_small_scan_steps() {
    // Every query and drop takes many SCAN steps: the answers must not change.
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let Some(cache) = open("redis_cache_small_scans", Arc::clone(&clock)).await else {
        return;
    };
    conformance::cache::run_all(&cache.with_scan_count(3), &clock).await;
}

#[tokio::test]
async fn lifecycle() {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let Some(cache) = open("redis_cache_lifecycle", clock).await else {
        return;
    };
    conformance::lifecycle::run_all(&cache, InstanceConfig::Cache).await;
}
