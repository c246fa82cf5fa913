//! The driver of the black-box compatibility suites of `compat/hyper-connect` (the real
//! JavaScript client, see its README): install the client, list the suites, run scripts
//! against a server and check that every check passed. Used by the server's in-process
//! tests (`crates/server/tests/api/hyper_connect.rs`) and by the system tests that check a
//! node made another way (a restored backup).

use std::{
    path::{Path, PathBuf},
    process::Stdio,
};

use crate::engines;

/// The directory `compat/hyper-connect` of the repository.
pub fn compat_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../compat/hyper-connect")
}

/// The installed client's directory, or `None` when node is missing and not required.
pub fn install() -> Option<PathBuf> {
    let has_node = std::process::Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_node {
        assert!(
            !node_required(),
            "node is required for the hyper-connect suite (CI or {}=1; scripts/setup \
             installs it)",
            engines::REQUIRE_ENGINES
        );
        eprintln!("skipped: node is not installed, so hyper-connect cannot run");
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

/// Whether a missing node must fail the suite rather than skip it: under CI, and
/// whenever the engines are required (`scripts/test`, hence `.ci/run`), so the
/// compatibility suite can never pass by being skipped.
fn node_required() -> bool {
    std::env::var_os("CI").is_some() || engines::required()
}

/// Every suite file, in name order.
pub fn suites() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(compat_dir().join("suites"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "mjs"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    files
}

/// Run `scripts` with the client; returns the output, asserting that every check passed.
pub async fn run(
    modules: &Path,
    cs: &str,
    form: &str,
    scripts: &[PathBuf],
    env: &[(&str, &str)],
) -> String {
    // Async: the server under test runs on this very runtime.
    let out = tokio::process::Command::new("node")
        .arg(compat_dir().join("run.mjs"))
        .args(scripts)
        .env("HYPER_CONNECT_DIR", modules)
        .env("QUINTET_CS", cs)
        .env("QUINTET_FORM", form)
        .envs(env.iter().copied())
        .output()
        .await
        .expect("node runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("hyper-connect ({form}):\n{text}");
    assert!(
        out.status.success(),
        "hyper-connect ({form}, {cs}):\n{text}"
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
    text
}
