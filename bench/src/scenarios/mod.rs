//! Benchmark scenarios. Each service adds its own module and lists its scenarios in
//! [`all`]; every scenario is measured against the bare-HTTP ceiling of the same run.

use std::{collections::BTreeMap, sync::Arc};

use anyhow::{Context, bail};
use async_trait::async_trait;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use tokio::sync::Mutex;

use crate::load::{self, LoadResult, LoadSpec, MakeReq, Req};

mod backup;
mod cache;
mod ceiling;
mod console;
mod data;
mod feed;
mod queue;
mod scale_out;
mod search;
mod storage;
mod transfer;

pub use scale_out::{Deployment, Engines};

/// Every scenario, in report order.
pub fn all() -> Vec<Box<dyn Scenario>> {
    let mut all: Vec<Box<dyn Scenario>> = vec![Box::new(ceiling::Ceiling)];
    all.extend(cache::scenarios());
    all.push(Box::new(storage::Upload));
    all.push(Box::new(storage::Download));
    all.push(Box::new(storage::SmallGet));
    all.extend(data::all());
    all.extend(console::scenarios());
    all.push(Box::new(search::BulkIndex));
    // Issue #25's goals: the default limit (no `limit` sent) at 16 connections and at one,
    // limit 10 against the ceiling, and a corpus ten times larger.
    let typo = |limit, connections, docs, target| search::TypoQueries {
        limit,
        connections,
        docs,
        target,
    };
    let docs = crate::search_corpus::DOCS;
    all.push(Box::new(typo(None, 16, docs, Target::P50AtMostMs(1.5))));
    all.push(Box::new(typo(
        Some(10),
        16,
        docs,
        Target::CeilingRatio(0.2),
    )));
    all.push(Box::new(typo(None, 1, docs, Target::P50AtMostMs(0.3))));
    all.push(Box::new(typo(
        None,
        16,
        10 * docs,
        Target::P50AtMostMs(5.0),
    )));
    all.extend(queue::scenarios());
    all.extend(transfer::scenarios());
    for size in [backup::SMALL, backup::FULL] {
        all.push(Box::new(backup::Speed(size)));
        all.push(Box::new(backup::RateDuring(size)));
    }
    all.extend(feed::scenarios());
    all.extend(scale_out::scenarios());
    all
}

/// What a scenario must reach to meet its issue's goal.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    /// No goal; reported for contrast.
    None,
    /// Requests per second at least this fraction of the ceiling at the same concurrency.
    CeilingRatio(f64),
    /// The measurement's ratio (reported in the ratio column) at least `at_least` of
    /// `what`, measured in the same run (a backup against `cp -a`, a rate against the rate
    /// without).
    RatioOf {
        /// What the ratio compares with.
        what: &'static str,
        /// Least ratio.
        at_least: f64,
    },
    /// Items (documents, jobs…) per second at least this.
    ItemsPerSec(f64),
    /// Median latency at most this many milliseconds.
    P50AtMostMs(f64),
    /// Median and 99th-percentile latency at most these many milliseconds.
    LatencyAtMostMs {
        /// Most median latency, ms.
        p50: f64,
        /// Most 99th-percentile latency, ms.
        p99: f64,
    },
    /// Throughput at least this many megabytes per second.
    MegabytesPerSec(f64),
    /// Items per second at least `items_per_sec`, and the server's resident memory growing
    /// by less than `rss_growth_mib` MiB meanwhile.
    ItemsPerSecFlatMemory {
        /// Least items per second.
        items_per_sec: f64,
        /// Growth of the server's RSS must stay below this, MiB.
        rss_growth_mib: f64,
    },
    /// Throughput at least `mb_per_sec` megabytes per second, and the server's resident
    /// memory growing by less than `rss_growth_mib` MiB meanwhile.
    MegabytesPerSecFlatMemory {
        /// Least throughput, MB/s.
        mb_per_sec: f64,
        /// Growth of the server's RSS must stay below this, MiB.
        rss_growth_mib: f64,
    },
}

impl Target {
    /// The goal as text for the report.
    pub fn describe(&self) -> String {
        match self {
            Self::None => "–".to_owned(),
            Self::CeilingRatio(r) => format!("≥{:.0} % of ceiling", r * 100.0),
            Self::RatioOf { what, at_least } => format!("≥{:.0} % of {what}", at_least * 100.0),
            Self::ItemsPerSec(n) => format!("≥{n:.0} items/s"),
            Self::P50AtMostMs(ms) => format!("p50 ≤{ms} ms"),
            Self::LatencyAtMostMs { p50, p99 } => format!("p50 ≤{p50} ms, p99 ≤{p99} ms"),
            Self::MegabytesPerSec(mb) => format!("≥{mb:.0} MB/s"),
            Self::MegabytesPerSecFlatMemory {
                mb_per_sec,
                rss_growth_mib,
            } => format!("≥{mb_per_sec:.0} MB/s, RSS +<{rss_growth_mib:.0} MiB"),
            Self::ItemsPerSecFlatMemory {
                items_per_sec,
                rss_growth_mib,
            } => format!("≥{items_per_sec:.0} items/s, RSS +<{rss_growth_mib:.0} MiB"),
        }
    }

    /// Whether `m` meets the goal (`None` when there is no goal).
    pub fn met(&self, m: &Measurement) -> Option<bool> {
        match self {
            Self::None => None,
            Self::CeilingRatio(r) => m.ratio.map(|x| x >= *r),
            Self::RatioOf { at_least, .. } => m.ratio.map(|x| x >= *at_least),
            Self::ItemsPerSec(n) => m.items_per_sec.map(|x| x >= *n),
            // No latency at all is a scenario that failed before measuring: not met.
            Self::P50AtMostMs(ms) => Some(m.p50_ms > 0.0 && m.p50_ms <= *ms),
            Self::LatencyAtMostMs { p50, p99 } => {
                Some(m.p50_ms > 0.0 && m.p50_ms <= *p50 && m.p99_ms <= *p99)
            }
            Self::MegabytesPerSec(mb) => m.megabytes_per_sec.map(|x| x >= *mb),
            // Memory that could not be read does not count as flat.
            Self::ItemsPerSecFlatMemory {
                items_per_sec,
                rss_growth_mib,
            } => m.items_per_sec.map(|x| {
                x >= *items_per_sec
                    && m.rss_growth_bytes
                        .is_some_and(|g| (g as f64) < rss_growth_mib * (1u64 << 20) as f64)
            }),
            Self::MegabytesPerSecFlatMemory {
                mb_per_sec,
                rss_growth_mib,
            } => m.megabytes_per_sec.map(|x| {
                x >= *mb_per_sec
                    && m.rss_growth_bytes
                        .is_some_and(|g| (g as f64) < rss_growth_mib * (1u64 << 20) as f64)
            }),
        }
    }
}

/// What a scenario reports.
#[derive(Debug, Clone, Default)]
pub struct Measurement {
    /// Connections used.
    pub concurrency: usize,
    /// Requests per second.
    pub rps: f64,
    /// Items per second, when requests carry several (bulk) or items are not requests.
    pub items_per_sec: Option<f64>,
    /// Megabytes (10^6 bytes) per second, for transfer scenarios.
    pub megabytes_per_sec: Option<f64>,
    /// Median latency, ms.
    pub p50_ms: f64,
    /// 99th-percentile latency, ms.
    pub p99_ms: f64,
    /// Requests per second relative to the ceiling at the same concurrency.
    pub ratio: Option<f64>,
    /// Growth of the server's resident memory during the measurement, bytes, for
    /// scenarios that watch it.
    pub rss_growth_bytes: Option<u64>,
    /// Anything else worth a sentence (errors, memory).
    pub note: String,
}

impl Measurement {
    /// A measurement from a load run, compared with `ceiling`.
    pub fn from_load(concurrency: usize, r: &LoadResult, ceiling: Option<&LoadResult>) -> Self {
        Self {
            concurrency,
            rps: r.rps,
            items_per_sec: None,
            megabytes_per_sec: None,
            p50_ms: r.p50_ms,
            p99_ms: r.p99_ms,
            ratio: ceiling.map(|c| r.rps / c.rps),
            rss_growth_bytes: None,
            note: if r.errors > 0 {
                format!("{} unexpected answers", r.errors)
            } else {
                String::new()
            },
        }
    }

    /// Append `text` to the note, after a `; ` when there is one already.
    pub fn add_note(&mut self, text: &str) {
        if !self.note.is_empty() {
            self.note.push_str("; ");
        }
        self.note.push_str(text);
    }
}

/// A benchmark scenario.
#[async_trait]
pub trait Scenario: Send + Sync {
    /// Name shown in the report, unique.
    fn name(&self) -> String;
    /// The service it exercises (`http` for the server itself), for `bench/run <service>`.
    fn service(&self) -> &'static str;
    /// The goal it must meet.
    fn target(&self) -> Target;
    /// Extra `quintet serve` arguments for this scenario's server.
    fn server_args(&self) -> Vec<String> {
        Vec::new()
    }
    /// Where the scenario's nodes keep their data: the embedded default unless it says.
    fn deployment(&self) -> Deployment {
        Deployment::Embedded
    }
    /// Prepare (through `ctx`) and measure.
    async fn run(&self, ctx: &Ctx) -> anyhow::Result<Measurement>;
}

/// What scenarios get: the server's address, the load settings, a client for setup, and
/// the ceiling at each concurrency (measured on first use, once per run).
pub struct Ctx {
    /// `host:port` of the (first) server; setup requests go there.
    pub addr: String,
    /// `host:port` of every node; load runs spread their connections over them.
    pub addrs: Vec<String>,
    /// Warm-up and measured time of each load run.
    pub spec: LoadSpec,
    client: Client<HttpConnector, Full<Bytes>>,
    ceilings: Mutex<BTreeMap<usize, LoadResult>>,
    /// The server under test (its memory can be read).
    pub server: Arc<crate::server::Server>,
}

impl Ctx {
    /// A context for the nodes at `addrs` (at least one), with ceilings already measured in
    /// this run.
    pub fn with_ceilings(
        addrs: Vec<String>,
        spec: LoadSpec,
        ceilings: BTreeMap<usize, LoadResult>,
        server: Arc<crate::server::Server>,
    ) -> Self {
        let client = Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
        Self {
            addr: addrs.first().cloned().unwrap_or_default(),
            addrs,
            spec,
            client,
            ceilings: Mutex::new(ceilings),
            server,
        }
    }

    /// Send one request (for setup) and return status and body.
    pub async fn call(&self, req: Req) -> anyhow::Result<(StatusCode, Bytes)> {
        let mut builder = Request::builder()
            .method(req.method)
            .uri(format!("http://{}{}", self.addr, req.path));
        for (k, v) in req.headers {
            builder = builder.header(k, v);
        }
        let res = self
            .client
            .request(builder.body(Full::new(req.body))?)
            .await?;
        let status = res.status();
        let body = res.into_body().collect().await?.to_bytes();
        Ok((status, body))
    }

    /// Send one request and fail unless it answers `expect`.
    pub async fn expect(&self, req: Req, expect: StatusCode) -> anyhow::Result<Bytes> {
        let what = format!("{} {}", req.method, req.path);
        let (status, body) = self.call(req).await.with_context(|| what.clone())?;
        if status != expect {
            bail!(
                "{what}: expected {expect}, got {status}: {}",
                String::from_utf8_lossy(&body)
            );
        }
        Ok(body)
    }

    /// Create an instance (`PUT /<kind>/<name>`), failing unless 201.
    pub async fn create(
        &self,
        kind: &str,
        name: &str,
        config: Option<serde_json::Value>,
    ) -> anyhow::Result<()> {
        let req = match config {
            Some(c) => Req::json(Method::PUT, format!("/{kind}/{name}"), &c),
            None => Req {
                method: Method::PUT,
                path: format!("/{kind}/{name}"),
                body: Bytes::new(),
                headers: Vec::new(),
            },
        };
        self.expect(req, StatusCode::CREATED).await.map(|_| ())
    }

    /// Load the server with `make` at `concurrency` for the run's duration.
    pub async fn load(
        &self,
        concurrency: usize,
        expect: StatusCode,
        make: MakeReq,
    ) -> anyhow::Result<LoadResult> {
        let spec = LoadSpec {
            concurrency,
            ..self.spec
        };
        load::run(&self.addrs, spec, expect, make).await
    }

    /// The bare-HTTP ceiling (`GET /_health`) at `concurrency`, measured once per run.
    pub async fn ceiling(&self, concurrency: usize) -> anyhow::Result<LoadResult> {
        let mut ceilings = self.ceilings.lock().await;
        if let Some(c) = ceilings.get(&concurrency) {
            return Ok(c.clone());
        }
        let make: MakeReq = Arc::new(|_, _| Req::get("/_health"));
        let measured = self.load(concurrency, StatusCode::OK, make).await?;
        ceilings.insert(concurrency, measured.clone());
        Ok(measured)
    }

    /// Load the server with `make` at `concurrency` and compare it with the bare-HTTP
    /// ceiling measured right before, on this scenario's server, for a goal that is a
    /// fraction of the ceiling: on a shared machine the run's first ceiling
    /// ([`Ctx::ceiling`]) can be minutes and a different load away. The note gives the
    /// ceiling.
    pub async fn load_vs_ceiling(
        &self,
        concurrency: usize,
        expect: StatusCode,
        make: MakeReq,
    ) -> anyhow::Result<(LoadResult, Measurement)> {
        let health: MakeReq = Arc::new(|_, _| Req::get("/_health"));
        let ceiling = self.load(concurrency, StatusCode::OK, health).await?;
        let r = self.load(concurrency, expect, make).await?;
        let mut m = Measurement::from_load(concurrency, &r, Some(&ceiling));
        m.add_note(&format!(
            "ceiling measured just before: {:.0} req/s",
            ceiling.rps
        ));
        Ok((r, m))
    }

    /// Every ceiling measured so far, by concurrency.
    pub async fn ceilings(&self) -> BTreeMap<usize, LoadResult> {
        self.ceilings.lock().await.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transfer_goal_needs_both_speed_and_flat_memory() {
        let goal = Target::MegabytesPerSecFlatMemory {
            mb_per_sec: 500.0,
            rss_growth_mib: 64.0,
        };
        let m = |mb: f64, rss_mib: Option<u64>| Measurement {
            megabytes_per_sec: Some(mb),
            rss_growth_bytes: rss_mib.map(|g| g << 20),
            ..Measurement::default()
        };
        assert_eq!(goal.met(&m(600.0, Some(10))), Some(true));
        assert_eq!(goal.met(&m(600.0, Some(64))), Some(false), "memory grew");
        assert_eq!(goal.met(&m(600.0, None)), Some(false), "memory unknown");
        assert_eq!(goal.met(&m(400.0, Some(10))), Some(false), "too slow");
        assert_eq!(goal.met(&Measurement::default()), None, "no transfer");
    }

    #[test]
    fn a_latency_goal_is_not_met_by_a_scenario_that_measured_nothing() {
        let goal = Target::P50AtMostMs(300.0);
        let p50 = |ms: f64| Measurement {
            p50_ms: ms,
            ..Measurement::default()
        };
        assert_eq!(goal.met(&p50(55.0)), Some(true));
        assert_eq!(goal.met(&p50(301.0)), Some(false));
        assert_eq!(goal.met(&Measurement::default()), Some(false), "it failed");
        let both = Target::LatencyAtMostMs {
            p50: 5.0,
            p99: 20.0,
        };
        let at = |p50_ms: f64, p99_ms: f64| Measurement {
            p50_ms,
            p99_ms,
            ..Measurement::default()
        };
        assert_eq!(both.met(&at(3.5, 19.0)), Some(true));
        assert_eq!(both.met(&at(3.5, 39.0)), Some(false), "the tail counts");
        assert_eq!(both.met(&at(6.0, 19.0)), Some(false));
        assert_eq!(both.met(&Measurement::default()), Some(false), "it failed");
    }
}
