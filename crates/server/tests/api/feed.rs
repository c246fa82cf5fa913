//! Change feeds of data instances (`GET /data/<d>/_changes`): the four feeds and their
//! parameters, resuming without loss or repetition, authorization, the bounds on open
//! streams, and that subscribers cost writers nothing. See `docs/feed.md`.

use std::collections::HashSet;

use quintet_testkit::{TestServer, unique};
use reqwest::Method;
use serde_json::{Value, json};

/// A streaming answer read as it arrives: lines (`continuous`) or events (`eventsource`).
/// Also used by the tests of the other services' feeds (`events.rs`).
pub(crate) struct Stream {
    res: reqwest::Response,
    buf: String,
}

/// One Server-Sent Event.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Event {
    pub(crate) id: Option<String>,
    pub(crate) event: Option<String>,
    pub(crate) data: String,
}

impl Stream {
    pub(crate) async fn open(s: &TestServer, req: reqwest::RequestBuilder) -> Self {
        let res = s.http().execute(req.build().unwrap()).await.unwrap();
        assert_eq!(res.status(), 200, "{:?}", res.headers());
        Self {
            res,
            buf: String::new(),
        }
    }

    /// More text; `false` at the end of the answer.
    async fn fill(&mut self) -> bool {
        match self.res.chunk().await {
            Ok(Some(b)) => {
                self.buf.push_str(std::str::from_utf8(&b).unwrap());
                true
            }
            _ => false,
        }
    }

    /// The next line (heartbeats, empty lines, skipped); `None` at the end.
    pub(crate) async fn line(&mut self) -> Option<Value> {
        loop {
            if let Some(i) = self.buf.find('\n') {
                let line: String = self.buf.drain(..=i).collect();
                if line.trim().is_empty() {
                    continue;
                }
                return Some(serde_json::from_str(line.trim()).unwrap());
            }
            if !self.fill().await {
                return None;
            }
        }
    }

    /// The next event (comments, heartbeats, skipped); `None` at the end.
    pub(crate) async fn event(&mut self) -> Option<Event> {
        loop {
            if let Some(i) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..i + 2).collect();
                let mut ev = Event::default();
                let mut any = false;
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id: ") {
                        ev.id = Some(v.to_owned());
                        any = true;
                    } else if let Some(v) = line.strip_prefix("event: ") {
                        ev.event = Some(v.to_owned());
                        any = true;
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        ev.data.push_str(v);
                        any = true;
                    }
                }
                if any {
                    return Some(ev);
                }
                continue;
            }
            if !self.fill().await {
                return None;
            }
        }
    }
}

async fn data_instance(s: &TestServer) -> String {
    let name = unique("feed");
    s.create("data", &name, None).await.expect(201);
    name
}

async fn changes(s: &TestServer, name: &str, query: &str) -> Value {
    s.get(&format!("/data/{name}/_changes?{query}"))
        .await
        .expect(200)
        .body
}

/// `(id, deleted)` of each result.
fn summary(results: &Value) -> Vec<(String, bool)> {
    results
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["id"].as_str().unwrap().to_owned(),
                c["deleted"].as_bool().unwrap(),
            )
        })
        .collect()
}

fn pairs(list: &[(&str, bool)]) -> Vec<(String, bool)> {
    list.iter().map(|(i, d)| ((*i).to_owned(), *d)).collect()
}

#[tokio::test]
async fn the_normal_feed_lists_every_write_and_resumes_after_last_seq() {
    let s = TestServer::start().await;
    let d = data_instance(&s).await;
    // Replacing a missing document is a 404 and no change.
    s.put(&format!("/data/{d}/a"), Some(json!({"n": 1})))
        .await
        .expect(404);
    s.post(&format!("/data/{d}"), json!({"_id": "a", "n": 1}))
        .await
        .expect(201);
    s.post(&format!("/data/{d}"), json!({"_id": "b", "n": 2}))
        .await
        .expect(201);
    s.put(&format!("/data/{d}/a"), Some(json!({"n": 3})))
        .await
        .expect(200);
    s.delete(&format!("/data/{d}/b")).await.expect(200);
    s.post(
        &format!("/data/{d}/_bulk"),
        json!([{"_id": "c", "n": 4}, {"_id": "a", "_deleted": true}, {"_id": "d", "n": 5}]),
    )
    .await
    .expect(200);
    let all = changes(&s, &d, "").await;
    assert_eq!(all["ok"], true);
    let want = pairs(&[
        ("a", false),
        ("b", false),
        ("a", false),
        ("b", true),
        ("c", false),
        ("a", true),
        ("d", false),
    ]);
    assert_eq!(summary(&all["results"]), want);
    let seqs: Vec<&str> = all["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["seq"].as_str().unwrap())
        .collect();
    assert_eq!(all["last_seq"], *seqs.last().unwrap());
    // Resume after any of them: exactly the rest.
    for (i, seq) in seqs.iter().enumerate() {
        let rest = changes(&s, &d, &format!("since={seq}")).await;
        assert_eq!(summary(&rest["results"]), want[i + 1..].to_vec());
    }
    let none = changes(
        &s,
        &d,
        &format!("since={}", all["last_seq"].as_str().unwrap()),
    )
    .await;
    assert_eq!(none["results"], json!([]));
    assert_eq!(none["last_seq"], all["last_seq"]);
    // since=now: nothing yet; limit; include_docs; a selector.
    assert_eq!(changes(&s, &d, "since=now").await["results"], json!([]));
    let two = changes(&s, &d, "limit=2").await;
    assert_eq!(summary(&two["results"]), want[..2].to_vec());
    assert_eq!(two["last_seq"], seqs[1]);
    let docs = changes(&s, &d, "include_docs=true").await;
    let docs: Vec<&Value> = docs["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["doc"])
        .collect();
    assert_eq!(
        docs,
        [
            &Value::Null,
            &Value::Null,
            &Value::Null,
            &Value::Null,
            &json!({"_id": "c", "n": 4}),
            &Value::Null,
            &json!({"_id": "d", "n": 5}),
        ],
        "documents as they are now; deleted ones have none"
    );
    let sel = serde_json::to_string(&json!({"n": {"$gte": 5}})).unwrap();
    let sel: String = url::form_urlencoded::byte_serialize(sel.as_bytes()).collect();
    let picked = s
        .get(&format!("/data/{d}/_changes?selector={sel}"))
        .await
        .expect(200);
    assert_eq!(
        summary(&picked.body["results"]),
        pairs(&[("b", true), ("a", true), ("d", false)]),
        "deletions always pass a selector"
    );
    assert_eq!(picked.body["last_seq"], all["last_seq"]);
}

#[tokio::test]
async fn bad_parameters_and_lost_positions_are_refused() {
    let s = TestServer::start().await;
    let d = data_instance(&s).await;
    s.post(&format!("/data/{d}"), json!({"_id": "a"}))
        .await
        .expect(201);
    for (query, status) in [
        ("feed=sometimes", 422),
        ("since=yesterday", 422),
        ("limit=0", 422),
        ("limit=x", 422),
        ("include_docs=maybe", 422),
        ("selector=%7Bnope", 422),
        ("heartbeat=soon", 422),
        ("timeout=-1", 422),
    ] {
        let r = s.get(&format!("/data/{d}/_changes?{query}")).await;
        assert_eq!(r.status, status, "{query}: {}", r.text);
        assert_eq!(r.body["ok"], false);
    }
    let last = changes(&s, &d, "").await["last_seq"]
        .as_str()
        .unwrap()
        .to_owned();
    // Beyond the head, and from an earlier instance of the same name: start over.
    let (n, id) = last.split_once('-').unwrap();
    let ahead = format!("{}-{id}", n.parse::<u64>().unwrap() + 5);
    let r = s.get(&format!("/data/{d}/_changes?since={ahead}")).await;
    assert_eq!(r.status, 410, "{}", r.text);
    s.delete(&format!("/data/{d}")).await.expect(200);
    s.create("data", &d, None).await.expect(201);
    let r = s.get(&format!("/data/{d}/_changes?since={last}")).await;
    assert_eq!(r.status, 410, "{}", r.text);
    assert!(
        r.body["msg"].as_str().unwrap().contains("since=0"),
        "{}",
        r.text
    );
    s.get("/data/nosuch/_changes").await.expect(404);
}

#[tokio::test]
async fn longpoll_answers_once_something_changed() {
    let s = TestServer::start().await;
    let d = data_instance(&s).await;
    s.post(&format!("/data/{d}"), json!({"_id": "a"}))
        .await
        .expect(201);
    let last = changes(&s, &d, "").await["last_seq"].clone();
    let path = format!(
        "/data/{d}/_changes?feed=longpoll&since={}",
        last.as_str().unwrap()
    );
    let waiting = tokio::spawn({
        let req = s.request(Method::GET, &path);
        let http = s.http().clone();
        async move {
            http.execute(req.build().unwrap())
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    });
    s.post(&format!("/data/{d}"), json!({"_id": "b"}))
        .await
        .expect(201);
    let got = waiting.await.unwrap();
    assert_eq!(summary(&got["results"]), pairs(&[("b", false)]));
    // Nothing within the timeout: an empty answer at the same position.
    let idle = changes(
        &s,
        &d,
        &format!(
            "feed=longpoll&timeout=50&since={}",
            got["last_seq"].as_str().unwrap()
        ),
    )
    .await;
    assert_eq!(idle["results"], json!([]));
    assert_eq!(idle["last_seq"], got["last_seq"]);
}

#[tokio::test]
async fn continuous_and_eventsource_feeds_stream_changes_as_they_commit() {
    let s = TestServer::start().await;
    let d = data_instance(&s).await;
    let mut lines = Stream::open(
        &s,
        s.request(
            Method::GET,
            &format!("/data/{d}/_changes?feed=continuous&include_docs=true"),
        ),
    )
    .await;
    assert_eq!(lines.res.headers()["content-type"], "application/x-ndjson");
    let mut events = Stream::open(
        &s,
        s.request(Method::GET, &format!("/data/{d}/_changes?feed=eventsource")),
    )
    .await;
    assert_eq!(events.res.headers()["content-type"], "text/event-stream");
    for id in ["a", "b", "c"] {
        s.post(&format!("/data/{d}"), json!({"_id": id, "v": id}))
            .await
            .expect(201);
    }
    s.delete(&format!("/data/{d}/a")).await.expect(200);
    for (id, deleted) in [("a", false), ("b", false), ("c", false), ("a", true)] {
        let line = lines.line().await.unwrap();
        assert_eq!(
            (
                line["id"].as_str().unwrap(),
                line["deleted"].as_bool().unwrap()
            ),
            (id, deleted)
        );
        if !deleted {
            assert_eq!(line["doc"], json!({"_id": id, "v": id}));
        }
        let ev = events.event().await.unwrap();
        assert_eq!(ev.event, None, "changes are plain messages");
        let data: Value = serde_json::from_str(&ev.data).unwrap();
        assert_eq!(data["id"], id);
        assert_eq!(data["deleted"], deleted);
        assert_eq!(ev.id.as_deref(), data["seq"].as_str());
        assert_eq!(data["seq"], line["seq"]);
    }
    // A timeout ends a stream with where to resume.
    let mut ends = Stream::open(
        &s,
        s.request(
            Method::GET,
            &format!("/data/{d}/_changes?feed=eventsource&timeout=100&since=now"),
        ),
    )
    .await;
    let end = ends.event().await.unwrap();
    assert_eq!(end.event.as_deref(), Some("end"));
    let end: Value = serde_json::from_str(&end.data).unwrap();
    assert_eq!(end["ok"], true);
    assert!(end["last_seq"].is_string());
    assert!(ends.event().await.is_none());
    // limit ends one too.
    let mut limited = Stream::open(
        &s,
        s.request(
            Method::GET,
            &format!("/data/{d}/_changes?feed=continuous&limit=2"),
        ),
    )
    .await;
    assert_eq!(limited.line().await.unwrap()["id"], "a");
    assert_eq!(limited.line().await.unwrap()["id"], "b");
    let last = limited.line().await.unwrap();
    assert_eq!(last["ok"], true);
    assert!(limited.line().await.is_none());
}

#[tokio::test]
async fn an_eventsource_resumes_from_its_last_event_id() {
    let s = TestServer::start().await;
    let d = data_instance(&s).await;
    for id in ["a", "b", "c"] {
        s.post(&format!("/data/{d}"), json!({"_id": id}))
            .await
            .expect(201);
    }
    let mut first = Stream::open(
        &s,
        s.request(
            Method::GET,
            &format!("/data/{d}/_changes?feed=eventsource&since=0"),
        ),
    )
    .await;
    let a = first.event().await.unwrap();
    drop(first);
    // As a browser reconnects: the same URL, and the last id it received.
    let mut again = Stream::open(
        &s,
        s.request(
            Method::GET,
            &format!("/data/{d}/_changes?feed=eventsource&since=0"),
        )
        .header("last-event-id", a.id.clone().unwrap()),
    )
    .await;
    let next: Value = serde_json::from_str(&again.event().await.unwrap().data).unwrap();
    assert_eq!(next["id"], "b");
}

#[tokio::test]
async fn application_keys_follow_only_their_application_and_revocation_closes_streams() {
    let s = TestServer::start().await;
    let k = s.new_app().await;
    let other = s.new_app().await;
    let path = format!("/{}/data/things", k.app);
    s.send(s.as_app(&k, s.request(Method::PUT, &path)))
        .await
        .expect(201);
    s.send(s.as_app(
        &k,
        s.request(Method::POST, &path).json(&json!({"_id": "x"})),
    ))
    .await
    .expect(201);
    let feed = format!("{path}/_changes");
    let r = s
        .send(s.as_app(&k, s.request(Method::GET, &feed)))
        .await
        .expect(200);
    assert_eq!(summary(&r.body["results"]), pairs(&[("x", false)]));
    s.send(s.as_app(&other, s.request(Method::GET, &feed)))
        .await
        .expect(403);
    s.send(s.request(Method::GET, &feed)).await.expect(401);
    // The domain form's instance of the same name is another instance.
    let mut stream = Stream::open(
        &s,
        s.as_app(
            &k,
            s.request(Method::GET, &format!("{feed}?feed=eventsource&since=now")),
        ),
    )
    .await;
    s.admin(
        Method::DELETE,
        &format!("/_admin/apps/{}/keys/{}", k.app, k.key),
        None,
    )
    .await
    .expect(200);
    let end = stream.event().await.unwrap();
    assert_eq!(end.event.as_deref(), Some("end"));
    let end: Value = serde_json::from_str(&end.data).unwrap();
    assert_eq!(end["status"], 401, "{end}");
    assert!(end["msg"].as_str().unwrap().contains("revoked"));
    assert!(stream.event().await.is_none(), "the stream is closed");
}

#[tokio::test]
async fn open_streams_are_bounded_per_client_and_per_node() {
    let s = TestServer::builder()
        .args(|a| {
            a.feed_max_streams = Some(3);
            a.feed_max_streams_per_client = Some(2);
        })
        .start()
        .await;
    let k = s.new_app().await;
    let d = data_instance(&s).await;
    let open = |q: &str| s.request(Method::GET, &format!("/data/{d}/_changes?{q}"));
    let one = Stream::open(&s, open("feed=continuous")).await;
    let two = Stream::open(&s, open("feed=eventsource")).await;
    let r = s.send(open("feed=longpoll")).await.expect(429);
    assert!(
        r.body["msg"]
            .as_str()
            .unwrap()
            .contains("--feed-max-streams-per-client")
    );
    // The normal feed holds nothing open.
    s.send(open("")).await.expect(200);
    // Another client (an application's key) has its own share of the node's bound.
    let app_feed = format!("/{}/data/things", k.app);
    s.send(s.as_app(&k, s.request(Method::PUT, &app_feed)))
        .await
        .expect(201);
    let app_open = || {
        s.as_app(
            &k,
            s.request(Method::GET, &format!("{app_feed}/_changes?feed=continuous")),
        )
    };
    let three = Stream::open(&s, app_open()).await;
    let r = s.send(app_open()).await.expect(429);
    assert!(
        r.body["msg"]
            .as_str()
            .unwrap()
            .contains("--feed-max-streams)")
    );
    // A closed stream frees its place.
    drop((one, three));
    quintet_testkit::eventually("a closed stream frees its place", || async {
        s.send(open("feed=longpoll&timeout=1")).await.status == 200
    })
    .await;
    drop(two);
}

#[tokio::test]
async fn a_subscriber_that_stops_reading_does_not_hold_back_writers() {
    let s = TestServer::start().await;
    let d = data_instance(&s).await;
    // A subscriber that never reads, asking for large documents: far more than socket
    // buffers hold once the writes below are done.
    let stalled = Stream::open(
        &s,
        s.request(
            Method::GET,
            &format!("/data/{d}/_changes?feed=continuous&include_docs=true"),
        ),
    )
    .await;
    let mut reader = Stream::open(
        &s,
        s.request(Method::GET, &format!("/data/{d}/_changes?feed=continuous")),
    )
    .await;
    let big = "x".repeat(64 * 1024);
    const WRITES: usize = 400; // 25 MiB of documents
    for i in 0..WRITES {
        s.post(
            &format!("/data/{d}"),
            json!({"_id": format!("d{i:04}"), "big": big}),
        )
        .await
        .expect(201);
    }
    // Every write was acknowledged; the reading subscriber got every change.
    for i in 0..WRITES {
        assert_eq!(reader.line().await.unwrap()["id"], format!("d{i:04}"));
    }
    drop(stalled);
}

/// 10,000 writes by concurrent writers while a subscriber drops its stream at random
/// points and resumes from the last sequence it received: every change exactly once,
/// in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_thousand_writes_reach_a_reconnecting_subscriber_exactly_once() {
    let s = TestServer::start().await;
    let d = data_instance(&s).await;
    const WRITERS: usize = 8;
    const EACH: usize = 1_250;
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let (http, url) = (s.http().clone(), s.url(&format!("/data/{d}")));
        writers.push(tokio::spawn(async move {
            for i in 0..EACH {
                let r = http
                    .post(&url)
                    .json(&json!({"_id": format!("w{w}-{i}")}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 201);
            }
        }));
    }
    let total = WRITERS * EACH;
    let mut seen: Vec<(u64, String)> = Vec::with_capacity(total);
    let mut since = "0".to_owned();
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    let mut reconnects = 0;
    while seen.len() < total {
        let mut stream = Stream::open(
            &s,
            s.request(
                Method::GET,
                &format!("/data/{d}/_changes?feed=continuous&since={since}"),
            ),
        )
        .await;
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let take = 1 + (rng % 700) as usize;
        for _ in 0..take {
            let Some(line) = stream.line().await else {
                break;
            };
            let seq = line["seq"].as_str().unwrap().to_owned();
            let n: u64 = seq.split('-').next().unwrap().parse().unwrap();
            seen.push((n, line["id"].as_str().unwrap().to_owned()));
            since = seq;
            if seen.len() == total {
                break;
            }
        }
        reconnects += 1;
    }
    for w in writers {
        w.await.unwrap();
    }
    assert!(reconnects > 10, "{reconnects}");
    for (i, (n, _)) in seen.iter().enumerate() {
        assert_eq!(*n, i as u64 + 1, "in order, none missing, none twice");
    }
    let ids: HashSet<&str> = seen.iter().map(|(_, id)| id.as_str()).collect();
    assert_eq!(ids.len(), total);
    // Nothing more.
    let rest = changes(&s, &d, &format!("since={since}")).await;
    assert_eq!(rest["results"], json!([]));
}

/// Resident memory of this process, in KiB (Linux).
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// A thousand open event streams on one node: each receives the next change, and memory
/// (of the whole test process, clients included) grows by a bounded amount per stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_event_streams_stay_small() {
    let s = TestServer::builder()
        .args(|a| {
            a.feed_max_streams_per_client = Some(2_000);
            a.max_connections_per_client = Some(0);
        })
        .start()
        .await;
    let d = data_instance(&s).await;
    const STREAMS: usize = 1_000;
    let before = rss_kib();
    let mut streams = Vec::with_capacity(STREAMS);
    for _ in 0..STREAMS {
        streams.push(
            Stream::open(
                &s,
                s.request(
                    Method::GET,
                    &format!("/data/{d}/_changes?feed=eventsource&since=now"),
                ),
            )
            .await,
        );
    }
    let during = rss_kib();
    assert_eq!(s.state().feeds.open_streams(), STREAMS);
    s.post(&format!("/data/{d}"), json!({"_id": "hello"}))
        .await
        .expect(201);
    for st in &mut streams {
        let ev = st.event().await.unwrap();
        assert!(ev.data.contains("\"hello\""));
    }
    let per_stream = (during.saturating_sub(before)) / STREAMS as u64;
    eprintln!(
        "{STREAMS} open event streams: resident memory {before} KiB -> {during} KiB \
         ({per_stream} KiB per stream, client and server together)"
    );
    assert!(per_stream < 256, "{per_stream} KiB per stream");
    drop(streams);
    quintet_testkit::eventually("every stream closed", || async {
        s.state().feeds.open_streams() == 0
    })
    .await;
}

/// A node shutting down ends its streams at once (their clients reconnect elsewhere and
/// resume) instead of waiting out the shutdown timeout for them.
#[tokio::test]
async fn shutting_down_ends_open_streams() {
    let mut s = TestServer::builder()
        .args(|a| a.shutdown_timeout = Some(3_600))
        .start()
        .await;
    let d = data_instance(&s).await;
    let mut lines = Stream::open(
        &s,
        s.request(Method::GET, &format!("/data/{d}/_changes?feed=continuous")),
    )
    .await;
    let mut events = Stream::open(
        &s,
        s.request(Method::GET, &format!("/data/{d}/_changes?feed=eventsource")),
    )
    .await;
    s.stop().await;
    assert!(lines.line().await.is_none());
    assert!(events.event().await.is_none());
}
