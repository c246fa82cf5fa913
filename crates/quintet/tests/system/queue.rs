//! The queue under crashes, graceful shutdown and operator settings, with the real binary.

use std::{collections::HashSet, path::Path, time::Duration};

use quintet_testkit::{Answer, Process, Worker, eventually};
use serde_json::{Value, json};
use tokio::net::TcpStream;

use crate::BIN;

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
    let p = Process::spawn(bin(), dir.path(), &["--queue-private-targets", "deny"]);
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
                "target host \"{host}\", a loopback, private or link-local address, which \
                 this server refuses as a target of this application's queues \
                 (--queue-private-targets)"
            )
        );
        assert_eq!(job["attempts"], 1, "a refusal is not retried");
    }
    assert!(worker.received().is_empty());
}

/// Wait (blocking the test's thread pool, not its runtime) for `p` to exit.
async fn exit_of(mut p: Process) -> (std::process::ExitStatus, Process) {
    tokio::task::spawn_blocking(move || (p.wait_exit(Duration::from_secs(120)), p))
        .await
        .unwrap()
}

/// Issue 6: "graceful shutdown lets in-flight deliveries finish up to a timeout". The
/// worker holds the delivery until the server has begun shutting down (it no longer
/// accepts connections); the server waits, records the answer, and exits; after a restart
/// the job is gone rather than READY.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_a_delivery_in_flight_finish_and_be_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let worker = Worker::start(Answer::Held(200)).await;
    let mut p = Process::spawn(bin(), dir.path(), &["--shutdown-timeout", "600"]);
    p.create("queue", "q", Some(json!({"target": worker.url()})))
        .await;
    p.post("/queue/q", json!({"n": 1})).await.expect(201);
    worker.wait_for(1).await;

    p.signal("TERM");
    let addr = p.url("").trim_start_matches("http://").to_owned();
    eventually("the server stops accepting connections", || async {
        TcpStream::connect(&addr).await.is_err()
    })
    .await;
    assert!(p.exited().is_none(), "the server waits for the delivery");
    assert_eq!(worker.in_flight(), 1);
    // A delivery after the restart would hang and keep the job READY.
    worker.set_answer(Answer::Hang);
    worker.release();
    let (status, mut p) = exit_of(p).await;
    assert!(status.success(), "{status:?}");
    assert_eq!(
        worker.abandoned(),
        0,
        "the delivery was answered, not cut off"
    );
    assert_eq!(worker.received().len(), 1);

    p.restart();
    assert_eq!(
        all_jobs(&p, "q").await,
        Vec::<Value>::new(),
        "the job is done"
    );
}

/// Past `--shutdown-timeout` a delivery in flight is cut off: the job stays READY and is
/// delivered again after the restart (at-least-once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_cuts_off_a_delivery_past_the_shutdown_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let worker = Worker::start(Answer::Hang).await;
    let p = Process::spawn(bin(), dir.path(), &["--shutdown-timeout", "1"]);
    p.create("queue", "q", Some(json!({"target": worker.url()})))
        .await;
    let r = p.post("/queue/q", json!({"n": 1})).await.expect(201);
    let id = r.body["id"].as_str().unwrap().to_owned();
    worker.wait_for(1).await;

    p.signal("TERM");
    let (status, mut p) = exit_of(p).await;
    assert!(status.success(), "{status:?}");
    eventually("the worker sees the delivery abandoned", || async {
        worker.abandoned() == 1
    })
    .await;

    worker.set_answer(Answer::Held(200));
    p.restart();
    let jobs = all_jobs(&p, "q").await;
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(
        (jobs[0]["id"].as_str(), jobs[0]["status"].as_str()),
        (Some(id.as_str()), Some("READY"))
    );
    let received = worker.wait_for(2).await;
    assert!(
        received
            .iter()
            .all(|r| r.header("x-svc-job-id") == Some(id.as_str())),
        "the same job, delivered again"
    );
    worker.release();
    eventually("the redelivery is recorded", || async {
        all_jobs(&p, "q").await.is_empty()
    })
    .await;
}
