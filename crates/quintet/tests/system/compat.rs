//! The black-box compatibility suites of `compat/hyper-connect` (the real JavaScript client
//! driving every service, see its README) against a `quintet serve` child, for tests that
//! check a node they made another way (a restored backup). The in-process driver of the
//! same suites is `crates/server/tests/api/hyper_connect.rs`.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
};

use quintet_testkit::engines;

fn compat_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../compat/hyper-connect")
}

/// The installed client's directory, or `None` when node is missing and not required (CI
/// or `REQUIRE_ENGINES=1` require it).
fn install() -> Option<PathBuf> {
    let has_node = std::process::Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_node {
        assert!(
            std::env::var_os("CI").is_none() && !engines::required(),
            "node is required for the hyper-connect suites (scripts/setup installs it)"
        );
        eprintln!("skipped: node is not installed, so the hyper-connect suites cannot run");
        return None;
    }
    let out = std::process::Command::new("bash")
        .arg(compat_dir().join("install"))
        .output()
        .expect("run compat/hyper-connect/install");
    assert!(
        out.status.success(),
        "installing hyper-connect failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(PathBuf::from(String::from_utf8(out.stdout).unwrap().trim()))
}

/// Run every suite of `compat/hyper-connect/suites` in the domain form against the node at
/// `base` (`--auth none`), asserting that every check passed; skipped (with a message)
/// only where node may be missing.
pub(crate) async fn hyper_connect_suites(base: &str) {
    let Some(modules) = install() else { return };
    let mut suites: Vec<PathBuf> = std::fs::read_dir(compat_dir().join("suites"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "mjs"))
        .collect();
    suites.sort();
    assert!(!suites.is_empty());
    let out = tokio::process::Command::new("node")
        .arg(compat_dir().join("run.mjs"))
        .args(&suites)
        .env("HYPER_CONNECT_DIR", &modules)
        .env("QUINTET_CS", base.trim_end_matches('/'))
        .env("QUINTET_FORM", "domain")
        .output()
        .await
        .expect("node runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "hyper-connect against {base}:\n{text}"
    );
    let closing = text
        .lines()
        .rev()
        .find(|l| l.ends_with(" failed"))
        .unwrap_or_default();
    assert!(
        closing.ends_with(", 0 failed") && !closing.starts_with("0 passed"),
        "{text}"
    );
}
