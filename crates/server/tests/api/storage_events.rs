//! Storage events (`GET /storage/<bucket>/_changes`): object uploads and removals in
//! order, resumable without loss or repetition, through both address forms, with the
//! storage service's authorization and the feeds' bounds, on the embedded engine. Two
//! nodes on PostgreSQL and S3: `crates/quintet/tests/system/scale_out/feed.rs`; each
//! engine's log itself: the storage events conformance suite. See `docs/feed.md`.

use quintet_testkit::{Reply, TestServer};
use reqwest::Method;
use serde_json::{Value, json};

use crate::feed::Stream;

async fn upload(s: &TestServer, path: &str, body: &'static str, ct: &str) -> Reply {
    s.send(
        s.request(Method::POST, path)
            .header("content-type", ct)
            .body(body),
    )
    .await
}

async fn events(s: &TestServer, b: &str, query: &str) -> Value {
    s.get(&format!("/storage/{b}/_changes?{query}"))
        .await
        .expect(200)
        .body
}

/// `(path, event)` of each result.
fn summary(results: &Value) -> Vec<(&str, &str)> {
    results
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["path"].as_str().unwrap(), e["event"].as_str().unwrap()))
        .collect()
}

#[tokio::test]
async fn uploads_overwrites_and_removals_are_events_in_order_and_resume_after_last_seq() {
    let s = TestServer::start().await;
    s.create("storage", "files", None).await.expect(201);
    assert_eq!(events(&s, "files", "").await["results"], json!([]));

    upload(&s, "/storage/files/docs/a.txt", "one", "text/plain")
        .await
        .expect(200);
    upload(
        &s,
        "/storage/files/docs/a.txt",
        "{\"n\":2}",
        "application/json",
    )
    .await
    .expect(200);
    upload(
        &s,
        "/storage/files/b.bin",
        "bytes",
        "application/octet-stream",
    )
    .await
    .expect(200);
    // A failed removal is no event.
    s.delete("/storage/files/missing").await.expect(404);
    s.delete("/storage/files/docs/a.txt").await.expect(200);

    let all = events(&s, "files", "since=0").await;
    assert_eq!(
        summary(&all["results"]),
        vec![
            ("docs/a.txt", "written"),
            ("docs/a.txt", "written"),
            ("b.bin", "written"),
            ("docs/a.txt", "removed"),
        ]
    );
    let results = all["results"].as_array().unwrap();
    let etag = s.get("/storage/files/b.bin").await.expect(200);
    let etag = etag.header("etag").unwrap().trim_matches('"').to_owned();
    assert_eq!(
        results[2],
        json!({
            "seq": results[2]["seq"],
            "path": "b.bin",
            "event": "written",
            "size": 5,
            "etag": etag,
            "content_type": "application/octet-stream",
        })
    );
    assert_eq!(results[1]["content_type"], "application/json");
    assert_eq!(results[1]["size"], 7);
    assert_ne!(results[0]["etag"], results[1]["etag"]);
    assert_eq!(
        results[3],
        json!({"seq": results[3]["seq"], "path": "docs/a.txt", "event": "removed"}),
        "a removal carries no object"
    );
    assert_eq!(all["last_seq"], results[3]["seq"]);

    // Resuming after any position gives exactly what follows it, nothing twice.
    for (i, r) in results.iter().enumerate() {
        let after = events(
            &s,
            "files",
            &format!("since={}", r["seq"].as_str().unwrap()),
        )
        .await;
        assert_eq!(after["results"].as_array().unwrap(), &results[i + 1..]);
        assert_eq!(after["last_seq"], all["last_seq"]);
    }
    let page = events(&s, "files", "limit=2").await;
    assert_eq!(page["results"].as_array().unwrap(), &results[..2]);
    assert_eq!(page["last_seq"], results[1]["seq"]);
    let next = events(
        &s,
        "files",
        &format!("since={}", page["last_seq"].as_str().unwrap()),
    )
    .await;
    assert_eq!(next["results"].as_array().unwrap(), &results[2..]);
}

#[tokio::test]
async fn storage_feeds_wait_and_stream_as_eventsource() {
    let s = TestServer::start().await;
    s.create("storage", "b", None).await.expect(201);
    let head = events(&s, "b", "").await["last_seq"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut continuous = Stream::open(
        &s,
        s.request(Method::GET, "/storage/b/_changes?feed=continuous&since=now"),
    )
    .await;
    let mut sse = Stream::open(
        &s,
        s.request(
            Method::GET,
            "/storage/b/_changes?feed=eventsource&since=now&limit=2",
        ),
    )
    .await;
    // The longpoll waits from `head`, so it answers the upload whichever runs first.
    let longpoll_url = format!("/storage/b/_changes?feed=longpoll&since={head}&timeout=60000");
    let (answered, uploaded) = tokio::join!(
        s.get(&longpoll_url),
        upload(&s, "/storage/b/pics/cat.png", "png", "image/png")
    );
    uploaded.expect(200);
    s.delete("/storage/b/pics/cat.png").await.expect(200);
    let answered = answered.expect(200).body;
    assert_eq!(answered["results"][0]["path"], "pics/cat.png", "{answered}");
    assert_eq!(answered["results"][0]["event"], "written");

    let first = continuous.line().await.unwrap();
    assert_eq!(first["event"], "written", "{first}");
    assert_eq!(first["content_type"], "image/png");
    assert_eq!(continuous.line().await.unwrap()["event"], "removed");

    let ev = sse.event().await.unwrap();
    let data: Value = serde_json::from_str(&ev.data).unwrap();
    assert_eq!(ev.id.as_deref(), data["seq"].as_str());
    assert_eq!(data, first, "the same event in both formats");
    let ev = sse.event().await.unwrap();
    let data: Value = serde_json::from_str(&ev.data).unwrap();
    assert_eq!(data["event"], "removed");
    assert_eq!(ev.id.as_deref(), data["seq"].as_str());
    let end = sse.event().await.unwrap();
    assert_eq!(
        end.event.as_deref(),
        Some("end"),
        "the limit ends the stream"
    );
    assert_eq!(
        serde_json::from_str::<Value>(&end.data).unwrap()["last_seq"],
        ev.id.unwrap().as_str()
    );
}

#[tokio::test]
async fn bad_storage_feed_requests_are_refused_and_a_recreated_buckets_positions_are_gone() {
    let s = TestServer::start().await;
    s.create("storage", "b", None).await.expect(201);
    for query in [
        "include_docs=true",
        "selector=%7B%7D",
        "since=banana",
        "feed=sometimes",
        "limit=0",
    ] {
        let r = s
            .get(&format!("/storage/b/_changes?{query}"))
            .await
            .expect(422);
        assert!(r.body["msg"].is_string(), "{query}: {}", r.body);
    }
    s.get("/storage/nope/_changes").await.expect(404);

    upload(&s, "/storage/b/x", "1", "text/plain")
        .await
        .expect(200);
    let old = events(&s, "b", "").await["last_seq"]
        .as_str()
        .unwrap()
        .to_owned();
    s.delete("/storage/b").await.expect(200);
    s.create("storage", "b", None).await.expect(201);
    let r = s
        .get(&format!("/storage/b/_changes?since={old}"))
        .await
        .expect(410);
    assert!(
        r.body["msg"].as_str().unwrap().contains("destroyed"),
        "{}",
        r.body
    );
    // The new bucket's own log starts empty.
    assert_eq!(events(&s, "b", "since=0").await["results"], json!([]));
}

#[tokio::test]
async fn application_keys_follow_only_their_buckets_and_revocation_closes_streams() {
    let s = TestServer::start().await;
    let k = s.new_app().await;
    let other = s.new_app().await;
    let bucket = format!("/{}/storage/files", k.app);
    s.send(s.as_app(&k, s.request(Method::PUT, &bucket)))
        .await
        .expect(201);
    let feed = format!("{bucket}/_changes");
    let mut stream = Stream::open(
        &s,
        s.as_app(
            &k,
            s.request(Method::GET, &format!("{feed}?feed=continuous&since=now")),
        ),
    )
    .await;
    s.send(
        s.as_app(
            &k,
            s.request(Method::POST, &format!("{bucket}/a.txt"))
                .header("content-type", "text/plain")
                .body("hello"),
        ),
    )
    .await
    .expect(200);
    let written = stream.line().await.unwrap();
    assert_eq!(
        (written["path"].as_str(), written["event"].as_str()),
        (Some("a.txt"), Some("written"))
    );
    let answered = s
        .send(s.as_app(&k, s.request(Method::GET, &feed)))
        .await
        .expect(200);
    assert_eq!(answered.body["results"][0], written);
    s.send(s.as_app(&other, s.request(Method::GET, &feed)))
        .await
        .expect(403);
    s.send(s.request(Method::GET, &feed)).await.expect(401);
    s.admin(
        Method::DELETE,
        &format!("/_admin/apps/{}/keys/{}", k.app, k.key),
        None,
    )
    .await
    .expect(200);
    let end = loop {
        let line = stream.line().await.unwrap();
        if line.get("ok").is_some() {
            break line;
        }
    };
    assert_eq!(end["ok"], false, "{end}");
    assert_eq!(end["status"], 401, "{end}");
    assert!(stream.line().await.is_none(), "the stream is closed");
}

#[tokio::test]
async fn storage_streams_count_against_the_feed_bounds() {
    let s = TestServer::builder()
        .args(|a| {
            a.feed_max_streams = Some(3);
            a.feed_max_streams_per_client = Some(1);
        })
        .start()
        .await;
    s.create("storage", "b", None).await.expect(201);
    s.create("data", "d", None).await.expect(201);
    let _one = Stream::open(
        &s,
        s.request(Method::GET, "/storage/b/_changes?feed=continuous"),
    )
    .await;
    s.get("/data/d/_changes?feed=longpoll").await.expect(429);
    s.get("/storage/b/_changes?feed=eventsource")
        .await
        .expect(429);
    s.get("/storage/b/_changes").await.expect(200);
}

/// Whether `got` is what docs show as `shown`, where `…` stands for anything.
fn shows(shown: &str, got: &str) -> bool {
    let mut parts = shown.split('…');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = got.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    for (i, part) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// The curl session of `docs/feed.md`'s "Storage events", run as written (its host
/// replaced by the test server's) against a fresh server holding the instances the page's
/// earlier sessions create, so the ids are the page's. Each command's output must be
/// what the comment lines under it show, line by line.
#[tokio::test]
async fn the_storage_session_of_the_feed_docs_works_as_written() {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/feed.md"),
    )
    .unwrap();
    let section = &doc[doc.find("\n## Storage events").unwrap()..];
    let block = &section[section.find("```sh\n").unwrap() + 6..];
    let block = &block[..block.find("```").unwrap()];
    let mut session: Vec<(String, Vec<String>)> = Vec::new();
    for line in block.lines() {
        match (line.strip_prefix('#'), session.last_mut()) {
            (Some(shown), Some((_, expected))) => {
                expected.push(shown.strip_prefix(' ').unwrap_or(shown).to_owned());
            }
            (Some(_), None) => panic!("a comment before any command"),
            (None, _) => session.push((line.to_owned(), Vec::new())),
        }
    }
    assert!(session.len() >= 6, "{session:?}");

    let s = TestServer::start().await;
    s.create("data", "movies", None).await.expect(201);
    s.create(
        "queue",
        "mail",
        Some(json!({"target": "http://localhost:9000/"})),
    )
    .await
    .expect(201);
    let host = s
        .url("")
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    for (command, expected) in session {
        let run = command.replace("localhost:6363", &host);
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new("bash")
                .arg("-c")
                .arg(&run)
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        assert!(out.status.success(), "{command}: {out:?}");
        let stdout = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<&str> = stdout.lines().collect();
        for (i, shown) in expected.iter().enumerate() {
            let got = lines.get(i).copied().unwrap_or("");
            assert!(
                shows(shown, got),
                "{command}: the docs show `{shown}`, it printed `{got}`\n{stdout}"
            );
        }
    }
}

/// The node's compactor removes storage events older than `--feed-retention` (on the
/// stores' clock): a `since` before them is gone, the head stays a position.
#[tokio::test]
async fn storage_events_older_than_the_retention_are_compacted() {
    let clock = std::sync::Arc::new(quintet_core::ManualClock::new(1_700_000_000_000));
    let s = TestServer::builder()
        .clock(clock.clone())
        .args(|a| a.feed_retention = Some(10))
        .start()
        .await;
    s.create("storage", "b", None).await.expect(201);
    upload(&s, "/storage/b/x", "1", "text/plain")
        .await
        .expect(200);
    s.delete("/storage/b/x").await.expect(200);
    let last = events(&s, "b", "").await["last_seq"]
        .as_str()
        .unwrap()
        .to_owned();
    clock.advance(11_000);
    quintet_testkit::eventually("the events are compacted", || async {
        s.get("/storage/b/_changes?since=0").await.status == 410
    })
    .await;
    let r = s.get("/storage/b/_changes?since=0").await.expect(410);
    assert!(
        r.body["msg"].as_str().unwrap().contains("compacted"),
        "{}",
        r.body
    );
    let at_head = events(&s, "b", &format!("since={last}")).await;
    assert_eq!(at_head["results"], json!([]));
    assert_eq!(at_head["last_seq"], last.as_str());
}
