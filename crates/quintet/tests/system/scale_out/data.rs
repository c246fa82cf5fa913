//! Documents on PostgreSQL under `kill -9`: single creates are committed in groups (see
//! `quintet_postgres`'s `data::group`), and a create answered 201 must be in the database
//! whatever moment the node dies at, while a group is gathering or committing.

use std::{
    path::Path,
    sync::{Arc, Mutex},
};

use quintet_testkit::{Process, engines};
use reqwest::Method;
use serde_json::json;

use crate::BIN;

const ADMIN_TOKEN: &str = "data-kill-admin-token-0123456789";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_single_creates_survive_kill_9_of_a_node_under_load() {
    let Some(pg) = engines::postgres("acknowledged_single_creates_survive_kill_9").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let args = ["--data", pg.url(), "--admin-token", ADMIN_TOKEN];
    let mut node = Process::spawn(Path::new(BIN), dir.path(), &args);
    node.create("data", "d", None).await;
    node.post("/data/d/_index", json!({"fields": ["writer"]}))
        .await
        .expect(200);

    // 64 writers create documents as fast as they are answered; the node is killed once
    // 3,000 are acknowledged, with creates still in flight.
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let (enough, mut enough_rx) = tokio::sync::watch::channel(false);
    let writers: Vec<_> = (0..64)
        .map(|w| {
            let (client, acked, enough) = ((*node).clone(), Arc::clone(&acked), enough.clone());
            tokio::spawn(async move {
                for i in 0.. {
                    let id = format!("w{w:02}-{i:05}");
                    let req = client
                        .request(Method::POST, "/data/d")
                        .json(&json!({"_id": id, "writer": w}));
                    match req.send().await {
                        Ok(r) if r.status() == 201 => {
                            let mut acked = acked.lock().unwrap();
                            acked.push(id);
                            if acked.len() >= 3000 {
                                enough.send_replace(true);
                            }
                        }
                        // The node is gone (or dying): this create was not acknowledged.
                        _ => return,
                    }
                }
            })
        })
        .collect();
    drop(enough);
    enough_rx.wait_for(|e| *e).await.unwrap();
    node.kill9();
    for w in writers {
        w.await.unwrap();
    }

    node.restart();
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 3000);
    let r = node
        .post(
            "/data/d/_query",
            json!({"selector": {"writer": {"$gte": 0}}, "fields": ["_id"], "limit": 100_000}),
        )
        .await
        .expect(200);
    let found: std::collections::HashSet<&str> = r.body["docs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["_id"].as_str().unwrap())
        .collect();
    let lost: Vec<&String> = acked
        .iter()
        .filter(|id| !found.contains(id.as_str()))
        .collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged creates lost: {lost:?}",
        lost.len()
    );
    // Every document found through the index is also readable by id.
    for id in acked.iter().step_by(97) {
        node.get(&format!("/data/d/{id}")).await.expect(200);
    }
}
