//! The cache with the real binary: acknowledged writes survive `kill -9`; memory-only mode
//! keeps nothing.

use std::path::Path;

use quintet_testkit::Process;
use serde_json::json;

use crate::BIN;

fn bin() -> &'static Path {
    Path::new(BIN)
}

#[tokio::test]
async fn acknowledged_adds_and_puts_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = Process::spawn(bin(), dir.path(), &[]);
    p.create("cache", "c", None).await;

    // Concurrent writes share commits; every one that answered 2xx must be on disk.
    let mut tasks = Vec::new();
    for i in 0..40 {
        let client = (*p).clone();
        tasks.push(tokio::spawn(async move {
            if i % 2 == 0 {
                client
                    .post(
                        "/cache/c",
                        json!({"key": format!("k{i}"), "value": {"i": i}, "ttl": "1d"}),
                    )
                    .await
                    .expect(201);
            } else {
                client
                    .put(&format!("/cache/c/k{i}"), Some(json!({"i": i})))
                    .await
                    .expect(200);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    p.put("/cache/c/k0", Some(json!({"i": "replaced"})))
        .await
        .expect(200);
    p.delete("/cache/c/k1").await.expect(200);

    p.kill9();
    p.restart();

    let r = p.get("/cache/c/k0").await.expect(201);
    assert_eq!(r.body["doc"], json!({"i": "replaced"}));
    p.get("/cache/c/k1").await.expect(404);
    for i in 2..40 {
        let r = p.get(&format!("/cache/c/k{i}")).await.expect(201);
        assert_eq!(r.body["doc"], json!({"i": i}), "k{i}");
    }
    let r = p.get("/cache/c/_query?pattern=k*").await.expect(200);
    assert_eq!(r.body["docs"].as_array().unwrap().len(), 39);
    // The kept key still conflicts: the index was rebuilt from disk.
    p.post("/cache/c", json!({"key": "k2", "value": {}}))
        .await
        .expect(409);
}

#[tokio::test]
async fn memory_only_keeps_nothing_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = Process::spawn(bin(), dir.path(), &["--cache-memory-only"]);
    p.create("cache", "c", None).await;
    p.post("/cache/c", json!({"key": "k", "value": {"v": 1}}))
        .await
        .expect(201);
    p.get("/cache/c/k").await.expect(201);
    p.kill9();
    p.restart();
    p.put("/cache/c", None).await.expect(409);
    p.get("/cache/c/k").await.expect(404);
    assert!(!dir.path().join("cache.log").exists());
}
