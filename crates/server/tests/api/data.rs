//! The data service over HTTP: documents, bulk, list, queries and indexes.

use quintet_testkit::TestServer;
use reqwest::Method;
use serde_json::{Value, json};

fn err(status: u16, msg: &str) -> Value {
    json!({"ok": false, "status": status, "msg": msg})
}

async fn server_with(name: &str) -> TestServer {
    let s = TestServer::start().await;
    s.create("data", name, None).await;
    s
}

async fn load(s: &TestServer, path: &str, docs: Value) {
    let r = s.post(&format!("{path}/_bulk"), docs).await.expect(200);
    assert!(
        r.body["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["ok"] == true),
        "{}",
        r.text
    );
}

fn ids(body: &Value) -> Vec<String> {
    body["docs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["_id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn create_get_replace_remove() {
    let s = server_with("m").await;
    let r = s
        .post("/data/m", json!({"title": "Alien"}))
        .await
        .expect(201);
    let id = r.body["id"].as_str().unwrap().to_owned();
    assert_eq!(r.body, json!({"ok": true, "id": id}));
    assert_eq!(id.len(), 26);

    let r = s.get(&format!("/data/m/{id}")).await.expect(200);
    assert_eq!(
        r.body,
        json!({"ok": true, "doc": {"_id": id, "title": "Alien"}})
    );
    assert_eq!(r.header("content-type"), Some("application/json"));

    let r = s
        .post("/data/m", json!({"_id": "alien", "year": 1979}))
        .await
        .expect(201);
    assert_eq!(r.body, json!({"ok": true, "id": "alien"}));
    let r = s.post("/data/m", json!({"_id": "alien"})).await.expect(409);
    assert_eq!(
        r.body,
        err(
            409,
            "document \"alien\" already exists in data instance \"m\"; replace it with PUT"
        )
    );

    let r = s
        .put(
            "/data/m/alien",
            Some(json!({"_id": "ignored", "year": 1980})),
        )
        .await
        .expect(200);
    assert_eq!(r.body, json!({"ok": true, "id": "alien"}));
    let r = s.get("/data/m/alien").await.expect(200);
    assert_eq!(r.body["doc"], json!({"_id": "alien", "year": 1980}));
    s.get("/data/m/ignored").await.expect(404);

    let r = s
        .put("/data/m/nope", Some(json!({"a": 1})))
        .await
        .expect(404);
    assert_eq!(
        r.body,
        err(
            404,
            "document \"nope\" does not exist in data instance \"m\""
        )
    );
    s.get("/data/m/nope").await.expect(404);

    let r = s.delete("/data/m/alien").await.expect(200);
    assert_eq!(r.body, json!({"ok": true}));
    let r = s.get("/data/m/alien").await.expect(404);
    assert_eq!(
        r.body,
        err(
            404,
            "document \"alien\" does not exist in data instance \"m\""
        )
    );
    let r = s.delete("/data/m/alien").await.expect(404);
    assert_eq!(
        r.body,
        err(
            404,
            "document \"alien\" does not exist in data instance \"m\""
        )
    );
}

#[tokio::test]
async fn legacy_get_header_gives_the_bare_document() {
    let s = server_with("m").await;
    s.post("/data/m", json!({"_id": "a", "n": 1}))
        .await
        .expect(201);
    for header in ["X-SVC-LEGACY-GET", "X-HYPER-LEGACY-GET"] {
        let r = s
            .send(s.request(Method::GET, "/data/m/a").header(header, "true"))
            .await
            .expect(200);
        assert_eq!(r.body, json!({"_id": "a", "n": 1}), "{header}");
        let r = s
            .send(s.request(Method::GET, "/data/m/a").header(header, "false"))
            .await
            .expect(200);
        assert_eq!(r.body, json!({"ok": true, "doc": {"_id": "a", "n": 1}}));
    }
}

/// `--legacy-get-default`: old hyper clients send no header and expect the bare document;
/// a header still decides when sent.
#[tokio::test]
async fn legacy_get_default_serves_old_clients_that_send_no_header() {
    let s = TestServer::builder()
        .args(|a| a.legacy_get_default = Some(true))
        .start()
        .await;
    s.create("data", "m", None).await.expect(201);
    s.post("/data/m", json!({"_id": "a", "n": 1}))
        .await
        .expect(201);
    s.create("cache", "c", None).await.expect(201);
    s.post("/cache/c", json!({"key": "k", "value": {"v": 1}}))
        .await
        .expect(201);
    assert_eq!(
        s.get("/data/m/a").await.expect(200).body,
        json!({"_id": "a", "n": 1})
    );
    assert_eq!(s.get("/cache/c/k").await.expect(201).body, json!({"v": 1}));
    let r = s
        .send(
            s.request(Method::GET, "/data/m/a")
                .header("X-HYPER-LEGACY-GET", "false"),
        )
        .await
        .expect(200);
    assert_eq!(r.body, json!({"ok": true, "doc": {"_id": "a", "n": 1}}));
    // Off by default.
    let plain = server_with("m").await;
    plain.post("/data/m", json!({"_id": "a"})).await.expect(201);
    assert_eq!(
        plain.get("/data/m/a").await.expect(200).body,
        json!({"ok": true, "doc": {"_id": "a"}})
    );
}

#[tokio::test]
async fn bad_documents_and_ids_are_refused_and_change_nothing() {
    let s = server_with("m").await;
    // (method, path, body as sent) → (status, msg); `None` sends no body.
    let bad_id = |id: &str| {
        format!(
            "the document id \"{id}\" is not valid: use 1 to 512 bytes without control \
             characters, not beginning with \"_\""
        )
    };
    let (design, x) = (bad_id("_design"), bad_id("_x"));
    #[rustfmt::skip]
    let table: &[(Method, &str, Option<&str>, u16, &str)] = &[
        (Method::POST, "/data/m", Some("{}"), 400, "the document is empty; send a JSON object with at least one field"),
        (Method::POST, "/data/m", None, 400, "the body is not valid JSON: EOF while parsing a value at line 1 column 0"),
        (Method::POST, "/data/m", Some("[1]"), 422, "a document must be a JSON object, not an array"),
        (Method::POST, "/data/m", Some(r#"{"_id": 7}"#), 422, "_id must be a string, not a number"),
        (Method::POST, "/data/m", Some(r#"{"_id": "_design"}"#), 422, &design),
        (Method::GET, "/data/m/_x", None, 422, &x),
        (Method::PUT, "/data/m/x", Some(r#""text""#), 422, "a document must be a JSON object, not a string"),
    ];
    for (method, path, body, status, msg) in table {
        let mut req = s.request(method.clone(), path);
        if let Some(body) = body {
            req = req.header("content-type", "application/json").body(*body);
        }
        let r = s.send(req).await;
        assert_eq!(
            (r.status, &r.body),
            (*status, &err(*status, msg)),
            "{method} {path} {body:?}"
        );
    }
    // Malformed JSON is 400, whatever the parser's words.
    let r = s
        .send(
            s.request(Method::POST, "/data/m")
                .header("content-type", "application/json")
                .body("{\"a\":"),
        )
        .await
        .expect(400);
    assert_eq!(r.body["status"], 400);
    let r = s.get("/data/m").await.expect(200);
    assert_eq!(r.body, json!({"ok": true, "docs": []}));
    // A slash in an id travels percent-encoded.
    s.post("/data/m", json!({"_id": "a/b", "v": 1}))
        .await
        .expect(201);
    let r = s.get("/data/m/a%2Fb").await.expect(200);
    assert_eq!(r.body["doc"], json!({"_id": "a/b", "v": 1}));
}

#[tokio::test]
async fn a_missing_instance_is_404_on_every_route() {
    let s = TestServer::start().await;
    let msg = err(
        404,
        "data instance \"nope\" does not exist; create it with PUT /data/nope",
    );
    let calls = [
        (Method::POST, "/data/nope", Some(json!({"a": 1}))),
        (Method::GET, "/data/nope", None),
        (Method::GET, "/data/nope/x", None),
        (Method::PUT, "/data/nope/x", Some(json!({"a": 1}))),
        (Method::DELETE, "/data/nope/x", None),
        (Method::POST, "/data/nope/_bulk", Some(json!([]))),
        (Method::POST, "/data/nope/_query", Some(json!({}))),
        (
            Method::POST,
            "/data/nope/_index",
            Some(json!({"fields": ["a"]})),
        ),
        (Method::GET, "/data/nope/_index", None),
    ];
    for (method, path, body) in calls {
        let mut req = s.request(method.clone(), path);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let r = s.send(req).await;
        assert_eq!((r.status, &r.body), (404, &msg), "{method} {path}");
    }
}

#[tokio::test]
async fn bulk_reports_each_entry_in_one_transaction() {
    let s = server_with("b").await;
    s.post("/data/b", json!({"_id": "old", "v": 0}))
        .await
        .expect(201);
    let r = s
        .post(
            "/data/b/_bulk",
            json!([
                {"_id": "old", "v": 1},
                {"_id": "new", "v": 1, "_update": true},
                {"_id": "old2", "_deleted": true},
                {"v": 2},
                {"_id": "new", "_deleted": true},
            ]),
        )
        .await
        .expect(200);
    assert_eq!(
        r.body,
        json!({"ok": true, "results": [
            {"id": "old", "ok": true},
            {"id": "new", "ok": true},
            {"id": "old2", "ok": false, "error": "document \"old2\" does not exist in data instance \"b\""},
            {"id": null, "ok": false, "error": "the entry has no _id; every document of a bulk request needs one"},
            {"id": "new", "ok": true},
        ]})
    );
    assert_eq!(
        s.get("/data/b/old").await.body["doc"],
        json!({"_id": "old", "v": 1})
    );
    s.get("/data/b/new").await.expect(404);
    let r = s
        .post("/data/b/_bulk", json!({"_id": "x"}))
        .await
        .expect(422);
    assert_eq!(
        r.body,
        err(
            422,
            "a bulk request must be a JSON array of documents, not an object"
        )
    );
}

/// A bulk entry with a number no engine can read back (an exponent beyond `f64`) is refused
/// alone; entries with exponents in range are stored readably, and queries keep working.
#[tokio::test]
async fn bulk_numbers_out_of_range_are_refused_not_stored() {
    let s = server_with("n").await;
    let body = r#"[{"_id":"huge","x":1e200000},{"_id":"tiny","x":1e-20000},{"_id":"k","x":2E3}]"#;
    let req = s
        .request(Method::POST, "/data/n/_bulk")
        .header("content-type", "application/json")
        .body(body);
    let r = s.send(req).await.expect(200);
    let results = r.body["results"].as_array().unwrap();
    assert_eq!(results[0]["ok"], false, "{}", r.body);
    assert_eq!(results[1], json!({"id": "tiny", "ok": true}));
    assert_eq!(results[2], json!({"id": "k", "ok": true}));
    s.get("/data/n/huge").await.expect(404);
    assert_eq!(
        s.get("/data/n/k").await.body["doc"],
        json!({"_id": "k", "x": 2000.0})
    );
    let r = s
        .post("/data/n/_query", json!({"selector": {"x": {"$gte": 0}}}))
        .await
        .expect(200);
    assert_eq!(ids(&r.body), ["k", "tiny"]);
}

#[tokio::test]
async fn list_ranges_keys_descending_and_streaming() {
    let s = server_with("l").await;
    let docs: Vec<Value> = (1001..1010)
        .map(|i| json!({"_id": i.to_string(), "n": i}))
        .collect();
    load(&s, "/data/l", Value::Array(docs)).await;
    let r = s.get("/data/l").await.expect(200);
    assert_eq!(ids(&r.body).len(), 9);
    assert_eq!(r.body["docs"][0], json!({"_id": "1001", "n": 1001}));
    let get = |q: &'static str| {
        let s = &s;
        async move { ids(&s.get(&format!("/data/l?{q}")).await.expect(200).body) }
    };
    assert_eq!(get("keys=1005,9999,1002").await, ["1005", "1002"]);
    assert_eq!(get("startkey=1004").await.len(), 6);
    assert_eq!(get("endkey=1008").await.len(), 8);
    assert_eq!(get("startkey=1003&endkey=1007").await.len(), 5);
    assert_eq!(get("limit=2").await, ["1001", "1002"]);
    assert_eq!(get("descending=true").await.last().unwrap(), "1001");
    assert_eq!(
        get("descending=true&startkey=1005&endkey=1003").await,
        ["1005", "1004", "1003"]
    );
    assert_eq!(get("descending=false").await.first().unwrap(), "1001");

    let r = s.get("/data/l?descending=yes").await.expect(422);
    assert_eq!(
        r.body,
        err(422, "descending must be true or false, not \"yes\"")
    );
    let r = s.get("/data/l?startkey=1005&endkey=1003").await.expect(422);
    assert_eq!(
        r.body,
        err(
            422,
            "startkey \"1005\" is after endkey \"1003\", so no document can match; swap them, \
             or set descending=true to walk from high ids to low"
        )
    );
    let r = s.get("/data/l?limit=ten").await.expect(422);
    assert_eq!(
        r.body,
        err(422, "limit must be a non-negative integer, not \"ten\"")
    );

    // Thousands of documents stream as one valid JSON answer.
    let many: Vec<Value> = (0..3000)
        .map(|i| json!({"_id": format!("z{i:05}"), "pad": "x".repeat(50)}))
        .collect();
    load(&s, "/data/l", Value::Array(many)).await;
    let r = s.get("/data/l?startkey=z").await.expect(200);
    let got = ids(&r.body);
    assert_eq!(got.len(), 3000);
    assert_eq!(got[2999], "z02999");
    // Streamed, not built whole first: chunked, with no length known up front (a buffered
    // JSON answer, such as a document's GET, carries a Content-Length).
    assert_eq!(r.header("content-length"), None);
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    let one = s.get("/data/l/z00000").await.expect(200);
    assert_eq!(
        one.header("content-length"),
        Some(one.text.len().to_string().as_str())
    );
}

async fn movies(s: &TestServer) {
    load(
        s,
        "/data/q",
        json!([
            {"_id": "m1", "title": "Alien", "year": 1979, "type": "movie", "tags": ["sf"]},
            {"_id": "m2", "title": "Aliens", "year": 1986, "type": "movie", "tags": ["sf", "action"]},
            {"_id": "m3", "title": "Heat", "year": 1995, "type": "movie", "cast": {"lead": "Pacino"}},
            {"_id": "s1", "title": "Lost", "year": 2004, "type": "series"},
            {"_id": "s2", "title": "Dark", "year": 2017, "type": "series"},
        ]),
    )
    .await;
}

#[tokio::test]
async fn queries_follow_mango() {
    let s = server_with("q").await;
    movies(&s).await;
    let q = |body: Value| {
        let s = &s;
        async move { s.post("/data/q/_query", body).await.expect(200).body }
    };
    let r = q(json!({"selector": {"year": {"$gt": 1990}, "type": "series"}})).await;
    assert_eq!(ids(&r), ["s1", "s2"]);
    assert_eq!(
        r["warning"],
        "no matching index found, create an index to optimize query time"
    );
    assert_eq!(
        ids(&q(json!({"selector": {"tags": {"$in": ["action"]}}})).await),
        ["m2"]
    );
    assert_eq!(
        ids(&q(json!({"selector": {"cast.lead": "Pacino"}})).await),
        ["m3"]
    );
    assert_eq!(
        ids(&q(json!({"selector": {"title": {"$regex": "^Al"}}})).await),
        ["m1", "m2"]
    );
    assert_eq!(
        ids(&q(json!({"selector": {}, "sort": [{"type": "DESC"}, {"year": "asc"}]})).await),
        ["s1", "s2", "m1", "m2", "m3"]
    );
    assert_eq!(
        ids(&q(json!({"sort": ["year"], "skip": 1, "limit": 2})).await),
        ["m2", "m3"]
    );
    let r = q(json!({"selector": {"_id": "m3"}, "fields": ["title", "cast.lead"]})).await;
    assert_eq!(
        r["docs"],
        json!([{"title": "Heat", "cast": {"lead": "Pacino"}}])
    );
    let r = q(json!({"selector": {"year": 1}})).await;
    assert_eq!(r["docs"], json!([]));

    // The default limit is 25.
    let many: Vec<Value> = (0..30)
        .map(|i| json!({"_id": format!("x{i:02}"), "k": "x"}))
        .collect();
    load(&s, "/data/q", Value::Array(many)).await;
    assert_eq!(ids(&q(json!({"selector": {"k": "x"}})).await).len(), 25);
}

#[tokio::test]
async fn invalid_queries_are_422_naming_the_problem() {
    let s = server_with("q").await;
    let cases = [
        (
            json!({"selector": {"year": {"$regx": 1}}}),
            "unknown operator \"$regx\" in selector at \"year\"; see docs/data.md for the operators",
        ),
        (
            json!({"selector": {"year": {"$in": 1990}}}),
            "the argument of \"$in\" at \"year\" must be an array of values, not 1990",
        ),
        (
            json!({"selector": {"n": {"$mod": [2.5, 1]}}}),
            "the argument of \"$mod\" at \"n\" must be [divisor, remainder] with integers and a \
             non-zero divisor, not [2.5,1]",
        ),
        (
            json!({"selector": []}),
            "a selector must be a JSON object, not []",
        ),
        (
            json!({"sort": [{"year": "down"}]}),
            "the direction of \"year\" in \"sort\" must be \"asc\" or \"desc\" (any case), not \"down\"",
        ),
        (
            json!({"limit": "many"}),
            "\"limit\" must be a non-negative integer, not \"many\"",
        ),
    ];
    for (body, msg) in cases {
        let r = s.post("/data/q/_query", body.clone()).await;
        assert_eq!((r.status, r.body), (422, err(422, msg)), "{body}");
    }
    let r = s
        .post(
            "/data/q/_query",
            json!({"selector": {"t": {"$regex": "(a"}}}),
        )
        .await
        .expect(422);
    assert!(
        r.body["msg"]
            .as_str()
            .unwrap()
            .starts_with("the $regex \"(a\" at \"t\" is not a valid regular expression"),
        "{}",
        r.text
    );
    let r = s.get("/data/q/_query").await.expect(405);
    assert_eq!(r.body["status"], 405);
}

#[tokio::test]
async fn indexes_are_used_and_reported() {
    let s = server_with("q").await;
    movies(&s).await;
    // hyper-connect's shape.
    let r = s
        .post(
            "/data/q/_index",
            json!({"fields": ["type", {"year": "DESC"}], "name": "by-type", "type": "JSON"}),
        )
        .await
        .expect(200);
    assert_eq!(r.body, json!({"ok": true}));
    s.post(
        "/data/q/_index",
        json!({"fields": ["type", {"year": "DESC"}], "name": "by-type"}),
    )
    .await
    .expect(200);
    let r = s
        .post(
            "/data/q/_index",
            json!({"fields": ["title"], "name": "by-type"}),
        )
        .await
        .expect(409);
    assert_eq!(
        r.body,
        err(
            409,
            "data instance \"q\" has an index named \"by-type\" with another definition; \
             choose another name"
        )
    );
    s.post(
        "/data/q/_index",
        json!({"index": {"fields": ["year"], "partial_filter_selector": {"type": "movie"}}}),
    )
    .await
    .expect(200);
    let r = s
        .post("/data/q/_index", json!({"fields": ["x"], "type": "text"}))
        .await
        .expect(422);
    assert_eq!(
        r.body,
        err(
            422,
            "the index type \"text\" is not supported; use \"json\""
        )
    );

    let r = s.get("/data/q/_index").await.expect(200);
    let names: Vec<_> = r.body["indexes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names.len(), 2);
    assert_eq!(names[0], "by-type");
    assert!(names[1].starts_with("idx-year-partial-"), "{names:?}");

    let r = s
        .post(
            "/data/q/_query",
            json!({"selector": {"type": "series"}, "sort": [{"type": "desc"}, {"year": "desc"}],
                   "execution_stats": true}),
        )
        .await
        .expect(200);
    assert_eq!(ids(&r.body), ["s2", "s1"]);
    assert_eq!(r.body.get("warning"), None);
    let stats = &r.body["execution_stats"];
    assert_eq!(stats["index"], "by-type");
    assert_eq!(stats["docs_examined"], 2);
    assert_eq!(stats["results_returned"], 2);
    assert!(stats["execution_time_ms"].is_number());

    // The partial index answers a selector implying its filter.
    let r = s
        .post(
            "/data/q/_query",
            json!({"selector": {"type": "movie", "year": {"$gte": 1980}}, "execution_stats": true}),
        )
        .await
        .expect(200);
    assert_eq!(ids(&r.body), ["m2", "m3"]);
    // Either index narrows this one; both answer the same.
    assert!(r.body["execution_stats"]["index"].is_string());
}

#[tokio::test]
async fn documents_survive_a_restart() {
    let mut s = server_with("d").await;
    s.post("/data/d", json!({"_id": "kept", "v": 1}))
        .await
        .expect(201);
    s.post("/data/d/_index", json!({"fields": ["v"]}))
        .await
        .expect(200);
    s.restart().await;
    assert_eq!(s.get("/data/d/kept").await.expect(200).body["doc"]["v"], 1);
    let r = s
        .post(
            "/data/d/_query",
            json!({"selector": {"v": 1}, "execution_stats": true}),
        )
        .await
        .expect(200);
    assert_eq!(ids(&r.body), ["kept"]);
    assert_eq!(r.body["execution_stats"]["index"], "idx-v");
}

#[tokio::test]
async fn destroying_an_instance_removes_its_documents() {
    let s = server_with("gone").await;
    s.post("/data/gone", json!({"_id": "a"})).await.expect(201);
    s.delete("/data/gone").await.expect(200);
    s.create("data", "gone", None).await;
    s.get("/data/gone/a").await.expect(404);
    let r = s.get("/data/gone").await.expect(200);
    assert_eq!(r.body, json!({"ok": true, "docs": []}));
}

#[tokio::test]
async fn the_application_form_serves_every_data_route_with_the_apps_token() {
    let s = TestServer::start().await;
    let k = s.new_app().await;
    let base = format!("/{}/data/default", k.app);
    let call = |method: Method, path: String| s.as_app(&k, s.request(method, &path));
    s.send(call(Method::PUT, base.clone())).await.expect(201);
    let r = s
        .send(
            call(Method::POST, base.clone())
                .json(&json!({"_id": "m1", "title": "Heat", "year": 1995})),
        )
        .await
        .expect(201);
    assert_eq!(r.body, json!({"ok": true, "id": "m1"}));
    let r = s
        .send(call(Method::GET, format!("{base}/m1")))
        .await
        .expect(200);
    assert_eq!(r.body["doc"]["title"], "Heat");
    s.send(call(Method::PUT, format!("{base}/m1")).json(&json!({"title": "Heat", "year": 1996})))
        .await
        .expect(200);
    let r = s
        .send(call(Method::POST, format!("{base}/_bulk")).json(&json!([
            {"_id": "m2", "title": "Ronin", "year": 1998},
            {"_id": "m3", "title": "Collateral", "year": 2004}
        ])))
        .await
        .expect(200);
    assert_eq!(r.body["results"].as_array().unwrap().len(), 2);
    s.send(
        call(Method::POST, format!("{base}/_index"))
            .json(&json!({"fields": ["year"], "name": "by-year"})),
    )
    .await
    .expect(200);
    let r = s
        .send(call(Method::POST, format!("{base}/_query")).json(&json!({
            "selector": {"year": {"$gt": 1997}}, "sort": [{"year": "DESC"}], "fields": ["_id"]
        })))
        .await
        .expect(200);
    assert_eq!(r.body["docs"], json!([{"_id": "m3"}, {"_id": "m2"}]));
    let r = s
        .send(call(Method::GET, format!("{base}?keys=m3,m1")))
        .await
        .expect(200);
    assert_eq!(ids(&r.body), ["m3", "m1"]);
    s.send(call(Method::DELETE, format!("{base}/m2")))
        .await
        .expect(200);
    // The domain form's instance of the same name is another instance, and the
    // application's documents are closed without its token.
    s.create("data", "default", None).await;
    s.get("/data/default/m1").await.expect(404);
    s.send(s.request(Method::GET, &format!("{base}/m1")))
        .await
        .expect(401);
}
