//! Storage: uploads (raw and multipart), downloads with Range and conditions, listing,
//! removal, path rules and pre-signed URLs.

use std::{sync::Arc, time::Duration};

use quintet_core::ManualClock;
use quintet_testkit::{Reply, TestServer};
use reqwest::Method;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn server_with(name: &str) -> TestServer {
    let s = TestServer::start().await;
    s.create("storage", name, None).await;
    s
}

async fn upload(
    s: &TestServer,
    path: &str,
    body: impl Into<reqwest::Body>,
    ct: Option<&str>,
) -> Reply {
    let mut req = s.request(Method::POST, path).body(body);
    if let Some(ct) = ct {
        req = req.header("content-type", ct);
    }
    s.send(req).await
}

async fn get_with(s: &TestServer, path: &str, headers: &[(&str, &str)]) -> Reply {
    let mut req = s.request(Method::GET, path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    s.send(req).await
}

/// One part of a form: name, file name, content type, bytes.
type Part<'a> = (&'a str, Option<&'a str>, Option<&'a str>, &'a [u8]);

/// A `multipart/form-data` body of `parts`, in order, and its content type.
fn form(parts: &[Part<'_>]) -> (String, Vec<u8>) {
    let boundary = "----quintet-test-boundary-7MA4YWxkTrZu0gW";
    let mut body = Vec::new();
    for (name, file_name, ct, bytes) in parts {
        body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        let mut disposition = format!("Content-Disposition: form-data; name=\"{name}\"");
        if let Some(f) = file_name {
            disposition.push_str(&format!("; filename=\"{f}\""));
        }
        body.extend_from_slice(disposition.as_bytes());
        body.extend_from_slice(b"\r\n");
        if let Some(ct) = ct {
            body.extend_from_slice(format!("Content-Type: {ct}\r\n").as_bytes());
        }
        body.extend_from_slice(b"\r\n");
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

/// Send `request_line` with no normalisation of its path (clients fold `..` away), and
/// read the status and JSON body.
async fn raw(s: &TestServer, method: &str, target: &str) -> (u16, Value) {
    let addr = s.url("").trim_start_matches("http://").to_owned();
    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let req = format!(
        "{method} {target} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 1\r\n\
         Connection: close\r\n\r\nx"
    );
    tcp.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tcp.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out);
    let status = text[9..12].parse().unwrap();
    let body = text.split_once("\r\n\r\n").unwrap().1;
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

fn not_found(path: &str, instance: &str) -> Value {
    json!({
        "ok": false,
        "status": 404,
        "msg": format!("object \"{path}\" does not exist in storage instance \"{instance}\"")
    })
}

#[tokio::test]
async fn raw_upload_streams_back_with_its_headers() {
    let s = server_with("files").await;
    let content: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
    let r = upload(
        &s,
        "/storage/files/docs/report.bin",
        content.clone(),
        Some("application/x-report"),
    )
    .await
    .expect(200);
    assert_eq!(r.body, json!({"ok": true}));
    let etag = r.header("etag").unwrap().to_owned();
    assert!(
        etag.starts_with('"') && etag.ends_with('"') && etag.len() == 66,
        "{etag}"
    );

    let res = s
        .http()
        .get(s.url("/storage/files/docs/report.bin"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let h = res.headers().clone();
    assert_eq!(h["content-type"], "application/x-report");
    assert_eq!(h["content-length"], "300000");
    assert_eq!(h["etag"].to_str().unwrap(), etag);
    assert_eq!(h["accept-ranges"], "bytes");
    let modified = h["last-modified"].to_str().unwrap();
    assert!(modified.ends_with(" GMT"), "{modified}");
    assert_eq!(res.bytes().await.unwrap().as_ref(), &content[..]);
}

#[tokio::test]
async fn the_content_type_is_the_uploads_else_guessed_from_the_extension() {
    let s = server_with("files").await;
    let cases = [
        ("a/photo.png", None, "image/png"),
        ("notes.txt", None, "text/plain"),
        ("data.json", Some("application/json"), "application/json"),
        (
            "page.html",
            Some("text/plain; charset=utf-8"),
            "text/plain; charset=utf-8",
        ),
        ("no-extension", None, "application/octet-stream"),
        ("odd.zzzunknown", None, "application/octet-stream"),
    ];
    for (path, given, expected) in cases {
        upload(&s, &format!("/storage/files/{path}"), "x", given)
            .await
            .expect(200);
        let r = s.get(&format!("/storage/files/{path}")).await.expect(200);
        assert_eq!(r.header("content-type"), Some(expected), "{path}");
    }
    let r = upload(&s, "/storage/files/bad", "x", Some("té/xt")).await;
    assert_eq!(r.status, 422, "{}", r.text);
}

#[tokio::test]
async fn multipart_uploads_store_the_file_part() {
    let s = server_with("files").await;
    // To a path: the URL names the object; the part's content type is kept.
    let (ct, body) = form(&[
        ("note", None, None, b"ignored"),
        (
            "file",
            Some("local-name.bin"),
            Some("image/gif"),
            b"GIF89a...",
        ),
    ]);
    upload(&s, "/storage/files/img/anim.gif", body, Some(&ct))
        .await
        .expect(200);
    let r = s.get("/storage/files/img/anim.gif").await.expect(200);
    assert_eq!(r.text, "GIF89a...");
    assert_eq!(r.header("content-type"), Some("image/gif"));

    // To the instance (old hyper-connect): the file name, in the path field's folder.
    let (ct, body) = form(&[("file", Some("hello.txt"), None, b"hello")]);
    upload(&s, "/storage/files", body, Some(&ct))
        .await
        .expect(200);
    let r = s.get("/storage/files/hello.txt").await.expect(200);
    assert_eq!(
        (r.text.as_str(), r.header("content-type")),
        ("hello", Some("text/plain"))
    );

    let (ct, body) = form(&[
        ("path", None, None, b"reports/2024"),
        ("file", Some("q1.csv"), Some("text/csv"), b"a,b\n1,2\n"),
    ]);
    upload(&s, "/storage/files", body, Some(&ct))
        .await
        .expect(200);
    let r = s
        .get("/storage/files/reports/2024/q1.csv")
        .await
        .expect(200);
    assert_eq!(r.text, "a,b\n1,2\n");
    assert_eq!(r.header("content-type"), Some("text/csv"));

    // A byte order mark before the path field's text is not part of the path.
    let (ct, body) = form(&[
        ("path", None, None, "\u{feff}bom".as_bytes()),
        ("file", Some("b.txt"), None, b"b"),
    ]);
    upload(&s, "/storage/files", body, Some(&ct))
        .await
        .expect(200);
    s.get("/storage/files/bom/b.txt").await.expect(200);
}

#[tokio::test]
async fn refused_forms_store_nothing() {
    let s = server_with("files").await;
    let cases: Vec<(Vec<Part<'_>>, &str)> = vec![
        (
            vec![("path", None, None, b"x")],
            "the form has no \"file\" field: send the object as a file part named \"file\"",
        ),
        (
            vec![
                ("file", Some("late.txt"), None, b"data"),
                ("path", None, None, b"docs"),
            ],
            "the form's \"path\" field comes after its \"file\" field: put the path field \
             first, so the object is named before its bytes arrive",
        ),
        (
            vec![
                ("file", Some("one.txt"), None, b"1"),
                ("file", Some("two.txt"), None, b"2"),
            ],
            "the form has more than one \"file\" field: upload one file per request",
        ),
        (
            vec![
                ("path", None, None, b"\xff"),
                ("file", Some("f.txt"), None, b"data"),
            ],
            "the form's \"path\" field is not UTF-8 text",
        ),
    ];
    for (parts, msg) in cases {
        let (ct, body) = form(&parts);
        let r = upload(&s, "/storage/files", body, Some(&ct))
            .await
            .expect(422);
        assert_eq!(r.body, json!({"ok": false, "status": 422, "msg": msg}));
    }
    let r = upload(&s, "/storage/files", "raw bytes", Some("text/plain"))
        .await
        .expect(422);
    assert_eq!(
        r.body,
        json!({"ok": false, "status": 422, "msg": "a body sent to /storage/files must be \
            multipart/form-data with a \"file\" field and an optional \"path\" field; to \
            upload raw bytes, name the object: POST /storage/files/<path>"})
    );
    let r = upload(
        &s,
        "/storage/files/x",
        "--nope--",
        Some("multipart/form-data; boundary=b"),
    )
    .await
    .expect(400);
    assert_eq!(r.body["status"], 400);
    let r = s.get("/storage/files").await.expect(200);
    assert_eq!(r.body, json!({"ok": true, "objects": []}));
}

#[tokio::test]
async fn single_ranges_are_served_as_206() {
    let s = server_with("files").await;
    upload(&s, "/storage/files/digits", "0123456789", None)
        .await
        .expect(200);
    let cases = [
        ("bytes=0-3", "0123", "bytes 0-3/10"),
        ("bytes=4-4", "4", "bytes 4-4/10"),
        ("bytes=7-", "789", "bytes 7-9/10"),
        ("bytes=-2", "89", "bytes 8-9/10"),
        ("bytes=8-1000", "89", "bytes 8-9/10"),
    ];
    for (range, body, content_range) in cases {
        let r = get_with(&s, "/storage/files/digits", &[("range", range)])
            .await
            .expect(206);
        assert_eq!(r.text, body, "{range}");
        assert_eq!(r.header("content-range"), Some(content_range), "{range}");
        assert_eq!(r.header("content-length").unwrap(), body.len().to_string());
    }
    // Malformed or multiple ranges are ignored: the whole object.
    for range in ["bytes=5-2", "bytes=0-1,4-5", "lines=1-2", "bytes=x-"] {
        let r = get_with(&s, "/storage/files/digits", &[("range", range)])
            .await
            .expect(200);
        assert_eq!(r.text, "0123456789", "{range}");
    }
    let r = get_with(&s, "/storage/files/digits", &[("range", "bytes=10-")])
        .await
        .expect(416);
    assert_eq!(r.header("content-range"), Some("bytes */10"));
    assert_eq!(
        r.body,
        json!({"ok": false, "status": 416, "msg": "the range bytes=10- cannot be served: the \
            object is 10 bytes long; ask for bytes 0 to 9 or leave out the Range header"})
    );
}

#[tokio::test]
async fn conditional_requests_answer_304_or_skip_the_range() {
    let s = server_with("files").await;
    let r = upload(&s, "/storage/files/doc", "version one", None)
        .await
        .expect(200);
    let etag = r.header("etag").unwrap().to_owned();
    let full = s.get("/storage/files/doc").await.expect(200);
    let modified = full.header("last-modified").unwrap().to_owned();

    for inm in [etag.as_str(), "*", &format!("\"other\", W/{etag}")] {
        let r = get_with(&s, "/storage/files/doc", &[("if-none-match", inm)])
            .await
            .expect(304);
        assert_eq!(r.text, "");
        assert_eq!(r.header("etag"), Some(etag.as_str()));
    }
    let r = get_with(&s, "/storage/files/doc", &[("if-none-match", "\"stale\"")])
        .await
        .expect(200);
    assert_eq!(r.text, "version one");
    get_with(
        &s,
        "/storage/files/doc",
        &[("if-modified-since", &modified)],
    )
    .await
    .expect(304);
    get_with(
        &s,
        "/storage/files/doc",
        &[("if-modified-since", "Mon, 01 Jan 2001 00:00:00 GMT")],
    )
    .await
    .expect(200);
    // If-None-Match decides over If-Modified-Since.
    get_with(
        &s,
        "/storage/files/doc",
        &[
            ("if-none-match", "\"stale\""),
            ("if-modified-since", &modified),
        ],
    )
    .await
    .expect(200);

    let r = get_with(
        &s,
        "/storage/files/doc",
        &[("range", "bytes=0-6"), ("if-range", &etag)],
    )
    .await
    .expect(206);
    assert_eq!(r.text, "version");
    // The object changed since the client's copy: the whole new object, not a range of it.
    upload(&s, "/storage/files/doc", "version two", None)
        .await
        .expect(200);
    let r = get_with(
        &s,
        "/storage/files/doc",
        &[("range", "bytes=0-6"), ("if-range", &etag)],
    )
    .await
    .expect(200);
    assert_eq!(r.text, "version two");
    get_with(&s, "/storage/files/doc", &[("if-none-match", &etag)])
        .await
        .expect(200);
}

#[tokio::test]
async fn head_answers_the_headers_of_a_get() {
    let s = server_with("files").await;
    upload(&s, "/storage/files/a.txt", "twelve bytes", None)
        .await
        .expect(200);
    let r = s
        .send(s.request(Method::HEAD, "/storage/files/a.txt"))
        .await
        .expect(200);
    assert_eq!(r.text, "");
    assert_eq!(r.header("content-length"), Some("12"));
    assert_eq!(r.header("content-type"), Some("text/plain"));
    assert!(r.header("etag").is_some() && r.header("last-modified").is_some());
    let r = s.send(s.request(Method::HEAD, "/storage/files/nope")).await;
    assert_eq!(r.status, 404);
}

#[tokio::test]
async fn missing_objects_and_instances_are_404_json() {
    let s = server_with("files").await;
    let r = s.get("/storage/files/no/such.txt").await.expect(404);
    assert_eq!(r.body, not_found("no/such.txt", "files"));
    let r = s.delete("/storage/files/no/such.txt").await.expect(404);
    assert_eq!(r.body, not_found("no/such.txt", "files"));
    let r = get_with(&s, "/storage/files/nope", &[("range", "bytes=0-1")])
        .await
        .expect(404);
    assert_eq!(r.body, not_found("nope", "files"));
    for r in [
        s.get("/storage/ghost/a").await,
        upload(&s, "/storage/ghost/a", "x", None).await,
        s.get("/storage/ghost").await,
        s.delete("/storage/ghost/a").await,
    ] {
        let r = r.expect(404);
        assert_eq!(
            r.body,
            json!({"ok": false, "status": 404, "msg": "storage instance \"ghost\" does not \
                exist; create it with PUT /storage/ghost"})
        );
    }
}

#[tokio::test]
async fn remove_deletes_the_object_only() {
    let s = server_with("files").await;
    upload(&s, "/storage/files/a", "1", None).await.expect(200);
    upload(&s, "/storage/files/a/b", "2", None)
        .await
        .expect(200);
    let r = s.delete("/storage/files/a").await.expect(200);
    assert_eq!(r.body, json!({"ok": true}));
    s.get("/storage/files/a").await.expect(404);
    assert_eq!(s.get("/storage/files/a/b").await.expect(200).text, "2");
    s.delete("/storage/files/a").await.expect(404);
}

#[tokio::test]
async fn listing_pages_through_objects_in_path_order() {
    let s = server_with("files").await;
    for path in ["b.txt", "a/2.txt", "a/1.txt", "a-b", "c/d/e.json"] {
        upload(&s, &format!("/storage/files/{path}"), path, None)
            .await
            .expect(200);
    }
    let r = s.get("/storage/files").await.expect(200);
    let paths: Vec<&str> = r.body["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["a-b", "a/1.txt", "a/2.txt", "b.txt", "c/d/e.json"]);
    let first = &r.body["objects"][0];
    assert_eq!(first["size"], 3);
    assert_eq!(first["contentType"], "application/octet-stream");
    assert_eq!(first["etag"].as_str().unwrap().len(), 64);
    let modified = first["modified"].as_str().unwrap();
    assert!(
        modified.ends_with('Z') && modified.len() == 24,
        "{modified}"
    );
    assert_eq!(
        first.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["path", "size", "contentType", "etag", "modified"]
    );

    let page = |q: &'static str| {
        let s = &s;
        async move {
            let r = s.get(&format!("/storage/files?{q}")).await.expect(200);
            r.body["objects"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| o["path"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(page("prefix=a/").await, ["a/1.txt", "a/2.txt"]);
    assert_eq!(page("limit=2").await, ["a-b", "a/1.txt"]);
    assert_eq!(page("limit=2&after=a/1.txt").await, ["a/2.txt", "b.txt"]);
    assert_eq!(page("prefix=a&after=a-b").await, ["a/1.txt", "a/2.txt"]);
    assert_eq!(page("prefix=c%2Fd%2F").await, ["c/d/e.json"]);
    assert!(page("prefix=zzz").await.is_empty());

    let r = s.get("/storage/files?limit=5000").await.expect(422);
    assert_eq!(
        r.body,
        json!({"ok": false, "status": 422, "msg": "limit \"5000\" is not valid: list from 1 to \
            1000 objects per request, and pass the last path as after= for the next page"})
    );
    s.get("/storage/files?prefix=%01").await.expect(422);
}

#[tokio::test]
async fn paths_that_could_escape_or_mislead_are_422_and_store_nothing() {
    let s = server_with("files").await;
    let long = "a".repeat(1025);
    let targets = [
        "/storage/files/a/../b",
        "/storage/files/../escape",
        "/storage/files/a/%2E%2E/b",
        "/storage/files/./a",
        "/storage/files/a//b",
        "/storage/files/a/",
        "/storage/files/a%5Cb",
        "/storage/files/a%00b",
        "/storage/files/a%0Ab",
        &format!("/storage/files/{long}"),
    ];
    for target in targets {
        for method in ["POST", "GET", "DELETE"] {
            let (status, body) = raw(&s, method, target).await;
            assert_eq!(status, 422, "{method} {target}: {body}");
            assert_eq!(body["status"], 422);
        }
    }
    let (_, body) = raw(&s, "POST", "/storage/files/a/../b").await;
    assert_eq!(
        body,
        json!({"ok": false, "status": 422, "msg": "object path \"a/../b\" has a \"..\" segment: \
            relative segments are not allowed, name the object by its full path"})
    );
    let r = s.get("/storage/files").await.expect(200);
    assert_eq!(r.body["objects"], json!([]));
    // Percent-encoded names are decoded; an encoded '/' separates segments.
    upload(
        &s,
        "/storage/files/dir%2Fname%20with%20space.txt",
        "x",
        None,
    )
    .await
    .expect(200);
    assert_eq!(
        s.get("/storage/files/dir/name with space.txt")
            .await
            .expect(200)
            .text,
        "x"
    );
}

#[tokio::test]
async fn overwrites_are_whole_and_aborted_uploads_change_nothing() {
    let s = server_with("files").await;
    upload(&s, "/storage/files/doc", "first", None)
        .await
        .expect(200);
    // Large enough to live in a file of its own (small objects live in the database).
    let second: Vec<u8> = b"second, longer ".repeat(10_000);
    upload(&s, "/storage/files/doc", second.clone(), None)
        .await
        .expect(200);
    let got = s
        .http()
        .get(s.url("/storage/files/doc"))
        .send()
        .await
        .unwrap();
    assert_eq!(got.bytes().await.unwrap(), second);

    // A client that dies mid-upload: the server sees the body break off.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = vec![
        Ok(vec![b'x'; 64 * 1024]),
        Ok(vec![b'y'; 64 * 1024]),
        Err(std::io::Error::other("client crashed")),
    ];
    let body = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
    let sent = s
        .request(Method::POST, "/storage/files/doc")
        .header("content-length", "1000000")
        .body(body)
        .send()
        .await;
    assert!(sent.is_err() || sent.is_ok_and(|r| r.status() != 200));
    let got = s
        .http()
        .get(s.url("/storage/files/doc"))
        .send()
        .await
        .unwrap();
    assert_eq!(got.bytes().await.unwrap(), second);
    let r = s.get("/storage/files").await.expect(200);
    assert_eq!(r.body["objects"].as_array().unwrap().len(), 1);
    // No partial file is left beside the object's one blob.
    let mut blob_files = 0;
    for _ in 0..100 {
        blob_files = std::fs::read_dir(s.data_dir().join("storage"))
            .unwrap()
            .flat_map(|d| std::fs::read_dir(d.unwrap().path()).unwrap())
            .count();
        if blob_files == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(blob_files, 1);
}

#[tokio::test]
async fn uploads_are_not_bound_by_the_json_body_limit() {
    let s = TestServer::builder()
        .args(|a| a.max_body_bytes = Some(1024))
        .start()
        .await;
    s.create("storage", "files", None).await;
    let big = vec![7u8; 256 * 1024];
    upload(&s, "/storage/files/big.bin", big.clone(), None)
        .await
        .expect(200);
    let (ct, body) = form(&[("file", Some("f.bin"), None, &big)]);
    upload(&s, "/storage/files", body, Some(&ct))
        .await
        .expect(200);
    let r = s
        .http()
        .get(s.url("/storage/files/f.bin"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.bytes().await.unwrap().len(), big.len());
    // Other routes keep the limit.
    let pad = json!({"fields": ["t"], "pad": "x".repeat(2048)});
    s.put("/search/s", Some(pad)).await.expect(413);
}

fn split_url(url: &str) -> (String, String) {
    let rest = url.strip_prefix("http://").unwrap();
    let slash = rest.find('/').unwrap();
    (
        format!("http://{}", &rest[..slash]),
        rest[slash..].to_owned(),
    )
}

#[tokio::test]
async fn presigned_urls_download_and_upload_without_other_credentials() {
    let s = server_with("files").await;
    upload(&s, "/storage/files/dir/report 1.pdf", "%PDF", None)
        .await
        .expect(200);
    let r = s
        .get("/storage/files/dir/report 1.pdf?useSignedUrl=true")
        .await
        .expect(200);
    assert_eq!(r.body["ok"], true);
    assert_eq!(r.body.as_object().unwrap().len(), 2);
    let url = r.body["url"].as_str().unwrap();
    let (base, path) = split_url(url);
    assert_eq!(base, s.url(""));
    assert!(
        path.starts_with("/_presigned/storage/files/dir/report%201.pdf?expires="),
        "{url}"
    );
    let got = s.http().get(url).send().await.unwrap();
    assert_eq!(got.status(), 200);
    assert_eq!(got.headers()["content-type"], "application/pdf");
    assert_eq!(got.text().await.unwrap(), "%PDF");
    let r = s
        .send(s.http().get(url).header("range", "bytes=1-2"))
        .await
        .expect(206);
    assert_eq!(r.text, "PD");
    s.send(s.http().head(url)).await.expect(200);

    // Upload: POST asks for the URL; PUT or POST of the raw body to it stores the object.
    let r = s
        .send(s.request(
            Method::POST,
            "/storage/files/up/new.txt?useSignedUrl=true&expires=60",
        ))
        .await
        .expect(200);
    let put_url = r.body["url"].as_str().unwrap().to_owned();
    s.send(s.http().put(&put_url).body("via put"))
        .await
        .expect(200);
    assert_eq!(
        s.get("/storage/files/up/new.txt").await.expect(200).text,
        "via put"
    );
    let r = s
        .send(
            s.http()
                .post(&put_url)
                .header("content-type", "text/x-mine")
                .body("via post"),
        )
        .await
        .expect(200);
    assert_eq!(r.body, json!({"ok": true}));
    let r = s.get("/storage/files/up/new.txt").await.expect(200);
    assert_eq!(
        (r.text.as_str(), r.header("content-type")),
        ("via post", Some("text/x-mine"))
    );
}

#[tokio::test]
async fn presigned_urls_refuse_tampering_expiry_and_other_operations() {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let s = TestServer::builder().clock(clock.clone()).start().await;
    s.create("storage", "files", None).await;
    upload(&s, "/storage/files/a.txt", "secret", None)
        .await
        .expect(200);
    let r = s
        .get("/storage/files/a.txt?useSignedUrl=true&expires=600")
        .await
        .expect(200);
    let url = r.body["url"].as_str().unwrap().to_owned();
    assert!(url.contains("expires=1700000600&"), "{url}");
    let invalid = json!({"ok": false, "status": 403, "msg": "this pre-signed URL is not valid: \
        it was altered, is incomplete, or grants another operation, or its storage instance \
        no longer exists; ask for a new one"});

    let sig_at = url.find("sig=").unwrap() + 4;
    let flipped = if &url[sig_at..=sig_at] == "0" {
        "1"
    } else {
        "0"
    };
    let tampered = [
        format!("{}{flipped}{}", &url[..sig_at], &url[sig_at + 1..]),
        url.replace("a.txt", "b.txt"),
        url.replace("expires=1700000600", "expires=1800000600"),
        url.replace("/storage/files/", "/storage/other/"),
        url[..url.find("&sig=").unwrap()].to_owned(),
        url.replace("sig=", "sig=zz"),
    ];
    for t in tampered {
        let r = s.send(s.http().get(&t)).await.expect(403);
        assert_eq!(r.body, invalid, "{t}");
    }
    // A download URL does not upload.
    let r = s
        .send(s.http().put(&url).body("overwrite"))
        .await
        .expect(403);
    assert_eq!(r.body, invalid);
    assert_eq!(
        s.get("/storage/files/a.txt").await.expect(200).text,
        "secret"
    );

    s.send(s.http().get(&url)).await.expect(200);
    clock.advance(600_000);
    let r = s.send(s.http().get(&url)).await.expect(403);
    assert_eq!(
        r.body,
        json!({"ok": false, "status": 403, "msg": "this pre-signed URL expired at \
            2023-11-14T22:23:20.000Z; ask for a new one"})
    );

    for bad in ["0", "604801", "soon"] {
        let r = s
            .get(&format!(
                "/storage/files/a.txt?useSignedUrl=true&expires={bad}"
            ))
            .await;
        assert_eq!(r.status, 422, "{bad}: {}", r.text);
    }
    let r = s
        .get("/storage/files/a.txt?useSignedUrl=maybe")
        .await
        .expect(422);
    assert_eq!(
        r.body,
        json!({"ok": false, "status": 422, "msg": "useSignedUrl \"maybe\" is not valid: use true or false"})
    );
}

/// Without `expires`, a pre-signed URL lives one hour (issue 7, DESIGN): `expires=` is the
/// request's time plus 3600 s, for download and upload URLs alike.
#[tokio::test]
async fn presigned_urls_expire_after_an_hour_by_default() {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let s = TestServer::builder().clock(clock.clone()).start().await;
    s.create("storage", "files", None).await;
    upload(&s, "/storage/files/a.txt", "hello", None)
        .await
        .expect(200);
    let r = s
        .get("/storage/files/a.txt?useSignedUrl=true")
        .await
        .expect(200);
    let url = r.body["url"].as_str().unwrap().to_owned();
    assert!(url.contains("?expires=1700003600&"), "{url}");
    let r = s
        .send(s.request(Method::POST, "/storage/files/b.txt?useSignedUrl=true"))
        .await
        .expect(200);
    let put_url = r.body["url"].as_str().unwrap().to_owned();
    assert!(put_url.contains("?expires=1700003600&"), "{put_url}");

    clock.advance(3_599_000);
    s.send(s.http().get(&url)).await.expect(200);
    clock.advance(1_000);
    s.send(s.http().get(&url)).await.expect(403);
    s.send(s.http().put(&put_url).body("late"))
        .await
        .expect(403);
}

#[tokio::test]
async fn presigned_urls_use_the_public_url_and_die_with_their_instance() {
    let s = TestServer::builder()
        .args(|a| a.public_url = Some("https://files.example.com".into()))
        .start()
        .await;
    s.create("storage", "files", None).await;
    let r = s
        .get("/storage/files/x?useSignedUrl=true")
        .await
        .expect(200);
    let url = r.body["url"].as_str().unwrap();
    assert!(
        url.starts_with("https://files.example.com/_presigned/storage/files/x?"),
        "{url}"
    );
    let local = url.replace("https://files.example.com", &s.url(""));
    s.send(s.http().get(&local)).await.expect(404); // no object yet: the usual 404
    upload(&s, "/storage/files/x", "1", None).await.expect(200);
    s.send(s.http().get(&local)).await.expect(200);
    s.delete("/storage/files").await.expect(200);
    s.create("storage", "files", None).await;
    upload(&s, "/storage/files/x", "2", None).await.expect(200);
    let r = s.send(s.http().get(&local)).await.expect(403);
    assert_eq!(r.body["status"], 403);
}

#[tokio::test]
async fn destroying_the_instance_removes_its_objects() {
    let s = server_with("files").await;
    upload(&s, "/storage/files/a", "1", None).await.expect(200);
    s.delete("/storage/files").await.expect(200);
    s.create("storage", "files", None).await;
    s.get("/storage/files/a").await.expect(404);
    let r = s.get("/storage/files").await.expect(200);
    assert_eq!(r.body["objects"], json!([]));
}

#[tokio::test]
async fn objects_and_signed_urls_survive_a_restart() {
    let mut s = server_with("files").await;
    upload(&s, "/storage/files/keep.txt", "kept", None)
        .await
        .expect(200);
    let r = s
        .get("/storage/files/keep.txt?useSignedUrl=true")
        .await
        .expect(200);
    let (_, path) = split_url(r.body["url"].as_str().unwrap());
    s.restart().await;
    assert_eq!(
        s.get("/storage/files/keep.txt").await.expect(200).text,
        "kept"
    );
    assert_eq!(s.get(&path).await.expect(200).text, "kept");
}

#[tokio::test]
async fn application_form_needs_the_apps_token_and_presigns_urls_that_need_none() {
    let s = TestServer::start().await;
    let k = s.new_app().await;
    let other = s.new_app().await;
    let base = format!("/{}/storage/files", k.app);
    s.send(s.as_app(&k, s.request(Method::PUT, &base)))
        .await
        .expect(201);
    // No token → 401; a valid key of another application → 403.
    s.send(s.request(Method::POST, &format!("{base}/a.txt")).body("x"))
        .await
        .expect(401);
    s.send(s.as_app(
        &other,
        s.request(Method::POST, &format!("{base}/a.txt")).body("x"),
    ))
    .await
    .expect(403);
    let r = s
        .send(
            s.as_app(
                &k,
                s.request(Method::POST, &format!("{base}/dir/a.txt"))
                    .header("content-type", "text/plain")
                    .body("app bytes"),
            ),
        )
        .await
        .expect(200);
    assert_eq!(r.body, json!({"ok": true}));
    let r = s
        .send(s.as_app(&k, s.request(Method::GET, &format!("{base}/dir/a.txt"))))
        .await
        .expect(200);
    assert_eq!(r.text, "app bytes");
    // The domain form's instance of the same name is another instance.
    s.get("/storage/files/dir/a.txt").await.expect(404);

    // A pre-signed URL handed out in the application form works with no token at all.
    let r = s
        .send(s.as_app(
            &k,
            s.request(Method::GET, &format!("{base}/dir/a.txt?useSignedUrl=true")),
        ))
        .await
        .expect(200);
    let url = r.body["url"].as_str().unwrap();
    let (_, path) = split_url(url);
    assert!(
        path.starts_with(&format!("/_presigned/{}/storage/files/dir/a.txt?", k.app)),
        "{url}"
    );
    let got = s.send(s.http().get(url)).await.expect(200);
    assert_eq!(got.text, "app bytes");
    let r = s
        .send(s.as_app(
            &k,
            s.request(Method::POST, &format!("{base}/up.bin?useSignedUrl=true")),
        ))
        .await
        .expect(200);
    let put_url = r.body["url"].as_str().unwrap().to_owned();
    s.send(s.http().put(&put_url).body("uploaded"))
        .await
        .expect(200);
    let r = s
        .send(s.as_app(&k, s.request(Method::GET, &format!("{base}/up.bin"))))
        .await
        .expect(200);
    assert_eq!(r.text, "uploaded");
}

/// An uploaded HTML page is served as such, but in a sandbox: it cannot run script on the
/// server's origin (where the console keeps its token), and nothing is sniffed.
#[tokio::test]
async fn uploaded_html_cannot_run_on_the_servers_origin() {
    let s = TestServer::start().await;
    s.create("storage", "site", None).await.expect(201);
    let page = "<script>fetch('/_admin/apps')</script>";
    upload(&s, "/storage/site/evil.html", page, Some("text/html"))
        .await
        .expect(200);
    let r = s.get("/storage/site/evil.html").await.expect(200);
    assert_eq!(r.header("content-type"), Some("text/html"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    let csp = r.header("content-security-policy").unwrap();
    assert!(
        csp.starts_with("sandbox;") && csp.contains("default-src 'none'"),
        "{csp}"
    );
    // The same through a pre-signed URL.
    let url = s
        .get("/storage/site/evil.html?useSignedUrl=true")
        .await
        .expect(200)
        .body["url"]
        .as_str()
        .unwrap()
        .to_owned();
    let got = s.http().get(&url).send().await.unwrap();
    assert_eq!(got.headers()["content-security-policy"], csp);
}
