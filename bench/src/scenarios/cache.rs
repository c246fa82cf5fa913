//! Cache scenarios: point reads and writes at 32 connections against the ceiling
//! (measured right before each), and pattern queries over 100,000 keys that match 100.

use std::sync::Arc;

use anyhow::{Context, bail};
use async_trait::async_trait;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use serde_json::json;

use super::{Ctx, Measurement, Scenario, Target};
use crate::load::{MakeReq, Req};

/// The cache's scenarios, in report order.
pub fn scenarios() -> Vec<Box<dyn Scenario>> {
    vec![
        Box::new(Get),
        Box::new(Put { memory_only: false }),
        Box::new(Put { memory_only: true }),
        Box::new(Query {
            label: "prefix `s042-*`",
            pattern: "s042-*",
        }),
        Box::new(Query {
            label: "`*-k0001*` (no prefix: every key scanned)",
            pattern: "*-k0001*",
        }),
    ]
}

/// Keys the point scenarios spread over.
const HOT_KEYS: u64 = 1_000;
/// Keys stored for the query scenarios.
const QUERY_KEYS: usize = 100_000;

/// A value of about 100 bytes, like a small cached record.
fn value(i: u64) -> serde_json::Value {
    json!({"title": format!("Movie number {i}"), "year": 1984, "tags": ["comedy", "ghosts"], "rating": 7.8})
}

/// The key a connection uses for its `seq`-th request: spread, never all on one key.
fn hot_key(conn: usize, seq: u64) -> u64 {
    (conn as u64 * 7_919 + seq * 31) % HOT_KEYS
}

async fn fill_hot_keys(ctx: &Ctx) -> anyhow::Result<()> {
    ctx.create("cache", "bench", None).await?;
    for i in 0..HOT_KEYS {
        let body = json!({"key": format!("k{i:04}"), "value": value(i)});
        ctx.expect(
            Req::json(Method::POST, "/cache/bench", &body),
            StatusCode::CREATED,
        )
        .await?;
    }
    Ok(())
}

/// `GET /cache/bench/<key>` over 1,000 keys.
pub struct Get;

#[async_trait]
impl Scenario for Get {
    fn name(&self) -> String {
        "cache: GET an entry (32 conn)".to_owned()
    }

    fn service(&self) -> &'static str {
        "cache"
    }

    fn target(&self) -> Target {
        Target::CeilingRatio(0.6)
    }

    async fn run(&self, ctx: &Ctx) -> anyhow::Result<Measurement> {
        fill_hot_keys(ctx).await?;
        let make: MakeReq =
            Arc::new(|conn, seq| Req::get(format!("/cache/bench/k{:04}", hot_key(conn, seq))));
        let (_, m) = ctx.load_vs_ceiling(32, StatusCode::CREATED, make).await?;
        Ok(m)
    }
}

/// `PUT /cache/bench/<key>` replacing values of 1,000 keys; durable (or memory-only).
pub struct Put {
    /// Run the server with `--cache-memory-only`.
    pub memory_only: bool,
}

#[async_trait]
impl Scenario for Put {
    fn name(&self) -> String {
        if self.memory_only {
            "cache: PUT an entry, memory-only (32 conn)".to_owned()
        } else {
            "cache: PUT an entry (32 conn)".to_owned()
        }
    }

    fn service(&self) -> &'static str {
        "cache"
    }

    fn target(&self) -> Target {
        if self.memory_only {
            Target::None
        } else {
            Target::CeilingRatio(0.4)
        }
    }

    fn server_args(&self) -> Vec<String> {
        if self.memory_only {
            vec!["--cache-memory-only".to_owned()]
        } else {
            Vec::new()
        }
    }

    async fn run(&self, ctx: &Ctx) -> anyhow::Result<Measurement> {
        fill_hot_keys(ctx).await?;
        let make: MakeReq = Arc::new(|conn, seq| {
            let k = hot_key(conn, seq);
            Req::json(Method::PUT, format!("/cache/bench/k{k:04}"), &value(seq))
        });
        let (_, m) = ctx.load_vs_ceiling(32, StatusCode::OK, make).await?;
        Ok(m)
    }
}

/// A pattern query over 100,000 keys `s<i mod 1000>-k<i>` that matches exactly 100.
pub struct Query {
    /// Shown in the name.
    pub label: &'static str,
    /// The pattern (URL-safe as written).
    pub pattern: &'static str,
}

/// Store the query keys with 32 concurrent writers.
async fn fill_query_keys(ctx: &Ctx) -> anyhow::Result<()> {
    ctx.create("cache", "bench", None).await?;
    let client = Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
    let mut tasks = Vec::new();
    for worker in 0..32 {
        let (client, addr) = (client.clone(), ctx.addr.clone());
        tasks.push(tokio::spawn(async move {
            for i in (worker..QUERY_KEYS).step_by(32) {
                let key = format!("s{:03}-k{i:06}", i % 1000);
                let req = Request::builder()
                    .method(Method::PUT)
                    .uri(format!("http://{addr}/cache/bench/{key}"))
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from(value(i as u64).to_string())))?;
                let res = client.request(req).await?;
                let status = res.status();
                res.into_body().collect().await?;
                if status != StatusCode::OK {
                    bail!("PUT {key}: {status}");
                }
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await.context("setup task")??;
    }
    Ok(())
}

#[async_trait]
impl Scenario for Query {
    fn name(&self) -> String {
        format!("cache: query {} matching 100 of 100,000 keys", self.label)
    }

    fn service(&self) -> &'static str {
        "cache"
    }

    fn target(&self) -> Target {
        Target::P50AtMostMs(5.0)
    }

    async fn run(&self, ctx: &Ctx) -> anyhow::Result<Measurement> {
        fill_query_keys(ctx).await?;
        let path = format!("/cache/bench/_query?pattern={}", self.pattern);
        let body = ctx.expect(Req::get(path.clone()), StatusCode::OK).await?;
        let answer: serde_json::Value = serde_json::from_slice(&body)?;
        let found = answer["docs"].as_array().map_or(0, Vec::len);
        if found != 100 {
            bail!("{path} found {found} entries, expected 100");
        }
        let make: MakeReq = Arc::new(move |_, _| Req::get(path.clone()));
        let r = ctx.load(1, StatusCode::OK, make).await?;
        let mut m = Measurement::from_load(1, &r, None);
        m.items_per_sec = Some(r.rps * 100.0);
        Ok(m)
    }
}
