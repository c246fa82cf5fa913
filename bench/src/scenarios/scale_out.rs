//! The data and cache scenarios again on the scale-out adapters (data and registry on
//! PostgreSQL, cache on Redis), with one node and with two nodes sharing the engines, so
//! the report shows them beside the embedded rows of the same run.
//!
//! The engines come from the settings `scripts/engines` prints (`QUINTET_TEST_PG_URL`,
//! `QUINTET_TEST_REDIS_URL`); `bench/run` evaluates them when these scenarios are selected.
//! Each scenario gets a fresh PostgreSQL schema and an emptied Redis database, so no run
//! measures another's leftovers.

use anyhow::{Context, bail};
use async_trait::async_trait;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use super::{Ctx, Measurement, Scenario, Target, cache, data};

/// The Redis database the benchmark empties and uses (the tests use database 0).
const REDIS_DB: u32 = 15;

/// Where a scenario's nodes keep their data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deployment {
    /// One node, embedded stores in its data directory.
    Embedded,
    /// `nodes` nodes over PostgreSQL (registry and data) and Redis (cache).
    ScaleOut {
        /// How many `quintet serve` processes share the engines.
        nodes: usize,
    },
}

/// The engines a scale-out scenario runs on; dropping it removes the PostgreSQL schema.
#[derive(Debug)]
pub struct Engines {
    schema: quintet_engine_test::PgSchema,
    redis_url: String,
}

impl Engines {
    /// A fresh schema and an emptied Redis database for `scenario`.
    pub async fn prepare(scenario: &str) -> anyhow::Result<Self> {
        if std::env::var_os(quintet_engine_test::PG_URL).is_none()
            || std::env::var_os(quintet_engine_test::REDIS_URL).is_none()
        {
            bail!(
                "the scale-out scenarios need PostgreSQL and Redis: run them through bench/run, \
                 which starts the engines (scripts/engines)"
            );
        }
        let schema = quintet_engine_test::postgres(scenario)
            .await
            .context("PostgreSQL")?;
        let base = std::env::var(quintet_engine_test::REDIS_URL)?;
        let redis_url = redis_db_url(&base, REDIS_DB);
        flush_redis(&base, REDIS_DB).await?;
        Ok(Self { schema, redis_url })
    }

    /// The `quintet serve` arguments that put registry, data and cache on the engines.
    pub fn server_args(&self) -> Vec<String> {
        let pg = self.schema.url().to_owned();
        vec![
            "--registry".into(),
            pg.clone(),
            "--data".into(),
            pg,
            "--cache".into(),
            self.redis_url.clone(),
        ]
    }
}

/// `base` (`redis://host:port[/db]`) with database `db`.
fn redis_db_url(base: &str, db: u32) -> String {
    let (scheme, rest) = base.split_once("://").unwrap_or(("redis", base));
    let authority = rest.split('/').next().unwrap_or(rest);
    format!("{scheme}://{authority}/{db}")
}

/// Empty database `db` of the Redis at `base`, speaking RESP directly (two commands).
async fn flush_redis(base: &str, db: u32) -> anyhow::Result<()> {
    let rest = base.split_once("://").map_or(base, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let addr = rest.split('/').next().unwrap_or(rest);
    let mut stream = TcpStream::connect(addr)
        .await
        .with_context(|| format!("Redis at {addr}"))?;
    let db = db.to_string();
    let command = format!(
        "*2\r\n$6\r\nSELECT\r\n${}\r\n{db}\r\n*1\r\n$7\r\nFLUSHDB\r\n",
        db.len()
    );
    stream.write_all(command.as_bytes()).await?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 64];
    while answer.windows(2).filter(|w| w == b"\r\n").count() < 2 {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
    }
    if answer != b"+OK\r\n+OK\r\n" {
        bail!(
            "Redis FLUSHDB answered {:?}",
            String::from_utf8_lossy(&answer)
        );
    }
    Ok(())
}

/// The scale-out rows: the point and write scenarios of data and cache, one and two nodes.
pub fn scenarios() -> Vec<Box<dyn Scenario>> {
    let mut all: Vec<Box<dyn Scenario>> = Vec::new();
    for nodes in [1, 2] {
        let inner: Vec<Box<dyn Scenario>> = vec![
            Box::new(data::GetById),
            Box::new(data::Creates),
            Box::new(data::Bulk),
            Box::new(cache::Get),
            Box::new(cache::Put { memory_only: false }),
        ];
        all.extend(
            inner
                .into_iter()
                .map(|inner| Box::new(ScaleOut { inner, nodes }) as Box<dyn Scenario>),
        );
    }
    all
}

/// An embedded scenario run on the scale-out engines with `nodes` nodes.
struct ScaleOut {
    inner: Box<dyn Scenario>,
    nodes: usize,
}

#[async_trait]
impl Scenario for ScaleOut {
    fn name(&self) -> String {
        let engine = if self.inner.service() == "cache" {
            "Redis"
        } else {
            "PostgreSQL"
        };
        let nodes = if self.nodes == 1 { "node" } else { "nodes" };
        format!("{} on {engine}, {} {nodes}", self.inner.name(), self.nodes)
    }
    fn service(&self) -> &'static str {
        "scale-out"
    }
    fn target(&self) -> Target {
        // The goals are the embedded adapters'; these rows are for comparison.
        Target::None
    }
    fn server_args(&self) -> Vec<String> {
        self.inner.server_args()
    }
    fn deployment(&self) -> Deployment {
        Deployment::ScaleOut { nodes: self.nodes }
    }
    async fn run(&self, ctx: &Ctx) -> anyhow::Result<Measurement> {
        self.inner.run(ctx).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_urls_get_the_bench_database() {
        assert_eq!(
            redis_db_url("redis://127.0.0.1:6379", 15),
            "redis://127.0.0.1:6379/15"
        );
        assert_eq!(
            redis_db_url("redis://127.0.0.1:6379/0", 15),
            "redis://127.0.0.1:6379/15"
        );
    }

    #[test]
    fn names_say_engine_and_nodes() {
        let names: Vec<_> = scenarios().iter().map(|s| s.name()).collect();
        assert!(names.contains(&"data: GET by id (32 conn) on PostgreSQL, 2 nodes".to_owned()));
        assert!(names.contains(&"cache: GET an entry (32 conn) on Redis, 1 node".to_owned()));
        assert_eq!(names.len(), 10);
    }
}
