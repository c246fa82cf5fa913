//! Compatibility with the real client: `hyper-connect` 0.12.0 from npm drives quintet in
//! the domain form (`http://host/<instance>`, without and with `--auth jwt`) and in the
//! application form (`cloud://key:secret@host/<app>` over HTTPS with a test certificate).
//!
//! The suites are JavaScript files in `compat/hyper-connect/suites/`, one per area; every
//! file there runs in every form, so a new service's calls are covered by adding its file.
//! `compat/hyper-connect/install` puts the client in a cache outside the repository.
//! Without node the tests are skipped with a message, except under CI or with
//! `REQUIRE_ENGINES=1` (which `scripts/test` sets), where they fail.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
};

use quintet_testkit::{AppKey, AuthMode, TestServer, engines};
use reqwest::Method;

fn compat_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../compat/hyper-connect")
}

/// The installed client's directory, or `None` when node is missing and not required.
fn install() -> Option<PathBuf> {
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
fn suites() -> Vec<PathBuf> {
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
async fn run(
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

fn denied() -> Vec<PathBuf> {
    vec![compat_dir().join("checks/denied.mjs")]
}

#[tokio::test]
async fn domain_form_without_auth() {
    let Some(modules) = install() else { return };
    let s = TestServer::start().await;
    run(&modules, &s.url(""), "domain", &suites(), &[]).await;
}

#[tokio::test]
async fn domain_form_with_jwt_auth() {
    let Some(modules) = install() else { return };
    // hyper-connect signs with the URL's password as written: URL-safe characters only.
    let secret = "domain-form-secret-for-hyper-connect-0123";
    let s = TestServer::builder()
        .args(|a| {
            a.auth = Some(AuthMode::Jwt);
            a.jwt_secret = Some(secret.to_owned());
            a.jwt_sub = Some("hc-client".to_owned());
        })
        .start()
        .await;
    let with = |user: &str, password: &str| {
        s.url("")
            .replacen("://", &format!("://{user}:{password}@"), 1)
    };
    run(
        &modules,
        &with("hc-client", secret),
        "domain",
        &suites(),
        &[],
    )
    .await;
    let env = [("QUINTET_EXPECT_STATUS", "401")];
    run(&modules, &s.url(""), "domain", &denied(), &env).await;
    run(
        &modules,
        &with("hc-client", "wrong-secret"),
        "domain",
        &denied(),
        &env,
    )
    .await;
    let env = [("QUINTET_EXPECT_STATUS", "403")];
    run(
        &modules,
        &with("someone-else", secret),
        "domain",
        &denied(),
        &env,
    )
    .await;
}

#[tokio::test]
async fn application_form_over_tls() {
    let Some(modules) = install() else { return };
    // The suite's queue worker runs on loopback, which tenants' queues may not reach by
    // default (--queue-private-targets).
    let s = TestServer::builder()
        .tls()
        .args(|a| a.queue_private_targets = Some(quintet_testkit::PrivateTargetsArg::Allow))
        .start()
        .await;
    let ca = s.certs().unwrap().ca.to_str().unwrap().to_owned();
    let node_env = [("NODE_EXTRA_CA_CERTS", ca.as_str())];
    let k: AppKey = s.new_app().await;
    // The connection string exactly as the admin API hands it out.
    run(&modules, &k.connection_string, "app", &suites(), &node_env).await;

    // Another application's key: 403.
    let other = s.new_app().await;
    let foreign = other
        .connection_string
        .replace(&format!("/{}", other.app), &format!("/{}", k.app));
    let env = [node_env[0], ("QUINTET_EXPECT_STATUS", "403")];
    run(&modules, &foreign, "app", &denied(), &env).await;

    // A revoked key: 401 from then on.
    s.admin(
        Method::DELETE,
        &format!("/_admin/apps/{}/keys/{}", k.app, k.key),
        None,
    )
    .await
    .expect(200);
    let env = [node_env[0], ("QUINTET_EXPECT_STATUS", "401")];
    run(&modules, &k.connection_string, "app", &denied(), &env).await;
}
