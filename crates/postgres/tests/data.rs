//! The PostgreSQL document store against a real server, beyond the conformance suites
//! (`conformance.rs`): the sweep's rows, two adapters on one schema (two nodes) racing
//! index creation with writes, and a call-by-call comparison with the SQLite store over
//! random documents, writes and queries. Each test has a schema of its own
//! (`quintet-engine-test`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use quintet_core::{
    Instance, InstanceConfig, SystemClock, conformance,
    mango::{FindQuery, IndexDef},
    ports::{
        Lifecycle,
        data::{BulkOp, DocId, DocStore, Document, ListQuery},
    },
};
use quintet_embedded::data::SqliteDocStore;
use quintet_engine_test::PgSchema;
use quintet_postgres::{PgConfig, PgDatabase, PgDocStore};
use serde_json::{Value, json};

async fn open(pg: &PgSchema) -> PgDocStore {
    let db = PgDatabase::connect(&PgConfig::new(pg.url()).unwrap())
        .await
        .unwrap();
    PgDocStore::open(db, Arc::new(SystemClock)).await.unwrap()
}

async fn sql(pg: &PgSchema, query: &str) -> Vec<tokio_postgres::Row> {
    let (client, conn) = tokio_postgres::connect(pg.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client.query(query, &[]).await.unwrap()
}

fn id(s: &str) -> DocId {
    s.parse().unwrap()
}

fn doc(v: Value) -> Document {
    v.as_object().unwrap().clone()
}

async fn find(store: &dyn DocStore, inst: &Instance, q: Value) -> (Vec<Value>, Option<String>) {
    let out = store
        .find(inst, FindQuery::from_json(&q).unwrap())
        .await
        .unwrap();
    (out.docs, out.stats.and_then(|s| s.index))
}

/// The start-up sweep removes an orphan's documents, indexes and entries with it.
#[tokio::test]
async fn a_sweep_removes_every_row_of_an_orphan() {
    let Some(pg) = quintet_engine_test::postgres("data_sweep_rows").await else {
        return;
    };
    let store = open(&pg).await;
    let orphan = conformance::instance(InstanceConfig::Data);
    store.create_instance(&orphan).await.unwrap();
    store
        .create(&orphan, Some(id("a")), doc(json!({"year": 1979})))
        .await
        .unwrap();
    store
        .create_index(
            &orphan,
            IndexDef::from_json(&json!({"fields": ["year"]})).unwrap(),
        )
        .await
        .unwrap();
    conformance::lifecycle::sweep_removes_only_orphans(&store, InstanceConfig::Data).await;
    for table in [
        "quintet_data_docs",
        "quintet_data_keys",
        "quintet_data_indexes",
        "quintet_data_instances",
    ] {
        let rows = sql(&pg, &format!("SELECT count(*) FROM {table}")).await;
        assert_eq!(rows[0].get::<_, i64>(0), 0, "{table}");
    }
}

/// Documents are `jsonb` as well, for operators who query them in SQL; a text `jsonb`
/// cannot hold is kept as text and still found.
#[tokio::test]
async fn documents_are_jsonb_too() {
    let Some(pg) = quintet_engine_test::postgres("data_jsonb").await else {
        return;
    };
    let store = open(&pg).await;
    let inst = conformance::instance(InstanceConfig::Data);
    store.create_instance(&inst).await.unwrap();
    store
        .create(&inst, Some(id("a")), doc(json!({"type": "movie", "n": 1})))
        .await
        .unwrap();
    store
        .create(
            &inst,
            Some(id("z")),
            doc(json!({"type": "movie", "t": "a\u{0}b"})),
        )
        .await
        .unwrap();
    let rows = sql(
        &pg,
        "SELECT id, doc->>'type' FROM quintet_data_docs ORDER BY id",
    )
    .await;
    let seen: Vec<(String, Option<String>)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(
        seen,
        [("a".into(), Some("movie".into())), ("z".into(), None)]
    );
    let (docs, _) = find(&store, &inst, json!({"selector": {"type": "movie"}})).await;
    assert_eq!(docs.len(), 2, "the text-only document is a candidate too");
    let got = store.get(&inst, &id("z")).await.unwrap().unwrap();
    assert_eq!(got.get(), r#"{"_id":"z","type":"movie","t":"a\u0000b"}"#);
}

/// Two adapters on one schema are two nodes. A node that knew the instance without an
/// index keeps every write indexed after another node creates one.
#[tokio::test]
async fn an_index_made_on_one_node_is_kept_by_the_others_writes() {
    let Some(pg) = quintet_engine_test::postgres("data_two_nodes_index").await else {
        return;
    };
    let (a, b) = (open(&pg).await, open(&pg).await);
    let inst = conformance::instance(InstanceConfig::Data);
    a.create_instance(&inst).await.unwrap();
    for (k, year) in [("old", 1), ("moved", 1), ("gone", 1)] {
        a.create(&inst, Some(id(k)), doc(json!({ "year": year })))
            .await
            .unwrap();
    }
    let by_year = IndexDef::from_json(&json!({"fields": ["year"], "name": "by-year"})).unwrap();
    b.create_index(&inst, by_year).await.unwrap();
    // Node A still has the definitions without the index in memory.
    a.create(&inst, Some(id("new")), doc(json!({"year": 1})))
        .await
        .unwrap();
    a.replace(&inst, &id("moved"), doc(json!({"year": 2})))
        .await
        .unwrap();
    a.remove(&inst, &id("gone")).await.unwrap();
    a.bulk(
        &inst,
        BulkOp::parse_all(json!([{"_id": "bulk", "year": 1}, {"_id": "old", "year": 1}])).unwrap(),
    )
    .await
    .unwrap();
    let q = json!({"selector": {"year": 1}, "execution_stats": true});
    for node in [&a, &b] {
        let (docs, index) = find(node, &inst, q.clone()).await;
        assert_eq!(index.as_deref(), Some("by-year"));
        let ids: Vec<&str> = docs.iter().map(|d| d["_id"].as_str().unwrap()).collect();
        assert_eq!(ids, ["bulk", "new", "old"]);
    }
    let entries = sql(&pg, "SELECT count(*) FROM quintet_data_keys").await;
    assert_eq!(entries[0].get::<_, i64>(0), 4, "one entry per document");
    assert_eq!(a.indexes(&inst).await.unwrap().len(), 1);
}

/// Writes through one node racing index creation through another: whatever the
/// interleaving, every index holds exactly the documents, so indexed answers equal scans.
#[tokio::test]
async fn indexes_built_during_writes_on_other_nodes_miss_nothing() {
    let Some(pg) = quintet_engine_test::postgres("data_index_race").await else {
        return;
    };
    let (a, b) = (open(&pg).await, open(&pg).await);
    let inst = conformance::instance(InstanceConfig::Data);
    a.create_instance(&inst).await.unwrap();
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (a, inst) = (a.clone(), inst.clone());
            tokio::spawn(async move {
                for i in 0..60 {
                    let k = id(&format!("w{w}-{i:03}"));
                    a.create(&inst, Some(k.clone()), doc(json!({"n": i % 7, "m": i % 3})))
                        .await
                        .unwrap();
                    if i % 4 == 0 {
                        a.replace(&inst, &k, doc(json!({"n": 100 + i % 5, "m": 9})))
                            .await
                            .unwrap();
                    }
                    if i % 9 == 0 {
                        a.remove(&inst, &k).await.unwrap();
                    }
                }
            })
        })
        .collect();
    for fields in [json!(["n"]), json!(["m", "n"]), json!([{"m": "desc"}])] {
        b.create_index(
            &inst,
            IndexDef::from_json(&json!({ "fields": fields })).unwrap(),
        )
        .await
        .unwrap();
    }
    for w in writers {
        w.await.unwrap();
    }
    let everything = a.list(&inst, ListQuery::default()).await.unwrap();
    let all: Vec<Value> = futures_util::StreamExt::collect::<Vec<_>>(everything)
        .await
        .into_iter()
        .map(|d| serde_json::from_str(d.unwrap().get()).unwrap())
        .collect();
    for (selector, index) in [
        (json!({"n": {"$gte": 3}}), "idx-n"),
        (json!({"m": 9, "n": {"$lt": 103}}), "idx-m-n"),
        (json!({"m": {"$lte": 1}}), "idx-m"),
    ] {
        let q = json!({"selector": selector, "limit": 10000, "execution_stats": true});
        let (docs, used) = find(&b, &inst, q.clone()).await;
        assert_eq!(used.as_deref(), Some(index), "{selector}");
        let sel = quintet_core::mango::Selector::parse(&selector).unwrap();
        let mut want: Vec<&Value> = all.iter().filter(|d| sel.matches(d)).collect();
        let mut got: Vec<&Value> = docs.iter().collect();
        let by_id = |d: &&Value| d["_id"].as_str().unwrap().to_owned();
        want.sort_by_key(by_id);
        got.sort_by_key(by_id);
        assert_eq!(got, want, "{selector}");
    }
}

/// Overlapping bulks and single writes through two nodes at once: every transaction
/// commits (a deadlock victim runs again), and the index entries are exactly those the
/// committed documents call for.
#[tokio::test]
async fn overlapping_writes_on_two_nodes_keep_entries_exact() {
    let Some(pg) = quintet_engine_test::postgres("data_overlapping_writes").await else {
        return;
    };
    let (a, b) = (open(&pg).await, open(&pg).await);
    let inst = conformance::instance(InstanceConfig::Data);
    a.create_instance(&inst).await.unwrap();
    let def = IndexDef::from_json(&json!({"fields": ["n"]})).unwrap();
    a.create_index(&inst, def.clone()).await.unwrap();
    let tasks: Vec<_> = (0..6)
        .map(|t| {
            let node = if t % 2 == 0 { a.clone() } else { b.clone() };
            let inst = inst.clone();
            tokio::spawn(async move {
                for round in 0..25 {
                    // Ids shared by every task, in orders that differ between tasks.
                    let mut entries: Vec<Value> = (0..8)
                        .map(|i| {
                            let k = format!("k{}", (i * (t + 1) + round) % 12);
                            if (i + round + t) % 5 == 0 {
                                json!({"_id": k, "_deleted": true})
                            } else {
                                json!({"_id": k, "n": (t * 100 + round) % 7})
                            }
                        })
                        .collect();
                    if t % 3 == 0 {
                        entries.reverse();
                    }
                    node.bulk(&inst, BulkOp::parse_all(Value::Array(entries)).unwrap())
                        .await
                        .unwrap();
                    let k = id(&format!("k{}", (round + t) % 12));
                    let _ = node.replace(&inst, &k, doc(json!({"n": round % 7}))).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let docs = sql(&pg, "SELECT id, body FROM quintet_data_docs ORDER BY id").await;
    let mut want: Vec<(Vec<u8>, String)> = docs
        .iter()
        .filter_map(|row| {
            let body: Value = serde_json::from_str(row.get::<_, &str>(1)).unwrap();
            def.key_of(&body).map(|k| (k, row.get::<_, String>(0)))
        })
        .collect();
    want.sort();
    let keys = sql(&pg, "SELECT k, id FROM quintet_data_keys ORDER BY k, id").await;
    let got: Vec<(Vec<u8>, String)> = keys.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(
        got, want,
        "index entries differ from the committed documents"
    );
}

/// A small deterministic generator, so a failure replays with its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())].clone()
    }
}

const IDS: &[&str] = &[
    "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "é", "z~", "zz",
];

/// The JSON text of a random document with id `key` (as a bulk entry may send it, so
/// numbers may be spelled more precisely than an `f64`).
fn random_text(r: &mut Rng, key: &str) -> String {
    let mut fields = vec![format!("\"_id\":{}", json!(key))];
    if r.below(10) > 0 {
        fields.push(format!(
            "\"type\":{}",
            json!(r.pick(&["movie", "book", "song"]))
        ));
    }
    let year = match r.below(10) {
        0 => None,
        1 => Some("null".to_owned()),
        2 => Some("\"1980\"".to_owned()),
        3 => Some(format!("[{}, {}]", 1960 + r.below(40), 1960 + r.below(40))),
        4 => Some("1980.5".to_owned()),
        5 => Some("1980.00000000000000000001".to_owned()),
        6 => Some("true".to_owned()),
        7 => Some(r.pick(&["1.9795e3", "2e-400"]).to_owned()),
        _ => Some(format!("{}", 1960 + r.below(40))),
    };
    if let Some(y) = year {
        fields.push(format!("\"year\":{y}"));
    }
    if r.below(4) > 0 {
        let tags: Vec<&str> = (0..r.below(4)).map(|_| r.pick(&["a", "b", "c"])).collect();
        fields.push(format!("\"tags\":{}", json!(tags)));
    }
    if r.below(3) > 0 {
        let note = r.pick(&[json!(null), json!("x"), json!("y\u{0}"), json!(7)]);
        fields.push(format!(
            "\"meta\":{{\"draft\":{},\"note\":{note},\"rank\":{}}}",
            r.below(2) == 0,
            r.below(5)
        ));
    }
    if r.below(5) == 0 {
        fields.push("\"title\":\"A\\u0000 and \\ud83d\\ude00\"".to_owned());
    }
    format!("{{{}}}", fields.join(","))
}

fn random_selector(r: &mut Rng, depth: usize) -> Value {
    let year = json!(1960 + r.below(40));
    match r.below(if depth > 0 { 16 } else { 18 }) {
        0 => json!({"type": r.pick(&["movie", "book", "song"])}),
        1 => json!({"year": {r.pick(&["$gt", "$gte", "$lt", "$lte"]): year}}),
        2 => json!({"year": {"$in": [year, "1980", 1980.5]}}),
        3 => json!({"tags": {"$all": [r.pick(&["a", "b"])]}}),
        4 => json!({"tags": {"$elemMatch": {"$eq": r.pick(&["b", "c"])}}}),
        5 => json!({"meta.draft": r.below(2) == 0}),
        6 => json!({"meta.note": r.pick(&[json!(null), json!("x"), json!("y\u{0}")])}),
        7 => json!({"meta.rank": {"$gte": r.below(5)}}),
        8 => json!({"_id": {r.pick(&["$gt", "$gte", "$lt", "$lte", "$eq"]): r.pick(IDS)}}),
        9 => json!({"year": {"$exists": r.below(2) == 0}}),
        10 => json!({"year": 1980}),
        11 => json!({"year": {"$type": r.pick(&["number", "string", "array", "null"])}}),
        12 => json!({"type": {"$beginsWith": r.pick(&["mo", "b", "x"])}}),
        13 => json!({"type": r.pick(&["movie", "book"]), "year": {"$gte": year}}),
        14 => json!({"_id": {"$gt": 5}}),
        15 => json!({"meta": {"draft": true}}),
        16 => json!({"$or": [random_selector(r, depth + 1), random_selector(r, depth + 1)]}),
        _ => json!({"$and": [random_selector(r, depth + 1), random_selector(r, depth + 1)]}),
    }
}

fn random_query(r: &mut Rng) -> Value {
    let mut q = json!({"selector": random_selector(r, 0), "execution_stats": true});
    match r.below(5) {
        0 => q["sort"] = json!([{"year": "asc"}]),
        1 => q["sort"] = json!([{"year": "desc"}]),
        2 => q["sort"] = json!([{"type": "asc"}, {"year": "desc"}]),
        _ => {}
    }
    if r.below(2) == 0 {
        q["limit"] = json!(r.below(12));
    }
    if r.below(3) == 0 {
        q["skip"] = json!(r.below(4));
    }
    if r.below(4) == 0 {
        q["fields"] = json!(["_id", "year", "meta.rank"]);
    }
    if r.below(6) == 0 {
        q["use_index"] = json!(r.pick(&["idx-year", "drafts", "nope"]));
    }
    q
}

fn random_index(r: &mut Rng) -> Value {
    r.pick(&[
        json!({"fields": ["year"]}),
        json!({"fields": ["type", "year"]}),
        json!({"fields": [{"year": "desc"}]}),
        json!({"fields": ["meta.rank"], "name": "drafts",
               "partial_filter_selector": {"meta.draft": true}}),
        json!({"fields": ["_id"]}),
        json!({"fields": ["tags"]}),
    ])
}

/// The same random script on SQLite and on PostgreSQL gives the same answers: documents,
/// outcomes, errors, query results in order, warnings and the index each query used.
#[tokio::test]
async fn same_answers_as_sqlite() {
    let Some(pg) = quintet_engine_test::postgres("data_same_as_sqlite").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteDocStore::open(&dir.path().join("data.db"), Arc::new(SystemClock)).unwrap();
    let postgres = open(&pg).await;
    let stores: [&dyn DocStore; 2] = [&sqlite, &postgres];
    for seed in [0x9e37_79b9_7f4a_7c15_u64, 42, 7_777_777] {
        let mut r = Rng(seed);
        let (mut answered, mut indexed) = (0, 0);
        let inst = conformance::instance(InstanceConfig::Data);
        for s in stores {
            s.create_instance(&inst).await.unwrap();
        }
        for step in 0..400 {
            let what = r.below(12);
            let mut answers = Vec::new();
            // Draw the inputs once, apply them to both stores.
            let key = r.pick(IDS);
            let text = random_text(&mut r, key);
            let bulk_texts: Vec<String> = (0..r.below(6))
                .map(|_| {
                    let k = r.pick(IDS);
                    if r.below(4) == 0 {
                        format!("{{\"_id\":{},\"_deleted\":true}}", json!(k))
                    } else if r.below(20) == 0 {
                        // Out of any engine's range: refused, on both.
                        format!("{{\"_id\":{},\"n\":1e400}}", json!(k))
                    } else {
                        random_text(&mut r, k)
                    }
                })
                .collect();
            let bulk = format!("[{}]", bulk_texts.join(","));
            let query = random_query(&mut r);
            let index = random_index(&mut r);
            let list = ListQuery {
                start_key: (r.below(2) == 0)
                    .then(|| r.pick(&["c", "c\u{0}x", "f", "zz"]).to_owned()),
                end_key: (r.below(3) == 0).then(|| r.pick(&["e", "e\u{0}", "z"]).to_owned()),
                keys: (r.below(4) == 0).then(|| {
                    vec![
                        r.pick(IDS).to_owned(),
                        "b".into(),
                        "b".into(),
                        "a\u{0}".into(),
                    ]
                }),
                limit: (r.below(2) == 0).then(|| r.below(5)),
                descending: r.below(2) == 0,
            };
            for (n, s) in stores.into_iter().enumerate() {
                let body: Value = serde_json::from_str(&text).unwrap();
                let (_, body) = quintet_core::ports::data::new_document(body).unwrap();
                let answer = match what {
                    0..=2 => format!("{:?}", s.create(&inst, Some(id(key)), body).await),
                    3 | 4 => format!("{:?}", s.replace(&inst, &id(key), body).await),
                    5 => format!("{:?}", s.remove(&inst, &id(key)).await),
                    6 => format!(
                        "{:?}",
                        s.bulk(&inst, BulkOp::parse_text(&bulk).unwrap()).await
                    ),
                    7 => format!(
                        "{:?}",
                        s.create_index(&inst, IndexDef::from_json(&index).unwrap())
                            .await
                    ),
                    8 => {
                        let got = s.get(&inst, &id(key)).await.unwrap();
                        format!("{:?}", got.map(|g| g.get().to_owned()))
                    }
                    9 => match s.list(&inst, list.clone()).await {
                        Ok(stream) => {
                            let docs: Vec<String> =
                                futures_util::StreamExt::collect::<Vec<_>>(stream)
                                    .await
                                    .into_iter()
                                    .map(|d| d.unwrap().get().to_owned())
                                    .collect();
                            format!("{docs:?}")
                        }
                        Err(e) => format!("{e:?}"),
                    },
                    _ => {
                        let out = s.find(&inst, FindQuery::from_json(&query).unwrap()).await;
                        if n == 0
                            && let Ok(o) = &out
                        {
                            answered += usize::from(!o.docs.is_empty());
                            indexed +=
                                usize::from(o.stats.as_ref().is_some_and(|s| s.index.is_some()));
                        }
                        format!(
                            "{:?}",
                            out.map(|o| (o.docs, o.warning, o.stats.and_then(|st| st.index)))
                        )
                    }
                };
                answers.push(answer);
            }
            assert_eq!(
                answers[0], answers[1],
                "seed {seed} step {step}: SQLite (left) and PostgreSQL (right) differ \
                 (op {what}, key {key:?}, text {text}, bulk {bulk}, query {query}, \
                 index {index}, list {list:?})"
            );
        }
        // The script exercises what it compares: answers with documents, and indexes.
        assert!(
            answered >= 20,
            "seed {seed}: only {answered} queries matched anything"
        );
        assert!(
            indexed >= 10,
            "seed {seed}: only {indexed} queries used an index"
        );
        for s in stores {
            s.drop_instance(&inst).await.unwrap();
        }
    }
}

/// Concurrent creates through two nodes, committed in groups: of two creates of one id,
/// exactly one answers created, and never for an id that existed; every created document
/// has its index entry and one change, numbered without a gap; and the creates of a node
/// share commits.
#[tokio::test]
async fn concurrent_creates_share_commits_and_answer_alone() {
    let Some(pg) = quintet_engine_test::postgres("data_group_creates").await else {
        return;
    };
    let (a, b) = (open(&pg).await, open(&pg).await);
    let inst = conformance::instance(InstanceConfig::Data);
    a.create_instance(&inst).await.unwrap();
    a.create_index(
        &inst,
        IndexDef::from_json(&json!({"fields": ["n"], "name": "by-n"})).unwrap(),
    )
    .await
    .unwrap();
    for i in 0..20 {
        let k = format!("x{i:03}");
        a.create(&inst, Some(id(&k)), doc(json!({"n": i})))
            .await
            .unwrap();
        // Both nodes know the definitions, so the creates below queue at once.
        b.get(&inst, &id(&k)).await.unwrap();
    }
    b.indexes(&inst).await.unwrap();

    let tasks: Vec<_> = (0..100)
        .flat_map(|i| [(a.clone(), i), (b.clone(), i)])
        .map(|(node, i)| {
            let inst = inst.clone();
            tokio::spawn(async move {
                let k = format!("x{i:03}");
                let created = node.create(&inst, Some(id(&k)), doc(json!({"n": i}))).await;
                (i, created.map(|_| ()))
            })
        })
        .collect();
    let mut created = [0; 100];
    for t in tasks {
        let (i, outcome) = t.await.unwrap();
        match outcome {
            Ok(()) => created[i] += 1,
            Err(quintet_core::Error::Conflict(msg)) => {
                assert!(msg.contains("already exists"), "{msg}")
            }
            Err(e) => panic!("x{i:03}: {e}"),
        }
    }
    for (i, n) in created.iter().enumerate() {
        assert_eq!(*n, usize::from(i >= 20), "x{i:03} created {n} times");
    }

    let (docs, index) = find(
        &b,
        &inst,
        json!({"selector": {"n": {"$gte": 0}}, "limit": 1000, "execution_stats": true}),
    )
    .await;
    assert_eq!(index.as_deref(), Some("by-n"));
    assert_eq!(docs.len(), 100);
    let entries = sql(&pg, "SELECT count(*) FROM quintet_data_keys").await;
    assert_eq!(entries[0].get::<_, i64>(0), 100, "one entry per document");

    let page = a.changes(&inst, 0, 1000).await.unwrap();
    let seqs: Vec<u64> = page.changes.iter().map(|c| c.seq).collect();
    assert_eq!(seqs, (1..=100).collect::<Vec<u64>>());
    let mut ids: Vec<&str> = page.changes.iter().map(|c| c.id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 100, "one change per document");

    let commits = sql(
        &pg,
        "SELECT count(DISTINCT xmin::text) FROM quintet_data_docs",
    )
    .await;
    let commits = commits[0].get::<_, i64>(0);
    assert!(
        commits < 20 + 80 / 2,
        "80 creates waiting together took {} commits",
        commits - 20
    );
}

/// A group stops growing at 4 MiB of documents: 40 creates of 200 KB each, waiting
/// together, take at least two commits, and all are created.
#[tokio::test]
async fn large_creates_are_split_into_several_groups() {
    let Some(pg) = quintet_engine_test::postgres("data_group_bytes").await else {
        return;
    };
    let store = open(&pg).await;
    let inst = conformance::instance(InstanceConfig::Data);
    store.create_instance(&inst).await.unwrap();
    // The definitions are known, so the creates below queue at once.
    store.indexes(&inst).await.unwrap();
    let text = "x".repeat(200_000);
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let (store, inst, text) = (store.clone(), inst.clone(), text.clone());
            tokio::spawn(async move {
                store
                    .create(
                        &inst,
                        Some(id(&format!("big{i:02}"))),
                        doc(json!({"t": text})),
                    )
                    .await
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let rows = sql(
        &pg,
        "SELECT count(*), count(DISTINCT xmin::text) FROM quintet_data_docs",
    )
    .await;
    assert_eq!(rows[0].get::<_, i64>(0), 40);
    let commits = rows[0].get::<_, i64>(1);
    assert!((2..40).contains(&commits), "{commits} commits");
}

/// Each instance's creates are grouped apart: a create held up on one instance (its row
/// locked, as while an index is built) does not hold up the creates of another.
#[tokio::test]
async fn a_create_held_up_on_one_instance_does_not_hold_up_another() {
    let Some(pg) = quintet_engine_test::postgres("data_group_instances").await else {
        return;
    };
    let store = open(&pg).await;
    let (held, free) = (
        conformance::instance(InstanceConfig::Data),
        conformance::instance(InstanceConfig::Data),
    );
    for inst in [&held, &free] {
        store.create_instance(inst).await.unwrap();
        store.indexes(inst).await.unwrap();
    }
    let (mut locker, conn) = tokio_postgres::connect(pg.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let tx = locker.transaction().await.unwrap();
    tx.execute(
        "SELECT 1 FROM quintet_data_instances WHERE instance = $1 FOR UPDATE",
        &[&held.id.0],
    )
    .await
    .unwrap();
    let waiting = {
        let (store, held) = (store.clone(), held.clone());
        tokio::spawn(async move {
            store
                .create(&held, Some(id("a")), doc(json!({"n": 1})))
                .await
        })
    };
    // Until the held create's statement waits for the locking transaction.
    let xid: String = tx
        .query_one("SELECT pg_current_xact_id()::xid::text", &[])
        .await
        .unwrap()
        .get(0);
    loop {
        let rows = sql(
            &pg,
            &format!(
                "SELECT count(*) FROM pg_locks WHERE NOT granted \
                 AND locktype = 'transactionid' AND transactionid::text = '{xid}'"
            ),
        )
        .await;
        if rows[0].get::<_, i64>(0) > 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    store
        .create(&free, Some(id("b")), doc(json!({"n": 2})))
        .await
        .unwrap();
    assert!(!waiting.is_finished(), "the held create waits for the lock");
    tx.commit().await.unwrap();
    waiting.await.unwrap().unwrap();
    assert!(store.get(&held, &id("a")).await.unwrap().is_some());
}
