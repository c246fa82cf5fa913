//! Account tokens: an account signs in to the admin API and sees and manages only its own
//! applications, keys and instances, within its plan; another account's application is
//! not found; the admin-only calls are refused; a revoked token signs in nobody.

use quintet_testkit::{Reply, TestServer};
use reqwest::Method;
use serde_json::{Value, json};

async fn account(s: &TestServer, name: &str) {
    s.admin(
        Method::POST,
        "/_admin/accounts",
        Some(json!({"name": name, "plan": "starter"})),
    )
    .await
    .expect(201);
}

async fn app(s: &TestServer, name: &str, account: &str) {
    s.admin(
        Method::POST,
        "/_admin/apps",
        Some(json!({"name": name, "account": account})),
    )
    .await
    .expect(201);
}

/// Issue a token of `account`; its text.
async fn issue(s: &TestServer, account: &str) -> String {
    let r = s
        .admin(
            Method::POST,
            &format!("/_admin/accounts/{account}/tokens"),
            None,
        )
        .await
        .expect(201);
    assert_eq!(r.body["account"], account);
    r.body["token"].as_str().unwrap().to_owned()
}

async fn call(
    s: &TestServer,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Reply {
    let mut req = s.request(method, path).bearer_auth(token);
    if let Some(b) = body {
        req = req.json(&b);
    }
    s.send(req).await
}

#[tokio::test]
async fn an_account_token_manages_only_its_own_applications() {
    let s = TestServer::start().await;
    account(&s, "acme").await;
    account(&s, "rival").await;
    app(&s, "rival-shop", "rival").await;
    let token = issue(&s, "acme").await;

    let me = call(&s, &token, Method::GET, "/_admin/me", None)
        .await
        .expect(200);
    assert_eq!(me.body["role"], "account");
    assert_eq!(me.body["account"]["name"], "acme");
    let me = s.admin(Method::GET, "/_admin/me", None).await.expect(200);
    assert_eq!(me.body, json!({"ok": true, "role": "admin"}));

    // Its own applications, created within its plan.
    call(
        &s,
        &token,
        Method::POST,
        "/_admin/apps",
        Some(json!({"name": "shop", "account": "acme"})),
    )
    .await
    .expect(201);
    let r = call(
        &s,
        &token,
        Method::POST,
        "/_admin/apps",
        Some(json!({"name": "stolen", "account": "rival"})),
    )
    .await
    .expect(403);
    assert!(r.text.contains("its own account only"), "{}", r.text);
    let r = call(&s, &token, Method::GET, "/_admin/apps", None)
        .await
        .expect(200);
    let names: Vec<&str> = r.body["apps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["shop"]);
    call(&s, &token, Method::GET, "/_admin/apps?account=rival", None)
        .await
        .expect(404);
    let r = call(&s, &token, Method::GET, "/_admin/accounts", None)
        .await
        .expect(200);
    assert_eq!(r.body["accounts"].as_array().unwrap().len(), 1);
    assert_eq!(r.body["accounts"][0]["apps"], 1);
    call(&s, &token, Method::GET, "/_admin/accounts/acme", None)
        .await
        .expect(200);
    call(&s, &token, Method::GET, "/_admin/accounts/rival", None)
        .await
        .expect(404);

    // Keys and instances of its own application, through a minted token.
    let k = call(&s, &token, Method::POST, "/_admin/apps/shop/keys", None)
        .await
        .expect(201);
    let key = k.body["key"].as_str().unwrap().to_owned();
    call(&s, &token, Method::GET, "/_admin/apps/shop/keys", None)
        .await
        .expect(200);
    call(
        &s,
        &token,
        Method::GET,
        &format!("/_admin/apps/shop/keys/{key}"),
        None,
    )
    .await
    .expect(200);
    let minted = call(&s, &token, Method::POST, "/_admin/apps/shop/token", None)
        .await
        .expect(201);
    let app_token = minted.body["token"].as_str().unwrap().to_owned();
    call(&s, &app_token, Method::PUT, "/shop/data/notes", None)
        .await
        .expect(201);
    let r = call(&s, &token, Method::GET, "/_admin/apps/shop/instances", None)
        .await
        .expect(200);
    assert_eq!(r.body["instances"][0]["name"], "notes");

    // Another account's application does not exist for it, whatever the call.
    let rival_key = s
        .admin(Method::POST, "/_admin/apps/rival-shop/keys", None)
        .await
        .expect(201);
    let rival_key = rival_key.body["key"].as_str().unwrap().to_owned();
    for (method, path) in [
        (Method::GET, "/_admin/apps/rival-shop".to_owned()),
        (Method::DELETE, "/_admin/apps/rival-shop".to_owned()),
        (Method::GET, "/_admin/apps/rival-shop/keys".to_owned()),
        (Method::POST, "/_admin/apps/rival-shop/keys".to_owned()),
        (
            Method::GET,
            format!("/_admin/apps/rival-shop/keys/{rival_key}"),
        ),
        (
            Method::DELETE,
            format!("/_admin/apps/rival-shop/keys/{rival_key}"),
        ),
        (Method::GET, "/_admin/apps/rival-shop/instances".to_owned()),
        (Method::POST, "/_admin/apps/rival-shop/token".to_owned()),
    ] {
        let r = call(&s, &token, method.clone(), &path, None).await;
        assert_eq!(r.status, 404, "{method} {path}: {}", r.text);
        assert_eq!(
            r.body["msg"],
            "application \"rival-shop\" does not exist; create it with POST /_admin/apps",
            "{method} {path}"
        );
    }
    // Nothing of the rival changed.
    s.admin(Method::GET, "/_admin/apps/rival-shop", None)
        .await
        .expect(200);
    let keys = s
        .admin(Method::GET, "/_admin/apps/rival-shop/keys", None)
        .await
        .expect(200);
    assert_eq!(keys.body["keys"][0]["revoked"], Value::Null);

    // The admin's own calls are refused.
    for (method, path, body) in [
        (
            Method::POST,
            "/_admin/accounts",
            Some(json!({"name": "mine"})),
        ),
        (
            Method::PATCH,
            "/_admin/accounts/acme",
            Some(json!({"plan": "business"})),
        ),
        (Method::GET, "/_admin/node", None),
        (Method::POST, "/_admin/accounts/acme/tokens", None),
        (Method::GET, "/_admin/accounts/acme/tokens", None),
    ] {
        let r = call(&s, &token, method.clone(), path, body).await;
        assert_eq!(r.status, 403, "{method} {path}: {}", r.text);
    }
}

#[tokio::test]
async fn an_account_stays_within_its_plan() {
    let s = TestServer::start().await;
    account(&s, "small").await;
    let token = issue(&s, "small").await;
    for i in 0..3 {
        call(
            &s,
            &token,
            Method::POST,
            "/_admin/apps",
            Some(json!({"name": format!("a{i}"), "account": "small"})),
        )
        .await
        .expect(201);
    }
    let r = call(
        &s,
        &token,
        Method::POST,
        "/_admin/apps",
        Some(json!({"name": "a3", "account": "small"})),
    )
    .await
    .expect(403);
    assert!(r.text.contains("starter"), "{}", r.text);
}

#[tokio::test]
async fn account_tokens_are_listed_without_their_text_and_revoked() {
    let s = TestServer::start().await;
    account(&s, "acme").await;
    let token = issue(&s, "acme").await;
    assert!(token.starts_with("qat_"), "{token}");
    let id = token.split_once('.').unwrap().0.to_owned();
    let r = s
        .admin(Method::GET, "/_admin/accounts/acme/tokens", None)
        .await
        .expect(200);
    assert_eq!(r.body["tokens"][0]["id"], id.as_str());
    assert_eq!(r.body["tokens"][0]["revoked"], Value::Null);
    assert!(
        !r.text.contains(token.split_once('.').unwrap().1),
        "the text is never listed"
    );
    // A forged secret with a real id, and an unknown id, sign in nobody.
    for wrong in [
        format!("{id}.forged"),
        "qat_000000000000000000000000.x".to_owned(),
    ] {
        let r = call(&s, &wrong, Method::GET, "/_admin/apps", None)
            .await
            .expect(401);
        assert!(r.text.contains("account token is not valid"), "{}", r.text);
    }
    call(&s, &token, Method::GET, "/_admin/apps", None)
        .await
        .expect(200);
    s.admin(
        Method::DELETE,
        &format!("/_admin/accounts/acme/tokens/{id}"),
        None,
    )
    .await
    .expect(200);
    s.admin(
        Method::DELETE,
        &format!("/_admin/accounts/acme/tokens/{id}"),
        None,
    )
    .await
    .expect(200);
    call(&s, &token, Method::GET, "/_admin/apps", None)
        .await
        .expect(401);
    let r = s
        .admin(Method::GET, "/_admin/accounts/acme/tokens", None)
        .await
        .expect(200);
    assert!(r.body["tokens"][0]["revoked"].is_string());
    s.admin(Method::DELETE, "/_admin/accounts/acme/tokens/nope", None)
        .await
        .expect(404);
    s.admin(Method::POST, "/_admin/accounts/nobody/tokens", None)
        .await
        .expect(404);
    // Only a digest is kept: the token's secret is in no file of the data directory.
    let secret = token.split_once('.').unwrap().1.as_bytes().to_vec();
    let mut stack = vec![s.data_dir().to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                assert!(
                    !bytes.windows(secret.len()).any(|w| w == secret.as_slice()),
                    "{} holds the token",
                    path.display()
                );
            }
        }
    }
}
