//! `/_metrics` of a node on the shared engines: the PostgreSQL pool and the Redis
//! connection, and the measured sizes read from those engines.

use std::path::Path;

use quintet_testkit::{Answer, Process, Worker};
use serde_json::json;

use super::{ADMIN_TOKEN, Shared};
use crate::BIN;

/// The value of the sample whose line starts with `head` (name and labels, exactly).
fn sample(text: &str, head: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(head)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

/// The value of the one sample of `name` whose labels end with `tail` (`app/…"` and what
/// follows), whatever the application's name.
fn labelled(text: &str, name: &str, tail: &str) -> f64 {
    let found: Vec<f64> = text
        .lines()
        .filter_map(|l| {
            let (head, value) = l.split_once("} ")?;
            (head.starts_with(&format!("{name}{{")) && head.ends_with(tail))
                .then(|| value.parse().ok())?
        })
        .collect();
    assert_eq!(found.len(), 1, "{name} …{tail} in\n{text}");
    found[0]
}

#[tokio::test]
async fn metrics_show_engine_pools_and_sizes_on_the_shared_engines() {
    let Some(shared) = Shared::every_service("metrics_on_the_shared_engines").await else {
        return;
    };
    let mut args = shared.args();
    args.extend(["--admin-token", ADMIN_TOKEN]);
    let dir = tempfile::tempdir().unwrap();
    let node = Process::spawn(Path::new(BIN), &dir.path().join("a"), &args);
    let hang = Worker::start(Answer::Hang).await;

    node.create("cache", "sessions", None).await;
    node.create("search", "films", Some(json!({"fields": ["title"]})))
        .await;
    node.create(
        "queue",
        "jobs",
        Some(json!({"target": hang.url(), "concurrency": 1, "timeout": 600})),
    )
    .await;
    node.put("/cache/sessions/k", Some(json!({"v": 1})))
        .await
        .expect(200);
    node.get("/cache/sessions/k").await.expect(201);
    for key in ["a", "b"] {
        node.post("/search/films", json!({"key": key, "doc": {"title": key}}))
            .await
            .expect(201);
    }
    for n in 0..3 {
        node.post("/queue/jobs", json!({ "n": n }))
            .await
            .expect(201);
    }
    // One job is being delivered (it stays READY), two wait behind it.
    hang.wait_for(1).await;

    let t = node.get("/_metrics").await.expect(200).text;
    for service in ["data", "queue", "search"] {
        let labels = format!("{{service=\"{service}\",engine=\"postgres\"}}");
        let max = sample(&t, &format!("quintet_engine_connections_max{labels}"));
        let open = sample(&t, &format!("quintet_engine_connections_open{labels}"));
        let in_use = sample(&t, &format!("quintet_engine_connections_in_use{labels}"));
        let waiting = sample(&t, &format!("quintet_engine_connections_waiting{labels}"));
        assert_eq!(max, Some(8.0), "{service} in\n{t}");
        let (open, in_use) = (open.unwrap(), in_use.unwrap());
        assert!(
            (1.0..=8.0).contains(&open) && in_use <= open,
            "{service} in\n{t}"
        );
        assert!(waiting.is_some(), "{service} in\n{t}");
    }
    let redis = "{service=\"cache\",engine=\"redis\"}";
    assert_eq!(
        sample(&t, &format!("quintet_engine_connections_max{redis}")),
        Some(1.0)
    );
    assert_eq!(
        sample(&t, &format!("quintet_engine_connections_open{redis}")),
        Some(1.0)
    );
    assert!(
        !t.contains("service=\"storage\""),
        "S3 has no pool to show:\n{t}"
    );

    assert_eq!(sample(&t, "quintet_cache_entries"), Some(1.0), "{t}");
    assert_eq!(sample(&t, "quintet_cache_stored_bytes"), Some(8.0), "{t}");
    assert_eq!(sample(&t, "quintet_cache_hit_ratio"), Some(1.0), "{t}");
    assert_eq!(labelled(&t, "quintet_search_documents", "/films\""), 2.0);
    assert_eq!(
        labelled(&t, "quintet_queue_jobs", "/jobs\",status=\"ready\""),
        3.0
    );
    assert_eq!(
        labelled(&t, "quintet_queue_jobs", "/jobs\",status=\"error\""),
        0.0
    );
}
