//! What the conformance suite cannot see: how entries sit in Redis. Pattern translation,
//! instance prefixes, SCAN paging, Redis' own expiry, sweep and unreachable servers.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{sync::Arc, time::Duration};

use quintet_core::{
    Error, Instance, InstanceConfig, InstanceId, SystemClock,
    cache::Glob,
    conformance::{
        self,
        cache::{key, value},
    },
    ports::{
        Lifecycle,
        cache::{Cache, SetMode},
    },
};
use quintet_engine_test::RedisTarget;
use quintet_redis::{RedisCache, RedisConfig};
use redis::AsyncCommands as _;

/// A cache on the real clock under `prefix`, and a raw connection to look inside.
async fn open(target: &RedisTarget, prefix: &str) -> (RedisCache, redis::aio::ConnectionManager) {
    let config = RedisConfig::new(&target.url).unwrap().with_prefix(prefix);
    let cache = RedisCache::connect(&config, Arc::new(SystemClock))
        .await
        .unwrap();
    let raw = redis::Client::open(target.url.as_str())
        .unwrap()
        .get_connection_manager()
        .await
        .unwrap();
    (cache, raw)
}

fn instance_with_id(id: i64) -> Instance {
    Instance {
        id: InstanceId(id),
        ..conformance::instance(InstanceConfig::Cache)
    }
}

async fn created(cache: &RedisCache, id: i64) -> Instance {
    let inst = instance_with_id(id);
    cache.create_instance(&inst).await.unwrap();
    inst
}

async fn keys_of(cache: &RedisCache, inst: &Instance, pattern: &str) -> Vec<String> {
    cache
        .query(inst, &Glob::new(pattern).unwrap())
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.key.as_str().to_owned())
        .collect()
}

/// Every raw key under `pattern` (a Redis MATCH pattern), sorted.
async fn raw_keys(raw: &mut redis::aio::ConnectionManager, pattern: &str) -> Vec<String> {
    let mut all: Vec<String> = Vec::new();
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .cursor_arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(raw)
            .await
            .unwrap();
        all.extend(keys);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    all.sort();
    all.dedup();
    all
}

/// `?`, `[…]` and `\` are wildcards or escapes to Redis but plain characters to quintet,
/// which no key holds: patterns using them match nothing, where an unescaped MATCH would
/// have matched. `$ + - _` are literal to both.
#[tokio::test]
async fn redis_glob_characters_are_literal_in_patterns() {
    let Some(target) = quintet_engine_test::redis("redis_glob_characters_are_literal") else {
        return;
    };
    let (cache, _raw) = open(&target, &target.prefix).await;
    let inst = created(&cache, 7).await;
    for k in ["abc", "axc", "a$c", "a+c", "a-c", "a_c", "bbc"] {
        cache.add(&inst, &key(k), value("{}"), None).await.unwrap();
    }
    let none: &[&str] = &[];
    let cases: &[(&str, &[&str])] = &[
        ("a?c", none),
        ("a?*", none),
        ("[ab]bc", none),
        ("[ab]*", none),
        ("a[^b]c", none),
        ("a\\*", none),
        ("*\\", none),
        ("a$c", &["a$c"]),
        ("a+*", &["a+c"]),
        ("a*c", &["a$c", "a+c", "a-c", "a_c", "abc", "axc"]),
        ("*c", &["a$c", "a+c", "a-c", "a_c", "abc", "axc", "bbc"]),
        ("a-c", &["a-c"]),
        ("a_*", &["a_c"]),
    ];
    for (pattern, expected) in cases {
        assert_eq!(
            keys_of(&cache, &inst, pattern).await,
            *expected,
            "{pattern}"
        );
    }
    cache.drop_instance(&inst).await.unwrap();
}

/// A prefix holding Redis glob characters is escaped: dropping an instance under
/// `<p>[ab]:` leaves the same instance id's keys under `<p>a:`, which an unescaped
/// `SCAN MATCH <p>[ab]:cache:<id>:*` would have deleted.
#[tokio::test]
async fn glob_characters_in_the_prefix_are_escaped() {
    let Some(target) = quintet_engine_test::redis("glob_characters_in_the_prefix") else {
        return;
    };
    let p = &target.prefix;
    let (tricky, mut raw) = open(&target, &format!("{p}[ab]:")).await;
    let (plain, _) = open(&target, &format!("{p}a:")).await;
    let (a, b) = (created(&tricky, 5).await, created(&plain, 5).await);
    tricky.add(&a, &key("k"), value("{}"), None).await.unwrap();
    plain
        .add(&b, &key("k"), value(r#"{"plain":1}"#), None)
        .await
        .unwrap();
    assert_eq!(keys_of(&tricky, &a, "*").await, ["k"]);
    tricky.drop_instance(&a).await.unwrap();
    assert_eq!(
        raw_keys(&mut raw, &format!("{p}*")).await,
        [format!("{p}a:cache-instances"), format!("{p}a:cache:5:k")]
    );
    assert_eq!(
        plain.get(&b, &key("k")).await.unwrap().unwrap().as_str(),
        r#"{"plain":1}"#
    );
    plain.drop_instance(&b).await.unwrap();
}

/// Dropping an instance removes its keys only, also those of an instance whose id starts
/// with the same digits.
#[tokio::test]
async fn dropping_an_instance_leaves_other_instances_keys() {
    let Some(target) = quintet_engine_test::redis("dropping_an_instance_leaves_others") else {
        return;
    };
    let p = &target.prefix;
    let (cache, mut raw) = open(&target, p).await;
    let (one, twelve, other) = (
        created(&cache, 1).await,
        created(&cache, 12).await,
        created(&cache, 2).await,
    );
    for inst in [&one, &twelve, &other] {
        for i in 0..30 {
            cache
                .add(inst, &key(&format!("k{i}")), value("{}"), None)
                .await
                .unwrap();
        }
    }
    cache.drop_instance(&one).await.unwrap();
    assert!(
        raw_keys(&mut raw, &format!("{p}cache:1:*"))
            .await
            .is_empty()
    );
    assert_eq!(
        raw_keys(&mut raw, &format!("{p}cache:12:*")).await.len(),
        30
    );
    assert_eq!(raw_keys(&mut raw, &format!("{p}cache:2:*")).await.len(), 30);
    assert_eq!(keys_of(&cache, &twelve, "*").await.len(), 30);
    let members: Vec<i64> = raw.smembers(format!("{p}cache-instances")).await.unwrap();
    let mut members = members;
    members.sort_unstable();
    assert_eq!(members, [2, 12]);
    cache.drop_instance(&twelve).await.unwrap();
    cache.drop_instance(&other).await.unwrap();
    assert_eq!(
        raw_keys(&mut raw, &format!("{p}*")).await,
        Vec::<String>::new()
    );
}

/// A query and a drop over more keys than one SCAN step returns (and more than one MGET
/// batch) see every key once, sorted.
#[tokio::test]
async fn queries_span_many_scan_pages() {
    let Some(target) = quintet_engine_test::redis("queries_span_many_scan_pages") else {
        return;
    };
    let (cache, mut raw) = open(&target, &target.prefix).await;
    let inst = created(&cache, 3).await;
    let n = 2_500;
    let mut conn = raw.clone();
    // Written in one pipeline through the raw connection, in the adapter's format, to keep
    // the test fast; one entry goes through the adapter as the reference.
    cache
        .add(&inst, &key("k0000"), value(r#"{"i":0}"#), None)
        .await
        .unwrap();
    let reference: Vec<u8> = conn
        .get(format!("{}cache:3:k0000", target.prefix))
        .await
        .unwrap();
    assert_eq!(reference, b"0000000000000000{\"i\":0}");
    let mut pipe = redis::pipe();
    for i in 1..n {
        pipe.set(
            format!("{}cache:3:k{i:04}", target.prefix),
            format!("0000000000000000{{\"i\":{i}}}"),
        )
        .ignore();
    }
    let () = pipe.query_async(&mut conn).await.unwrap();

    let (first_cursor, _): (u64, Vec<String>) = redis::cmd("SCAN")
        .cursor_arg(0)
        .arg("MATCH")
        .arg(format!("{}cache:3:*", target.prefix))
        .arg("COUNT")
        .arg(quintet_redis::cache::DEFAULT_SCAN_COUNT)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_ne!(first_cursor, 0, "the keys take more than one SCAN step");

    for cache in [cache.clone(), cache.clone().with_scan_count(7)] {
        let all = cache.query(&inst, &Glob::all()).await.unwrap();
        assert_eq!(all.len(), n);
        for (i, e) in all.iter().enumerate() {
            assert_eq!(e.key.as_str(), format!("k{i:04}"));
            assert_eq!(e.value.as_str(), format!(r#"{{"i":{i}}}"#));
        }
        let some = keys_of(&cache, &inst, "k1*9").await;
        assert_eq!(some.len(), 100);
        assert!(some.windows(2).all(|w| w[0] < w[1]));
    }
    cache
        .clone()
        .with_scan_count(50)
        .drop_instance(&inst)
        .await
        .unwrap();
    assert!(
        raw_keys(&mut raw, &format!("{}cache:3:*", target.prefix))
            .await
            .is_empty()
    );
}

/// TTLs are Redis expiries set with the value: `PX` on add and on set with a TTL, kept by a
/// set without one; on the real clock Redis itself removes the entry when it runs out.
#[tokio::test]
async fn ttls_are_redis_expiries() {
    let Some(target) = quintet_engine_test::redis("ttls_are_redis_expiries") else {
        return;
    };
    let (cache, mut raw) = open(&target, &target.prefix).await;
    let inst = created(&cache, 9).await;
    let raw_key = |k: &str| format!("{}cache:9:{k}", target.prefix);
    let ttl = |s: &str| Some(s.parse().unwrap());

    cache
        .add(&inst, &key("brief"), value("{}"), ttl("1s"))
        .await
        .unwrap();
    let pttl: i64 = raw.pttl(raw_key("brief")).await.unwrap();
    assert!((1..=1_000).contains(&pttl), "{pttl}");

    cache
        .add(&inst, &key("day"), value("{}"), ttl("1d"))
        .await
        .unwrap();
    cache
        .set(
            &inst,
            &key("day"),
            value(r#"{"v":2}"#),
            None,
            SetMode::Upsert,
        )
        .await
        .unwrap();
    let pttl: i64 = raw.pttl(raw_key("day")).await.unwrap();
    assert!((86_000_000..=86_400_000).contains(&pttl), "kept: {pttl}");
    cache
        .set(
            &inst,
            &key("day"),
            value("{}"),
            ttl("1h"),
            SetMode::UpdateExisting,
        )
        .await
        .unwrap();
    let pttl: i64 = raw.pttl(raw_key("day")).await.unwrap();
    assert!((3_500_000..=3_600_000).contains(&pttl), "restarted: {pttl}");

    cache
        .set(&inst, &key("lasting"), value("{}"), None, SetMode::Upsert)
        .await
        .unwrap();
    let pttl: i64 = raw.pttl(raw_key("lasting")).await.unwrap();
    assert_eq!(pttl, -1, "no expiry");

    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert_eq!(cache.get(&inst, &key("brief")).await.unwrap(), None);
    let exists: bool = raw.exists(raw_key("brief")).await.unwrap();
    assert!(!exists, "Redis removed the expired entry");
    assert_eq!(keys_of(&cache, &inst, "*").await, ["day", "lasting"]);
    cache
        .add(&inst, &key("brief"), value("{}"), None)
        .await
        .unwrap();
    cache.drop_instance(&inst).await.unwrap();
}

/// Sweep removes the keys of instances the registry no longer knows, and only those.
#[tokio::test]
async fn sweep_removes_the_keys_of_unknown_instances() {
    let Some(target) = quintet_engine_test::redis("sweep_removes_unknown_instances") else {
        return;
    };
    let p = &target.prefix;
    let (cache, mut raw) = open(&target, p).await;
    let (live, orphan) = (created(&cache, 40).await, created(&cache, 41).await);
    for inst in [&live, &orphan] {
        cache.add(inst, &key("k"), value("{}"), None).await.unwrap();
    }
    assert_eq!(
        cache
            .sweep(&quintet_core::ports::Keep::only([live.id]))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        raw_keys(&mut raw, &format!("{p}cache:*")).await,
        [format!("{p}cache:40:k")]
    );
    assert_eq!(
        cache
            .sweep(&quintet_core::ports::Keep::only([live.id]))
            .await
            .unwrap(),
        0
    );
    cache.drop_instance(&live).await.unwrap();
}

/// An unreachable Redis is a 503-style error, not an internal one.
#[tokio::test]
async fn an_unreachable_redis_is_unavailable() {
    // Port 9 (discard) has no Redis; nothing here needs the test engine.
    let mut config = RedisConfig::new("redis://127.0.0.1:9/0").unwrap();
    config.timeout = Duration::from_secs(2);
    let err = RedisCache::connect(&config, Arc::new(SystemClock))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
}
