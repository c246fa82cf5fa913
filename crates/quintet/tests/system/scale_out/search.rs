//! Search on PostgreSQL across two real `quintet serve` processes sharing the registry
//! and the search tables: what one node indexes, the other finds; what one removes, the
//! other stops finding.

use std::path::Path;

use quintet_testkit::{Client, Process, engines};
use serde_json::json;

use crate::BIN;

async fn ids(p: &Client, query: &str) -> Vec<String> {
    let r = p
        .post("/search/movies/_query", json!({ "query": query }))
        .await
        .expect(200);
    r.body["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn two_nodes_share_search_on_postgres() {
    let Some(pg) = engines::postgres("two_nodes_share_search_on_postgres").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--registry",
        pg.url(),
        "--search",
        pg.url(),
        "--admin-token",
        "shared-admin-token-for-both-nodes",
    ];
    let mut a = Process::spawn(Path::new(BIN), &dir.path().join("a"), &args);
    let b = Process::spawn(Path::new(BIN), &dir.path().join("b"), &args);

    a.create(
        "search",
        "movies",
        Some(json!({"fields": ["title", "body"], "storeFields": ["title"]})),
    )
    .await;
    a.post(
        "/search/movies",
        json!({"key": "gb", "doc": {"title": "Ghostbusters", "body": "ghosts in New York"}}),
    )
    .await
    .expect(201);
    a.post(
        "/search/movies/_bulk",
        json!([
            {"_id": "matrix", "title": "The Matrix", "body": "a hacker learns the truth"},
            {"_id": "alien", "title": "Alien", "body": "a crew meets a creature"}
        ]),
    )
    .await
    .expect(200);

    // Node B finds them at once, typos included ("matirx": one swap).
    assert_eq!(ids(&b, "matirx ").await, ["matrix"]);
    assert_eq!(ids(&b, "ghots").await, ["gb"]);
    let r = b
        .post("/search/movies/_query", json!({"query": "matirx"}))
        .await
        .expect(200);
    assert_eq!(r.body["matches"][0]["title"], "The Matrix");
    b.get("/search/movies/alien").await.expect(201);

    // A removal through B disappears from A's answers.
    b.delete("/search/movies/matrix").await.expect(200);
    assert_eq!(ids(&a, "matrix").await, Vec::<String>::new());
    a.get("/search/movies/matrix").await.expect(404);
    assert_eq!(ids(&a, "alien ghostbusters").await.len(), 2);

    // Acknowledged writes are PostgreSQL's: they survive kill -9 of the node that made them.
    a.post(
        "/search/movies",
        json!({"key": "jaws", "doc": {"title": "Jaws", "body": "a shark"}}),
    )
    .await
    .expect(201);
    a.restart();
    assert_eq!(
        ids(&a, "shrak ").await,
        ["jaws"],
        "a swap in a 5-letter word"
    );
    assert_eq!(ids(&a, "jaws").await, ["jaws"]);

    // Destroying the instance through A removes it for B too.
    a.delete("/search/movies").await.expect(200);
    b.post("/search/movies/_query", json!({"query": "alien"}))
        .await
        .expect(404);
}

#[test]
fn search_on_postgres_without_a_postgres_registry_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .args(["--search", "postgres://quintet@127.0.0.1:1/none"])
        .env_remove("QUINTET_REGISTRY")
        .env_remove("QUINTET_CONFIG")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs --registry postgres://"), "{err}");
}
