//! Moving a deployment: everything exported from an embedded node, imported into a node
//! with every service on PostgreSQL, Redis and S3, exported from there and imported into a
//! fresh embedded node reads back as it was: documents, index definitions, cache values
//! and their times to live (within a second), search answers, queued jobs, object bytes,
//! media types and entity tags; the archives' per-instance digests agree at every step.

use std::time::Instant;

use quintet_testkit::Process;

use super::Shared;
use crate::{
    BIN,
    transfer::{TOKEN, cli_ok, contents, embedded, fill, key_for, new_app, snapshot},
};

#[tokio::test]
async fn round_trip_embedded_to_engines_and_back() {
    let Some(shared) = Shared::every_service("round_trip_embedded_to_engines_and_back").await
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let first = embedded(&dir.path().join("first"));
    let shop = new_app(&first, "acme", "shop").await;
    fill(&shop, 2_000).await;
    let before = snapshot(&shop).await;

    let one = dir.path().join("one.qta");
    let started = Instant::now();
    cli_ok(&first, &["export", "--to", one.to_str().unwrap()]);

    let mut args = shared.args();
    args.extend(["--admin-token", TOKEN, "--queue-private-targets", "allow"]);
    let engines = Process::spawn(
        std::path::Path::new(BIN),
        &dir.path().join("engines"),
        &args,
    );
    let out = cli_ok(&engines, &["import", one.to_str().unwrap()]);
    assert_eq!(out.matches(" equal").count(), 5, "{out}");
    let on_engines = key_for(&engines, "acme", "shop").await;
    let mut seen = snapshot(&on_engines).await;
    // S3 computes its own entity tags; everything else is the same.
    for o in seen["objects"].as_array_mut().unwrap() {
        o["etag"] = serde_json::Value::Null;
    }
    let mut expected = before.clone();
    for o in expected["objects"].as_array_mut().unwrap() {
        o["etag"] = serde_json::Value::Null;
    }
    assert_eq!(seen, expected, "on PostgreSQL, Redis and S3");

    let two = dir.path().join("two.qta");
    cli_ok(&engines, &["export", "--to", two.to_str().unwrap()]);
    let last = embedded(&dir.path().join("last"));
    let out = cli_ok(&last, &["import", two.to_str().unwrap()]);
    assert_eq!(out.matches(" equal").count(), 5, "{out}");
    let back = key_for(&last, "acme", "shop").await;
    assert_eq!(snapshot(&back).await, before, "back on the embedded engine");

    // Per-instance digests agree at every step; times to live only shrank, by no more
    // than the time taken plus the rounding up to the second.
    let three = dir.path().join("three.qta");
    cli_ok(&last, &["export", "--to", three.to_str().unwrap()]);
    let elapsed = i64::try_from(started.elapsed().as_millis()).unwrap();
    let (t1, ttl1) = contents(&one);
    let (t2, _) = contents(&two);
    let (t3, ttl3) = contents(&three);
    assert_eq!(t1, t2);
    assert_eq!(t1, t3);
    assert_eq!(ttl1.len(), 3);
    for ((k1, a), (k3, b)) in ttl1.iter().zip(&ttl3) {
        assert_eq!(k1, k3);
        match (a, b) {
            (None, None) => {}
            (Some(a), Some(b)) => assert!(
                *b <= *a + 2_000 && *a - *b <= elapsed + 2_000,
                "{k1}: {a} then {b} after {elapsed} ms"
            ),
            other => panic!("{k1}: {other:?}"),
        }
    }
}
