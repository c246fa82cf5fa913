//! The PostgreSQL search index against a real server: the search and lifecycle conformance
//! suites (with the relevance set), two adapters on one schema (two nodes), and what the
//! tables hold after writes. Each test has a schema of its own (`quintet-engine-test`).

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

#[tokio::test]
async fn search_conformance() {
    let Some(pg) = quintet_engine_test::postgres("search_conformance").await else {
        return;
    };
    let index = open(&pg).await;
    conformance::search::run_all(&index).await;
}

#[tokio::test]
async fn search_lifecycle_conformance() {
    let Some(pg) = quintet_engine_test::postgres("search_lifecycle_conformance").await else {
        return;
    };
    let index = open(&pg).await;
    // Sweeping spares instances younger than a grace period (another node may have just
    // created one); age the rows so the suite's orphan qualifies.
    conformance::lifecycle::create_then_drop(&index, InstanceConfig::Search(config())).await;
    conformance::lifecycle::drop_is_idempotent(&index, InstanceConfig::Search(config())).await;
    let live = conformance::instance(InstanceConfig::Search(config()));
    let orphan = conformance::instance(InstanceConfig::Search(config()));
    index.create_instance(&live).await.unwrap();
    index.create_instance(&orphan).await.unwrap();
    index
        .index(&orphan, doc("k", json!({"title": "orphaned words"})))
        .await
        .unwrap();
    assert_eq!(
        index.sweep(&[live.id]).await.unwrap(),
        0,
        "a young instance is not swept"
    );
    age_instances(&pg).await;
    conformance::lifecycle::sweep_removes_only_orphans(&index, InstanceConfig::Search(config()))
        .await;
    assert_eq!(count(&pg, "quintet_search_docs").await, 0);
    assert_eq!(count(&pg, "quintet_search_terms").await, 0);
}

async fn age_instances(pg: &PgSchema) {
    quintet_engine_test::run_sql(
        pg.url(),
        "UPDATE quintet_search_instances SET created = created - interval '1 day'",
    )
    .await
    .unwrap();
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
