//! Engines going down under running nodes, through a proxy in front of the real engine
//! that the test cuts (connections refused) or silences (connections never answered):
//! calls that need the engine answer 503 with `Retry-After` at once on every node, calls that do not are served, `/_ready` names the engine, and everything works
//! again when the engine is back, without a restart. And nodes started while an engine is
//! down refuse to start, quickly, saying which engine and why.

use crate::BIN;
use std::{
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use quintet_testkit::{Client, Process, Proxy, Reply, engines, eventually};
use reqwest::Method;
use serde_json::json;

fn bin() -> &'static Path {
    Path::new(BIN)
}

/// `host:port` of a URL such as `redis://127.0.0.1:6379/0` or `http://127.0.0.1:18333`.
fn host_port(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split(['/', '?']).next().unwrap().to_owned()
}

/// While the engine is down, `call` on `node` answers 503 with `Retry-After`: the calls
/// that find the engine gone (a connection that breaks, one that cannot be opened within
/// the connect timeout) until the breaker opens, then ten more, whose slowest time is
/// returned.
async fn fails_fast(
    node: &Client,
    what: &str,
    call: impl Fn(&Client) -> reqwest::RequestBuilder,
) -> Duration {
    let mut open = false;
    for _ in 0..5 {
        let r = node.send(call(node)).await;
        assert_eq!(r.status, 503, "{what}: {}", r.text);
        if r.text.contains(BREAKER_OPEN) {
            open = true;
            break;
        }
    }
    assert!(open, "{what}: the breaker did not open");
    let mut slowest = Duration::ZERO;
    for _ in 0..10 {
        let start = Instant::now();
        let r = node.send(call(node)).await;
        slowest = slowest.max(start.elapsed());
        assert_unavailable(&r, what);
        assert!(r.text.contains(BREAKER_OPEN), "{what}: {}", r.text);
    }
    assert!(
        slowest < Duration::from_secs(1),
        "{what}: a call took {slowest:?} with the engine known to be down"
    );
    slowest
}

/// What the calls refused by an open breaker say.
const BREAKER_OPEN: &str = "quintet retries the connection in the background";

fn assert_unavailable(r: &Reply, what: &str) {
    assert_eq!(r.status, 503, "{what}: {}", r.text);
    assert_eq!(r.header("retry-after"), Some("1"), "{what}");
    assert_eq!(r.body["ok"], false, "{what}");
    assert_eq!(r.body["status"], 503, "{what}");
    assert!(
        r.body["msg"].as_str().unwrap().contains("unreachable"),
        "{what}: {}",
        r.text
    );
}

/// `/_ready` is 503 with `check` naming the engine, or 200 once it answers.
async fn ready_says(node: &Client, check: &str, engine: &str) {
    let r = node.get("/_ready").await.expect(503);
    assert!(
        r.body["checks"][check].as_str().unwrap().contains(engine),
        "{check}: {}",
        r.text
    );
    assert_eq!(r.body["checks"]["data"], "ok", "{}", r.text);
}

async fn recovers(
    node: &Client,
    what: &str,
    call: impl Fn(&Client) -> reqwest::RequestBuilder,
    ok: u16,
) {
    eventually(&format!("{what} works again"), || async {
        node.send(call(node)).await.status == ok
    })
    .await;
    node.get("/_ready").await.expect(200);
}

// Multi-threaded: the proxy runs on the test's runtime while `Process::spawn` blocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_cache_calls_fail_fast_on_every_node_and_the_rest_is_served() {
    let test = "redis_down";
    let Some(pg) = engines::postgres(test).await else {
        return;
    };
    let Some(redis) = engines::redis(test) else {
        return;
    };
    let mut proxy = Proxy::start(&host_port(&redis.url)).await;
    let cache = proxy.url(&redis.url, &host_port(&redis.url));
    let dir = tempfile::tempdir().unwrap();
    let args = ["--data", pg.url(), "--cache", cache.as_str()];
    let a = Process::spawn(bin(), &dir.path().join("a"), &args);
    let b = Process::spawn(bin(), &dir.path().join("b"), &args);
    a.put("/cache/kv", None).await.expect(201);
    a.put("/data/docs", None).await.expect(201);
    a.post("/cache/kv", json!({"key": "k", "value": {"v": 1}}))
        .await
        .expect(201);
    for node in [&a, &b] {
        node.get("/cache/kv/k").await.expect(201);
        node.get("/data/docs").await.expect(200);
    }

    proxy.cut();
    for (name, node) in [("a", &a), ("b", &b)] {
        let get = fails_fast(node, "cache GET", |n| n.request(Method::GET, "/cache/kv/k")).await;
        let put = fails_fast(node, "cache PUT", |n| {
            n.request(Method::PUT, "/cache/kv/k").json(&json!({"v": 2}))
        })
        .await;
        eprintln!(
            "node {name}, Redis down: cache GET answered 503 in {get:?} at most, PUT {put:?}"
        );
        // Documents do not need Redis.
        node.post("/data/docs", json!({"from": name}))
            .await
            .expect(201);
        ready_says(node, "cache", "Redis").await;
    }
    // Creating a cache instance needs Redis too; creating a data instance does not.
    assert_unavailable(&a.put("/cache/more", None).await, "cache instance creation");
    a.put("/data/more", None).await.expect(201);

    proxy.restore().await;
    for node in [&a, &b] {
        recovers(
            node,
            "cache GET",
            |n| n.request(Method::GET, "/cache/kv/k"),
            201,
        )
        .await;
    }
    b.put("/cache/more", None).await.expect(201);
}

// Multi-threaded: the proxy runs on the test's runtime while `Process::spawn` blocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_postgresql_down_calls_that_need_it_fail_fast_and_the_cache_is_served() {
    let test = "postgres_down";
    let Some(pg) = engines::postgres(test).await else {
        return;
    };
    let Some(redis) = engines::redis(test) else {
        return;
    };
    let engine = host_port(pg.url());
    let mut proxy = Proxy::start(&engine).await;
    let url = proxy.url(pg.url(), &engine);
    let dir = tempfile::tempdir().unwrap();
    let args = ["--data", url.as_str(), "--cache", redis.url.as_str()];
    let a = Process::spawn(bin(), &dir.path().join("a"), &args);
    let b = Process::spawn(bin(), &dir.path().join("b"), &args);
    a.put("/cache/kv", None).await.expect(201);
    a.put("/data/docs", None).await.expect(201);
    a.post("/data/docs", json!({"_id": "x"})).await.expect(201);
    for node in [&a, &b] {
        node.get("/cache/kv/k").await.expect(404);
        node.get("/data/docs/x").await.expect(200);
    }

    // Silent rather than refusing: without the breaker every call would wait for the
    // connect timeout (2 s).
    proxy.silence().await;
    for (name, node) in [("a", &a), ("b", &b)] {
        let get = fails_fast(node, "document GET", |n| {
            n.request(Method::GET, "/data/docs/x")
        })
        .await;
        eprintln!("node {name}, PostgreSQL silent: document GET answered 503 in {get:?} at most");
        // The cache is on Redis, and the instance known: served.
        node.send(
            node.request(Method::PUT, &format!("/cache/kv/from-{name}"))
                .json(&json!({"v": 1})),
        )
        .await
        .expect(200);
        let r = node.get("/_ready").await.expect(503);
        assert!(
            r.body["checks"]["registry"]
                .as_str()
                .unwrap()
                .contains("PostgreSQL"),
            "{}",
            r.text
        );
        assert_eq!(r.body["checks"]["cache"], "ok", "{}", r.text);
    }

    proxy.restore().await;
    for node in [&a, &b] {
        recovers(
            node,
            "document GET",
            |n| n.request(Method::GET, "/data/docs/x"),
            200,
        )
        .await;
    }
}

// Multi-threaded: the proxy runs on the test's runtime while `Process::spawn` blocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_s3_down_storage_calls_fail_fast_and_documents_are_served() {
    let test = "s3_down";
    let Some(pg) = engines::postgres(test).await else {
        return;
    };
    let Some(s3) = engines::s3(test) else {
        return;
    };
    let engine = host_port(&s3.endpoint);
    let mut proxy = Proxy::start(&engine).await;
    let storage = format!(
        "s3://{}/{}?endpoint=http://{}&region={}&access_key_id={}&secret_access_key={}",
        s3.bucket,
        s3.prefix,
        proxy.addr(),
        s3.region,
        s3.key,
        s3.secret
    );
    let dir = tempfile::tempdir().unwrap();
    let args = ["--data", pg.url(), "--storage", storage.as_str()];
    let a = Process::spawn(bin(), &dir.path().join("a"), &args);
    let b = Process::spawn(bin(), &dir.path().join("b"), &args);
    a.put("/storage/files", None).await.expect(201);
    a.put("/data/docs", None).await.expect(201);
    let upload = |n: &Client| {
        n.request(Method::POST, "/storage/files/a.txt")
            .header("content-type", "text/plain")
            .body("hello")
    };
    a.send(upload(&a)).await.expect(200);

    proxy.cut();
    for (name, node) in [("a", &a), ("b", &b)] {
        let get = fails_fast(node, "object GET", |n| {
            n.request(Method::GET, "/storage/files/a.txt")
        })
        .await;
        let put = fails_fast(node, "object upload", upload).await;
        eprintln!(
            "node {name}, S3 down: object GET answered 503 in {get:?} at most, upload {put:?}"
        );
        node.post("/data/docs", json!({"from": name}))
            .await
            .expect(201);
        ready_says(node, "storage", "S3").await;
    }

    proxy.restore().await;
    for node in [&a, &b] {
        recovers(
            node,
            "object GET",
            |n| n.request(Method::GET, "/storage/files/a.txt"),
            200,
        )
        .await;
    }
    b.send(upload(&b)).await.expect(200);
}

/// Run `quintet serve` with `args` on a fresh data directory, expecting it to refuse to
/// start; its stderr, and how long it took.
fn refused_start(args: &[&str]) -> (String, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let start = Instant::now();
    let mut child = Command::new(BIN)
        .arg("serve")
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(!status.success(), "quintet started with an engine down");
            let out = child.wait_with_output().unwrap();
            return (
                String::from_utf8_lossy(&out.stderr).into_owned(),
                start.elapsed(),
            );
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("quintet neither started nor refused within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test]
async fn a_node_started_while_an_engine_is_down_refuses_to_start_saying_which() {
    let test = "start_with_an_engine_down";
    let Some(pg) = engines::postgres(test).await else {
        return;
    };
    let Some(redis) = engines::redis(test) else {
        return;
    };
    let Some(s3) = engines::s3(test) else {
        return;
    };
    // Nothing listens on a port just released: refused at once.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    // A listener that never answers: the connect timeout applies.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let pg_down = pg
        .url()
        .replacen(&host_port(pg.url()), &closed.to_string(), 1);
    let pg_silent = pg
        .url()
        .replacen(&host_port(pg.url()), &silent_addr.to_string(), 1);
    let redis_down = format!("redis://{closed}/0");
    let s3_down = format!(
        "s3://{}/{}?endpoint=http://{closed}&region={}&access_key_id={}&secret_access_key={}",
        s3.bucket, s3.prefix, s3.region, s3.key, s3.secret
    );
    let cases: [(&str, Vec<&str>, &str); 4] = [
        (
            "PostgreSQL refusing",
            vec!["--data", &pg_down],
            "cannot connect to PostgreSQL",
        ),
        (
            "PostgreSQL silent",
            vec!["--data", &pg_silent, "--engine-connect-timeout", "500"],
            "cannot connect to PostgreSQL",
        ),
        (
            "Redis",
            vec!["--data", pg.url(), "--cache", &redis_down],
            "cannot open the cache on Redis",
        ),
        (
            "S3",
            vec!["--data", pg.url(), "--storage", &s3_down],
            "cannot open storage on S3",
        ),
    ];
    let _ = redis;
    for (what, args, says) in cases {
        let (stderr, took) = refused_start(&args);
        eprintln!("{what} down at start: refused in {took:?}");
        assert!(stderr.contains(says), "{what}: {stderr}");
        assert!(
            !stderr.contains(&s3.secret),
            "{what}: the secret in {stderr}"
        );
    }
    drop(silent);
}
