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
    transfer::{Scope, TOKEN, cli_ok, contents, embedded, fill, key_for, new_app, snapshot},
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
    cli_ok(
        &first,
        &["export", "--include-secrets", "--to", one.to_str().unwrap()],
    );
    // Secrets inside: for its owner only.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&one).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    let mut args = shared.args();
    args.extend(["--admin-token", TOKEN, "--queue-private-targets", "allow"]);
    let engines = Process::spawn(
        std::path::Path::new(BIN),
        &dir.path().join("engines"),
        &args,
    );
    let out = cli_ok(&engines, &["import", one.to_str().unwrap()]);
    assert_eq!(out.matches(" equal").count(), 6, "{out}");
    assert!(out.contains("1 access keys created"), "{out}");
    // The key travelled with its secret: the first node's token works on the engines.
    let on_engines = Scope {
        node: &engines,
        prefix: shop.prefix.clone(),
        token: shop.token.clone(),
    };
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
    assert_eq!(out.matches(" equal").count(), 6, "{out}");
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

/// `quintet migrate` moves a stopped embedded node to a node on PostgreSQL, Redis and S3
/// (given by its TOML file) and back to a fresh data directory, printing the check.
#[tokio::test]
async fn migrate_moves_a_stopped_node_to_the_engines_and_back() {
    let Some(shared) =
        Shared::every_service("migrate_moves_a_stopped_node_to_the_engines_and_back").await
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let first_dir = dir.path().join("first");
    let mut first = embedded(&first_dir);
    let shop = new_app(&first, "acme", "shop").await;
    fill(&shop, 300).await;
    let before = snapshot(&shop).await;
    first.signal_and_wait("TERM", std::time::Duration::from_secs(30));

    // The engines' node, as a TOML file: the settings `Shared::args` gives as flags.
    let args = shared.args();
    let mut toml = format!(
        "data_dir = {:?}\nadmin_token = {TOKEN:?}\nqueue_private_targets = \"allow\"\n",
        dir.path().join("engines")
    );
    for pair in args.chunks(2) {
        toml.push_str(&format!(
            "{} = {:?}\n",
            pair[0].trim_start_matches("--"),
            pair[1]
        ));
    }
    let config = dir.path().join("engines.toml");
    std::fs::write(&config, toml).unwrap();
    let migrate = |from: &std::path::Path, to: &std::path::Path| {
        let out = std::process::Command::new(BIN)
            .args(["migrate", "--from"])
            .arg(from)
            .arg("--to")
            .arg(to)
            .env("QUINTET_MASTER_KEY", quintet_testkit::test_master_key())
            .env("QUINTET_QUEUE_PRIVATE_TARGETS", "allow")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };
    let out = migrate(&first_dir, &config);
    assert_eq!(out.matches(" equal").count(), 6, "{out}");
    let last_dir = dir.path().join("last");
    let out = migrate(&config, &last_dir);
    assert_eq!(out.matches(" equal").count(), 6, "{out}");
    // Migrating again without --merge is refused: everything exists.
    let again = std::process::Command::new(BIN)
        .args(["migrate", "--from"])
        .arg(&config)
        .arg("--to")
        .arg(&last_dir)
        .env("QUINTET_MASTER_KEY", quintet_testkit::test_master_key())
        .env("QUINTET_QUEUE_PRIVATE_TARGETS", "allow")
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("exists on this server"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );

    let last = embedded(&last_dir);
    let back = key_for(&last, "acme", "shop").await;
    assert_eq!(snapshot(&back).await, before);
}
