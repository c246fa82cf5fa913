//! `quintet-bench`: start the release server, measure the bare-HTTP ceiling and every
//! selected scenario, print the table and merge it into `bench/RESULTS.md`.
//!
//! Run it through `bench/run`, which builds the release binaries first.

use std::{path::PathBuf, sync::Arc, time::Duration};

use anyhow::Context;
use clap::Parser;
use quintet_bench::{
    load::LoadResult,
    load::LoadSpec,
    report::{self, Row},
    scenarios::{self, Ctx, Deployment, Engines, Measurement, Scenario, Target},
    server,
};

/// Benchmarks of quintet against its own bare-HTTP ceiling.
#[derive(Debug, Parser)]
struct Args {
    /// Services to run (http, data, console, cache, search, queue, storage, feed,
    /// scale-out); all when none given.
    services: Vec<String>,
    /// Measured seconds per load run.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Warm-up seconds before each load run.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// The server binary [default: `quintet` beside this program].
    #[arg(long)]
    bin: Option<PathBuf>,
    /// Results file to merge into.
    #[arg(long, default_value = "bench/RESULTS.md")]
    out: PathBuf,
    /// Worker threads of the load generator [default: the number of cores].
    #[arg(long)]
    client_threads: Option<usize>,
    /// List the scenarios and exit.
    #[arg(long)]
    list: bool,
    /// Run only the scenarios whose name contains this text (for A/B runs of one scenario).
    #[arg(long)]
    only: Option<String>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let threads = args
        .client_threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()?
        .block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let selected: Vec<_> = scenarios::all()
        .into_iter()
        .filter(|s| {
            args.services.is_empty()
                || s.service() == "http"
                || args.services.iter().any(|a| a == s.service())
        })
        .filter(|s| {
            args.only
                .as_ref()
                .is_none_or(|text| s.name().contains(text.as_str()))
        })
        .collect();
    if args.list {
        for s in &selected {
            println!(
                "{:8} {}  [{}]",
                s.service(),
                s.name(),
                s.target().describe()
            );
        }
        return Ok(());
    }
    let bin = match args.bin {
        Some(b) => b,
        None => server::default_binary()?,
    };
    let spec = LoadSpec {
        concurrency: 1,
        warmup: Duration::from_secs_f64(args.warmup),
        duration: Duration::from_secs_f64(args.duration),
    };
    let machine = report::machine();
    let date = quintet_core::clock::format_rfc3339_ms(quintet_core::Clock::now_ms(
        &quintet_core::SystemClock,
    ))[..10]
        .to_owned();
    println!(
        "quintet-bench on {machine}; {}s per run after {}s warm-up",
        args.duration, args.warmup
    );

    // One server per scenario, so no scenario measures another's leftovers; ceilings are
    // measured once per run and shared.
    let mut ceilings = std::collections::BTreeMap::new();
    let mut rows = Vec::new();
    for s in &selected {
        println!("running {} …", s.name());
        let (m, measured) = match measure(&bin, s.as_ref(), spec, ceilings.clone()).await {
            Ok(done) => done,
            Err(e) => (
                Measurement {
                    note: format!("failed: {e:#}"),
                    ..Measurement::default()
                },
                ceilings.clone(),
            ),
        };
        ceilings = measured;
        let row = Row {
            name: s.name(),
            m,
            target: s.target(),
        };
        println!("{}", row.markdown(&date, &machine));
        rows.push(row);
    }
    for (conc, c) in &ceilings {
        if *conc == 32 && rows.iter().any(|r| r.name.starts_with("http: ceiling")) {
            continue;
        }
        let mut m = Measurement::from_load(*conc, c, Some(c));
        m.ratio = Some(1.0);
        rows.push(Row {
            name: format!("http: ceiling GET /_health ({conc} conn)"),
            m,
            target: Target::None,
        });
    }
    report::merge_into(&args.out, &rows, &date, &machine)?;
    println!("\n| scenario | conn | req/s | items/s | p50 ms | p99 ms | vs ceiling | goal | met |");
    for r in &rows {
        println!(
            "| {} | {} | {:.0} | {} | {:.3} | {:.3} | {} | {} | {} |",
            r.name,
            r.m.concurrency,
            r.m.rps,
            r.m.items_per_sec.map_or("–".into(), |v| format!("{v:.0}")),
            r.m.p50_ms,
            r.m.p99_ms,
            r.m.ratio
                .map_or("–".into(), |v| format!("{:.0} %", v * 100.0)),
            r.target.describe(),
            match r.target.met(&r.m) {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "–",
            }
        );
    }
    println!("\nwritten to {}", args.out.display());
    Ok(())
}

/// Start the nodes `s` needs (on fresh engines when it runs scale-out), run it, and return
/// its measurement with the ceilings known afterwards. The nodes and the engines' test
/// namespace are gone when this returns.
async fn measure(
    bin: &std::path::Path,
    s: &dyn Scenario,
    spec: LoadSpec,
    ceilings: std::collections::BTreeMap<usize, LoadResult>,
) -> anyhow::Result<(Measurement, std::collections::BTreeMap<usize, LoadResult>)> {
    let mut args = s.server_args();
    let (engines, nodes) = match s.deployment() {
        Deployment::Embedded => (None, 1),
        Deployment::ScaleOut { nodes } => {
            let engines = Engines::prepare("bench").await?;
            args.extend(engines.server_args());
            (Some(engines), nodes)
        }
    };
    let mut servers = Vec::with_capacity(nodes);
    for node in 0..nodes {
        servers.push(
            server::Server::start(bin, &args)
                .with_context(|| format!("node {} for {}", node + 1, s.name()))?,
        );
    }
    let addrs = servers.iter().map(|n| n.addr.clone()).collect();
    let first = Arc::new(servers.remove(0));
    let ctx = Ctx::with_ceilings(addrs, spec, ceilings, first);
    let m = s.run(&ctx).await?;
    let ceilings = ctx.ceilings().await;
    drop(ctx);
    drop(servers);
    drop(engines);
    Ok((m, ceilings))
}
