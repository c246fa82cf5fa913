//! The search service over HTTP: documents by key, bulk, queries, errors and limits. The
//! matching and ranking rules themselves are the port's conformance suite
//! (`quintet_core::conformance::search`); here they are checked end to end once each.

use std::collections::BTreeSet;

use quintet_testkit::TestServer;
use reqwest::Method;
use serde_json::{Value, json};

async fn server_with(name: &str, config: Value) -> TestServer {
    let s = TestServer::start().await;
    s.create("search", name, Some(config)).await;
    s
}

async fn movies() -> TestServer {
    server_with(
        "movies",
        json!({"fields": ["title", "body"], "storeFields": ["title", "type"]}),
    )
    .await
}

fn error(status: u16, msg: &str) -> Value {
    json!({"ok": false, "status": status, "msg": msg})
}

async fn match_ids(s: &TestServer, path: &str, body: Value) -> Vec<String> {
    let r = s.post(path, body).await.expect(200);
    r.body["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn index_get_replace_remove() {
    let s = movies().await;
    let doc = json!({"title": "Ghostbusters", "body": "Who you gonna call?", "type": "movie", "year": 1984});
    let r = s
        .post("/search/movies", json!({"key": "gb", "doc": doc}))
        .await
        .expect(201);
    assert_eq!(r.body, json!({"ok": true}));

    let r = s.get("/search/movies/gb").await.expect(201);
    assert_eq!(r.body, json!({"ok": true, "key": "gb", "doc": doc}));
    assert_eq!(
        r.text,
        r#"{"ok":true,"key":"gb","doc":{"title":"Ghostbusters","body":"Who you gonna call?","type":"movie","year":1984}}"#,
        "the document comes back as indexed, key order kept"
    );

    let r = s
        .post(
            "/search/movies",
            json!({"key": "gb", "doc": {"title": "x", "body": "y"}}),
        )
        .await
        .expect(409);
    assert_eq!(
        r.body,
        error(
            409,
            "search document \"gb\" already exists in \"movies\"; replace it with PUT \
             /search/movies/gb or bulk-index it"
        )
    );

    let replaced = json!({"title": "Ghostbusters II", "body": "They are back.", "type": "movie"});
    let r = s
        .put("/search/movies/gb", Some(replaced.clone()))
        .await
        .expect(200);
    assert_eq!(r.body, json!({"ok": true}));
    let r = s.get("/search/movies/gb").await.expect(201);
    assert_eq!(r.body["doc"], replaced);
    assert_eq!(
        match_ids(&s, "/search/movies/_query", json!({"query": "call"})).await,
        Vec::<String>::new()
    );
    assert_eq!(
        match_ids(&s, "/search/movies/_query", json!({"query": "back"})).await,
        ["gb"]
    );

    let missing = error(404, "search document \"nope\" does not exist in \"movies\"");
    let r = s
        .put(
            "/search/movies/nope",
            Some(json!({"title": "t", "body": "b"})),
        )
        .await
        .expect(404);
    assert_eq!(r.body, missing);
    assert_eq!(s.get("/search/movies/nope").await.expect(404).body, missing);
    assert_eq!(
        s.delete("/search/movies/nope").await.expect(404).body,
        missing
    );

    let r = s.delete("/search/movies/gb").await.expect(200);
    assert_eq!(r.body, json!({"ok": true}));
    s.get("/search/movies/gb").await.expect(404);
    assert_eq!(
        match_ids(&s, "/search/movies/_query", json!({"query": "back"})).await,
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn keys_are_path_segments_and_any_text() {
    let s = movies().await;
    for key in ["a b", "ünï/côdé", "50%", "x?y"] {
        s.post(
            "/search/movies",
            json!({"key": key, "doc": {"title": key, "body": ""}}),
        )
        .await
        .expect(201);
        let encoded: String = url_encode(key);
        let r = s
            .get(&format!("/search/movies/{encoded}"))
            .await
            .expect(201);
        assert_eq!(r.body["key"], key);
        s.delete(&format!("/search/movies/{encoded}"))
            .await
            .expect(200);
    }
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[tokio::test]
async fn bad_documents_are_refused_and_change_nothing() {
    let s = movies().await;
    let shape = "the body must be {\"key\": \"<key>\", \"doc\": {<document>}}: a string key and \
                 a document object";
    let cases = [
        (json!([1]), 422, shape.to_owned()),
        (
            json!({"doc": {"title": "", "body": ""}}),
            422,
            shape.to_owned(),
        ),
        (
            json!({"key": 5, "doc": {"title": "", "body": ""}}),
            422,
            shape.to_owned(),
        ),
        (json!({"key": "k", "doc": "text"}), 422, shape.to_owned()),
        (
            json!({"key": "k", "doc": {"title": "only a title"}}),
            422,
            "document \"k\" has no field \"body\"; every document must contain the configured \
             fields \"title\", \"body\""
                .to_owned(),
        ),
        (
            json!({"key": "_query", "doc": {"title": "", "body": ""}}),
            422,
            "search key \"_query\" is reserved for a route; choose another key".to_owned(),
        ),
        (
            json!({"key": "", "doc": {"title": "", "body": ""}}),
            422,
            "search key \"\" must be 1 to 512 bytes long".to_owned(),
        ),
        (
            json!({"key": "big", "doc": {"title": "x".repeat(1024 * 1024), "body": ""}}),
            413,
            "document \"big\" is 1048598 bytes of JSON; a search document may be at most \
             1048576 bytes"
                .to_owned(),
        ),
    ];
    for (body, status, msg) in cases {
        let label: String = body.to_string().chars().take(80).collect();
        let r = s.post("/search/movies", body).await;
        assert_eq!(
            (r.status, &r.body),
            (status, &error(status, &msg)),
            "{label}"
        );
    }
    let r = s
        .send(
            s.request(Method::POST, "/search/movies")
                .header("content-type", "application/json")
                .body("{\"key\": "),
        )
        .await
        .expect(400);
    assert_eq!(r.body["status"], 400);
    // The same rules hold for a replacement.
    s.post(
        "/search/movies",
        json!({"key": "k", "doc": {"title": "kept", "body": ""}}),
    )
    .await
    .expect(201);
    let r = s
        .put("/search/movies/k", Some(json!({"title": "no body"})))
        .await
        .expect(422);
    assert!(
        r.body["msg"]
            .as_str()
            .unwrap()
            .contains("no field \"body\""),
        "{}",
        r.text
    );
    let r = s.put("/search/movies/k", Some(json!([]))).await.expect(422);
    assert_eq!(
        r.body,
        error(422, "the body must be the document: a JSON object")
    );
    // Nothing above changed the index.
    assert_eq!(
        s.get("/search/movies/k").await.expect(201).body["doc"]["title"],
        "kept"
    );
    for word in ["only", "title", "big", "query"] {
        assert_eq!(
            match_ids(&s, "/search/movies/_query", json!({"query": word})).await,
            Vec::<String>::new(),
            "{word}"
        );
    }
}

#[tokio::test]
async fn every_route_answers_404_for_a_missing_or_other_instance() {
    let s = TestServer::start().await;
    s.create("data", "films", None).await;
    for name in ["nothing", "films"] {
        let msg =
            format!("search instance \"{name}\" does not exist; create it with PUT /search/{name}");
        let base = format!("/search/{name}");
        let replies = [
            s.post(&base, json!({"key": "k", "doc": {}})).await,
            s.get(&format!("{base}/k")).await,
            s.put(&format!("{base}/k"), Some(json!({}))).await,
            s.delete(&format!("{base}/k")).await,
            s.post(&format!("{base}/_bulk"), json!([])).await,
            s.post(&format!("{base}/_query"), json!({"query": "x"}))
                .await,
        ];
        for r in replies {
            assert_eq!((r.status, r.body), (404, error(404, &msg)));
        }
    }
}

#[tokio::test]
async fn bulk_upserts_and_reports_each_entry() {
    let s = movies().await;
    s.post(
        "/search/movies",
        json!({"key": "2", "doc": {"title": "old two", "body": ""}}),
    )
    .await
    .expect(201);
    let r = s
        .post(
            "/search/movies/_bulk",
            json!([
                {"_id": "1", "title": "one", "body": "first", "type": "movie"},
                {"id": 2, "title": "two", "body": "second"},
                {"title": "no key", "body": ""},
                {"_id": "bad", "title": "no body"},
                "not a document",
                {"_id": "1", "title": "one again", "body": "first", "type": "movie"}
            ]),
        )
        .await
        .expect(200);
    assert_eq!(
        r.body,
        json!({"ok": true, "results": [
            {"id": "1", "ok": true},
            {"id": "2", "ok": true},
            {"id": null, "ok": false, "error": "the document has no \"_id\" or \"id\"; bulk entries need a key"},
            {"id": "bad", "ok": false, "error": "document \"bad\" has no field \"body\"; every document must contain the configured fields \"title\", \"body\""},
            {"id": null, "ok": false, "error": "a bulk entry must be a JSON object (a document with \"_id\" or \"id\")"},
            {"id": "1", "ok": true}
        ]})
    );
    let r = s.get("/search/movies/1").await.expect(201);
    assert_eq!(
        r.body["doc"],
        json!({"_id": "1", "title": "one again", "body": "first", "type": "movie"})
    );
    assert_eq!(
        s.get("/search/movies/2").await.expect(201).body["doc"]["title"],
        "two"
    );
    s.get("/search/movies/bad").await.expect(404);
    assert_eq!(
        match_ids(&s, "/search/movies/_query", json!({"query": "old "})).await,
        Vec::<String>::new()
    );

    let r = s
        .post("/search/movies/_bulk", json!({"_id": "x"}))
        .await
        .expect(422);
    assert_eq!(
        r.body,
        error(
            422,
            "the body must be a JSON array of documents, each with \"_id\" or \"id\""
        )
    );
    let many: Vec<Value> = (0..10_001).map(|i| json!({"_id": i})).collect();
    let r = s
        .post("/search/movies/_bulk", Value::Array(many))
        .await
        .expect(413);
    assert_eq!(
        r.body,
        error(
            413,
            "the bulk request has 10001 documents; at most 10000 are allowed per request"
        )
    );
    let r = s.post("/search/movies/_bulk", json!([])).await.expect(200);
    assert_eq!(r.body, json!({"ok": true, "results": []}));
}

#[tokio::test]
async fn queries_are_fuzzy_ranked_and_minisearch_shaped() {
    let s = movies().await;
    s.post(
        "/search/movies/_bulk",
        json!([
            {"_id": "gb", "title": "Ghostbusters", "body": "Ghost catchers in New York", "type": "movie", "year": 1984},
            {"_id": "ghost", "title": "Ghost", "body": "A banker's spirit stays on earth", "type": "movie"},
            {"_id": "cast", "title": "Casper", "body": "A friendly ghost", "type": "series"},
            {"_id": "mx", "title": "The Matrix", "body": "Simulated reality", "type": "movie"}
        ]),
    )
    .await
    .expect(200);
    let q = "/search/movies/_query";
    // Prefix on the last word, one typo from five letters, case and words OR-ed.
    assert_eq!(match_ids(&s, q, json!({"query": "ghostbu"})).await, ["gb"]);
    assert_eq!(match_ids(&s, q, json!({"query": "MATIRX"})).await, ["mx"]);
    assert_eq!(
        match_ids(&s, q, json!({"query": "ghost ", "limit": 1})).await,
        ["ghost"]
    );
    let both = match_ids(&s, q, json!({"query": "friendly ghost "})).await;
    assert_eq!(both[0], "cast", "{both:?}");
    assert_eq!(both.len(), 3);
    // fields and filter.
    assert_eq!(
        match_ids(&s, q, json!({"query": "ghost ", "fields": ["title"]})).await,
        ["ghost"]
    );
    assert_eq!(
        match_ids(
            &s,
            q,
            json!({"query": "ghost", "filter": {"type": "series"}})
        )
        .await,
        ["cast"]
    );
    assert_eq!(
        match_ids(
            &s,
            q,
            json!({"query": "ghost", "filter": {"type": "movie", "year": 1984}})
        )
        .await,
        ["gb"]
    );
    // The match shape, stored fields last.
    let r = s
        .post(
            q,
            json!({"query": "ghostbusters new", "fields": ["title", "body"]}),
        )
        .await
        .expect(200);
    let mut m = r.body["matches"][0].clone();
    assert!(m["score"].as_f64().unwrap() > 0.0);
    m["score"] = json!(0);
    assert_eq!(
        serde_json::to_string(&m).unwrap(),
        r#"{"id":"gb","score":0,"terms":["ghostbusters","new"],"queryTerms":["ghostbusters","new"],"match":{"ghostbusters":["title"],"new":["body"]},"title":"Ghostbusters","type":"movie"}"#
    );
    // Nothing matches: an empty list.
    let r = s.post(q, json!({"query": "zzzz"})).await.expect(200);
    assert_eq!(r.body, json!({"ok": true, "matches": []}));
}

#[tokio::test]
async fn bad_queries_are_422_with_the_reason() {
    let s = movies().await;
    let q = "/search/movies/_query";
    let cases = [
        (
            json!({}),
            "\"query\" is required: the text to search for, such as {\"query\": \"ghostbusters\"}",
        ),
        (
            json!({"query": ""}),
            "\"query\" is required: the text to search for, such as {\"query\": \"ghostbusters\"}",
        ),
        (
            json!({"query": "   "}),
            "\"query\" \"   \" has no words to search for: a word is a run of letters or digits \
             (of at most 128 bytes), such as {\"query\": \"ghostbusters\"}",
        ),
        (
            json!({"query": "?!"}),
            "\"query\" \"?!\" has no words to search for: a word is a run of letters or digits \
             (of at most 128 bytes), such as {\"query\": \"ghostbusters\"}",
        ),
        (json!({"query": ["a"]}), "\"query\" must be a string"),
        (
            json!({"query": "a", "fields": ["type"]}),
            "\"fields\" names \"type\", which is not searched in this instance; the configured \
             fields are \"title\", \"body\"",
        ),
        (
            json!({"query": "a", "filter": "movie"}),
            "\"filter\" must be an object of field names and the values they must equal, such \
             as {\"type\": \"movie\"}",
        ),
        (
            json!({"query": "a", "limit": -1}),
            "\"limit\" must be an integer from 1 to 1000, not -1",
        ),
        (
            json!({"query": "x".repeat(1025)}),
            "\"query\" is 1025 bytes long; at most 1024 are allowed",
        ),
    ];
    for (body, msg) in cases {
        let r = s.post(q, body.clone()).await;
        assert_eq!((r.status, &r.body), (422, &error(422, msg)), "{body}");
    }
}

#[tokio::test]
async fn concurrent_writes_are_each_visible_when_acknowledged() {
    let s = server_with("live", json!({"fields": ["title"]})).await;
    let base = s.url("");
    let mut tasks = Vec::new();
    for i in 0..48 {
        let client = quintet_testkit::Client::new(&base);
        tasks.push(tokio::spawn(async move {
            let word = format!("word{i}x");
            client
                .post(
                    "/search/live",
                    json!({"key": format!("k{i}"), "doc": {"title": word}}),
                )
                .await
                .expect(201);
            // Acknowledged means committed and visible, whatever else is being written.
            let r = client
                .post("/search/live/_query", json!({"query": format!("{word} ")}))
                .await
                .expect(200);
            let ids: Vec<&str> = r.body["matches"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["id"].as_str().unwrap())
                .collect();
            assert!(
                ids.contains(&format!("k{i}").as_str()),
                "k{i} not in {ids:?}"
            );
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let r = s
        .post(
            "/search/live/_query",
            json!({"query": "word", "limit": 1000}),
        )
        .await
        .expect(200);
    let ids: BTreeSet<&str> = r.body["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 48);
}

#[tokio::test]
async fn documents_survive_a_restart() {
    let mut s = movies().await;
    s.post(
        "/search/movies",
        json!({"key": "a", "doc": {"title": "Amélie", "body": "Paris"}}),
    )
    .await
    .expect(201);
    s.post(
        "/search/movies/_bulk",
        json!([{"_id": "b", "title": "Brazil", "body": "Ducts"}]),
    )
    .await
    .expect(200);
    s.restart().await;
    assert_eq!(
        s.get("/search/movies/a").await.expect(201).body["doc"]["title"],
        "Amélie"
    );
    assert_eq!(
        match_ids(&s, "/search/movies/_query", json!({"query": "amelie"})).await,
        ["a"]
    );
    assert_eq!(
        match_ids(&s, "/search/movies/_query", json!({"query": "duct"})).await,
        ["b"]
    );
    s.post(
        "/search/movies",
        json!({"key": "c", "doc": {"title": "Casablanca", "body": ""}}),
    )
    .await
    .expect(201);
}

#[tokio::test]
async fn destroy_removes_the_index_from_disk() {
    let s = movies().await;
    let root = s.data_dir().join("search");
    s.post(
        "/search/movies",
        json!({"key": "a", "doc": {"title": "Alien", "body": ""}}),
    )
    .await
    .expect(201);
    let dirs = |root: &std::path::Path| std::fs::read_dir(root).unwrap().count();
    assert_eq!(dirs(&root), 1);
    s.delete("/search/movies").await.expect(200);
    assert_eq!(dirs(&root), 0);
    s.get("/search/movies/a").await.expect(404);
    // A new instance of the same name starts empty.
    s.create("search", "movies", Some(json!({"fields": ["title"]})))
        .await;
    assert_eq!(
        match_ids(&s, "/search/movies/_query", json!({"query": "alien"})).await,
        Vec::<String>::new()
    );
    s.get("/search/movies/a").await.expect(404);
}

/// What hyper's conformance suite (`hyper-test`) does with search, through the calls
/// hyper-connect makes.
#[tokio::test]
async fn the_hyper_test_flow() {
    let s = server_with(
        "test",
        json!({"fields": ["title", "type"], "storeFields": ["title", "type"]}),
    )
    .await;
    let add = |key: &str, title: &str| json!({"key": key, "doc": {"id": key, "type": "movie", "title": title}});
    s.post("/search/test", add("movie-1", "Ghostbusters"))
        .await
        .expect(201);
    let r = s
        .post("/search/test", add("movie-1", "Ghostbusters"))
        .await
        .expect(409);
    assert_eq!(r.body["ok"], false);
    assert_eq!(
        s.get("/search/test/movie-1").await.expect(201).body["key"],
        "movie-1"
    );
    s.get("/search/test/movie-2").await.expect(404);
    for body in [
        json!({"query": "Ghostbusters", "fields": ["title"], "filter": {"type": "movie"}}),
        json!({"query": "Ghostbusters", "filter": {"type": "movie"}}),
        json!({"query": "Ghostbusters"}),
    ] {
        let r = s.post("/search/test/_query", body).await.expect(200);
        assert_eq!(r.body["matches"][0]["id"], "movie-1");
        assert_eq!(r.body["matches"][0]["title"], "Ghostbusters");
    }
    let r = s
        .post(
            "/search/test/_bulk",
            json!([{"id": "1", "type": "movie", "title": "Groundhog Day"},
                   {"id": "2", "type": "movie", "title": "Caddyshack"}]),
        )
        .await
        .expect(200);
    assert_eq!(r.body["results"][0]["id"], "1");
    assert_eq!(r.body["results"][1]["id"], "2");
    s.delete("/search/test/movie-1").await.expect(200);
}

#[tokio::test]
async fn the_application_form_serves_every_search_route_with_the_apps_token() {
    let s = TestServer::start().await;
    let k = s.new_app().await;
    let base = format!("/{}/search/default", k.app);
    let call = |method: Method, path: String| s.as_app(&k, s.request(method, &path));
    s.send(
        call(Method::PUT, base.clone())
            .json(&json!({"fields": ["title"], "storeFields": ["title"]})),
    )
    .await
    .expect(201);
    s.send(
        call(Method::POST, base.clone())
            .json(&json!({"key": "g1", "doc": {"title": "Ghostbusters"}})),
    )
    .await
    .expect(201);
    let r = s
        .send(call(Method::GET, format!("{base}/g1")))
        .await
        .expect(201);
    assert_eq!(
        r.body,
        json!({"ok": true, "key": "g1", "doc": {"title": "Ghostbusters"}})
    );
    s.send(call(Method::PUT, format!("{base}/g1")).json(&json!({"title": "Ghostbusters II"})))
        .await
        .expect(200);
    let r = s
        .send(call(Method::POST, format!("{base}/_bulk")).json(&json!([
            {"_id": "a1", "title": "Alien"},
            {"id": "a2", "title": "Aliens"}
        ])))
        .await
        .expect(200);
    assert_eq!(r.body["results"].as_array().unwrap().len(), 2);
    let r = s
        .send(call(Method::POST, format!("{base}/_query")).json(&json!({"query": "ghost"})))
        .await
        .expect(200);
    assert_eq!(r.body["matches"][0]["id"], "g1");
    assert_eq!(r.body["matches"][0]["title"], "Ghostbusters II");
    s.send(call(Method::DELETE, format!("{base}/a1")))
        .await
        .expect(200);
    // Closed without the application's token; the domain form's instance is another one.
    s.send(s.request(Method::GET, &format!("{base}/g1")))
        .await
        .expect(401);
    s.create("search", "default", Some(json!({"fields": ["title"]})))
        .await;
    s.get("/search/default/g1").await.expect(404);
}
