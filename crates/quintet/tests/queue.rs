//! The queue under crashes and operator settings, with the real binary.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{collections::HashSet, path::Path};

use quintet_testkit::{Answer, Process, Worker, eventually};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_quintet");

fn bin() -> &'static Path {
    Path::new(BIN)
}

async fn all_jobs(p: &Process, q: &str) -> Vec<Value> {
    let r = p.get(&format!("/queue/{q}/_jobs")).await.expect(200);
    r.body["jobs"].as_array().unwrap().clone()
}

#[tokio::test]
async fn every_pending_job_is_delivered_after_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let worker = Worker::start(Answer::Hang).await;
    let mut p = Process::spawn(bin(), dir.path(), &[]);
    p.create(
        "queue",
        "q",
        Some(json!({"target": worker.url(), "concurrency": 2, "secret": "s"})),
    )
    .await;
    let mut ids = HashSet::new();
    for n in 0..20 {
        let r = p.post("/queue/q", json!({"n": n})).await.expect(201);
        ids.insert(r.body["id"].as_str().unwrap().to_owned());
    }
    // Two deliveries hang in flight, eighteen jobs wait: then the process dies.
    worker.wait_for(2).await;
    p.kill9();
    worker.set_answer(Answer::Status(200, String::new()));
    p.restart();
    eventually("every job is delivered", || async {
        all_jobs(&p, "q").await.is_empty()
    })
    .await;
    let delivered: Vec<String> = worker
        .received()
        .iter()
        .map(|r| r.header("x-svc-job-id").unwrap().to_owned())
        .collect();
    let unique: HashSet<String> = delivered.iter().cloned().collect();
    assert_eq!(unique, ids, "every acknowledged job reached the worker");
    // The two in flight at the crash were delivered again (at-least-once), nothing else.
    assert_eq!(delivered.len(), 22, "{delivered:?}");
}

#[tokio::test]
async fn deny_private_refuses_deliveries_to_internal_addresses() {
    let dir = tempfile::tempdir().unwrap();
    let worker = Worker::start(Answer::Status(200, String::new())).await;
    let by_name = format!("http://localhost:{}/hook", worker.port());
    // Queues created while internal targets were allowed…
    let mut p = Process::spawn(bin(), dir.path(), &[]);
    p.create("queue", "literal", Some(json!({"target": worker.url()})))
        .await;
    p.create("queue", "named", Some(json!({"target": by_name})))
        .await;
    p.kill9();
    drop(p);
    // …deliver nothing once the operator forbids them.
    let p = Process::spawn(bin(), dir.path(), &["--queue-deny-private"]);
    for q in ["literal", "named"] {
        p.post(&format!("/queue/{q}"), json!({"n": 1}))
            .await
            .expect(201);
    }
    for (q, host) in [("literal", "127.0.0.1"), ("named", "localhost")] {
        eventually("the job failed", || async {
            all_jobs(&p, q)
                .await
                .first()
                .is_some_and(|j| j["status"] == "ERROR")
        })
        .await;
        let job = &all_jobs(&p, q).await[0];
        assert_eq!(
            job["error"],
            format!(
                "target host \"{host}\" is a loopback, private or link-local address, which \
                 this server refuses as a queue target (--queue-deny-private)"
            )
        );
        assert_eq!(job["attempts"], 1, "a refusal is not retried");
    }
    assert!(worker.received().is_empty());
}
