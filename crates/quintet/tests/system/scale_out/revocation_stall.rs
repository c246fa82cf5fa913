//! A node frozen (`SIGSTOP`) while a key is revoked through another node may have missed
//! the revocation: the writer stops waiting for its acknowledgement after two seconds.
//! Once it resumes it must not accept the key, not even on the requests that were
//! already waiting for it.

use crate::BIN;
use std::{path::Path, time::Duration};

use quintet_testkit::{Client, Process, engines};
use reqwest::Method;
use serde_json::json;

const ADMIN_TOKEN: &str = "revocation-stall-admin-token-0123";

fn admin(node: &Client, method: Method, path: &str) -> reqwest::RequestBuilder {
    node.request(method, path).bearer_auth(ADMIN_TOKEN)
}

/// A token of a new key of `app`, and the key.
async fn new_key(node: &Client, app: &str) -> (String, String) {
    let r = node
        .send(admin(
            node,
            Method::POST,
            &format!("/_admin/apps/{app}/keys"),
        ))
        .await
        .expect(201);
    let key = quintet_testkit::AppKey {
        account: String::new(),
        app: app.to_owned(),
        key: r.body["key"].as_str().unwrap().to_owned(),
        secret: r.body["secret"].as_str().unwrap().to_owned(),
        connection_string: String::new(),
    };
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    (key.sign(json!({"sub": key.key, "exp": exp})), key.key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_resumed_after_a_pause_refuses_a_key_revoked_meanwhile() {
    let Some(pg) = engines::postgres("revocation_stall").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let args = ["--data", pg.url(), "--admin-token", ADMIN_TOKEN];
    let a = Process::spawn(Path::new(BIN), &dir.path().join("a"), &args);
    let b = Process::spawn(Path::new(BIN), &dir.path().join("b"), &args);
    a.send(
        admin(&a, Method::POST, "/_admin/accounts").json(&json!({"name": "acme", "plan": "pro"})),
    )
    .await
    .expect(201);
    a.send(
        admin(&a, Method::POST, "/_admin/apps").json(&json!({"name": "shop", "account": "acme"})),
    )
    .await
    .expect(201);

    for round in 0..3 {
        let (token, key) = new_key(&a, "shop").await;
        let instance = format!("/shop/data/r{round}");
        a.send(a.request(Method::PUT, &instance).bearer_auth(&token))
            .await
            .expect(201);
        // B knows the key (cached).
        b.send(b.request(Method::GET, &instance).bearer_auth(&token))
            .await
            .expect(200);

        b.signal("STOP");
        // The revocation returns once A gave up waiting for B's acknowledgement.
        a.send(admin(
            &a,
            Method::DELETE,
            &format!("/_admin/apps/shop/keys/{key}"),
        ))
        .await
        .expect(200);
        // Requests reach the frozen B and wait in its socket buffers.
        let waiting: Vec<_> = (0..8)
            .map(|_| {
                let (http, url, token) = (b.http().clone(), b.url(&instance), token.clone());
                tokio::spawn(async move {
                    http.get(url)
                        .bearer_auth(token)
                        .send()
                        .await
                        .map(|r| r.status().as_u16())
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(200)).await;
        b.signal("CONT");
        for request in waiting {
            let status = request.await.unwrap().unwrap();
            assert_eq!(
                status, 401,
                "round {round}: B accepted a key revoked while it was paused"
            );
        }
        let r = b
            .send(b.request(Method::GET, &instance).bearer_auth(&token))
            .await;
        assert_eq!(r.status, 401, "round {round}: {}", r.text);
    }
}
