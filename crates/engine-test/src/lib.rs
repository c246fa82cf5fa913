//! Tests against the real engines: where they are, whether to skip, and a namespace of
//! its own for each test.
//!
//! `scripts/engines` brings PostgreSQL, Redis and an S3 server up on loopback and prints
//! their settings as `QUINTET_TEST_*` variables; `scripts/test` exports them and sets
//! `REQUIRE_ENGINES=1`. A test asks for an engine by name and gets `None` when the engine
//! is not configured: it then returns early, having printed why (a plain `cargo test`
//! without engines still passes). With `REQUIRE_ENGINES=1` a missing engine panics
//! instead, so CI never passes by skipping.
//!
//! | engine | variables | isolation |
//! |---|---|---|
//! | PostgreSQL | `QUINTET_TEST_PG_URL` (a database the tests may create schemas in) | [`postgres`] creates a schema `qt_<seconds>_<pid>_<n>` and drops it when the [`PgSchema`] is dropped |
//! | Redis | `QUINTET_TEST_REDIS_URL` | [`redis`] hands out a unique key prefix |
//! | S3 | `QUINTET_TEST_S3_ENDPOINT`, `_BUCKET`, `_KEY`, `_SECRET`, `_REGION` (default `us-east-1`) | [`s3`] hands out a unique key prefix in the bucket |
//!
//! ```no_run
//! # async fn t() {
//! let Some(pg) = quintet_engine_test::postgres("registry_conformance").await else {
//!     return; // not configured, and not required: skipped with a message
//! };
//! // pg.url() reaches a fresh, empty schema of its own.
//! # }
//! ```

#![allow(clippy::expect_used, clippy::panic)]

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::{SystemTime, UNIX_EPOCH},
};

/// The variable that turns a missing engine from a skip into a failure.
pub const REQUIRE_ENGINES: &str = "REQUIRE_ENGINES";

/// The PostgreSQL test database URL.
pub const PG_URL: &str = "QUINTET_TEST_PG_URL";
/// The Redis URL.
pub const REDIS_URL: &str = "QUINTET_TEST_REDIS_URL";
/// The S3 endpoint URL.
pub const S3_ENDPOINT: &str = "QUINTET_TEST_S3_ENDPOINT";
/// The S3 bucket tests may write to.
pub const S3_BUCKET: &str = "QUINTET_TEST_S3_BUCKET";
/// The S3 access key id.
pub const S3_KEY: &str = "QUINTET_TEST_S3_KEY";
/// The S3 secret access key.
pub const S3_SECRET: &str = "QUINTET_TEST_S3_SECRET";
/// The S3 region (default `us-east-1`).
pub const S3_REGION: &str = "QUINTET_TEST_S3_REGION";

/// Whether a missing engine must fail the test (`REQUIRE_ENGINES=1`).
pub fn required() -> bool {
    std::env::var(REQUIRE_ENGINES).is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

/// The value of `var`, or `None` after saying that `test` skips because `engine` is not
/// configured. Panics when engines are [`required`].
fn setting(var: &str, engine: &str, test: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ if required() => panic!(
            "{test}: {engine} is required ({REQUIRE_ENGINES}=1) but {var} is not set: run \
             the tests with scripts/test, or eval \"$(scripts/engines)\" first"
        ),
        _ => {
            eprintln!(
                "skipping {test}: {engine} is not configured (set {var}, e.g. with \
                 eval \"$(scripts/engines)\"; scripts/test does this and requires it)"
            );
            None
        }
    }
}

/// A name no other test (in any process) gets: `qt_<unix seconds>_<pid>_<n>`. The
/// seconds let `scripts/engines` drop what a killed run left behind.
pub fn unique_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!(
        "qt_{secs}_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A schema of its own in the PostgreSQL test database, dropped (with everything in it)
/// when this is dropped.
#[derive(Debug)]
pub struct PgSchema {
    base_url: String,
    schema: String,
    url: String,
}

/// A fresh schema for `test`, or `None` (with a message) when PostgreSQL is not
/// configured and not required.
pub async fn postgres(test: &str) -> Option<PgSchema> {
    let base_url = setting(PG_URL, "PostgreSQL", test)?;
    let schema = unique_name();
    run_sql(&base_url, &format!("CREATE SCHEMA \"{schema}\""))
        .await
        .unwrap_or_else(|e| panic!("{test}: cannot create schema {schema} at {base_url}: {e}"));
    let separator = if base_url.contains('?') { '&' } else { '?' };
    let url = format!("{base_url}{separator}options=-c%20search_path%3D{schema}");
    Some(PgSchema {
        base_url,
        schema,
        url,
    })
}

impl PgSchema {
    /// A URL whose connections work in this schema (its `search_path`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The schema's name.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// The test database's URL, without the schema.
    pub fn database_url(&self) -> &str {
        &self.base_url
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        // Drop runs inside the test's runtime, which cannot be blocked on: use a thread
        // with a runtime of its own.
        let (url, sql) = (
            self.base_url.clone(),
            format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.schema),
        );
        let dropped = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
                .and_then(|rt| rt.block_on(run_sql(&url, &sql)))
        })
        .join();
        match dropped {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("could not drop test schema {}: {e}", self.schema),
            Err(_) => eprintln!("could not drop test schema {}", self.schema),
        }
    }
}

/// Run `sql` on a connection of its own to `url`.
pub async fn run_sql(url: &str, sql: &str) -> Result<(), String> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|e| format!("{e}: {}", source(&e)))?;
    let driver = tokio::spawn(connection);
    let done = client
        .batch_execute(sql)
        .await
        .map_err(|e| format!("{e}: {}", source(&e)));
    drop(client);
    let _ = driver.await;
    done
}

fn source(e: &tokio_postgres::Error) -> String {
    std::error::Error::source(e)
        .map(ToString::to_string)
        .unwrap_or_default()
}

/// Where a test may keep Redis keys: the server and a prefix no other test uses.
#[derive(Debug, Clone)]
pub struct RedisTarget {
    /// `redis://host:port[/db]`.
    pub url: String,
    /// Prefix every key of the test with this (it ends with `:`).
    pub prefix: String,
}

/// Redis for `test`, or `None` (with a message) when not configured and not required.
pub fn redis(test: &str) -> Option<RedisTarget> {
    Some(RedisTarget {
        url: setting(REDIS_URL, "Redis", test)?,
        prefix: format!("{}:", unique_name()),
    })
}

/// Where a test may keep S3 objects: the store, its credentials and a key prefix no other
/// test uses.
#[derive(Debug, Clone)]
pub struct S3Target {
    /// `http://host:port` of the S3 API.
    pub endpoint: String,
    /// The bucket.
    pub bucket: String,
    /// Access key id.
    pub key: String,
    /// Secret access key.
    pub secret: String,
    /// Region to sign for.
    pub region: String,
    /// Prefix every object key of the test with this (it ends with `/`).
    pub prefix: String,
}

/// S3 for `test`, or `None` (with a message) when not configured and not required.
pub fn s3(test: &str) -> Option<S3Target> {
    let endpoint = setting(S3_ENDPOINT, "S3", test)?;
    let need = |var: &str| {
        std::env::var(var)
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| panic!("{test}: {S3_ENDPOINT} is set but {var} is not"))
    };
    Some(S3Target {
        bucket: need(S3_BUCKET),
        key: need(S3_KEY),
        secret: need(S3_SECRET),
        region: std::env::var(S3_REGION)
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "us-east-1".to_owned()),
        prefix: format!("{}/", unique_name()),
        endpoint,
    })
}
