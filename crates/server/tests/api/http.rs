//! Cross-cutting HTTP behaviour: info, health, metrics, errors, limits, ids. (CORS and
//! `Host` checks: `browser.rs`.)

use quintet_testkit::TestServer;
use reqwest::Method;
use serde_json::json;

#[tokio::test]
async fn info_lists_the_five_services() {
    let s = TestServer::start().await;
    let r = s.get("/").await.expect(200);
    assert_eq!(r.body["ok"], true);
    assert_eq!(r.body["name"], "quintet");
    assert!(r.body["version"].is_string());
    let mut services: Vec<&str> = r.body["services"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    services.sort_unstable();
    assert_eq!(services, ["cache", "data", "queue", "search", "storage"]);
}

#[tokio::test]
async fn health_answers_ok() {
    let s = TestServer::start().await;
    let r = s.get("/_health").await.expect(200);
    assert_eq!(r.body, json!({"ok": true}));
    assert!(
        r.header("content-type")
            .unwrap()
            .starts_with("application/json")
    );
}

#[tokio::test]
async fn unknown_routes_are_json_404() {
    let s = TestServer::start().await;
    for path in ["/nope", "/data", "/a/b/c/d/e"] {
        let r = s.get(path).await.expect(404);
        assert_eq!(r.body["ok"], false, "{path}");
        assert_eq!(r.body["status"], 404, "{path}");
        assert!(r.body["msg"].as_str().unwrap().contains(path), "{}", r.text);
    }
}

#[tokio::test]
async fn wrong_methods_are_json_405_with_allow() {
    let s = TestServer::start().await;
    let r = s
        .send(s.request(Method::PATCH, "/data/x"))
        .await
        .expect(405);
    assert_eq!(r.body["ok"], false);
    assert_eq!(r.body["status"], 405);
    let allow = r.header("allow").unwrap();
    assert!(allow.contains("PUT") && allow.contains("DELETE"), "{allow}");
    let r = s
        .send(s.request(Method::POST, "/_health"))
        .await
        .expect(405);
    assert_eq!(r.body["status"], 405);
}

#[tokio::test]
async fn malformed_json_is_400() {
    let s = TestServer::start().await;
    for body in [r#"{"fields": ["#, "{fields: 1}", "[1,]", "\u{0}"] {
        let r = s
            .send(
                s.request(Method::PUT, "/search/s")
                    .header("content-type", "application/json")
                    .body(body.to_owned()),
            )
            .await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        assert_eq!(r.body["status"], 400);
        assert!(
            r.body["msg"].as_str().unwrap().contains("JSON"),
            "{}",
            r.text
        );
    }
    s.delete("/search/s").await.expect(404);
}

#[tokio::test]
async fn a_body_over_the_limit_is_413_and_changes_nothing() {
    let s = TestServer::builder()
        .args(|a| a.max_body_bytes = Some(1024))
        .start()
        .await;
    let big = json!({"fields": ["title"], "pad": "x".repeat(2048)});
    let r = s.put("/search/s", Some(big)).await.expect(413);
    assert_eq!(r.body["status"], 413);
    assert!(
        r.body["msg"].as_str().unwrap().contains("1024"),
        "{}",
        r.text
    );
    s.delete("/search/s").await.expect(404);
    s.put("/search/s", Some(json!({"fields": ["title"]})))
        .await
        .expect(201);
}

#[tokio::test]
async fn json_nested_beyond_the_limit_is_422() {
    let s = TestServer::builder()
        .args(|a| a.max_json_depth = Some(8))
        .start()
        .await;
    let deep = format!(
        r#"{{"fields": ["t"], "x": {}{}}}"#,
        "[".repeat(20),
        "]".repeat(20)
    );
    let r = s
        .send(
            s.request(Method::PUT, "/search/s")
                .header("content-type", "application/json")
                .body(deep),
        )
        .await
        .expect(422);
    assert!(
        r.body["msg"].as_str().unwrap().contains("deeper than 8"),
        "{}",
        r.text
    );
    s.delete("/search/s").await.expect(404);
    // A body within the limit passes.
    let ok = r#"{"fields": ["t"], "x": [[[1]]]}"#;
    s.send(
        s.request(Method::PUT, "/search/s")
            .header("content-type", "application/json")
            .body(ok),
    )
    .await
    .expect(201);
}

#[tokio::test]
async fn every_answer_carries_a_request_id_and_keeps_a_given_one() {
    let s = TestServer::start().await;
    let a = s.get("/_health").await;
    let b = s.get("/nope").await;
    let (ida, idb) = (
        a.header("x-request-id").unwrap(),
        b.header("x-request-id").unwrap(),
    );
    assert!(!ida.is_empty());
    assert_ne!(ida, idb);
    let r = s
        .send(
            s.request(Method::GET, "/_health")
                .header("x-request-id", "trace-123"),
        )
        .await;
    assert_eq!(r.header("x-request-id"), Some("trace-123"));
}

/// The value of the sample `line_start` (its name and labels exactly) in an OpenMetrics text.
fn sample(text: &str, line_start: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(line_start)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn metrics_count_requests_by_route_and_measure_the_node() {
    let s = TestServer::start().await;
    s.get("/_health").await.expect(200);
    s.get("/nope").await.expect(404);
    s.create("cache", "c", None).await.expect(201);
    s.put("/cache/c/k", Some(json!({"v": 1}))).await.expect(200);
    s.get("/cache/c/k").await.expect(201);
    s.get("/cache/c/gone").await.expect(404);
    let r = s.get("/_metrics").await.expect(200);
    assert_eq!(
        r.header("content-type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    let t = &r.text;
    assert!(t.ends_with("# EOF\n"), "{t}");
    for (sample_of, want) in [
        (
            r#"quintet_http_requests_total{service="server",method="GET",route="/_health",class="2xx"}"#,
            1.0,
        ),
        (
            r#"quintet_http_requests_total{service="none",method="GET",route="unmatched",class="4xx"}"#,
            1.0,
        ),
        (
            r#"quintet_http_requests_total{service="cache",method="GET",route="/cache/{instance}/{key}",class="2xx"}"#,
            1.0,
        ),
        (
            r#"quintet_http_requests_total{service="cache",method="GET",route="/cache/{instance}/{key}",class="4xx"}"#,
            1.0,
        ),
        (
            r#"quintet_http_request_duration_seconds_count{service="cache",method="GET",route="/cache/{instance}/{key}"}"#,
            2.0,
        ),
        (r#"quintet_cache_lookups_total{result="hit"}"#, 1.0),
        (r#"quintet_cache_lookups_total{result="miss"}"#, 1.0),
        (r#"quintet_instances{type="cache"}"#, 1.0),
        (r#"quintet_instances{type="data"}"#, 0.0),
        ("quintet_connections_open", 1.0),
    ] {
        assert_eq!(sample(t, sample_of), Some(want), "{sample_of} in\n{t}");
    }
    for present in [
        "quintet_cache_stored_bytes",
        "quintet_storage_stored_bytes",
        "quintet_uptime_seconds",
        "process_resident_memory_bytes",
        "process_open_fds",
    ] {
        assert!(sample(t, present).is_some(), "{present} in\n{t}");
    }
}

/// Send `head` (a request head announcing a body) and read the first answer's head, before
/// sending any body byte.
async fn head_before_body(s: &TestServer, head: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = s.url("").trim_start_matches("http://").to_owned();
    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = head.replace("{addr}", &addr);
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let read = async {
        while !String::from_utf8_lossy(&out).contains("\r\n\r\n") {
            let n = tcp.read(&mut buf).await.unwrap();
            assert!(n > 0, "the server closed without answering");
            out.extend_from_slice(&buf[..n]);
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), read)
        .await
        .expect("the server waited for the body instead of answering");
    String::from_utf8_lossy(&out).to_lowercase()
}

#[tokio::test]
async fn an_answer_that_leaves_the_body_unread_says_connection_close() {
    let s = TestServer::start().await;
    s.put("/data/movies", None).await.expect(201);
    // Answered before the body arrives: an unknown instance, an unknown route.
    for target in ["/search/nope", "/data/nope", "/no/such/route/at/all"] {
        let head = head_before_body(
            &s,
            &format!("POST {target} HTTP/1.1\r\nHost: {{addr}}\r\nContent-Length: 31\r\n\r\n"),
        )
        .await;
        assert!(head.starts_with("http/1.1 404"), "{target}: {head}");
        assert!(
            head.contains("\r\nconnection: close\r\n"),
            "{target}: {head}"
        );
    }
    // A body read to its end keeps the connection.
    let r = s
        .send(
            s.request(Method::POST, "/data/movies")
                .json(&json!({"title": "Ghostbusters"})),
        )
        .await
        .expect(201);
    assert_eq!(r.header("connection"), None);
    // So does a request without a body.
    let r = s.get("/data/nope").await.expect(404);
    assert_eq!(r.header("connection"), None);
}

/// Open a connection, send `sent`, and wait for the server to close it; returns what it
/// answered, or `None` when it was still open after 20 s.
async fn closed_after(s: &TestServer, sent: &[u8]) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = s.url("").trim_start_matches("http://").to_owned();
    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    tcp.write_all(sent).await.unwrap();
    let mut out = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        tcp.read_to_end(&mut out),
    )
    .await;
    read.ok()
        .map(|_| String::from_utf8_lossy(&out).into_owned())
}

#[tokio::test]
async fn a_request_head_not_finished_in_time_closes_the_connection() {
    let s = TestServer::builder()
        .args(|a| a.header_timeout = Some(1))
        .start()
        .await;
    // Nothing at all; the start of HTTP/2's preface; half an HTTP/1 head: each is closed
    // (with a 408 or silently), not held open.
    for sent in [
        &b""[..],
        b"PRI * HTTP/2.0\r\n",
        b"GET /_health HTTP/1.1\r\nHost: localhost\r\n",
    ] {
        let answer = closed_after(&s, sent).await;
        let label = String::from_utf8_lossy(sent);
        let answer = answer.unwrap_or_else(|| panic!("{label:?}: still open after 20 s"));
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
            "{label:?}: {answer}"
        );
    }
    // A client whose idle kept-alive connection was closed meanwhile connects again. The
    // client's connection is closed once one opened after it, idle as long, was.
    s.get("/_health").await.expect(200);
    let idle = closed_after(&s, b"GET /_health HTTP/1.1\r\nHost: localhost\r\n\r\n").await;
    assert!(
        idle.as_deref()
            .is_some_and(|a| a.starts_with("HTTP/1.1 200")),
        "{idle:?}"
    );
    let r = s.get("/_health").await.expect(200);
    assert_eq!(r.body["ok"], true);
}
