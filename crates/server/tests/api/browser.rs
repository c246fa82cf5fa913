//! What a web page can do to a quintet: the issue-17 reproductions (a page on any site
//! driving a developer's local quintet with `--auth none`), and what stays open for pages
//! that carry bearer tokens. See `crates/server/src/cors.rs` and `hosts.rs`.

use quintet_testkit::{AuthMode, TestServer};
use reqwest::Method;
use serde_json::json;

const EVIL: &str = "https://evil.example";

/// `(status, Access-Control-Allow-Origin)` of a request.
async fn cors(s: &TestServer, req: reqwest::RequestBuilder) -> (u16, Option<String>) {
    let r = s.send(req).await;
    (
        r.status,
        r.header("access-control-allow-origin").map(str::to_owned),
    )
}

fn preflight(s: &TestServer, path: &str, origin: &str, method: &str) -> reqwest::RequestBuilder {
    s.request(Method::OPTIONS, path)
        .header("origin", origin)
        .header("access-control-request-method", method)
        .header(
            "access-control-request-headers",
            "authorization,content-type",
        )
}

#[tokio::test]
async fn a_page_on_another_site_cannot_drive_a_local_quintet_without_auth() {
    let s = TestServer::start().await;
    s.create("data", "notes", None).await.expect(201);
    s.post("/data/notes", json!({"_id": "secret", "pin": 1234}))
        .await
        .expect(201);

    // A preflight for DELETE from another site: refused, and no CORS grant.
    let (status, allow) = cors(&s, preflight(&s, "/data/notes", EVIL, "DELETE")).await;
    assert_eq!((status, allow), (403, None));
    // A cross-origin read of a document (a "simple" GET, no preflight): refused.
    let r = s
        .send(
            s.request(Method::GET, "/data/notes/secret")
                .header("origin", EVIL),
        )
        .await
        .expect(403);
    assert!(r.text.contains("--cors-origins"), "{}", r.text);
    assert!(!r.text.contains("1234"));
    // A text/plain POST (a form or fetch without preflight) creates nothing, from another
    // site or even without an Origin header (415: JSON calls take JSON only).
    let text_post = |origin: Option<&str>| {
        let req = s
            .request(Method::POST, "/data/notes")
            .header("content-type", "text/plain;charset=UTF-8")
            .body(r#"{"_id":"planted"}"#);
        match origin {
            Some(o) => req.header("origin", o),
            None => req,
        }
    };
    s.send(text_post(Some(EVIL))).await.expect(403);
    let r = s.send(text_post(None)).await.expect(415);
    assert!(r.text.contains("application/json"), "{}", r.text);
    for form in [
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let req = s
            .request(Method::POST, "/data/notes")
            .header("content-type", form)
            .body(r#"{"_id":"planted"}"#);
        s.send(req).await.expect(415);
    }
    s.get("/data/notes/planted").await.expect(404);
    // DNS rebinding: the page's own name pointed at 127.0.0.1.
    let r = s
        .send(
            s.request(Method::GET, "/data/notes/secret")
                .header("host", "attacker.example"),
        )
        .await
        .expect(403);
    assert!(r.text.contains("--allowed-hosts"), "{}", r.text);
    s.get("/data/notes/secret").await.expect(200);
}

#[tokio::test]
async fn loopback_names_the_servers_own_pages_and_listed_origins_are_served() {
    let s = TestServer::builder()
        .args(|a| {
            a.cors_origins = Some(vec!["http://localhost:5173".into()]);
            a.allowed_hosts = Some(vec!["lan-box:6363".into()]);
            a.public_url = Some("https://q.example.com".into());
        })
        .start()
        .await;
    s.create("data", "d", None).await.expect(201);
    let host = s.url("").trim_start_matches("http://").to_owned();
    let port = host.rsplit(':').next().unwrap().to_owned();
    for (host, status) in [
        (host.clone(), 200),
        (format!("localhost:{port}"), 200),
        ("app.localhost".to_owned(), 200),
        ("[::1]".to_owned(), 200),
        ("lan-box:6363".to_owned(), 200),
        ("lan-box:6364".to_owned(), 403),
        ("q.example.com".to_owned(), 200),
        ("evil.example".to_owned(), 403),
    ] {
        let r = s
            .send(s.request(Method::GET, "/data/d").header("host", &host))
            .await;
        assert_eq!(r.status, status, "Host: {host}");
    }
    // The server's own pages (the console), a listed origin, and the public URL's origin.
    let own = format!("http://{host}");
    for origin in [
        own.as_str(),
        "http://localhost:5173",
        "https://q.example.com",
    ] {
        let (status, allow) = cors(&s, preflight(&s, "/data/d", origin, "PUT")).await;
        assert_eq!((status, allow.as_deref()), (204, Some(origin)), "{origin}");
        let r = s
            .send(s.request(Method::GET, "/data/d").header("origin", origin))
            .await
            .expect(200);
        assert_eq!(r.header("access-control-allow-origin"), Some(origin));
        assert_eq!(r.header("vary"), Some("Origin"));
    }
    let (status, _) = cors(&s, preflight(&s, "/data/d", "http://localhost:5174", "PUT")).await;
    assert_eq!(status, 403);
    // The admin API answers the same origins only (it has a token, but no reason to be
    // driven from other sites).
    let (status, _) = cors(&s, preflight(&s, "/_admin/apps", EVIL, "GET")).await;
    assert_eq!(status, 403);
}

#[tokio::test]
async fn pages_that_carry_bearer_tokens_may_call_from_any_origin() {
    let s = TestServer::start().await;
    let key = s.new_app().await;
    // The application form: a token is the credential.
    let path = format!("/{}/data/default", key.app);
    let (status, allow) = cors(&s, preflight(&s, &path, EVIL, "PUT")).await;
    assert_eq!((status, allow.as_deref()), (204, Some(EVIL)));
    let r = s
        .send(
            s.as_app(&key, s.request(Method::PUT, &path))
                .header("origin", EVIL),
        )
        .await
        .expect(201);
    assert_eq!(r.header("access-control-allow-origin"), Some(EVIL));
    let methods = preflight(&s, &path, EVIL, "DELETE");
    let r = s.send(methods).await.expect(204);
    assert!(
        r.header("access-control-allow-methods")
            .unwrap()
            .contains("DELETE")
    );
    assert_eq!(
        r.header("access-control-allow-headers"),
        Some("authorization,content-type")
    );

    // The domain form with --auth jwt: the same.
    let secret = "a-jwt-secret-of-at-least-32-bytes!!";
    let jwt = TestServer::builder()
        .args(|a| {
            a.auth = Some(AuthMode::Jwt);
            a.jwt_secret = Some(secret.into());
        })
        .start()
        .await;
    let (status, allow) = cors(&jwt, preflight(&jwt, "/data/d", EVIL, "PUT")).await;
    assert_eq!((status, allow.as_deref()), (204, Some(EVIL)));
    // And a request addressed to any host is served: tokens do not come from DNS.
    let r = jwt
        .send(
            jwt.request(Method::GET, "/data/d")
                .header("host", "attacker.example"),
        )
        .await;
    assert_eq!(r.status, 401, "{}", r.text);
}
