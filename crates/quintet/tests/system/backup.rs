//! Backups with the real binary: `quintet backup` of a node under write load and its
//! restore (checked with the hyper-connect suites), a backup killed midway (at a crash
//! point, and with SIGKILL while the server copies), damaged backups, and
//! `/_admin/backups`.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use quintet_testkit::{Answer, Client, Process, Worker};
use reqwest::Method;
use serde_json::{Value, json};

use crate::BIN;

const TOKEN: &str = "backup-test-admin-token";

/// Run `quintet args…` with none of the caller's `QUINTET_*` settings.
fn quintet(args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args);
    for var in [
        "QUINTET_URL",
        "QUINTET_ADMIN_TOKEN",
        "QUINTET_DATA_DIR",
        "QUINTET_CONFIG",
        "QUINTET_FAILPOINT",
    ] {
        cmd.env_remove(var);
    }
    cmd.output().unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn ok(args: &[&str]) -> String {
    let out = quintet(args);
    assert!(out.status.success(), "quintet {args:?}: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn failed(args: &[&str]) -> String {
    let out = quintet(args);
    assert!(
        !out.status.success(),
        "quintet {args:?} succeeded: {}",
        text(&out)
    );
    text(&out)
}

fn spawn(data: &Path) -> Process {
    Process::spawn(Path::new(BIN), data, &["--admin-token", TOKEN])
}

async fn admin(
    p: &Client,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> quintet_testkit::Reply {
    let mut req = p.request(method, path).bearer_auth(TOKEN);
    if let Some(body) = body {
        req = req.json(&body);
    }
    p.send(req).await
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

async fn object(p: &Client, path: &str) -> Vec<u8> {
    let res = p.http().get(p.url(path)).send().await.unwrap();
    assert_eq!(res.status(), 200, "{path}");
    res.bytes().await.unwrap().to_vec()
}

/// Content of object `i`: larger than what is kept inline every fourth one.
fn content(i: usize) -> Vec<u8> {
    let len = if i.is_multiple_of(4) { 70_000 } else { 100 };
    vec![(i % 251) as u8; len]
}

/// Issue 21: "backup taken during a write load at 32 connections, then restored: every
/// write acknowledged before the backup began is there, and the restored server passes".
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_under_32_writers_restores_every_write_acknowledged_before_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, dest, restored) = (
        tmp.path().join("data"),
        tmp.path().join("backup"),
        tmp.path().join("restored"),
    );
    let worker = Worker::start(Answer::Hang).await;
    let p = spawn(&data);
    p.create("data", "d", None).await;
    p.post("/data/d/_index", json!({"fields": ["n"]}))
        .await
        .expect(200);
    p.create("cache", "c", None).await;
    p.create("search", "s", Some(json!({"fields": ["title"]})))
        .await;
    p.create("queue", "q", Some(json!({"target": worker.url()})))
        .await;
    p.create("storage", "st", None).await;
    for i in 0..20 {
        p.put(&format!("/cache/c/k{i}"), Some(json!({"i": i})))
            .await
            .expect(200);
        p.post(
            "/search/s",
            json!({"key": format!("k{i}"), "doc": {"title": format!("word{i}")}}),
        )
        .await
        .expect(201);
        p.send(
            p.request(Method::POST, &format!("/storage/st/o{i}"))
                .body(content(i)),
        )
        .await
        .expect(200);
    }
    let job = p.post("/queue/q", json!({"n": 1})).await.expect(201).body["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // 32 connections create documents until told to stop; each records what was
    // acknowledged.
    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..32 {
        let (client, acked, stop) = (
            Client::new(&p.url("")),
            Arc::clone(&acked),
            Arc::clone(&stop),
        );
        writers.push(tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let id = format!("w{w:02}-{i:05}");
                client
                    .post("/data/d", json!({"_id": id, "n": i}))
                    .await
                    .expect(201);
                acked.lock().unwrap().push(id);
                i += 1;
            }
        }));
    }
    // Some writes first, so the load is on when the backup begins.
    while acked.lock().unwrap().len() < 200 {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let before: Vec<String> = acked.lock().unwrap().clone();
    let out = {
        let (data, dest) = (data.clone(), dest.clone());
        tokio::task::spawn_blocking(move || {
            ok(&[
                "backup",
                s(&dest),
                "--data-dir",
                s(&data),
                "--admin-token",
                TOKEN,
            ])
        })
        .await
        .unwrap()
    };
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    let line: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(line["ok"], true, "{out}");
    // The server kept nothing in its backup directory: the backup was moved to DEST.
    let leftover = std::fs::read_dir(data.join("backups")).map_or(0, Iterator::count);
    assert_eq!(leftover, 0);

    ok(&["backup", "verify", s(&dest)]);
    ok(&["restore", s(&dest), "--data-dir", s(&restored)]);
    let r = spawn(&restored);
    // Every document acknowledged before the backup began.
    let listed = r.get("/data/d?limit=1000000").await.expect(200).body;
    let ids: std::collections::HashSet<&str> = listed["docs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["_id"].as_str().unwrap())
        .collect();
    for id in &before {
        assert!(
            ids.contains(id.as_str()),
            "document {id} acknowledged before the backup"
        );
    }
    // The other services, and the index definition.
    for i in 0..20 {
        let c = r.get(&format!("/cache/c/k{i}")).await.expect(201);
        assert_eq!(c.body["doc"], json!({"i": i}));
        assert_eq!(object(&r, &format!("/storage/st/o{i}")).await, content(i));
    }
    let found = r
        .post("/search/s/_query", json!({"query": "word7"}))
        .await
        .expect(200);
    // The best match, and every document (one typo away) found.
    assert_eq!(found.body["matches"][0]["id"], "k7", "{}", found.body);
    assert_eq!(found.body["matches"].as_array().unwrap().len(), 20);
    let jobs = r.get("/queue/q/_jobs").await.expect(200).body;
    assert!(
        jobs["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|j| j["id"] == job.as_str()),
        "{jobs}"
    );
    let q = r
        .post(
            "/data/d/_query",
            json!({"selector": {"n": 3}, "execution_stats": true}),
        )
        .await
        .expect(200);
    assert_eq!(q.body["execution_stats"]["index"], "idx-n");

    // The restored node serves writes and new instances of every type.
    r.post("/data/d", json!({"_id": "after", "n": 1}))
        .await
        .expect(201);
    r.put("/cache/c/after", Some(json!({"after": 1})))
        .await
        .expect(200);
    r.post(
        "/search/s",
        json!({"key": "after", "doc": {"title": "afterword"}}),
    )
    .await
    .expect(201);
    r.send(
        r.request(Method::POST, "/storage/st/after")
            .body(vec![1u8; 80_000]),
    )
    .await
    .expect(200);
    for (kind, config) in [
        ("data", None),
        ("cache", None),
        ("search", Some(json!({"fields": ["t"]}))),
        ("queue", Some(json!({"target": worker.url()}))),
        ("storage", None),
    ] {
        r.create(kind, &format!("{kind}2"), config).await;
    }
    assert_eq!(object(&r, "/storage/st/after").await, vec![1u8; 80_000]);
    // And the restored server passes the black-box suites of the real client, every
    // service (compat/hyper-connect).
    crate::compat::hyper_connect_suites(&r.url("")).await;
}

/// Backups of a stopped node through the binary: `(node data dir, taken backup)`.
fn stopped_node_with_backup(tmp: &Path) -> (PathBuf, PathBuf) {
    let data = tmp.join("data");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut p = spawn(&data);
        p.create("data", "d", None).await;
        p.create("storage", "st", None).await;
        for i in 0..40 {
            p.post("/data/d", json!({"_id": format!("d{i}")}))
                .await
                .expect(201);
            p.send(
                p.request(Method::POST, &format!("/storage/st/o{i}"))
                    .body(content(i)),
            )
            .await
            .expect(200);
        }
        p.signal_and_wait("TERM", std::time::Duration::from_secs(30));
    });
    let first = tmp.join("first");
    ok(&["backup", s(&first), "--data-dir", s(&data)]);
    (data, first)
}

/// Issue 21: "`kill -9` of the backup midway: no manifest, verify says incomplete, the
/// previous backup is untouched". The backup stops at a crash point between the copy and
/// the manifest (`QUINTET_FAILPOINT=backup-midway`: aborted as by `kill -9`).
#[test]
fn a_backup_killed_midway_has_no_manifest_and_leaves_the_previous_one_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, first) = stopped_node_with_backup(tmp.path());
    let second = tmp.path().join("second");
    let out = Command::new(BIN)
        .args(["backup", s(&second), "--data-dir", s(&data)])
        .env("QUINTET_FAILPOINT", "backup-midway")
        .env_remove("QUINTET_URL")
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    assert!(second.join("data.db").exists(), "the copy was under way");
    assert!(!second.join("manifest.json").exists());
    let err = failed(&["backup", "verify", s(&second)]);
    assert!(err.contains("incomplete"), "{err}");
    let err = failed(&[
        "restore",
        s(&second),
        "--data-dir",
        s(&tmp.path().join("r")),
    ]);
    assert!(err.contains("incomplete"), "{err}");
    ok(&["backup", "verify", s(&first)]);
    // The node's directory is free again, and whole.
    ok(&[
        "backup",
        s(&tmp.path().join("third")),
        "--data-dir",
        s(&data),
    ]);
}

/// Every file under `dir` with its length and modification time, by path.
fn tree(dir: &Path) -> Vec<(PathBuf, u64, std::time::SystemTime)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                todo.push(entry.path());
            } else {
                let rel = entry.path().strip_prefix(dir).unwrap().to_owned();
                out.push((rel, meta.len(), meta.modified().unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// The backups the server lists, as `(name, state)`.
async fn listed(p: &Client) -> Vec<(String, String)> {
    let list = admin(p, Method::GET, "/_admin/backups", None)
        .await
        .expect(200);
    list.body["backups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["name"].as_str().unwrap().to_owned(),
                b["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Issue 21: "`kill -9` of the backup midway", with a real SIGKILL: the `quintet backup`
/// child this test starts against a running server with enough data to take a while is
/// killed once the server lists its backup as being written. Its destination holds no
/// manifest, `verify` calls it incomplete, the previous backup is untouched and verifies,
/// and the server, which finishes its own copy, keeps serving and backing up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_killed_with_sigkill_while_it_copies_leaves_no_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let p = spawn(&data);
    p.create("data", "d", None).await;
    p.create("storage", "st", None).await;
    let docs: Vec<Value> = (0..5_000)
        .map(|i| json!({"_id": format!("d{i:05}"), "n": i, "pad": "x".repeat(200)}))
        .collect();
    p.post("/data/d/_bulk", json!(docs)).await.expect(200);
    // 96 MiB of objects: every byte is hashed for the manifest, which takes a while.
    for i in 0..24u8 {
        p.send(
            p.request(Method::POST, &format!("/storage/st/big{i}"))
                .body(vec![i; 4 << 20]),
        )
        .await
        .expect(200);
    }
    let first = tmp.path().join("first");
    let backup = |dest: &Path| {
        let (data, dest) = (data.clone(), dest.to_owned());
        tokio::task::spawn_blocking(move || {
            ok(&[
                "backup",
                s(&dest),
                "--data-dir",
                s(&data),
                "--admin-token",
                TOKEN,
            ])
        })
    };
    backup(&first).await.unwrap();
    ok(&["backup", "verify", s(&first)]);
    let first_files = tree(&first);

    let second = tmp.path().join("second");
    let mut child = Command::new(BIN)
        .args(["backup", s(&second), "--data-dir", s(&data)])
        .args(["--admin-token", TOKEN])
        .env_remove("QUINTET_URL")
        .env_remove("QUINTET_FAILPOINT")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the server writes the child's backup, then kill the child (SIGKILL).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let running = listed(&p)
            .await
            .into_iter()
            .any(|(name, state)| name.starts_with("cli-") && state == "running");
        if running {
            break;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the backup ended before it could be killed: give the test more data"
        );
        assert!(std::time::Instant::now() < deadline, "no backup began");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success(), "{status:?}");

    assert!(
        second.is_dir(),
        "the destination was made when the backup began"
    );
    assert!(!second.join("manifest.json").exists());
    let err = failed(&["backup", "verify", s(&second)]);
    assert!(err.contains("incomplete"), "{err}");
    let err = failed(&[
        "restore",
        s(&second),
        "--data-dir",
        s(&tmp.path().join("r")),
    ]);
    assert!(err.contains("incomplete"), "{err}");
    // The previous backup: not a file changed, and whole.
    assert_eq!(tree(&first), first_files);
    ok(&["backup", "verify", s(&first)]);

    // The server finishes its own copy (listed, for the operator to delete) and serves on.
    // Its threads run at a lower priority and yield to every other test running meanwhile:
    // a generous deadline.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    loop {
        let all = listed(&p).await;
        if all.iter().all(|(_, state)| state == "complete") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{all:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    p.get("/data/d/d00042").await.expect(200);
    let third = tmp.path().join("third");
    backup(&third).await.unwrap();
    ok(&["backup", "verify", s(&third)]);
}

/// Damage done to a copy of a backup.
type Spoil = Box<dyn Fn(&Path)>;

/// A changed, cut or removed file, an added one, or a damaged manifest: verify and restore
/// refuse the backup and name the file; nothing is restored.
#[test]
fn a_damaged_backup_is_refused_by_verify_and_restore() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, backup) = stopped_node_with_backup(tmp.path());
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(backup.join("manifest.json")).unwrap()).unwrap();
    let blob = manifest["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_owned())
        .find(|p| p.starts_with("storage/"))
        .unwrap();

    let damage: Vec<(&str, Spoil, String)> = vec![
        (
            "flipped",
            Box::new(|b: &Path| {
                let path = b.join("data.db");
                let mut bytes = std::fs::read(&path).unwrap();
                let at = bytes.len() / 2;
                bytes[at] ^= 0x40;
                std::fs::write(&path, bytes).unwrap();
            }),
            "data.db in the backup does not match its checksum".into(),
        ),
        (
            "cut",
            {
                let blob = blob.clone();
                Box::new(move |b: &Path| {
                    let path = b.join(&blob);
                    let bytes = std::fs::read(&path).unwrap();
                    std::fs::remove_file(&path).unwrap();
                    std::fs::write(&path, &bytes[..1000]).unwrap();
                })
            },
            format!("{blob} in the backup has 1000 bytes"),
        ),
        (
            "removed",
            Box::new(|b: &Path| std::fs::remove_file(b.join("registry.db")).unwrap()),
            "registry.db in the backup is missing".into(),
        ),
        (
            "added",
            Box::new(|b: &Path| std::fs::write(b.join("storage/extra"), "x").unwrap()),
            "storage/extra in the backup is not in the manifest".into(),
        ),
        (
            "manifest",
            Box::new(|b: &Path| std::fs::write(b.join("manifest.json"), "{\"format\":").unwrap()),
            "the manifest of".into(),
        ),
    ];
    for (what, spoil, expected) in damage {
        let copy = tmp.path().join(format!("copy-{what}"));
        let status = Command::new("cp")
            .args(["-a", s(&backup), s(&copy)])
            .status()
            .unwrap();
        assert!(status.success());
        spoil(&copy);
        let err = failed(&["backup", "verify", s(&copy)]);
        assert!(err.contains(&expected), "{what}: {err}");
        let target = tmp.path().join(format!("restored-{what}"));
        let err = failed(&["restore", s(&copy), "--data-dir", s(&target)]);
        assert!(err.contains(&expected), "{what}: {err}");
        assert!(!target.exists(), "{what}: nothing restored");
    }

    // A non-empty target is refused unless --force.
    let target = tmp.path().join("busy");
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("keep"), "x").unwrap();
    let err = failed(&["restore", s(&backup), "--data-dir", s(&target)]);
    assert!(
        err.contains("not empty") && err.contains("--force"),
        "{err}"
    );
    assert!(target.join("keep").exists());
    ok(&["restore", s(&backup), "--data-dir", s(&target), "--force"]);
    assert!(!target.join("keep").exists());
}

/// `POST /_admin/backups` writes named backups into the backup directory, `GET` lists
/// them, `DELETE` removes one; names are never paths.
#[tokio::test]
async fn admin_backups_are_named_listed_and_deleted_and_never_paths() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, dir) = (tmp.path().join("data"), tmp.path().join("kept"));
    let p = Process::spawn(
        Path::new(BIN),
        &data,
        &["--admin-token", TOKEN, "--backup-dir", s(&dir)],
    );
    p.create("data", "d", None).await;
    p.post("/data/d", json!({"_id": "x"})).await.expect(201);

    let r = admin(
        &p,
        Method::POST,
        "/_admin/backups",
        Some(json!({"name": "nightly"})),
    )
    .await
    .expect(201);
    assert_eq!(r.body["backup"]["name"], "nightly");
    assert_eq!(r.body["backup"]["state"], "complete");
    assert!(dir.join("nightly/manifest.json").exists());
    ok(&["backup", "verify", s(&dir.join("nightly"))]);
    // Without a name: one from the time.
    let r = admin(&p, Method::POST, "/_admin/backups", None)
        .await
        .expect(201);
    let named = r.body["backup"]["name"].as_str().unwrap().to_owned();
    assert!(named.starts_with("backup-"), "{named}");

    admin(
        &p,
        Method::POST,
        "/_admin/backups",
        Some(json!({"name": "nightly"})),
    )
    .await
    .expect(409);
    for bad in ["../escape", "/tmp/x", "a/b", ".hidden", ""] {
        admin(
            &p,
            Method::POST,
            "/_admin/backups",
            Some(json!({"name": bad})),
        )
        .await
        .expect(422);
    }
    assert!(!tmp.path().join("escape").exists());
    // An interrupted backup is listed as incomplete.
    std::fs::create_dir(dir.join("broken")).unwrap();
    let list = admin(&p, Method::GET, "/_admin/backups", None)
        .await
        .expect(200);
    let names: Vec<(&str, &str)> = list.body["backups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["name"].as_str().unwrap(), b["state"].as_str().unwrap()))
        .collect();
    // Ordered by name ("backup-…" < "broken").
    assert_eq!(
        names,
        vec![
            (named.as_str(), "complete"),
            ("broken", "incomplete"),
            ("nightly", "complete"),
        ]
    );

    for bad in ["..", "..%2F..%2Fdata", "%2Ftmp", "missing"] {
        admin(&p, Method::DELETE, &format!("/_admin/backups/{bad}"), None)
            .await
            .expect(404);
    }
    assert!(data.join("data.db").exists());
    admin(&p, Method::DELETE, "/_admin/backups/nightly", None)
        .await
        .expect(200);
    assert!(!dir.join("nightly").exists());
    // Only with the admin token.
    p.send(p.request(Method::GET, "/_admin/backups"))
        .await
        .expect(401);
}
