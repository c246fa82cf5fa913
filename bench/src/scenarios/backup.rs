//! Backups (issue 21): the time of `POST /_admin/backups` of a data directory holding
//! objects and documents, against `cp -a` of the same directory on the same disk in the
//! same run; and the request rate of GETs by id while backups run, against the rate without.
//!
//! The size is 1 GiB of objects and 1,000,000 documents ([`FULL`]); the shared
//! 2-core machine also runs a quarter of that ([`SMALL`]) for quicker A/B runs (the row's
//! name says which). `bench/run --only '1024 MiB' backup` runs the size alone.

use std::{
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Instant,
};

use anyhow::{Context as _, bail};
use async_trait::async_trait;
use hyper::{Method, StatusCode};

use super::{Ctx, Measurement, Scenario, Target, data, storage};
use crate::load::{MakeReq, Req};

/// What a scenario's data directory holds.
#[derive(Debug, Clone, Copy)]
pub struct Size {
    /// Objects of 1 MiB each.
    pub objects_mib: u64,
    /// Documents, in bulk requests of 1,000.
    pub docs: usize,
}

/// 256 MiB of objects and 200,000 documents.
pub const SMALL: Size = Size {
    objects_mib: 256,
    docs: 200_000,
};

/// The size: 1 GiB of objects and 1,000,000 documents.
pub const FULL: Size = Size {
    objects_mib: 1024,
    docs: 1_000_000,
};

/// The admin token of the scenarios' server.
const TOKEN: &str = "bench-backup-admin-token";

/// Backup time against `cp -a`.
pub struct Speed(pub Size);
/// GETs by id during backups against without.
pub struct RateDuring(pub Size);

fn args() -> Vec<String> {
    vec!["--admin-token".to_owned(), TOKEN.to_owned()]
}

/// Fill the server: objects, documents with an index.
async fn fill(ctx: &Ctx, size: Size) -> anyhow::Result<()> {
    ctx.create("storage", "st", None).await?;
    for i in 0..size.objects_mib {
        storage::upload(&ctx.addr, &format!("/storage/st/o{i}"), 1 << 20).await?;
    }
    ctx.create("data", "d", None).await?;
    let index = Req::json(
        Method::POST,
        "/data/d/_index",
        &serde_json::json!({"fields": ["n"]}),
    );
    ctx.expect(index, StatusCode::OK).await?;
    let reqs = (0..size.docs / 1000)
        .map(|b| {
            let body = data::bulk_body(&format!("d{b:04}"), 1000, |i| {
                format!("\"title\":\"document {i}\",\"n\":{i},\"tags\":[\"a\",\"b\"]")
            });
            data::post("/data/d/_bulk".to_owned(), body)
        })
        .collect();
    data::send_all(ctx, reqs, 2).await
}

fn admin(method: Method, path: &str, body: Option<serde_json::Value>) -> Req {
    let mut req = match body {
        Some(b) => Req::json(method, path, &b),
        None => Req {
            method,
            path: path.to_owned(),
            body: bytes::Bytes::new(),
            headers: Vec::new(),
        },
    };
    req.headers
        .push(("authorization", format!("Bearer {TOKEN}")));
    req
}

/// Take backup `name` through the API; seconds it took.
async fn backup(ctx: &Ctx, name: &str) -> anyhow::Result<f64> {
    let start = Instant::now();
    ctx.expect(
        admin(
            Method::POST,
            "/_admin/backups",
            Some(serde_json::json!({ "name": name })),
        ),
        StatusCode::CREATED,
    )
    .await?;
    Ok(start.elapsed().as_secs_f64())
}

async fn delete_backup(ctx: &Ctx, name: &str) -> anyhow::Result<()> {
    ctx.expect(
        admin(Method::DELETE, &format!("/_admin/backups/{name}"), None),
        StatusCode::OK,
    )
    .await
    .map(|_| ())
}

/// Bytes of the files under `dir`, leaving out `skip`.
fn bytes_under(dir: &Path, skip: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| {
            let path = e.path();
            if path == skip {
                0
            } else if path.is_dir() {
                bytes_under(&path, skip)
            } else {
                e.metadata().map_or(0, |m| m.len())
            }
        })
        .sum()
}

/// `sync`, so that neither measurement pays for the other's dirty pages.
fn sync() {
    let _ = std::process::Command::new("sync").status();
}

#[async_trait]
impl Scenario for Speed {
    fn name(&self) -> String {
        format!(
            "backup: {} MiB of objects + {} docs, backup time vs `cp -a` of the same directory",
            self.0.objects_mib, self.0.docs
        )
    }

    fn service(&self) -> &'static str {
        "backup"
    }

    fn target(&self) -> Target {
        Target::RatioOf {
            what: "cp -a speed",
            at_least: 0.5,
        }
    }

    fn server_args(&self) -> Vec<String> {
        args()
    }

    async fn run(&self, ctx: &Ctx) -> anyhow::Result<Measurement> {
        fill(ctx, self.0).await?;
        let data_dir = ctx.server.data_dir();
        let backups = data_dir.join("backups");
        let bytes = bytes_under(&data_dir, &backups);
        let copy: PathBuf = data_dir.with_file_name("cp-copy");
        // Twice each, alternating; the better of each counts (the machine is shared).
        let (mut cp_best, mut backup_best) = (f64::MAX, f64::MAX);
        for round in 0..2 {
            sync();
            let start = Instant::now();
            let status = tokio::process::Command::new("cp")
                .arg("-a")
                .arg(&data_dir)
                .arg(&copy)
                .status()
                .await
                .context("running cp -a")?;
            sync();
            let cp = start.elapsed().as_secs_f64();
            if !status.success() {
                bail!("cp -a failed: {status}");
            }
            std::fs::remove_dir_all(&copy)?;
            sync();
            let name = format!("speed{round}");
            let taken = backup(ctx, &name).await?;
            let start = Instant::now();
            sync();
            let taken = taken + start.elapsed().as_secs_f64();
            delete_backup(ctx, &name).await?;
            cp_best = cp_best.min(cp);
            backup_best = backup_best.min(taken);
        }
        let mb = bytes as f64 / 1e6;
        let mut m = Measurement {
            concurrency: 1,
            rps: 1.0 / backup_best,
            megabytes_per_sec: Some(mb / backup_best),
            p50_ms: backup_best * 1000.0,
            p99_ms: backup_best * 1000.0,
            ratio: Some(cp_best / backup_best),
            ..Measurement::default()
        };
        m.add_note(&format!(
            "{mb:.0} MB directory; backup {backup_best:.2} s (objects hard-linked, every file \
             hashed, SQLite copied page by page), `cp -a` {cp_best:.2} s ({:.0} MB/s); best \
             of 2 each, page cache warm, each followed by `sync`",
            mb / cp_best
        ));
        Ok(m)
    }
}

#[async_trait]
impl Scenario for RateDuring {
    fn name(&self) -> String {
        format!(
            "backup: GET by id (32 conn) while backups of {} MiB + {} docs run, vs without",
            self.0.objects_mib, self.0.docs
        )
    }

    fn service(&self) -> &'static str {
        "backup"
    }

    fn target(&self) -> Target {
        Target::RatioOf {
            what: "rate without",
            at_least: 0.7,
        }
    }

    fn server_args(&self) -> Vec<String> {
        args()
    }

    async fn run(&self, ctx: &Ctx) -> anyhow::Result<Measurement> {
        fill(ctx, self.0).await?;
        let docs = self.0.docs as u64;
        let make: MakeReq = Arc::new(move |conn, seq| {
            let n = (conn as u64 * 7919 + seq * 31) % docs;
            Req::get(format!("/data/d/d{:04}-{:04}", n / 1000, n % 1000))
        });
        let without = ctx.load(32, StatusCode::OK, Arc::clone(&make)).await?;
        // Backups one after the other for as long as the load runs.
        let stop = Arc::new(AtomicBool::new(false));
        let taken = Arc::new(AtomicU64::new(0));
        let looping = {
            let (stop, taken) = (Arc::clone(&stop), Arc::clone(&taken));
            async move {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let name = format!("during{i}");
                    backup(ctx, &name).await?;
                    delete_backup(ctx, &name).await?;
                    taken.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
                Ok::<_, anyhow::Error>(())
            }
        };
        let load = async {
            let r = ctx.load(32, StatusCode::OK, Arc::clone(&make)).await;
            stop.store(true, Ordering::Relaxed);
            r
        };
        let (during, looped) = tokio::join!(load, looping);
        let during = during?;
        looped?;
        // Without backups again: the machine is shared, so the better of the two runs
        // around the one with backups is the rate compared with.
        let after = ctx.load(32, StatusCode::OK, make).await?;
        let best = if after.rps > without.rps {
            &after
        } else {
            &without
        };
        let mut m = Measurement::from_load(32, &during, None);
        m.ratio = Some(during.rps / best.rps);
        m.add_note(&format!(
            "without backups {:.0} req/s before and {:.0} after (p99 {:.2} / {:.2} ms); {} \
             backups taken during the window",
            without.rps,
            after.rps,
            without.p99_ms,
            after.p99_ms,
            taken.load(Ordering::Relaxed)
        ));
        Ok(m)
    }
}
