//! The SQLite document store's memory of recently read documents never serves a version
//! older than the last acknowledged write, however reads and writes interleave.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use quintet_core::{
    InstanceConfig, SystemClock, conformance,
    ports::{
        Lifecycle,
        data::{BulkOp, DocId, DocStore},
    },
};
use quintet_embedded::data::SqliteDocStore;
use serde_json::{Value, json};

fn id(s: &str) -> DocId {
    s.parse().unwrap()
}

async fn version(store: &SqliteDocStore, inst: &quintet_core::Instance) -> Option<i64> {
    store.get(inst, &id("hot")).await.unwrap().map(|raw| {
        serde_json::from_str::<Value>(raw.get()).unwrap()["v"]
            .as_i64()
            .unwrap()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_racing_writes_never_bring_back_an_acknowledged_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let store =
        Arc::new(SqliteDocStore::open(&dir.path().join("data.db"), Arc::new(SystemClock)).unwrap());
    let inst = conformance::instance(InstanceConfig::Data);
    store.create_instance(&inst).await.unwrap();
    store
        .create(
            &inst,
            Some(id("hot")),
            json!({"v": 0}).as_object().unwrap().clone(),
        )
        .await
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..6)
        .map(|_| {
            let (store, inst, stop) = (Arc::clone(&store), inst.clone(), Arc::clone(&stop));
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    version(&store, &inst).await;
                    // A held document answers without suspending: yield, so the runtime
                    // can stop these tasks if the test fails.
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    for v in 1..=300 {
        let doc = json!({ "v": v }).as_object().unwrap().clone();
        if v % 3 == 0 {
            let ops = BulkOp::parse_all(json!([{"_id": "hot", "v": v}])).unwrap();
            store.bulk(&inst, ops).await.unwrap();
        } else {
            store.replace(&inst, &id("hot"), doc).await.unwrap();
        }
        assert_eq!(version(&store, &inst).await, Some(v), "after write {v}");
    }
    store.remove(&inst, &id("hot")).await.unwrap();
    assert_eq!(version(&store, &inst).await, None, "after the removal");
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.await.unwrap();
    }
}

/// A data directory written before change logs existed: its instances have no log. Their
/// feed starts empty, and the first write after the upgrade makes the log and records.
#[tokio::test]
async fn instances_from_before_change_logs_get_one_on_their_next_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data.db");
    let inst = conformance::instance(InstanceConfig::Data);
    {
        let store = SqliteDocStore::open(&path, Arc::new(SystemClock)).unwrap();
        store.create_instance(&inst).await.unwrap();
        store
            .create(
                &inst,
                Some(id("old")),
                json!({"v": 1}).as_object().unwrap().clone(),
            )
            .await
            .unwrap();
        store.close().await.unwrap();
    }
    // What an earlier version left: the documents, no log.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(&format!("DROP TABLE \"d{}_ch\"", inst.id.0))
        .unwrap();
    let store = SqliteDocStore::open(&path, Arc::new(SystemClock)).unwrap();
    assert_eq!(store.change_head(&inst).await.unwrap(), 0);
    let page = store.changes(&inst, 0, 10).await.unwrap();
    assert!(page.changes.is_empty());
    assert_eq!(page.last_seq, 0);
    let ops = BulkOp::parse_all(json!([{"_id": "new"}, {"_id": "old", "_deleted": true}])).unwrap();
    store.bulk(&inst, ops).await.unwrap();
    let page = store.changes(&inst, 0, 10).await.unwrap();
    let got: Vec<(u64, &str, bool)> = page
        .changes
        .iter()
        .map(|c| (c.seq, c.id.as_str(), c.deleted))
        .collect();
    assert_eq!(got, vec![(1, "new", false), (2, "old", true)]);
    store.close().await.unwrap();
}
