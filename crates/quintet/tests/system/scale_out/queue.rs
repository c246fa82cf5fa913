//! The queue on PostgreSQL with two real `quintet serve` processes sharing it (`--registry`
//! and `--queue` on one schema): jobs enqueued through either node are delivered once,
//! an idle node takes work enqueued through a busy one, and jobs a killed node held are
//! delivered by the other once their leases run out.

use std::{
    collections::{HashMap, HashSet},
    path::Path,
    time::Duration,
};

use quintet_testkit::{Answer, Process, Worker, engines, eventually};
use serde_json::{Value, json};

use crate::BIN;

const ADMIN_TOKEN: &str = "two-nodes-admin-token-0123456789";

/// A node on `url` for both the registry and the queue, with a data directory of its own.
fn node(dir: &Path, url: &str) -> Process {
    Process::spawn(
        Path::new(BIN),
        dir,
        &[
            "--registry",
            url,
            "--queue",
            url,
            "--admin-token",
            ADMIN_TOKEN,
        ],
    )
}

async fn all_jobs(p: &Process, q: &str) -> Vec<Value> {
    let r = p.get(&format!("/queue/{q}/_jobs")).await.expect(200);
    r.body["jobs"].as_array().unwrap().clone()
}

/// Job ids the worker received, with how many times each.
fn deliveries(worker: &Worker) -> HashMap<String, usize> {
    let mut seen = HashMap::new();
    for r in worker.received() {
        *seen
            .entry(r.header("x-svc-job-id").unwrap().to_owned())
            .or_insert(0) += 1;
    }
    seen
}

#[tokio::test]
async fn two_nodes_deliver_every_job_exactly_once() {
    let Some(pg) = engines::postgres("two_nodes_deliver_every_job_exactly_once").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let worker = Worker::start(Answer::Status(200, String::new())).await;
    let a = node(&dir.path().join("a"), pg.url());
    let b = node(&dir.path().join("b"), pg.url());
    a.create(
        "queue",
        "q",
        Some(json!({"target": worker.url(), "concurrency": 4})),
    )
    .await;
    let mut ids = HashSet::new();
    for n in 0..200 {
        let through = if n % 2 == 0 { &a } else { &b };
        let r = through.post("/queue/q", json!({"n": n})).await.expect(201);
        ids.insert(r.body["id"].as_str().unwrap().to_owned());
    }
    eventually("every job is delivered and gone", || async {
        all_jobs(&a, "q").await.is_empty() && all_jobs(&b, "q").await.is_empty()
    })
    .await;
    let seen = deliveries(&worker);
    assert_eq!(seen.keys().cloned().collect::<HashSet<_>>(), ids);
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
}

#[tokio::test]
async fn an_idle_node_delivers_jobs_enqueued_through_a_busy_one() {
    let Some(pg) =
        engines::postgres("an_idle_node_delivers_jobs_enqueued_through_a_busy_one").await
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let worker = Worker::start(Answer::After(Duration::from_millis(300), 200)).await;
    let a = node(&dir.path().join("a"), pg.url());
    let b = node(&dir.path().join("b"), pg.url());
    // One delivery at a time per node: only B can deliver a second one at once.
    a.create(
        "queue",
        "q",
        Some(json!({"target": worker.url(), "concurrency": 1})),
    )
    .await;
    for n in 0..10 {
        a.post("/queue/q", json!({"n": n})).await.expect(201);
    }
    eventually("every job is delivered", || async {
        all_jobs(&a, "q").await.is_empty()
    })
    .await;
    assert_eq!(deliveries(&worker).len(), 10);
    assert_eq!(
        worker.max_in_flight(),
        2,
        "node B took jobs enqueued through node A while A was busy"
    );
    drop(b);
}

#[tokio::test]
async fn jobs_held_by_a_killed_node_are_delivered_by_the_other() {
    let Some(pg) = engines::postgres("jobs_held_by_a_killed_node_are_delivered_by_the_other").await
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let worker = Worker::start(Answer::Hang).await;
    let mut a = node(&dir.path().join("a"), pg.url());
    // A delivery may take 2 s, so A's leases run out about 32 s after it claimed.
    a.create(
        "queue",
        "q",
        Some(json!({"target": worker.url(), "concurrency": 3, "timeout": 2})),
    )
    .await;
    let mut ids = HashSet::new();
    for n in 0..5 {
        let r = a.post("/queue/q", json!({"n": n})).await.expect(201);
        ids.insert(r.body["id"].as_str().unwrap().to_owned());
    }
    // Three deliveries hang in flight, two jobs wait: then node A dies holding 3 leases.
    let held: HashSet<String> = worker
        .wait_for(3)
        .await
        .iter()
        .map(|r| r.header("x-svc-job-id").unwrap().to_owned())
        .collect();
    a.kill9();
    worker.set_answer(Answer::Status(200, String::new()));
    let b = node(&dir.path().join("b"), pg.url());
    eventually("the waiting jobs are delivered by B", || async {
        deliveries(&worker).len() == 5 && all_jobs(&b, "q").await.len() == 3
    })
    .await;
    let left: HashSet<String> = all_jobs(&b, "q")
        .await
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(left, held, "A's leases still hold");
    eventually("A's jobs are delivered once its leases ran out", || async {
        all_jobs(&b, "q").await.is_empty()
    })
    .await;
    let seen = deliveries(&worker);
    assert_eq!(seen.keys().cloned().collect::<HashSet<_>>(), ids);
    for (id, n) in &seen {
        let expected = if held.contains(id) { 2 } else { 1 };
        assert_eq!(
            *n, expected,
            "job {id}: at least once, and again only if A held it"
        );
    }
}
