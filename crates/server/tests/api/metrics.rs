//! `/_metrics` after work on every service: queue jobs and deliveries per queue, cache
//! entries, bytes and hit ratio, storage bytes, documents per index. (Requests by route and
//! the process: `http.rs`; engine pools: the scale-out system tests.)

use quintet_testkit::{Answer, TestServer, Worker, eventually};
use serde_json::{Value, json};

/// The value of the one sample of family `name` whose labels contain every `labels` pair
/// (`key="value"`); panics when none or several match.
fn sample(text: &str, name: &str, labels: &[&str]) -> f64 {
    let found: Vec<f64> = text
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let (set, value) = match rest.strip_prefix('{') {
                Some(r) => r.split_once("} ")?,
                None => ("", rest.strip_prefix(' ')?),
            };
            let pairs: Vec<&str> = set.split(',').collect();
            labels
                .iter()
                .all(|want| pairs.contains(want))
                .then(|| value.parse().ok())?
        })
        .collect();
    assert_eq!(found.len(), 1, "{name}{labels:?} in\n{text}");
    found[0]
}

async fn jobs(s: &TestServer, q: &str, status: &str) -> Vec<Value> {
    let r = s
        .get(&format!("/queue/{q}/_jobs?status={status}"))
        .await
        .expect(200);
    r.body["jobs"].as_array().unwrap().clone()
}

#[tokio::test]
async fn metrics_show_what_each_service_holds_and_does() {
    let s = TestServer::builder()
        .args(|a| a.queue_backoff_ms = Some(10))
        .start()
        .await;

    // Queues: one delivers, one fails its job, one cannot reach its worker (two retries,
    // then the job fails), one holds two jobs, one of them being delivered.
    let ok = Worker::start(Answer::Status(200, String::new())).await;
    let refuse = Worker::start(Answer::Status(422, "no".into())).await;
    let hang = Worker::start(Answer::Hang).await;
    let closed = {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap().port()
    };
    for (name, config) in [
        ("done", json!({"target": ok.url()})),
        ("refused", json!({"target": refuse.url()})),
        (
            "unreachable",
            json!({"target": format!("http://127.0.0.1:{closed}/"), "retries": 2}),
        ),
        (
            "busy",
            json!({"target": hang.url(), "concurrency": 1, "timeout": 600}),
        ),
    ] {
        s.create("queue", name, Some(config)).await.expect(201);
    }
    for q in ["done", "refused", "unreachable", "busy", "busy"] {
        s.post(&format!("/queue/{q}"), json!({"n": 1}))
            .await
            .expect(201);
    }
    ok.wait_for(1).await;
    hang.wait_for(1).await;
    for q in ["refused", "unreachable"] {
        eventually("the job failed", || async {
            jobs(&s, q, "ERROR").await.len() == 1
        })
        .await;
    }
    eventually("the delivered job is gone", || async {
        jobs(&s, "done", "READY").await.is_empty()
    })
    .await;

    // Cache: two entries (8 and 10 bytes), one hit and one miss.
    s.create("cache", "c", None).await.expect(201);
    s.put("/cache/c/k", Some(json!({"v": 1}))).await.expect(200);
    s.put("/cache/c/k2", Some(json!({"v": 22})))
        .await
        .expect(200);
    s.get("/cache/c/k").await.expect(201);
    s.get("/cache/c/gone").await.expect(404);

    // Search: three documents in one index, none in another.
    s.create("search", "movies", Some(json!({"fields": ["title"]})))
        .await
        .expect(201);
    s.create("search", "empty", Some(json!({"fields": ["title"]})))
        .await
        .expect(201);
    for key in ["a", "b", "c"] {
        s.post("/search/movies", json!({"key": key, "doc": {"title": key}}))
            .await
            .expect(201);
    }

    // Storage: 5 bytes.
    s.create("storage", "files", None).await.expect(201);
    let put = s
        .request(reqwest::Method::POST, "/storage/files/a.txt")
        .body("hello");
    s.send(put).await.expect(200);

    let t = s.get("/_metrics").await.expect(200).text;
    let queue = |name: &str| format!("queue=\"{}/{name}\"", queue_app(&t, name));
    for (q, outcome, n) in [
        ("done", "delivered", 1.0),
        ("refused", "failed", 1.0),
        ("unreachable", "retry", 2.0),
        ("unreachable", "failed", 1.0),
    ] {
        let labels = [queue(q), format!("outcome=\"{outcome}\"")];
        let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
        assert_eq!(
            sample(&t, "quintet_queue_deliveries_total", &labels),
            n,
            "{q} {outcome}"
        );
    }
    for (q, ready, error) in [
        ("done", 0.0, 0.0),
        ("refused", 0.0, 1.0),
        ("unreachable", 0.0, 1.0),
        ("busy", 2.0, 0.0),
    ] {
        for (status, n) in [("ready", ready), ("error", error)] {
            let labels = [queue(q), format!("status=\"{status}\"")];
            let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
            assert_eq!(sample(&t, "quintet_queue_jobs", &labels), n, "{q} {status}");
        }
    }
    for (name, labels, want) in [
        ("quintet_cache_entries", vec![], 2.0),
        ("quintet_cache_stored_bytes", vec![], 18.0),
        ("quintet_cache_hit_ratio", vec![], 0.5),
        ("quintet_storage_stored_bytes", vec![], 5.0),
    ] {
        assert_eq!(sample(&t, name, &labels), want, "{name}");
    }
    let index = |name: &str| format!("index=\"{}/{name}\"", queue_app(&t, "done"));
    assert_eq!(
        sample(&t, "quintet_search_documents", &[&index("movies")]),
        3.0
    );
    assert_eq!(
        sample(&t, "quintet_search_documents", &[&index("empty")]),
        0.0
    );
    // The embedded engines hold no connection pool: no series.
    assert!(!t.contains("quintet_engine_connections"), "{t}");
}

/// The application part of queue `name`'s label (`app/name`), as the server names the
/// test's application.
fn queue_app(text: &str, name: &str) -> String {
    let end = format!("/{name}\"");
    text.lines()
        .filter_map(|l| l.split_once("queue=\"").map(|(_, rest)| rest))
        .find_map(|rest| {
            let at = rest.find(&end)?;
            Some(rest[..at].to_owned())
        })
        .unwrap_or_else(|| panic!("no queue {name} in\n{text}"))
}
