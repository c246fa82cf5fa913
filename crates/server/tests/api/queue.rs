//! The queue: enqueue, list, retry, cancel, and delivery to real workers over loopback.

use std::{
    io::{BufRead, BufReader, Write},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::Duration,
};

use quintet_core::{
    ManualClock,
    delivery::{verify_signature, verify_signature_with_id},
};
use quintet_testkit::{Answer, PrivateTargetsArg, TestServer, Worker, eventually};
use reqwest::Method;
use serde_json::{Value, json};

/// A port nothing listens on (bound, then released).
async fn closed_port() -> u16 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap().port()
}

async fn server_with_fast_retries() -> TestServer {
    TestServer::builder()
        .args(|a| a.queue_backoff_ms = Some(10))
        .start()
        .await
}

async fn jobs(s: &TestServer, path: &str) -> Vec<Value> {
    let r = s.get(path).await.expect(200);
    assert_eq!(r.body["ok"], true);
    r.body["jobs"].as_array().unwrap().clone()
}

async fn ready(s: &TestServer, q: &str) -> Vec<Value> {
    jobs(s, &format!("/queue/{q}?status=READY")).await
}

async fn errors(s: &TestServer, q: &str) -> Vec<Value> {
    jobs(s, &format!("/queue/{q}/_jobs?status=ERROR")).await
}

async fn enqueue(s: &TestServer, q: &str, job: Value) -> String {
    let r = s.post(&format!("/queue/{q}"), job).await.expect(201);
    let id = r.body["id"].as_str().unwrap().to_owned();
    assert_eq!(r.body, json!({"ok": true, "id": id}));
    id
}

async fn enqueue_text(s: &TestServer, q: &str, text: &str) -> String {
    let req = s
        .request(Method::POST, &format!("/queue/{q}"))
        .header("content-type", "application/json")
        .body(text.to_owned());
    let r = s.send(req).await.expect(201);
    r.body["id"].as_str().unwrap().to_owned()
}

async fn until_empty(s: &TestServer, q: &str) {
    eventually("the queue is empty", || async {
        jobs(s, &format!("/queue/{q}/_jobs")).await.is_empty()
    })
    .await;
}

#[tokio::test]
async fn a_job_is_delivered_signed_in_javascript_form_and_then_gone() {
    let s = TestServer::start().await;
    let w = Worker::start(Answer::Status(200, String::new())).await;
    s.create(
        "queue",
        "mail",
        Some(json!({"target": w.url(), "secret": "s3cret"})),
    )
    .await;
    let id = enqueue_text(
        &s,
        "mail",
        r#"{"type":"welcome","n":100.0,"10":"x","big":1e21}"#,
    )
    .await;
    assert_eq!(id.len(), 26);
    let got = w.wait_for(1).await;
    let d = &got[0];
    assert_eq!(d.body, r#"{"10":"x","type":"welcome","n":100,"big":1e+21}"#);
    assert_eq!(d.header("content-type"), Some("application/json"));
    assert_eq!(d.header("x-svc-job-id"), Some(id.as_str()));
    let sig = d.header("x-svc-signature").unwrap();
    let now = quintet_core::Clock::now_ms(&quintet_core::SystemClock);
    assert!(
        verify_signature("s3cret", sig, d.body.as_bytes(), now, 60_000),
        "{sig}"
    );
    until_empty(&s, "mail").await;
    assert!(ready(&s, "mail").await.is_empty());
    assert_eq!(w.received().len(), 1, "delivered once");
}

/// `"signJobId": true` signs the job's id too: the delivery cannot be replayed under
/// another id. Asking for it without a secret is refused.
#[tokio::test]
async fn a_queue_may_sign_the_job_id_too() {
    let s = TestServer::start().await;
    let w = Worker::start(Answer::Status(200, String::new())).await;
    let r = s
        .put(
            "/queue/q",
            Some(json!({"target": w.url(), "signJobId": true})),
        )
        .await
        .expect(422);
    assert_eq!(
        r.body["msg"],
        "\"signJobId\" needs a \"secret\" to sign with"
    );
    s.create(
        "queue",
        "q",
        Some(json!({"target": w.url(), "secret": "k", "signJobId": true})),
    )
    .await
    .expect(201);
    let id = enqueue(&s, "q", json!({"a": 1})).await;
    let got = w.wait_for(1).await;
    let sig = got[0].header("x-svc-signature").unwrap();
    assert!(sig.contains(&format!(",id={id},")), "{sig}");
    let now = quintet_core::Clock::now_ms(&quintet_core::SystemClock);
    let body = got[0].body.as_bytes();
    assert!(verify_signature_with_id("k", sig, &id, body, now, 60_000));
    assert!(!verify_signature_with_id(
        "k",
        sig,
        "another-id",
        body,
        now,
        60_000
    ));
}

#[tokio::test]
async fn without_a_secret_no_signature_is_sent() {
    let s = TestServer::start().await;
    let w = Worker::start(Answer::Status(204, String::new())).await;
    let r = s
        .create("queue", "plain", Some(json!({"target": w.url()})))
        .await
        .expect(201);
    // The answer is the spec's, with advice in a header.
    assert_eq!(r.body, json!({"ok": true}));
    assert!(
        r.header("x-quintet-warning")
            .is_some_and(|w| w.contains("no secret")),
        "{:?}",
        r.header("x-quintet-warning")
    );
    let signed = s
        .create(
            "queue",
            "signed",
            Some(json!({"target": w.url(), "secret": "k"})),
        )
        .await
        .expect(201);
    assert_eq!(signed.header("x-quintet-warning"), None);
    enqueue(&s, "plain", json!({"a": 1})).await;
    let got = w.wait_for(1).await;
    assert_eq!(got[0].header("x-svc-signature"), None);
    assert!(got[0].header("x-svc-job-id").is_some());
    until_empty(&s, "plain").await;
}

#[tokio::test]
async fn the_signature_time_is_the_clock_at_the_attempt() {
    let clock = Arc::new(ManualClock::new(1_800_000_000_000));
    let s = TestServer::builder().clock(clock.clone()).start().await;
    let w = Worker::start(Answer::Status(200, String::new())).await;
    s.create(
        "queue",
        "q",
        Some(json!({"target": w.url(), "secret": "k"})),
    )
    .await;
    clock.set(1_800_000_012_345);
    enqueue(&s, "q", json!({"b": 2})).await;
    let got = w.wait_for(1).await;
    let sig = got[0].header("x-svc-signature").unwrap();
    assert!(sig.starts_with("t=1800000012345,sig="), "{sig}");
    let mac = quintet_core::hmac::sign(b"k", &[b"1800000012345.", got[0].body.as_bytes()]);
    assert_eq!(
        sig,
        format!("t=1800000012345,sig={}", quintet_core::hmac::to_hex(&mac))
    );
}

#[tokio::test]
async fn enqueue_refuses_what_is_not_a_job() {
    let s = TestServer::start().await;
    s.create("queue", "q", Some(json!({"target": "http://127.0.0.1:9/"})))
        .await;
    let r = s.post("/queue/q", json!([1, 2])).await.expect(422);
    assert_eq!(
        r.body,
        json!({"ok": false, "status": 422, "msg": "a job must be a JSON object, e.g. {\"type\":\"welcome-email\",\"to\":\"ann@example.com\"}; got an array"})
    );
    s.post("/queue/q", json!("text")).await.expect(422);
    s.post("/queue/q", json!(null)).await.expect(422);
    let r = s
        .send(
            s.request(Method::POST, "/queue/q")
                .header("content-type", "application/json")
                .body("{\"a\":"),
        )
        .await
        .expect(400);
    assert_eq!(r.body["status"], 400);
    let r = s.post("/queue/nope", json!({"a": 1})).await.expect(404);
    assert_eq!(
        r.body,
        json!({"ok": false, "status": 404, "msg": "queue instance \"nope\" does not exist; create it with PUT /queue/nope"})
    );
    let big = json!({"blob": "x".repeat(1024 * 1024)});
    let r = s.post("/queue/q", big).await.expect(413);
    assert_eq!(
        r.body,
        json!({"ok": false, "status": 413, "msg": "the job is 1048587 bytes of JSON; a job may be at most 1048576 bytes (store large data elsewhere and enqueue a reference to it)"})
    );
    let r = s
        .send(
            s.request(Method::POST, "/queue/q")
                .header("idempotency-key", "x".repeat(300))
                .json(&json!({})),
        )
        .await
        .expect(422);
    assert_eq!(
        r.body,
        json!({"ok": false, "status": 422, "msg": "the Idempotency-Key header must be 1 to 255 printable ASCII characters"})
    );
    // Nothing was stored by the refusals.
    assert!(jobs(&s, "/queue/q/_jobs").await.is_empty());
}

#[tokio::test]
async fn an_idempotency_key_conflicts_while_its_job_exists() {
    let s = TestServer::start().await;
    let w = Worker::start(Answer::Status(500, "down".into())).await;
    s.create("queue", "q", Some(json!({"target": w.url()})))
        .await;
    let keyed = |body: Value| {
        s.request(Method::POST, "/queue/q")
            .header("Idempotency-Key", "order-7")
            .json(&body)
    };
    let first = s.send(keyed(json!({"n": 1}))).await.expect(201);
    let id = first.body["id"].as_str().unwrap().to_owned();
    let r = s.send(keyed(json!({"n": 2}))).await.expect(409);
    assert_eq!(
        r.body,
        json!({"ok": false, "status": 409, "msg": format!("a job with Idempotency-Key \"order-7\" is already queued (id \"{id}\"); the key can be used again once that job is gone")})
    );
    // Still taken once the job failed (ERROR), free once it is cancelled.
    eventually("the job failed", || async {
        errors(&s, "q").await.len() == 1
    })
    .await;
    s.send(keyed(json!({"n": 3}))).await.expect(409);
    s.post(&format!("/queue/q/{id}/_cancel"), json!({}))
        .await
        .expect(200);
    s.send(keyed(json!({"n": 4}))).await.expect(201);
}

#[tokio::test]
async fn listing_needs_a_valid_status() {
    let s = TestServer::start().await;
    s.create("queue", "q", Some(json!({"target": "http://127.0.0.1:9/"})))
        .await;
    let r = s.get("/queue/q").await.expect(422);
    assert_eq!(
        r.body,
        json!({"ok": false, "status": 422, "msg": "the query parameter status is required: use status=READY or status=ERROR"})
    );
    let r = s.get("/queue/q?status=DONE").await.expect(422);
    assert_eq!(
        r.body,
        json!({"ok": false, "status": 422, "msg": "status \"DONE\" is not a job status: use status=READY or status=ERROR"})
    );
    let r = s.get("/queue/q/_jobs?limit=0").await.expect(422);
    assert_eq!(
        r.body,
        json!({"ok": false, "status": 422, "msg": "limit \"0\" must be a whole number from 1 to 10000"})
    );
    s.get("/queue/q?status=ready").await.expect(200);
    s.get("/queue/missing?status=READY").await.expect(404);
}

#[tokio::test]
async fn the_application_form_has_its_own_queues_and_deleting_the_app_stops_them() {
    let s = TestServer::builder()
        .args(|a| a.queue_private_targets = Some(PrivateTargetsArg::Allow))
        .start()
        .await;
    let key = s.new_app().await;
    let app = key.app.clone();
    let w = Worker::start(Answer::Hang).await;
    let as_app = |method: Method, path: String| s.as_app(&key, s.request(method, &path));
    s.send(
        as_app(Method::PUT, format!("/{app}/queue/jobs"))
            .json(&json!({"target": w.url(), "timeout": 600})),
    )
    .await
    .expect(201);
    s.send(as_app(Method::POST, format!("/{app}/queue/jobs")).json(&json!({"n": 1})))
        .await
        .expect(201);
    w.wait_for(1).await;
    let r = s
        .send(as_app(
            Method::GET,
            format!("/{app}/queue/jobs?status=READY"),
        ))
        .await
        .expect(200);
    assert_eq!(r.body, json!({"ok": true, "jobs": [{"n": 1}]}));
    // The domain form's queue of that name is another one, which does not exist.
    s.get("/queue/jobs?status=READY").await.expect(404);
    // Deleting the application cuts its deliveries off at once, not after the timeout.
    s.admin(Method::DELETE, &format!("/_admin/apps/{app}"), None)
        .await
        .expect(200);
    eventually("the delivery in flight was abandoned", || async {
        w.abandoned() == 1
    })
    .await;
}

#[tokio::test]
async fn lists_page_with_limit_and_after() {
    let s = TestServer::start().await;
    let w = Worker::start(Answer::Hang).await;
    s.create(
        "queue",
        "q",
        Some(json!({"target": w.url(), "concurrency": 1})),
    )
    .await;
    let mut ids = Vec::new();
    for n in 0..5 {
        ids.push(enqueue(&s, "q", json!({"n": n})).await);
    }
    assert_eq!(
        jobs(&s, "/queue/q?status=READY&limit=2").await,
        vec![json!({"n": 0}), json!({"n": 1})]
    );
    let page = jobs(&s, &format!("/queue/q/_jobs?limit=2&after={}", ids[1])).await;
    let page: Vec<&str> = page.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(page, [ids[2].as_str(), ids[3].as_str()]);
    let rest = jobs(&s, &format!("/queue/q?status=READY&after={}", ids[3])).await;
    assert_eq!(rest, vec![json!({"n": 4})]);
}

#[tokio::test]
async fn a_failing_worker_puts_the_job_in_error_with_its_answer() {
    let s = TestServer::start().await;
    let w = Worker::start(Answer::Status(422, "bad payload: no \"to\"".into())).await;
    s.create("queue", "q", Some(json!({"target": w.url()})))
        .await;
    let id = enqueue(&s, "q", json!({"type": "email"})).await;
    eventually("the job failed", || async {
        errors(&s, "q").await.len() == 1
    })
    .await;
    assert_eq!(
        jobs(&s, "/queue/q?status=ERROR").await,
        vec![json!({"type": "email"})]
    );
    assert!(ready(&s, "q").await.is_empty());
    let rec = &errors(&s, "q").await[0];
    assert_eq!(rec["id"], id.as_str());
    assert_eq!(rec["status"], "ERROR");
    assert_eq!(rec["job"], json!({"type": "email"}));
    assert_eq!(rec["attempts"], 1);
    assert_eq!(rec["error"], "bad payload: no \"to\"");
    for field in ["created", "updated"] {
        let t = rec[field].as_str().unwrap();
        assert!(t.len() == 24 && t.ends_with('Z'), "{field}: {t}");
    }
    assert_eq!(w.received().len(), 1, "4xx is not retried");

    // Retry: READY again, delivered at once, gone after a 200.
    w.set_answer(Answer::Status(200, String::new()));
    let r = s
        .post(&format!("/queue/q/{id}/_retry"), json!({}))
        .await
        .expect(200);
    assert_eq!(r.body, json!({"ok": true}));
    w.wait_for(2).await;
    until_empty(&s, "q").await;

    // The metrics count both deliveries of the queue by outcome.
    let metrics = s.get("/_metrics").await.expect(200).text;
    for outcome in ["failed", "delivered"] {
        let end = format!("/q\",outcome=\"{outcome}\"}} 1");
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with("quintet_queue_deliveries_total{queue=\"")
                    && l.ends_with(&end)),
            "{outcome} in\n{metrics}"
        );
    }
}

#[tokio::test]
async fn the_recorded_answer_is_at_most_64_kib() {
    let s = TestServer::start().await;
    let long = "é".repeat(50_000); // 100,000 bytes
    let w = Worker::start(Answer::Status(503, long)).await;
    s.create("queue", "q", Some(json!({"target": w.url()})))
        .await;
    enqueue(&s, "q", json!({})).await;
    eventually("the job failed", || async {
        errors(&s, "q").await.len() == 1
    })
    .await;
    let error = errors(&s, "q").await[0]["error"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(error.len(), 65_536);
    assert!(error.chars().all(|c| c == 'é'));
    // An empty answer is described by its status.
    w.set_answer(Answer::Status(500, String::new()));
    enqueue(&s, "q", json!({})).await;
    eventually("both failed", || async { errors(&s, "q").await.len() == 2 }).await;
    assert_eq!(
        errors(&s, "q").await[1]["error"],
        "the worker answered 500 Internal Server Error with an empty body"
    );
}

#[tokio::test]
async fn retry_and_cancel_answer_for_unknown_and_ready_jobs() {
    let s = TestServer::start().await;
    let w = Worker::start(Answer::Hang).await;
    s.create(
        "queue",
        "q",
        Some(json!({"target": w.url(), "concurrency": 1})),
    )
    .await;
    let r = s.post("/queue/q/nope/_retry", json!({})).await.expect(404);
    assert_eq!(
        r.body,
        json!({"ok": false, "status": 404, "msg": "job \"nope\" does not exist in this queue"})
    );
    let r = s.post("/queue/q/nope/_cancel", json!({})).await.expect(404);
    assert_eq!(
        r.body,
        json!({"ok": false, "status": 404, "msg": "job \"nope\" does not exist in this queue"})
    );
    let busy = enqueue(&s, "q", json!({"n": 1})).await;
    let waiting = enqueue(&s, "q", json!({"n": 2})).await;
    w.wait_for(1).await;
    // The job being delivered is still listed READY.
    assert_eq!(ready(&s, "q").await, vec![json!({"n": 1}), json!({"n": 2})]);
    let r = s
        .post(&format!("/queue/q/{waiting}/_retry"), json!({}))
        .await
        .expect(409);
    assert_eq!(
        r.body,
        json!({"ok": false, "status": 409, "msg": format!("job \"{waiting}\" is READY, not ERROR: it is waiting for delivery already")})
    );
    s.post(&format!("/queue/q/{waiting}/_cancel"), json!({}))
        .await
        .expect(200);
    s.post(&format!("/queue/q/{busy}/_cancel"), json!({}))
        .await
        .expect(200);
    assert!(jobs(&s, "/queue/q/_jobs").await.is_empty());
    s.post(&format!("/queue/q/{busy}/_cancel"), json!({}))
        .await
        .expect(404);
}

#[tokio::test]
async fn a_job_cancelled_while_others_are_delivered_is_never_sent() {
    let s = TestServer::start().await;
    let w = Worker::start(Answer::After(Duration::from_millis(400), 200)).await;
    s.create(
        "queue",
        "q",
        Some(json!({"target": w.url(), "concurrency": 1})),
    )
    .await;
    let first = enqueue(&s, "q", json!({"n": 1})).await;
    let second = enqueue(&s, "q", json!({"n": 2})).await;
    w.wait_for(1).await;
    s.post(&format!("/queue/q/{second}/_cancel"), json!({}))
        .await
        .expect(200);
    // Jobs go out oldest first, one at a time: once a later job arrived, the cancelled
    // one would have been sent before it.
    let third = enqueue(&s, "q", json!({"n": 3})).await;
    w.wait_for(2).await;
    until_empty(&s, "q").await;
    let sent: Vec<String> = w
        .received()
        .iter()
        .map(|r| r.header("x-svc-job-id").unwrap().to_owned())
        .collect();
    assert_eq!(sent, vec![first, third]);
}

#[tokio::test]
async fn an_unreachable_worker_is_retried_then_the_job_fails_with_the_reason() {
    let s = server_with_fast_retries().await;
    let port = closed_port().await;
    s.create(
        "queue",
        "q",
        Some(json!({"target": format!("http://127.0.0.1:{port}/"), "retries": 2})),
    )
    .await;
    enqueue(&s, "q", json!({"n": 1})).await;
    eventually("the job failed", || async {
        errors(&s, "q").await.len() == 1
    })
    .await;
    let rec = &errors(&s, "q").await[0];
    assert_eq!(rec["attempts"], 3, "{rec}");
    let error = rec["error"].as_str().unwrap();
    assert!(error.contains("Connection refused"), "{error}");
    assert!(error.ends_with("(gave up after 3 attempts)"), "{error}");
}

#[tokio::test]
async fn a_timed_out_delivery_is_retried_and_then_succeeds() {
    let s = server_with_fast_retries().await;
    let w = Worker::start(Answer::Hang).await;
    s.create("queue", "q", Some(json!({"target": w.url(), "timeout": 1})))
        .await;
    let id = enqueue(&s, "q", json!({"n": 1})).await;
    w.wait_for(1).await;
    w.set_answer(Answer::Status(200, String::new()));
    let got = w.wait_for(2).await;
    assert_eq!(
        got[1].header("x-svc-job-id"),
        Some(id.as_str()),
        "same job id"
    );
    until_empty(&s, "q").await;
    assert_eq!(w.abandoned(), 1, "the timed-out request was abandoned");
}

#[tokio::test]
async fn a_retry_waiting_job_shows_its_last_error() {
    let s = TestServer::start().await; // default backoff: 5 s, longer than this test looks
    let port = closed_port().await;
    s.create(
        "queue",
        "q",
        Some(json!({"target": format!("http://127.0.0.1:{port}/")})),
    )
    .await;
    enqueue(&s, "q", json!({"n": 1})).await;
    eventually("the first attempt failed", || async {
        let all = jobs(&s, "/queue/q/_jobs?status=READY").await;
        all.len() == 1 && all[0]["attempts"] == 1 && all[0]["error"].is_string()
    })
    .await;
    assert!(errors(&s, "q").await.is_empty());
}

#[tokio::test]
async fn concurrency_is_per_queue_and_a_stuck_worker_delays_no_other_queue() {
    let s = TestServer::start().await;
    let stuck = Worker::start(Answer::Hang).await;
    let fast = Worker::start(Answer::Status(200, String::new())).await;
    s.create(
        "queue",
        "stuck",
        Some(json!({"target": stuck.url(), "concurrency": 2})),
    )
    .await;
    s.create("queue", "fast", Some(json!({"target": fast.url()})))
        .await;
    for n in 0..6 {
        enqueue(&s, "stuck", json!({"n": n})).await;
    }
    stuck.wait_for(2).await;
    for n in 0..30 {
        enqueue(&s, "fast", json!({"n": n})).await;
    }
    fast.wait_for(30).await;
    until_empty(&s, "fast").await;
    assert_eq!(stuck.received().len(), 2, "only two in flight at once");
    assert_eq!(stuck.max_in_flight(), 2);
    assert_eq!(ready(&s, "stuck").await.len(), 6);
    // Deliveries to one worker run concurrently up to the limit.
    let wide = Worker::start(Answer::After(Duration::from_millis(300), 200)).await;
    s.create(
        "queue",
        "wide",
        Some(json!({"target": wide.url(), "concurrency": 4})),
    )
    .await;
    for n in 0..8 {
        enqueue(&s, "wide", json!({"n": n})).await;
    }
    until_empty(&s, "wide").await;
    assert_eq!(wide.max_in_flight(), 4);
}

#[tokio::test]
async fn destroying_a_queue_stops_its_deliveries_and_removes_its_jobs() {
    let s = server_with_fast_retries().await;
    let w = Worker::start(Answer::Hang).await;
    let config = json!({"target": w.url(), "timeout": 600, "concurrency": 1});
    s.create("queue", "q", Some(config.clone())).await;
    for n in 0..3 {
        enqueue(&s, "q", json!({"n": n})).await;
    }
    w.wait_for(1).await;
    s.delete("/queue/q").await.expect(200);
    eventually("the delivery in flight was abandoned", || async {
        w.abandoned() == 1
    })
    .await;
    s.create("queue", "q", Some(config)).await;
    assert!(jobs(&s, "/queue/q/_jobs").await.is_empty());
    // No next job of the destroyed queue: a job of the new one, delivered one at a time,
    // arrives second, and nothing else with it.
    w.set_answer(Answer::Status(200, String::new()));
    let marker = enqueue(&s, "q", json!({"n": "marker"})).await;
    w.wait_for(2).await;
    until_empty(&s, "q").await;
    let received = w.received();
    assert_eq!(received.len(), 2);
    assert_eq!(received[1].header("x-svc-job-id"), Some(marker.as_str()));
}

#[tokio::test]
async fn ready_and_in_flight_jobs_are_delivered_after_a_restart() {
    let mut s = TestServer::builder()
        .args(|a| a.shutdown_timeout = Some(1))
        .start()
        .await;
    let w = Worker::start(Answer::Hang).await;
    s.create(
        "queue",
        "q",
        Some(json!({"target": w.url(), "concurrency": 1})),
    )
    .await;
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(enqueue(&s, "q", json!({"n": n})).await);
    }
    w.wait_for(1).await; // the first is in flight, two wait
    s.restart().await; // the shutdown timeout cuts the hanging delivery off
    w.set_answer(Answer::Status(200, String::new()));
    until_empty(&s, "q").await;
    let delivered: Vec<String> = w
        .received()
        .iter()
        .map(|r| r.header("x-svc-job-id").unwrap().to_owned())
        .collect();
    assert_eq!(delivered[0], ids[0]);
    for id in &ids {
        assert!(delivered.contains(id), "{id} not delivered: {delivered:?}");
    }
    assert_eq!(
        delivered.iter().filter(|d| **d == ids[0]).count(),
        2,
        "the job in flight at the restart is delivered again"
    );
}

#[tokio::test]
async fn a_shutdown_lets_deliveries_in_flight_finish() {
    let mut s = TestServer::start().await;
    let w = Worker::start(Answer::After(Duration::from_millis(500), 200)).await;
    s.create("queue", "q", Some(json!({"target": w.url()})))
        .await;
    enqueue(&s, "q", json!({"n": 1})).await;
    w.wait_for(1).await;
    s.restart().await;
    // The delivery finished and was recorded before the stores closed: nothing is left
    // to deliver again.
    assert!(jobs(&s, "/queue/q/_jobs").await.is_empty());
    assert_eq!(w.received().len(), 1);
    assert_eq!(w.abandoned(), 0);
}

#[tokio::test]
async fn queue_settings_are_validated_at_creation() {
    let s = TestServer::start().await;
    let r = s
        .put(
            "/queue/q",
            Some(json!({"target": "http://x/", "concurrency": 0})),
        )
        .await
        .expect(422);
    assert_eq!(
        r.body,
        json!({"ok": false, "status": 422, "msg": "\"concurrency\" must be a whole number from 1 to 256 (default 8)"})
    );
    let r = s
        .put("/queue/q", Some(json!({"target": "ftp://x/"})))
        .await
        .expect(422);
    assert_eq!(
        r.body,
        json!({"ok": false, "status": 422, "msg": "\"target\" \"ftp://x/\" must be an http or https URL with a host"})
    );
    s.delete("/queue/q").await.expect(404);
}

/// The error recorded for the only job of a queue (at `base`, e.g. `/queue/q` or
/// `/app/queue/q`) once it failed.
async fn failed_error(s: &TestServer, key: Option<&quintet_testkit::AppKey>, base: &str) -> String {
    let path = format!("{base}/_jobs?status=ERROR");
    let list = || async {
        let req = s.request(Method::GET, &path);
        let req = match key {
            Some(k) => s.as_app(k, req),
            None => req,
        };
        let r = s.send(req).await.expect(200);
        r.body["jobs"].as_array().cloned().unwrap_or_default()
    };
    eventually("the job failed", || async { !list().await.is_empty() }).await;
    list().await[0]["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The issue-17 reproduction: a tenant's queue aimed at internal services.
#[tokio::test]
async fn tenants_queues_cannot_reach_internal_addresses_or_quintet_itself() {
    let s = TestServer::start().await;
    let key = s.new_app().await;
    let internal = Worker::start(Answer::Status(500, "internal secret: hunter2".into())).await;
    let create = |target: String| {
        s.as_app(
            &key,
            s.request(Method::PUT, &format!("/{}/queue/q", key.app)),
        )
        .json(&json!({"target": target}))
    };
    for target in [
        internal.url().to_owned(),
        "http://localhost:8080/".into(),
        "http://10.1.2.3/".into(),
        "http://192.168.0.10/".into(),
        "http://169.254.169.254/latest/meta-data".into(),
        "http://[::ffff:127.0.0.1]/".into(),
        "http://[fe80::1]/".into(),
        s.url("/data/notes"),
    ] {
        let r = s.send(create(target.clone())).await;
        assert_eq!(r.status, 422, "{target}: {}", r.text);
    }
    let r = s.send(create(s.url("/data/notes"))).await.expect(422);
    assert!(r.text.contains("this quintet server itself"), "{}", r.text);
    let r = s.send(create(internal.url().to_owned())).await.expect(422);
    assert!(r.text.contains("--queue-private-targets"), "{}", r.text);
    assert!(internal.received().is_empty());

    // The domain application is the operator's own: its worker on localhost is fine, and
    // the job's error shows what the worker said.
    s.create("queue", "local", Some(json!({"target": internal.url()})))
        .await
        .expect(201);
    enqueue(&s, "local", json!({"n": 1})).await;
    let error = failed_error(&s, None, "/queue/local").await;
    assert_eq!(error, "internal secret: hunter2");
    // But not quintet itself, under any name.
    let port = s.url("").rsplit(':').next().unwrap().to_owned();
    for target in [
        s.url("/data/notes"),
        format!("http://localhost:{port}/data/notes"),
    ] {
        let r = s.put("/queue/self", Some(json!({"target": target}))).await;
        assert_eq!(r.status, 422, "{target}: {}", r.text);
    }
}

#[tokio::test]
async fn with_private_targets_allowed_a_tenant_learns_nothing_of_internal_answers() {
    let s = TestServer::builder()
        .args(|a| a.queue_private_targets = Some(PrivateTargetsArg::Allow))
        .start()
        .await;
    let key = s.new_app().await;
    let internal = Worker::start(Answer::Status(500, "internal secret: hunter2".into())).await;
    let base = format!("/{}/queue/q", key.app);
    s.send(
        s.as_app(&key, s.request(Method::PUT, &base))
            .json(&json!({"target": internal.url()})),
    )
    .await
    .expect(201);
    s.send(
        s.as_app(&key, s.request(Method::POST, &base))
            .json(&json!({"n": 1})),
    )
    .await
    .expect(201);
    let error = failed_error(&s, Some(&key), &base).await;
    assert!(!error.contains("hunter2"), "{error}");
    assert!(
        error.contains("500") && error.contains("not recorded"),
        "{error}"
    );
    // A closed port reads as a plain failure to connect: no port scanning through errors.
    let closed = closed_port().await;
    let scan = format!("/{}/queue/scan", key.app);
    s.send(
        s.as_app(&key, s.request(Method::PUT, &scan))
            .json(&json!({"target": format!("http://127.0.0.1:{closed}/"), "retries": 0})),
    )
    .await
    .expect(201);
    s.send(
        s.as_app(&key, s.request(Method::POST, &scan))
            .json(&json!({"n": 1})),
    )
    .await
    .expect(201);
    let error = failed_error(&s, Some(&key), &scan).await;
    assert!(
        error.starts_with("could not deliver to the worker at"),
        "{error}"
    );
    assert!(!error.to_lowercase().contains("refused"), "{error}");
    // Still never quintet itself.
    let r = s
        .send(
            s.as_app(
                &key,
                s.request(Method::PUT, &format!("/{}/queue/self", key.app)),
            )
            .json(&json!({"target": s.url("/data/notes")})),
        )
        .await
        .expect(422);
    assert!(r.text.contains("this quintet server itself"), "{}", r.text);
}

#[tokio::test]
async fn deny_refuses_internal_targets_of_every_queue() {
    let s = TestServer::builder()
        .args(|a| a.queue_private_targets = Some(PrivateTargetsArg::Deny))
        .start()
        .await;
    let r = s
        .put(
            "/queue/q",
            Some(json!({"target": "http://127.0.0.1:9/hook"})),
        )
        .await
        .expect(422);
    assert_eq!(
        r.body,
        json!({"ok": false, "status": 422, "msg": "\"target\" \"http://127.0.0.1:9/hook\": target host \"127.0.0.1\", a loopback, private or link-local address, which this server refuses as a target of this application's queues (--queue-private-targets)"})
    );
    for target in [
        "http://localhost:8080/",
        "http://[::1]/",
        "http://10.1.2.3/",
        "http://192.168.0.10/",
        "http://[fe80::1]/",
        "http://[::ffff:127.0.0.1]/",
    ] {
        let r = s.put("/queue/q", Some(json!({"target": target}))).await;
        assert_eq!(r.status, 422, "{target}: {}", r.text);
    }
    s.delete("/queue/q").await.expect(404);
}

#[tokio::test]
async fn deliveries_go_through_the_egress_proxy() {
    // The recording worker stands in for the proxy: it sees the target's host.
    let proxy = Worker::start(Answer::Status(200, String::new())).await;
    let s = TestServer::builder()
        .args(|a| a.queue_egress_proxy = Some(format!("http://127.0.0.1:{}", proxy.port())))
        .start()
        .await;
    s.create(
        "queue",
        "q",
        Some(json!({"target": "http://worker.internal.invalid/hook"})),
    )
    .await
    .expect(201);
    enqueue(&s, "q", json!({"via": "proxy"})).await;
    let got = proxy.wait_for(1).await;
    assert_eq!(got[0].header("host"), Some("worker.internal.invalid"));
    assert_eq!(got[0].body, r#"{"via":"proxy"}"#);
}

#[tokio::test]
async fn an_application_has_at_most_its_plans_queues_and_instances() {
    let s = TestServer::start().await;
    let key = s.new_app().await; // starter: 25 instances, 5 queues per application
    let put = |kind: &str, name: String, config: Option<Value>| {
        let req = s.as_app(
            &key,
            s.request(Method::PUT, &format!("/{}/{kind}/{name}", key.app)),
        );
        match config {
            Some(c) => req.json(&c),
            None => req,
        }
    };
    let queue = || Some(json!({"target": "https://worker.example/hook"}));
    for n in 0..5 {
        s.send(put("queue", format!("q{n}"), queue()))
            .await
            .expect(201);
    }
    let r = s.send(put("queue", "q5".into(), queue())).await.expect(403);
    assert_eq!(
        r.body["msg"],
        "this application's account is on the starter plan, which allows at most 5 queues per \
         application; delete one or move the account to a larger plan"
    );
    for n in 0..20 {
        s.send(put("data", format!("d{n}"), None)).await.expect(201);
    }
    let r = s.send(put("cache", "c".into(), None)).await.expect(403);
    assert!(
        r.text.contains("at most 25 instances per application"),
        "{}",
        r.text
    );
    // The domain application has no plan; a larger plan makes room at once.
    for n in 0..6 {
        s.put(&format!("/queue/q{n}"), queue()).await.expect(201);
    }
    s.admin(
        Method::PATCH,
        &format!("/_admin/accounts/{}", key.account),
        Some(json!({"plan": "pro"})),
    )
    .await
    .expect(200);
    s.send(put("queue", "q5".into(), queue())).await.expect(201);
}

#[tokio::test]
async fn an_applications_deliveries_in_flight_are_bounded_by_its_plan() {
    let s = TestServer::builder()
        .args(|a| a.queue_private_targets = Some(PrivateTargetsArg::Allow))
        .start()
        .await;
    let key = s.new_app().await; // starter: 16 deliveries in flight per application
    let w = Worker::start(Answer::Held(200)).await;
    for q in ["a", "b"] {
        let base = format!("/{}/queue/{q}", key.app);
        s.send(
            s.as_app(&key, s.request(Method::PUT, &base))
                .json(&json!({"target": w.url(), "concurrency": 16, "timeout": 600})),
        )
        .await
        .expect(201);
        for n in 0..20 {
            s.send(
                s.as_app(&key, s.request(Method::POST, &base))
                    .json(&json!({"n": n})),
            )
            .await
            .expect(201);
        }
    }
    w.wait_for(16).await;
    w.release();
    w.wait_for(40).await;
    assert_eq!(
        w.max_in_flight(),
        16,
        "two queues of 16 share the plan's 16"
    );
}

/// `node crates/server/tests/fixtures/worker.js <secret>`, with its output lines collected.
struct JsWorker {
    child: Child,
    port: u16,
    lines: Arc<Mutex<Vec<String>>>,
}

impl JsWorker {
    fn start(secret: &str) -> Self {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/worker.js");
        let mut child = Command::new("node")
            .arg(script)
            .arg(secret)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("node is installed (scripts/setup installs it)");
        let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = out.next().unwrap().unwrap();
        let port = first.strip_prefix("listening ").unwrap().parse().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in out.map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Self { child, port, lines }
    }
}

impl Drop for JsWorker {
    fn drop(&mut self) {
        if let Some(mut stdin) = self.child.stdin.take() {
            let _ = stdin.flush();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn a_javascript_worker_verifies_every_signature_over_tricky_payloads() {
    let s = TestServer::start().await;
    let w = JsWorker::start("wh-secret_42");
    s.create(
        "queue",
        "js",
        Some(json!({"target": format!("http://127.0.0.1:{}/jobs", w.port), "secret": "wh-secret_42"})),
    )
    .await;
    let big: String = (0..4000)
        .map(|i| ["a", "é", "😀", "\\n", "\\\""][i % 5])
        .collect();
    let payloads = [
        r#"{"type":"unicode","s":"café 😀 \u00e9 \ud83d\ude00 中文 עברית \u2028 \u2029"}"#.to_owned(),
        r#"{"type":"escapes","s":"q\" b\\ / \b\f\n\r\t \u0000 \u001f \u007f \u0080 <>&'"}"#.to_owned(),
        r#"{"type":"floats","a":100.0,"b":1e21,"c":1.5e-7,"d":-0.0,"e":0.1,"f":5e-324,"g":1.7976931348623157e308,"h":0.30000000000000004,"i":-1E-7}"#.to_owned(),
        r#"{"type":"integers","big":12345678901234567890,"unsafe":9007199254740993,"neg":-9007199254740993,"huge":123456789012345678901234567890}"#.to_owned(),
        r#"{"type":"nested","a":[[1,[2,[3,[4,{"x":[],"0":{}}]]]],{},[],[null,true,false]]}"#.to_owned(),
        r#"{"type":"keys","b":1,"10":2,"a":3,"2":4,"01":5,"-1":6,"4294967295":7,"4294967294":8,"0":9}"#.to_owned(),
        r#"{"type":"dupes","a":1,"b":2,"a":{"c":3}}"#.to_owned(),
        r#"{ "type" : "spaced" , "list" : [ 1 , 2.50 , 3e0 ] }"#.to_owned(),
        format!(r#"{{"type":"large","s":"{big}"}}"#),
        r#"{}"#.to_owned(),
    ];
    for p in &payloads {
        enqueue_text(&s, "js", p).await;
    }
    eventually("every job was answered", || async {
        w.lines.lock().unwrap().len() >= payloads.len()
    })
    .await;
    let lines = w.lines.lock().unwrap().clone();
    let failed: Vec<&String> = lines.iter().filter(|l| !l.starts_with("ok ")).collect();
    assert!(
        failed.is_empty(),
        "the JavaScript worker refused: {failed:#?}"
    );
    until_empty(&s, "js").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_destroyed_through_another_node_stops_delivering_here() {
    let Some(pg) = quintet_testkit::engines::postgres("queue_destroyed_elsewhere").await else {
        return;
    };
    let allow =
        |a: &mut quintet_testkit::Args| a.queue_private_targets = Some(PrivateTargetsArg::Allow);
    let a = TestServer::builder()
        .registry(pg.url())
        .args(allow)
        .start()
        .await;
    let b = TestServer::builder()
        .registry(pg.url())
        .args(allow)
        .start()
        .await;
    let w = Worker::start(Answer::Hang).await;
    a.create(
        "queue",
        "q",
        Some(json!({"target": w.url(), "timeout": 600})),
    )
    .await;
    enqueue(&a, "q", json!({"n": 1})).await;
    w.wait_for(1).await;
    // Destroyed through B: A's delivery is cut off at once, not after its timeout.
    b.delete("/queue/q").await.expect(200);
    eventually("A abandoned its delivery", || async { w.abandoned() == 1 }).await;

    // Likewise when B deletes the application that owns a queue delivering on A.
    let key = a.new_app().await;
    let app = key.app.clone();
    let path = format!("/{app}/queue/jobs");
    a.send(
        a.as_app(&key, a.request(Method::PUT, &path))
            .json(&json!({"target": w.url(), "timeout": 600})),
    )
    .await
    .expect(201);
    a.send(
        a.as_app(&key, a.request(Method::POST, &path))
            .json(&json!({"n": 2})),
    )
    .await
    .expect(201);
    w.wait_for(2).await;
    b.admin(Method::DELETE, &format!("/_admin/apps/{app}"), None)
        .await
        .expect(200);
    eventually("A abandoned its second delivery", || async {
        w.abandoned() == 2
    })
    .await;
}
