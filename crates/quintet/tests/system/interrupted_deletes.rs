//! Deletes interrupted by a crash: the registry already forgot the instance (or the
//! application), its contents are still stored. One restart's sweep removes them all, on
//! every engine, though the deleted instance is the newest one (whose id the old sweep
//! spared).
//!
//! The crash is steered, not raced: a debug build started with `QUINTET_FAILPOINT` aborts
//! at the named point (see `quintet_server::failpoint`).

use crate::BIN;
use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use quintet_core::{
    AppName, Instance, InstanceConfig, InstanceId,
    ports::{
        Keep, Lifecycle,
        storage::{BlobStore, ListQuery},
    },
};
use quintet_testkit::{Client, Process, engines};
use reqwest::Method;
use serde_json::json;

const ADMIN_TOKEN: &str = "interrupted-deletes-admin-token-01";
const TYPES: [&str; 5] = ["data", "cache", "search", "queue", "storage"];
/// Large enough to live in a blob file of its own, not in `storage.db`.
const OBJECT_BYTES: usize = 200 * 1024;

fn bin() -> &'static Path {
    Path::new(BIN)
}

/// Make instance `name` of `kind` under `base` (`""` or `/<app>`) and put contents in it.
async fn fill(node: &Client, token: Option<&str>, base: &str, kind: &str, name: &str) {
    let send = |method: Method, path: String| {
        let req = node.request(method, &format!("{base}{path}"));
        match token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    };
    let config = match kind {
        "search" => Some(json!({"fields": ["title"]})),
        "queue" => Some(json!({"target": "http://127.0.0.1:9/jobs"})),
        _ => None,
    };
    let mut req = send(Method::PUT, format!("/{kind}/{name}"));
    if let Some(c) = config {
        req = req.json(&c);
    }
    node.send(req).await.expect(201);
    for i in 0..20 {
        let (path, body) = match kind {
            "data" => (
                format!("/data/{name}"),
                json!({"_id": format!("d{i}"), "i": i}),
            ),
            "cache" => (
                format!("/cache/{name}"),
                json!({"key": format!("k{i}"), "value": {"i": i}}),
            ),
            "search" => (
                format!("/search/{name}"),
                json!({"key": format!("s{i}"), "doc": {"title": format!("title {i}")}}),
            ),
            "queue" => (format!("/queue/{name}"), json!({"i": i})),
            _ => {
                let r = node
                    .send(
                        send(Method::POST, format!("/storage/{name}/o{i}.bin"))
                            .header("content-type", "application/octet-stream")
                            .body(vec![b'x'; OBJECT_BYTES]),
                    )
                    .await;
                assert_eq!(r.status, 200, "{}", r.text);
                continue;
            }
        };
        let r = node.send(send(Method::POST, path).json(&body)).await;
        assert_eq!(r.status, 201, "{kind}: {}", r.text);
    }
}

/// Start a node with `args` that aborts at `point`, run `call` (which the crash cuts
/// short), and wait for the process to end.
async fn crash_during(
    data_dir: &Path,
    args: &[&str],
    point: &str,
    call: impl AsyncFnOnce(&Process),
) {
    let mut node = Process::spawn_with_env(bin(), data_dir, args, &[("QUINTET_FAILPOINT", point)]);
    call(&node).await;
    let status = node.wait_exit(Duration::from_secs(30));
    assert!(!status.success(), "the failpoint {point} was not reached");
    // The thread reading its stderr may not have seen the last line yet.
    let said = format!("failpoint {point} reached");
    quintet_testkit::eventually(&format!("the process says it reached {point}"), || {
        let reached = node.stderr_lines().iter().any(|l| l.contains(&said));
        async move { reached }
    })
    .await;
}

/// One start (its sweep runs before it listens), then a clean stop.
fn restart_once(data_dir: &Path, args: &[&str]) {
    let mut node = Process::spawn(bin(), data_dir, args);
    node.signal_and_wait("TERM", Duration::from_secs(30));
}

// --- the embedded engines -----------------------------------------------------------------

/// What the embedded stores hold, by store: instance tables, instance directories, cache
/// entries.
#[derive(Debug, PartialEq, Eq, Default)]
struct Stored {
    data_tables: Vec<String>,
    queue_tables: Vec<String>,
    storage_tables: Vec<String>,
    search_dirs: Vec<String>,
    storage_dirs: Vec<String>,
    storage_blobs: usize,
    cache_entries: u64,
}

impl Stored {
    fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

fn tables(db: &Path, prefix: &str) -> Vec<String> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND substr(name, 1, 1) = ?1 AND substr(name, 2, 1) BETWEEN '0' AND '9'")
        .unwrap();
    stmt.query_map([prefix], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

fn stored(data_dir: &Path) -> Stored {
    let names = |dir: &Path| -> Vec<String> {
        entries(dir)
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect()
    };
    let cache = quintet_embedded::cache::EmbeddedCache::open(
        &data_dir.join("cache.log"),
        std::sync::Arc::new(quintet_core::SystemClock),
        &quintet_embedded::cache::CacheOptions::default(),
    )
    .unwrap();
    Stored {
        data_tables: tables(&data_dir.join("data.db"), "d"),
        queue_tables: tables(&data_dir.join("queue.db"), "q"),
        storage_tables: tables(&data_dir.join("storage.db"), "o"),
        search_dirs: names(&data_dir.join("search")),
        storage_dirs: names(&data_dir.join("storage")),
        storage_blobs: entries(&data_dir.join("storage"))
            .iter()
            .map(|d| entries(d).len())
            .sum(),
        cache_entries: cache.stats().entries,
    }
}

#[tokio::test]
async fn deletes_of_each_type_killed_midway_leave_nothing_after_one_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    for kind in TYPES {
        let node = Process::spawn(bin(), &data_dir, &[]);
        fill(&node, None, "", kind, "doomed").await;
        drop(node);
        crash_during(&data_dir, &[], "instance-destroyed", async |node| {
            // Cut short by the crash: no answer.
            let _ = node
                .http()
                .delete(node.url(&format!("/{kind}/doomed")))
                .send()
                .await;
        })
        .await;
        let left = stored(&data_dir);
        assert!(!left.is_empty(), "{kind}: the crash left nothing to sweep");
        restart_once(&data_dir, &[]);
        let left = stored(&data_dir);
        assert!(
            left.is_empty(),
            "{kind}: left behind after a restart: {left:?}"
        );
    }
}

#[tokio::test]
async fn an_application_delete_killed_midway_leaves_nothing_after_one_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    // The application's queue targets a loopback port no worker listens on.
    let args = [
        "--admin-token",
        ADMIN_TOKEN,
        "--queue-private-targets",
        "allow",
    ];
    let node = Process::spawn(bin(), &data_dir, &args);
    let (base, token) = new_app(&node).await;
    for kind in TYPES {
        fill(&node, Some(&token), &base, kind, "doomed").await;
    }
    drop(node);
    let app = base.trim_start_matches('/').to_owned();
    crash_during(&data_dir, &args, "app-contents-midway", async |node| {
        // Cut short by the crash: no answer.
        let _ = node
            .http()
            .delete(node.url(&format!("/_admin/apps/{app}")))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await;
    })
    .await;
    assert!(
        !stored(&data_dir).is_empty(),
        "the crash left nothing to sweep"
    );
    restart_once(&data_dir, &args);
    let left = stored(&data_dir);
    assert!(left.is_empty(), "left behind after a restart: {left:?}");
}

/// A new application with a key: its address prefix and a token of the key.
async fn new_app(node: &Client) -> (String, String) {
    let admin = |method: Method, path: &str| node.request(method, path).bearer_auth(ADMIN_TOKEN);
    let app = quintet_testkit::unique("doomed");
    let account = quintet_testkit::unique("acct");
    node.send(
        admin(Method::POST, "/_admin/accounts").json(&json!({"name": account, "plan": "starter"})),
    )
    .await
    .expect(201);
    node.send(admin(Method::POST, "/_admin/apps").json(&json!({"name": app, "account": account})))
        .await
        .expect(201);
    let key = node
        .send(admin(Method::POST, &format!("/_admin/apps/{app}/keys")))
        .await
        .expect(201);
    let key = quintet_testkit::AppKey {
        account,
        app: app.clone(),
        key: key.body["key"].as_str().unwrap().to_owned(),
        secret: key.body["secret"].as_str().unwrap().to_owned(),
        connection_string: String::new(),
    };
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    let token = key.sign(json!({"sub": key.key, "exp": exp}));
    (format!("/{app}"), token)
}

// --- PostgreSQL, Redis and S3 --------------------------------------------------------------

/// A node's settings with every service on an engine, and what is needed to look into
/// the engines afterwards.
struct Engines {
    pg: engines::PgSchema,
    s3: engines::S3Target,
    args: Vec<String>,
}

async fn engines(test: &str) -> Option<Engines> {
    let pg = engines::postgres(test).await?;
    let redis = engines::redis(test)?;
    let s3 = engines::s3(test)?;
    let storage = format!(
        "s3://{}/{}?endpoint={}&region={}&access_key_id={}&secret_access_key={}",
        s3.bucket, s3.prefix, s3.endpoint, s3.region, s3.key, s3.secret
    );
    let args = [
        "--data",
        pg.url(),
        "--queue",
        pg.url(),
        "--search",
        pg.url(),
        "--cache",
        &redis.url,
        "--storage",
        &storage,
        "--admin-token",
        ADMIN_TOKEN,
        "--queue-private-targets",
        "allow",
    ]
    .map(str::to_owned)
    .to_vec();
    Some(Engines { pg, s3, args })
}

/// What the engines hold for the deployment: rows per table, Redis keys and S3 objects of
/// the instances in `ids`; with `markers`, also the S3 instance markers no registry
/// instance owns (counted by sweeping them: only once the node's sweep has run).
async fn engine_contents(
    e: &Engines,
    ids: &[(AppName, InstanceId)],
    markers: bool,
) -> Vec<(String, i64)> {
    let db = quintet_postgres::PgDatabase::connect(
        &quintet_postgres::PgConfig::new(e.pg.url()).unwrap(),
    )
    .await
    .unwrap();
    let client = db.client().await.unwrap();
    let mut found = Vec::new();
    for table in [
        "quintet_data_instances",
        "quintet_data_docs",
        "quintet_data_keys",
        "quintet_search_instances",
        "quintet_search_docs",
        "quintet_search_postings",
        "quintet_search_terms",
        "quintet_queues",
        "quintet_jobs",
    ] {
        let n: i64 = client
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .await
            .unwrap()
            .get(0);
        found.push((table.to_owned(), n));
    }
    let registry: String = client
        .query_one("SELECT id FROM quintet_registry", &[])
        .await
        .map(|r| r.get::<_, String>(0))
        .unwrap();
    let redis_url = std::env::var("QUINTET_TEST_REDIS_URL").unwrap();
    let keys = Command::new("redis-cli")
        .args(["-u", &redis_url, "--scan", "--pattern"])
        .arg(format!("quintet:postgres:{registry}:cache:*"))
        .output()
        .unwrap();
    let keys = String::from_utf8_lossy(&keys.stdout).lines().count();
    found.push(("redis keys".to_owned(), keys as i64));
    let store = quintet_s3::S3BlobStore::open(&quintet_s3::S3Config {
        bucket: e.s3.bucket.clone(),
        prefix: e.s3.prefix.clone(),
        endpoint: Some(e.s3.endpoint.clone()),
        region: e.s3.region.clone(),
        access_key_id: Some(e.s3.key.clone()),
        secret_access_key: Some(e.s3.secret.clone()),
        connect_timeout: quintet_s3::config::DEFAULT_CONNECT_TIMEOUT,
    })
    .await
    .unwrap();
    let mut objects = 0;
    for (app, id) in ids {
        let instance = Instance {
            id: *id,
            app: app.clone(),
            name: "any".parse().unwrap(),
            config: InstanceConfig::Storage,
            created_ms: 0,
        };
        let query = ListQuery {
            prefix: "",
            after: None,
            limit: 1000,
        };
        objects += store.list(&instance, query).await.unwrap().len();
    }
    found.push(("s3 objects".to_owned(), objects as i64));
    if markers {
        // No instance is known any more: every marker left is an orphan.
        let swept = store.sweep(&Keep::only([])).await.unwrap();
        found.push(("s3 instance markers".to_owned(), swept as i64));
    }
    found
}

/// The storage instances of the deployment, by application and id.
async fn storage_ids(e: &Engines) -> Vec<(AppName, InstanceId)> {
    let db = quintet_postgres::PgDatabase::connect(
        &quintet_postgres::PgConfig::new(e.pg.url()).unwrap(),
    )
    .await
    .unwrap();
    let rows = db
        .client()
        .await
        .unwrap()
        .query(
            "SELECT app, id FROM quintet_instances WHERE type = 'storage'",
            &[],
        )
        .await
        .unwrap();
    rows.iter()
        .map(|r| {
            (
                AppName::from_stored(r.get::<_, &str>(0)).unwrap(),
                InstanceId(r.get(1)),
            )
        })
        .collect()
}

fn nothing_left(found: &[(String, i64)]) -> bool {
    found.iter().all(|(_, n)| *n == 0)
}

#[tokio::test]
async fn deletes_killed_midway_on_postgres_redis_and_s3_leave_nothing_after_one_restart() {
    let test = "deletes_killed_midway_on_engines";
    let Some(e) = engines(test).await else {
        return;
    };
    let args: Vec<&str> = e.args.iter().map(String::as_str).collect();
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    for kind in TYPES {
        let node = Process::spawn(bin(), &data_dir, &args);
        fill(&node, None, "", kind, "doomed").await;
        drop(node);
        let ids = storage_ids(&e).await;
        crash_during(&data_dir, &args, "instance-destroyed", async |node| {
            // Cut short by the crash: no answer.
            let _ = node
                .http()
                .delete(node.url(&format!("/{kind}/doomed")))
                .send()
                .await;
        })
        .await;
        let left = engine_contents(&e, &ids, false).await;
        assert!(
            !nothing_left(&left),
            "{kind}: the crash left nothing to sweep"
        );
        restart_once(&data_dir, &args);
        let left = engine_contents(&e, &ids, true).await;
        assert!(nothing_left(&left), "{kind}: left behind: {left:?}");
    }
}

#[tokio::test]
async fn an_application_delete_killed_midway_on_the_engines_leaves_nothing() {
    let test = "app_delete_killed_midway_on_engines";
    let Some(e) = engines(test).await else {
        return;
    };
    let args: Vec<&str> = e.args.iter().map(String::as_str).collect();
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let node = Process::spawn(bin(), &data_dir, &args);
    let (base, token) = new_app(&node).await;
    for kind in TYPES {
        fill(&node, Some(&token), &base, kind, "doomed").await;
    }
    drop(node);
    let ids = storage_ids(&e).await;
    let app = base.trim_start_matches('/').to_owned();
    crash_during(&data_dir, &args, "app-contents-midway", async |node| {
        // Cut short by the crash: no answer.
        let _ = node
            .http()
            .delete(node.url(&format!("/_admin/apps/{app}")))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await;
    })
    .await;
    assert!(!nothing_left(&engine_contents(&e, &ids, false).await));
    restart_once(&data_dir, &args);
    let left = engine_contents(&e, &ids, true).await;
    assert!(nothing_left(&left), "left behind: {left:?}");
}
