//! The PostgreSQL queue against a real server, beyond the conformance suites
//! (`conformance.rs`): two queues on one schema (two nodes): claims split between them,
//! leases that run out, stale settlements, and wake-ups across nodes. Each test has a
//! schema of its own (`quintet-engine-test`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    collections::HashSet,
    sync::{Arc, Weak},
    time::Duration,
};

use quintet_core::{
    Clock, Instance, InstanceConfig, InstanceId, SystemClock, conformance,
    ports::{
        Lifecycle,
        queue::{
            DueListener, JobBody, JobQueue, JobStatus, ListJobs, Outcome, QueueConfig, Settlement,
        },
    },
};
use quintet_engine_test::PgSchema;
use quintet_postgres::{PgConfig, PgDatabase, PgJobQueue, queue::POLL_EVERY};
use serde_json::json;
use tokio::sync::mpsc;

async fn open(pg: &PgSchema) -> PgJobQueue {
    let db = PgDatabase::connect(&PgConfig::new(pg.url()).unwrap())
        .await
        .unwrap();
    PgJobQueue::open(db, Arc::new(SystemClock)).await.unwrap()
}

fn queue_config() -> InstanceConfig {
    InstanceConfig::Queue(QueueConfig::new("http://127.0.0.1:9/"))
}

async fn fresh(q: &PgJobQueue) -> Instance {
    let inst = conformance::instance(queue_config());
    q.create_instance(&inst).await.unwrap();
    inst
}

fn body(n: usize) -> JobBody {
    JobBody::from_document(json!({ "n": n }).as_object().unwrap()).unwrap()
}

fn settle(job: &quintet_core::ports::queue::ClaimedJob, outcome: Outcome) -> Vec<Settlement> {
    vec![Settlement {
        id: job.id.clone(),
        lease: job.lease,
        outcome,
    }]
}

#[tokio::test]
async fn migrations_apply_once_and_a_second_node_opens_the_same_tables() {
    let Some(pg) = quintet_engine_test::postgres("queue_migrations").await else {
        return;
    };
    let (a, b) = tokio::join!(open(&pg), open(&pg));
    assert_ne!(a.node(), b.node(), "each node has an id of its own");
    let inst = fresh(&a).await;
    let id = a.enqueue(&inst, &body(1), None, 1_000).await.unwrap();
    let seen = b
        .list(&inst, &ListJobs::status(JobStatus::Ready))
        .await
        .unwrap();
    assert_eq!(seen[0].id, id, "the other node sees the job");
}

#[tokio::test]
async fn two_nodes_claiming_concurrently_never_claim_the_same_job() {
    let Some(pg) = quintet_engine_test::postgres("queue_two_nodes_claim").await else {
        return;
    };
    let (a, b) = (open(&pg).await, open(&pg).await);
    let inst = fresh(&a).await;
    let mut all = HashSet::new();
    for n in 0..200 {
        let node = if n % 2 == 0 { &a } else { &b };
        all.insert(node.enqueue(&inst, &body(n), None, 1_000).await.unwrap());
    }
    let now = 2_000;
    let mut seen = HashSet::new();
    loop {
        // Four claims at once on each node, as busy pumps would.
        let claims = (0..8).map(|i| {
            let node = if i % 2 == 0 { &a } else { &b };
            node.claim(&inst, now, now + 60_000, 7)
        });
        let mut got = 0;
        for claim in futures_util::future::join_all(claims).await {
            for job in claim.unwrap().jobs {
                got += 1;
                assert_eq!(job.attempt, 1);
                assert!(seen.insert(job.id.clone()), "{} claimed twice", job.id);
            }
        }
        if got == 0 {
            break;
        }
    }
    assert_eq!(seen, all, "every job claimed once");
}

#[tokio::test]
async fn an_expired_lease_is_recovered_and_the_job_delivered_again() {
    let Some(pg) = quintet_engine_test::postgres("queue_expired_lease").await else {
        return;
    };
    let (a, b) = (open(&pg).await, open(&pg).await);
    let inst = fresh(&a).await;
    let id = a.enqueue(&inst, &body(1), None, 1_000).await.unwrap();
    let first = a.claim(&inst, 1_000, 1_100, 5).await.unwrap();
    assert_eq!(first.jobs.len(), 1);
    assert_eq!(
        first.next_due_ms,
        Some(1_100),
        "due again when the lease runs out"
    );
    // Node A dies holding the lease. Before it runs out, nobody can take the job …
    let early = b.claim(&inst, 1_099, 2_000, 5).await.unwrap();
    assert!(early.jobs.is_empty());
    assert_eq!(b.recover(1_099).await.unwrap(), 0, "a live lease is kept");
    // … after, recovery releases it and node B delivers the job again.
    assert_eq!(b.recover(1_100).await.unwrap(), 1);
    let again = b.claim(&inst, 1_100, 2_000, 5).await.unwrap();
    assert_eq!(again.jobs.len(), 1);
    assert_eq!(
        (again.jobs[0].id.as_str(), again.jobs[0].attempt),
        (id.as_str(), 2)
    );
    assert_eq!(
        b.settle(&inst, 1_200, settle(&again.jobs[0], Outcome::Delivered))
            .await
            .unwrap(),
        1
    );
    assert!(
        a.list(&inst, &ListJobs::status(JobStatus::Ready))
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_settlement_with_a_stale_lease_is_ignored() {
    let Some(pg) = quintet_engine_test::postgres("queue_stale_settle").await else {
        return;
    };
    let (a, b) = (open(&pg).await, open(&pg).await);
    let inst = fresh(&a).await;
    let id = a.enqueue(&inst, &body(1), None, 1_000).await.unwrap();
    let old = a.claim(&inst, 1_000, 1_100, 1).await.unwrap().jobs;
    // A's lease ran out (a long pause, say) and B took the job.
    let new = b.claim(&inst, 1_100, 9_000, 1).await.unwrap().jobs;
    assert_eq!(new[0].id, id);
    assert_ne!(old[0].lease, new[0].lease);
    for outcome in [
        Outcome::Delivered,
        Outcome::Failed {
            error: "late".into(),
        },
        Outcome::Released,
        Outcome::RetryAt {
            due_ms: 5_000,
            error: "late".into(),
        },
    ] {
        assert_eq!(
            a.settle(&inst, 1_200, settle(&old[0], outcome))
                .await
                .unwrap(),
            0,
            "A's settlement is stale"
        );
    }
    let listed = b
        .list(&inst, &ListJobs::status(JobStatus::Ready))
        .await
        .unwrap();
    assert_eq!((listed.len(), listed[0].attempts), (1, 2), "unchanged by A");
    assert!(
        b.claim(&inst, 1_200, 9_000, 1)
            .await
            .unwrap()
            .jobs
            .is_empty(),
        "B still holds it"
    );
    let failed = Outcome::Failed {
        error: "worker said no".into(),
    };
    assert_eq!(
        b.settle(&inst, 1_300, settle(&new[0], failed))
            .await
            .unwrap(),
        1
    );
    let listed = a
        .list(&inst, &ListJobs::status(JobStatus::Error))
        .await
        .unwrap();
    assert_eq!(listed[0].error.as_deref(), Some("worker said no"));
}

/// Records the queues a node is told about.
struct Heard(mpsc::UnboundedSender<InstanceId>);

impl DueListener for Heard {
    fn due(&self, queue: InstanceId) {
        let _ = self.0.send(queue);
    }
}

fn listen(q: &PgJobQueue) -> (Arc<Heard>, mpsc::UnboundedReceiver<InstanceId>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let heard = Arc::new(Heard(tx));
    let weak: Weak<Heard> = Arc::downgrade(&heard);
    q.subscribe(weak);
    (heard, rx)
}

/// Wait up to `within` for `queue` to be announced.
async fn hears(rx: &mut mpsc::UnboundedReceiver<InstanceId>, queue: InstanceId, within: Duration) {
    tokio::time::timeout(within, async {
        while let Some(id) = rx.recv().await {
            if id == queue {
                return;
            }
        }
        panic!("the queue stopped announcing");
    })
    .await
    .unwrap_or_else(|_| panic!("queue {queue} not announced within {within:?}"));
}

#[tokio::test]
async fn an_enqueue_through_one_node_wakes_the_others() {
    let Some(pg) = quintet_engine_test::postgres("queue_wake").await else {
        return;
    };
    let (a, b) = (open(&pg).await, open(&pg).await);
    let (_keep, mut heard) = listen(&b);
    let inst = fresh(&a).await;
    let now = SystemClock.now_ms();
    a.enqueue(&inst, &body(1), None, now).await.unwrap();
    // Well within the poll interval: the notification, not the poll.
    hears(&mut heard, inst.id, POLL_EVERY / 2).await;

    // A retry through A wakes B too.
    let job = b.claim(&inst, now, now + 60_000, 1).await.unwrap().jobs;
    let failed = Outcome::Failed { error: "no".into() };
    b.settle(&inst, now, settle(&job[0], failed)).await.unwrap();
    while heard.try_recv().is_ok() {}
    a.retry(&inst, &job[0].id, now).await.unwrap();
    hears(&mut heard, inst.id, POLL_EVERY / 2).await;

    // A node shutting down gives its claimed job back: another node hears of it.
    let job = a.claim(&inst, now, now + 60_000, 1).await.unwrap().jobs;
    while heard.try_recv().is_ok() {}
    a.settle(&inst, now, settle(&job[0], Outcome::Released))
        .await
        .unwrap();
    hears(&mut heard, inst.id, POLL_EVERY / 2).await;
}

#[tokio::test]
async fn a_lease_running_out_wakes_a_node_by_polling() {
    let Some(pg) = quintet_engine_test::postgres("queue_poll").await else {
        return;
    };
    let (a, b) = (open(&pg).await, open(&pg).await);
    let inst = fresh(&a).await;
    let now = SystemClock.now_ms();
    a.enqueue(&inst, &body(1), None, now).await.unwrap();
    let held = a.claim(&inst, now, now + 500, 1).await.unwrap().jobs;
    assert_eq!(held.len(), 1);
    // A stops (nothing announces the lease running out); B's poll finds the job.
    a.close().await.unwrap();
    drop(a);
    let (_keep, mut heard) = listen(&b);
    tokio::time::sleep(Duration::from_millis(500)).await;
    hears(&mut heard, inst.id, POLL_EVERY * 3).await;
    let again = b
        .claim(
            &inst,
            SystemClock.now_ms(),
            SystemClock.now_ms() + 60_000,
            1,
        )
        .await
        .unwrap();
    assert_eq!(again.jobs[0].id, held[0].id);
}

#[tokio::test]
async fn the_sweep_keeps_queues_the_registry_in_the_schema_records() {
    let Some(pg) = quintet_engine_test::postgres("queue_sweep_beside_registry").await else {
        return;
    };
    let db = PgDatabase::connect(&PgConfig::new(pg.url()).unwrap())
        .await
        .unwrap();
    let registry = quintet_postgres::PgRegistry::open(
        db.clone(),
        Arc::new(SystemClock),
        quintet_core::keyring::Keyring::for_tests(),
    )
    .await
    .unwrap();
    let q = PgJobQueue::open(db, Arc::new(SystemClock)).await.unwrap();
    let name = conformance::unique_name("q");
    let recorded = quintet_core::ports::registry::Registry::create_instance(
        &registry,
        &quintet_core::AppName::domain(),
        &name,
        queue_config(),
    )
    .await
    .unwrap();
    q.create_instance(&recorded).await.unwrap();
    let orphan = fresh(&q).await;
    // A sweep whose listing predates `recorded` (created through another node meanwhile).
    assert_eq!(
        q.sweep(&quintet_core::ports::Keep::only([])).await.unwrap(),
        1,
        "only the orphan"
    );
    q.enqueue(&recorded, &body(1), None, 1_000).await.unwrap();
    assert!(matches!(
        q.enqueue(&orphan, &body(1), None, 1_000).await,
        Err(quintet_core::Error::NotFound(_))
    ));
}

#[tokio::test]
async fn a_dropped_queue_is_named_in_every_answer() {
    let Some(pg) = quintet_engine_test::postgres("queue_dropped_named").await else {
        return;
    };
    let q = open(&pg).await;
    let inst = fresh(&q).await;
    let id = q.enqueue(&inst, &body(1), None, 1_000).await.unwrap();
    q.drop_instance(&inst).await.unwrap();
    let expected = format!("queue instance \"{}\" does not exist", inst.name);
    let answers = [
        q.list(&inst, &ListJobs::status(JobStatus::Ready))
            .await
            .map(|_| ()),
        q.retry(&inst, &id, 1_000).await,
        q.cancel(&inst, &id).await,
        q.enqueue(&inst, &body(2), None, 1_000).await.map(|_| ()),
        q.claim(&inst, 1_000, 2_000, 1).await.map(|_| ()),
    ];
    for answer in answers {
        match answer {
            Err(quintet_core::Error::NotFound(msg)) => assert_eq!(msg, expected),
            other => panic!("{other:?}"),
        }
    }
}
