//! `quintet export` and `quintet import` against real `quintet serve` processes on the
//! embedded engine: an application copied under another name reads back equal, importing
//! into an existing instance is refused without `--merge`, a damaged archive is refused
//! before anything is sent, and a failed import into a new application leaves nothing.
//! The round trip through PostgreSQL, Redis and S3 is `scale_out::transfer`.

use std::{
    path::Path,
    process::{Command, Output},
};

use quintet_core::archive::{self, Kind};
use quintet_testkit::{Client, Process};
use reqwest::Method;
use serde_json::{Value, json};

use crate::BIN;

/// The admin token of every node these tests start.
pub(crate) const TOKEN: &str = "transfer-admin-token-0123456789ab";

/// `quintet <args> --url <node> --admin-token TOKEN`.
pub(crate) fn cli(node: &Client, args: &[&str]) -> Output {
    let base = node.url("");
    Command::new(BIN)
        .args(args)
        .args(["--url", &base, "--admin-token", TOKEN])
        .output()
        .expect("run quintet")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Run the command line and expect success; its output.
pub(crate) fn cli_ok(node: &Client, args: &[&str]) -> String {
    let out = cli(node, args);
    assert!(
        out.status.success(),
        "quintet {args:?} failed: {}",
        text(&out)
    );
    text(&out)
}

/// Run the command line and expect failure; its output.
fn cli_fails(node: &Client, args: &[&str]) -> String {
    let out = cli(node, args);
    assert!(
        !out.status.success(),
        "quintet {args:?} succeeded: {}",
        text(&out)
    );
    text(&out)
}

async fn admin(node: &Client, method: Method, path: &str, body: Option<Value>) -> Value {
    let mut req = node.request(method, path).bearer_auth(TOKEN);
    if let Some(body) = body {
        req = req.json(&body);
    }
    let r = node.send(req).await;
    assert!(r.status < 300, "{path}: {} {}", r.status, r.text);
    r.body
}

/// A node on the embedded engine.
pub(crate) fn embedded(dir: &Path) -> Process {
    Process::spawn(
        Path::new(BIN),
        dir,
        &["--admin-token", TOKEN, "--queue-private-targets", "allow"],
    )
}

/// Requests to an instance path, with the application's token when there is one.
pub(crate) struct Scope<'a> {
    pub node: &'a Client,
    /// `""` (domain form) or `/<app>`.
    pub prefix: String,
    pub token: Option<String>,
}

impl Scope<'_> {
    fn req(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let req = self.node.request(method, &format!("{}{path}", self.prefix));
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Value {
        let mut req = self.req(method, path);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let r = self.node.send(req).await;
        assert!(r.status < 300, "{path}: {} {}", r.status, r.text);
        r.body
    }
}

/// An application with an access key on `node`; its scope.
pub(crate) async fn new_app<'a>(node: &'a Client, account: &str, app: &str) -> Scope<'a> {
    let accounts = admin(node, Method::GET, "/_admin/accounts", None).await;
    let exists = accounts["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a["name"] == account);
    if !exists {
        admin(
            node,
            Method::POST,
            "/_admin/accounts",
            Some(json!({"name": account, "plan": "business"})),
        )
        .await;
    }
    admin(
        node,
        Method::POST,
        "/_admin/apps",
        Some(json!({"name": app, "account": account})),
    )
    .await;
    key_for(node, account, app).await
}

/// A new access key of `app` on `node`; its scope.
pub(crate) async fn key_for<'a>(node: &'a Client, account: &str, app: &str) -> Scope<'a> {
    let key = admin(
        node,
        Method::POST,
        &format!("/_admin/apps/{app}/keys"),
        None,
    )
    .await;
    let key = quintet_testkit::AppKey {
        account: account.to_owned(),
        app: app.to_owned(),
        key: key["key"].as_str().unwrap().to_owned(),
        secret: key["secret"].as_str().unwrap().to_owned(),
        connection_string: String::new(),
    };
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    let token = key.sign(json!({"sub": key.key, "exp": exp}));
    Scope {
        node,
        prefix: format!("/{app}"),
        token: Some(token),
    }
}

/// An instance of each type with contents: documents and an index, entries with and
/// without a time to live, search documents, jobs a closed port never takes, failed (ERROR)
/// jobs in a second queue, and objects (one larger than an archive's chunk).
pub(crate) async fn fill(s: &Scope<'_>, docs: usize) {
    s.call(Method::PUT, "/data/movies", None).await;
    s.call(
        Method::POST,
        "/data/movies/_index",
        Some(json!({"fields": ["year"], "name": "by-year"})),
    )
    .await;
    let batch: Vec<Value> = (0..docs)
        .map(|i| json!({"_id": format!("m{i:05}"), "year": 1950 + (i % 70), "t": format!("title {i}"), "tags": [i, {"x": null}]}))
        .collect();
    for chunk in batch.chunks(5_000) {
        s.call(Method::POST, "/data/movies/_bulk", Some(json!(chunk)))
            .await;
    }
    s.call(Method::PUT, "/cache/sessions", None).await;
    for (key, ttl) in [
        ("forever", None),
        ("hour", Some("1h")),
        ("tenmin", Some("10m")),
    ] {
        let mut body = json!({"key": key, "value": {"who": key, "n": [1, 2.5]}});
        if let Some(ttl) = ttl {
            body["ttl"] = json!(ttl);
        }
        s.call(Method::POST, "/cache/sessions", Some(body)).await;
    }
    s.call(
        Method::PUT,
        "/search/films",
        Some(json!({"fields": ["title", "plot"], "storeFields": ["title"]})),
    )
    .await;
    let films = json!([
        {"_id": "alien", "title": "Alien", "plot": "a crew meets a creature in space"},
        {"_id": "aliens", "title": "Aliens", "plot": "marines return to the planet"},
        {"_id": "heat", "title": "Heat", "plot": "a thief and a detective in los angeles"},
        {"_id": "up", "title": "Up", "plot": "a house flies away with balloons"},
    ]);
    s.call(Method::POST, "/search/films/_bulk", Some(films))
        .await;
    s.call(
        Method::PUT,
        "/queue/mail",
        Some(json!({"target": "http://127.0.0.1:9/closed", "retries": 25})),
    )
    .await;
    for i in 0..5 {
        s.call(
            Method::POST,
            "/queue/mail",
            Some(json!({"to": format!("u{i}@example.com")})),
        )
        .await;
    }
    // A queue whose jobs fail at once (no retries against a closed port): ERROR jobs,
    // which an export carries with their attempts and errors.
    s.call(
        Method::PUT,
        "/queue/bounced",
        Some(json!({"target": "http://127.0.0.1:9/closed", "retries": 0})),
    )
    .await;
    for i in 0..3 {
        s.call(Method::POST, "/queue/bounced", Some(json!({"bounce": i})))
            .await;
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while failed_jobs(s).await.as_array().map_or(0, Vec::len) < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "the bounced jobs did not fail"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    s.call(Method::PUT, "/storage/media", None).await;
    let big: Vec<u8> = (0..2_600_000u32).map(|i| (i % 251) as u8).collect();
    for (path, ctype, body) in [
        ("notes/a.txt", "text/plain", b"hello\n".to_vec()),
        ("big/blob.bin", "application/octet-stream", big),
        ("empty", "application/json", Vec::new()),
    ] {
        let req = s
            .req(Method::POST, &format!("/storage/media/{path}"))
            .header("content-type", ctype)
            .body(body);
        let r = s.node.send(req).await;
        assert!(r.status < 300, "{path}: {} {}", r.status, r.text);
    }
}

/// The ERROR jobs of the queue `bounced` as a client sees them, without their ids (an
/// import gives jobs new ids) and update times.
async fn failed_jobs(s: &Scope<'_>) -> Value {
    let jobs = s
        .call(Method::GET, "/queue/bounced/_jobs?status=ERROR", None)
        .await["jobs"]
        .clone();
    jobs.as_array()
        .unwrap()
        .iter()
        .map(|j| {
            json!({"status": j["status"], "job": j["job"], "attempts": j["attempts"],
                   "error": j["error"], "created": j["created"]})
        })
        .collect()
}

/// What a client sees of the instances [`fill`] made, to compare two nodes.
pub(crate) async fn snapshot(s: &Scope<'_>) -> Value {
    let docs = s.call(Method::GET, "/data/movies", None).await["docs"].clone();
    let indexes = s.call(Method::GET, "/data/movies/_index", None).await["indexes"].clone();
    let by_year = s
        .call(
            Method::POST,
            "/data/movies/_query",
            Some(json!({"selector": {"year": {"$gt": 2010}}, "sort": [{"year": "asc"}], "limit": 50})),
        )
        .await["docs"]
        .clone();
    let entries = s.call(Method::GET, "/cache/sessions/_query", None).await["docs"].clone();
    let mut answers = Vec::new();
    for q in ["alien", "alein", "detective los", "balloon"] {
        let r = s
            .call(
                Method::POST,
                "/search/films/_query",
                Some(json!({"query": q})),
            )
            .await;
        let ids: Vec<Value> = r["matches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| json!([m["id"], m["title"]]))
            .collect();
        answers.push(json!({"query": q, "ids": ids}));
    }
    let jobs = s.call(Method::GET, "/queue/mail?status=READY", None).await["jobs"].clone();
    let failed = failed_jobs(s).await;
    let mut objects = Vec::new();
    for path in ["notes/a.txt", "big/blob.bin", "empty"] {
        let res = s
            .node
            .http()
            .execute(
                s.req(Method::GET, &format!("/storage/media/{path}"))
                    .build()
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "{path}");
        let etag = res.headers()["etag"].to_str().unwrap().to_owned();
        let ctype = res.headers()["content-type"].to_str().unwrap().to_owned();
        let bytes = res.bytes().await.unwrap();
        let sha = sha256_hex(&bytes);
        objects.push(
            json!({"path": path, "etag": etag, "type": ctype, "sha256": sha, "len": bytes.len()}),
        );
    }
    json!({
        "docs": docs, "indexes": indexes, "byYear": by_year, "entries": entries,
        "search": answers, "jobs": jobs, "failed": failed, "objects": objects,
    })
}

fn sha256_hex(bytes: &[u8]) -> String {
    let mut d = archive::Digest::new();
    d.item(&[bytes]);
    d.tally().digest
}

/// Each instance's tally, by `app/type/name`.
pub(crate) type Tallies = Vec<(String, archive::Tally)>;
/// Each cache entry's remaining time to live, by key.
pub(crate) type Ttls = Vec<(String, Option<i64>)>;

/// Each instance's tally and each cache entry's remaining time in an archive.
pub(crate) fn contents(file: &Path) -> (Tallies, Ttls) {
    let bytes = std::fs::read(file).unwrap();
    let mut tallies = Vec::new();
    let mut ttls = Vec::new();
    let mut current = String::new();
    for r in archive::decode_all(&bytes).unwrap() {
        match r.kind {
            Kind::Instance => {
                let i: archive::InstanceRecord = r.parse().unwrap();
                current = format!("{}/{}/{}", i.app, i.kind, i.name);
            }
            Kind::InstanceEnd => tallies.push((current.clone(), r.parse().unwrap())),
            Kind::Cache => {
                let c: archive::CacheRecord = r.parse().unwrap();
                ttls.push((c.key, c.ttl_ms));
            }
            _ => {}
        }
    }
    (tallies, ttls)
}

/// An application copied under another name on the same server reads back equal, and the
/// import reports every instance equal.
#[tokio::test]
async fn an_application_copied_under_another_name_reads_back_equal() {
    let dir = tempfile::tempdir().unwrap();
    let node = embedded(&dir.path().join("node"));
    let shop = new_app(&node, "acme", "shop").await;
    fill(&shop, 500).await;
    let file = dir.path().join("shop.qta");
    let f = file.to_str().unwrap();
    cli_ok(&node, &["export", "--app", "shop", "--to", f]);
    let out = cli_ok(&node, &["import", f, "--app", "shop-copy"]);
    assert_eq!(out.matches(" equal").count(), 6, "{out}");
    let copy = key_for(&node, "acme", "shop-copy").await;
    assert_eq!(snapshot(&copy).await, snapshot(&shop).await);
    // An export refuses to overwrite a file.
    let again = cli_fails(&node, &["export", "--app", "shop", "--to", f]);
    assert!(again.contains("exists"), "{again}");
}

/// Importing into an existing application is refused without --merge and changes nothing;
/// with --merge the archive's contents are added.
#[tokio::test]
async fn import_into_an_existing_instance_needs_merge() {
    let dir = tempfile::tempdir().unwrap();
    let node = embedded(&dir.path().join("node"));
    let shop = new_app(&node, "acme", "shop").await;
    fill(&shop, 50).await;
    let file = dir.path().join("shop.qta");
    let f = file.to_str().unwrap();
    cli_ok(&node, &["export", "--app", "shop", "--to", f]);
    shop.call(Method::DELETE, "/data/movies/m00001", None).await;
    let before = snapshot(&shop).await;
    let refused = cli_fails(&node, &["import", f]);
    assert!(refused.contains("application \"shop\" exists"), "{refused}");
    assert!(refused.contains("HTTP 409"), "{refused}");
    assert_eq!(
        snapshot(&shop).await,
        before,
        "a refused import changed nothing"
    );
    cli_ok(&node, &["import", f, "--merge"]);
    let doc = shop.call(Method::GET, "/data/movies/m00001", None).await;
    assert_eq!(
        doc["doc"]["_id"], "m00001",
        "merge restored the removed document"
    );
}

/// A damaged archive is refused by the command line before anything is sent, and by the
/// server when sent directly; a failed import into a new application leaves no trace of
/// it, its instances or their contents.
#[tokio::test]
async fn damaged_archives_are_refused_and_a_failed_import_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let node = embedded(&dir.path().join("node"));
    let shop = new_app(&node, "acme", "shop").await;
    fill(&shop, 50).await;
    let file = dir.path().join("shop.qta");
    cli_ok(
        &node,
        &["export", "--app", "shop", "--to", file.to_str().unwrap()],
    );
    let whole = std::fs::read(&file).unwrap();

    // Cut in the storage section, after the other instances; flipped in a document.
    let cut = whole.len() - 1_000_000;
    let mut flipped = whole.clone();
    let at = whole.windows(6).position(|w| w == b"m00020").unwrap();
    flipped[at] ^= 0x20;
    let mut newer = whole.clone();
    newer[16] = b'9';
    for (name, bytes, says) in [
        ("cut", &whole[..cut], "truncated"),
        ("flipped", &flipped[..], "fails its checksum"),
        ("newer", &newer[..], "format version 9"),
    ] {
        let damaged = dir.path().join(format!("{name}.qta"));
        std::fs::write(&damaged, bytes).unwrap();
        let out = cli_fails(
            &node,
            &["import", damaged.to_str().unwrap(), "--app", "copy"],
        );
        assert!(out.contains(says), "{name}: {out}");
        // Sent directly, past the command line's check: the server applies what precedes
        // the damage, then undoes it.
        let r = node
            .send(
                node.request(Method::POST, "/_admin/import?app=copy")
                    .bearer_auth(TOKEN)
                    .body(bytes.to_vec()),
            )
            .await;
        assert_eq!(r.status, 422, "{name}: {}", r.text);
        assert!(
            r.body["msg"].as_str().unwrap().contains(says),
            "{name}: {}",
            r.text
        );
        let apps = admin(&node, Method::GET, "/_admin/apps", None).await;
        let names: Vec<&str> = apps["apps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["name"].as_str().unwrap())
            .collect();
        assert!(!names.contains(&"copy"), "{name}: {names:?}");
    }
    // The name is free and nothing of the failed imports remains: a whole import works.
    let out = cli_ok(&node, &["import", file.to_str().unwrap(), "--app", "copy"]);
    assert_eq!(out.matches(" equal").count(), 6, "{out}");
}

/// With no server running on the data directory, export and import open it themselves.
#[tokio::test]
async fn export_and_import_open_a_stopped_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let first_dir = dir.path().join("first");
    let mut first = embedded(&first_dir);
    let shop = new_app(&first, "acme", "shop").await;
    fill(&shop, 200).await;
    let before = snapshot(&shop).await;
    first.signal_and_wait("TERM", std::time::Duration::from_secs(30));

    let file = dir.path().join("all.qta");
    let second_dir = dir.path().join("second");
    let run = |args: &[&std::ffi::OsStr]| {
        let out = Command::new(BIN)
            .args(args)
            .env("QUINTET_MASTER_KEY", quintet_testkit::test_master_key())
            .env("QUINTET_QUEUE_PRIVATE_TARGETS", "allow")
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", text(&out));
        text(&out)
    };
    run(&[
        "export".as_ref(),
        "--to".as_ref(),
        file.as_os_str(),
        "--data-dir".as_ref(),
        first_dir.as_os_str(),
    ]);
    let out = run(&[
        "import".as_ref(),
        file.as_os_str(),
        "--data-dir".as_ref(),
        second_dir.as_os_str(),
    ]);
    assert_eq!(out.matches(" equal").count(), 6, "{out}");
    let second = embedded(&second_dir);
    let copy = key_for(&second, "acme", "shop").await;
    assert_eq!(snapshot(&copy).await, before);
}
