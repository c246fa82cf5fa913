//! Two `quintet serve` processes sharing a PostgreSQL registry and S3 storage: what one
//! stores, the other serves.

use std::path::Path;

use quintet_testkit::{Process, engines};
use reqwest::Method;

use crate::BIN;

fn bin() -> &'static Path {
    Path::new(BIN)
}

#[tokio::test]
async fn two_nodes_share_objects_on_s3() {
    let Some(pg) = engines::postgres("two_nodes_share_objects_on_s3").await else {
        return;
    };
    let Some(s3) = engines::s3("two_nodes_share_objects_on_s3") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let with_keys = format!(
        "s3://{}/{}?endpoint={}&region={}&access_key_id={}&secret_access_key={}",
        s3.bucket, s3.prefix, s3.endpoint, s3.region, s3.key, s3.secret
    );
    // Node A has its credentials in the URL, node B from the standard AWS variables.
    let a = Process::spawn(
        bin(),
        &dir.path().join("a"),
        &["--registry", pg.url(), "--storage", &with_keys],
    );
    let without_keys = format!(
        "s3://{}/{}?endpoint={}&region={}",
        s3.bucket, s3.prefix, s3.endpoint, s3.region
    );
    let b = Process::spawn_with_env(
        bin(),
        &dir.path().join("b"),
        &["--registry", pg.url()],
        &[
            ("QUINTET_STORAGE", &without_keys),
            ("AWS_ACCESS_KEY_ID", &s3.key),
            ("AWS_SECRET_ACCESS_KEY", &s3.secret),
        ],
    );

    a.put("/storage/media", None).await.expect(201);
    let bytes: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let up = a
        .request(Method::POST, "/storage/media/docs/report.pdf")
        .header("content-type", "application/pdf")
        .body(bytes.clone());
    a.send(up).await.expect(200);

    // Through B: the whole object with its metadata, then a range.
    let res = b
        .http()
        .get(b.url("/storage/media/docs/report.pdf"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "application/pdf");
    assert_eq!(res.headers()["content-length"], "300000");
    let etag = res.headers()["etag"].to_str().unwrap().to_owned();
    assert_eq!(res.bytes().await.unwrap(), bytes);
    let res = b
        .http()
        .get(b.url("/storage/media/docs/report.pdf"))
        .header("range", "bytes=1000-1999")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 206);
    assert_eq!(res.headers()["content-range"], "bytes 1000-1999/300000");
    assert_eq!(res.headers()["etag"], etag.as_str());
    assert_eq!(res.bytes().await.unwrap(), bytes[1000..2000]);

    // A pre-signed URL from B points at the S3 store and serves the bytes A stored.
    let signed = b
        .get("/storage/media/docs/report.pdf?useSignedUrl=true")
        .await
        .expect(200);
    let url = signed.body["url"].as_str().unwrap();
    assert!(url.starts_with(&s3.endpoint), "{url}");
    let res = reqwest::get(url).await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.bytes().await.unwrap(), bytes);

    // A pre-signed upload URL from A: the client PUTs to S3, and B serves and lists it.
    let signed = a
        .send(a.request(
            Method::POST,
            "/storage/media/docs/direct.txt?useSignedUrl=true",
        ))
        .await
        .expect(200);
    let url = signed.body["url"].as_str().unwrap();
    assert!(url.starts_with(&s3.endpoint), "{url}");
    let res = reqwest::Client::new()
        .put(url)
        .header("content-type", "text/plain")
        .body("straight to the bucket")
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success(), "{}", res.status());
    let direct = b.get("/storage/media/docs/direct.txt").await.expect(200);
    assert_eq!(direct.text, "straight to the bucket");
    assert_eq!(direct.header("content-type"), Some("text/plain"));
    let listed = b.get("/storage/media?prefix=docs/").await.expect(200);
    let objects = listed.body["objects"].as_array().unwrap();
    let paths: Vec<_> = objects
        .iter()
        .map(|o| o["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        ["docs/direct.txt", "docs/report.pdf"],
        "{}",
        listed.text
    );
    let page = a
        .get("/storage/media?prefix=docs/&after=docs/direct.txt&limit=1")
        .await
        .expect(200);
    assert_eq!(
        page.body["objects"][0]["path"], "docs/report.pdf",
        "{}",
        page.text
    );
    assert_eq!(page.body["objects"][0]["size"], 300_000, "{}", page.text);

    // quintet's own pre-signed route serves nothing for S3 storage: its URLs are S3's.
    let own = a
        .get("/_presigned/storage/media/docs/report.pdf?expires=99999999999&sig=00")
        .await
        .expect(403);
    assert!(own.text.contains("point at the S3 store"), "{}", own.text);

    // A delete through B is seen by A.
    b.delete("/storage/media/docs/report.pdf").await.expect(200);
    a.get("/storage/media/docs/report.pdf").await.expect(404);
    b.delete("/storage/media/docs/report.pdf").await.expect(404);
    a.delete("/storage/media").await.expect(200);
}

#[test]
fn s3_storage_without_a_shared_registry_is_refused() {
    let out = std::process::Command::new(BIN)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            "/nonexistent/x",
        ])
        .args([
            "--storage",
            "s3://b?endpoint=http://127.0.0.1:1&access_key_id=k&secret_access_key=hidden",
        ])
        .env_remove("QUINTET_REGISTRY")
        .env_remove("QUINTET_CONFIG")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--registry postgres://"), "{err}");
    assert!(!err.contains("hidden"), "{err}");
}
