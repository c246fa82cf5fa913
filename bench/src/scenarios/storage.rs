//! Storage: one 1 GiB upload and one 1 GiB download on loopback (throughput and the
//! server's memory growth, both part of the goal), and GETs of a 4 KiB object at 32
//! connections against the ceiling measured right before.
//!
//! The large object is generated while it is sent (one 1 MiB buffer repeated) and counted
//! while it is received, so the bench itself never holds it either.

use std::{
    convert::Infallible,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use async_trait::async_trait;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::{
    Method, Request, StatusCode,
    body::{Body, Frame, SizeHint},
    client::conn::http1,
};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::{Ctx, Measurement, Scenario, Target};
use crate::load::{MakeReq, Req};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// The goal for each 1 GiB transfer: 500 MB/s with server RSS growing < 64 MiB.
const TRANSFER_GOAL: Target = Target::MegabytesPerSecFlatMemory {
    mb_per_sec: 500.0,
    rss_growth_mib: 64.0,
};

/// `POST` of a 1 GiB object, streamed.
pub struct Upload;
/// `GET` of a 1 GiB object, streamed.
pub struct Download;
/// `GET` of a 4 KiB object at 32 connections.
pub struct SmallGet;

#[async_trait]
impl Scenario for Upload {
    fn name(&self) -> String {
        "storage: upload 1 GiB (1 conn)".to_owned()
    }

    fn service(&self) -> &'static str {
        "storage"
    }

    fn target(&self) -> Target {
        TRANSFER_GOAL
    }

    async fn run(&self, ctx: &Ctx) -> anyhow::Result<Measurement> {
        ctx.create("storage", "bench", None).await?;
        let rss = RssWatch::start(ctx);
        let start = Instant::now();
        upload(&ctx.addr, "/storage/bench/big.bin", GIB).await?;
        let secs = start.elapsed().as_secs_f64();
        Ok(transfer(secs, GIB, rss.stop().await))
    }
}

#[async_trait]
impl Scenario for Download {
    fn name(&self) -> String {
        "storage: download 1 GiB (1 conn)".to_owned()
    }

    fn service(&self) -> &'static str {
        "storage"
    }

    fn target(&self) -> Target {
        TRANSFER_GOAL
    }

    async fn run(&self, ctx: &Ctx) -> anyhow::Result<Measurement> {
        ctx.create("storage", "bench", None).await?;
        upload(&ctx.addr, "/storage/bench/big.bin", GIB).await?;
        let rss = RssWatch::start(ctx);
        let start = Instant::now();
        let received = download(&ctx.addr, "/storage/bench/big.bin").await?;
        let secs = start.elapsed().as_secs_f64();
        if received != GIB {
            bail!("downloaded {received} bytes, expected {GIB}");
        }
        Ok(transfer(secs, GIB, rss.stop().await))
    }
}

#[async_trait]
impl Scenario for SmallGet {
    fn name(&self) -> String {
        "storage: GET 4 KiB object (32 conn)".to_owned()
    }

    fn service(&self) -> &'static str {
        "storage"
    }

    fn target(&self) -> Target {
        Target::CeilingRatio(0.5)
    }

    async fn run(&self, ctx: &Ctx) -> anyhow::Result<Measurement> {
        ctx.create("storage", "bench", None).await?;
        upload(&ctx.addr, "/storage/bench/small/4k.bin", 4096).await?;
        let make: MakeReq = Arc::new(|_, _| Req::get("/storage/bench/small/4k.bin"));
        let (r, mut m) = ctx.load_vs_ceiling(32, StatusCode::OK, make).await?;
        m.megabytes_per_sec = Some(r.rps * 4096.0 / 1e6);
        Ok(m)
    }
}

/// A measurement of one transfer of `bytes` in `secs`, with the server's memory growth.
fn transfer(secs: f64, bytes: u64, rss_growth: Option<u64>) -> Measurement {
    let note = match rss_growth {
        Some(g) => format!(
            "server RSS +{:.1} MiB during the transfer",
            g as f64 / MIB as f64
        ),
        None => "server RSS unavailable".to_owned(),
    };
    Measurement {
        concurrency: 1,
        rps: 1.0 / secs,
        items_per_sec: None,
        megabytes_per_sec: Some(bytes as f64 / 1e6 / secs),
        p50_ms: secs * 1000.0,
        p99_ms: secs * 1000.0,
        ratio: None,
        rss_growth_bytes: rss_growth,
        note,
    }
}

/// Samples the server's resident memory until stopped; reports the largest growth.
struct RssWatch {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Option<u64>>,
}

impl RssWatch {
    fn start(ctx: &Ctx) -> Self {
        let server = Arc::clone(&ctx.server);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let task = tokio::spawn(async move {
            let base = server.rss_bytes()?;
            let mut peak = base;
            while !flag.load(Ordering::Relaxed) {
                peak = peak.max(server.rss_bytes().unwrap_or(0));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Some(peak - base)
        });
        Self { stop, task }
    }

    async fn stop(self) -> Option<u64> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.ok().flatten()
    }
}

/// A request body of `remaining` bytes made of one buffer repeated.
struct Repeat {
    chunk: Bytes,
    remaining: u64,
}

impl Repeat {
    fn new(len: u64) -> Self {
        // Incompressible-looking bytes (a linear congruential sequence), 1 MiB of them.
        let mut x: u32 = 0x9e37_79b9;
        let chunk: Vec<u8> = (0..MIB)
            .map(|_| {
                x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (x >> 24) as u8
            })
            .collect();
        Self {
            chunk: Bytes::from(chunk),
            remaining: len,
        }
    }
}

impl Body for Repeat {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.remaining == 0 {
            return Poll::Ready(None);
        }
        let n = self.remaining.min(self.chunk.len() as u64);
        self.remaining -= n;
        let frame = self.chunk.slice(..n as usize);
        Poll::Ready(Some(Ok(Frame::data(frame))))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

pub(super) async fn connect<B>(addr: &str) -> anyhow::Result<http1::SendRequest<B>>
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connect {addr}"))?;
    stream.set_nodelay(true)?;
    let (sender, driver) = http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = driver.await;
    });
    Ok(sender)
}

/// Upload `len` generated bytes to `path`, failing unless 200.
pub(super) async fn upload(addr: &str, path: &str, len: u64) -> anyhow::Result<()> {
    let mut sender = connect::<Repeat>(addr).await?;
    let req = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header("host", addr)
        .header("content-type", "application/octet-stream")
        .header("content-length", len)
        .body(Repeat::new(len))?;
    let res = sender.send_request(req).await?;
    let status = res.status();
    let body = res.into_body().collect().await?.to_bytes();
    if status != StatusCode::OK {
        bail!(
            "upload of {path}: {status}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    Ok(())
}

/// Download `path`, counting its bytes without keeping them.
async fn download(addr: &str, path: &str) -> anyhow::Result<u64> {
    let mut sender = connect::<Empty<Bytes>>(addr).await?;
    let req = Request::builder()
        .method(Method::GET)
        .uri(path)
        .header("host", addr)
        .body(Empty::new())?;
    let res = sender.send_request(req).await?;
    if res.status() != StatusCode::OK {
        bail!("download of {path}: {}", res.status());
    }
    let mut body = res.into_body();
    let mut received = 0u64;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            received += data.len() as u64;
        }
    }
    Ok(received)
}
