//! Conformance of [`Cache`]: every cache adapter runs each case with an adapter built on
//! the [`ManualClock`] the case is given, so expiry is stepped, never waited for.
//!
//! Each case uses fresh instances, so cases may share an engine and run in parallel.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use serde_json::value::RawValue;

use crate::{
    Error, Instance, InstanceConfig, ManualClock,
    cache::{CacheKey, CacheValue, Glob, Ttl, existing_key, missing_key},
    ports::cache::{Cache, CacheUsage, SetMode},
};

use super::instance;

const SECOND: i64 = 1_000;
const YEAR: i64 = 31_557_600_000;

/// A key from text.
pub fn key(s: &str) -> CacheKey {
    s.parse().expect("valid key")
}

/// A value from JSON text (an object).
pub fn value(text: &str) -> CacheValue {
    let raw = RawValue::from_string(text.to_owned()).expect("valid JSON");
    CacheValue::from_raw(&raw).expect("valid value")
}

fn ttl(s: &str) -> Option<Ttl> {
    Some(s.parse().expect("valid ttl"))
}

async fn fresh(cache: &dyn Cache) -> Instance {
    let inst = instance(InstanceConfig::Cache);
    cache.create_instance(&inst).await.expect("create_instance");
    inst
}

async fn text_of(cache: &dyn Cache, inst: &Instance, k: &str) -> Option<String> {
    cache
        .get(inst, &key(k))
        .await
        .expect("get")
        .map(|v| v.as_str().to_owned())
}

async fn keys_of(cache: &dyn Cache, inst: &Instance, pattern: &str) -> Vec<String> {
    cache
        .query(inst, &Glob::new(pattern).expect("pattern"))
        .await
        .expect("query")
        .into_iter()
        .map(|e| e.key.as_str().to_owned())
        .collect()
}

/// Poll every future to completion concurrently, answers in order (no executor needed).
async fn join_all<F: Future>(futs: Vec<F>) -> Vec<F::Output> {
    let mut futs: Vec<Pin<Box<F>>> = futs.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx: &mut Context<'_>| {
        let mut pending = false;
        for (f, o) in futs.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *o = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    out.into_iter().map(|o| o.expect("completed")).collect()
}

/// The value comes back as the exact text written: key order, spacing, escapes.
pub async fn add_then_get_returns_the_value_byte_for_byte(cache: &dyn Cache) {
    let inst = fresh(cache).await;
    let text = r#"{"z":1,  "a":[1, 2.50, "é\u00e9\n"], "n":{"deep":null}}"#;
    cache
        .add(&inst, &key("movie-1"), value(text), None)
        .await
        .expect("add");
    assert_eq!(
        text_of(cache, &inst, "movie-1").await.as_deref(),
        Some(text)
    );
    cache.drop_instance(&inst).await.expect("drop");
}

/// A second add of a live key is a conflict and leaves the first value.
pub async fn add_refuses_a_live_key(cache: &dyn Cache) {
    let inst = fresh(cache).await;
    let k = key("taken");
    cache
        .add(&inst, &k, value(r#"{"v":1}"#), None)
        .await
        .expect("first add");
    let err = cache
        .add(&inst, &k, value(r#"{"v":2}"#), None)
        .await
        .expect_err("second add must conflict");
    assert_eq!(err, existing_key(&inst.name, &k));
    assert_eq!(
        text_of(cache, &inst, "taken").await.as_deref(),
        Some(r#"{"v":1}"#)
    );
    cache.drop_instance(&inst).await.expect("drop");
}

/// Keys never written are `None`; removing them is not found.
pub async fn missing_keys_are_none(cache: &dyn Cache) {
    let inst = fresh(cache).await;
    assert_eq!(text_of(cache, &inst, "nothing").await, None);
    let err = cache.remove(&inst, &key("nothing")).await.unwrap_err();
    assert_eq!(err, missing_key(&inst.name, &key("nothing")));
    assert!(keys_of(cache, &inst, "*").await.is_empty());
    cache.drop_instance(&inst).await.expect("drop");
}

/// An entry is live until the millisecond its TTL runs out, then invisible everywhere.
pub async fn entries_expire_at_their_instant(cache: &dyn Cache, clock: &ManualClock) {
    let inst = fresh(cache).await;
    cache
        .add(&inst, &key("brief"), value(r#"{"v":1}"#), ttl("1s"))
        .await
        .expect("add");
    cache
        .add(&inst, &key("lasting"), value(r#"{"v":2}"#), None)
        .await
        .expect("add");
    clock.advance(SECOND - 1);
    assert!(
        text_of(cache, &inst, "brief").await.is_some(),
        "live at 999 ms"
    );
    assert_eq!(keys_of(cache, &inst, "*").await, ["brief", "lasting"]);
    clock.advance(1);
    assert_eq!(
        text_of(cache, &inst, "brief").await,
        None,
        "gone at 1000 ms"
    );
    assert_eq!(keys_of(cache, &inst, "*").await, ["lasting"]);
    assert_eq!(keys_of(cache, &inst, "brief").await, Vec::<String>::new());
    let err = cache.remove(&inst, &key("brief")).await.unwrap_err();
    assert_eq!(err, missing_key(&inst.name, &key("brief")));
    cache.drop_instance(&inst).await.expect("drop");
}

/// `s m h d w y` each expire after exactly their length.
pub async fn every_unit_expires_on_time(cache: &dyn Cache, clock: &ManualClock) {
    let inst = fresh(cache).await;
    for (t, ms) in [
        ("3s", 3 * SECOND),
        ("2m", 120 * SECOND),
        ("1h", 3_600 * SECOND),
        ("1d", 86_400 * SECOND),
        ("1w", 604_800 * SECOND),
        ("1y", YEAR),
    ] {
        let k = format!("unit-{t}");
        cache
            .add(&inst, &key(&k), value(r#"{"v":true}"#), ttl(t))
            .await
            .expect("add");
        clock.advance(ms - 1);
        assert!(
            text_of(cache, &inst, &k).await.is_some(),
            "{t}: live 1 ms before"
        );
        clock.advance(1);
        assert_eq!(text_of(cache, &inst, &k).await, None, "{t}: gone on time");
    }
    cache.drop_instance(&inst).await.expect("drop");
}

/// An add over an expired entry succeeds and starts a new entry (without its old expiry).
pub async fn an_expired_entry_does_not_block_add(cache: &dyn Cache, clock: &ManualClock) {
    let inst = fresh(cache).await;
    let k = key("recycled");
    cache
        .add(&inst, &k, value(r#"{"v":"old"}"#), ttl("1s"))
        .await
        .expect("add");
    clock.advance(SECOND);
    cache
        .add(&inst, &k, value(r#"{"v":"new"}"#), None)
        .await
        .expect("add over an expired entry");
    clock.advance(10 * YEAR);
    assert_eq!(
        text_of(cache, &inst, "recycled").await.as_deref(),
        Some(r#"{"v":"new"}"#)
    );
    cache.drop_instance(&inst).await.expect("drop");
}

/// Upsert creates a missing key, and a later set replaces the whole value (no merge).
pub async fn set_upserts_and_replaces_whole_values(cache: &dyn Cache) {
    let inst = fresh(cache).await;
    let k = key("profile");
    cache
        .set(&inst, &k, value(r#"{"a":1,"b":2}"#), None, SetMode::Upsert)
        .await
        .expect("upsert creates");
    assert_eq!(
        text_of(cache, &inst, "profile").await.as_deref(),
        Some(r#"{"a":1,"b":2}"#)
    );
    cache
        .set(&inst, &k, value(r#"{"c":3}"#), None, SetMode::Upsert)
        .await
        .expect("upsert replaces");
    assert_eq!(
        text_of(cache, &inst, "profile").await.as_deref(),
        Some(r#"{"c":3}"#)
    );
    cache
        .set(
            &inst,
            &k,
            value(r#"{"d":4}"#),
            None,
            SetMode::UpdateExisting,
        )
        .await
        .expect("update of a live key");
    assert_eq!(
        text_of(cache, &inst, "profile").await.as_deref(),
        Some(r#"{"d":4}"#)
    );
    cache.drop_instance(&inst).await.expect("drop");
}

/// A set without a TTL keeps the entry's expiry instant.
pub async fn set_without_ttl_keeps_the_expiry(cache: &dyn Cache, clock: &ManualClock) {
    let inst = fresh(cache).await;
    let k = key("session");
    cache
        .add(&inst, &k, value(r#"{"v":1}"#), ttl("10s"))
        .await
        .expect("add");
    clock.advance(5 * SECOND);
    cache
        .set(&inst, &k, value(r#"{"v":2}"#), None, SetMode::Upsert)
        .await
        .expect("set");
    cache
        .set(
            &inst,
            &k,
            value(r#"{"v":3}"#),
            None,
            SetMode::UpdateExisting,
        )
        .await
        .expect("update");
    clock.advance(5 * SECOND - 1);
    assert_eq!(
        text_of(cache, &inst, "session").await.as_deref(),
        Some(r#"{"v":3}"#)
    );
    clock.advance(1);
    assert_eq!(text_of(cache, &inst, "session").await, None);
    cache.drop_instance(&inst).await.expect("drop");
}

/// A set with a TTL counts it from the set; it can also give a lasting entry an expiry.
pub async fn set_with_ttl_restarts_the_countdown(cache: &dyn Cache, clock: &ManualClock) {
    let inst = fresh(cache).await;
    let (k, lasting) = (key("token"), key("lasting"));
    cache
        .add(&inst, &k, value(r#"{"v":1}"#), ttl("10s"))
        .await
        .expect("add");
    cache
        .add(&inst, &lasting, value(r#"{"v":1}"#), None)
        .await
        .expect("add");
    clock.advance(8 * SECOND);
    cache
        .set(&inst, &k, value(r#"{"v":2}"#), ttl("10s"), SetMode::Upsert)
        .await
        .expect("extend");
    cache
        .set(
            &inst,
            &lasting,
            value(r#"{"v":2}"#),
            ttl("5s"),
            SetMode::UpdateExisting,
        )
        .await
        .expect("shorten");
    clock.advance(5 * SECOND - 1);
    assert!(text_of(cache, &inst, "lasting").await.is_some());
    clock.advance(1);
    assert_eq!(text_of(cache, &inst, "lasting").await, None);
    clock.advance(5 * SECOND - 1);
    assert_eq!(
        text_of(cache, &inst, "token").await.as_deref(),
        Some(r#"{"v":2}"#),
        "extended past its first expiry"
    );
    clock.advance(1);
    assert_eq!(text_of(cache, &inst, "token").await, None);
    cache.drop_instance(&inst).await.expect("drop");
}

/// An upsert over an expired entry without a TTL makes an entry that never expires.
pub async fn set_over_an_expired_entry_starts_fresh(cache: &dyn Cache, clock: &ManualClock) {
    let inst = fresh(cache).await;
    let k = key("phoenix");
    cache
        .add(&inst, &k, value(r#"{"v":1}"#), ttl("1s"))
        .await
        .expect("add");
    clock.advance(2 * SECOND);
    cache
        .set(&inst, &k, value(r#"{"v":2}"#), None, SetMode::Upsert)
        .await
        .expect("upsert");
    clock.advance(YEAR);
    assert_eq!(
        text_of(cache, &inst, "phoenix").await.as_deref(),
        Some(r#"{"v":2}"#)
    );
    cache.drop_instance(&inst).await.expect("drop");
}

/// [`SetMode::UpdateExisting`] on a missing or expired key is not found and writes nothing.
pub async fn update_existing_needs_a_live_entry(cache: &dyn Cache, clock: &ManualClock) {
    let inst = fresh(cache).await;
    let (missing, expired) = (key("missing"), key("expired"));
    let err = cache
        .set(&inst, &missing, value("{}"), None, SetMode::UpdateExisting)
        .await
        .unwrap_err();
    assert_eq!(err, missing_key(&inst.name, &missing));
    assert_eq!(text_of(cache, &inst, "missing").await, None);

    cache
        .add(&inst, &expired, value(r#"{"v":1}"#), ttl("1s"))
        .await
        .expect("add");
    clock.advance(SECOND);
    let err = cache
        .set(
            &inst,
            &expired,
            value("{}"),
            ttl("1h"),
            SetMode::UpdateExisting,
        )
        .await
        .unwrap_err();
    assert_eq!(err, missing_key(&inst.name, &expired));
    assert_eq!(text_of(cache, &inst, "expired").await, None);
    assert!(keys_of(cache, &inst, "*").await.is_empty());
    cache.drop_instance(&inst).await.expect("drop");
}

/// Remove deletes a live entry; then the key is missing, and can be added again.
pub async fn remove_then_the_key_is_missing(cache: &dyn Cache, clock: &ManualClock) {
    let inst = fresh(cache).await;
    let k = key("gone");
    cache
        .add(&inst, &k, value(r#"{"v":1}"#), ttl("1h"))
        .await
        .expect("add");
    cache.remove(&inst, &k).await.expect("remove");
    assert_eq!(text_of(cache, &inst, "gone").await, None);
    assert_eq!(
        cache.remove(&inst, &k).await.unwrap_err(),
        missing_key(&inst.name, &k)
    );
    cache
        .add(&inst, &k, value(r#"{"v":2}"#), None)
        .await
        .expect("add after remove");
    clock.advance(2 * 3_600 * SECOND);
    assert_eq!(
        text_of(cache, &inst, "gone").await.as_deref(),
        Some(r#"{"v":2}"#),
        "the removed entry's expiry does not carry over"
    );
    cache.drop_instance(&inst).await.expect("drop");
}

/// A query answers each entry's expiry instant (`None` for none), which `set` without a
/// time-to-live keeps: what an export turns into the remaining time to live.
pub async fn query_answers_each_expiry(cache: &dyn Cache, clock: &ManualClock) {
    let inst = fresh(cache).await;
    cache
        .add(&inst, &key("forever"), value(r#"{"v":1}"#), None)
        .await
        .expect("add");
    cache
        .add(&inst, &key("soon"), value(r#"{"v":2}"#), ttl("20s"))
        .await
        .expect("add");
    clock.advance(SECOND);
    cache
        .set(
            &inst,
            &key("soon"),
            value(r#"{"v":3}"#),
            None,
            SetMode::Upsert,
        )
        .await
        .expect("set");
    let all = cache.query(&inst, &Glob::all()).await.expect("query");
    let got: Vec<(&str, Option<i64>)> =
        all.iter().map(|e| (e.key.as_str(), e.expires_ms)).collect();
    assert_eq!(
        got,
        [("forever", None), ("soon", Some(super::T0 + 20 * SECOND))]
    );
    let one = cache.query(&inst, &Glob::new("soon").expect("glob")).await;
    assert_eq!(
        one.expect("query")[0].expires_ms,
        Some(super::T0 + 20 * SECOND)
    );
    cache.drop_instance(&inst).await.expect("drop");
}

/// Patterns select keys; answers are sorted byte-wise and never hold expired entries.
pub async fn query_matches_sorts_and_hides_expired(cache: &dyn Cache, clock: &ManualClock) {
    let inst = fresh(cache).await;
    let keys = [
        "movie-1984-ghostbusters",
        "movie-1985-back",
        "movie_1984",
        "movie+1984",
        "movie$1984",
        "movie-1984",
        "movie",
        "show-1984-x",
        "a",
        "z9",
        "m1984",
    ];
    for k in keys {
        cache
            .add(&inst, &key(k), value(&format!(r#"{{"k":"{k}"}}"#)), None)
            .await
            .expect("add");
    }
    cache
        .add(&inst, &key("movie-1984-expiring"), value("{}"), ttl("1s"))
        .await
        .expect("add");
    clock.advance(SECOND);

    let all = cache.query(&inst, &Glob::all()).await.expect("query");
    let mut sorted: Vec<&str> = keys.to_vec();
    sorted.sort_unstable();
    assert_eq!(
        all.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(),
        sorted
    );
    for e in &all {
        assert_eq!(e.value.as_str(), format!(r#"{{"k":"{}"}}"#, e.key));
    }
    let cases: &[(&str, &[&str])] = &[
        (
            "movie*",
            &[
                "movie",
                "movie$1984",
                "movie+1984",
                "movie-1984",
                "movie-1984-ghostbusters",
                "movie-1985-back",
                "movie_1984",
            ],
        ),
        (
            "*1984",
            &[
                "m1984",
                "movie$1984",
                "movie+1984",
                "movie-1984",
                "movie_1984",
            ],
        ),
        (
            "*1984*",
            &[
                "m1984",
                "movie$1984",
                "movie+1984",
                "movie-1984",
                "movie-1984-ghostbusters",
                "movie_1984",
                "show-1984-x",
            ],
        ),
        ("movie-*-*", &["movie-1984-ghostbusters", "movie-1985-back"]),
        (
            "m*1984",
            &[
                "m1984",
                "movie$1984",
                "movie+1984",
                "movie-1984",
                "movie_1984",
            ],
        ),
        ("movie-1984", &["movie-1984"]),
        ("movie-1984-expiring", &[]),
        ("movie-*-expiring", &[]),
        ("nothing*", &[]),
        ("MOVIE*", &[]),
        ("*", &sorted),
    ];
    for (pattern, expected) in cases {
        assert_eq!(keys_of(cache, &inst, pattern).await, *expected, "{pattern}");
    }
    cache.drop_instance(&inst).await.expect("drop");
}

/// `usage` counts the live entries of the instance and their keys' and values' bytes: an
/// expired or removed entry no longer counts, nor does another instance's.
pub async fn usage_counts_live_entries_and_their_bytes(cache: &dyn Cache, clock: &ManualClock) {
    let inst = fresh(cache).await;
    let other = fresh(cache).await;
    let usage = |entries, bytes| CacheUsage { entries, bytes };
    assert_eq!(cache.usage(&inst).await.expect("usage"), usage(0, 0));
    let put = [
        ("k1", r#"{"v":1}"#, None),
        ("key2", r#"{"a":"bc"}"#, ttl("1h")),
        ("k3", "{}", ttl("2h")),
    ];
    for (k, v, t) in put {
        cache.add(&inst, &key(k), value(v), t).await.expect("add");
    }
    cache
        .add(&other, &key("k1"), value(r#"{"v":1}"#), None)
        .await
        .expect("add");
    // 2 + 7, 4 + 10, 2 + 2
    assert_eq!(cache.usage(&inst).await.expect("usage"), usage(3, 27));
    clock.advance(3_600 * SECOND);
    assert_eq!(
        cache.usage(&inst).await.expect("usage"),
        usage(2, 13),
        "the expired entry no longer counts"
    );
    cache.remove(&inst, &key("k3")).await.expect("remove");
    assert_eq!(cache.usage(&inst).await.expect("usage"), usage(1, 9));
    assert_eq!(cache.usage(&other).await.expect("usage"), usage(1, 9));
    cache.drop_instance(&inst).await.expect("drop");
    cache.drop_instance(&other).await.expect("drop");
}

/// The same key in two instances holds two entries.
pub async fn instances_are_isolated(cache: &dyn Cache) {
    let (a, b) = (fresh(cache).await, fresh(cache).await);
    let k = key("shared");
    cache
        .add(&a, &k, value(r#"{"in":"a"}"#), None)
        .await
        .expect("add a");
    cache
        .add(&b, &k, value(r#"{"in":"b"}"#), None)
        .await
        .expect("add b: no conflict with a");
    cache
        .add(&a, &key("only-a"), value("{}"), None)
        .await
        .expect("add");
    assert_eq!(
        text_of(cache, &b, "shared").await.as_deref(),
        Some(r#"{"in":"b"}"#)
    );
    assert_eq!(keys_of(cache, &b, "*").await, ["shared"]);
    cache.drop_instance(&a).await.expect("drop a");
    assert_eq!(
        text_of(cache, &b, "shared").await.as_deref(),
        Some(r#"{"in":"b"}"#)
    );
    cache.drop_instance(&b).await.expect("drop b");
}

/// Dropping an instance removes its entries; created again, it starts empty.
pub async fn drop_removes_every_entry(cache: &dyn Cache) {
    let inst = fresh(cache).await;
    for i in 0..20 {
        cache
            .add(&inst, &key(&format!("k{i}")), value("{}"), None)
            .await
            .expect("add");
    }
    cache.drop_instance(&inst).await.expect("drop");
    cache.create_instance(&inst).await.expect("create again");
    assert!(keys_of(cache, &inst, "*").await.is_empty());
    assert_eq!(text_of(cache, &inst, "k0").await, None);
    cache
        .add(&inst, &key("k0"), value("{}"), None)
        .await
        .expect("no leftover conflicts");
    cache.drop_instance(&inst).await.expect("drop");
}

/// Of concurrent adds of one key exactly one succeeds; the others conflict.
pub async fn concurrent_adds_of_one_key_have_one_winner(cache: &dyn Cache) {
    let inst = fresh(cache).await;
    let k = key("race");
    let adds = (0..16)
        .map(|i| cache.add(&inst, &k, value(&format!(r#"{{"i":{i}}}"#)), None))
        .collect();
    let results = join_all(adds).await;
    let winners = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(winners, 1, "{results:?}");
    for r in &results {
        if let Err(e) = r {
            assert!(matches!(e, Error::Conflict(_)), "{e:?}");
        }
    }
    let winner = results.iter().position(Result::is_ok).expect("a winner");
    assert_eq!(
        text_of(cache, &inst, "race").await,
        Some(format!(r#"{{"i":{winner}}}"#))
    );
    cache.drop_instance(&inst).await.expect("drop");
}

/// Many concurrent writes of different keys all land.
pub async fn concurrent_writes_all_land(cache: &dyn Cache) {
    let inst = fresh(cache).await;
    let keys: Vec<CacheKey> = (0..64).map(|i| key(&format!("w{i:03}"))).collect();
    let writes = keys
        .iter()
        .map(|k| cache.set(&inst, k, value(r#"{"ok":1}"#), None, SetMode::Upsert))
        .collect();
    for r in join_all(writes).await {
        r.expect("set");
    }
    assert_eq!(keys_of(cache, &inst, "w*").await.len(), 64);
    cache.drop_instance(&inst).await.expect("drop");
}

/// A value of several megabytes round-trips.
pub async fn large_values_round_trip(cache: &dyn Cache) {
    let inst = fresh(cache).await;
    let text = format!(r#"{{"blob":"{}"}}"#, "0123456789abcdef".repeat(256 * 1024));
    cache
        .add(&inst, &key("big"), value(&text), None)
        .await
        .expect("add");
    assert_eq!(text_of(cache, &inst, "big").await, Some(text.clone()));
    let found = cache.query(&inst, &Glob::all()).await.expect("query");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].value.as_str(), text);
    cache.drop_instance(&inst).await.expect("drop");
}

/// `expiry` answers the instant a live entry expires (`Some(None)`: never), follows a set
/// with a new TTL, and is `None` once it expired or for a missing key.
pub async fn expiry_is_the_instant_an_entry_expires(cache: &dyn Cache, clock: &ManualClock) {
    let inst = fresh(cache).await;
    cache
        .add(&inst, &key("brief"), value(r#"{"v":1}"#), ttl("10s"))
        .await
        .expect("add");
    cache
        .add(&inst, &key("lasting"), value(r#"{"v":2}"#), None)
        .await
        .expect("add");
    let start = crate::Clock::now_ms(clock);
    let at = |k: &'static str| {
        let inst = inst.clone();
        async move { cache.expiry(&inst, &key(k)).await.expect("expiry") }
    };
    assert_eq!(at("brief").await, Some(Some(start + 10 * SECOND)));
    assert_eq!(at("lasting").await, Some(None));
    assert_eq!(at("missing").await, None);
    clock.advance(SECOND);
    cache
        .set(
            &inst,
            &key("brief"),
            value(r#"{"v":3}"#),
            ttl("1m"),
            SetMode::Upsert,
        )
        .await
        .expect("set");
    assert_eq!(at("brief").await, Some(Some(start + SECOND + 60 * SECOND)));
    clock.advance(60 * SECOND);
    assert_eq!(at("brief").await, None, "expired at its instant");
    cache.drop_instance(&inst).await.expect("drop");
}
