//! A harness for the cost of search queries, without HTTP: it builds the benchmark's corpus
//! ([`quintet_bench::search_corpus`]) into an index on disk once,
//! then answers the benchmark's one-typo queries against it, serializing each answer as
//! the HTTP route does. Run it under `valgrind --tool=callgrind` to count instructions per
//! query, which two busy cores cannot time reliably.
//! Build it with `cargo build --release -p quintet-bench --example search_queries`.
//!
//! ```text
//! search_queries build <dir> [docs]               # 100,000 documents (or `docs`), merged
//! search_queries build-one <dir>                  # the same in one segment
//! search_queries query <dir> [limit] [count]      # answer `count` queries, report the time
//! search_queries dump <dir> [limit] > answers     # every answer, to compare two versions
//! search_queries cpu <dir> [limit] [count]        # 16 at a time: CPU time per query
//! search_queries answers <dir>                    # as tests/search_answers.txt has them
//! ```
//!
//! `build-one` and `answers` make the fixture of `tests/search_answers.rs` (the answers
//! of one version, for the next to compare with).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::{io::Write, path::Path, time::Instant};

use quintet_bench::search_corpus::{Corpus, DOCS, corpus_of};
use quintet_core::{
    AppName, Instance, InstanceConfig, InstanceId,
    ports::{
        Lifecycle,
        search::{SearchConfig, SearchIndex},
    },
    search::{SearchDoc, SearchQuery},
};
use quintet_embedded::search::{Settings, TantivySearchIndex};
use serde_json::json;

const BULK: usize = 5_000;

fn config() -> SearchConfig {
    SearchConfig {
        fields: vec!["title".into(), "body".into()],
        store_fields: vec!["title".into()],
    }
}

fn instance() -> Instance {
    Instance {
        id: InstanceId(1),
        app: AppName::domain(),
        name: "typo".parse().unwrap(),
        config: InstanceConfig::Search(config()),
        created_ms: 0,
    }
}

/// The HTTP route's answer body for `query`.
async fn answer(index: &TantivySearchIndex, inst: &Instance, query: &SearchQuery) -> String {
    let matches = index.query(inst, query).await.unwrap();
    quintet_core::search::answer_json(&matches)
}

fn parse(q: &str, limit: Option<usize>) -> SearchQuery {
    let body = match limit {
        Some(limit) => json!({"query": q, "limit": limit}),
        None => json!({"query": q}),
    };
    SearchQuery::from_json(&body, &config()).unwrap()
}

/// 64-bit FNV-1a of `text` (the fixture's hash of an answer's ids).
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// User + system CPU time of this process so far (Linux), in seconds.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // Fields after the command name, which is in parentheses: utime and stime are the
    // 12th and 13th, in clock ticks (100 per second).
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (mode, dir) = (args[1].as_str(), Path::new(&args[2]));
    let limit: Option<usize> = args
        .get(3)
        .filter(|l| *l != "default" && mode != "build")
        .map(|l| l.parse().unwrap());
    // `build` takes a corpus size (the benchmark's million-document row: 1000000).
    let size = match mode {
        "build" => args.get(3).map_or(DOCS, |n| n.parse().unwrap()),
        _ => DOCS,
    };
    let Corpus { docs, queries } = corpus_of(size);
    let inst = instance();
    let index = if mode == "build-one" {
        let settings = Settings {
            writer_heap_bytes: 1 << 30,
            // One thread, so that one bulk load makes one segment.
            writer_threads: 1,
            ..Settings::default()
        };
        TantivySearchIndex::open_with(dir, settings).unwrap()
    } else {
        TantivySearchIndex::open(dir).unwrap()
    };
    match mode {
        "build-one" => {
            index.create_instance(&inst).await.unwrap();
            let docs = docs
                .into_iter()
                .map(|d| SearchDoc::from_bulk_entry(d, &config()).unwrap())
                .collect();
            index.bulk(&inst, docs).await.unwrap();
            index.close().await.unwrap();
        }
        "answers" => {
            let mut out = std::io::stdout().lock();
            for q in &queries {
                let ids = |limit: Option<usize>| {
                    let (index, inst, query) = (&index, &inst, parse(q, limit));
                    async move {
                        let matches = index.query(inst, &query).await.unwrap();
                        let ids: Vec<&str> = matches.iter().map(|m| m.id.as_str()).collect();
                        ids.join(",")
                    }
                };
                let top = ids(Some(10)).await;
                let default = fnv(&ids(None).await);
                writeln!(out, "{q}\t{top}\t{default:016x}").unwrap();
            }
        }
        "build" => {
            index.create_instance(&inst).await.unwrap();
            let t = Instant::now();
            for chunk in docs.chunks(BULK) {
                let docs = chunk
                    .iter()
                    .map(|d| SearchDoc::from_bulk_entry(d.clone(), &config()).unwrap())
                    .collect();
                index.bulk(&inst, docs).await.unwrap();
            }
            eprintln!("indexed {size} documents in {:?}", t.elapsed());
            // Let the background merges the bulk load started finish, as the bench does.
            tokio::time::sleep(std::time::Duration::from_secs(20)).await;
            index.close().await.unwrap();
        }
        "query" => {
            let count: usize = args.get(4).map_or(queries.len(), |c| c.parse().unwrap());
            // One query first, so that the merged vocabulary is built outside the count.
            answer(&index, &inst, &parse(&queries[0], limit)).await;
            let t = Instant::now();
            let mut bytes = 0;
            for q in queries.iter().cycle().take(count) {
                bytes += answer(&index, &inst, &parse(q, limit)).await.len();
            }
            let e = t.elapsed();
            eprintln!(
                "{count} queries in {e:?}: {:?} per query, {} bytes per answer",
                e / count as u32,
                bytes / count
            );
        }
        "cpu" => {
            let count: usize = args.get(4).map_or(queries.len(), |c| c.parse().unwrap());
            answer(&index, &inst, &parse(&queries[0], limit)).await;
            let (wall, cpu) = (Instant::now(), cpu_seconds());
            let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let queries = std::sync::Arc::new(queries);
            let tasks: Vec<_> = (0..16)
                .map(|_| {
                    let (index, inst) = (index.clone(), inst.clone());
                    let (next, queries) = (next.clone(), queries.clone());
                    tokio::spawn(async move {
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            if i >= count {
                                return;
                            }
                            let q = parse(&queries[i % queries.len()], limit);
                            answer(&index, &inst, &q).await;
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
            let (wall, cpu) = (wall.elapsed().as_secs_f64(), cpu_seconds() - cpu);
            eprintln!(
                "{count} queries, 16 at a time: {:.0} per second, {:.0} µs of CPU each",
                count as f64 / wall,
                cpu / count as f64 * 1e6
            );
        }
        "dump" => {
            let mut out = std::io::stdout().lock();
            for q in &queries {
                writeln!(
                    out,
                    "{q}\t{}",
                    answer(&index, &inst, &parse(q, limit)).await
                )
                .unwrap();
            }
        }
        other => panic!("unknown mode {other}"),
    }
}
