//! The load generator: N keep-alive HTTP/1.1 connections, each sending its next request as
//! soon as the previous answer is read, for a fixed time after a warm-up.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode, client::conn::http1};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// One request to send.
#[derive(Debug, Clone)]
pub struct Req {
    /// HTTP method.
    pub method: Method,
    /// Path and query.
    pub path: String,
    /// Body bytes (empty for none).
    pub body: Bytes,
    /// Extra headers.
    pub headers: Vec<(&'static str, String)>,
}

impl Req {
    /// A GET of `path`.
    pub fn get(path: impl Into<String>) -> Self {
        Self {
            method: Method::GET,
            path: path.into(),
            body: Bytes::new(),
            headers: Vec::new(),
        }
    }

    /// A request with a JSON body.
    pub fn json(method: Method, path: impl Into<String>, body: &serde_json::Value) -> Self {
        Self {
            method,
            path: path.into(),
            body: Bytes::from(body.to_string()),
            headers: vec![("content-type", "application/json".to_owned())],
        }
    }
}

/// Builds the request number `seq` of connection `conn`.
pub type MakeReq = Arc<dyn Fn(usize, u64) -> Req + Send + Sync>;

/// How to load the server.
#[derive(Debug, Clone, Copy)]
pub struct LoadSpec {
    /// Open connections, each with one request in flight.
    pub concurrency: usize,
    /// Requests sent but not measured, to warm caches and connections.
    pub warmup: Duration,
    /// Measured time.
    pub duration: Duration,
}

/// What a load run measured.
#[derive(Debug, Clone)]
pub struct LoadResult {
    /// Answered requests per second in the measured window.
    pub rps: f64,
    /// Median latency, milliseconds.
    pub p50_ms: f64,
    /// 99th-percentile latency, milliseconds.
    pub p99_ms: f64,
    /// Requests answered in the window.
    pub requests: u64,
    /// Answers with a status other than the expected one, or failed requests.
    pub errors: u64,
}

/// Run `make` against `addrs` as `spec` says (connection `i` goes to `addrs[i % len]`, so
/// several nodes share the load evenly); answers must have status `expect`.
pub async fn run(
    addrs: &[String],
    spec: LoadSpec,
    expect: StatusCode,
    make: MakeReq,
) -> anyhow::Result<LoadResult> {
    let start = Instant::now();
    let measure_from = start + spec.warmup;
    let until = measure_from + spec.duration;
    anyhow::ensure!(!addrs.is_empty(), "no server address to load");
    let mut tasks = Vec::with_capacity(spec.concurrency);
    for conn in 0..spec.concurrency {
        let (addr, make) = (addrs[conn % addrs.len()].clone(), Arc::clone(&make));
        tasks.push(tokio::spawn(async move {
            connection(&addr, conn, measure_from, until, expect, make).await
        }));
    }
    let mut latencies: Vec<u32> = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (lat, err) = t.await.context("load task")??;
        latencies.extend(lat);
        errors += err;
    }
    latencies.sort_unstable();
    let pct = |p: f64| -> f64 {
        if latencies.is_empty() {
            return 0.0;
        }
        let i = ((latencies.len() as f64 - 1.0) * p).round() as usize;
        f64::from(latencies[i]) / 1000.0
    };
    let requests = latencies.len() as u64;
    Ok(LoadResult {
        rps: requests as f64 / spec.duration.as_secs_f64(),
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
        requests,
        errors,
    })
}

async fn connection(
    addr: &str,
    conn: usize,
    measure_from: Instant,
    until: Instant,
    expect: StatusCode,
    make: MakeReq,
) -> anyhow::Result<(Vec<u32>, u64)> {
    let stream = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connect {addr}"))?;
    stream.set_nodelay(true)?;
    let (mut sender, driver) = http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = driver.await;
    });
    let mut latencies = Vec::with_capacity(1 << 16);
    let mut errors = 0;
    let mut seq = 0u64;
    loop {
        let now = Instant::now();
        if now >= until {
            break;
        }
        let spec = make(conn, seq);
        seq += 1;
        let mut req = Request::builder()
            .method(spec.method)
            .uri(spec.path)
            .header("host", addr);
        for (k, v) in spec.headers {
            req = req.header(k, v);
        }
        let req = req.body(Full::new(spec.body))?;
        sender.ready().await?;
        let sent = Instant::now();
        let res = sender.send_request(req).await?;
        let status = res.status();
        res.into_body().collect().await?;
        let done = Instant::now();
        if sent >= measure_from && done <= until {
            if status == expect {
                let micros = done.duration_since(sent).as_micros();
                latencies.push(u32::try_from(micros).unwrap_or(u32::MAX));
            } else {
                errors += 1;
            }
        }
    }
    Ok((latencies, errors))
}
