//! Conformance of [`JobQueue`]: every queue adapter runs each case (see [`super`]).
//!
//! Times are explicit, so the suite steps leases and retries without sleeping. Each function
//! creates its own instances.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::{
    Error, Instance, InstanceConfig,
    ports::queue::{
        CarriedJob, ClaimedJob, IdempotencyKey, JobBody, JobEventKind, JobQueue, JobStatus,
        ListJobs, Outcome, QueueConfig, QueueDepth, Settlement,
    },
};

use super::instance;

const T0: i64 = 1_700_000_000_000;

async fn fresh(port: &dyn JobQueue) -> Instance {
    let inst = instance(InstanceConfig::Queue(QueueConfig::new(
        "http://127.0.0.1:9/",
    )));
    port.create_instance(&inst).await.expect("create_instance");
    inst
}

fn body(v: Value) -> JobBody {
    JobBody::from_document(v.as_object().expect("object")).expect("job body")
}

async fn put(port: &dyn JobQueue, inst: &Instance, v: Value, now: i64) -> String {
    port.enqueue(inst, &body(v), None, now)
        .await
        .expect("enqueue")
}

async fn ids(port: &dyn JobQueue, inst: &Instance, status: Option<JobStatus>) -> Vec<String> {
    let q = ListJobs {
        status,
        limit: 10_000,
        after: None,
    };
    port.list(inst, &q)
        .await
        .expect("list")
        .into_iter()
        .map(|r| r.id)
        .collect()
}

async fn claim(port: &dyn JobQueue, inst: &Instance, now: i64, max: usize) -> Vec<ClaimedJob> {
    port.claim(inst, now, now + 60_000, max)
        .await
        .expect("claim")
        .jobs
}

fn settle(job: &ClaimedJob, outcome: Outcome) -> Vec<Settlement> {
    vec![Settlement {
        id: job.id.clone(),
        lease: job.lease,
        outcome,
    }]
}

/// Enqueued jobs are listed READY with their record fields, oldest first.
pub async fn enqueue_then_list(port: &dyn JobQueue) {
    let q = fresh(port).await;
    let a = put(port, &q, json!({"type": "a", "n": 1.0, "2": true}), T0).await;
    let b = put(port, &q, json!({"type": "b"}), T0 + 5).await;
    assert_ne!(a, b, "ids are unique");
    let records = port
        .list(&q, &ListJobs::status(JobStatus::Ready))
        .await
        .expect("list");
    assert_eq!(records.len(), 2);
    let r = &records[0];
    assert_eq!(r.id, a);
    assert_eq!(r.status, JobStatus::Ready);
    assert_eq!(
        r.job.get(),
        r#"{"2":true,"type":"a","n":1}"#,
        "stored as delivered"
    );
    assert_eq!((r.attempts, r.error.as_deref()), (0, None));
    assert_eq!((r.created_ms, r.updated_ms), (T0, T0));
    assert_eq!(records[1].id, b);
    assert!(ids(port, &q, Some(JobStatus::Error)).await.is_empty());
    assert_eq!(ids(port, &q, None).await, vec![a, b]);
    port.drop_instance(&q).await.expect("drop");
}

/// `limit` and `after` page through jobs; `status` filters.
pub async fn listing_pages_and_filters(port: &dyn JobQueue) {
    let q = fresh(port).await;
    let mut all = Vec::new();
    for n in 0..5 {
        all.push(put(port, &q, json!({"n": n}), T0 + n).await);
    }
    let page = |after: Option<String>| ListJobs {
        status: None,
        limit: 2,
        after,
    };
    let first: Vec<String> = port
        .list(&q, &page(None))
        .await
        .expect("list")
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(first, all[..2]);
    let second: Vec<String> = port
        .list(&q, &page(Some(all[1].clone())))
        .await
        .expect("list")
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(second, all[2..4]);
    // Fail one job: it is listed under ERROR only.
    let jobs = claim(port, &q, T0 + 10, 1).await;
    port.settle(
        &q,
        T0 + 11,
        settle(&jobs[0], Outcome::Failed { error: "no".into() }),
    )
    .await
    .expect("settle");
    assert_eq!(
        ids(port, &q, Some(JobStatus::Error)).await,
        vec![all[0].clone()]
    );
    assert_eq!(ids(port, &q, Some(JobStatus::Ready)).await, all[1..]);
    port.drop_instance(&q).await.expect("drop");
}

/// A second enqueue with the same key is a conflict while the first job exists, in that
/// queue only; once the job is gone the key is free.
pub async fn idempotency_keys_conflict_while_the_job_exists(port: &dyn JobQueue) {
    let (q, other) = (fresh(port).await, fresh(port).await);
    let key: IdempotencyKey = "order-42".parse().expect("key");
    let first = port
        .enqueue(&q, &body(json!({"a": 1})), Some(&key), T0)
        .await
        .expect("first enqueue");
    match port
        .enqueue(&q, &body(json!({"a": 2})), Some(&key), T0)
        .await
    {
        Err(Error::Conflict(msg)) => assert!(msg.contains("order-42"), "{msg}"),
        other => panic!("second enqueue with the key: {other:?}"),
    }
    port.enqueue(&other, &body(json!({"a": 1})), Some(&key), T0)
        .await
        .expect("same key in another queue");
    // Still a conflict while the job is in ERROR.
    let jobs = claim(port, &q, T0, 1).await;
    port.settle(
        &q,
        T0,
        settle(&jobs[0], Outcome::Failed { error: "x".into() }),
    )
    .await
    .expect("settle");
    assert!(matches!(
        port.enqueue(&q, &body(json!({})), Some(&key), T0).await,
        Err(Error::Conflict(_))
    ));
    port.cancel(&q, &first).await.expect("cancel");
    port.enqueue(&q, &body(json!({"a": 3})), Some(&key), T0)
        .await
        .expect("key free again");
    // Jobs without keys never conflict.
    put(port, &q, json!({}), T0).await;
    put(port, &q, json!({}), T0).await;
    port.drop_instance(&q).await.expect("drop");
    port.drop_instance(&other).await.expect("drop");
}

/// Claims take due jobs oldest first, count attempts, and do not hand out leased jobs;
/// claimed jobs are still listed READY.
pub async fn claims_lease_jobs_oldest_first(port: &dyn JobQueue) {
    let q = fresh(port).await;
    let a = put(port, &q, json!({"n": 1}), T0).await;
    let b = put(port, &q, json!({"n": 2}), T0 + 1).await;
    let c = put(port, &q, json!({"n": 3}), T0 + 2).await;
    let got = port.claim(&q, T0 + 10, T0 + 1_000, 2).await.expect("claim");
    let claimed: Vec<&str> = got.jobs.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(claimed, [a.as_str(), b.as_str()]);
    assert_eq!(got.jobs[0].body, r#"{"n":1}"#);
    assert!(got.jobs.iter().all(|j| j.attempt == 1));
    assert_ne!(
        got.jobs[0].lease, got.jobs[1].lease,
        "each claim has its own token"
    );
    assert!(
        got.next_due_ms.is_some_and(|d| d <= T0 + 10),
        "a due job is left: {:?}",
        got.next_due_ms
    );
    let rest = claim(port, &q, T0 + 10, 5).await;
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].id, c);
    assert!(claim(port, &q, T0 + 20, 5).await.is_empty(), "all leased");
    assert_eq!(ids(port, &q, Some(JobStatus::Ready)).await.len(), 3);
    let empty = fresh(port).await;
    let none = port.claim(&empty, T0, T0 + 1, 5).await.expect("claim");
    assert!(none.jobs.is_empty() && none.next_due_ms.is_none());
    port.drop_instance(&q).await.expect("drop");
    port.drop_instance(&empty).await.expect("drop");
}

/// `Delivered` removes the job.
pub async fn delivered_jobs_are_gone(port: &dyn JobQueue) {
    let q = fresh(port).await;
    put(port, &q, json!({"n": 1}), T0).await;
    let jobs = claim(port, &q, T0, 1).await;
    let applied = port
        .settle(&q, T0 + 1, settle(&jobs[0], Outcome::Delivered))
        .await
        .expect("settle");
    assert_eq!(applied, 1);
    assert!(ids(port, &q, None).await.is_empty());
    port.drop_instance(&q).await.expect("drop");
}

/// A lease that runs out makes the job claimable again (at-least-once), and the old
/// claim's settlement is then ignored.
pub async fn an_expired_lease_makes_the_job_claimable_again(port: &dyn JobQueue) {
    let q = fresh(port).await;
    let id = put(port, &q, json!({"n": 1}), T0).await;
    let first = port.claim(&q, T0, T0 + 100, 1).await.expect("claim").jobs;
    assert!(
        port.claim(&q, T0 + 99, T0 + 199, 1)
            .await
            .expect("claim")
            .jobs
            .is_empty()
    );
    let second = port
        .claim(&q, T0 + 100, T0 + 200, 1)
        .await
        .expect("claim")
        .jobs;
    assert_eq!(second.len(), 1, "claimable once the lease expired");
    assert_eq!((second[0].id.as_str(), second[0].attempt), (id.as_str(), 2));
    let stale = port
        .settle(&q, T0 + 150, settle(&first[0], Outcome::Delivered))
        .await
        .expect("settle");
    assert_eq!(stale, 0, "the expired claim no longer holds the job");
    assert_eq!(ids(port, &q, None).await, vec![id.clone()]);
    let applied = port
        .settle(&q, T0 + 150, settle(&second[0], Outcome::Delivered))
        .await
        .expect("settle");
    assert_eq!(applied, 1);
    port.drop_instance(&q).await.expect("drop");
}

/// `RetryAt` releases the job with its error, due at the given time.
pub async fn retry_at_makes_the_job_due_later(port: &dyn JobQueue) {
    let q = fresh(port).await;
    put(port, &q, json!({"n": 1}), T0).await;
    let jobs = claim(port, &q, T0, 1).await;
    let out = Outcome::RetryAt {
        due_ms: T0 + 500,
        error: "connection refused".into(),
    };
    port.settle(&q, T0 + 1, settle(&jobs[0], out))
        .await
        .expect("settle");
    let records = port
        .list(&q, &ListJobs::status(JobStatus::Ready))
        .await
        .expect("list");
    assert_eq!(records[0].error.as_deref(), Some("connection refused"));
    assert_eq!((records[0].attempts, records[0].updated_ms), (1, T0 + 1));
    let early = port.claim(&q, T0 + 499, T0 + 999, 1).await.expect("claim");
    assert!(early.jobs.is_empty());
    assert_eq!(early.next_due_ms, Some(T0 + 500));
    let again = claim(port, &q, T0 + 500, 1).await;
    assert_eq!(again[0].attempt, 2);
    port.drop_instance(&q).await.expect("drop");
}

/// `Released` gives an unsent job back: due at once, the attempt not counted.
pub async fn released_jobs_are_due_at_once_without_an_attempt(port: &dyn JobQueue) {
    let q = fresh(port).await;
    let id = put(port, &q, json!({"n": 1}), T0).await;
    let jobs = claim(port, &q, T0, 1).await;
    port.settle(&q, T0 + 1, settle(&jobs[0], Outcome::Released))
        .await
        .expect("settle");
    let records = port
        .list(&q, &ListJobs::status(JobStatus::Ready))
        .await
        .expect("list");
    assert_eq!(
        (records[0].attempts, records[0].error.as_deref()),
        (0, None)
    );
    let again = claim(port, &q, T0 + 1, 1).await;
    assert_eq!((again[0].id.as_str(), again[0].attempt), (id.as_str(), 1));
    port.drop_instance(&q).await.expect("drop");
}

/// `Failed` makes the job ERROR with its error; `retry` makes it READY again with attempts
/// reset, and is refused for READY and unknown jobs.
pub async fn failed_jobs_go_to_error_and_retry_brings_them_back(port: &dyn JobQueue) {
    let q = fresh(port).await;
    let id = put(port, &q, json!({"n": 1}), T0).await;
    let jobs = claim(port, &q, T0, 1).await;
    let out = Outcome::Failed {
        error: "worker said no".into(),
    };
    port.settle(&q, T0 + 3, settle(&jobs[0], out))
        .await
        .expect("settle");
    let records = port
        .list(&q, &ListJobs::status(JobStatus::Error))
        .await
        .expect("list");
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].error.as_deref(), Some("worker said no"));
    assert_eq!((records[0].attempts, records[0].updated_ms), (1, T0 + 3));
    assert!(
        claim(port, &q, T0 + 10, 5).await.is_empty(),
        "ERROR jobs are not claimed"
    );

    port.retry(&q, &id, T0 + 20).await.expect("retry");
    let records = port
        .list(&q, &ListJobs::status(JobStatus::Ready))
        .await
        .expect("list");
    assert_eq!(records[0].id, id);
    assert_eq!(
        (records[0].attempts, records[0].error.as_deref()),
        (0, None)
    );
    assert_eq!(records[0].updated_ms, T0 + 20);
    assert!(matches!(
        port.retry(&q, &id, T0).await,
        Err(Error::Conflict(_))
    ));
    assert!(matches!(
        port.retry(&q, "nope", T0).await,
        Err(Error::NotFound(_))
    ));
    let again = claim(port, &q, T0 + 20, 1).await;
    assert_eq!((again[0].id.as_str(), again[0].attempt), (id.as_str(), 1));
    port.drop_instance(&q).await.expect("drop");
}

/// `restore` stores carried jobs under new ids with their status, attempts, error and
/// creation time: a READY one is claimable at once as its next attempt, an ERROR one only
/// after a retry.
pub async fn restored_jobs_keep_their_status_and_attempts(port: &dyn JobQueue) {
    let q = fresh(port).await;
    let old = put(port, &q, json!({"n": 0}), T0).await;
    let carried = |status, attempts, error: Option<&str>, n: i64| CarriedJob {
        body: body(json!({"n": n})),
        status,
        attempts,
        error: error.map(str::to_owned),
        created_ms: T0 - 1_000 * n,
    };
    let ready = port
        .restore(
            &q,
            &carried(JobStatus::Ready, 2, Some("timed out"), 1),
            T0 + 10,
        )
        .await
        .expect("restore READY");
    let failed = port
        .restore(
            &q,
            &carried(JobStatus::Error, 3, Some("worker said no"), 2),
            T0 + 11,
        )
        .await
        .expect("restore ERROR");
    assert!(ready != old && failed != old && ready != failed, "new ids");
    let all = port
        .list(
            &q,
            &ListJobs {
                status: None,
                limit: 10,
                after: None,
            },
        )
        .await
        .expect("list");
    let seen: Vec<_> = all
        .iter()
        .map(|r| {
            (
                r.id.clone(),
                r.status,
                r.attempts,
                r.error.clone(),
                r.created_ms,
                r.job.get().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (
                old.clone(),
                JobStatus::Ready,
                0,
                None,
                T0,
                r#"{"n":0}"#.to_owned()
            ),
            (
                ready.clone(),
                JobStatus::Ready,
                2,
                Some("timed out".to_owned()),
                T0 - 1_000,
                r#"{"n":1}"#.to_owned()
            ),
            (
                failed.clone(),
                JobStatus::Error,
                3,
                Some("worker said no".to_owned()),
                T0 - 2_000,
                r#"{"n":2}"#.to_owned()
            ),
        ],
        "restored jobs are listed after the queue's own, as they were"
    );
    let jobs = claim(port, &q, T0 + 20, 5).await;
    let claimed: Vec<_> = jobs.iter().map(|j| (j.id.as_str(), j.attempt)).collect();
    assert_eq!(
        claimed,
        [(old.as_str(), 1), (ready.as_str(), 3)],
        "the READY job is due at once as its next attempt; the ERROR one is not claimed"
    );
    port.retry(&q, &failed, T0 + 30).await.expect("retry");
    let again = claim(port, &q, T0 + 30, 5).await;
    assert_eq!(
        (again[0].id.as_str(), again[0].attempt),
        (failed.as_str(), 1)
    );
    port.drop_instance(&q).await.expect("drop");
}

/// `cancel` removes READY and ERROR jobs; unknown ids are NotFound.
pub async fn cancel_removes_ready_and_error_jobs(port: &dyn JobQueue) {
    let q = fresh(port).await;
    let ready = put(port, &q, json!({"n": 1}), T0).await;
    let failing = put(port, &q, json!({"n": 2}), T0 + 1).await;
    port.cancel(&q, &ready).await.expect("cancel READY");
    let jobs = claim(port, &q, T0 + 2, 1).await;
    assert_eq!(jobs[0].id, failing);
    port.settle(
        &q,
        T0 + 3,
        settle(&jobs[0], Outcome::Failed { error: "e".into() }),
    )
    .await
    .expect("settle");
    port.cancel(&q, &failing).await.expect("cancel ERROR");
    assert!(ids(port, &q, None).await.is_empty());
    assert!(matches!(
        port.cancel(&q, &ready).await,
        Err(Error::NotFound(_))
    ));
    port.drop_instance(&q).await.expect("drop");
}

/// A job cancelled while being delivered stays gone whatever the delivery reports.
pub async fn settling_a_cancelled_claim_changes_nothing(port: &dyn JobQueue) {
    let q = fresh(port).await;
    let id = put(port, &q, json!({"n": 1}), T0).await;
    let jobs = claim(port, &q, T0, 1).await;
    port.cancel(&q, &id).await.expect("cancel while claimed");
    let applied = port
        .settle(
            &q,
            T0 + 1,
            settle(
                &jobs[0],
                Outcome::Failed {
                    error: "late".into(),
                },
            ),
        )
        .await
        .expect("settle");
    assert_eq!(applied, 0);
    assert!(ids(port, &q, None).await.is_empty());
    port.drop_instance(&q).await.expect("drop");
}

/// Claims racing each other (as several nodes would) never return the same job.
pub async fn concurrent_claims_never_share_a_job(port: &dyn JobQueue) {
    let q = fresh(port).await;
    for n in 0..60 {
        put(port, &q, json!({"n": n}), T0).await;
    }
    let claims = (0..8).map(|_| port.claim(&q, T0, T0 + 60_000, 10));
    let mut seen = HashSet::new();
    let mut total = 0;
    for got in futures_join_all(claims).await {
        for job in got.expect("claim").jobs {
            total += 1;
            assert!(seen.insert(job.id.clone()), "{} claimed twice", job.id);
        }
    }
    assert_eq!(total, 60);
    port.drop_instance(&q).await.expect("drop");
}

/// After `drop_instance` the queue holds nothing and its operations answer NotFound.
pub async fn a_dropped_queue_holds_nothing(port: &dyn JobQueue) {
    let q = fresh(port).await;
    put(port, &q, json!({"n": 1}), T0).await;
    port.drop_instance(&q).await.expect("drop");
    assert!(matches!(
        port.claim(&q, T0, T0 + 1, 1).await,
        Err(Error::NotFound(_))
    ));
    assert!(matches!(
        port.enqueue(&q, &body(json!({})), None, T0).await,
        Err(Error::NotFound(_))
    ));
    // Created again (as a new instance would be), it starts empty.
    port.create_instance(&q).await.expect("create again");
    assert!(ids(port, &q, None).await.is_empty());
    port.drop_instance(&q).await.expect("drop");
}

/// `depth` counts READY jobs (those being delivered among them) and ERROR jobs, of this
/// queue only; a dropped queue is NotFound.
pub async fn depth_counts_jobs_by_state(port: &dyn JobQueue) {
    let q = fresh(port).await;
    let other = fresh(port).await;
    let depth = |ready, error| QueueDepth { ready, error };
    assert_eq!(port.depth(&q).await.expect("depth"), depth(0, 0));
    for n in 0..4 {
        put(port, &q, json!({ "n": n }), T0 + n).await;
    }
    put(port, &other, json!({}), T0).await;
    let jobs = claim(port, &q, T0 + 10, 3).await;
    assert_eq!(jobs.len(), 3);
    assert_eq!(
        port.depth(&q).await.expect("depth"),
        depth(4, 0),
        "claimed jobs are READY"
    );
    let failed = Outcome::Failed { error: "no".into() };
    let mut outcomes = settle(&jobs[0], failed);
    outcomes.extend(settle(&jobs[1], Outcome::Delivered));
    port.settle(&q, T0 + 11, outcomes).await.expect("settle");
    assert_eq!(port.depth(&q).await.expect("depth"), depth(2, 1));
    assert_eq!(port.depth(&other).await.expect("depth"), depth(1, 0));
    port.drop_instance(&q).await.expect("drop");
    assert!(matches!(port.depth(&q).await, Err(Error::NotFound(_))));
    port.drop_instance(&other).await.expect("drop");
}

/// Every enqueue, delivery, failure, cancellation and retry that changed a job is one
/// event, numbered from 1 in order; claims, postponed retries, releases and settlements
/// that no longer hold their job are none. Pages resume after any position; a position
/// beyond the head or compacted away is gone.
pub async fn job_changes_are_events_in_order(port: &dyn JobQueue) {
    let q = fresh(port).await;
    let other = fresh(port).await;
    assert_eq!(port.event_head(&q).await.expect("head"), 0);
    assert!(
        port.events(&q, 0, 100)
            .await
            .expect("events")
            .changes
            .is_empty()
    );

    let a = put(port, &q, json!({"n": 1}), T0).await;
    let b = put(port, &q, json!({"n": 2}), T0).await;
    put(port, &other, json!({"n": 3}), T0).await;
    let jobs = claim(port, &q, T0, 2).await;
    let (ja, jb) = match jobs.as_slice() {
        [x, y] if x.id == a => (x.clone(), y.clone()),
        [x, y] => (y.clone(), x.clone()),
        _ => panic!("two claimed"),
    };
    port.settle(
        &q,
        T0 + 1,
        settle(
            &ja,
            Outcome::RetryAt {
                due_ms: T0 + 10,
                error: "later".into(),
            },
        ),
    )
    .await
    .expect("postpone");
    port.settle(
        &q,
        T0 + 1,
        settle(&jb, Outcome::Failed { error: "no".into() }),
    )
    .await
    .expect("fail");
    port.retry(&q, &b, T0 + 2).await.expect("retry");
    port.cancel(&q, &b).await.expect("cancel");
    // Settling b's old claim again changes nothing: no event.
    port.settle(&q, T0 + 3, settle(&jb, Outcome::Delivered))
        .await
        .expect("stale settle");
    let again = claim(port, &q, T0 + 10, 1).await;
    port.settle(&q, T0 + 11, settle(&again[0], Outcome::Delivered))
        .await
        .expect("deliver");

    let page = port.events(&q, 0, 100).await.expect("events");
    let seen: Vec<(u64, &str, JobEventKind)> = page
        .changes
        .iter()
        .map(|e| (e.seq, e.id.as_str(), e.event))
        .collect();
    assert_eq!(
        seen,
        vec![
            (1, a.as_str(), JobEventKind::Ready),
            (2, b.as_str(), JobEventKind::Ready),
            (3, b.as_str(), JobEventKind::Error),
            (4, b.as_str(), JobEventKind::Retried),
            (5, b.as_str(), JobEventKind::Cancelled),
            (6, a.as_str(), JobEventKind::Delivered),
        ]
    );
    assert_eq!(page.changes[2].error.as_deref(), Some("no"));
    assert_eq!(page.changes[0].error, None);
    assert_eq!(page.last_seq, 6);
    assert_eq!(port.event_head(&q).await.expect("head"), 6);
    let rest = port.events(&q, 4, 1).await.expect("resume");
    assert_eq!(rest.changes.len(), 1);
    assert_eq!(rest.changes[0].seq, 5);
    assert_eq!(rest.last_seq, 5);
    let none = port.events(&q, 6, 100).await.expect("at the head");
    assert!(none.changes.is_empty());
    assert_eq!(none.last_seq, 6);
    assert!(matches!(port.events(&q, 7, 100).await, Err(Error::Gone(_))));
    assert_eq!(port.event_head(&other).await.expect("other's head"), 1);

    // Compaction removes a prefix of every log; reading from before it is gone.
    let removed = port.compact_events(i64::MAX).await.expect("compact");
    assert!(removed >= 7, "{removed}");
    assert!(matches!(port.events(&q, 0, 100).await, Err(Error::Gone(_))));
    let at_head = port
        .events(&q, 6, 100)
        .await
        .expect("the head is still a position");
    assert!(at_head.changes.is_empty());
    put(port, &q, json!({"n": 4}), T0 + 20).await;
    let next = port.events(&q, 6, 100).await.expect("after compaction");
    assert_eq!(next.changes.len(), 1);
    assert_eq!(next.changes[0].seq, 7, "numbers are never reused");

    port.drop_instance(&q).await.expect("drop");
    assert!(matches!(
        port.events(&q, 0, 100).await,
        Err(Error::NotFound(_))
    ));
    assert!(matches!(port.event_head(&q).await, Err(Error::NotFound(_))));
}

/// Await every future, polling them together (no runtime dependency in core).
async fn futures_join_all<F: std::future::Future>(futs: impl Iterator<Item = F>) -> Vec<F::Output> {
    use std::{
        pin::Pin,
        task::{Context, Poll},
    };
    let mut futs: Vec<Pin<Box<F>>> = futs.map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(move |cx: &mut Context<'_>| {
        let mut pending = false;
        for (f, slot) in futs.iter_mut().zip(out.iter_mut()) {
            if slot.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *slot = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(out.iter_mut().filter_map(Option::take).collect())
        }
    })
    .await
}
