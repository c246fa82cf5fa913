//! The embedded cache beyond the port's contract: durability across reopen, memory-only
//! mode, background reclaim and the size bound with LRU eviction.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{path::Path, sync::Arc, time::Duration};

use quintet_core::{
    Error, Instance, InstanceConfig, ManualClock,
    conformance::{
        cache::{key, value},
        instance,
    },
    ports::{Lifecycle, cache::Cache},
};
use quintet_embedded::cache::{CacheOptions, CacheStats, EmbeddedCache};

const T0: i64 = 1_700_000_000_000;

fn open(dir: &Path, clock: &Arc<ManualClock>, options: CacheOptions) -> EmbeddedCache {
    EmbeddedCache::open(&dir.join("cache.db"), Arc::clone(clock) as _, &options).unwrap()
}

fn bounded(max: u64) -> CacheOptions {
    CacheOptions {
        max_bytes: Some(max),
        memory_only: false,
    }
}

fn memory() -> CacheOptions {
    CacheOptions {
        max_bytes: None,
        memory_only: true,
    }
}

async fn fresh(c: &EmbeddedCache) -> Instance {
    let inst = instance(InstanceConfig::Cache);
    c.create_instance(&inst).await.unwrap();
    inst
}

async fn text(c: &EmbeddedCache, inst: &Instance, k: &str) -> Option<String> {
    c.get(inst, &key(k))
        .await
        .unwrap()
        .map(|v| v.as_str().to_owned())
}

/// A value whose key plus JSON text take exactly `size` bytes.
fn sized(k: &str, size: usize) -> quintet_core::cache::CacheValue {
    value(&format!(r#"{{"p":"{}"}}"#, "x".repeat(size - k.len() - 8)))
}

#[tokio::test]
async fn durable_entries_survive_a_reopen_with_their_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let c = open(dir.path(), &clock, CacheOptions::default());
    let inst = fresh(&c).await;
    c.add(
        &inst,
        &key("brief"),
        value(r#"{"v":1}"#),
        Some("10s".parse().unwrap()),
    )
    .await
    .unwrap();
    c.add(&inst, &key("kept"), value(r#"{"v":2}"#), None)
        .await
        .unwrap();
    c.close().await.unwrap();
    drop(c);

    let c = open(dir.path(), &clock, CacheOptions::default());
    assert_eq!(
        c.stats(),
        CacheStats {
            entries: 2,
            bytes: 23,
            values_in_memory: 0,
        },
        "values stay on disk until read"
    );
    assert_eq!(
        text(&c, &inst, "brief").await.as_deref(),
        Some(r#"{"v":1}"#)
    );
    clock.advance(10_000);
    assert_eq!(text(&c, &inst, "brief").await, None);
    assert_eq!(text(&c, &inst, "kept").await.as_deref(), Some(r#"{"v":2}"#));
    let err = c
        .add(&inst, &key("kept"), value("{}"), None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Conflict(_)),
        "reloaded keys still conflict"
    );
    c.close().await.unwrap();
}

#[tokio::test]
async fn memory_only_keeps_nothing_on_disk_and_forgets_on_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let c = open(dir.path(), &clock, CacheOptions::default());
    let inst = fresh(&c).await;
    c.add(&inst, &key("durable"), value("{}"), None)
        .await
        .unwrap();
    c.close().await.unwrap();
    drop(c);

    // Memory-only removes what a durable run left, so it cannot come back later.
    let c = open(dir.path(), &clock, memory());
    assert!(!dir.path().join("cache.db").exists());
    assert_eq!(text(&c, &inst, "durable").await, None);
    // The instance still exists in the registry: it works without being created again.
    c.add(&inst, &key("fleeting"), value(r#"{"v":1}"#), None)
        .await
        .unwrap();
    assert_eq!(
        text(&c, &inst, "fleeting").await.as_deref(),
        Some(r#"{"v":1}"#)
    );
    c.close().await.unwrap();
    drop(c);
    assert!(!dir.path().join("cache.db").exists());

    let c = open(dir.path(), &clock, memory());
    assert_eq!(text(&c, &inst, "fleeting").await, None);
    c.close().await.unwrap();
    drop(c);

    // Back to durable: instances made while memory-only get their table on first write.
    let c = open(dir.path(), &clock, CacheOptions::default());
    assert_eq!(text(&c, &inst, "durable").await, None);
    c.add(&inst, &key("again"), value("{}"), None)
        .await
        .unwrap();
    c.close().await.unwrap();
    drop(c);
    let c = open(dir.path(), &clock, CacheOptions::default());
    assert_eq!(text(&c, &inst, "again").await.as_deref(), Some("{}"));
    c.close().await.unwrap();
}

#[tokio::test]
async fn expired_entries_are_reclaimed_from_disk_in_batches() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let c = open(dir.path(), &clock, CacheOptions::default());
    let inst = fresh(&c).await;
    let n = quintet_embedded::cache::REAP_BATCH * 2 + 10;
    for i in 0..n {
        c.add(
            &inst,
            &key(&format!("t{i}")),
            value("{}"),
            Some("1s".parse().unwrap()),
        )
        .await
        .unwrap();
    }
    c.add(&inst, &key("kept"), value("{}"), None).await.unwrap();
    assert_eq!(c.reap_now().await.unwrap(), 0, "nothing expired yet");
    clock.advance(1_000);
    assert_eq!(
        c.stats().entries,
        n as u64 + 1,
        "expired, not yet reclaimed"
    );
    assert_eq!(c.reap_now().await.unwrap(), n);
    assert_eq!(c.stats().entries, 1);
    c.close().await.unwrap();
    drop(c);
    // The rows are gone from the file too.
    let c = open(dir.path(), &clock, CacheOptions::default());
    assert_eq!(c.stats().entries, 1);
    c.close().await.unwrap();
}

#[tokio::test]
async fn the_background_task_reclaims_without_being_asked() {
    for options in [CacheOptions::default(), memory()] {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(T0));
        let c = open(dir.path(), &clock, options);
        let inst = fresh(&c).await;
        for i in 0..10 {
            c.add(
                &inst,
                &key(&format!("t{i}")),
                value("{}"),
                Some("1m".parse().unwrap()),
            )
            .await
            .unwrap();
        }
        clock.advance(60_000);
        // It runs every second; waiting up to a minute is an eventual check, not a timing one.
        let mut waited = 0;
        while c.stats().entries > 0 {
            assert!(waited < 60_000, "expired entries were never reclaimed");
            tokio::time::sleep(Duration::from_millis(50)).await;
            waited += 50;
        }
        c.close().await.unwrap();
    }
}

#[tokio::test]
async fn a_bounded_cache_evicts_the_least_recently_used_of_every_instance() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let c = open(dir.path(), &clock, bounded(1_000));
    let (a, b) = (fresh(&c).await, fresh(&c).await);
    for i in 0..5 {
        c.add(&a, &key(&format!("a{i}")), sized("a0", 100), None)
            .await
            .unwrap();
        c.add(&b, &key(&format!("b{i}")), sized("b0", 100), None)
            .await
            .unwrap();
    }
    assert_eq!(
        c.stats(),
        CacheStats {
            entries: 10,
            bytes: 1_000,
            values_in_memory: 980,
        }
    );
    // a0 is the oldest; reading it makes b0 the oldest.
    assert!(text(&c, &a, "a0").await.is_some());
    c.add(&a, &key("a5"), sized("a5", 150), None).await.unwrap();
    assert_eq!(c.stats().bytes, 950);
    assert!(text(&c, &a, "a0").await.is_some(), "a get counts as a use");
    assert_eq!(
        text(&c, &b, "b0").await,
        None,
        "the least recently used goes first"
    );
    assert_eq!(text(&c, &a, "a1").await, None, "then the next one");
    assert!(text(&c, &b, "b1").await.is_some());

    // Evictions are durable.
    c.close().await.unwrap();
    drop(c);
    let c = open(dir.path(), &clock, bounded(1_000));
    assert_eq!(c.stats().bytes, 950);
    assert_eq!(text(&c, &b, "b0").await, None);

    // Larger than the whole bound: refused, nothing evicted.
    let err = c
        .add(&a, &key("huge"), sized("huge", 1_001), None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::TooLarge(_)), "{err:?}");
    assert_eq!(c.stats().bytes, 950);
    c.close().await.unwrap();
}

/// Without `--cache-max-bytes` nothing is ever evicted: the workload that makes a bounded
/// cache evict keeps every entry, through reclaim runs, more values than are held in
/// memory, and a restart.
#[tokio::test]
async fn without_a_bound_nothing_is_evicted() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let c = open(dir.path(), &clock, CacheOptions::default());
    let inst = fresh(&c).await;
    // 80 MiB of values: more than the 64 MiB of recently used values held in memory.
    let n = 80;
    for i in 0..n {
        let k = format!("big{i}");
        c.add(&inst, &key(&k), sized(&k, 1 << 20), None)
            .await
            .unwrap();
        clock.advance(1_000);
        assert_eq!(c.reap_now().await.unwrap(), 0, "nothing to reclaim");
    }
    assert_eq!(c.stats().entries, n);
    assert!(
        c.stats().values_in_memory < c.stats().bytes,
        "some values only on disk"
    );
    for i in 0..n {
        assert!(
            text(&c, &inst, &format!("big{i}")).await.is_some(),
            "big{i}"
        );
    }
    c.close().await.unwrap();
    drop(c);
    let c = open(dir.path(), &clock, CacheOptions::default());
    assert_eq!(c.stats().entries, n);
    assert!(text(&c, &inst, "big0").await.is_some());
    c.close().await.unwrap();
}

#[tokio::test]
async fn a_smaller_bound_after_a_restart_is_reached_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let c = open(dir.path(), &clock, CacheOptions::default());
    let inst = fresh(&c).await;
    for i in 0..20 {
        c.add(&inst, &key(&format!("k{i:02}")), sized("k00", 100), None)
            .await
            .unwrap();
    }
    c.close().await.unwrap();
    drop(c);
    let c = open(dir.path(), &clock, bounded(500));
    assert_eq!(c.stats().bytes, 2_000);
    assert_eq!(c.reap_now().await.unwrap(), 15);
    assert_eq!(c.stats().bytes, 500);
    c.close().await.unwrap();
}

#[tokio::test]
async fn reads_never_write_to_disk() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let c = open(dir.path(), &clock, bounded(1 << 20));
    let inst = fresh(&c).await;
    for i in 0..10 {
        c.add(&inst, &key(&format!("k{i}")), value(r#"{"v":1}"#), None)
            .await
            .unwrap();
    }
    let wal = dir.path().join("cache.db-wal");
    let before = std::fs::read(&wal).unwrap();
    for _ in 0..20 {
        for i in 0..10 {
            assert!(text(&c, &inst, &format!("k{i}")).await.is_some());
        }
        let all = c
            .query(&inst, &quintet_core::cache::Glob::all())
            .await
            .unwrap();
        assert_eq!(all.len(), 10);
    }
    assert!(
        std::fs::read(&wal).unwrap() == before,
        "the WAL changed on reads"
    );
    c.close().await.unwrap();
}

#[tokio::test]
async fn sweep_forgets_the_entries_of_orphaned_instances() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let c = open(dir.path(), &clock, CacheOptions::default());
    let (live, orphan) = (fresh(&c).await, fresh(&c).await);
    c.add(&live, &key("k"), value("{}"), None).await.unwrap();
    c.add(&orphan, &key("k"), value("{}"), None).await.unwrap();
    assert_eq!(c.sweep(&[live.id]).await.unwrap(), 1);
    assert_eq!(c.stats().entries, 1);
    assert_eq!(text(&c, &orphan, "k").await, None);
    assert!(text(&c, &live, "k").await.is_some());
    c.close().await.unwrap();
}

#[tokio::test]
async fn an_index_that_knows_a_missing_table_is_rebuilt_from_the_tables() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let c = open(dir.path(), &clock, CacheOptions::default());
    let inst = fresh(&c).await;
    c.add(&inst, &key("a"), value(r#"{"v":1}"#), None)
        .await
        .unwrap();
    assert_eq!(c.stats().entries, 1);
    // The instance's table disappears behind the index's back.
    let conn = rusqlite::Connection::open(dir.path().join("cache.db")).unwrap();
    conn.execute_batch(&format!("DROP TABLE \"c{}\"", inst.id.0))
        .unwrap();
    let err = c
        .add(&inst, &key("b"), value(r#"{"v":2}"#), None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err:?}");
    assert_eq!(c.stats().entries, 0, "the index follows the tables again");
    assert_eq!(text(&c, &inst, "a").await, None);
}
