//! The console's Data page over an instance of 1,000,000 documents (issue 20: the first
//! page shown in ≤ 300 ms on loopback). What is timed is what the page asks the server
//! for when it opens, in the same order and with the same waits: the applications and the
//! application's instances (admin API), a short-lived token of the application, then the
//! first page of documents together with the instance's indexes (application form). The
//! page's own files are not counted: they are cached by the browser after the first visit
//! and are the same whatever the instance holds.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use async_trait::async_trait;
use hyper::{Method, StatusCode};
use serde_json::{Value, json};

use super::{Ctx, Measurement, Scenario, Target, data};
use crate::load::Req;

/// Documents in the instance, in bulk requests of 1,000.
const DOCS: usize = 1_000_000;
/// The admin token of the scenario's server.
const TOKEN: &str = "bench-console-admin-token";
/// Documents on one page of the Data page (`PAGE` in `pages/data.js`), plus the one that
/// says whether a next page exists.
const PAGE: usize = 20;

/// The Data page's first page over 1M documents.
pub struct DataPage;

/// Every console scenario.
pub fn scenarios() -> Vec<Box<dyn super::Scenario>> {
    vec![Box::new(DataPage)]
}

fn with_token(mut req: Req, token: &str) -> Req {
    req.headers
        .push(("authorization", format!("Bearer {token}")));
    req
}

fn admin(method: Method, path: &str, body: Option<Value>) -> Req {
    let req = match body {
        Some(b) => Req::json(method, path, &b),
        None => Req {
            method,
            path: path.to_owned(),
            body: bytes::Bytes::new(),
            headers: Vec::new(),
        },
    };
    with_token(req, TOKEN)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// One opening of the Data page: the calls the page makes, as it makes them. Answers the
/// time of the whole and of the documents' page alone, ms.
async fn open_page(ctx: &Ctx, app: &str) -> anyhow::Result<(f64, f64)> {
    let start = Instant::now();
    ctx.expect(admin(Method::GET, "/_admin/apps", None), StatusCode::OK)
        .await?;
    ctx.expect(
        admin(Method::GET, &format!("/_admin/apps/{app}/instances"), None),
        StatusCode::OK,
    )
    .await?;
    let minted = ctx
        .expect(
            admin(
                Method::POST,
                &format!("/_admin/apps/{app}/token"),
                Some(json!({"ttl": 900})),
            ),
            StatusCode::CREATED,
        )
        .await?;
    let minted: Value = serde_json::from_slice(&minted)?;
    let token = minted["token"].as_str().context("a minted token")?;
    let docs_started = Instant::now();
    let docs = ctx.expect(
        with_token(
            Req::get(format!("/{app}/data/big?limit={}", PAGE + 1)),
            token,
        ),
        StatusCode::OK,
    );
    let indexes = ctx.expect(
        with_token(Req::get(format!("/{app}/data/big/_index")), token),
        StatusCode::OK,
    );
    let (docs, indexes) = tokio::join!(docs, indexes);
    let page: Value = serde_json::from_slice(&docs?)?;
    indexes?;
    anyhow::ensure!(
        page["docs"].as_array().map(Vec::len) == Some(PAGE + 1),
        "the first page is not {} documents: {page}",
        PAGE + 1
    );
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    Ok((ms(start.elapsed()), ms(docs_started.elapsed())))
}

#[async_trait]
impl Scenario for DataPage {
    fn name(&self) -> String {
        "console: Data page's first page, 1M docs (1 conn)".to_owned()
    }
    fn service(&self) -> &'static str {
        "console"
    }
    fn target(&self) -> Target {
        Target::P50AtMostMs(300.0)
    }
    fn server_args(&self) -> Vec<String> {
        // The load of a million documents goes faster than the starter plan's requests per
        // second per key: lift it, this row measures the page, not the rate limit.
        vec![
            "--admin-token".to_owned(),
            TOKEN.to_owned(),
            "--plan-limits".to_owned(),
            r#"{"starter": {"requests_per_second_per_key": 1000000}}"#.to_owned(),
        ]
    }
    async fn run(&self, ctx: &Ctx) -> anyhow::Result<Measurement> {
        let app = "shop";
        ctx.expect(
            admin(
                Method::POST,
                "/_admin/accounts",
                Some(json!({"name": "acme"})),
            ),
            StatusCode::CREATED,
        )
        .await?;
        ctx.expect(
            admin(
                Method::POST,
                "/_admin/apps",
                Some(json!({"name": app, "account": "acme"})),
            ),
            StatusCode::CREATED,
        )
        .await?;
        ctx.expect(
            admin(Method::POST, &format!("/_admin/apps/{app}/keys"), None),
            StatusCode::CREATED,
        )
        .await?;
        let minted = ctx
            .expect(
                admin(
                    Method::POST,
                    &format!("/_admin/apps/{app}/token"),
                    Some(json!({"ttl": 3600})),
                ),
                StatusCode::CREATED,
            )
            .await?;
        let minted: Value = serde_json::from_slice(&minted)?;
        let token = minted["token"]
            .as_str()
            .context("a minted token")?
            .to_owned();
        ctx.expect(
            with_token(
                Req {
                    method: Method::PUT,
                    path: format!("/{app}/data/big"),
                    body: bytes::Bytes::new(),
                    headers: Vec::new(),
                },
                &token,
            ),
            StatusCode::CREATED,
        )
        .await?;
        let started = Instant::now();
        let reqs = (0..DOCS / 1000)
            .map(|b| {
                let body = data::bulk_body(&format!("d{b:04}"), 1000, |i| {
                    format!(
                        "\"title\":\"document {i}\",\"year\":{},\"tags\":[\"a\",\"b\"]",
                        1900 + i % 120
                    )
                });
                with_token(data::post(format!("/{app}/data/big/_bulk"), body), &token)
            })
            .collect();
        data::send_all(ctx, reqs, 4).await?;
        let loaded = started.elapsed();

        // The first opening after the load, then openings one after another for the run's
        // duration (after its warm-up), as a person reopening the page would.
        let (first, _) = open_page(ctx, app).await?;
        let warm_until = Instant::now() + ctx.spec.warmup;
        while Instant::now() < warm_until {
            open_page(ctx, app).await?;
        }
        let mut whole = Vec::new();
        let mut docs = Vec::new();
        let started = Instant::now();
        while started.elapsed() < ctx.spec.duration || whole.len() < 10 {
            let (w, d) = open_page(ctx, app).await?;
            whole.push(w);
            docs.push(d);
        }
        let secs = started.elapsed().as_secs_f64();
        whole.sort_by(f64::total_cmp);
        docs.sort_by(f64::total_cmp);
        Ok(Measurement {
            concurrency: 1,
            rps: whole.len() as f64 / secs,
            p50_ms: percentile(&whole, 0.5),
            p99_ms: percentile(&whole, 0.99),
            note: format!(
                "p50/p99 = one opening: apps, instances, a minted token, then the first {PAGE} \
                 documents and the indexes ({} openings); first opening after the load {:.1} \
                 ms; the documents' page alone p50 {:.2} ms; 1M docs loaded in {:.1} s; RSS \
                 {} MB",
                whole.len(),
                first,
                percentile(&docs, 0.5),
                loaded.as_secs_f64(),
                ctx.server.rss_bytes().unwrap_or(0) / 1_000_000
            ),
            ..Measurement::default()
        })
    }
}
