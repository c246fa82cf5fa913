//! Scale-out: several nodes, each with a data directory of its own, on the shared
//! engines. Here, two real `quintet serve` processes sharing every engine: documents, the
//! registry, jobs and search on PostgreSQL, the cache on Redis, objects on S3. What one
//! node writes, the other reads; jobs enqueued through both are delivered once each. The
//! modules below take one service (or the registry) at a time.

mod cache;
mod data;
mod engine_down;
mod feed;
mod metrics;
mod queue;
mod registry;
mod revocation_stall;
mod search;
mod storage;
mod transfer;

use std::{collections::HashMap, path::Path};

use quintet_testkit::{Answer, Client, Process, Worker, engines, eventually};
use reqwest::Method;
use serde_json::{Value, json};

use crate::BIN;

const ADMIN_TOKEN: &str = "scale-out-admin-token-0123456789";

/// Every service on its engine: a PostgreSQL schema, a Redis prefix and an S3 prefix of
/// the test's own, and the `quintet serve` arguments that put each service there.
pub(crate) struct Shared {
    pg: engines::PgSchema,
    redis: String,
    storage: String,
}

impl Shared {
    /// The engines for `test`, or `None` (with a message) when one is not configured.
    pub(crate) async fn every_service(test: &str) -> Option<Self> {
        let pg = engines::postgres(test).await?;
        let redis = engines::redis(test)?;
        let s3 = engines::s3(test)?;
        let storage = format!(
            "s3://{}/{}?endpoint={}&region={}&access_key_id={}&secret_access_key={}",
            s3.bucket, s3.prefix, s3.endpoint, s3.region, s3.key, s3.secret
        );
        Some(Self {
            pg,
            redis: redis.url,
            storage,
        })
    }

    /// `--data`, `--queue`, `--search` on PostgreSQL (the registry follows), `--cache` on
    /// Redis, `--storage` on S3.
    pub(crate) fn args(&self) -> Vec<&str> {
        let url = self.pg.url();
        vec![
            "--data",
            url,
            "--queue",
            url,
            "--search",
            url,
            "--cache",
            &self.redis,
            "--storage",
            &self.storage,
        ]
    }
}

fn ids(body: &Value, field: &str) -> Vec<String> {
    body[field]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["_id"].as_str().or(d["id"].as_str()).unwrap().to_owned())
        .collect()
}

async fn query(node: &Client, body: Value) -> Value {
    node.post("/data/movies/_query", body)
        .await
        .expect(200)
        .body
}

/// Documents on PostgreSQL (the registry follows `--data` there): created, indexed,
/// queried, replaced and removed through either node, and durable across `kill -9`.
#[tokio::test]
async fn two_nodes_share_documents_on_postgres() {
    let Some(pg) = engines::postgres("two_nodes_share_documents_on_postgres").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let args = ["--data", pg.url(), "--admin-token", ADMIN_TOKEN];
    let mut a = Process::spawn(Path::new(BIN), &dir.path().join("a"), &args);
    let b = Process::spawn(Path::new(BIN), &dir.path().join("b"), &args);

    // The instance made through A exists for B: one registry.
    a.create("data", "movies", None).await;
    b.put("/data/movies", None).await.expect(409);
    a.post(
        "/data/movies",
        json!({"_id": "alien", "year": 1979, "genre": "sf"}),
    )
    .await
    .expect(201);
    b.post("/data/movies", json!({"_id": "alien", "year": 1}))
        .await
        .expect(409);
    b.post(
        "/data/movies/_bulk",
        json!([
            {"_id": "heat", "year": 1995, "genre": "crime"},
            {"_id": "jaws", "year": 1975, "genre": "thriller"},
            {"_id": "up", "year": 2009, "genre": "animation"}
        ]),
    )
    .await
    .expect(200);
    let r = a.get("/data/movies/heat").await.expect(200);
    assert_eq!(
        r.body["doc"],
        json!({"_id": "heat", "year": 1995, "genre": "crime"})
    );
    let r = b.get("/data/movies?startkey=b&endkey=k").await.expect(200);
    assert_eq!(ids(&r.body, "docs"), ["heat", "jaws"]);

    // An index made through B serves queries through A, and writes through A keep it.
    b.post(
        "/data/movies/_index",
        json!({"fields": ["year"], "name": "by-year"}),
    )
    .await
    .expect(200);
    a.put(
        "/data/movies/jaws",
        Some(json!({"year": 2001, "genre": "thriller"})),
    )
    .await
    .expect(200);
    a.delete("/data/movies/up").await.expect(200);
    let q = json!({
        "selector": {"year": {"$gte": 1979}},
        "sort": [{"year": "desc"}],
        "execution_stats": true
    });
    for node in [&*a, &*b] {
        let r = query(node, q.clone()).await;
        assert_eq!(ids(&r, "docs"), ["jaws", "heat", "alien"]);
        assert_eq!(r["execution_stats"]["index"], "by-year");
        assert!(r.get("warning").is_none(), "{r}");
    }
    let r = b.get("/data/movies/_index").await.expect(200);
    assert_eq!(r.body["indexes"][0]["name"], "by-year");

    // Acknowledged writes are PostgreSQL's: kill -9 of the node that made them loses none.
    a.post("/data/movies", json!({"_id": "tron", "year": 1982}))
        .await
        .expect(201);
    a.restart();
    let r = a.get("/data/movies/tron").await.expect(200);
    assert_eq!(r.body["doc"]["year"], 1982);
    b.get("/data/movies/tron").await.expect(200);

    // Destroyed through A, gone for B.
    a.delete("/data/movies").await.expect(200);
    b.get("/data/movies/heat").await.expect(404);
    b.post("/data/movies/_query", json!({"selector": {}}))
        .await
        .expect(404);
}

/// Every service on its engine at once, as a deployment runs: two nodes, each write made
/// through one and read through the other, and a queue fed through both that delivers
/// every job exactly once.
#[tokio::test]
async fn two_nodes_share_every_service() {
    let Some(shared) = Shared::every_service("two_nodes_share_every_service").await else {
        return;
    };
    let mut args = shared.args();
    args.extend(["--admin-token", ADMIN_TOKEN]);
    let dir = tempfile::tempdir().unwrap();
    let a = Process::spawn(Path::new(BIN), &dir.path().join("a"), &args);
    let b = Process::spawn(Path::new(BIN), &dir.path().join("b"), &args);
    let worker = Worker::start(Answer::Status(200, String::new())).await;

    a.create("data", "movies", None).await;
    a.create("cache", "sessions", None).await;
    a.create("search", "films", Some(json!({"fields": ["title"]})))
        .await;
    a.create("storage", "media", None).await;
    a.create(
        "queue",
        "jobs",
        Some(json!({"target": worker.url(), "concurrency": 4})),
    )
    .await;

    // Data.
    a.post("/data/movies", json!({"_id": "alien", "year": 1979}))
        .await
        .expect(201);
    let r = b.get("/data/movies/alien").await.expect(200);
    assert_eq!(r.body["doc"]["year"], 1979);

    // Cache.
    b.post(
        "/cache/sessions",
        json!({"key": "user-1", "value": {"name": "Ada"}}),
    )
    .await
    .expect(201);
    let r = a.get("/cache/sessions/user-1").await.expect(201);
    assert_eq!(r.body["doc"], json!({"name": "Ada"}));

    // Search.
    a.post(
        "/search/films",
        json!({"key": "gb", "doc": {"title": "Ghostbusters"}}),
    )
    .await
    .expect(201);
    let r = b
        .post("/search/films/_query", json!({"query": "ghostbustres"}))
        .await
        .expect(200);
    assert_eq!(r.body["matches"][0]["id"], "gb");

    // Storage.
    let up = b
        .request(Method::POST, "/storage/media/notes/a.txt")
        .header("content-type", "text/plain")
        .body("hello from b");
    b.send(up).await.expect(200);
    let res = a
        .http()
        .get(a.url("/storage/media/notes/a.txt"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.text().await.unwrap(), "hello from b");

    // Queue: 60 jobs through both nodes, each delivered exactly once.
    let mut enqueued = Vec::new();
    for n in 0..60 {
        let through = if n % 2 == 0 { &a } else { &b };
        let r = through
            .post("/queue/jobs", json!({"n": n}))
            .await
            .expect(201);
        enqueued.push(r.body["id"].as_str().unwrap().to_owned());
    }
    eventually("every job is delivered and settled", || async {
        let left = a.get("/queue/jobs/_jobs").await.expect(200).body;
        let right = b.get("/queue/jobs/_jobs").await.expect(200).body;
        left["jobs"] == json!([]) && right["jobs"] == json!([])
    })
    .await;
    let mut seen: HashMap<String, usize> = HashMap::new();
    for r in worker.received() {
        *seen
            .entry(r.header("x-svc-job-id").unwrap().to_owned())
            .or_default() += 1;
    }
    enqueued.sort();
    let mut delivered: Vec<String> = seen.keys().cloned().collect();
    delivered.sort();
    assert_eq!(delivered, enqueued);
    assert!(seen.values().all(|n| *n == 1), "{seen:?}");
}
