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

/// The adapter never sends `KEYS` (it blocks Redis for the whole keyspace) nor flushes a
/// database: both suites pass for a Redis user denied those commands, so a use of either
/// would fail them.
#[tokio::test]
async fn no_keys_command_is_ever_sent() {
    let Some(target) = quintet_engine_test::redis("redis_no_keys_command") else {
        return;
    };
    let user = format!("quintet-{}", target.prefix.trim_end_matches(':'));
    let admin = redis::Client::open(target.url.as_str()).unwrap();
    let mut admin = admin.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(&user)
        .arg("on")
        .arg(">no-keys-secret")
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .arg("-keys")
        .arg("-flushdb")
        .arg("-flushall")
        .query_async(&mut admin)
        .await
        .unwrap();
    let url = target
        .url
        .replacen("redis://", &format!("redis://{user}:no-keys-secret@"), 1);
    let config = RedisConfig::new(&url)
        .unwrap()
        .with_prefix(target.prefix.clone());
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let cache = RedisCache::connect(&config, Arc::clone(&clock) as _)
        .await
        .unwrap();
    // The restriction is real: this user's KEYS is refused.
    let restricted = redis::Client::open(url.as_str()).unwrap();
    let mut restricted = restricted.get_multiplexed_async_connection().await.unwrap();
    let refused: redis::RedisResult<Vec<String>> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut restricted)
        .await;
    assert!(refused.is_err(), "KEYS should be refused for {user}");
    conformance::cache::run_all(&cache, &clock).await;
    conformance::lifecycle::run_all(&cache, InstanceConfig::Cache).await;
    let _: () = redis::cmd("ACL")
        .arg("DELUSER")
        .arg(&user)
        .query_async(&mut admin)
        .await
        .unwrap();
}
