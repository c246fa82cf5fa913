//! What clients can cost a node: request bodies that stall, connections in all and per
//! client address; and readiness, with the disk full.

use std::{net::SocketAddr, time::Duration};

use quintet_testkit::TestServer;
use reqwest::Method;
use serde_json::json;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpSocket, TcpStream},
};

fn addr(s: &TestServer) -> SocketAddr {
    s.url("").trim_start_matches("http://").parse().unwrap()
}

/// A connection to `s` from the loopback address `from` (any of 127.0.0.0/8).
async fn connect_from(s: &TestServer, from: [u8; 4]) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((from, 0))).unwrap();
    socket.connect(addr(s)).await.unwrap()
}

/// Everything the server sends until it closes `tcp`; `None` when it is still open after
/// `within`.
async fn until_closed(tcp: &mut TcpStream, within: Duration) -> Option<String> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let read = async {
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(within, read).await.ok()?;
    Some(String::from_utf8_lossy(&out).into_owned())
}

/// `GET /_health` on an open keep-alive connection; the status line.
async fn health_on(tcp: &mut TcpStream) -> String {
    tcp.write_all(b"GET /_health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&out).contains("{\"ok\":true}") {
        let n = tokio::time::timeout(Duration::from_secs(10), tcp.read(&mut buf))
            .await
            .expect("an answer on the open connection")
            .unwrap();
        assert!(n > 0, "the open connection was closed");
        out.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&out)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn a_stalled_request_body_is_cut_off_with_408_and_the_connection_closed() {
    let s = TestServer::builder()
        .args(|a| a.body_timeout = Some(1))
        .start()
        .await;
    s.put("/data/movies", None).await.expect(201);
    s.put("/storage/files", None).await.expect(201);
    // A JSON body and a streamed upload, each announced whole and sent in part.
    for target in ["/data/movies", "/storage/files/big.bin"] {
        let mut tcp = connect_from(&s, [127, 0, 0, 1]).await;
        let head = format!(
            "POST {target} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/octet-stream\r\n\
             Content-Length: 100000\r\n\r\n{{\"title\""
        );
        tcp.write_all(head.as_bytes()).await.unwrap();
        let answer = until_closed(&mut tcp, Duration::from_secs(20))
            .await
            .unwrap_or_else(|| panic!("{target}: still open after 20 s"));
        assert!(answer.starts_with("HTTP/1.1 408"), "{target}: {answer}");
        assert!(
            answer.to_lowercase().contains("connection: close"),
            "{answer}"
        );
        assert!(answer.contains("arrived too slowly"), "{answer}");
    }
    // Nothing of the cut-off upload was kept.
    s.get("/storage/files/big.bin").await.expect(404);
}

#[tokio::test]
async fn a_slow_upload_that_keeps_moving_finishes_however_long_it_takes() {
    // 1 s of allowance plus 1 s per 1000 bytes: 500 bytes every 0.4 s (1250 bytes/s) for
    // about 5 s, five times the timeout, never pausing for as long as it.
    let s = TestServer::builder()
        .args(|a| {
            a.body_timeout = Some(1);
            a.body_min_rate = Some(1000);
        })
        .start()
        .await;
    s.put("/storage/files", None).await.expect(201);
    let mut tcp = connect_from(&s, [127, 0, 0, 1]).await;
    let (chunks, chunk) = (12, 500);
    let head = format!(
        "POST /storage/files/slow.bin HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/octet-stream\r\n\
         Content-Length: {}\r\n\r\n",
        chunks * chunk
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    for i in 0..chunks {
        tokio::time::sleep(Duration::from_millis(400)).await;
        tcp.write_all(&vec![b'a' + i as u8; chunk]).await.unwrap();
    }
    let mut out = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(20), tcp.read(&mut out))
        .await
        .unwrap()
        .unwrap();
    let answer = String::from_utf8_lossy(&out[..n]);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let r = s.get("/storage/files/slow.bin").await.expect(200);
    assert_eq!(r.text.len(), chunks * chunk);
}

#[tokio::test]
async fn one_client_address_holds_at_most_its_share_of_connections() {
    let s = TestServer::builder()
        .args(|a| a.max_connections_per_client = Some(2))
        .start()
        .await;
    let mut first = connect_from(&s, [127, 0, 0, 1]).await;
    assert!(health_on(&mut first).await.contains("200"));
    let _second = connect_from(&s, [127, 0, 0, 1]).await;
    // The third from the same address is closed on arrival, unanswered.
    let mut third = connect_from(&s, [127, 0, 0, 1]).await;
    let answer = until_closed(&mut third, Duration::from_secs(10)).await;
    assert_eq!(
        answer.as_deref(),
        Some(""),
        "a third connection was kept open"
    );
    // Another client is served, and so is the first connection.
    let mut other = connect_from(&s, [127, 0, 0, 2]).await;
    assert!(health_on(&mut other).await.contains("200"));
    assert!(health_on(&mut first).await.contains("200"));
    let text = {
        first
            .write_all(b"GET /_metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        until_closed(&mut first, Duration::from_secs(10))
            .await
            .unwrap()
    };
    assert!(
        text.contains("quintet_connections_refused_total{reason=\"max_connections_per_client\"} 1"),
        "{text}"
    );
    // Closing one gives the place back.
    drop(first);
    let mut again = None;
    for _ in 0..100 {
        let mut tcp = connect_from(&s, [127, 0, 0, 1]).await;
        tcp.write_all(b"GET /_health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let answer = until_closed(&mut tcp, Duration::from_secs(10))
            .await
            .unwrap();
        if answer.starts_with("HTTP/1.1 200") {
            again = Some(answer);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        again.is_some(),
        "the place of a closed connection was not given back"
    );
}

#[tokio::test]
async fn beyond_the_connection_bound_new_connections_are_closed_and_open_ones_served() {
    let s = TestServer::builder()
        .args(|a| {
            a.max_connections = Some(3);
            a.max_connections_per_client = Some(0);
        })
        .start()
        .await;
    let mut open = connect_from(&s, [127, 0, 0, 1]).await;
    assert!(health_on(&mut open).await.contains("200"));
    let _idle: Vec<TcpStream> = vec![
        connect_from(&s, [127, 0, 0, 3]).await,
        connect_from(&s, [127, 0, 0, 4]).await,
    ];
    for from in [[127, 0, 0, 5], [127, 0, 0, 1]] {
        let mut refused = connect_from(&s, from).await;
        refused
            .write_all(b"GET /_health HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await
            .ok();
        let answer = until_closed(&mut refused, Duration::from_secs(10)).await;
        assert_eq!(answer.as_deref(), Some(""), "{from:?} was served");
    }
    assert!(health_on(&mut open).await.contains("200"));
}

#[tokio::test]
async fn ready_reports_every_service_and_the_registry() {
    let s = TestServer::start().await;
    let r = s.get("/_ready").await.expect(200);
    assert_eq!(
        r.body,
        json!({"ok": true, "checks": {
            "registry": "ok", "data": "ok", "cache": "ok", "search": "ok", "queue": "ok",
            "storage": "ok",
        }})
    );
    // Public, like /_health, whatever the domain auth.
    let jwt = TestServer::builder()
        .args(|a| {
            a.auth = Some(quintet_testkit::AuthMode::Jwt);
            a.jwt_secret = Some("a-secret-of-at-least-thirty-two-bytes!".into());
        })
        .start()
        .await;
    jwt.get("/_ready").await.expect(200);
    jwt.get("/data/x").await.expect(401);
}

#[tokio::test]
async fn with_the_disk_full_writes_answer_507_and_ready_says_why() {
    // A reserve larger than any disk: the data directory is "full" from the start.
    let s = TestServer::builder()
        .args(|a| a.disk_reserve = Some(u64::MAX / 2))
        .start()
        .await;
    let r = s.get("/_ready").await.expect(503);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.body["ok"], false);
    assert_eq!(r.body["status"], 503);
    let msg = r.body["msg"].as_str().unwrap();
    assert!(
        msg.starts_with("not ready: registry: the data directory's disk is full"),
        "{msg}"
    );
    for check in ["registry", "data", "cache", "search", "queue", "storage"] {
        assert!(
            r.body["checks"][check]
                .as_str()
                .unwrap()
                .contains("disk is full"),
            "{check}: {}",
            r.text
        );
    }
    for kind in ["data", "cache", "search", "queue", "storage"] {
        let r = s
            .send(s.request(Method::PUT, &format!("/{kind}/x")).json(&json!({
                "fields": ["title"], "target": "http://example.com/jobs"
            })))
            .await;
        assert_eq!(r.status, 507, "{kind}: {}", r.text);
        assert_eq!(r.body["status"], 507);
        let msg = r.body["msg"].as_str().unwrap();
        assert!(
            msg.starts_with("the server's disk is full") && msg.contains("deletes still work"),
            "{msg}"
        );
    }
    // Deletes are not refused for the disk: a missing instance is still a 404.
    s.delete("/data/x").await.expect(404);
    // The admin API writes to the registry too.
    let r = s
        .admin(
            Method::POST,
            "/_admin/accounts",
            Some(json!({"name": "acme", "plan": "starter"})),
        )
        .await;
    assert_eq!(r.status, 507, "{}", r.text);
}

/// A server whose clock stands still (buckets refill only when the test moves it) with
/// `args` applied.
async fn frozen(
    args: impl FnOnce(&mut quintet_testkit::Args),
) -> (TestServer, std::sync::Arc<quintet_core::ManualClock>) {
    let clock = std::sync::Arc::new(quintet_core::ManualClock::new(1_800_000_000_000));
    let s = TestServer::builder()
        .clock(clock.clone())
        .args(args)
        .start()
        .await;
    (s, clock)
}

#[tokio::test]
async fn a_client_address_past_its_rate_gets_429_until_its_bucket_refills() {
    let (s, clock) = frozen(|a| a.rate_limit_per_client = Some(3)).await;
    for _ in 0..3 {
        s.get("/_health").await.expect(200);
    }
    let r = s.get("/_health").await.expect(429);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(
        r.body,
        json!({"ok": false, "status": 429, "msg": "too many requests from this address: at most 3 per second (--rate-limit-per-client); slow down and retry"})
    );
    // Refused requests reach no handler: a write is not made either.
    s.put("/cache/c", None).await.expect(429);
    clock.advance(1000);
    s.put("/cache/c", None).await.expect(201);
}

#[tokio::test]
async fn an_access_key_past_its_plans_rate_gets_429_and_other_keys_do_not() {
    let (s, clock) = frozen(|a| {
        a.plan_limits = Some(json!({"starter": {"requests_per_second_per_key": 2}}));
    })
    .await;
    let k = s.new_app().await;
    let other = s.new_key(&k.account, &k.app).await;
    let path = format!("/{}/cache/c", k.app);
    let put = |key| s.send(s.as_app(key, s.request(Method::PUT, &path)));
    put(&k).await.expect(201);
    put(&k).await.expect(409);
    let r = put(&k).await.expect(429);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(
        r.body["msg"],
        format!(
            "too many requests with key \"{}\": at most 2 per second; slow down and retry",
            k.key
        )
    );
    // Each key has its own bucket; the domain form (no key) is not limited by keys.
    put(&other).await.expect(409);
    for _ in 0..5 {
        s.get("/_health").await.expect(200);
    }
    clock.advance(500);
    put(&k).await.expect(409);
    put(&k).await.expect(429);
}

#[tokio::test]
async fn rate_limit_per_key_caps_every_key_below_its_plan() {
    let (s, _clock) = frozen(|a| a.rate_limit_per_key = Some(1)).await;
    let k = s.new_app().await;
    let path = format!("/{}/cache/c", k.app);
    let put = || s.send(s.as_app(&k, s.request(Method::PUT, &path)));
    put().await.expect(201);
    put().await.expect(429);
}

#[tokio::test]
async fn with_a_metrics_token_metrics_need_it_or_the_admin_token() {
    let token = "scrape-token-0123456789";
    let (s, _clock) = frozen(|a| a.metrics_token = Some(token.into())).await;
    let r = s.get("/_metrics").await.expect(401);
    assert!(
        r.body["msg"].as_str().unwrap().contains("--metrics-token"),
        "{}",
        r.body
    );
    let with = |t: &str| {
        s.send(
            s.request(Method::GET, "/_metrics")
                .bearer_auth(t.to_owned()),
        )
    };
    with("wrong-token-0123456789").await.expect(401);
    assert!(
        with(token)
            .await
            .expect(200)
            .text
            .contains("quintet_http_requests_total")
    );
    s.admin(Method::GET, "/_metrics", None).await.expect(200);
    // Without one, /_metrics stays public.
    let open = TestServer::start().await;
    open.get("/_metrics").await.expect(200);
}
