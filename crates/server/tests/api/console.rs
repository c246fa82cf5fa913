//! The management console's serving (files, content types, the headers that protect it)
//! and the admin calls it relies on (`GET /_admin/node`, `POST /_admin/apps/<app>/token`).
//! The console driven in a real browser: `crates/server/tests/api/console_browser.rs`.

use quintet_testkit::{AuthMode, TestServer};
use reqwest::Method;
use serde_json::json;

#[tokio::test]
async fn the_console_is_served_from_the_binary_with_a_strict_policy() {
    let s = TestServer::start().await;
    let r = s.get("/_console/").await.expect(200);
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    assert!(
        r.text
            .contains(r#"<script type="module" src="app.js"></script>"#)
    );
    let csp = r.header("content-security-policy").unwrap();
    for part in [
        "default-src 'none'",
        "script-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(part), "{csp}");
    }
    assert!(
        !csp.contains("unsafe-inline") && !csp.contains("http"),
        "{csp}"
    );
    assert_eq!(r.header("x-frame-options"), Some("DENY"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    for (path, ty) in [
        ("/_console/app.js", "text/javascript; charset=utf-8"),
        ("/_console/pages/keys.js", "text/javascript; charset=utf-8"),
        ("/_console/app.css", "text/css; charset=utf-8"),
        ("/_console/favicon.svg", "image/svg+xml"),
    ] {
        let r = s.get(path).await.expect(200);
        assert_eq!(r.header("content-type"), Some(ty), "{path}");
        assert_eq!(r.header("x-frame-options"), Some("DENY"), "{path}");
    }
    let r = s.get("/_console/nope.js").await.expect(404);
    assert_eq!(r.body["ok"], false);
    assert_eq!(r.header("x-frame-options"), Some("DENY"));
    // `/_console` without the slash: relative asset paths need it.
    let r = s
        .send(
            s.request(Method::GET, "/_console")
                .header("host", "localhost"),
        )
        .await;
    assert!(r.status == 308 || r.status == 200, "{}", r.status);
}

#[tokio::test]
async fn the_console_needs_no_token_to_load_even_with_jwt_auth() {
    let s = TestServer::builder()
        .args(|a| {
            a.auth = Some(AuthMode::Jwt);
            a.jwt_secret = Some("a-secret-of-at-least-32-bytes-long!!".into());
        })
        .start()
        .await;
    s.get("/_console/").await.expect(200);
    s.get("/_console/app.js").await.expect(200);
    // What the page then calls still needs the admin token.
    s.get("/_admin/node").await.expect(401);
}

#[tokio::test]
async fn the_node_call_reports_version_places_and_instances() {
    let s = TestServer::start().await;
    let k = s.new_app().await;
    let minted = s
        .admin(Method::POST, &format!("/_admin/apps/{}/token", k.app), None)
        .await
        .expect(201);
    let token = minted.body["token"].as_str().unwrap();
    for (kind, name) in [("data", "d1"), ("data", "d2"), ("cache", "c1")] {
        let r = s
            .send(
                s.request(Method::PUT, &format!("/{}/{kind}/{name}", k.app))
                    .bearer_auth(token),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    s.get("/_admin/node").await.expect(401);
    let r = s.admin(Method::GET, "/_admin/node", None).await.expect(200);
    assert_eq!(r.body["version"], env!("CARGO_PKG_VERSION"));
    assert!(r.body["uptime"].as_i64().unwrap() >= 0);
    assert!(r.body["started"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        r.body["instances"],
        json!({"data": 2, "cache": 1, "search": 0, "queue": 0, "storage": 0})
    );
    let places = r.body["places"].as_object().unwrap();
    for store in ["registry", "data", "cache", "search", "queue", "storage"] {
        assert!(
            places[store].as_str().unwrap().starts_with("embedded"),
            "{store}: {places:?}"
        );
    }
}

#[tokio::test]
async fn a_minted_token_opens_the_application_until_its_key_is_revoked() {
    let s = TestServer::start().await;
    let k = s.new_app().await;
    let path = format!("/_admin/apps/{}/token", k.app);
    // Only the admin mints.
    s.send(s.request(Method::POST, &path)).await.expect(401);
    let r = s.admin(Method::POST, &path, None).await.expect(201);
    assert_eq!(r.body["key"], k.key.as_str());
    let token = r.body["token"].as_str().unwrap().to_owned();
    let put = |t: &str| {
        s.request(Method::PUT, &format!("/{}/data/notes", k.app))
            .bearer_auth(t)
    };
    s.send(put(&token)).await.expect(201);
    // Bad lifetimes are refused, and change nothing.
    for ttl in [0, 3601] {
        let r = s
            .admin(Method::POST, &path, Some(json!({"ttl": ttl})))
            .await
            .expect(422);
        assert!(r.text.contains("1 to 3600"), "{}", r.text);
    }
    s.admin(Method::POST, &path, Some(json!({"ttl": 60})))
        .await
        .expect(201);
    // Another application's token does not open this one.
    let other = s.new_app().await;
    let r = s
        .admin(
            Method::POST,
            &format!("/_admin/apps/{}/token", other.app),
            None,
        )
        .await
        .expect(201);
    let other_token = r.body["token"].as_str().unwrap().to_owned();
    s.send(
        s.request(Method::GET, &format!("/{}/data/notes", k.app))
            .bearer_auth(&other_token),
    )
    .await
    .expect(403);
    // Revoked: the minted token is refused, and no new one can be minted.
    s.admin(
        Method::DELETE,
        &format!("/_admin/apps/{}/keys/{}", k.app, k.key),
        None,
    )
    .await
    .expect(200);
    s.send(put(&token)).await.expect(401);
    let r = s.admin(Method::POST, &path, None).await.expect(409);
    assert!(
        r.text.contains("has no access key that is not revoked"),
        "{}",
        r.text
    );
    s.admin(Method::POST, "/_admin/apps/nope/token", None)
        .await
        .expect(404);
}

#[tokio::test]
async fn the_console_files_are_gzipped_for_clients_that_accept_it() {
    use std::io::Read as _;
    let s = TestServer::start().await;
    let get = |path: &str, headers: &[(&str, &str)]| {
        let mut req = s.http().get(s.url(path));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req
    };
    for (url, file) in [
        ("/_console/", "index.html"),
        ("/_console/app.js", "app.js"),
        ("/_console/app.css", "app.css"),
        ("/_console/pages/data.js", "pages/data.js"),
    ] {
        let plain = quintet_server::console::content(file).unwrap().as_bytes();

        // Accept-Encoding with gzip: a gzipped body that is the file.
        let r = get(url, &[("accept-encoding", "br;q=1.0, gzip;q=0.8, *;q=0.1")])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{url}");
        let h = r.headers().clone();
        assert_eq!(h["content-encoding"], "gzip", "{url}");
        assert_eq!(h["vary"], "accept-encoding", "{url}");
        assert_eq!(h["cache-control"], "no-cache", "{url}");
        assert_eq!(h["x-frame-options"], "DENY", "{url}");
        assert!(h.contains_key("content-security-policy"), "{url}");
        let zipped_tag = h["etag"].to_str().unwrap().to_owned();
        let body = r.bytes().await.unwrap();
        assert!(body.len() < plain.len(), "{url}: {} bytes", body.len());
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&body[..])
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, plain, "{url}");

        // Without Accept-Encoding, or refusing gzip: the plain bytes.
        for headers in [&[][..], &[("accept-encoding", "gzip;q=0, identity")][..]] {
            let r = get(url, headers).send().await.unwrap();
            assert_eq!(r.status(), 200, "{url}");
            assert!(!r.headers().contains_key("content-encoding"), "{url}");
            assert_eq!(r.headers()["vary"], "accept-encoding");
            let plain_tag = r.headers()["etag"].to_str().unwrap().to_owned();
            assert_ne!(plain_tag, zipped_tag, "each representation its own tag");
            assert_eq!(r.bytes().await.unwrap(), plain, "{url}");
        }

        // Revalidating what the browser has: 304 without a body; a changed tag gets it all.
        let r = get(
            url,
            &[
                ("accept-encoding", "gzip"),
                ("if-none-match", zipped_tag.as_str()),
            ],
        )
        .send()
        .await
        .unwrap();
        assert_eq!(r.status(), 304, "{url}");
        assert_eq!(r.headers()["etag"], zipped_tag.as_str());
        assert!(r.bytes().await.unwrap().is_empty());
        let r = get(
            url,
            &[("accept-encoding", "gzip"), ("if-none-match", "\"old\"")],
        )
        .send()
        .await
        .unwrap();
        assert_eq!(r.status(), 200, "{url}");
    }
}
