//! The embedded cache beyond the port's contract: durability across reopen, the log (torn
//! writes, damage, compaction, entries of an earlier `cache.db`), memory-only mode,
//! background reclaim and the size bound with LRU eviction.

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
    EmbeddedCache::open(&dir.join("cache.log"), Arc::clone(clock) as _, &options).unwrap()
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
    assert!(!dir.path().join("cache.log").exists());
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
    assert!(!dir.path().join("cache.log").exists());

    let c = open(dir.path(), &clock, memory());
    assert_eq!(text(&c, &inst, "fleeting").await, None);
    c.close().await.unwrap();
    drop(c);

    // Back to durable: instances made while memory-only take writes.
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
    let wal = dir.path().join("cache.log");
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
        "the log changed on reads"
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
    assert_eq!(
        c.sweep(&quintet_core::ports::Keep::only([live.id]))
            .await
            .unwrap(),
        1
    );
    assert_eq!(c.stats().entries, 1);
    assert_eq!(text(&c, &orphan, "k").await, None);
    assert!(text(&c, &live, "k").await.is_some());
    c.close().await.unwrap();
}

/// Offset just after the last byte of `file` that is not zero: the end of its records.
fn records_end(file: &Path) -> usize {
    let bytes = std::fs::read(file).unwrap();
    bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1)
}

#[tokio::test]
async fn a_write_torn_by_a_crash_is_discarded_and_writes_after_it_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("cache.log");
    let clock = Arc::new(ManualClock::new(T0));
    let c = open(dir.path(), &clock, CacheOptions::default());
    let inst = fresh(&c).await;
    for k in ["a", "b"] {
        c.add(&inst, &key(k), value(r#"{"v":1}"#), None)
            .await
            .unwrap();
    }
    c.close().await.unwrap();
    drop(c);

    // A crash in the middle of a write leaves the start of a record after the last one.
    let end = records_end(&log);
    let mut bytes = std::fs::read(&log).unwrap();
    let mut torn = bytes[..end].to_vec();
    torn.truncate(30); // the header and one byte of a 37-byte record
    bytes[end..end + torn.len()].copy_from_slice(&torn);
    std::fs::write(&log, &bytes).unwrap();

    let c = open(dir.path(), &clock, CacheOptions::default());
    assert_eq!(c.stats().entries, 2);
    assert_eq!(records_end(&log), end, "the torn record was zeroed");
    c.add(&inst, &key("c"), value(r#"{"v":3}"#), None)
        .await
        .unwrap();
    c.close().await.unwrap();
    drop(c);
    let c = open(dir.path(), &clock, CacheOptions::default());
    for k in ["a", "b", "c"] {
        assert!(text(&c, &inst, k).await.is_some(), "{k} lost");
    }
    assert_eq!(c.stats().entries, 3);
    c.close().await.unwrap();
}

#[tokio::test]
async fn a_damaged_record_ends_the_log_there() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("cache.log");
    let clock = Arc::new(ManualClock::new(T0));
    let c = open(dir.path(), &clock, CacheOptions::default());
    let inst = fresh(&c).await;
    c.add(&inst, &key("first"), value(r#"{"v":1}"#), None)
        .await
        .unwrap();
    let first_end = records_end(&log);
    c.add(&inst, &key("second"), value(r#"{"v":2}"#), None)
        .await
        .unwrap();
    c.close().await.unwrap();
    drop(c);

    // One bit of the second record's value flips on disk.
    let mut bytes = std::fs::read(&log).unwrap();
    let at = records_end(&log) - 2;
    assert!(at > first_end);
    bytes[at] ^= 0x01;
    std::fs::write(&log, &bytes).unwrap();

    let c = open(dir.path(), &clock, CacheOptions::default());
    assert_eq!(
        text(&c, &inst, "first").await.as_deref(),
        Some(r#"{"v":1}"#)
    );
    assert_eq!(
        text(&c, &inst, "second").await,
        None,
        "never read back damaged"
    );
    assert_eq!(records_end(&log), first_end);
    c.close().await.unwrap();
}

#[tokio::test]
async fn compaction_keeps_every_live_entry_and_the_writes_made_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("cache.log");
    let clock = Arc::new(ManualClock::new(T0));
    let c = open(dir.path(), &clock, CacheOptions::default());
    let inst = fresh(&c).await;
    let other = fresh(&c).await;
    for round in 0..5 {
        for i in 0..200 {
            c.set(
                &inst,
                &key(&format!("k{i:03}")),
                value(&format!(r#"{{"round":{round},"i":{i}}}"#)),
                Some("1h".parse().unwrap()),
                quintet_core::ports::cache::SetMode::Upsert,
            )
            .await
            .unwrap();
        }
    }
    for i in 0..50 {
        c.remove(&inst, &key(&format!("k{i:03}"))).await.unwrap();
    }
    c.add(&other, &key("dropped"), value("{}"), None)
        .await
        .unwrap();
    c.drop_instance(&other).await.unwrap();
    c.close().await.unwrap();
    drop(c);
    let before = records_end(&log);

    // Reopened, no value is held in memory: every read after the compaction goes to the
    // entries' new places. Writes race the compaction.
    let c = open(dir.path(), &clock, CacheOptions::default());
    let writes = async {
        for i in 0..100 {
            c.set(
                &inst,
                &key(&format!("k{i:03}")),
                value(&format!(r#"{{"round":9,"i":{i}}}"#)),
                None,
                quintet_core::ports::cache::SetMode::Upsert,
            )
            .await
            .unwrap();
        }
    };
    let (compacted, ()) = tokio::join!(c.compact_now(), writes);
    compacted.unwrap();
    let after = records_end(&log);
    assert!(
        after < before / 2,
        "the log shrank from {before} to {after} bytes"
    );
    check_compacted(&c, &inst, &clock).await;
    c.close().await.unwrap();
    drop(c);
    let c = open(dir.path(), &clock, CacheOptions::default());
    check_compacted(&c, &inst, &clock).await;
    assert_eq!(text(&c, &other, "dropped").await, None);
    c.close().await.unwrap();
}

/// The state `compaction_keeps_every_live_entry_and_the_writes_made_meanwhile` leaves.
async fn check_compacted(c: &EmbeddedCache, inst: &Instance, clock: &ManualClock) {
    for i in 0..200 {
        let round = if i < 100 { 9 } else { 4 };
        assert_eq!(
            text(c, inst, &format!("k{i:03}")).await,
            Some(format!(r#"{{"round":{round},"i":{i}}}"#)),
            "k{i:03}"
        );
    }
    assert_eq!(c.stats().entries, 200);
    let k1 = c
        .query(inst, &quintet_core::cache::Glob::new("k1*").unwrap())
        .await
        .unwrap();
    assert_eq!(k1.len(), 100);
    clock.advance(3_600_000);
    // The entries never removed kept their one-hour expiry through the compaction; those
    // removed and written again without a TTL have none.
    assert_eq!(text(c, inst, "k150").await, None);
    assert_eq!(text(c, inst, "k050").await, None);
    assert!(text(c, inst, "k020").await.is_some());
    clock.advance(-3_600_000);
}

#[tokio::test]
async fn entries_of_an_earlier_cache_db_move_into_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("cache.db");
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             CREATE TABLE c7 (key TEXT PRIMARY KEY, value TEXT NOT NULL, expires_ms INTEGER) STRICT;
             INSERT INTO c7 VALUES ('kept', '{\"v\":1}', NULL), ('brief', '{}', 1700000005000);",
        )
        .unwrap();
    }
    let clock = Arc::new(ManualClock::new(T0));
    let c = open(dir.path(), &clock, CacheOptions::default());
    assert!(!db.exists(), "cache.db is removed once moved");
    let inst = Instance {
        id: quintet_core::InstanceId(7),
        ..instance(InstanceConfig::Cache)
    };
    assert_eq!(text(&c, &inst, "kept").await.as_deref(), Some(r#"{"v":1}"#));
    assert_eq!(text(&c, &inst, "brief").await.as_deref(), Some("{}"));
    clock.advance(5_000);
    assert_eq!(
        text(&c, &inst, "brief").await,
        None,
        "the expiry came along"
    );
    c.close().await.unwrap();
    drop(c);
    let c = open(dir.path(), &clock, CacheOptions::default());
    assert_eq!(text(&c, &inst, "kept").await.as_deref(), Some(r#"{"v":1}"#));
    c.close().await.unwrap();
}
