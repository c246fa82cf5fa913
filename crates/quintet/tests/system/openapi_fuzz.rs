//! Schema-driven fuzzing of the real binary: `schemathesis` (pinned, from PyPI; see
//! `compat/schemathesis/`) reads the server's own `/_openapi.json` and attacks every
//! operation, in both address forms with valid credentials, for a bounded time. It must
//! find no 5xx, no status, content type, header or body that the document does not allow,
//! and the server's peak memory must stay bounded.
//!
//! The budget is `QUINTET_FUZZ_SECONDS` (default 120); `scripts/fuzz` runs it longer.
//! Without python3 the test is skipped with a message, except under CI or with
//! `REQUIRE_ENGINES=1` (which `scripts/test` sets), where it fails.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
};

use quintet_testkit::{Answer, Process, Worker, engines};
use reqwest::Method;
use serde_json::{Value, json};

use crate::BIN;

const ADMIN_TOKEN: &str = "fuzz-admin-token-0123456789abcdef0123456789";
const INSTANCE: &str = "fz";
/// The most the server may hold in memory at its peak during the run.
const MAX_PEAK_RSS_KIB: u64 = 768 * 1024;

fn compat_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../compat/schemathesis")
}

/// The `schemathesis` command, installed; `None` when python3 is missing and not required.
fn install() -> Option<PathBuf> {
    let has_python = std::process::Command::new("python3")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_python {
        assert!(
            std::env::var_os("CI").is_none() && !engines::required(),
            "python3 is required for the schemathesis run (CI or {}=1; scripts/setup installs it)",
            engines::REQUIRE_ENGINES
        );
        eprintln!("skipped: python3 is not installed, so schemathesis cannot run");
        return None;
    }
    let out = std::process::Command::new("bash")
        .arg(compat_dir().join("install"))
        .output()
        .expect("run compat/schemathesis/install");
    assert!(
        out.status.success(),
        "installing schemathesis failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(PathBuf::from(String::from_utf8(out.stdout).unwrap().trim()))
}

/// A field of `/proc/<pid>/status` in KiB (`VmRSS`, `VmHWM`).
fn proc_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

async fn call(p: &Process, method: Method, path: &str, token: &str, body: Option<Value>) -> Value {
    let req = p.request(method.clone(), path).bearer_auth(token);
    let req = match body {
        Some(b) => req.json(&b),
        None => req,
    };
    let r = p.send(req).await;
    assert!(r.status < 300, "{method} {path}: {} {}", r.status, r.text);
    r.body
}

#[tokio::test]
async fn schemathesis_finds_nothing() {
    if install().is_none() {
        return;
    }
    let seconds: u64 = std::env::var("QUINTET_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120);
    let dir = tempfile::tempdir().unwrap();
    let worker = Worker::start(Answer::Status(200, String::new())).await;
    let p = Process::spawn(
        Path::new(BIN),
        &dir.path().join("data"),
        &[
            "--admin-token",
            ADMIN_TOKEN,
            "--queue-private-targets",
            "allow",
        ],
    );

    // An application with a key, and the instance `fz` of every type in both forms.
    call(
        &p,
        Method::POST,
        "/_admin/accounts",
        ADMIN_TOKEN,
        Some(json!({"name": "fuzz", "plan": "business"})),
    )
    .await;
    call(
        &p,
        Method::POST,
        "/_admin/apps",
        ADMIN_TOKEN,
        Some(json!({"name": "shop", "account": "fuzz"})),
    )
    .await;
    let key = call(
        &p,
        Method::POST,
        "/_admin/apps/shop/keys",
        ADMIN_TOKEN,
        None,
    )
    .await;
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3000;
    let token = quintet_core::jwt::sign_hs256(
        key["secret"].as_str().unwrap().as_bytes(),
        &json!({"sub": key["key"], "exp": exp}),
    );
    for prefix in ["", "/shop"] {
        for kind in ["data", "cache", "search", "queue", "storage"] {
            let config = match kind {
                // The fields of the document's examples, so they index.
                "search" => Some(json!({"fields": ["title", "plot"], "storeFields": ["title"]})),
                "queue" => Some(json!({"target": worker.url(), "secret": "fuzz-secret"})),
                _ => None,
            };
            call(
                &p,
                Method::PUT,
                &format!("{prefix}/{kind}/{INSTANCE}"),
                &token,
                config,
            )
            .await;
        }
    }

    let out = tokio::process::Command::new("bash")
        .arg(compat_dir().join("run"))
        .arg(seconds.to_string())
        .env("QUINTET_URL", p.url("").trim_end_matches('/'))
        .env("QUINTET_APP", "shop")
        .env("QUINTET_APP_TOKEN", &token)
        .env("QUINTET_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("QUINTET_INSTANCE", INSTANCE)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run compat/schemathesis/run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let peak = proc_kib(p.pid(), "VmHWM");
    let now = proc_kib(p.pid(), "VmRSS");
    // The server is still serving after the run.
    let health = p.get("/_health").await;
    eprintln!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    eprintln!(
        "schemathesis: {seconds} s budget; server RSS after the run {} MiB, peak {} MiB",
        now / 1024,
        peak / 1024
    );
    assert_eq!(health.status, 200, "the server stopped answering");
    assert!(
        out.status.success(),
        "schemathesis found problems (above); replay with compat/schemathesis/run and --seed"
    );
    assert!(
        peak < MAX_PEAK_RSS_KIB,
        "the server's peak RSS {peak} KiB is over {MAX_PEAK_RSS_KIB} KiB"
    );
}
