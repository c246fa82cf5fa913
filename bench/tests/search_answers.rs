//! The search benchmark's queries answer the same documents in the same order as they did
//! before the query path was optimized (issue #25): speed work must not change relevance.
//!
//! The fixture `search_answers.txt` was recorded from the code before the optimizations:
//! for each benchmark query, the ids of its answer with `limit` 10, and a hash of the ids of
//! its answer with the default limit (100), in order. Record it again (only when ranking
//! is meant to change) with
//! `QUINTET_RECORD_ANSWERS=1 cargo test --release -p quintet-bench --test search_answers`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::fmt::Write;

use quintet_bench::search_corpus::{Corpus, corpus};
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

const FIXTURE: &str = "tests/search_answers.txt";

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

/// 64-bit FNV-1a of `text`, fixed so the fixture stays valid.
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

async fn ids(index: &TantivySearchIndex, inst: &Instance, q: &str, limit: Option<usize>) -> String {
    let body = match limit {
        Some(limit) => json!({"query": q, "limit": limit}),
        None => json!({"query": q}),
    };
    let query = SearchQuery::from_json(&body, &config()).unwrap();
    let matches = index.query(inst, &query).await.unwrap();
    matches
        .iter()
        .map(|m| m.id.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// The whole corpus, every benchmark query answered with limit 10 and with the default
/// limit.
///
/// Documents with equal scores are ordered by their address in the index, and segments'
/// order is their random ids' order, so the corpus is written in one commit to one segment
/// (a writer heap that holds it all): then addresses follow the corpus, and the answers
/// are the same at every run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn benchmark_queries_answer_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let settings = Settings {
        writer_heap_bytes: 1 << 30,
        // One thread, so that one bulk load makes one segment.
        writer_threads: 1,
        ..Settings::default()
    };
    let index = TantivySearchIndex::open_with(dir.path(), settings).unwrap();
    let inst = instance();
    index.create_instance(&inst).await.unwrap();
    let Corpus { docs, queries } = corpus();
    let docs = docs
        .into_iter()
        .map(|d| SearchDoc::from_bulk_entry(d, &config()).unwrap())
        .collect();
    index.bulk(&inst, docs).await.unwrap();
    let mut got = String::new();
    for q in &queries {
        let top = ids(&index, &inst, q, Some(10)).await;
        let default = fnv(&ids(&index, &inst, q, None).await);
        writeln!(got, "{q}\t{top}\t{default:016x}").unwrap();
    }
    index.close().await.unwrap();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE);
    if std::env::var_os("QUINTET_RECORD_ANSWERS").is_some() {
        std::fs::write(&path, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap();
    let mut differ = 0;
    for (g, w) in got.lines().zip(want.lines()) {
        if g != w {
            differ += 1;
            if differ <= 10 {
                eprintln!("got  {g}\nwant {w}");
            }
        }
    }
    assert_eq!(got.lines().count(), want.lines().count());
    assert_eq!(differ, 0, "{differ} queries answer differently");
}
