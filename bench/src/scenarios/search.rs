//! Search: bulk indexing of 100,000 short documents, and queries with one typo over them
//! (the corpus: [`crate::search_corpus`]).

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Instant,
};

use anyhow::Context;
use async_trait::async_trait;
use hyper::{Method, StatusCode};
use serde_json::{Value, json};

use super::{Ctx, Measurement, Scenario, Target};
use crate::{
    load::{MakeReq, Req},
    search_corpus::{Corpus, DOCS, corpus, corpus_of},
};

/// Documents per bulk request.
const BULK: usize = 5_000;
/// Bulk requests in flight (two workers in [`load_corpus`]).
const BULK_CONCURRENCY: usize = 2;

/// Send bulks of `docs` taken from the shared cursor `next` until none are left; returns
/// each request's latency (ms).
async fn bulk_worker(
    ctx: &Ctx,
    path: &str,
    docs: &[Value],
    next: &AtomicUsize,
) -> anyhow::Result<Vec<f64>> {
    let mut latencies = Vec::new();
    loop {
        let from = next.fetch_add(1, Ordering::Relaxed) * BULK;
        if from >= docs.len() {
            return Ok(latencies);
        }
        let body = Value::Array(docs[from..(from + BULK).min(docs.len())].to_vec());
        let req = Req::json(Method::POST, path, &body);
        let t = Instant::now();
        ctx.expect(req, StatusCode::OK)
            .await
            .context("bulk request")?;
        latencies.push(t.elapsed().as_secs_f64() * 1000.0);
    }
}

/// Create `name` and bulk-index `docs` into it, [`BULK_CONCURRENCY`] requests in flight;
/// returns documents per second and the sorted latencies of the requests (ms).
async fn load_corpus(ctx: &Ctx, name: &str, docs: &[Value]) -> anyhow::Result<(f64, Vec<f64>)> {
    ctx.create(
        "search",
        name,
        Some(json!({"fields": ["title", "body"], "storeFields": ["title"]})),
    )
    .await?;
    let next = AtomicUsize::new(0);
    let path = format!("/search/{name}/_bulk");
    let started = Instant::now();
    let (a, b) = tokio::join!(
        bulk_worker(ctx, &path, docs, &next),
        bulk_worker(ctx, &path, docs, &next)
    );
    let secs = started.elapsed().as_secs_f64();
    let mut latencies = a?;
    latencies.extend(b?);
    latencies.sort_by(f64::total_cmp);
    Ok((docs.len() as f64 / secs, latencies))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Bulk indexing of the corpus.
pub struct BulkIndex;

#[async_trait]
impl Scenario for BulkIndex {
    fn name(&self) -> String {
        format!("search: bulk index {DOCS} docs ({BULK} per request, {BULK_CONCURRENCY} in flight)")
    }

    fn service(&self) -> &'static str {
        "search"
    }

    fn target(&self) -> Target {
        Target::ItemsPerSec(100_000.0)
    }

    async fn run(&self, ctx: &Ctx) -> anyhow::Result<Measurement> {
        let docs = corpus().docs;
        let (per_sec, latencies) = load_corpus(ctx, "bulk", &docs).await?;
        let requests = latencies.len() as f64;
        let total_secs = DOCS as f64 / per_sec;
        Ok(Measurement {
            concurrency: BULK_CONCURRENCY,
            rps: requests / total_secs,
            items_per_sec: Some(per_sec),
            megabytes_per_sec: None,
            p50_ms: percentile(&latencies, 0.5),
            p99_ms: percentile(&latencies, 0.99),
            ratio: None,
            rss_growth_bytes: None,
            note: format!("{} requests", latencies.len()),
        })
    }
}

/// Queries with one typo over the corpus.
pub struct TypoQueries {
    /// `limit` sent with each query; `None` sends none, so the API's default (100)
    /// applies, as for a client that does not ask.
    pub limit: Option<usize>,
    /// Connections sending queries.
    pub connections: usize,
    /// Documents in the corpus ([`corpus_of`]; the queries are the same for every size).
    pub docs: usize,
    /// The goal of the row.
    pub target: Target,
}

/// Bytes of the files under `dir`.
fn dir_bytes(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(_) => e.metadata().map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}

/// Wait until the server has been idle — at most 5 clock ticks of CPU (5 % of a core)
/// in each of two consecutive seconds — and at least 5 seconds, at most 5 minutes; how
/// long it took. A bulk load may leave merges running in the background, for as long as
/// the corpus and the machine make them last, and queries measured during them would
/// measure the merges too.
async fn settle(ctx: &Ctx) -> std::time::Duration {
    let began = std::time::Instant::now();
    let second = std::time::Duration::from_secs(1);
    tokio::time::sleep(5 * second).await;
    let mut quiet = 0;
    let mut last = ctx.server.cpu_ticks();
    while quiet < 2 && began.elapsed() < 300 * second {
        tokio::time::sleep(second).await;
        let now = ctx.server.cpu_ticks();
        quiet = match (last, now) {
            (Some(a), Some(b)) if b.saturating_sub(a) <= 5 => quiet + 1,
            (None, _) | (_, None) => 2, // not Linux: the 5 seconds must do
            _ => 0,
        };
        last = now;
    }
    began.elapsed()
}

#[async_trait]
impl Scenario for TypoQueries {
    fn name(&self) -> String {
        let limit = match self.limit {
            Some(limit) => format!("limit {limit}"),
            None => "default limit".to_owned(),
        };
        format!(
            "search: 1-typo queries over {} docs, {limit} ({} conn)",
            self.docs, self.connections
        )
    }

    fn service(&self) -> &'static str {
        "search"
    }

    fn target(&self) -> Target {
        self.target
    }

    async fn run(&self, ctx: &Ctx) -> anyhow::Result<Measurement> {
        let Corpus { docs, queries } = corpus_of(self.docs);
        let (per_sec, _) = load_corpus(ctx, "typo", &docs).await?;
        drop(docs);
        // Measure the steady state: wait for the background merges the bulk load started
        // (each merge also rebuilds the merged vocabulary) to end, then send every query
        // once. Every query must find something.
        let settled = settle(ctx).await;
        for q in &queries {
            let body = ctx
                .expect(
                    Req::json(
                        Method::POST,
                        "/search/typo/_query",
                        &json!({"query": q, "limit": 1}),
                    ),
                    StatusCode::OK,
                )
                .await?;
            let v: Value = serde_json::from_slice(&body)?;
            anyhow::ensure!(
                v["matches"].as_array().is_some_and(|m| !m.is_empty()),
                "query {q:?} found nothing"
            );
        }
        let bodies: Arc<Vec<bytes::Bytes>> = Arc::new(
            queries
                .iter()
                .map(|q| {
                    let body = match self.limit {
                        Some(limit) => json!({"query": q, "limit": limit}),
                        None => json!({"query": q}),
                    };
                    bytes::Bytes::from(body.to_string())
                })
                .collect(),
        );
        let make: MakeReq = Arc::new(move |conn, seq| {
            let i = (conn * 7919 + seq as usize) % bodies.len();
            Req {
                method: Method::POST,
                path: "/search/typo/_query".to_owned(),
                body: bodies[i].clone(),
                headers: vec![("content-type", "application/json".to_owned())],
            }
        });
        let (_, mut m) = ctx
            .load_vs_ceiling(self.connections, StatusCode::OK, make)
            .await?;
        m.add_note(&format!(
            "queries began when the server was idle, {:.0} s after the load",
            settled.as_secs_f64()
        ));
        if self.docs > DOCS {
            let index = dir_bytes(&ctx.server.data_dir().join("search"));
            let rss = ctx.server.rss_bytes().unwrap_or(0);
            m.add_note(&format!(
                "{} docs indexed at {per_sec:.0}/s; index {:.0} MB on disk; server RSS {:.0} MB",
                self.docs,
                index as f64 / 1e6,
                rss as f64 / 1e6
            ));
        }
        Ok(m)
    }
}
