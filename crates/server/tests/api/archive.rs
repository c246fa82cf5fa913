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

/// `whole` written again with the document record number `at` (counting from 0) replaced
/// by `payload`, every checksum right: only the importer's own checks can refuse it.
fn with_document(whole: &[u8], at: usize, payload: &[u8]) -> Vec<u8> {
    use quintet_core::archive::{Encoder, Header, Kind, decode_all};
    let mut enc = Encoder::new();
    let mut out = Vec::new();
    let mut docs = 0;
    for record in decode_all(whole).unwrap() {
        let bytes = match record.kind {
            Kind::Header => enc.start(&record.parse::<Header>().unwrap()).unwrap(),
            Kind::End => continue,
            Kind::Doc => {
                docs += 1;
                let payload = if docs - 1 == at {
                    payload
                } else {
                    &record.payload[..]
                };
                enc.record(Kind::Doc, payload).unwrap()
            }
            kind => enc.record(kind, &record.payload).unwrap(),
        };
        out.extend_from_slice(&bytes);
    }
    out.extend_from_slice(&enc.finish().unwrap());
    out
}

/// Documents are written in batches while the next batch is read: an import of several
/// batches reads back equal, and one refused in its last batch, after earlier batches
/// were written, leaves nothing behind.
#[tokio::test]
async fn an_import_of_many_batches_is_whole_or_nothing() {
    const DOCS: usize = 25_000;
    let s = TestServer::start().await;
    s.create("data", "many", None).await.expect(201);
    for part in 0..DOCS / 5_000 {
        let docs: Vec<_> = (0..5_000)
            .map(|i| json!({"_id": format!("d{part}-{i:04}"), "n": i}))
            .collect();
        s.post("/data/many/_bulk", json!(docs)).await.expect(200);
    }
    let (status, whole) = export(&s, "").await;
    assert_eq!(status, 200);

    let bad = with_document(&whole, DOCS - 10, b"\"not a document\"");
    let other = TestServer::start().await;
    let r = import(&other, "", bad).await;
    assert_eq!(r.status, 422, "{}", r.text);
    assert!(
        r.body["msg"]
            .as_str()
            .unwrap()
            .contains("a document is not one"),
        "{}",
        r.text
    );
    other.get("/data/many").await.expect(404);

    let r = import(&other, "", whole).await.expect(200);
    assert_eq!(r.body["instances"][0]["count"], DOCS, "{}", r.text);
    assert_eq!(r.body["instances"][0]["importedCount"], DOCS, "{}", r.text);
    assert_eq!(r.body["instances"][0]["equal"], true, "{}", r.text);
    other.get("/data/many/d4-4999").await.expect(200);
}

/// Field names may hold control characters, index names may not: an index on such a field
/// gets a name without them, so the export that writes its definition and the import that
/// reads it back both take it (the export used to fail half-way through its body).
#[tokio::test]
async fn an_index_on_a_field_with_control_characters_travels() {
    let s = TestServer::start().await;
    s.create("data", "odd", None).await.expect(201);
    s.post("/data/odd", json!({"_id": "one", "a\u{1}b": 1}))
        .await
        .expect(201);
    s.post("/data/odd/_index", json!({"fields": ["a\u{1}b"]}))
        .await
        .expect(200);
    let r = s.get("/data/odd/_index").await.expect(200);
    let name = r.body["indexes"][0]["name"].as_str().unwrap().to_owned();
    assert!(name.starts_with("idx-a_b-"), "{name}");

    let (status, whole) = export(&s, "").await;
    assert_eq!(status, 200);
    let other = TestServer::start().await;
    let r = import(&other, "", whole).await.expect(200);
    assert_eq!(r.body["instances"][0]["equal"], true, "{}", r.text);
    let r = other.get("/data/odd/_index").await.expect(200);
    assert_eq!(r.body["indexes"][0]["name"], name.as_str(), "{}", r.text);
    let r = other
        .post("/data/odd/_query", json!({"selector": {"a\u{1}b": 1}}))
        .await
        .expect(200);
    assert_eq!(r.body["docs"][0]["_id"], "one", "{}", r.text);
}
