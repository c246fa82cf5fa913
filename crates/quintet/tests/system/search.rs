//! The search index under `kill -9`: every acknowledged write survives, nothing else is
//! half-applied.

use std::path::Path;

use quintet_testkit::{Client, Process};
use serde_json::{Value, json};

use crate::BIN;

async fn ids(p: &Client, query: &str) -> Vec<String> {
    let r = p
        .post("/search/s/_query", json!({"query": query, "limit": 1000}))
        .await
        .expect(200);
    let mut ids: Vec<String> = r.body["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn acknowledged_search_writes_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = Process::spawn(Path::new(BIN), dir.path(), &[]);
    p.create(
        "search",
        "s",
        Some(json!({"fields": ["title"], "storeFields": ["title"]})),
    )
    .await;

    // Single writes, acknowledged one by one.
    for i in 0..10 {
        p.post(
            "/search/s",
            json!({"key": format!("one{i}"), "doc": {"title": format!("single {i}")}}),
        )
        .await
        .expect(201);
    }
    // Concurrent writes, committed in shared batches.
    let mut tasks = Vec::new();
    for i in 0..24 {
        let client = Client::new(&p.url(""));
        tasks.push(tokio::spawn(async move {
            client
                .post(
                    "/search/s",
                    json!({"key": format!("many{i}"), "doc": {"title": "concurrent"}}),
                )
                .await
                .expect(201);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // A bulk, a replacement and a removal.
    let docs: Vec<Value> = (0..300)
        .map(|i| json!({"_id": format!("bulk{i}"), "title": format!("bulk document {i}")}))
        .collect();
    p.post("/search/s/_bulk", Value::Array(docs))
        .await
        .expect(200);
    p.put("/search/s/one0", Some(json!({"title": "replaced"})))
        .await
        .expect(200);
    p.delete("/search/s/one1").await.expect(200);

    p.kill9();
    p.restart();

    assert_eq!(ids(&p, "single ").await.len(), 8);
    assert_eq!(ids(&p, "concurrent").await.len(), 24);
    assert_eq!(ids(&p, "bulk").await.len(), 300);
    assert_eq!(ids(&p, "replaced").await, ["one0"]);
    let r = p.get("/search/s/one0").await.expect(201);
    assert_eq!(r.body["doc"], json!({"title": "replaced"}));
    p.get("/search/s/one1").await.expect(404);
    p.get("/search/s/bulk299").await.expect(201);
    // The index still takes writes after the crash (no stale writer lock).
    p.post(
        "/search/s",
        json!({"key": "after", "doc": {"title": "after the crash"}}),
    )
    .await
    .expect(201);
    assert_eq!(ids(&p, "crash").await, ["after"]);
}
