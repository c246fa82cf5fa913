//! HTTPS: both address forms and the admin API over TLS, and what clients see of it.

use quintet_testkit::{Client, TestServer};
use reqwest::Method;
use serde_json::json;

#[tokio::test]
async fn both_forms_and_the_admin_api_work_over_https() {
    let s = TestServer::builder().tls().start().await;
    assert!(
        s.url("/").starts_with("https://127.0.0.1:"),
        "{}",
        s.url("/")
    );
    let r = s.get("/").await.expect(200);
    assert_eq!(r.body["ok"], true);
    s.put("/data/plain", None).await.expect(201);

    let k = s.new_app().await;
    let host = s.url("").trim_start_matches("https://").to_owned();
    assert_eq!(
        k.connection_string,
        format!("cloud://{}:{}@{host}/{}", k.key, k.secret, k.app)
    );
    // What a client makes of the connection string: https://<host>/<app>/<type>/<name>.
    let r = s
        .send(s.as_app(
            &k,
            s.request(Method::PUT, &format!("/{}/data/default", k.app)),
        ))
        .await
        .expect(201);
    assert_eq!(r.body, json!({"ok": true}));
}

#[tokio::test]
async fn https_serves_localhost_and_refuses_untrusting_clients() {
    let s = TestServer::builder().tls().start().await;
    let certs = s.certs().unwrap();
    let port = s.url("").rsplit(':').next().unwrap().to_owned();
    let by_name = Client::with_ca(
        &format!("https://localhost:{port}"),
        certs.ca_pem.as_bytes(),
    );
    by_name.get("/_health").await.expect(200);
    // A client that does not trust the certificate cannot talk to it at all.
    let strict = reqwest::Client::builder().no_proxy().build().unwrap();
    assert!(strict.get(s.url("/_health")).send().await.is_err());
    // Nor does plain HTTP reach the handlers on the TLS port: it is told to use https.
    let plain = reqwest::Client::builder().no_proxy().build().unwrap();
    let res = plain
        .get(format!("http://127.0.0.1:{port}/_health"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    assert_eq!(
        res.json::<serde_json::Value>().await.unwrap(),
        json!({"ok": false, "status": 400, "msg": "this port speaks HTTPS, and the request came as plain HTTP: use https://"})
    );
    // The port still speaks TLS to the next client.
    by_name.get("/_health").await.expect(200);
}

#[tokio::test]
async fn https_survives_a_restart_and_shuts_down_gracefully() {
    let mut s = TestServer::builder().tls().start().await;
    s.put("/cache/kept", None).await.expect(201);
    s.restart().await;
    s.put("/cache/kept", None).await.expect(409);
    s.stop().await;
}
