//! Change feed: write → event latency. 100 subscribers follow one data instance with
//! `feed=continuous` while documents are created at a steady 1,000 writes per second; each
//! document's id carries the microsecond its write was sent, so every subscriber measures,
//! per change, the time from sending the write to reading its change (the write's durable
//! commit included). One row on the embedded engine (the goal: p50 ≤ 5 ms, p99 ≤
//! 20 ms) and one on PostgreSQL with one node, for the record.

use std::{
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use async_trait::async_trait;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::{Client, connect::HttpConnector};

use super::{Ctx, Deployment, Measurement, Scenario, Target};

/// Subscribers following the instance.
const SUBSCRIBERS: usize = 100;
/// Writes per second.
const RATE: u64 = 1_000;

/// The change feed's scenarios, in report order.
pub fn scenarios() -> Vec<Box<dyn Scenario>> {
    vec![
        Box::new(Latency { postgres: false }),
        Box::new(Latency { postgres: true }),
    ]
}

/// Write → event latency with [`SUBSCRIBERS`] subscribers at [`RATE`] writes/s.
pub struct Latency {
    postgres: bool,
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn micros() -> u64 {
    u64::try_from(epoch().elapsed().as_micros()).unwrap_or(u64::MAX)
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

type Http = Client<HttpConnector, Full<Bytes>>;

/// Follow the feed at `url` until `until` (µs since the epoch), recording the latency of
/// every change whose write was sent in `[from, until)`.
async fn subscribe(
    http: Http,
    url: String,
    ready: Arc<AtomicU64>,
    from: Arc<AtomicU64>,
    until: Arc<AtomicU64>,
    samples: Arc<Mutex<Vec<u64>>>,
) -> anyhow::Result<()> {
    let req = Request::builder()
        .method(Method::GET)
        .uri(url)
        .body(Full::new(Bytes::new()))?;
    let res = http.request(req).await?;
    if res.status() != StatusCode::OK {
        bail!("the feed answered {}", res.status());
    }
    ready.fetch_add(1, Ordering::SeqCst);
    let mut body = res.into_body();
    let mut buf: Vec<u8> = Vec::new();
    let mut mine = Vec::new();
    while let Some(frame) = body.frame().await {
        let now = micros();
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        buf.extend_from_slice(&data);
        while let Some(i) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=i).collect();
            // {"seq":"…","id":"<µs>-<n>",…}: the id's first number is when it was sent.
            let text = String::from_utf8_lossy(&line);
            let Some(rest) = text.split("\"id\":\"").nth(1) else {
                continue;
            };
            let Some(sent) = rest.split('-').next().and_then(|t| t.parse::<u64>().ok()) else {
                continue;
            };
            let (lo, hi) = (from.load(Ordering::SeqCst), until.load(Ordering::SeqCst));
            if sent >= lo && sent < hi {
                mine.push(now.saturating_sub(sent));
            }
            if sent >= hi {
                if let Ok(mut all) = samples.lock() {
                    all.extend(mine);
                }
                return Ok(());
            }
        }
    }
    bail!("the feed ended early")
}

#[async_trait]
impl Scenario for Latency {
    fn name(&self) -> String {
        let base =
            format!("feed: write → event latency, {RATE} writes/s, {SUBSCRIBERS} subscribers");
        if self.postgres {
            format!("{base} on PostgreSQL, 1 node")
        } else {
            base
        }
    }

    fn service(&self) -> &'static str {
        if self.postgres { "scale-out" } else { "feed" }
    }

    fn target(&self) -> Target {
        if self.postgres {
            Target::None
        } else {
            Target::LatencyAtMostMs {
                p50: 5.0,
                p99: 20.0,
            }
        }
    }

    fn server_args(&self) -> Vec<String> {
        // The writes are spread over as many connections as they need: all from this
        // process, whose address the per-client bound would count them against.
        vec![
            "--feed-max-streams-per-client".into(),
            "1000".into(),
            "--max-connections-per-client".into(),
            "0".into(),
        ]
    }

    fn deployment(&self) -> Deployment {
        if self.postgres {
            Deployment::ScaleOut { nodes: 1 }
        } else {
            Deployment::Embedded
        }
    }

    async fn run(&self, ctx: &Ctx) -> anyhow::Result<Measurement> {
        ctx.create("data", "feed", None).await?;
        epoch();
        let http: Http = Client::builder(hyper_util::rt::TokioExecutor::new())
            .pool_max_idle_per_host(SUBSCRIBERS + 64)
            .build_http();
        let ready = Arc::new(AtomicU64::new(0));
        let (from, until) = (
            Arc::new(AtomicU64::new(u64::MAX)),
            Arc::new(AtomicU64::new(u64::MAX)),
        );
        let samples = Arc::new(Mutex::new(Vec::new()));
        let url = format!(
            "http://{}/data/feed/_changes?feed=continuous&since=now",
            ctx.addr
        );
        let mut subs = Vec::new();
        for _ in 0..SUBSCRIBERS {
            subs.push(tokio::spawn(subscribe(
                http.clone(),
                url.clone(),
                Arc::clone(&ready),
                Arc::clone(&from),
                Arc::clone(&until),
                Arc::clone(&samples),
            )));
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while ready.load(Ordering::SeqCst) < SUBSCRIBERS as u64 {
            if Instant::now() > deadline {
                bail!("the subscribers did not connect");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }

        // Writes at a steady rate: the warm-up, the measured window, then one more write
        // sent after the window that tells the subscribers to stop.
        let start = micros();
        let warm = u64::try_from(ctx.spec.warmup.as_micros())?;
        let measured = u64::try_from(ctx.spec.duration.as_micros())?;
        from.store(start + warm, Ordering::SeqCst);
        until.store(start + warm + measured, Ordering::SeqCst);
        let post_url = format!("http://{}/data/feed", ctx.addr);
        let failed = Arc::new(AtomicU64::new(0));
        let written = Arc::new(AtomicU64::new(0));
        let acks = Arc::new(Mutex::new(Vec::new()));
        let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / RATE));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let mut n = 0u64;
        let mut writes = Vec::new();
        loop {
            tick.tick().await;
            let sent = micros();
            let last = sent >= start + warm + measured;
            n += 1;
            let body = format!("{{\"_id\":\"{sent}-{n}\"}}");
            let req = Request::builder()
                .method(Method::POST)
                .uri(&post_url)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body)))?;
            let (http, failed, written) = (http.clone(), Arc::clone(&failed), Arc::clone(&written));
            let acks = Arc::clone(&acks);
            let in_window = sent >= start + warm && !last;
            writes.push(tokio::spawn(async move {
                match http.request(req).await {
                    Ok(r) if r.status() == StatusCode::CREATED => {
                        written.fetch_add(1, Ordering::Relaxed);
                        if in_window && let Ok(mut a) = acks.lock() {
                            a.push(micros().saturating_sub(sent));
                        }
                    }
                    _ => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
            if last {
                break;
            }
        }
        for w in writes {
            let _ = w.await;
        }
        let mut ended = 0;
        for s in subs {
            if tokio::time::timeout(Duration::from_secs(30), s)
                .await
                .context("a subscriber fell behind")?
                .context("a subscriber task")?
                .is_ok()
            {
                ended += 1;
            }
        }
        let mut all = samples.lock().map(|s| s.clone()).unwrap_or_default();
        all.sort_unstable();
        let secs = ctx.spec.duration.as_secs_f64();
        let writes_in_window = all.len() as f64 / SUBSCRIBERS as f64;
        let mut m = Measurement {
            concurrency: SUBSCRIBERS,
            rps: writes_in_window / secs,
            items_per_sec: Some(all.len() as f64 / secs),
            p50_ms: percentile(&all, 0.5),
            p99_ms: percentile(&all, 0.99),
            ..Measurement::default()
        };
        let mut acks = acks.lock().map(|a| a.clone()).unwrap_or_default();
        acks.sort_unstable();
        m.add_note(&format!(
            "req/s = writes in the window; items/s = changes read by all subscribers; \
             p50/p99 = write sent → its change read by a subscriber; the writes' own \
             acknowledgements (durable commit) p50 {:.3} / p99 {:.3} ms; {} writes, {} \
             failed; {ended}/{SUBSCRIBERS} subscribers read through the window",
            percentile(&acks, 0.5),
            percentile(&acks, 0.99),
            written.load(Ordering::Relaxed),
            failed.load(Ordering::Relaxed),
        ));
        Ok(m)
    }
}
