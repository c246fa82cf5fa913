//! Two real `quintet serve` processes, each with a data directory of its own, on one
//! PostgreSQL registry and one Redis cache: what one node writes to the cache, the other
//! reads, expires and deletes alike.

use std::{path::Path, time::Duration};

use quintet_testkit::{Process, engines};
use serde_json::json;

use crate::BIN;

fn bin() -> &'static Path {
    Path::new(BIN)
}

#[tokio::test]
async fn two_nodes_share_one_redis_cache() {
    let test = "two_nodes_share_one_redis_cache";
    let Some(pg) = engines::postgres(test).await else {
        return;
    };
    let Some(redis) = engines::redis(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // The nodes' keys go under the registry's identity, which the fresh schema makes
    // unique to this test: the engine-test prefix is not needed.
    let args = [
        "--registry",
        pg.url(),
        "--cache",
        redis.url.as_str(),
        "--admin-token",
        "two-nodes-share-one-cache-token",
    ];
    let a = Process::spawn(bin(), &dir.path().join("a"), &args);
    let b = Process::spawn(bin(), &dir.path().join("b"), &args);
    a.create("cache", "shared", None).await;

    // Written through A, read through B; B's add of the same key conflicts.
    a.post(
        "/cache/shared",
        json!({"key": "movie-1", "value": {"title": "Ghostbusters", "year": 1984}}),
    )
    .await
    .expect(201);
    let r = b.get("/cache/shared/movie-1").await.expect(201);
    assert_eq!(
        r.body["doc"],
        json!({"title": "Ghostbusters", "year": 1984})
    );
    b.post("/cache/shared", json!({"key": "movie-1", "value": {}}))
        .await
        .expect(409);
    b.put("/cache/shared/movie-2", Some(json!({"title": "Alien"})))
        .await
        .expect(200);
    let r = a
        .get("/cache/shared/_query?pattern=movie-*")
        .await
        .expect(200);
    assert_eq!(
        r.body["docs"],
        json!([
            {"key": "movie-1", "value": {"title": "Ghostbusters", "year": 1984}},
            {"key": "movie-2", "value": {"title": "Alien"}}
        ])
    );

    // A TTL'd entry is live on both, then gone on both.
    a.post(
        "/cache/shared",
        json!({"key": "brief", "value": {"v": 1}, "ttl": "1s"}),
    )
    .await
    .expect(201);
    b.get("/cache/shared/brief").await.expect(201);
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    a.get("/cache/shared/brief").await.expect(404);
    b.get("/cache/shared/brief").await.expect(404);
    let r = b.get("/cache/shared/_query?pattern=*").await.expect(200);
    assert_eq!(r.body["docs"].as_array().unwrap().len(), 2, "{}", r.text);

    // Deleted through B: gone for A.
    b.delete("/cache/shared/movie-1").await.expect(200);
    a.get("/cache/shared/movie-1").await.expect(404);
    a.delete("/cache/shared/movie-1").await.expect(404);

    // The instance deleted through A takes its entries with it, for both nodes.
    a.delete("/cache/shared").await.expect(200);
    b.get("/cache/shared/movie-2").await.expect(404);
    b.create("cache", "shared", None).await;
    a.get("/cache/shared/movie-2").await.expect(404);
    let r = a.get("/cache/shared/_query").await.expect(200);
    assert_eq!(r.body["docs"], json!([]), "{}", r.text);
    b.delete("/cache/shared").await.expect(200);
}
