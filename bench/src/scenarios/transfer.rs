//! Export and import scenarios (#21): documents per second each way through the admin API
//! on the embedded engine, with the server's memory watched (goal: ≥100,000 documents/s
//! each way, RSS growth < 64 MiB). The import's time includes its read-back check.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::bail;
use async_trait::async_trait;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};

use super::{
    Ctx, Measurement, Scenario, Target,
    data::{bulk_body, post, send_all},
    storage::connect,
};

const TOKEN: &str = "bench-transfer-admin-token-0123456789";
const DOCS: usize = 1_000_000;
const GOAL: Target = Target::ItemsPerSecFlatMemory {
    items_per_sec: 100_000.0,
    rss_growth_mib: 64.0,
};

/// The transfer scenarios.
pub fn scenarios() -> Vec<Box<dyn Scenario>> {
    vec![Box::new(Export), Box::new(Import)]
}

/// `GET /_admin/export` of a data instance of 1,000,000 documents.
pub struct Export;

/// `POST /_admin/import` of the archive of a data instance of 1,000,000 documents.
pub struct Import;

/// A data instance `docs` with [`DOCS`] small documents.
async fn load(ctx: &Ctx) -> anyhow::Result<()> {
    ctx.create("data", "docs", None).await?;
    let reqs = (0..DOCS / 1000)
        .map(|b| {
            let body = bulk_body(&format!("d{b:04}"), 1000, |i| {
                format!("\"title\":\"document {i}\",\"n\":{i},\"tags\":[\"a\",\"b\"]")
            });
            post("/data/docs/_bulk".to_owned(), body)
        })
        .collect();
    send_all(ctx, reqs, 4).await
}

/// The whole export, as bytes.
async fn export(ctx: &Ctx) -> anyhow::Result<Vec<u8>> {
    let mut sender = connect::<Full<Bytes>>(&ctx.addr).await?;
    let req = Request::builder()
        .method(Method::GET)
        .uri("/_admin/export")
        .header("host", &ctx.addr)
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(Full::new(Bytes::new()))?;
    let res = sender.send_request(req).await?;
    let status = res.status();
    let mut body = res.into_body();
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            out.extend_from_slice(&data);
        }
    }
    if status != StatusCode::OK {
        bail!("export: {status}: {}", String::from_utf8_lossy(&out));
    }
    Ok(out)
}

/// Samples the server's resident and anonymous memory until stopped; the largest growth of
/// each.
struct Watch {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Option<(u64, u64)>>,
}

impl Watch {
    fn start(ctx: &Ctx) -> Self {
        let server = Arc::clone(&ctx.server);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let task = tokio::spawn(async move {
            let (rss0, anon0) = (server.rss_bytes()?, server.anon_bytes()?);
            let (mut rss, mut anon) = (rss0, anon0);
            while !flag.load(Ordering::Relaxed) {
                rss = rss.max(server.rss_bytes().unwrap_or(0));
                anon = anon.max(server.anon_bytes().unwrap_or(0));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Some((rss - rss0, anon - anon0))
        });
        Self { stop, task }
    }

    async fn stop(self) -> Option<(u64, u64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.ok().flatten()
    }
}

fn measured(secs: f64, bytes: usize, growth: Option<(u64, u64)>) -> Measurement {
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let note = match growth {
        Some((rss, anon)) => format!(
            "{DOCS} documents, archive {:.0} MB; server RSS +{:.1} MiB during the transfer, \
             of which anonymous (heap and SQLite's page caches) +{:.1} MiB, the rest \
             file pages mapped into the process",
            bytes as f64 / 1e6,
            mib(rss),
            mib(anon)
        ),
        None => "server RSS unavailable".to_owned(),
    };
    let rss = growth.map(|(rss, _)| rss);
    Measurement {
        concurrency: 1,
        rps: 1.0 / secs,
        items_per_sec: Some(DOCS as f64 / secs),
        megabytes_per_sec: Some(bytes as f64 / 1e6 / secs),
        p50_ms: secs * 1000.0,
        p99_ms: secs * 1000.0,
        ratio: None,
        rss_growth_bytes: rss,
        note,
    }
}

#[async_trait]
impl Scenario for Export {
    fn name(&self) -> String {
        "transfer: export 1,000,000 documents (1 conn)".to_owned()
    }

    fn service(&self) -> &'static str {
        "transfer"
    }

    fn target(&self) -> Target {
        GOAL
    }

    fn server_args(&self) -> Vec<String> {
        vec!["--admin-token".into(), TOKEN.into()]
    }

    async fn run(&self, ctx: &Ctx) -> anyhow::Result<Measurement> {
        load(ctx).await?;
        let rss = Watch::start(ctx);
        let start = Instant::now();
        let archive = export(ctx).await?;
        let secs = start.elapsed().as_secs_f64();
        Ok(measured(secs, archive.len(), rss.stop().await))
    }
}

#[async_trait]
impl Scenario for Import {
    fn name(&self) -> String {
        "transfer: import 1,000,000 documents (1 conn)".to_owned()
    }

    fn service(&self) -> &'static str {
        "transfer"
    }

    fn target(&self) -> Target {
        GOAL
    }

    fn server_args(&self) -> Vec<String> {
        vec!["--admin-token".into(), TOKEN.into()]
    }

    async fn run(&self, ctx: &Ctx) -> anyhow::Result<Measurement> {
        load(ctx).await?;
        let archive = Bytes::from(export(ctx).await?);
        let drop = Request::builder()
            .method(Method::DELETE)
            .uri("/data/docs")
            .header("host", &ctx.addr)
            .body(Full::new(Bytes::new()))?;
        let mut sender = connect::<Full<Bytes>>(&ctx.addr).await?;
        let res = sender.send_request(drop).await?;
        if res.status() != StatusCode::OK {
            bail!("dropping the instance: {}", res.status());
        }
        res.into_body().collect().await?;
        let size = archive.len();
        let rss = Watch::start(ctx);
        let start = Instant::now();
        // The server reads the body as it arrives, whatever the client's frames.
        let mut sender = connect::<Full<Bytes>>(&ctx.addr).await?;
        let req = Request::builder()
            .method(Method::POST)
            .uri("/_admin/import")
            .header("host", &ctx.addr)
            .header("authorization", format!("Bearer {TOKEN}"))
            .header("content-length", size)
            .body(Full::new(archive))?;
        let res = sender.send_request(req).await?;
        let status = res.status();
        let answer = res.into_body().collect().await?.to_bytes();
        let secs = start.elapsed().as_secs_f64();
        if status != StatusCode::OK {
            bail!("import: {status}: {}", String::from_utf8_lossy(&answer));
        }
        Ok(measured(secs, size, rss.stop().await))
    }
}
