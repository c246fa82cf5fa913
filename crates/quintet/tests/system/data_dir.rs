//! What a node does to its data directory: it accepts a pre-created empty one, a refused
//! start leaves the directory as it found it, and a node whose services all live on shared
//! engines keeps nothing there but its lock and admin token.

use std::{
    collections::BTreeSet,
    path::Path,
    process::{Command, Output},
    time::Duration,
};

use quintet_testkit::{Process, engines};
use serde_json::json;

use crate::{BIN, scale_out::Shared};

/// The names in `dir`.
fn entries(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// `quintet serve` on `dir` with `args`, expected to refuse to start.
fn refused(dir: &Path, args: &[&str]) -> String {
    let out: Output = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(!out.status.success(), "the start was not refused");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Issue #18: a pre-created empty directory (systemd's `StateDirectory`, a volume) was
/// taken for one of the embedded registry, so a node on a PostgreSQL registry refused it,
/// after filling it, and every later start failed too.
#[tokio::test]
async fn issue_18_an_empty_data_directory_belongs_to_nobody() {
    let Some(pg) = engines::postgres("issue_18_an_empty_data_directory").await else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("state");
    std::fs::create_dir(&dir).unwrap();
    let mut node = Process::spawn(Path::new(BIN), &dir, &["--data", pg.url()]);
    node.create("data", "movies", None).await;
    node.signal_and_wait("TERM", Duration::from_secs(30));
    // Bound to the PostgreSQL registry now: the embedded one is refused.
    let err = refused(&dir, &[]);
    assert!(err.contains("belongs to registry \"postgres:"), "{err}");
}

/// A refused start writes nothing: a missing directory is not left behind, an empty one
/// stays empty, and one bound to another registry keeps only what it had.
#[test]
fn a_refused_start_leaves_the_directory_as_it_found_it() {
    let tmp = tempfile::tempdir().unwrap();
    // Nothing listens on port 1: the registry cannot be opened.
    let unreachable = ["--registry", "postgres://quintet@127.0.0.1:1/quintet"];
    let missing = tmp.path().join("missing");
    let err = refused(&missing, &unreachable);
    assert!(
        err.contains("cannot open the registry on PostgreSQL"),
        "{err}"
    );
    assert!(!missing.exists());

    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    refused(&empty, &unreachable);
    assert_eq!(entries(&empty), BTreeSet::new());

    let bound = tmp.path().join("bound");
    std::fs::create_dir(&bound).unwrap();
    // Private, as quintet left it (a used directory open to others is refused too).
    std::fs::set_permissions(&bound, {
        let mut p = std::fs::metadata(&bound).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut p, 0o700);
        p
    })
    .unwrap();
    std::fs::write(bound.join("registry-id"), "postgres:another\n").unwrap();
    let err = refused(&bound, &[]);
    assert!(
        err.contains("belongs to registry \"postgres:another\""),
        "{err}"
    );
    assert_eq!(entries(&bound), BTreeSet::from(["registry-id".to_owned()]));
}

/// Issue #18: a node with every service on PostgreSQL, Redis and S3 created and opened
/// every embedded store anyway. It keeps its lock, and while it serves the record of where
/// it listens (for the admin commands), and nothing else, whatever it serves.
#[tokio::test]
async fn issue_18_a_stateless_node_keeps_no_store() {
    let Some(shared) = Shared::every_service("issue_18_a_stateless_node_keeps_no_store").await
    else {
        return;
    };
    let args = shared.args();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let mut node = Process::spawn(Path::new(BIN), &dir, &args);
    let serving = BTreeSet::from(["LOCK".to_owned(), "server.json".to_owned()]);
    assert_eq!(entries(&dir), serving);
    node.create("data", "movies", None).await;
    node.create("cache", "sessions", None).await;
    node.create("search", "films", Some(json!({"fields": ["title"]})))
        .await;
    node.create("storage", "media", None).await;
    node.create(
        "queue",
        "jobs",
        Some(json!({"target": "http://127.0.0.1:9/"})),
    )
    .await;
    node.post("/data/movies", json!({"_id": "alien"}))
        .await
        .expect(201);
    node.post("/cache/sessions", json!({"key": "k", "value": {"v": 1}}))
        .await
        .expect(201);
    node.post(
        "/search/films",
        json!({"key": "a", "doc": {"title": "Alien"}}),
    )
    .await
    .expect(201);
    node.send(
        node.request(reqwest::Method::POST, "/storage/media/a.txt")
            .body("x"),
    )
    .await
    .expect(200);
    assert_eq!(entries(&dir), serving);
    node.signal_and_wait("TERM", Duration::from_secs(30));
    assert_eq!(entries(&dir), BTreeSet::from(["LOCK".to_owned()]));
}

/// A data directory that cannot be one is the operator's mistake, said as such (it was
/// "internal error: … Not a directory (os error 20)").
#[test]
fn an_unusable_data_directory_says_what_is_wrong() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    for dir in [file.clone(), file.join("under")] {
        let err = refused(&dir, &[]);
        assert!(
            err.contains("is a file, or lies under one: give --data-dir a directory"),
            "{err}"
        );
        assert!(!err.contains("internal error"), "{err}");
    }
    // A read-only file system (mounted when the test may, as root in CI).
    let ro = tmp.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs"])
        .arg(&ro)
        .status()
        .is_ok_and(|s| s.success());
    if mounted {
        let err = refused(&ro.join("data"), &[]);
        let _ = Command::new("umount").arg(&ro).status();
        assert!(err.contains("is on a read-only file system"), "{err}");
    }
}
