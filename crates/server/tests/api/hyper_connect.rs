//! Compatibility with the real client: `hyper-connect` 0.12.0 from npm drives quintet in
//! the domain form (`http://host/<instance>`, without and with `--auth jwt`) and in the
//! application form (`cloud://key:secret@host/<app>` over HTTPS with a test certificate).
//!
//! The suites are JavaScript files in `compat/hyper-connect/suites/`, one per area; every
//! file there runs in every form, so a new service's calls are covered by adding its file.
//! `compat/hyper-connect/install` puts the client in a cache outside the repository.
//! Without node the tests are skipped with a message, except under CI or with
//! `REQUIRE_ENGINES=1` (which `scripts/test` sets), where they fail.

use std::path::PathBuf;

use quintet_testkit::{
    AppKey, AuthMode, TestServer,
    hyper_connect::{compat_dir, install, run, suites},
};
use reqwest::Method;

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
