//! The PostgreSQL search index against a real server, beyond the conformance suites
//! (`conformance.rs`): the sweep's rows, two adapters on one schema (two nodes), and what
//! the tables hold after writes. Each test has a schema of its own (`quintet-engine-test`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use quintet_core::{
    InstanceConfig, conformance,
    ports::{
        Lifecycle,
        search::{SearchConfig, SearchIndex},
    },
    search::{SearchDoc, SearchQuery},
};
use quintet_engine_test::PgSchema;
use quintet_postgres::{PgConfig, PgDatabase, PgSearchIndex};
use serde_json::{Value, json};

async fn open(pg: &PgSchema) -> PgSearchIndex {
    let db = PgDatabase::connect(&PgConfig::new(pg.url()).unwrap())
        .await
        .unwrap();
    PgSearchIndex::open(db).await.unwrap()
}

fn config() -> SearchConfig {
    SearchConfig {
        fields: vec!["title".into()],
        store_fields: vec![],
    }
}

fn doc(key: &str, body: Value) -> SearchDoc {
    SearchDoc::new(
        key.parse().unwrap(),
        body.as_object().unwrap().clone(),
        &config(),
    )
    .unwrap()
}

async fn ids(index: &PgSearchIndex, inst: &quintet_core::Instance, q: &str) -> Vec<String> {
    let q = SearchQuery::from_json(&json!({ "query": q }), &config()).unwrap();
    index
        .query(inst, &q)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.id)
        .collect()
}

/// The start-up sweep removes an orphan's documents, postings and vocabulary with it.
#[tokio::test]
async fn a_sweep_removes_every_row_of_an_orphan() {
    let Some(pg) = quintet_engine_test::postgres("search_sweep_rows").await else {
        return;
    };
    let index = open(&pg).await;
    let orphan = conformance::instance(InstanceConfig::Search(config()));
    index.create_instance(&orphan).await.unwrap();
    index
        .index(&orphan, doc("k", json!({"title": "orphaned words"})))
        .await
        .unwrap();
    conformance::lifecycle::sweep_removes_only_orphans(&index, InstanceConfig::Search(config()))
        .await;
    assert_eq!(count(&pg, "quintet_search_docs").await, 0);
    assert_eq!(count(&pg, "quintet_search_terms").await, 0);
    assert_eq!(count(&pg, "quintet_search_postings").await, 0);
}

async fn count(pg: &PgSchema, table: &str) -> i64 {
    let (client, conn) = tokio_postgres::connect(pg.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await
        .unwrap()
        .get(0)
}

/// Two adapters on one schema are two nodes: what one writes, the other finds at once.
#[tokio::test]
async fn two_nodes_share_the_index() {
    let Some(pg) = quintet_engine_test::postgres("search_two_nodes").await else {
        return;
    };
    let (a, b) = (open(&pg).await, open(&pg).await);
    let inst = conformance::instance(InstanceConfig::Search(config()));
    a.create_instance(&inst).await.unwrap();
    a.index(&inst, doc("gb", json!({"title": "Ghostbusters"})))
        .await
        .unwrap();
    assert_eq!(ids(&b, &inst, "ghots").await, ["gb"]);
    b.remove(&inst, &"gb".parse().unwrap()).await.unwrap();
    assert_eq!(ids(&a, &inst, "ghost").await, Vec::<String>::new());
    a.drop_instance(&inst).await.unwrap();
}

/// Removing and replacing documents keeps the vocabulary exact: terms no document holds
/// are gone, so typo lookups never meet them.
#[tokio::test]
async fn the_vocabulary_follows_the_documents() {
    let Some(pg) = quintet_engine_test::postgres("search_vocabulary").await else {
        return;
    };
    let index = open(&pg).await;
    let inst = conformance::instance(InstanceConfig::Search(config()));
    index.create_instance(&inst).await.unwrap();
    index
        .bulk(
            &inst,
            vec![
                doc("a", json!({"title": "shared alpha"})),
                doc("b", json!({"title": "shared beta beta"})),
            ],
        )
        .await
        .unwrap();
    let (client, conn) = tokio_postgres::connect(pg.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let vocabulary = || async {
        client
            .query(
                "SELECT term, docs FROM quintet_search_terms ORDER BY term",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, i32>(1)))
            .collect::<Vec<_>>()
    };
    let stats = || async {
        let r = client
            .query_one("SELECT docs, tokens FROM quintet_search_instances", &[])
            .await
            .unwrap();
        (r.get::<_, i64>(0), r.get::<_, Vec<i64>>(1))
    };
    assert_eq!(
        vocabulary().await,
        [
            ("alpha".into(), 1),
            ("beta".into(), 1),
            ("shared".into(), 2)
        ]
    );
    assert_eq!(stats().await, (2, vec![5]));
    index
        .update(&inst, doc("b", json!({"title": "gamma"})))
        .await
        .unwrap();
    assert_eq!(
        vocabulary().await,
        [
            ("alpha".into(), 1),
            ("gamma".into(), 1),
            ("shared".into(), 1)
        ]
    );
    assert_eq!(stats().await, (2, vec![3]));
    index.remove(&inst, &"a".parse().unwrap()).await.unwrap();
    assert_eq!(vocabulary().await, [("gamma".into(), 1)]);
    assert_eq!(stats().await, (1, vec![1]));
    index.drop_instance(&inst).await.unwrap();
    assert_eq!(vocabulary().await, []);
}

/// A write to a dropped instance is refused and leaves nothing behind.
#[tokio::test]
async fn a_dropped_instance_refuses_writes() {
    let Some(pg) = quintet_engine_test::postgres("search_dropped").await else {
        return;
    };
    let index = open(&pg).await;
    let inst = conformance::instance(InstanceConfig::Search(config()));
    index.create_instance(&inst).await.unwrap();
    index.drop_instance(&inst).await.unwrap();
    let late = index
        .index(&inst, doc("k", json!({"title": "late"})))
        .await
        .unwrap_err();
    assert!(matches!(late, quintet_core::Error::NotFound(_)), "{late:?}");
    assert_eq!(count(&pg, "quintet_search_docs").await, 0);
}

/// Words of the relevance corpus, turned into queries: as they are, with a typo, cut
/// short (a completion), and in pairs.
fn generated_queries(corpus: &[Value]) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    for d in corpus {
        for field in ["title", "body"] {
            quintet_core::search::tokenize::for_each_token(d[field].as_str().unwrap_or(""), |t| {
                if !words.iter().any(|w| w == t) {
                    words.push(t.to_owned());
                }
            });
        }
    }
    let mut out = Vec::new();
    for (i, w) in words.iter().enumerate() {
        let c: Vec<char> = w.chars().collect();
        out.push(format!("{w} "));
        if c.len() >= 5 {
            let mut typo = c.clone();
            typo.swap(1 + i % (c.len() - 2), 2 + i % (c.len() - 2));
            out.push(format!("{} ", typo.iter().collect::<String>()));
            let mut dropped = c.clone();
            dropped.remove(1 + i % (c.len() - 1));
            out.push(dropped.iter().collect());
        }
        if c.len() >= 3 {
            out.push(c[..c.len() - 1].iter().collect());
        }
        if let Some(next) = words.get(i * 7 % words.len()) {
            out.push(format!("{w} {next}"));
        }
    }
    out
}

/// The relevance corpus on tantivy and on PostgreSQL, asked the relevance queries and
/// hundreds of generated ones: the same documents match, with the same explanation, in
/// the same order.
#[tokio::test]
async fn answers_like_the_embedded_engine() {
    use quintet_embedded::search::TantivySearchIndex;
    let Some(pg) = quintet_engine_test::postgres("search_same_as_tantivy").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let tantivy = TantivySearchIndex::open(dir.path()).unwrap();
    let postgres = open(&pg).await;
    let config = SearchConfig {
        fields: vec!["title".into(), "body".into()],
        store_fields: vec!["title".into()],
    };
    let inst = conformance::instance(InstanceConfig::Search(config.clone()));
    let corpus: Vec<Value> = serde_json::from_str(conformance::search::CORPUS).unwrap();
    let docs: Vec<SearchDoc> = corpus
        .iter()
        .map(|d| SearchDoc::from_bulk_entry(d.clone(), &config).unwrap())
        .collect();
    for port in [&tantivy as &dyn SearchIndex, &postgres] {
        port.create_instance(&inst).await.unwrap();
        port.bulk(&inst, docs.clone()).await.unwrap();
    }
    let relevance: Vec<Value> = serde_json::from_str(conformance::search::QUERIES).unwrap();
    let mut queries: Vec<String> = relevance
        .iter()
        .map(|q| q["query"].as_str().unwrap().to_owned())
        .collect();
    // Every third generated query keeps the test quick; all of them agree too.
    queries.extend(generated_queries(&corpus).into_iter().step_by(3));
    let mut differences = Vec::new();
    for text in &queries {
        let q = SearchQuery::from_json(&json!({ "query": text }), &config).unwrap();
        let shape = |matches: Vec<quintet_core::search::SearchMatch>| {
            matches
                .into_iter()
                .map(|m| {
                    let mut wire = m.to_json();
                    wire["score"] = json!(null);
                    wire
                })
                .collect::<Vec<_>>()
        };
        let expected = shape(tantivy.query(&inst, &q).await.unwrap());
        let got = shape(postgres.query(&inst, &q).await.unwrap());
        if expected != got {
            let ids = |v: &[Value]| {
                v.iter()
                    .map(|m| m["id"].to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            differences.push(format!(
                "{text:?}\n  tantivy:  {}\n  postgres: {}",
                ids(&expected),
                ids(&got)
            ));
        }
    }
    assert!(
        differences.is_empty(),
        "{} of {} queries answer differently:\n{}",
        differences.len(),
        queries.len(),
        differences.join("\n")
    );
}

/// The statistics, postings and vocabulary of every instance agree with the documents:
/// what concurrent writers must never break.
async fn assert_consistent(pg: &PgSchema) {
    let (client, conn) = tokio_postgres::connect(pg.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let checks = [
        (
            "document counts",
            "SELECT count(*) FROM quintet_search_instances i
             WHERE docs <> (SELECT count(*) FROM quintet_search_docs d WHERE d.instance = i.instance)",
        ),
        (
            "token totals",
            "SELECT count(*) FROM quintet_search_instances i
             WHERE tokens[1] <> (SELECT COALESCE(sum(lengths[1]), 0) FROM quintet_search_docs d
                                 WHERE d.instance = i.instance)",
        ),
        (
            "vocabulary counts",
            "SELECT count(*) FROM (
                 SELECT instance, field, term, count(*) AS n FROM quintet_search_postings
                 GROUP BY instance, field, term
             ) p FULL JOIN quintet_search_terms t USING (instance, field, term)
             WHERE p.n IS DISTINCT FROM t.docs::bigint",
        ),
        (
            "postings of missing documents",
            "SELECT count(*) FROM quintet_search_postings p
             WHERE NOT EXISTS (SELECT 1 FROM quintet_search_docs d WHERE d.id = p.doc)",
        ),
    ];
    for (what, sql) in checks {
        let bad: i64 = client.query_one(sql, &[]).await.unwrap().get(0);
        assert_eq!(bad, 0, "{what} disagree");
    }
}

/// Two nodes writing one instance at once (single writes, overlapping bulks, updates and
/// removals): every write lands, none deadlocks, and the statistics stay exact.
#[tokio::test]
async fn concurrent_writers_keep_the_statistics_exact() {
    let Some(pg) = quintet_engine_test::postgres("search_concurrent_writers").await else {
        return;
    };
    let (a, b) = (open(&pg).await, open(&pg).await);
    let inst = conformance::instance(InstanceConfig::Search(config()));
    a.create_instance(&inst).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..24 {
        let port = if i % 2 == 0 { a.clone() } else { b.clone() };
        let inst = inst.clone();
        tasks.push(tokio::spawn(async move {
            port.index(
                &inst,
                doc(
                    &format!("single{i}"),
                    json!({"title": format!("common word{i}")}),
                ),
            )
            .await
            .unwrap();
            let docs = (0..10)
                .map(|k| {
                    doc(
                        &format!("bulk{}", (i + k) % 16),
                        json!({"title": format!("common shared bulk{i} pass")}),
                    )
                })
                .collect();
            port.bulk(&inst, docs).await.unwrap();
            port.update(
                &inst,
                doc(&format!("single{i}"), json!({"title": "common updated"})),
            )
            .await
            .unwrap();
            if i % 3 == 0 {
                port.remove(&inst, &format!("single{i}").parse().unwrap())
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_consistent(&pg).await;
    // 24 singles less 8 removed, 16 bulk keys.
    assert_eq!(ids(&b, &inst, "common").await.len(), 16 + 16);
    assert_eq!(ids(&a, &inst, "updated").await.len(), 16);
    a.drop_instance(&inst).await.unwrap();
}

/// A filter that only the worst-ranked candidates pass still finds them: candidates are
/// read in chunks, best first, until the answer is full.
#[tokio::test]
async fn a_filter_finds_matches_beyond_the_first_chunk() {
    let Some(pg) = quintet_engine_test::postgres("search_filter_chunks").await else {
        return;
    };
    let index = open(&pg).await;
    let inst = conformance::instance(InstanceConfig::Search(config()));
    index.create_instance(&inst).await.unwrap();
    // Longer titles rank lower; only the last (longest) ones are "rare".
    let docs = (0..500)
        .map(|i| {
            let title = format!("lamp {}", "filler ".repeat(i / 10));
            let kind = if i >= 495 { "rare" } else { "common" };
            doc(&format!("d{i:03}"), json!({"title": title, "kind": kind}))
        })
        .collect();
    index.bulk(&inst, docs).await.unwrap();
    let q = SearchQuery::from_json(
        &json!({"query": "lamp", "filter": {"kind": "rare"}, "limit": 3}),
        &config(),
    )
    .unwrap();
    let found: Vec<String> = index
        .query(&inst, &q)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(found, ["d495", "d496", "d497"]);
    assert_consistent(&pg).await;
}

/// In a database without a `public` schema, a user who may create extensions (`pg_trgm` is
/// trusted) gets `pg_trgm` in its own schema, and search works. Runs in a database and
/// role of its own, so the shared test database's `pg_trgm` is left alone.
#[tokio::test]
async fn pg_trgm_goes_into_the_own_schema_without_public() {
    let Some(pg) = quintet_engine_test::postgres("search_trgm_own_schema").await else {
        return;
    };
    let name = pg.schema().to_owned();
    let base = pg.database_url();
    let (server, _) = base.rsplit_once('/').unwrap();
    let admin_url = format!("{server}/postgres");
    let run = |url: String, sql: String| async move {
        quintet_engine_test::run_sql(&url, &sql).await.unwrap();
    };
    // One statement per call: CREATE and DROP DATABASE refuse a transaction block.
    run(admin_url.clone(), format!("CREATE ROLE \"{name}\" LOGIN")).await;
    run(admin_url.clone(), format!("CREATE DATABASE \"{name}\"")).await;
    let db_url = format!("{server}/{name}");
    run(
        db_url.clone(),
        format!(
            "DROP SCHEMA public; \
             GRANT CREATE ON DATABASE \"{name}\" TO \"{name}\"; \
             CREATE SCHEMA own AUTHORIZATION \"{name}\""
        ),
    )
    .await;
    // The same server as the role: postgres://<role>@host:port/<database>.
    let (scheme, rest) = db_url.split_once("://").unwrap();
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let user_url = format!("{scheme}://{name}@{host}?options=-c%20search_path%3Down");
    let outcome = async {
        let db = PgDatabase::connect(&PgConfig::new(&user_url).unwrap())
            .await
            .unwrap();
        let index = PgSearchIndex::open(db).await.unwrap();
        let inst = conformance::instance(InstanceConfig::Search(config()));
        index.create_instance(&inst).await.unwrap();
        index
            .index(&inst, doc("gb", json!({"title": "Ghostbusters"})))
            .await
            .unwrap();
        let found = ids(&index, &inst, "ghostbustres ").await;
        let (client, conn) = tokio_postgres::connect(&user_url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        let schema: String = client
            .query_one(
                "SELECT extnamespace::regnamespace::text FROM pg_extension \
                 WHERE extname = 'pg_trgm'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        index.database().close();
        (found, schema)
    }
    .await;
    run(
        admin_url.clone(),
        format!("DROP DATABASE \"{name}\" WITH (FORCE)"),
    )
    .await;
    run(admin_url, format!("DROP ROLE \"{name}\"")).await;
    assert_eq!(outcome, (vec!["gb".to_owned()], "own".to_owned()));
}
