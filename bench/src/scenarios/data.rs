//! Data service scenarios: GET by id against the ceiling, durable single creates, bulk
//! writes, and an equality query over a million documents with and without an index.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use async_trait::async_trait;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use serde_json::json;

use super::{Ctx, Measurement, Scenario, Target};
use crate::load::{LoadSpec, MakeReq, Req};

/// All data scenarios.
pub fn all() -> Vec<Box<dyn Scenario>> {
    vec![
        Box::new(GetById),
        Box::new(Creates),
        Box::new(Bulk),
        Box::new(IndexedQuery),
    ]
}

/// A bulk body of `n` small documents with ids `<prefix>-<i>`.
pub(super) fn bulk_body(prefix: &str, n: usize, doc: impl Fn(usize) -> String) -> Bytes {
    let mut s = String::with_capacity(n * 96);
    s.push('[');
    for i in 0..n {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&format!("{{\"_id\":\"{prefix}-{i:04}\",{}}}", doc(i)));
    }
    s.push(']');
    Bytes::from(s)
}

pub(super) fn post(path: String, body: Bytes) -> Req {
    Req {
        method: Method::POST,
        path,
        body,
        headers: vec![("content-type", "application/json".to_owned())],
    }
}

/// Send `reqs` over `concurrency` connections, each expecting 200.
pub(super) async fn send_all(ctx: &Ctx, reqs: Vec<Req>, concurrency: usize) -> anyhow::Result<()> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let queue = Arc::new(std::sync::Mutex::new(reqs));
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (client, queue, addr) = (client.clone(), Arc::clone(&queue), ctx.addr.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let next = queue.lock().ok().and_then(|mut q| q.pop());
                let Some(req) = next else {
                    return Ok::<_, anyhow::Error>(());
                };
                let mut b = Request::builder()
                    .method(req.method)
                    .uri(format!("http://{addr}{}", req.path));
                for (k, v) in req.headers {
                    b = b.header(k, v);
                }
                let res = client.request(b.body(Full::new(req.body))?).await?;
                let status = res.status();
                let body = res.into_body().collect().await?.to_bytes();
                if status != StatusCode::OK {
                    bail!("{status}: {}", String::from_utf8_lossy(&body));
                }
            }
        }));
    }
    for t in tasks {
        t.await.context("loader task")??;
    }
    Ok(())
}

/// `GET /data/<d>/<id>` of random existing documents at 32 connections.
pub struct GetById;

#[async_trait]
impl Scenario for GetById {
    fn name(&self) -> String {
        "data: GET by id (32 conn)".to_owned()
    }
    fn service(&self) -> &'static str {
        "data"
    }
    fn target(&self) -> Target {
        Target::CeilingRatio(0.6)
    }
    async fn run(&self, ctx: &Ctx) -> anyhow::Result<Measurement> {
        ctx.create("data", "g", None).await?;
        let reqs = (0..10)
            .map(|b| {
                let body = bulk_body(&format!("d{b}"), 1000, |i| {
                    format!("\"title\":\"document {i}\",\"n\":{i},\"tags\":[\"a\",\"b\"]")
                });
                post("/data/g/_bulk".to_owned(), body)
            })
            .collect();
        send_all(ctx, reqs, 2).await?;
        let make: MakeReq = Arc::new(|conn, seq| {
            let n = (conn as u64 * 7919 + seq * 31) % 10_000;
            Req::get(format!("/data/g/d{}-{:04}", n / 1000, n % 1000))
        });
        let (_, m) = ctx.load_vs_ceiling(32, StatusCode::OK, make).await?;
        Ok(m)
    }
}

/// `POST /data/<d>` of small documents with generated ids at 64 connections; each answer
/// comes after the document is durable.
pub struct Creates;

#[async_trait]
impl Scenario for Creates {
    fn name(&self) -> String {
        "data: durable single creates (64 conn)".to_owned()
    }
    fn service(&self) -> &'static str {
        "data"
    }
    fn target(&self) -> Target {
        Target::ItemsPerSec(20_000.0)
    }
    async fn run(&self, ctx: &Ctx) -> anyhow::Result<Measurement> {
        ctx.create("data", "c", None).await?;
        let make: MakeReq = Arc::new(|conn, seq| {
            let body = format!("{{\"title\":\"document\",\"conn\":{conn},\"seq\":{seq}}}");
            post("/data/c".to_owned(), Bytes::from(body))
        });
        let r = ctx.load(64, StatusCode::CREATED, make).await?;
        let mut m = Measurement::from_load(64, &r, None);
        m.items_per_sec = Some(r.rps);
        Ok(m)
    }
}

/// `POST /data/<d>/_bulk` of 1,000 small documents per request at 4 connections.
pub struct Bulk;

#[async_trait]
impl Scenario for Bulk {
    fn name(&self) -> String {
        "data: bulk 1,000-doc batches (4 conn)".to_owned()
    }
    fn service(&self) -> &'static str {
        "data"
    }
    fn target(&self) -> Target {
        Target::ItemsPerSec(200_000.0)
    }
    async fn run(&self, ctx: &Ctx) -> anyhow::Result<Measurement> {
        ctx.create("data", "b", None).await?;
        let make: MakeReq = Arc::new(|conn, seq| {
            let body = bulk_body(&format!("c{conn}s{seq}"), 1000, |i| {
                format!("\"type\":\"event\",\"n\":{i}")
            });
            post("/data/b/_bulk".to_owned(), body)
        });
        let r = ctx.load(4, StatusCode::OK, make).await?;
        let mut m = Measurement::from_load(4, &r, None);
        m.items_per_sec = Some(r.rps * 1000.0);
        Ok(m)
    }
}

/// An equality query (25 results) on an indexed field over 1,000,000 documents, one
/// connection; the same query on an unindexed field is reported in the note for contrast.
pub struct IndexedQuery;

const DOCS: usize = 1_000_000;
const GROUPS: u64 = 10_000;

#[async_trait]
impl Scenario for IndexedQuery {
    fn name(&self) -> String {
        "data: indexed equality query, 1M docs (1 conn)".to_owned()
    }
    fn service(&self) -> &'static str {
        "data"
    }
    fn target(&self) -> Target {
        Target::P50AtMostMs(2.0)
    }
    async fn run(&self, ctx: &Ctx) -> anyhow::Result<Measurement> {
        ctx.create("data", "big", None).await?;
        let started = Instant::now();
        let reqs = (0..DOCS / 1000)
            .map(|b| {
                let body = bulk_body(&format!("d{b:04}"), 1000, |i| {
                    let g = (b * 1000 + i) as u64 % GROUPS;
                    format!("\"group\":\"g{g}\",\"u\":\"g{g}\",\"n\":{i},\"title\":\"document\"")
                });
                post("/data/big/_bulk".to_owned(), body)
            })
            .collect();
        send_all(ctx, reqs, 4).await?;
        let loaded = started.elapsed();
        // Built over the loaded documents in one transaction: faster than maintaining it
        // through a million random inserts, and it exercises index creation at scale.
        let started = Instant::now();
        let index = Req::json(
            Method::POST,
            "/data/big/_index",
            &json!({"fields": ["group"], "name": "by-group"}),
        );
        ctx.expect(index, StatusCode::OK).await?;
        let indexed = started.elapsed();

        let query = |field: &'static str| -> MakeReq {
            Arc::new(move |conn, seq| {
                let g = (seq * 7919 + conn as u64 * 13) % GROUPS;
                Req::json(
                    Method::POST,
                    "/data/big/_query",
                    &json!({"selector": {field: format!("g{g}")}, "limit": 25}),
                )
            })
        };
        let r = ctx.load(1, StatusCode::OK, query("group")).await?;
        let mut m = Measurement::from_load(1, &r, None);
        // A few scans of a million documents are enough for the contrast.
        let scan_spec = LoadSpec {
            concurrency: 1,
            warmup: Duration::ZERO,
            duration: Duration::from_secs(5),
        };
        let scan = crate::load::run(&ctx.addrs, scan_spec, StatusCode::OK, query("u")).await?;
        m.note = format!(
            "{}unindexed p50 {:.0} ms ({} queries); 1M docs loaded in {:.1} s, indexed in \
             {:.1} s; RSS {} MB",
            if m.note.is_empty() {
                String::new()
            } else {
                format!("{}; ", m.note)
            },
            scan.p50_ms,
            scan.requests,
            loaded.as_secs_f64(),
            indexed.as_secs_f64(),
            ctx.server.rss_bytes().unwrap_or(0) / 1_000_000
        );
        Ok(m)
    }
}
