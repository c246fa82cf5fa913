//! The real binary: its command line, configuration precedence, signals and crashes.

use std::{path::Path, process::Command, time::Duration};

use quintet_testkit::{Process, engines};
use reqwest::Method;
use serde_json::json;

use crate::BIN;

fn bin() -> &'static Path {
    Path::new(BIN)
}

#[test]
fn serve_help_documents_every_setting() {
    let out = Command::new(BIN)
        .args(["serve", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for (flag, env) in [
        ("--config", "QUINTET_CONFIG"),
        ("--listen", "QUINTET_LISTEN"),
        ("--data-dir", "QUINTET_DATA_DIR"),
        ("--registry", "QUINTET_REGISTRY"),
        ("--cache", "QUINTET_CACHE"),
        ("--queue ", "QUINTET_QUEUE]"),
        ("--storage", "QUINTET_STORAGE"),
        ("--search", "QUINTET_SEARCH"),
        ("--data ", "QUINTET_DATA]"),
        ("--max-body-bytes", "QUINTET_MAX_BODY_BYTES"),
        ("--max-json-depth", "QUINTET_MAX_JSON_DEPTH"),
        ("--shutdown-timeout", "QUINTET_SHUTDOWN_TIMEOUT"),
        ("--header-timeout", "QUINTET_HEADER_TIMEOUT"),
        ("--public-url", "QUINTET_PUBLIC_URL"),
        ("--auth", "QUINTET_AUTH"),
        ("--jwt-secret", "QUINTET_JWT_SECRET"),
        ("--jwt-sub", "QUINTET_JWT_SUB"),
        ("--insecure-no-auth", "QUINTET_INSECURE_NO_AUTH"),
        ("--admin-token", "QUINTET_ADMIN_TOKEN"),
        ("--tls-cert", "QUINTET_TLS_CERT"),
        ("--tls-key", "QUINTET_TLS_KEY"),
        ("--cache-max-bytes", "QUINTET_CACHE_MAX_BYTES"),
        ("--cache-memory-only", "QUINTET_CACHE_MEMORY_ONLY"),
        ("--queue-deny-private", "QUINTET_QUEUE_DENY_PRIVATE"),
        ("--queue-backoff-ms", "QUINTET_QUEUE_BACKOFF_MS"),
        ("--log", "QUINTET_LOG"),
        ("--log-format", "QUINTET_LOG_FORMAT"),
        ("--body-timeout", "QUINTET_BODY_TIMEOUT"),
        ("--body-min-rate", "QUINTET_BODY_MIN_RATE"),
        ("--max-connections ", "QUINTET_MAX_CONNECTIONS="),
        (
            "--max-connections-per-client",
            "QUINTET_MAX_CONNECTIONS_PER_CLIENT",
        ),
        ("--disk-reserve", "QUINTET_DISK_RESERVE"),
        ("--engine-connect-timeout", "QUINTET_ENGINE_CONNECT_TIMEOUT"),
    ] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
        assert!(help.contains(env), "{env} missing from:\n{help}");
    }
    assert!(
        help.contains("127.0.0.1:6363") && help.contains("quintet-data"),
        "{help}"
    );
}

/// A body of `{"fields":["t"],"x":<depth levels of []>}` (depth + 1 levels in all).
fn nested(depth: usize) -> String {
    format!(
        r#"{{"fields":["t"],"x":{}{}}}"#,
        "[".repeat(depth),
        "]".repeat(depth)
    )
}

#[tokio::test]
async fn flags_beat_environment_which_beats_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("quintet.toml");
    std::fs::write(&file, "max_json_depth = 2\n").unwrap();
    let file = file.to_str().unwrap();

    // File alone: depth 3 is refused.
    let p = Process::spawn(bin(), &dir.path().join("d1"), &["--config", file]);
    p.send(
        p.request(Method::PUT, "/search/a")
            .header("content-type", "application/json")
            .body(nested(2)),
    )
    .await
    .expect(422);
    drop(p);

    // Environment over file: depth 3 passes, depth 5 does not.
    let env = [("QUINTET_MAX_JSON_DEPTH", "4")];
    let p = Process::spawn_with_env(bin(), &dir.path().join("d2"), &["--config", file], &env);
    p.send(
        p.request(Method::PUT, "/search/a")
            .header("content-type", "application/json")
            .body(nested(2)),
    )
    .await
    .expect(201);
    p.send(
        p.request(Method::PUT, "/search/b")
            .header("content-type", "application/json")
            .body(nested(4)),
    )
    .await
    .expect(422);
    drop(p);

    // Flag over environment.
    let args = ["--config", file, "--max-json-depth", "2"];
    let p = Process::spawn_with_env(bin(), &dir.path().join("d3"), &args, &env);
    p.send(
        p.request(Method::PUT, "/search/a")
            .header("content-type", "application/json")
            .body(nested(2)),
    )
    .await
    .expect(422);
}

#[tokio::test]
async fn instances_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = Process::spawn(bin(), dir.path(), &[]);
    p.create("data", "d", None).await;
    p.create("cache", "c", None).await;
    p.create("search", "s", Some(json!({"fields": ["title"]})))
        .await;
    p.create("queue", "q", Some(json!({"target": "http://127.0.0.1:9/"})))
        .await;
    p.create("storage", "o", None).await;
    p.kill9();
    p.restart();
    for path in ["/data/d", "/cache/c", "/storage/o"] {
        p.put(path, None).await.expect(409);
    }
    p.put("/search/s", Some(json!({"fields": ["title"]})))
        .await
        .expect(409);
    p.put("/queue/q", Some(json!({"target": "http://127.0.0.1:9/"})))
        .await
        .expect(409);
}

#[tokio::test]
async fn sigterm_and_sigint_shut_down_cleanly() {
    for signal in ["TERM", "INT"] {
        let dir = tempfile::tempdir().unwrap();
        let mut p = Process::spawn(bin(), dir.path(), &[]);
        p.create("data", "d", None).await;
        let status = p.signal_and_wait(signal, Duration::from_secs(30));
        assert!(status.success(), "SIG{signal}: {status:?}");
        // Closed cleanly: the next start opens the same directory and sees the instance.
        p.restart();
        p.put("/data/d", None).await.expect(409);
    }
}

#[test]
fn a_second_server_on_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _first = Process::spawn(bin(), dir.path(), &[]);
    let out = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("in use by another quintet server"), "{err}");
}

#[test]
fn a_bad_config_file_fails_with_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, "listen = 5\n").unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.toml"), "{err}");
}

#[tokio::test]
async fn a_data_directory_stays_with_its_registry() {
    let Some(pg) = engines::postgres("a_data_directory_stays_with_its_registry").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut p = Process::spawn(bin(), &data, &["--registry", pg.url()]);
    p.put("/data/movies", None).await.expect(201);
    assert!(p.signal_and_wait("TERM", Duration::from_secs(10)).success());

    // Started without the registry it was used with, the node refuses before sweeping.
    let out = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .env_remove("QUINTET_REGISTRY")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("belongs to registry \"postgres:")
            && err.contains("uses registry \"embedded\""),
        "{err}"
    );

    // With it (here from the environment), the instance and its contents are still there.
    let p = Process::spawn_with_env(bin(), &data, &[], &[("QUINTET_REGISTRY", pg.url())]);
    p.put("/data/movies", None).await.expect(409);
    p.delete("/data/movies").await.expect(200);
}

/// The log lines of `p` so far that `quintet::http` wrote, each parsed; every log line
/// must be JSON.
fn request_log(p: &Process) -> Vec<serde_json::Value> {
    p.stderr_lines()
        .iter()
        .map(|line| {
            serde_json::from_str::<serde_json::Value>(line)
                .unwrap_or_else(|e| panic!("log line is not JSON ({e}): {line}"))
        })
        .filter(|v| v["target"] == "quintet::http")
        .collect()
}

/// Foundation: request ids and one structured line per request, here as JSON.
#[tokio::test]
async fn each_request_is_logged_once_as_json_with_its_id() {
    let dir = tempfile::tempdir().unwrap();
    let p = Process::spawn(
        bin(),
        dir.path(),
        &["--log", "info", "--log-format", "json"],
    );
    // (method, path as sent, path as logged, expected status, request id sent)
    let requests = [
        (Method::GET, "/_health", "/_health", 200, Some("probe-42")),
        (Method::PUT, "/cache/logged", "/cache/logged", 201, None),
        (
            Method::GET,
            "/cache/logged/_query?pattern=secret*",
            "/cache/logged/_query",
            200,
            None,
        ),
        (Method::POST, "/cache/logged", "/cache/logged", 400, None),
        (Method::GET, "/no/such/route", "/no/such/route", 404, None),
        (Method::GET, "/_health", "/_health", 200, Some("last")),
    ];
    let mut sent = Vec::new();
    for (method, path, logged, status, id) in requests {
        let mut req = p.request(method.clone(), path);
        if method == Method::POST {
            req = req.header("content-type", "application/json").body("{");
        }
        if let Some(id) = id {
            req = req.header("x-request-id", id);
        }
        let r = p.send(req).await.expect(status);
        let answered = r.header("x-request-id").expect("x-request-id").to_owned();
        if let Some(id) = id {
            assert_eq!(answered, id, "a request's own id is kept");
        }
        sent.push((method, logged, status, answered));
    }
    // The line is written before the answer is sent; wait for the reader to see the last.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !request_log(&p)
        .iter()
        .any(|l| l["fields"]["request_id"] == "last")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no log line for the last request:\n{}",
            p.stderr_lines().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let log = request_log(&p);
    assert_eq!(log.len(), sent.len(), "one line per request:\n{log:#?}");
    for (method, path, status, id) in &sent {
        let lines: Vec<_> = log
            .iter()
            .filter(|l| l["fields"]["request_id"] == id.as_str())
            .collect();
        assert_eq!(lines.len(), 1, "request {id}: {log:#?}");
        let fields = &lines[0]["fields"];
        assert_eq!(fields["method"], method.as_str(), "{fields}");
        assert_eq!(fields["path"], *path, "{fields}");
        assert_eq!(fields["status"], *status, "{fields}");
        assert!(
            fields["ms"].as_f64().is_some_and(|ms| ms >= 0.0),
            "a duration in ms: {fields}"
        );
        // Rounded to the microsecond: `0.043`, not `0.043443999999999997`.
        let ms = fields["ms"].to_string();
        let decimals = ms.split_once('.').map_or(0, |(_, d)| d.len());
        assert!(decimals <= 3, "{ms}");
    }
    // Every line of both streams is JSON, the listening line included.
    for line in p.stdout_lines().iter().chain(&p.stderr_lines()) {
        let parsed: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(parsed.is_object(), "{line}");
    }
    assert!(
        p.stdout_lines()
            .iter()
            .any(|l| l.contains("\"listening\":\"http://127.0.0.1:")),
        "{:?}",
        p.stdout_lines()
    );
    // Generated ids differ from each other.
    let mut ids: Vec<&str> = sent.iter().map(|s| s.3.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), sent.len(), "{ids:?}");
}

/// The resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Issue 17's reproduction: two concurrent queries of a 252 KB `$or` of 3,000 `\w{20}…`
/// patterns took an empty server from 27 MB to 7 GB. Now: 422 naming the budget, and the
/// process stays small.
#[tokio::test]
async fn a_query_of_thousands_of_regexes_is_refused_and_takes_no_memory() {
    let dir = tempfile::tempdir().unwrap();
    let p = Process::spawn(bin(), dir.path(), &[]);
    p.create("data", "d", None).await;
    let patterns: Vec<serde_json::Value> = (0..3000)
        .map(|i| json!({"t": {"$regex": format!("\\w{{8}}{i:04}\\w{{8}}zz")}}))
        .collect();
    let query = json!({"selector": {"$or": patterns}});
    assert!(query.to_string().len() > 100_000);
    let send = || p.send(p.request(Method::POST, "/data/d/_query").json(&query));
    let (a, b) = tokio::join!(send(), send());
    for r in [a, b] {
        let r = r.expect(422);
        assert!(
            r.text.contains("all the $regexes of one selector"),
            "{}",
            r.text
        );
    }
    let rss = rss_kib(p.pid());
    assert!(
        rss < 200 * 1024,
        "the server holds {rss} KiB after the queries"
    );
}
