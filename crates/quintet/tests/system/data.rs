//! Acknowledged data writes survive `kill -9` of the real binary.

use std::path::Path;

use quintet_testkit::Process;
use serde_json::{Value, json};

use crate::BIN;

#[tokio::test]
async fn acknowledged_documents_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = Process::spawn(Path::new(BIN), dir.path(), &[]);
    p.create("data", "d", None).await;
    p.post("/data/d/_index", json!({"fields": ["group"]}))
        .await
        .expect(200);

    // Concurrent single creates share commits; each is acknowledged only once durable.
    let mut tasks = Vec::new();
    for i in 0..64 {
        let client = (*p).clone();
        tasks.push(tokio::spawn(async move {
            let doc = json!({"_id": format!("c{i:03}"), "group": i % 4});
            client.post("/data/d", doc).await.expect(201);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let bulk: Vec<Value> = (0..500)
        .map(|i| json!({"_id": format!("b{i:03}"), "group": i % 4}))
        .collect();
    p.post("/data/d/_bulk", Value::Array(bulk))
        .await
        .expect(200);
    p.put("/data/d/c000", Some(json!({"group": 9})))
        .await
        .expect(200);
    p.delete("/data/d/c001").await.expect(200);

    p.kill9();
    p.restart();

    for i in 2..64 {
        let r = p.get(&format!("/data/d/c{i:03}")).await.expect(200);
        assert_eq!(r.body["doc"]["group"], i % 4);
    }
    assert_eq!(
        p.get("/data/d/c000").await.expect(200).body["doc"]["group"],
        9
    );
    p.get("/data/d/c001").await.expect(404);
    let r = p.get("/data/d?startkey=b&endkey=b~").await.expect(200);
    assert_eq!(r.body["docs"].as_array().unwrap().len(), 500);
    let r = p
        .post(
            "/data/d/_query",
            json!({"selector": {"group": 9}, "execution_stats": true}),
        )
        .await
        .expect(200);
    assert_eq!(r.body["docs"][0]["_id"], "c000");
    assert_eq!(r.body["execution_stats"]["index"], "idx-group");
}
