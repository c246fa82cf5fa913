//! The real binary on a small file system that fills up (a tmpfs mounted for the test, so
//! this needs root; it skips without, and fails with `REQUIRE_ENGINES=1` as CI sets):
//! writes are refused with 507, deletes go on, `/_ready` says why, writing resumes as
//! soon as space is freed, and nothing acknowledged is lost, through `kill -9`.

use crate::BIN;
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use quintet_testkit::{Process, Reply, engines};
use reqwest::Method;
use serde_json::{Value, json};

const MIB: usize = 1024 * 1024;

/// A tmpfs of `mib` MiB, unmounted when dropped.
struct Tmpfs {
    _dir: tempfile::TempDir,
    mnt: PathBuf,
}

impl Tmpfs {
    fn mount(test: &str, mib: usize) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let mounted = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={mib}m,mode=0700"),
                "tmpfs",
            ])
            .arg(&mnt)
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            assert!(
                !engines::required(),
                "{test}: cannot mount a tmpfs (needs root), and REQUIRE_ENGINES=1"
            );
            eprintln!("{test}: skipping: cannot mount a tmpfs (needs root)");
            return None;
        }
        Some(Self { _dir: dir, mnt })
    }

    fn path(&self) -> &Path {
        &self.mnt
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
    }
}

/// Fill the file system of `dir` with `filler` until at most `leave` bytes are free.
fn fill(dir: &Path, leave: u64) -> PathBuf {
    let filler = dir.join("filler");
    let free = free_bytes(dir);
    let size = free.saturating_sub(leave);
    std::fs::write(&filler, vec![0u8; usize::try_from(size).unwrap()]).unwrap();
    filler
}

fn free_bytes(dir: &Path) -> u64 {
    let out = Command::new("df")
        .args(["--output=avail", "-B1"])
        .arg(dir)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn assert_disk_full(r: &Reply, what: &str) {
    assert_eq!(r.status, 507, "{what}: {}", r.text);
    assert_eq!(r.body["ok"], false, "{what}");
    assert_eq!(r.body["status"], 507, "{what}");
    let msg = r.body["msg"].as_str().unwrap();
    assert!(
        msg.contains("disk is full") && msg.contains("deletes still work"),
        "{what}: {msg}"
    );
}

/// What was acknowledged, to be found again after `kill -9`.
#[derive(Default)]
struct Acknowledged {
    docs: Vec<String>,
    objects: Vec<String>,
    keys: Vec<String>,
    searched: Vec<String>,
    jobs: Vec<String>,
}

/// One write of every service, `n`-th of its kind; the statuses.
async fn write_each(node: &Process, n: usize, ack: &mut Acknowledged) -> Vec<(String, Reply)> {
    let mut out = Vec::new();
    let id = format!("d{n}");
    let r = node
        .post(
            "/data/docs",
            json!({"_id": id, "n": n, "pad": "x".repeat(2000)}),
        )
        .await;
    if r.status == 201 {
        ack.docs.push(id);
    }
    out.push(("document".to_owned(), r));
    let key = format!("k{n}");
    let r = node
        // Large values, so the cache log grows past its zero-filled run-ahead.
        .post(
            "/cache/kv",
            json!({"key": key, "value": {"n": n, "pad": "c".repeat(MIB / 2)}}),
        )
        .await;
    if r.status == 201 {
        ack.keys.push(key);
    }
    out.push(("cache entry".to_owned(), r));
    let key = format!("s{n}");
    let r = node
        .post(
            "/search/films",
            json!({"key": key, "doc": {"title": format!("film number {n}")}}),
        )
        .await;
    if r.status == 201 {
        ack.searched.push(key);
    }
    out.push(("search document".to_owned(), r));
    let r = node.post("/queue/jobs", json!({"n": n})).await;
    if r.status == 201 {
        ack.jobs.push(r.body["id"].as_str().unwrap().to_owned());
    }
    out.push(("job".to_owned(), r));
    let path = format!("o{n}.bin");
    let r = node
        .send(
            node.request(Method::POST, &format!("/storage/files/{path}"))
                .header("content-type", "application/octet-stream")
                .body(vec![b'o'; MIB]),
        )
        .await;
    if r.status == 200 {
        ack.objects.push(path);
    }
    out.push(("object".to_owned(), r));
    out
}

async fn create_instances(node: &Process) {
    node.put("/data/docs", None).await.expect(201);
    node.put("/data/scratch", None).await.expect(201);
    node.put("/cache/kv", None).await.expect(201);
    node.put("/search/films", Some(json!({"fields": ["title"]})))
        .await
        .expect(201);
    // An address nothing listens on: jobs wait for their retries, acknowledged and kept.
    node.put(
        "/queue/jobs",
        Some(json!({"target": "http://127.0.0.1:9/jobs"})),
    )
    .await
    .expect(201);
    node.put("/storage/files", None).await.expect(201);
}

async fn assert_all_there(node: &Process, ack: &Acknowledged, deleted: &[String]) {
    for id in ack.docs.iter().filter(|d| !deleted.contains(d)) {
        node.get(&format!("/data/docs/{id}")).await.expect(200);
    }
    for key in ack.keys.iter().filter(|k| !deleted.contains(k)) {
        node.get(&format!("/cache/kv/{key}")).await.expect(201);
    }
    for key in ack.searched.iter().filter(|k| !deleted.contains(k)) {
        node.get(&format!("/search/films/{key}")).await.expect(201);
    }
    let jobs = node.get("/queue/jobs/_jobs").await.expect(200);
    let listed: Vec<&str> = jobs.body["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    for id in &ack.jobs {
        assert!(listed.contains(&id.as_str()), "job {id} was lost");
    }
    for path in ack.objects.iter().filter(|p| !deleted.contains(p)) {
        let r = node
            .get(&format!("/storage/files/{path}"))
            .await
            .expect(200);
        assert_eq!(r.text.len(), MIB, "{path}");
    }
}

#[tokio::test]
async fn a_full_disk_refuses_writes_with_507_keeps_deletes_working_and_loses_nothing() {
    let Some(fs) = Tmpfs::mount("disk_full", 48) else {
        return;
    };
    let mut node = Process::spawn(
        Path::new(BIN),
        &fs.path().join("data"),
        &["--disk-reserve", &(4 * MIB).to_string()],
    );
    create_instances(&node).await;
    node.get("/_ready").await.expect(200);

    // Write every service until the disk is full.
    let mut ack = Acknowledged::default();
    let mut n = 0;
    loop {
        let answers = write_each(&node, n, &mut ack).await;
        n += 1;
        for (what, r) in &answers {
            assert!(
                matches!(r.status, 200 | 201 | 507),
                "{what} {n}: {}",
                r.text
            );
        }
        if answers.iter().any(|(_, r)| r.status == 507) {
            break;
        }
        assert!(n < 200, "the disk never filled");
    }
    // Now every write is refused, and says why.
    for (what, r) in write_each(&node, n, &mut ack).await {
        assert_disk_full(&r, &what);
    }
    assert_disk_full(&node.put("/data/more", None).await, "a new instance");
    let ready = node.get("/_ready").await.expect(503);
    assert!(
        ready.body["msg"].as_str().unwrap().contains("disk is full"),
        "{}",
        ready.text
    );

    // Deletes keep working: a document, an entry, a search document, a job, an object,
    // a whole instance.
    let mut deleted = Vec::new();
    for (path, gone) in [
        (format!("/data/docs/{}", ack.docs[0]), ack.docs[0].clone()),
        (format!("/cache/kv/{}", ack.keys[0]), ack.keys[0].clone()),
        (
            format!("/search/films/{}", ack.searched[0]),
            ack.searched[0].clone(),
        ),
        (
            format!("/storage/files/{}", ack.objects[0]),
            ack.objects[0].clone(),
        ),
        ("/data/scratch".to_owned(), String::new()),
    ] {
        node.delete(&path).await.expect(200);
        deleted.push(gone);
    }
    let job = ack.jobs.remove(0);
    node.send(node.request(Method::POST, &format!("/queue/jobs/{job}/_cancel")))
        .await
        .expect(200);

    // Freeing space through quintet (objects) makes writes succeed at once, and keep
    // succeeding: nothing (the cache log's run-ahead, say) takes the space back.
    for path in ack.objects.iter().skip(1).take(8) {
        node.delete(&format!("/storage/files/{path}"))
            .await
            .expect(200);
        deleted.push(path.clone());
    }
    for _ in 0..3 {
        for (what, r) in write_each(&node, n, &mut ack).await {
            assert!(
                matches!(r.status, 200 | 201),
                "{what} after freeing space: {}",
                r.text
            );
        }
        n += 1;
    }
    node.get("/_ready").await.expect(200);

    // Nothing acknowledged is lost, through kill -9.
    node.restart();
    assert_all_there(&node, &ack, &deleted).await;
    node.get("/_ready").await.expect(200);
}

#[tokio::test]
async fn a_disk_filled_by_another_program_answers_507_and_recovers_when_freed() {
    let Some(fs) = Tmpfs::mount("disk_filled_from_outside", 40) else {
        return;
    };
    let data = fs.path().join("data");
    let mut node = Process::spawn(Path::new(BIN), &data, &["--disk-reserve", &MIB.to_string()]);
    create_instances(&node).await;
    let mut ack = Acknowledged::default();
    for n in 0..3 {
        write_each(&node, n, &mut ack).await;
    }
    // Another program takes the space, to the last byte: each write answers 507 (from the
    // reserve check, or from the file system itself), never 500.
    let filler = fill(fs.path(), 0);
    for (what, r) in write_each(&node, 100, &mut ack).await {
        assert_disk_full(&r, &what);
    }
    let ready = node.get("/_ready").await.expect(503);
    assert_eq!(ready.header("retry-after"), Some("1"));
    // The program's file goes: quintet writes again at once.
    std::fs::remove_file(&filler).unwrap();
    for (what, r) in write_each(&node, 101, &mut ack).await {
        assert!(matches!(r.status, 200 | 201), "{what}: {}", r.text);
    }
    node.restart();
    assert_all_there(&node, &ack, &[]).await;
    let listed: Value = node.get("/_ready").await.expect(200).body;
    assert_eq!(listed["ok"], true);
}

/// The cache log zero-fills 8 MiB ahead of its end; on a disk short of room it must not,
/// or it takes the space other stores (and deletes) were left: the issue saw data, queue
/// and search writes fail again a few writes after space was freed.
#[tokio::test]
async fn the_cache_log_runs_ahead_only_while_the_reserve_stays_free() {
    let Some(fs) = Tmpfs::mount("cache_log_run_ahead", 48) else {
        return;
    };
    let node = Process::spawn(
        Path::new(BIN),
        &fs.path().join("data"),
        &["--disk-reserve", &(4 * MIB).to_string()],
    );
    node.put("/data/docs", None).await.expect(201);
    node.put("/cache/kv", None).await.expect(201);
    // The first write gives the log its run-ahead while space is plentiful.
    node.post("/cache/kv", json!({"key": "first", "value": {}}))
        .await
        .expect(201);
    // Another program leaves 5 MiB above the reserve: less than a run-ahead.
    let _filler = fill(fs.path(), 9 * MIB as u64);
    // Cache writes past the end of what the log had zero-filled.
    for i in 0..18 {
        node.post(
            "/cache/kv",
            json!({"key": format!("big{i}"), "value": {"pad": "c".repeat(MIB / 2)}}),
        )
        .await
        .expect(201);
    }
    // The log grew by what it wrote, not by another 8 MiB: the other stores still have room.
    for i in 0..10 {
        node.post(
            "/data/docs",
            json!({"_id": format!("d{i}"), "pad": "d".repeat(2000)}),
        )
        .await
        .expect(201);
    }
    node.get("/_ready").await.expect(200);
}
