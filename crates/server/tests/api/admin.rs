//! The admin API: its token, accounts and plans, applications, keys, instances.

use std::sync::Arc;

use quintet_core::ManualClock;
use quintet_testkit::TestServer;
use reqwest::Method;
use serde_json::{Value, json};

/// 2023-11-14T22:13:20Z
const NOW_MS: i64 = 1_700_000_000_000;
const CREATED: &str = "2023-11-14T22:13:20.000Z";

async fn server() -> TestServer {
    TestServer::builder()
        .clock(Arc::new(ManualClock::new(NOW_MS)))
        .start()
        .await
}

fn error(status: u16, msg: &str) -> Value {
    json!({"ok": false, "status": status, "msg": msg})
}

async fn account(s: &TestServer, name: &str, plan: &str) {
    s.admin(
        Method::POST,
        "/_admin/accounts",
        Some(json!({"name": name, "plan": plan})),
    )
    .await
    .expect(201);
}

async fn app(s: &TestServer, name: &str, account: &str) -> quintet_testkit::Reply {
    s.admin(
        Method::POST,
        "/_admin/apps",
        Some(json!({"name": name, "account": account})),
    )
    .await
}

#[tokio::test]
async fn the_admin_api_needs_the_admin_token() {
    let s = server().await;
    let r = s.get("/_admin/accounts").await.expect(401);
    assert_eq!(
        r.body,
        error(
            401,
            "this request needs the header Authorization: Bearer <token>, with the admin token"
        )
    );
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    let r = s
        .send(
            s.request(Method::GET, "/_admin/accounts")
                .bearer_auth("not-the-admin-token"),
        )
        .await
        .expect(401);
    assert_eq!(
        r.body,
        error(
            401,
            "the admin token is not valid: use the one the server was started with or printed \
             on its first start"
        )
    );
    let r = s
        .send(
            s.request(Method::GET, "/_admin/accounts")
                .header("authorization", format!("Basic {}", s.admin_token())),
        )
        .await
        .expect(401);
    assert_eq!(
        r.body,
        error(
            401,
            "the Authorization header must be \"Bearer <token>\", with the admin token"
        )
    );
    // A prefix of the token is not the token.
    let prefix = &s.admin_token()[..s.admin_token().len() - 1];
    s.send(
        s.request(Method::GET, "/_admin/accounts")
            .bearer_auth(prefix),
    )
    .await
    .expect(401);
    // Writes without the token change nothing.
    let r = s
        .send(
            s.request(Method::POST, "/_admin/accounts")
                .json(&json!({"name": "sneaky", "plan": "business"})),
        )
        .await
        .expect(401);
    assert_eq!(r.body["status"], 401);
    let r = s
        .admin(Method::GET, "/_admin/accounts", None)
        .await
        .expect(200);
    assert_eq!(r.body, json!({"ok": true, "accounts": []}));
    // Unknown admin routes: 401 without the token, 404 with it.
    s.get("/_admin/nothing-here").await.expect(401);
    s.admin(Method::GET, "/_admin/nothing-here", None)
        .await
        .expect(404);
}

#[tokio::test]
async fn a_configured_admin_token_is_used_and_none_is_generated() {
    let token = "an-admin-token-chosen-by-the-operator";
    let s = TestServer::builder()
        .args(|a| a.admin_token = Some(token.to_owned()))
        .start()
        .await;
    assert_eq!(s.admin_token(), token);
    s.send(
        s.request(Method::GET, "/_admin/accounts")
            .bearer_auth(token),
    )
    .await
    .expect(200);
    assert!(!s.data_dir().join("admin-token").exists());
}

#[tokio::test]
async fn the_generated_admin_token_is_kept_across_restarts() {
    let mut s = server().await;
    let file = s.data_dir().join("admin-token");
    let stored = std::fs::read_to_string(&file).unwrap();
    assert_eq!(stored.trim(), s.admin_token());
    let before = s.admin_token().to_owned();
    s.restart().await;
    assert_eq!(s.admin_token(), before);
    s.send(s.request(Method::GET, "/_admin/apps").bearer_auth(&before))
        .await
        .expect(200);
}

#[tokio::test]
async fn accounts_are_created_listed_and_change_plan() {
    let s = server().await;
    let r = s
        .admin(
            Method::POST,
            "/_admin/accounts",
            Some(json!({"name": "acme", "plan": "Pro"})),
        )
        .await
        .expect(201);
    let acme = json!({"name": "acme", "plan": "pro", "apps": 0, "maxApps": 10, "created": CREATED});
    assert_eq!(r.body, json!({"ok": true, "account": acme}));
    let r = s
        .admin(
            Method::POST,
            "/_admin/accounts",
            Some(json!({"name": "zeta"})),
        )
        .await
        .expect(201);
    assert_eq!(r.body["account"]["plan"], "starter", "the default plan");
    let r = s
        .admin(Method::GET, "/_admin/accounts", None)
        .await
        .expect(200);
    assert_eq!(
        r.body,
        json!({"ok": true, "accounts": [
            acme,
            {"name": "zeta", "plan": "starter", "apps": 0, "maxApps": 3, "created": CREATED},
        ]})
    );
    let r = s
        .admin(
            Method::PATCH,
            "/_admin/accounts/zeta",
            Some(json!({"plan": "business"})),
        )
        .await
        .expect(200);
    assert_eq!(
        r.body,
        json!({"ok": true, "account":
            {"name": "zeta", "plan": "business", "apps": 0, "maxApps": 20, "created": CREATED}})
    );
    let r = s
        .admin(Method::GET, "/_admin/accounts/zeta", None)
        .await
        .expect(200);
    assert_eq!(r.body["account"]["plan"], "business");
}

#[tokio::test]
async fn plans_limit_applications() {
    let s = server().await;
    account(&s, "small", "starter").await;
    for i in 0..3 {
        let r = app(&s, &format!("app{i}"), "small").await.expect(201);
        assert_eq!(
            r.body,
            json!({"ok": true, "app": {"name": format!("app{i}"), "account": "small", "created": CREATED}})
        );
    }
    app(&s, "app3", "small").await.expect(403);
    s.admin(Method::GET, "/_admin/apps/app3", None)
        .await
        .expect(404);
    // Pro allows 10 and business 20.
    for (plan, limit) in [("pro", 10), ("business", 20)] {
        s.admin(
            Method::PATCH,
            "/_admin/accounts/small",
            Some(json!({"plan": plan})),
        )
        .await
        .expect(200);
        for i in s
            .admin(Method::GET, "/_admin/accounts/small", None)
            .await
            .body["account"]["apps"]
            .as_u64()
            .unwrap()..limit
        {
            app(&s, &format!("app{i}"), "small").await.expect(201);
        }
        let r = app(&s, "one-more", "small").await.expect(403);
        let msg = r.body["msg"].as_str().unwrap().to_owned();
        assert!(
            msg.contains(&format!("{plan} plan, which allows at most {limit}")),
            "{msg}"
        );
    }
    let r = s
        .admin(Method::GET, "/_admin/accounts/small", None)
        .await
        .expect(200);
    assert_eq!(r.body["account"]["apps"], 20);
}

#[tokio::test]
async fn applications_are_listed_by_account() {
    let s = server().await;
    account(&s, "a", "starter").await;
    account(&s, "b", "starter").await;
    app(&s, "shop", "a").await.expect(201);
    app(&s, "blog", "b").await.expect(201);
    let r = s.admin(Method::GET, "/_admin/apps", None).await.expect(200);
    assert_eq!(
        r.body,
        json!({"ok": true, "apps": [
            {"name": "blog", "account": "b", "created": CREATED},
            {"name": "shop", "account": "a", "created": CREATED},
        ]})
    );
    let r = s
        .admin(Method::GET, "/_admin/apps?account=a", None)
        .await
        .expect(200);
    assert_eq!(
        r.body,
        json!({"ok": true, "apps": [{"name": "shop", "account": "a", "created": CREATED}]})
    );
    let r = s
        .admin(Method::GET, "/_admin/apps/shop", None)
        .await
        .expect(200);
    assert_eq!(r.body["app"]["account"], "a");
}

/// Every refused admin call, `(method, path, body) → (status, msg)`, after one set-up:
/// account `acme` (pro) owns four applications, `small` (starter) three.
#[tokio::test]
async fn refused_admin_calls_say_why() {
    let s = server().await;
    account(&s, "acme", "pro").await;
    account(&s, "small", "starter").await;
    for (name, owner) in [
        ("shop", "acme"),
        ("a1", "acme"),
        ("a2", "acme"),
        ("a3", "acme"),
        ("s0", "small"),
        ("s1", "small"),
        ("s2", "small"),
    ] {
        app(&s, name, owner).await.expect(201);
    }
    let key = s.new_key("acme", "shop").await.key;
    let ghost_account = "account \"ghost\" does not exist; create it with POST /_admin/accounts";
    let no_key = format!("application \"a1\" has no key \"{key}\"");
    #[rustfmt::skip]
    let table: &[(Method, &str, Option<Value>, u16, &str)] = &[
        (Method::POST, "/_admin/accounts", Some(json!({"name": "acme"})), 409, "account \"acme\" already exists"),
        (Method::POST, "/_admin/accounts", Some(json!({"name": "x", "plan": "free"})), 422, "plan \"free\" is not valid: use starter, pro or business"),
        (Method::POST, "/_admin/accounts", Some(json!({"name": "Bad Name"})), 422, "account name \"Bad Name\" is not valid: use lowercase letters a-z, digits, '_' and '-', starting with a letter or digit"),
        (Method::PATCH, "/_admin/accounts/ghost", Some(json!({"plan": "pro"})), 404, ghost_account),
        (Method::GET, "/_admin/accounts/ghost", None, 404, ghost_account),
        (Method::PATCH, "/_admin/accounts/acme", Some(json!({"plan": "starter"})), 409, "account \"acme\" owns 4 applications, more than the starter plan's limit of 3; delete 1 of them first"),
        (Method::POST, "/_admin/apps", Some(json!({"name": "s3", "account": "small"})), 403, "account \"small\" is on the starter plan, which allows at most 3 applications; delete an application or move the account to a larger plan"),
        (Method::POST, "/_admin/apps", Some(json!({"name": "shop", "account": "small"})), 409, "application \"shop\" already exists; application names are unique across all accounts"),
        (Method::POST, "/_admin/apps", Some(json!({"name": "data", "account": "acme"})), 422, "application name \"data\" is reserved: it is the name of a service type"),
        (Method::POST, "/_admin/apps", Some(json!({"name": "lost", "account": "ghost"})), 404, ghost_account),
        (Method::GET, "/_admin/apps?account=ghost", None, 404, ghost_account),
        (Method::GET, "/_admin/apps/Nope", None, 404, "application \"Nope\" does not exist; create it with POST /_admin/apps"),
        (Method::DELETE, "/_admin/apps/ghost", None, 404, "application \"ghost\" does not exist; create it with POST /_admin/apps"),
        (Method::POST, "/_admin/apps/ghost/keys", None, 404, "application \"ghost\" does not exist; create it with POST /_admin/apps"),
        (Method::GET, "/_admin/apps/ghost/keys", None, 404, "application \"ghost\" does not exist; create it with POST /_admin/apps"),
        (Method::GET, &format!("/_admin/apps/a1/keys/{key}"), None, 404, &no_key),
        (Method::DELETE, &format!("/_admin/apps/a1/keys/{key}"), None, 404, &no_key),
        (Method::GET, "/_admin/apps/shop/keys/not%20a%20key", None, 404, "application \"shop\" has no key \"not a key\""),
    ];
    for (method, path, body, status, msg) in table {
        let r = s.admin(method.clone(), path, body.clone()).await;
        assert_eq!(
            (r.status, &r.body),
            (*status, &error(*status, msg)),
            "{method} {path}"
        );
    }
    // Unknown members are named (serde's words).
    let r = s
        .admin(
            Method::POST,
            "/_admin/accounts",
            Some(json!({"name": "y", "plna": "pro"})),
        )
        .await
        .expect(422);
    assert!(
        r.body["msg"].as_str().unwrap().contains("plna"),
        "{}",
        r.text
    );
    let r = app(&s, "_domain", "acme").await.expect(422);
    assert_eq!(r.body["status"], 422);
}

/// A Host header that makes no URL is the client's mistake (400), not the server's (500),
/// and creates no key.
#[tokio::test]
async fn a_host_header_that_makes_no_url_is_refused() {
    let s = server().await;
    account(&s, "acme", "starter").await;
    app(&s, "shop", "acme").await.expect(201);
    for host in ["/", "a@b", "x:y"] {
        let req = s.as_admin(s.request(Method::POST, "/_admin/apps/shop/keys"));
        let r = s.send(req.header("host", host)).await.expect(400);
        assert_eq!(
            r.body,
            error(
                400,
                &format!(
                    "the Host header \"{host}\" is not a host[:port] to build a URL from: \
                     send a host name or IP address with an optional port, or set \
                     --public-url on the server"
                )
            )
        );
    }
    let r = s
        .admin(Method::GET, "/_admin/apps/shop/keys", None)
        .await
        .expect(200);
    assert_eq!(r.body, json!({"ok": true, "keys": []}));
}

#[tokio::test]
async fn keys_are_created_listed_revealed_and_revoked() {
    let s = server().await;
    account(&s, "acme", "starter").await;
    app(&s, "shop", "acme").await.expect(201);
    let r = s
        .admin(Method::POST, "/_admin/apps/shop/keys", None)
        .await
        .expect(201);
    let obj = r.body.as_object().unwrap();
    assert_eq!(
        obj.keys().collect::<Vec<_>>(),
        ["ok", "key", "secret", "connectionString"]
    );
    let key = r.body["key"].as_str().unwrap().to_owned();
    let secret = r.body["secret"].as_str().unwrap().to_owned();
    assert!(key.starts_with("qk_"));
    assert_eq!(secret.len(), 43);
    assert!(
        secret
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
        "{secret}"
    );
    let host = s.url("").trim_start_matches("http://").to_owned();
    assert_eq!(
        r.body["connectionString"],
        format!("cloud://{key}:{secret}@{host}/shop")
    );

    let tail = &secret[secret.len() - 4..];
    let r = s
        .admin(Method::GET, "/_admin/apps/shop/keys", None)
        .await
        .expect(200);
    assert_eq!(
        r.body,
        json!({"ok": true, "keys": [{
            "key": key, "secret": format!("****{tail}"),
            "created": CREATED, "lastUsed": null, "revoked": null,
        }]})
    );
    assert!(!r.text.contains(&secret));

    let r = s
        .admin(Method::GET, &format!("/_admin/apps/shop/keys/{key}"), None)
        .await
        .expect(200);
    assert_eq!(
        r.body,
        json!({
            "ok": true, "key": key, "secret": secret,
            "connectionString": format!("cloud://{key}:{secret}@{host}/shop"),
            "created": CREATED, "lastUsed": null, "revoked": null,
        })
    );

    s.admin(
        Method::DELETE,
        &format!("/_admin/apps/shop/keys/{key}"),
        None,
    )
    .await
    .expect(200);
    // Twice is fine and keeps the first time.
    let r = s
        .admin(
            Method::DELETE,
            &format!("/_admin/apps/shop/keys/{key}"),
            None,
        )
        .await
        .expect(200);
    assert_eq!(r.body, json!({"ok": true}));
    let r = s
        .admin(Method::GET, "/_admin/apps/shop/keys", None)
        .await
        .expect(200);
    assert_eq!(r.body["keys"][0]["revoked"], CREATED);
}

#[tokio::test]
async fn the_public_url_names_the_host_of_connection_strings() {
    let s = TestServer::builder()
        .args(|a| a.public_url = Some("https://q.example.com/".to_owned()))
        .start()
        .await;
    let k = s.new_app().await;
    assert_eq!(
        k.connection_string,
        format!("cloud://{}:{}@q.example.com/{}", k.key, k.secret, k.app)
    );
}

#[tokio::test]
async fn last_used_is_shown_at_once_and_kept_across_restarts() {
    let clock = Arc::new(ManualClock::new(NOW_MS));
    let mut s = TestServer::builder().clock(clock.clone()).start().await;
    let k = s.new_app().await;
    clock.advance(5_000);
    s.send(s.as_app(&k, s.request(Method::PUT, &format!("/{}/cache/c", k.app))))
        .await
        .expect(201);
    let keys = format!("/_admin/apps/{}/keys", k.app);
    let r = s.admin(Method::GET, &keys, None).await.expect(200);
    assert_eq!(r.body["keys"][0]["lastUsed"], "2023-11-14T22:13:25.000Z");
    // A failed authentication is not a use.
    clock.advance(5_000);
    let bad = s
        .request(Method::PUT, &format!("/{}/cache/d", k.app))
        .bearer_auth(k.sign(json!({"sub": k.key})));
    s.send(bad).await.expect(401);
    s.restart().await;
    let r = s.admin(Method::GET, &keys, None).await.expect(200);
    assert_eq!(r.body["keys"][0]["lastUsed"], "2023-11-14T22:13:25.000Z");
    let r = s
        .admin(Method::GET, &format!("{keys}/{}", k.key), None)
        .await
        .expect(200);
    assert_eq!(r.body["lastUsed"], "2023-11-14T22:13:25.000Z");
}

#[tokio::test]
async fn instances_of_an_application_are_listed_with_secrets_redacted() {
    let s = server().await;
    let k = s.new_app().await;
    let create = |kind: &str, body: Option<Value>| {
        let req = s.as_app(
            &k,
            s.request(Method::PUT, &format!("/{}/{kind}/main", k.app)),
        );
        match body {
            Some(b) => req.json(&b),
            None => req,
        }
    };
    s.send(create(
        "queue",
        Some(json!({"target": "https://w.example/jobs", "secret": "hush"})),
    ))
    .await
    .expect(201);
    s.send(create(
        "search",
        Some(json!({"fields": ["title"], "storeFields": ["title"]})),
    ))
    .await
    .expect(201);
    s.send(create("data", None)).await.expect(201);
    // Domain-form instances belong to no application.
    s.put("/cache/main", None).await.expect(201);
    let r = s
        .admin(
            Method::GET,
            &format!("/_admin/apps/{}/instances", k.app),
            None,
        )
        .await
        .expect(200);
    assert_eq!(
        r.body,
        json!({"ok": true, "instances": [
            {"type": "data", "name": "main", "config": {}, "created": CREATED},
            {"type": "queue", "name": "main",
             "config": {"target": "https://w.example/jobs", "secret": "[redacted]",
                        "concurrency": 8, "timeout": 30, "retries": 5}, "created": CREATED},
            {"type": "search", "name": "main",
             "config": {"fields": ["title"], "storeFields": ["title"]}, "created": CREATED},
        ]})
    );
    assert!(!r.text.contains("hush"));
    s.admin(Method::GET, "/_admin/apps/ghost/instances", None)
        .await
        .expect(404);
}

fn entries(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

#[tokio::test]
async fn deleting_an_application_removes_its_instances_contents_and_keys() {
    let s = server().await;
    let k = s.new_app().await;
    for (kind, body) in [
        ("storage", None),
        ("search", Some(json!({"fields": ["t"]}))),
        ("data", None),
    ] {
        let req = s.as_app(
            &k,
            s.request(Method::PUT, &format!("/{}/{kind}/files", k.app)),
        );
        let req = match body {
            Some(b) => req.json(&b),
            None => req,
        };
        s.send(req).await.expect(201);
    }
    // Contents: a document, a small object (kept in the metadata database) and a large
    // one (a blob).
    let req = s.request(Method::POST, &format!("/{}/data/files", k.app));
    s.send(s.as_app(&k, req.json(&json!({"_id": "d1", "n": 1}))))
        .await
        .expect(201);
    for (path, size) in [("small.txt", 10), ("large.bin", 200_000)] {
        let req = s.request(Method::POST, &format!("/{}/storage/files/{path}", k.app));
        s.send(s.as_app(&k, req.body(vec![b'x'; size])))
            .await
            .expect(200);
    }
    let storage = s.data_dir().join("storage");
    let search = s.data_dir().join("search");
    assert_eq!((entries(&storage), entries(&search)), (1, 1));
    let token = s.token(&k);

    let r = s
        .admin(Method::DELETE, &format!("/_admin/apps/{}", k.app), None)
        .await
        .expect(200);
    assert_eq!(r.body, json!({"ok": true}));
    assert_eq!(
        (entries(&storage), entries(&search)),
        (0, 0),
        "contents dropped"
    );
    let r = s
        .send(
            s.request(Method::PUT, &format!("/{}/data/files", k.app))
                .bearer_auth(&token),
        )
        .await
        .expect(401);
    assert!(
        r.body["msg"].as_str().unwrap().contains("does not exist"),
        "{}",
        r.text
    );
    s.admin(Method::GET, &format!("/_admin/apps/{}", k.app), None)
        .await
        .expect(404);
    // Re-created under the same names, the application starts empty.
    s.admin(
        Method::POST,
        "/_admin/apps",
        Some(json!({"name": k.app, "account": k.account})),
    )
    .await
    .expect(201);
    let again = s.new_key(&k.account, &k.app).await;
    let base = format!("/{}/storage/files", k.app);
    s.send(s.as_app(&again, s.request(Method::PUT, &base)))
        .await
        .expect(201);
    for path in ["small.txt", "large.bin"] {
        let req = s.request(Method::GET, &format!("{base}/{path}"));
        s.send(s.as_app(&again, req)).await.expect(404);
    }
    let data = format!("/{}/data/files", k.app);
    s.send(s.as_app(&again, s.request(Method::PUT, &data)))
        .await
        .expect(201);
    let req = s.request(Method::GET, &format!("{data}/d1"));
    s.send(s.as_app(&again, req)).await.expect(404);
    s.admin(Method::DELETE, &format!("/_admin/apps/{}", k.app), None)
        .await
        .expect(200);
    let r = s
        .admin(Method::DELETE, &format!("/_admin/apps/{}", k.app), None)
        .await
        .expect(404);
    assert_eq!(
        r.body,
        error(
            404,
            &format!(
                "application \"{}\" does not exist; create it with POST /_admin/apps",
                k.app
            )
        )
    );
    let r = s
        .admin(
            Method::GET,
            &format!("/_admin/accounts/{}", k.account),
            None,
        )
        .await;
    assert_eq!(r.body["account"]["apps"], 0);

    // The name can be used again, and the new application starts empty.
    app(&s, &k.app, &k.account).await.expect(201);
    let fresh = s.new_key(&k.account, &k.app).await;
    let r = s
        .admin(
            Method::GET,
            &format!("/_admin/apps/{}/instances", k.app),
            None,
        )
        .await
        .expect(200);
    assert_eq!(r.body["instances"], json!([]));
    s.send(s.as_app(
        &fresh,
        s.request(Method::PUT, &format!("/{}/data/files", k.app)),
    ))
    .await
    .expect(201);
}
