//! The cache service over HTTP (domain form): entries, TTLs on a stepped clock, patterns,
//! validation, limits, durability across restarts, memory-only mode and the size bound.

use std::sync::Arc;

use quintet_core::ManualClock;
use quintet_testkit::{Reply, TestServer};
use reqwest::Method;
use serde_json::{Value, json};

const T0: i64 = 1_700_000_000_000;

async fn with_clock() -> (TestServer, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(T0));
    let s = TestServer::builder()
        .clock(Arc::clone(&clock) as _)
        .start()
        .await;
    s.create("cache", "c", None).await;
    (s, clock)
}

/// `{ok:false, status, msg}` exactly.
fn error(status: u16, msg: &str) -> Value {
    json!({"ok": false, "status": status, "msg": msg})
}

fn missing(key: &str) -> Value {
    error(
        404,
        &format!(
            "key \"{key}\" does not exist in cache \"c\" (or it has expired); add it first \
             with a POST of {{key, value, ttl?}} to the instance"
        ),
    )
}

async fn add(s: &TestServer, key: &str, value: Value, ttl: Option<&str>) -> Reply {
    let mut body = json!({"key": key, "value": value});
    if let Some(t) = ttl {
        body["ttl"] = json!(t);
    }
    s.post("/cache/c", body).await
}

async fn query_keys(s: &TestServer, query: &str) -> Vec<String> {
    let r = s.get(&format!("/cache/c/_query{query}")).await.expect(200);
    assert_eq!(r.body["ok"], true);
    r.body["docs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["key"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn add_get_replace_remove() {
    let (s, _) = with_clock().await;
    let r = add(
        &s,
        "movie-1",
        json!({"title": "Ghostbusters", "year": 1984}),
        None,
    )
    .await
    .expect(201);
    assert_eq!(r.body, json!({"ok": true}));

    let r = s.get("/cache/c/movie-1").await.expect(201);
    assert_eq!(
        r.text, r#"{"ok":true,"doc":{"title":"Ghostbusters","year":1984}}"#,
        "the stored text, key order kept"
    );
    assert!(
        r.header("content-type")
            .unwrap()
            .starts_with("application/json")
    );

    let r = s
        .put(
            "/cache/c/movie-1",
            Some(json!({"title": "Ghostbusters II"})),
        )
        .await
        .expect(200);
    assert_eq!(r.body, json!({"ok": true}));
    let r = s.get("/cache/c/movie-1").await.expect(201);
    assert_eq!(
        r.body,
        json!({"ok": true, "doc": {"title": "Ghostbusters II"}}),
        "PUT replaces the whole value"
    );

    let r = s.delete("/cache/c/movie-1").await.expect(200);
    assert_eq!(r.body, json!({"ok": true}));
    let r = s.get("/cache/c/movie-1").await.expect(404);
    assert_eq!(r.body, missing("movie-1"));
    let r = s.delete("/cache/c/movie-1").await.expect(404);
    assert_eq!(r.body, missing("movie-1"));
}

#[tokio::test]
async fn the_legacy_header_answers_the_bare_value() {
    let (s, _) = with_clock().await;
    add(&s, "k", json!({"a": [1, 2]}), None).await.expect(201);
    for (header, value, bare) in [
        ("x-svc-legacy-get", "true", true),
        ("X-HYPER-LEGACY-GET", "true", true),
        ("x-hyper-legacy-get", "false", false),
        ("x-svc-legacy-get", "no", false),
    ] {
        let r = s
            .send(s.request(Method::GET, "/cache/c/k").header(header, value))
            .await
            .expect(201);
        let expected = if bare {
            json!({"a": [1, 2]})
        } else {
            json!({"ok": true, "doc": {"a": [1, 2]}})
        };
        assert_eq!(r.body, expected, "{header}: {value}");
    }
}

#[tokio::test]
async fn adding_a_live_key_is_409_and_keeps_the_value() {
    let (s, _) = with_clock().await;
    add(&s, "k", json!({"v": 1}), None).await.expect(201);
    let r = add(&s, "k", json!({"v": 2}), None).await.expect(409);
    assert_eq!(
        r.body,
        error(
            409,
            "key \"k\" already exists in cache \"c\"; replace its value with a PUT to the key"
        )
    );
    let r = s.get("/cache/c/k").await.expect(201);
    assert_eq!(r.body["doc"], json!({"v": 1}));
}

#[tokio::test]
async fn entries_expire_to_the_millisecond_and_free_their_key() {
    let (s, clock) = with_clock().await;
    add(&s, "brief", json!({"v": 1}), Some("2s"))
        .await
        .expect(201);
    add(&s, "lasting", json!({"v": 2}), None).await.expect(201);
    clock.advance(1_999);
    s.get("/cache/c/brief").await.expect(201);
    assert_eq!(query_keys(&s, "").await, ["brief", "lasting"]);
    clock.advance(1);
    let r = s.get("/cache/c/brief").await.expect(404);
    assert_eq!(r.body, missing("brief"));
    assert_eq!(query_keys(&s, "").await, ["lasting"]);
    s.delete("/cache/c/brief").await.expect(404);
    // An expired entry does not block an add.
    add(&s, "brief", json!({"v": 3}), None).await.expect(201);
    clock.advance(1_000 * 86_400 * 365 * 100);
    let r = s.get("/cache/c/brief").await.expect(201);
    assert_eq!(r.body["doc"], json!({"v": 3}));
}

#[tokio::test]
async fn every_ttl_unit_works_in_add_and_put() {
    let (s, clock) = with_clock().await;
    let second = 1_000;
    for (i, (ttl, ms)) in [
        ("5s", 5 * second),
        ("3m", 180 * second),
        ("2h", 7_200 * second),
        ("1d", 86_400 * second),
        ("1w", 604_800 * second),
        ("1y", 31_557_600 * second),
    ]
    .into_iter()
    .enumerate()
    {
        let (a, p) = (format!("add{i}"), format!("put{i}"));
        add(&s, &a, json!({}), Some(ttl)).await.expect(201);
        s.put(&format!("/cache/c/{p}?ttl={ttl}"), Some(json!({})))
            .await
            .expect(200);
        clock.advance(ms - 1);
        s.get(&format!("/cache/c/{a}")).await.expect(201);
        s.get(&format!("/cache/c/{p}")).await.expect(201);
        clock.advance(1);
        s.get(&format!("/cache/c/{a}")).await.expect(404);
        s.get(&format!("/cache/c/{p}")).await.expect(404);
    }
}

#[tokio::test]
async fn put_upserts_and_keeps_or_restarts_the_expiry() {
    let (s, clock) = with_clock().await;
    // Upsert of a missing key, no ttl: never expires.
    s.put("/cache/c/fresh", Some(json!({"v": 1})))
        .await
        .expect(200);
    // Without ttl, the current expiry is kept.
    add(&s, "kept", json!({"v": 1}), Some("10s"))
        .await
        .expect(201);
    // With ttl, the countdown restarts from the PUT.
    add(&s, "extended", json!({"v": 1}), Some("10s"))
        .await
        .expect(201);
    clock.advance(6_000);
    s.put("/cache/c/kept", Some(json!({"v": 2})))
        .await
        .expect(200);
    s.put("/cache/c/kept?ttl=", Some(json!({"v": 3})))
        .await
        .expect(200);
    s.put("/cache/c/extended?ttl=10s", Some(json!({"v": 2})))
        .await
        .expect(200);
    clock.advance(4_000);
    let r = s.get("/cache/c/kept").await.expect(404);
    assert_eq!(r.body, missing("kept"));
    let r = s.get("/cache/c/extended").await.expect(201);
    assert_eq!(r.body["doc"], json!({"v": 2}));
    clock.advance(6_000);
    s.get("/cache/c/extended").await.expect(404);
    let r = s.get("/cache/c/fresh").await.expect(201);
    assert_eq!(r.body["doc"], json!({"v": 1}));
}

#[tokio::test]
async fn queries_match_patterns_sort_by_key_and_skip_expired() {
    let (s, clock) = with_clock().await;
    for k in [
        "movie-1985-back",
        "movie-1984-ghostbusters",
        "show-1984",
        "movie+1984",
        "movie$1984",
        "a",
    ] {
        add(&s, k, json!({"k": k}), None).await.expect(201);
    }
    add(&s, "movie-1984-expiring", json!({}), Some("1s"))
        .await
        .expect(201);
    clock.advance(1_000);

    let r = s.get("/cache/c/_query?pattern=movie-*").await.expect(200);
    assert_eq!(
        r.body,
        json!({"ok": true, "docs": [
            {"key": "movie-1984-ghostbusters", "value": {"k": "movie-1984-ghostbusters"}},
            {"key": "movie-1985-back", "value": {"k": "movie-1985-back"}},
        ]})
    );
    let all = [
        "a",
        "movie$1984",
        "movie+1984",
        "movie-1984-ghostbusters",
        "movie-1985-back",
        "show-1984",
    ];
    assert_eq!(query_keys(&s, "").await, all, "no pattern: everything");
    assert_eq!(
        query_keys(&s, "?pattern=").await,
        all,
        "empty pattern: everything"
    );
    assert_eq!(query_keys(&s, "?pattern=*").await, all);
    assert_eq!(
        query_keys(&s, "?pattern=*1984").await,
        ["movie$1984", "movie+1984", "show-1984"]
    );
    assert_eq!(
        query_keys(&s, "?pattern=*-1984*").await,
        ["movie-1984-ghostbusters", "show-1984"]
    );
    assert_eq!(
        query_keys(&s, "?pattern=m*-*-*").await,
        ["movie-1984-ghostbusters", "movie-1985-back"]
    );
    assert_eq!(
        query_keys(&s, "?pattern=movie%2B1984").await,
        ["movie+1984"]
    );
    assert_eq!(
        query_keys(&s, "?pattern=movie%241984").await,
        ["movie$1984"]
    );
    assert_eq!(
        query_keys(&s, "?pattern=nothing*").await,
        Vec::<String>::new()
    );
    // POST answers the same, with the pattern in the query string (as hyper-connect sends it).
    let r = s
        .send(
            s.request(Method::POST, "/cache/c/_query?pattern=show*")
                .header("content-type", "application/json"),
        )
        .await
        .expect(200);
    assert_eq!(
        r.body,
        json!({"ok": true, "docs": [{"key": "show-1984", "value": {"k": "show-1984"}}]})
    );
    let r = s.get("/cache/c/_query?pattern=nothing*").await.expect(200);
    assert_eq!(r.body, json!({"ok": true, "docs": []}));
}

#[tokio::test]
async fn keys_with_every_allowed_character_work_in_paths() {
    let (s, _) = with_clock().await;
    let key = "a0_$+-z";
    add(&s, key, json!({"v": 1}), None).await.expect(201);
    s.get("/cache/c/a0_$+-z").await.expect(201);
    s.get("/cache/c/a0_%24%2B-z").await.expect(201);
    s.put("/cache/c/a0_%24+-z", Some(json!({"v": 2})))
        .await
        .expect(200);
    assert_eq!(query_keys(&s, "?pattern=a0_*").await, [key]);
    s.delete("/cache/c/a0_$+-z").await.expect(200);
}

#[tokio::test]
async fn bad_input_is_422_with_a_message_and_changes_nothing() {
    let (s, _) = with_clock().await;
    let key_rule = |k: &str| {
        error(
            422,
            &format!(
                "cache key \"{k}\" is not valid: a key starts with a lowercase letter a-z, \
                 followed by lowercase letters, digits 0-9 and the characters _ $ + -"
            ),
        )
    };
    let ttl_forms = "use a whole number of at least 1 followed by s (seconds), m (minutes), \
                     h (hours), d (days), w (weeks) or y (years), such as \"20s\", \"40m\", \
                     \"8h\", \"10d\", \"1w\" or \"1y\"";
    let long = format!("a{}", "b".repeat(512));
    let cases: Vec<(Value, Value)> = vec![
        (json!({"key": "Movie", "value": {}}), key_rule("Movie")),
        (json!({"key": "1movie", "value": {}}), key_rule("1movie")),
        (json!({"key": "", "value": {}}), key_rule("")),
        (json!({"key": "a/b", "value": {}}), key_rule("a/b")),
        (
            json!({"key": long, "value": {}}),
            error(
                422,
                &format!(
                    "cache key \"a{}\"… is 513 bytes long; keys are at most 512 bytes",
                    "b".repeat(39)
                ),
            ),
        ),
        (
            json!({"value": {}}),
            error(422, "the body needs \"key\": a string such as \"movie-1\""),
        ),
        (
            json!({"key": 7, "value": {}}),
            error(422, "\"key\" must be a string such as \"movie-1\""),
        ),
        (
            json!({"key": "k"}),
            error(
                422,
                "the body needs \"value\": a JSON object, such as {\"name\": \"x\"}",
            ),
        ),
        (
            json!({"key": "k", "value": [1]}),
            error(
                422,
                "the cache value must be a JSON object, such as {\"name\": \"x\"}; got an array",
            ),
        ),
        (
            json!({"key": "k", "value": "text"}),
            error(
                422,
                "the cache value must be a JSON object, such as {\"name\": \"x\"}; got a string",
            ),
        ),
        (
            json!({"key": "k", "value": {}, "ttl": "5x"}),
            error(422, &format!("ttl \"5x\" is not valid: {ttl_forms}")),
        ),
        (
            json!({"key": "k", "value": {}, "ttl": "10 s"}),
            error(422, &format!("ttl \"10 s\" is not valid: {ttl_forms}")),
        ),
        (
            json!({"key": "k", "value": {}, "ttl": 60}),
            error(422, &format!("ttl must be a string: {ttl_forms}")),
        ),
        (
            json!({"key": "k", "value": {}, "ttl": "0s"}),
            error(
                422,
                "ttl \"0s\" is not valid: it must be at least 1 of its unit; leave ttl out \
                 for an entry that never expires",
            ),
        ),
        (
            json!(["k", {}]),
            error(
                422,
                "the body must be a JSON object {\"key\", \"value\", \"ttl\"?}; got an array",
            ),
        ),
    ];
    for (body, expected) in cases {
        let r = s.post("/cache/c", body.clone()).await;
        assert_eq!(r.status, 422, "{body}: {}", r.text);
        assert_eq!(r.body, expected, "{body}");
    }

    let r = s.get("/cache/c/Movie").await.expect(422);
    assert_eq!(r.body, key_rule("Movie"));
    let r = s.delete("/cache/c/Movie").await.expect(422);
    assert_eq!(r.body, key_rule("Movie"));
    let r = s.put("/cache/c/Movie", Some(json!({}))).await.expect(422);
    assert_eq!(r.body, key_rule("Movie"));
    let r = s
        .put("/cache/c/k?ttl=5x", Some(json!({})))
        .await
        .expect(422);
    assert_eq!(
        r.body,
        error(422, &format!("ttl \"5x\" is not valid: {ttl_forms}"))
    );
    let r = s.put("/cache/c/k", Some(json!([1]))).await.expect(422);
    assert_eq!(
        r.body,
        error(
            422,
            "the cache value must be a JSON object, such as {\"name\": \"x\"}; got an array"
        )
    );
    let r = s
        .send(
            s.request(Method::PUT, "/cache/c/k")
                .header("content-type", "application/json")
                .body("{\"a\":"),
        )
        .await
        .expect(400);
    assert_eq!(r.body["status"], 400);
    let r = s
        .send(
            s.request(Method::POST, "/cache/c")
                .header("content-type", "application/json")
                .body("{nope"),
        )
        .await
        .expect(400);
    assert_eq!(r.body["status"], 400);
    let r = s
        .get(&format!("/cache/c/_query?pattern={}", "*".repeat(2049)))
        .await
        .expect(422);
    assert_eq!(
        r.body,
        error(
            422,
            "the pattern is 2049 bytes long; patterns are at most 2048 bytes"
        )
    );

    assert!(query_keys(&s, "").await.is_empty(), "nothing was stored");
}

#[tokio::test]
async fn values_over_10_mib_are_413_and_nothing_is_stored() {
    let (s, _) = with_clock().await;
    // `{"s":"…"}` of exactly the limit, and one byte more.
    let limit = 10 * 1024 * 1024;
    let at_limit = json!({"s": "x".repeat(limit - 8)});
    let over = json!({"s": "x".repeat(limit - 7)});
    let too_large = error(
        413,
        "the cache value is 10485761 bytes of JSON; values are at most 10485760 bytes (10 MiB)",
    );
    let r = add(&s, "big", over.clone(), None).await.expect(413);
    assert_eq!(r.body, too_large);
    let r = s.put("/cache/c/big", Some(over)).await.expect(413);
    assert_eq!(r.body, too_large);
    s.get("/cache/c/big").await.expect(404);

    add(&s, "big", at_limit.clone(), None).await.expect(201);
    let r = s
        .send(
            s.request(Method::GET, "/cache/c/big")
                .header("x-svc-legacy-get", "true"),
        )
        .await
        .expect(201);
    assert_eq!(r.text.len(), limit);
    assert_eq!(r.body, at_limit);
}

#[tokio::test]
async fn a_missing_instance_is_404_for_every_call() {
    let s = TestServer::start().await;
    let gone = error(
        404,
        "cache instance \"nope\" does not exist; create it with PUT /cache/nope",
    );
    let replies = [
        s.post("/cache/nope", json!({"key": "k", "value": {}}))
            .await,
        s.get("/cache/nope/k").await,
        s.put("/cache/nope/k", Some(json!({}))).await,
        s.delete("/cache/nope/k").await,
        s.get("/cache/nope/_query?pattern=*").await,
        s.send(s.request(Method::POST, "/cache/nope/_query")).await,
    ];
    for r in replies {
        assert_eq!(r.status, 404, "{}", r.text);
        assert_eq!(r.body, gone);
    }
}

#[tokio::test]
async fn entries_survive_a_restart_and_go_with_their_instance() {
    let (mut s, clock) = with_clock().await;
    add(&s, "kept", json!({"v": 1}), None).await.expect(201);
    add(&s, "brief", json!({"v": 2}), Some("1h"))
        .await
        .expect(201);
    s.restart().await;
    let r = s.get("/cache/c/kept").await.expect(201);
    assert_eq!(r.body["doc"], json!({"v": 1}));
    s.get("/cache/c/brief").await.expect(201);
    clock.advance(3_600_000);
    s.get("/cache/c/brief").await.expect(404);

    s.delete("/cache/c").await.expect(200);
    s.create("cache", "c", None).await;
    s.get("/cache/c/kept").await.expect(404);
    assert!(query_keys(&s, "").await.is_empty());
    add(&s, "kept", json!({}), None).await.expect(201);
}

#[tokio::test]
async fn memory_only_behaves_the_same_and_forgets_at_restart() {
    let clock = Arc::new(ManualClock::new(T0));
    let mut s = TestServer::builder()
        .clock(Arc::clone(&clock) as _)
        .args(|a| a.cache_memory_only = Some(true))
        .start()
        .await;
    s.create("cache", "c", None).await;
    add(&s, "k", json!({"v": 1}), Some("1s")).await.expect(201);
    add(&s, "k", json!({"v": 2}), None).await.expect(409);
    let r = s.get("/cache/c/k").await.expect(201);
    assert_eq!(r.body, json!({"ok": true, "doc": {"v": 1}}));
    assert_eq!(query_keys(&s, "?pattern=k*").await, ["k"]);
    clock.advance(1_000);
    s.get("/cache/c/k").await.expect(404);
    add(&s, "k", json!({"v": 3}), None).await.expect(201);
    assert!(!s.data_dir().join("cache.log").exists(), "nothing on disk");

    s.restart().await;
    s.put("/cache/c", None).await.expect(409); // the instance is still there…
    let r = s.get("/cache/c/k").await.expect(404); // …its entries are not
    assert_eq!(r.body, missing("k"));
    add(&s, "k", json!({"v": 4}), None).await.expect(201);
}

#[tokio::test]
async fn a_bounded_cache_evicts_the_least_recently_used() {
    let s = TestServer::builder()
        .args(|a| a.cache_max_bytes = Some(300))
        .start()
        .await;
    s.create("cache", "c", None).await;
    // Each entry: 2 bytes of key + 98 bytes of value text = 100 bytes.
    let v = || json!({"p": "x".repeat(90)});
    for k in ["k1", "k2", "k3"] {
        add(&s, k, v(), None).await.expect(201);
    }
    s.get("/cache/c/k1").await.expect(201); // k2 is now the least recently used
    add(&s, "k4", v(), None).await.expect(201);
    s.get("/cache/c/k2").await.expect(404);
    for k in ["k1", "k3", "k4"] {
        s.get(&format!("/cache/c/{k}")).await.expect(201);
    }
    let r = add(&s, "k5", json!({"p": "x".repeat(300)}), None)
        .await
        .expect(413);
    assert_eq!(
        r.body,
        error(
            413,
            "the entry takes 310 bytes (key plus value), more than the whole cache may hold \
             (300 bytes, set by --cache-max-bytes)"
        )
    );
    assert_eq!(query_keys(&s, "").await, ["k1", "k3", "k4"]);
}

#[tokio::test]
async fn the_application_form_put_updates_existing_keys_only() {
    let s = TestServer::start().await;
    let k = s.new_app().await;
    let base = format!("/{}/cache/default", k.app);
    s.send(s.as_app(&k, s.request(Method::PUT, &base)))
        .await
        .expect(201);
    // The domain form's instance of the same name is another instance.
    s.create("cache", "default", None).await;
    let put = |path: String, body: &'static str| {
        s.as_app(
            &k,
            s.request(Method::PUT, &path)
                .header("content-type", "application/json")
                .body(body),
        )
    };

    // Missing in the application form: 404, nothing written.
    let r = s
        .send(put(format!("{base}/k?ttl=1h"), "{}"))
        .await
        .expect(404);
    assert_eq!(
        r.body,
        error(
            404,
            "key \"k\" does not exist in cache \"default\" (or it has expired); add it first \
             with a POST of {key, value, ttl?} to the instance"
        )
    );
    s.send(s.as_app(&k, s.request(Method::GET, &format!("{base}/k"))))
        .await
        .expect(404);
    // The domain form upserts (200) and leaves the application's instance without k.
    s.put("/cache/default/k", Some(json!({"v": 1})))
        .await
        .expect(200);
    s.send(put(format!("{base}/k"), "{}")).await.expect(404);
    // Once added, the application form updates it: 201, and the new value is served.
    let r = s
        .send(
            s.as_app(
                &k,
                s.request(Method::POST, &base)
                    .json(&json!({"key": "k", "value": {}})),
            ),
        )
        .await
        .expect(201);
    assert_eq!(r.body, json!({"ok": true}));
    let r = s
        .send(put(format!("{base}/k"), r#"{"v":2}"#))
        .await
        .expect(201);
    assert_eq!(r.body, json!({"ok": true}));
    let r = s
        .send(s.as_app(&k, s.request(Method::GET, &format!("{base}/k"))))
        .await
        .expect(201);
    assert_eq!(r.body, json!({"ok": true, "doc": {"v": 2}}));
    // And the domain form's value is untouched.
    let r = s.get("/cache/default/k").await.expect(201);
    assert_eq!(r.body, json!({"ok": true, "doc": {"v": 1}}));
    // Without a token, the application form is closed.
    s.send(s.request(Method::GET, &format!("{base}/k")))
        .await
        .expect(401);
    // A missing instance names the request that creates it, in the application form.
    let r = s
        .send(s.as_app(
            &k,
            s.request(Method::GET, &format!("/{}/cache/nope/k", k.app)),
        ))
        .await
        .expect(404);
    assert_eq!(
        r.body,
        error(
            404,
            &format!(
                "cache instance \"nope\" does not exist; create it with PUT /{}/cache/nope",
                k.app
            )
        )
    );
}

#[tokio::test]
async fn the_remaining_time_to_live_of_an_entry() {
    let (s, clock) = with_clock().await;
    add(&s, "brief", json!({"v": 1}), Some("90s"))
        .await
        .expect(201);
    add(&s, "lasting", json!({"v": 2}), None).await.expect(201);
    let r = s.get("/cache/c/brief/_ttl").await.expect(200);
    assert_eq!(
        r.body,
        json!({"ok": true, "key": "brief", "expires": "2023-11-14T22:14:50.000Z", "ttl": 90})
    );
    clock.advance(30_500);
    let r = s.get("/cache/c/brief/_ttl").await.expect(200);
    assert_eq!(r.body["ttl"], 59);
    let r = s.get("/cache/c/lasting/_ttl").await.expect(200);
    assert_eq!(
        r.body,
        json!({"ok": true, "key": "lasting", "expires": null, "ttl": null})
    );
    clock.advance(59_500);
    let r = s.get("/cache/c/brief/_ttl").await.expect(404);
    assert_eq!(r.body, missing("brief"));
    s.get("/cache/c/nope/_ttl").await.expect(404);
    s.get("/cache/c/Bad/_ttl").await.expect(422);
}
