//! What each plan allows an application's storage and cache (instances, queues and
//! deliveries: `queue.rs`). Limits set small with `--plan-limits`.

use quintet_testkit::{AppKey, TestServer};
use reqwest::Method;
use serde_json::json;

async fn server() -> TestServer {
    TestServer::builder()
        .args(|a| {
            a.plan_limits = Some(json!({"starter": {
                "object_bytes": 1000,
                "stored_bytes_per_app": 2500,
                "cache_bytes_per_app": 300,
            }}))
        })
        .start()
        .await
}

fn upload(s: &TestServer, k: &AppKey, path: &str, body: reqwest::Body) -> reqwest::RequestBuilder {
    s.as_app(
        k,
        s.request(Method::POST, &format!("/{}/storage/files/{path}", k.app)),
    )
    .header("content-type", "application/octet-stream")
    .body(body)
}

/// A body of `n` bytes sent without a Content-Length (chunked).
fn chunked(n: usize) -> reqwest::Body {
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        vec![Ok(vec![b'x'; n / 2]), Ok(vec![b'y'; n - n / 2])];
    reqwest::Body::wrap_stream(futures_util::stream::iter(chunks))
}

#[tokio::test]
async fn objects_larger_than_the_plan_allows_are_refused_and_not_stored() {
    let s = server().await;
    let k = s.new_app().await;
    s.send(s.as_app(
        &k,
        s.request(Method::PUT, &format!("/{}/storage/files", k.app)),
    ))
    .await
    .expect(201);
    let r = s
        .send(upload(&s, &k, "big", vec![b'x'; 1001].into()))
        .await
        .expect(413);
    assert_eq!(
        r.body["msg"],
        "the object is larger than 1000 bytes, the largest object the starter plan allows; \
         upload a smaller one or move the account to a larger plan"
    );
    // Without a Content-Length the stream is cut at the limit.
    s.send(upload(&s, &k, "big", chunked(1001)))
        .await
        .expect(413);
    let get = s.as_app(
        &k,
        s.request(Method::GET, &format!("/{}/storage/files/big", k.app)),
    );
    s.send(get).await.expect(404);
    s.send(upload(&s, &k, "ok", chunked(1000)))
        .await
        .expect(200);
    // A pre-signed upload is held to the same limit.
    let signed = s
        .send(s.as_app(
            &k,
            s.request(
                Method::POST,
                &format!("/{}/storage/files/via-url?useSignedUrl=true", k.app),
            ),
        ))
        .await
        .expect(200);
    let url = signed.body["url"].as_str().unwrap();
    let r = s
        .send(s.http().put(url).body(vec![b'x'; 1001]))
        .await
        .expect(413);
    assert!(r.text.contains("starter plan"), "{}", r.text);
    s.send(s.http().put(url).body(vec![b'x'; 10]))
        .await
        .expect(200);
}

#[tokio::test]
async fn an_application_keeps_at_most_its_plans_bytes_of_objects() {
    let s = server().await;
    let k = s.new_app().await;
    s.send(s.as_app(
        &k,
        s.request(Method::PUT, &format!("/{}/storage/files", k.app)),
    ))
    .await
    .expect(201);
    s.send(upload(&s, &k, "a", vec![b'a'; 1000].into()))
        .await
        .expect(200);
    s.send(upload(&s, &k, "b", chunked(1000))).await.expect(200);
    let r = s
        .send(upload(&s, &k, "c", vec![b'c'; 1000].into()))
        .await
        .expect(403);
    assert_eq!(
        r.body["msg"],
        "this application keeps 1.9 KiB of storage objects, and its account's starter plan \
         allows 2.4 KiB per application; remove some or move the account to a larger plan"
    );
    // Streamed past what is left: cut, and nothing stored.
    s.send(upload(&s, &k, "c", chunked(600))).await.expect(403);
    s.send(upload(&s, &k, "c", chunked(500))).await.expect(200);
    // The domain application has no plan.
    s.create("storage", "files", None).await.expect(201);
    for n in 0..4 {
        let req = s
            .request(Method::POST, &format!("/storage/files/o{n}"))
            .body(vec![b'd'; 1000]);
        s.send(req).await.expect(200);
    }
}

#[tokio::test]
async fn an_applications_cache_entries_take_at_most_its_plans_share() {
    let s = server().await;
    let k = s.new_app().await;
    let base = format!("/{}/cache/c", k.app);
    s.send(s.as_app(&k, s.request(Method::PUT, &base)))
        .await
        .expect(201);
    let add = |key: String| {
        s.as_app(&k, s.request(Method::POST, &base))
            .json(&json!({"key": key, "value": {"pad": "x".repeat(80)}}))
    };
    // Each entry is its key plus 91 bytes of value: three fit in 300.
    for n in 0..3 {
        s.send(add(format!("k{n}"))).await.expect(201);
    }
    let r = s.send(add("k3".into())).await.expect(403);
    assert!(
        r.text
            .contains("of cache entries, and its account's starter plan allows 300 bytes"),
        "{}",
        r.text
    );
    // An update is held to it too; removing makes room once usage is measured again.
    let put = s
        .as_app(&k, s.request(Method::PUT, &format!("{base}/k0")))
        .json(&json!({"pad": "y".repeat(200)}));
    s.send(put).await.expect(403);
}
