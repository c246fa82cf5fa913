//! `GET /_admin/export` and `POST /_admin/import` over HTTP: who may call them, and each
//! refusal as `(call) → (status, msg)`; an import that is refused changes nothing.

use quintet_testkit::TestServer;
use reqwest::Method;
use serde_json::json;

async fn export(s: &TestServer, query: &str) -> (u16, Vec<u8>) {
    let res = s
        .as_admin(s.request(Method::GET, &format!("/_admin/export{query}")))
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    (status, res.bytes().await.unwrap().to_vec())
}

async fn import(s: &TestServer, query: &str, body: Vec<u8>) -> quintet_testkit::Reply {
    s.send(
        s.as_admin(s.request(Method::POST, &format!("/_admin/import{query}")))
            .body(body),
    )
    .await
}

#[tokio::test]
async fn export_and_import_refusals() {
    let s = TestServer::start().await;
    s.create("data", "movies", None).await.expect(201);
    s.post("/data/movies", json!({"_id": "alien", "year": 1979}))
        .await
        .expect(201);
    let (status, whole) = export(&s, "").await;
    assert_eq!(status, 200);
    assert!(
        whole.starts_with(
            format!("QUINTET-ARCHIVE {}\n", quintet_core::archive::VERSION).as_bytes()
        )
    );

    // Without the admin token.
    let res = s
        .request(Method::GET, "/_admin/export")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 401);
    s.send(
        s.request(Method::POST, "/_admin/import")
            .body(whole.clone()),
    )
    .await
    .expect(401);

    let (status, body) = export(&s, "?app=nope").await;
    assert_eq!(status, 404, "{}", String::from_utf8_lossy(&body));
    let (status, _) = export(&s, "?secrets=maybe").await;
    assert_eq!(status, 422);

    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        (
            "",
            b"PK\x03\x04 a zip file".to_vec(),
            422,
            "not a quintet archive",
        ),
        ("", whole[..40].to_vec(), 422, "truncated"),
        (
            "?merge=maybe",
            whole.clone(),
            422,
            "merge must be true or false",
        ),
        (
            "?app=copy",
            whole.clone(),
            422,
            "--app renames the application",
        ),
        ("", whole.clone(), 409, "exists on this server"),
    ];
    for (query, body, status, says) in cases {
        let r = import(&s, query, body).await;
        assert_eq!(r.status, status, "{query}: {}", r.text);
        assert!(
            r.body["msg"].as_str().unwrap().contains(says),
            "{query}: {}",
            r.text
        );
    }
    // Refused imports changed nothing; a merge of the same archive reads back equal.
    s.get("/data/movies/alien").await.expect(200);
    let r = import(&s, "?merge=true", whole.clone()).await.expect(200);
    assert_eq!(r.body["ok"], true);
    assert_eq!(r.body["instances"][0]["equal"], true, "{}", r.text);

    // Into another server, the domain form's instances are created.
    let other = TestServer::start().await;
    let r = import(&other, "", whole).await.expect(200);
    assert_eq!(r.body["instances"][0]["app"], "_domain", "{}", r.text);
    let doc = other.get("/data/movies/alien").await.expect(200);
    assert_eq!(doc.body["doc"]["year"], 1979);
}
