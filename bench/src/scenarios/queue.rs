//! Queue: jobs enqueued at 64 connections and delivered to a worker that answers 200.
//!
//! The worker runs inside this process (a small hyper server), so it shares the clock of the
//! load generator: each job carries the microsecond it was sent, and the worker records when
//! it arrived. Two rows, one per goal: jobs delivered per second during the measured window,
//! and the median time from sending the enqueue request to the job reaching the worker, both
//! on a queue created with the most concurrent deliveries a queue allows. A third row, with
//! no goal, runs the same load on a queue with the default concurrency and reports both
//! figures, for contrast.

use std::{
    convert::Infallible,
    sync::{Arc, Mutex, OnceLock},
    time::{Duration, Instant},
};

use anyhow::Context;
use async_trait::async_trait;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, Response, StatusCode, server::conn::http1, service::service_fn};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use quintet_core::ports::queue::DEFAULT_CONCURRENCY;

use super::{Ctx, Measurement, Scenario, Target};
use crate::load::{MakeReq, Req};

const CONNECTIONS: usize = 64;
/// Deliveries in flight at once for the benchmark's queue: the most a queue allows. With
/// 64 connections enqueueing as fast as the server answers, deliveries must keep pace on the
/// same two cores, and more delivery slots give them their share of the scheduler; at the
/// default of 8 the backlog (and so the latency) grows for as long as the load lasts.
const QUEUE_CONCURRENCY: u32 = 256;

/// The queue's scenarios, in report order.
pub fn scenarios() -> Vec<Box<dyn Scenario>> {
    vec![
        Box::new(Delivery(Goal::Throughput)),
        Box::new(Delivery(Goal::Latency)),
        Box::new(Delivery(Goal::DefaultConcurrency)),
    ]
}

/// Which goal the row measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Goal {
    /// Jobs delivered per second, end to end.
    Throughput,
    /// Median enqueue-to-delivery time.
    Latency,
    /// No goal: both figures on a queue created without `concurrency`.
    DefaultConcurrency,
}

/// Enqueue at 64 connections, deliver to an in-process worker.
pub struct Delivery(pub Goal);

impl Delivery {
    /// The queue's configuration: the worker's URL and, for the goal rows, the most
    /// concurrent deliveries.
    fn config(&self, url: &str) -> serde_json::Value {
        match self.0 {
            Goal::Throughput | Goal::Latency => {
                serde_json::json!({"target": url, "concurrency": QUEUE_CONCURRENCY})
            }
            Goal::DefaultConcurrency => serde_json::json!({"target": url}),
        }
    }
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn micros_since_epoch() -> u64 {
    u64::try_from(epoch().elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// What the worker saw: per delivery, when it arrived and how long after it was sent.
#[derive(Default)]
struct Seen {
    deliveries: Mutex<Vec<(u64, u64)>>,
}

impl Seen {
    fn record(&self, body: &[u8]) {
        let arrived = micros_since_epoch();
        let sent = serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v["t"].as_u64());
        if let Some(sent) = sent
            && let Ok(mut d) = self.deliveries.lock()
        {
            d.push((arrived, arrived.saturating_sub(sent)));
        }
    }
}

/// Start the worker; returns its URL.
async fn start_worker(seen: Arc<Seen>) -> anyhow::Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let seen = Arc::clone(&seen);
                    async move {
                        if let Ok(body) = req.into_body().collect().await {
                            seen.record(&body.to_bytes());
                        }
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::new())))
                    }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(format!("http://{addr}/jobs"))
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

#[async_trait]
impl Scenario for Delivery {
    fn name(&self) -> String {
        match self.0 {
            Goal::Throughput => format!("queue: enqueue → delivered, jobs/s ({CONNECTIONS} conn)"),
            Goal::Latency => format!("queue: enqueue → delivered, latency ({CONNECTIONS} conn)"),
            Goal::DefaultConcurrency => format!(
                "queue: enqueue → delivered, default queue concurrency {DEFAULT_CONCURRENCY} \
                 ({CONNECTIONS} conn)"
            ),
        }
    }

    fn service(&self) -> &'static str {
        "queue"
    }

    fn target(&self) -> Target {
        match self.0 {
            Goal::Throughput => Target::ItemsPerSec(5_000.0),
            Goal::Latency => Target::P50AtMostMs(10.0),
            Goal::DefaultConcurrency => Target::None,
        }
    }

    async fn run(&self, ctx: &Ctx) -> anyhow::Result<Measurement> {
        let seen = Arc::new(Seen::default());
        let url = start_worker(Arc::clone(&seen)).await?;
        ctx.create("queue", "bench", Some(self.config(&url)))
            .await?;
        epoch();
        let make: MakeReq = Arc::new(|conn, seq| {
            let job = serde_json::json!({
                "type": "bench",
                "t": micros_since_epoch(),
                "conn": conn,
                "seq": seq,
            });
            Req::json(Method::POST, "/queue/bench", &job)
        });
        let started = micros_since_epoch();
        let enqueue = ctx.load(CONNECTIONS, StatusCode::CREATED, make).await?;
        let from = started + u64::try_from(ctx.spec.warmup.as_micros())?;
        let until = from + u64::try_from(ctx.spec.duration.as_micros())?;

        // Let the backlog drain (bounded), so the report can say whether it kept up.
        let backlog_deadline = Instant::now() + Duration::from_secs(30);
        let mut drained = false;
        while Instant::now() < backlog_deadline {
            let (status, body) = ctx
                .call(Req::get("/queue/bench?status=READY&limit=1"))
                .await
                .context("listing the backlog")?;
            if status == StatusCode::OK && body.as_ref() == br#"{"ok":true,"jobs":[]}"# {
                drained = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        let deliveries = seen
            .deliveries
            .lock()
            .map(|d| d.clone())
            .unwrap_or_default();
        let in_window: Vec<&(u64, u64)> = deliveries
            .iter()
            .filter(|(arrived, _)| (from..until).contains(arrived))
            .collect();
        let delivered_per_sec = in_window.len() as f64 / ctx.spec.duration.as_secs_f64();
        let mut latencies: Vec<u64> = in_window.iter().map(|(_, l)| *l).collect();
        latencies.sort_unstable();
        let ceiling = ctx.ceiling(CONNECTIONS).await?;
        let mut m = Measurement::from_load(CONNECTIONS, &enqueue, Some(&ceiling));
        m.items_per_sec = Some(delivered_per_sec);
        let (enq_p50, enq_p99) = (m.p50_ms, m.p99_ms);
        if self.0 != Goal::Throughput {
            m.p50_ms = percentile(&latencies, 0.5);
            m.p99_ms = percentile(&latencies, 0.99);
        }
        let mut note = match self.0 {
            Goal::Throughput => format!(
                "items/s = jobs delivered in the window; enqueue {:.0}/s; enqueue→delivery p50 {:.1} ms",
                enqueue.rps,
                percentile(&latencies, 0.5)
            ),
            Goal::Latency => format!(
                "p50/p99 = enqueue request sent → job at the worker; enqueue p50 {enq_p50:.1} ms, p99 {enq_p99:.1} ms"
            ),
            Goal::DefaultConcurrency => format!(
                "queue created without concurrency ({DEFAULT_CONCURRENCY} deliveries at once; \
                 the goal rows use {QUEUE_CONCURRENCY}); items/s = jobs delivered in the \
                 window; p50/p99 = enqueue request sent → job at the worker; enqueue \
                 {:.0}/s, p50 {enq_p50:.1} ms",
                enqueue.rps
            ),
        };
        if !drained {
            note.push_str("; backlog not drained within 30 s");
        }
        if !m.note.is_empty() {
            note = format!("{note}; {}", m.note);
        }
        m.note = note;
        Ok(m)
    }
}
