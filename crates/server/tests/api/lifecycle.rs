//! Creating and destroying instances of every service type.

use quintet_testkit::TestServer;
use serde_json::{Value, json};

/// A valid creation body for each type.
fn configs() -> Vec<(&'static str, Option<Value>)> {
    vec![
        ("data", None),
        ("cache", None),
        (
            "search",
            Some(json!({"fields": ["title"], "storeFields": ["title"]})),
        ),
        (
            "queue",
            Some(json!({"target": "http://127.0.0.1:9/jobs", "secret": "s"})),
        ),
        ("storage", None),
    ]
}

#[tokio::test]
async fn create_conflict_destroy_missing_for_every_type() {
    let s = TestServer::start().await;
    for (kind, config) in configs() {
        let path = format!("/{kind}/things");
        let r = s.put(&path, config.clone()).await.expect(201);
        assert_eq!(r.body, json!({"ok": true}), "{kind}");

        let r = s.put(&path, config.clone()).await.expect(409);
        assert_eq!(r.body["ok"], false);
        assert_eq!(r.body["status"], 409);
        assert!(
            r.body["msg"].as_str().unwrap().contains("already exists"),
            "{}",
            r.text
        );

        let r = s.delete(&path).await.expect(200);
        assert_eq!(r.body, json!({"ok": true}));

        let r = s.delete(&path).await.expect(404);
        assert_eq!(r.body["status"], 404);
        assert!(
            r.body["msg"].as_str().unwrap().contains("does not exist"),
            "{}",
            r.text
        );

        // Gone means gone: it can be created again.
        s.put(&path, config).await.expect(201);
    }
}

#[tokio::test]
async fn the_same_name_may_exist_once_per_type() {
    let s = TestServer::start().await;
    for (kind, config) in configs() {
        s.put(&format!("/{kind}/shared"), config).await.expect(201);
    }
    s.delete("/cache/shared").await.expect(200);
    s.put("/data/shared", None).await.expect(409);
}

#[tokio::test]
async fn invalid_instance_names_are_422() {
    let s = TestServer::start().await;
    let long = "a".repeat(65);
    for name in [
        "Movies",
        "_private",
        "-dash",
        "a.b",
        "caf%C3%A9",
        long.as_str(),
    ] {
        let r = s.put(&format!("/data/{name}"), None).await;
        assert_eq!(r.status, 422, "{name}: {}", r.text);
        assert_eq!(r.body["status"], 422);
        assert!(
            r.body["msg"].as_str().unwrap().contains("name"),
            "{}",
            r.text
        );
    }
    s.put(&format!("/data/{}", "a".repeat(64)), None)
        .await
        .expect(201);
    s.put("/data/0-start_ok", None).await.expect(201);
}

#[tokio::test]
async fn search_configuration_is_validated_and_names_the_field() {
    let s = TestServer::start().await;
    let cases = [
        (None, "fields"),
        (Some(json!({})), "fields"),
        (Some(json!({"fields": []})), "fields"),
        (Some(json!({"fields": "title"})), "fields"),
        (Some(json!({"fields": [1, 2]})), "fields"),
        (
            Some(json!({"fields": ["title"], "storeFields": "title"})),
            "storeFields",
        ),
        (Some(json!(["title"])), "object"),
    ];
    for (body, field) in cases {
        let r = s.put("/search/idx", body.clone()).await;
        assert_eq!(r.status, 422, "{body:?}: {}", r.text);
        assert!(
            r.body["msg"].as_str().unwrap().contains(field),
            "{body:?}: {}",
            r.text
        );
    }
    // Nothing was created by the failures.
    s.delete("/search/idx").await.expect(404);
}

#[tokio::test]
async fn queue_configuration_is_validated_and_names_the_field() {
    let s = TestServer::start().await;
    let cases = [
        (None, "target"),
        (Some(json!({})), "target"),
        (Some(json!({"target": 42})), "target"),
        (Some(json!({"target": "ftp://host/x"})), "target"),
        (Some(json!({"target": "not a url"})), "target"),
        (
            Some(json!({"target": "http://w.example", "secret": 7})),
            "secret",
        ),
    ];
    for (body, field) in cases {
        let r = s.put("/queue/q", body.clone()).await;
        assert_eq!(r.status, 422, "{body:?}: {}", r.text);
        assert!(
            r.body["msg"].as_str().unwrap().contains(field),
            "{body:?}: {}",
            r.text
        );
    }
    s.delete("/queue/q").await.expect(404);
    s.put(
        "/queue/q",
        Some(json!({"target": "https://w.example/hook"})),
    )
    .await
    .expect(201);
}

#[tokio::test]
async fn instances_survive_a_restart() {
    let mut s = TestServer::start().await;
    for (kind, config) in configs() {
        s.put(&format!("/{kind}/kept"), config.clone())
            .await
            .expect(201);
        s.put(&format!("/{kind}/dropped"), config).await.expect(201);
        s.delete(&format!("/{kind}/dropped")).await.expect(200);
    }
    s.restart().await;
    for (kind, config) in configs() {
        s.put(&format!("/{kind}/kept"), config.clone())
            .await
            .expect(409);
        s.put(&format!("/{kind}/dropped"), config).await.expect(201);
        s.delete(&format!("/{kind}/kept")).await.expect(200);
    }
}

#[tokio::test]
async fn application_form_addresses_the_named_application() {
    let s = TestServer::start().await;
    let k = s.new_app().await;
    let app_path = format!("/{}/data/default", k.app);
    let as_app = |method| s.as_app(&k, s.request(method, &app_path));
    // The domain form's instances are not visible through an application, nor the reverse.
    s.put("/data/default", None).await.expect(201);
    s.send(as_app(reqwest::Method::DELETE)).await.expect(404);
    s.send(as_app(reqwest::Method::PUT)).await.expect(201);
    s.delete("/data/default").await.expect(200);
    s.delete("/data/default").await.expect(404);
    s.send(as_app(reqwest::Method::DELETE)).await.expect(200);
}

/// Requests on an instance being destroyed and created again, for every type: each
/// answers as if it ran before or after the destruction (2xx or 404), never 5xx.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn requests_racing_a_destroy_answer_404_not_500() {
    let s = TestServer::start().await;
    let client = (*s).clone();
    let requests: Vec<(&str, reqwest::Method, &str, Option<Value>)> = vec![
        (
            "data",
            reqwest::Method::POST,
            "/data/racing/_query",
            Some(json!({"selector": {"a": {"$gt": 0}}})),
        ),
        (
            "data",
            reqwest::Method::POST,
            "/data/racing",
            Some(json!({"a": 1})),
        ),
        ("data", reqwest::Method::GET, "/data/racing?limit=5", None),
        (
            "data",
            reqwest::Method::POST,
            "/data/racing/_index",
            Some(json!({"fields": ["a"]})),
        ),
        (
            "queue",
            reqwest::Method::GET,
            "/queue/racing/_jobs?status=READY",
            None,
        ),
        (
            "queue",
            reqwest::Method::GET,
            "/queue/racing?status=ERROR",
            None,
        ),
        (
            "queue",
            reqwest::Method::POST,
            "/queue/racing",
            Some(json!({"n": 1})),
        ),
        ("cache", reqwest::Method::POST, "/cache/racing/_query", None),
        (
            "cache",
            reqwest::Method::POST,
            "/cache/racing",
            Some(json!({"key": "k", "value": {"v": 1}})),
        ),
        (
            "search",
            reqwest::Method::POST,
            "/search/racing/_query",
            Some(json!({"query": "word"})),
        ),
        (
            "storage",
            reqwest::Method::GET,
            "/storage/racing?limit=5",
            None,
        ),
    ];
    for (kind, config) in configs() {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ours: Vec<_> = requests.iter().filter(|r| r.0 == kind).cloned().collect();
        let hammer = {
            let (client, stop) = (client.clone(), stop.clone());
            tokio::spawn(async move {
                let mut seen = std::collections::BTreeSet::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for (_, method, path, body) in &ours {
                        let mut req = client.request(method.clone(), path);
                        if let Some(body) = body {
                            req = req.json(body);
                        }
                        let r = client.send(req).await;
                        assert!(r.status < 500, "{method} {path}: {} {}", r.status, r.text);
                        seen.insert(r.status);
                    }
                }
                seen
            })
        };
        let path = format!("/{kind}/racing");
        for _ in 0..60 {
            s.put(&path, config.clone()).await.expect(201);
            s.delete(&path).await.expect(200);
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let seen = hammer.await.expect("no request answered 5xx");
        assert!(
            seen.contains(&404),
            "{kind}: the race was not run: {seen:?}"
        );
    }
}
