//! Event feeds of the other services (`GET /queue/<q>/_changes`): job state changes in
//! commit order, resumable without loss or repetition, through both address forms, with
//! the data feed's authorization and bounds, on the embedded engine. Two nodes on
//! PostgreSQL: `crates/quintet/tests/system/scale_out/feed.rs`; each engine's log itself:
//! the queue conformance suite. See `docs/feed.md`.

use quintet_testkit::{Answer, TestServer, Worker, eventually};
use reqwest::Method;
use serde_json::{Value, json};

use crate::feed::Stream;

/// `(id, event, status)` of each result.
fn summary(results: &Value) -> Vec<(String, String, Value)> {
    results
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["id"].as_str().unwrap().to_owned(),
                e["event"].as_str().unwrap().to_owned(),
                e["status"].clone(),
            )
        })
        .collect()
}

fn expect(list: &[(&str, &str, Value)]) -> Vec<(String, String, Value)> {
    list.iter()
        .map(|(i, e, s)| ((*i).to_owned(), (*e).to_owned(), s.clone()))
        .collect()
}

async fn enqueue(s: &TestServer, q: &str, job: Value) -> String {
    let r = s.post(&format!("/queue/{q}"), job).await.expect(201);
    r.body["id"].as_str().unwrap().to_owned()
}

async fn events(s: &TestServer, q: &str, query: &str) -> Value {
    s.get(&format!("/queue/{q}/_changes?{query}"))
        .await
        .expect(200)
        .body
}

/// Every event of `q` after `since`, once `n` are there (deliveries are asynchronous).
async fn wait_events(s: &TestServer, q: &str, since: &str, n: usize) -> Value {
    let query = format!("since={since}");
    eventually(&format!("{n} events of {q}"), || async {
        events(s, q, &query).await["results"]
            .as_array()
            .unwrap()
            .len()
            >= n
    })
    .await;
    // Logs only grow (nothing is compacted here): at least `n` still.
    events(s, q, &query).await
}

#[tokio::test]
async fn a_queue_feed_lists_every_job_state_change_and_resumes_after_last_seq() {
    let s = TestServer::start().await;
    let w = Worker::start(Answer::Status(422, "no \"to\"".into())).await;
    s.create("queue", "mail", Some(json!({"target": w.url()})))
        .await;
    let empty = events(&s, "mail", "").await;
    assert_eq!(empty["results"], json!([]));

    // Enqueued, failed, cancelled.
    let a = enqueue(&s, "mail", json!({"n": 1})).await;
    wait_events(&s, "mail", "0", 2).await;
    s.post(&format!("/queue/mail/{a}/_cancel"), json!({}))
        .await
        .expect(200);
    // Enqueued, failed, retried, delivered.
    let b = enqueue(&s, "mail", json!({"n": 2})).await;
    wait_events(&s, "mail", "0", 5).await;
    w.set_answer(Answer::Status(200, String::new()));
    s.post(&format!("/queue/mail/{b}/_retry"), json!({}))
        .await
        .expect(200);
    let all = wait_events(&s, "mail", "0", 7).await;
    let (ready, error) = (json!("READY"), json!("ERROR"));
    assert_eq!(
        summary(&all["results"]),
        expect(&[
            (&a, "ready", ready.clone()),
            (&a, "error", error.clone()),
            (&a, "cancelled", Value::Null),
            (&b, "ready", ready.clone()),
            (&b, "error", error.clone()),
            (&b, "retried", ready.clone()),
            (&b, "delivered", Value::Null),
        ])
    );
    let results = all["results"].as_array().unwrap();
    assert_eq!(results[1]["error"], "no \"to\"", "{}", results[1]);
    assert!(results[0].get("error").is_none(), "{}", results[0]);
    assert_eq!(all["last_seq"], results[6]["seq"]);

    // Resuming after any position gives exactly what follows it.
    let after = events(
        &s,
        "mail",
        &format!("since={}", results[2]["seq"].as_str().unwrap()),
    )
    .await;
    assert_eq!(after["results"].as_array().unwrap(), &results[3..]);
    let page = events(&s, "mail", "limit=2").await;
    assert_eq!(page["results"].as_array().unwrap(), &results[..2]);
    assert_eq!(page["last_seq"], results[1]["seq"]);
    let rest = events(
        &s,
        "mail",
        &format!("since={}", all["last_seq"].as_str().unwrap()),
    )
    .await;
    assert_eq!(rest["results"], json!([]));
    assert_eq!(rest["last_seq"], all["last_seq"]);
}

#[tokio::test]
async fn queue_feeds_wait_and_stream_as_jobs_change() {
    let s = TestServer::start().await;
    let w = Worker::start(Answer::Status(200, String::new())).await;
    s.create("queue", "q", Some(json!({"target": w.url()})))
        .await;
    let head = events(&s, "q", "").await["last_seq"]
        .as_str()
        .unwrap()
        .to_owned();

    let mut continuous = Stream::open(
        &s,
        s.request(Method::GET, "/queue/q/_changes?feed=continuous&since=now"),
    )
    .await;
    let mut sse = Stream::open(
        &s,
        s.request(
            Method::GET,
            "/queue/q/_changes?feed=eventsource&since=now&limit=2",
        ),
    )
    .await;
    // The longpoll waits from `head`, so it answers the enqueue whichever runs first.
    let longpoll_url = format!("/queue/q/_changes?feed=longpoll&since={head}&timeout=60000");
    let (answered, id) = tokio::join!(s.get(&longpoll_url), enqueue(&s, "q", json!({"n": 1})));
    let answered = answered.expect(200).body;

    let first = continuous.line().await.unwrap();
    assert_eq!(
        (first["id"].as_str(), first["event"].as_str()),
        (Some(id.as_str()), Some("ready"))
    );
    let second = continuous.line().await.unwrap();
    assert_eq!(second["event"], "delivered", "{second}");

    let ev = sse.event().await.unwrap();
    let data: Value = serde_json::from_str(&ev.data).unwrap();
    assert_eq!(ev.id.as_deref(), data["seq"].as_str());
    assert_eq!(data["event"], "ready");
    let ev = sse.event().await.unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&ev.data).unwrap()["event"],
        "delivered"
    );
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

    assert_eq!(answered["results"][0]["event"], "ready", "{answered}");
    assert_eq!(answered["results"][0]["id"], id.as_str());
}

#[tokio::test]
async fn bad_queue_feed_requests_are_refused() {
    let s = TestServer::start().await;
    let w = Worker::start(Answer::Status(200, String::new())).await;
    s.create("queue", "q", Some(json!({"target": w.url()})))
        .await;
    for query in [
        "include_docs=true",
        "selector=%7B%7D",
        "since=banana",
        "feed=sometimes",
        "limit=0",
    ] {
        let r = s
            .get(&format!("/queue/q/_changes?{query}"))
            .await
            .expect(422);
        assert!(r.body["msg"].is_string(), "{query}: {}", r.body);
    }
    s.get("/queue/nope/_changes").await.expect(404);
    // A position of another queue, or beyond the head, is gone.
    s.create("queue", "other", Some(json!({"target": w.url()})))
        .await;
    enqueue(&s, "other", json!({})).await;
    let theirs = events(&s, "other", "").await["last_seq"]
        .as_str()
        .unwrap()
        .to_owned();
    s.get(&format!("/queue/q/_changes?since={theirs}"))
        .await
        .expect(410);
    // The data feed's own parameters still apply to data.
    s.create("data", "d", None).await.expect(201);
    s.get("/data/d/_changes?include_docs=true")
        .await
        .expect(200);
}

#[tokio::test]
async fn application_keys_follow_only_their_queues_and_revocation_closes_streams() {
    let s = TestServer::builder()
        .args(|a| a.queue_private_targets = Some(quintet_testkit::PrivateTargetsArg::Allow))
        .start()
        .await;
    let w = Worker::start(Answer::Status(200, String::new())).await;
    let k = s.new_app().await;
    let other = s.new_app().await;
    let path = format!("/{}/queue/jobs", k.app);
    s.send(
        s.as_app(
            &k,
            s.request(Method::PUT, &path)
                .json(&json!({"target": w.url()})),
        ),
    )
    .await
    .expect(201);
    let feed = format!("{path}/_changes");
    let mut stream = Stream::open(
        &s,
        s.as_app(
            &k,
            s.request(Method::GET, &format!("{feed}?feed=continuous&since=now")),
        ),
    )
    .await;
    s.send(s.as_app(&k, s.request(Method::POST, &path).json(&json!({"n": 1}))))
        .await
        .expect(201);
    assert_eq!(stream.line().await.unwrap()["event"], "ready");
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
    // Whatever was committed before comes first; the stream then ends with 401.
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
async fn queue_streams_count_against_the_feed_bounds() {
    let s = TestServer::builder()
        .args(|a| {
            a.feed_max_streams = Some(3);
            a.feed_max_streams_per_client = Some(1);
        })
        .start()
        .await;
    let w = Worker::start(Answer::Status(200, String::new())).await;
    s.create("queue", "q", Some(json!({"target": w.url()})))
        .await;
    s.create("data", "d", None).await.expect(201);
    let one = Stream::open(
        &s,
        s.request(Method::GET, "/queue/q/_changes?feed=continuous"),
    )
    .await;
    // One bound for every kind of feed.
    let r = s.get("/data/d/_changes?feed=longpoll").await.expect(429);
    assert!(r.body["msg"].as_str().unwrap().contains("per-client"));
    s.get("/queue/q/_changes?feed=longpoll").await.expect(429);
    s.get("/queue/q/_changes").await.expect(200);
    drop(one);
    eventually("a closed stream frees its place", || async {
        s.send(s.request(Method::GET, "/queue/q/_changes?feed=longpoll&timeout=1"))
            .await
            .status
            == 200
    })
    .await;
}

/// 5,000 jobs enqueued by concurrent clients and delivered (10,000 events) while a
/// subscriber drops its stream at random points and resumes from the last sequence it
/// received: every event exactly once, in order, each job ready before delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_thousand_job_events_reach_a_reconnecting_subscriber_exactly_once() {
    let s = TestServer::start().await;
    let w = Worker::start(Answer::Status(200, String::new())).await;
    s.create("queue", "busy", Some(json!({"target": w.url()})))
        .await;
    const CLIENTS: usize = 8;
    const EACH: usize = 625;
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let (http, url) = (s.http().clone(), s.url("/queue/busy"));
        clients.push(tokio::spawn(async move {
            for i in 0..EACH {
                let r = http
                    .post(&url)
                    .json(&json!({"c": c, "i": i}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 201);
            }
        }));
    }
    let total = 2 * CLIENTS * EACH;
    let mut seen: Vec<(u64, String, String)> = Vec::with_capacity(total);
    let mut since = "0".to_owned();
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut reconnects = 0;
    while seen.len() < total {
        let sse = rng.is_multiple_of(2);
        let feed = if sse { "eventsource" } else { "continuous" };
        let mut stream = Stream::open(
            &s,
            s.request(
                Method::GET,
                &format!("/queue/busy/_changes?feed={feed}&since={since}"),
            ),
        )
        .await;
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let take = 1 + (rng % 900) as usize;
        for _ in 0..take {
            let event = if sse {
                let Some(ev) = stream.event().await else {
                    break;
                };
                let data: Value = serde_json::from_str(&ev.data).unwrap();
                assert_eq!(ev.id.as_deref(), data["seq"].as_str());
                data
            } else {
                let Some(line) = stream.line().await else {
                    break;
                };
                line
            };
            let seq = event["seq"].as_str().unwrap().to_owned();
            let n: u64 = seq.split('-').next().unwrap().parse().unwrap();
            seen.push((
                n,
                event["id"].as_str().unwrap().to_owned(),
                event["event"].as_str().unwrap().to_owned(),
            ));
            since = seq;
            if seen.len() == total {
                break;
            }
        }
        reconnects += 1;
    }
    for c in clients {
        c.await.unwrap();
    }
    assert!(reconnects > 10, "{reconnects}");
    let mut ready = std::collections::HashSet::new();
    let mut delivered = std::collections::HashSet::new();
    for (i, (n, id, event)) in seen.iter().enumerate() {
        assert_eq!(*n, i as u64 + 1, "in order, none missing, none twice");
        match event.as_str() {
            "ready" => assert!(ready.insert(id.as_str()), "{id} ready twice"),
            "delivered" => {
                assert!(ready.contains(id.as_str()), "{id} delivered before ready");
                assert!(delivered.insert(id.as_str()), "{id} delivered twice");
            }
            other => panic!("{id}: unexpected {other}"),
        }
    }
    assert_eq!((ready.len(), delivered.len()), (total / 2, total / 2));
    let rest = events(&s, "busy", &format!("since={since}")).await;
    assert_eq!(rest["results"], json!([]));
}
