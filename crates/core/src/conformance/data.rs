//! Conformance of [`DocStore`]: every data adapter runs each case (see [`super`]).

use std::{future::poll_fn, pin::Pin};

use futures_core::Stream;
use serde_json::{Value, json};

use super::instance;
use crate::{
    Error, Instance, InstanceConfig,
    mango::{FindQuery, IndexDef, plan::NO_INDEX_WARNING},
    ports::data::{BulkOp, DocId, DocStore, Document, ListQuery, MAX_DOC_BYTES},
};

async fn fresh(store: &dyn DocStore) -> Instance {
    let inst = instance(InstanceConfig::Data);
    store.create_instance(&inst).await.expect("create_instance");
    inst
}

fn id(s: &str) -> DocId {
    s.parse().expect("valid id")
}

fn doc(v: Value) -> Document {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

async fn get(store: &dyn DocStore, inst: &Instance, key: &str) -> Option<Value> {
    store
        .get(inst, &id(key))
        .await
        .expect("get")
        .map(|raw| serde_json::from_str(raw.get()).expect("stored JSON"))
}

async fn find(store: &dyn DocStore, inst: &Instance, q: Value) -> Vec<Value> {
    let q = FindQuery::from_json(&q).expect("query");
    store.find(inst, q).await.expect("find").docs
}

fn ids(docs: &[Value]) -> Vec<String> {
    docs.iter()
        .map(|d| d["_id"].as_str().unwrap_or("?").to_owned())
        .collect()
}

async fn list(store: &dyn DocStore, inst: &Instance, params: &[(&str, &str)]) -> Vec<String> {
    let q = ListQuery::from_params(params.iter().copied()).expect("list params");
    let docs = collect(store.list(inst, q).await.expect("list")).await;
    docs.into_iter()
        .map(|d| {
            let v: Value = serde_json::from_str(d.expect("row").get()).expect("JSON");
            v["_id"].as_str().unwrap_or("?").to_owned()
        })
        .collect()
}

/// Create, get (stored text, `_id` first), replace (path id wins), remove, and their
/// conflicts and absences.
pub async fn create_get_replace_remove(store: &dyn DocStore) {
    let inst = fresh(store).await;
    let got = store
        .create(&inst, Some(id("a")), doc(json!({"x": 1, "_id": "a"})))
        .await
        .expect("create");
    assert_eq!(got.as_str(), "a");
    let raw = store.get(&inst, &id("a")).await.unwrap().expect("stored");
    assert_eq!(raw.get(), r#"{"_id":"a","x":1}"#);
    let dup = store
        .create(&inst, Some(id("a")), doc(json!({"x": 2})))
        .await;
    assert!(matches!(dup, Err(Error::Conflict(_))), "{dup:?}");
    assert_eq!(
        get(store, &inst, "a").await,
        Some(json!({"_id": "a", "x": 1}))
    );

    store
        .replace(&inst, &id("a"), doc(json!({"_id": "other", "y": [1]})))
        .await
        .expect("replace");
    assert_eq!(
        get(store, &inst, "a").await,
        Some(json!({"_id": "a", "y": [1]}))
    );
    assert_eq!(get(store, &inst, "other").await, None);
    let r = store
        .replace(&inst, &id("nope"), doc(json!({"y": 1})))
        .await;
    assert!(matches!(r, Err(Error::NotFound(_))), "{r:?}");
    assert_eq!(get(store, &inst, "nope").await, None);

    store.remove(&inst, &id("a")).await.expect("remove");
    assert_eq!(get(store, &inst, "a").await, None);
    let r = store.remove(&inst, &id("a")).await;
    assert!(matches!(r, Err(Error::NotFound(_))), "{r:?}");
    store.drop_instance(&inst).await.unwrap();
}

/// Generated ids are distinct and increase with each create.
pub async fn generated_ids_are_unique_and_time_ordered(store: &dyn DocStore) {
    let inst = fresh(store).await;
    let mut prev: Option<DocId> = None;
    for i in 0..50 {
        let got = store
            .create(&inst, None, doc(json!({"i": i})))
            .await
            .expect("create");
        if let Some(p) = &prev {
            assert!(got > *p, "{got} after {p}");
        }
        let stored = get(store, &inst, got.as_str()).await.expect("stored");
        assert_eq!(stored, json!({"_id": got.as_str(), "i": i}));
        prev = Some(got);
    }
    store.drop_instance(&inst).await.unwrap();
}

/// Bulk: create or replace, delete, reject; later entries see earlier ones.
pub async fn bulk_applies_in_order_and_reports_each_entry(store: &dyn DocStore) {
    let inst = fresh(store).await;
    store
        .create(&inst, Some(id("old")), doc(json!({"v": 0})))
        .await
        .unwrap();
    let ops = BulkOp::parse_all(json!([
        {"_id": "old", "v": 1},
        {"_id": "new", "v": 1},
        {"_id": "new", "v": 2},
        {"_id": "gone", "_deleted": true},
        {"v": 3},
        {"_id": "old", "_deleted": true},
        {"_id": "old", "v": 4},
        {"_id": "_x"},
    ]))
    .unwrap();
    let out = store.bulk(&inst, ops).await.expect("bulk");
    let oks: Vec<bool> = out.iter().map(|o| o.ok).collect();
    assert_eq!(
        oks,
        [true, true, true, false, false, true, true, false],
        "{out:?}"
    );
    assert_eq!(out[3].id.as_deref(), Some("gone"));
    assert!(out[3].error.is_some());
    assert_eq!(out[4].id, None);
    assert_eq!(out[7].id.as_deref(), Some("_x"));
    assert_eq!(
        get(store, &inst, "new").await,
        Some(json!({"_id": "new", "v": 2}))
    );
    assert_eq!(
        get(store, &inst, "old").await,
        Some(json!({"_id": "old", "v": 4}))
    );
    store.drop_instance(&inst).await.unwrap();
}

/// List: inclusive ranges, descending from the high end, limit, keys in the order given.
pub async fn list_walks_ids_byte_wise(store: &dyn DocStore) {
    let inst = fresh(store).await;
    let names = ["b", "a", "B", "c", "aa", "é", "d"];
    let ops = BulkOp::parse_all(Value::Array(
        names.iter().map(|n| json!({"_id": n})).collect(),
    ))
    .unwrap();
    store.bulk(&inst, ops).await.unwrap();
    assert_eq!(
        list(store, &inst, &[]).await,
        ["B", "a", "aa", "b", "c", "d", "é"]
    );
    assert_eq!(
        list(store, &inst, &[("startkey", "a"), ("endkey", "c")]).await,
        ["a", "aa", "b", "c"]
    );
    assert_eq!(
        list(
            store,
            &inst,
            &[("startkey", "c"), ("endkey", "a"), ("descending", "true")]
        )
        .await,
        ["c", "b", "aa", "a"]
    );
    assert_eq!(
        list(store, &inst, &[("descending", "true"), ("limit", "2")]).await,
        ["é", "d"]
    );
    assert_eq!(
        list(store, &inst, &[("startkey", "c")]).await,
        ["c", "d", "é"]
    );
    assert_eq!(list(store, &inst, &[("endkey", "a")]).await, ["B", "a"]);
    assert_eq!(
        list(store, &inst, &[("keys", "d,zz,a,B")]).await,
        ["d", "a", "B"]
    );
    assert_eq!(
        list(store, &inst, &[("keys", "d,a,B"), ("limit", "2")]).await,
        ["d", "a"]
    );
    assert!(list(store, &inst, &[("limit", "0")]).await.is_empty());

    // Longer than one page of the adapter's reads.
    let many: Vec<Value> = (0..700)
        .map(|i| json!({"_id": format!("m{i:04}")}))
        .collect();
    store
        .bulk(&inst, BulkOp::parse_all(Value::Array(many)).unwrap())
        .await
        .unwrap();
    let all = list(store, &inst, &[("startkey", "m"), ("endkey", "m9")]).await;
    assert_eq!(all.len(), 700);
    assert!(all.windows(2).all(|w| w[0] < w[1]));
    let some = list(
        store,
        &inst,
        &[("startkey", "m9"), ("descending", "true"), ("limit", "600")],
    )
    .await;
    assert_eq!(some.len(), 600);
    assert_eq!(some[0], "m0699");
    store.drop_instance(&inst).await.unwrap();
}

fn movies() -> Value {
    json!([
        {"_id": "m1", "title": "Alien", "year": 1979, "genres": ["horror", "sf"], "rating": {"imdb": 8.5}},
        {"_id": "m2", "title": "Aliens", "year": 1986, "genres": ["action", "sf"], "rating": {"imdb": 8.4}},
        {"_id": "m3", "title": "Heat", "year": 1995, "genres": ["crime"], "rating": {"imdb": 8.3}},
        {"_id": "m4", "title": "Ghostbusters", "year": 1984, "genres": ["comedy"]},
        {"_id": "m5", "title": "Brazil", "year": 1985.0, "genres": []},
        {"_id": "m6", "title": "Tron", "year": "unknown"},
        {"_id": "m7", "title": "Tenet", "year": null, "genres": ["sf", "action"]},
    ])
}

/// Selectors, sort, skip, limit and projection follow Mango.
pub async fn find_follows_mango(store: &dyn DocStore) {
    let inst = fresh(store).await;
    store
        .bulk(&inst, BulkOp::parse_all(movies()).unwrap())
        .await
        .unwrap();
    let cases: Vec<(Value, Vec<&str>)> = vec![
        (
            json!({"selector": {"year": {"$gt": 1984}}}),
            vec!["m2", "m3", "m5", "m6"],
        ),
        (
            json!({"selector": {"year": {"$lt": 1980}}}),
            vec!["m1", "m7"],
        ),
        (json!({"selector": {"year": 1985}}), vec!["m5"]),
        (
            json!({"selector": {"genres": {"$in": ["sf"]}}}),
            vec!["m1", "m2", "m7"],
        ),
        (
            json!({"selector": {"genres": {"$nin": ["sf"]}}}),
            vec!["m3", "m4", "m5"],
        ),
        (
            json!({"selector": {"genres": {"$all": ["sf", "action"]}}}),
            vec!["m2", "m7"],
        ),
        (json!({"selector": {"genres": {"$size": 0}}}), vec!["m5"]),
        (
            json!({"selector": {"genres": {"$allMatch": {"$eq": "crime"}}}}),
            vec!["m3"],
        ),
        (
            json!({"selector": {"genres": {"$elemMatch": {"$beginsWith": "co"}}}}),
            vec!["m4"],
        ),
        (
            json!({"selector": {"rating.imdb": {"$gte": 8.4}}}),
            vec!["m1", "m2"],
        ),
        (
            json!({"selector": {"rating": {"$exists": false}}}),
            vec!["m4", "m5", "m6", "m7"],
        ),
        (
            json!({"selector": {"year": {"$type": "string"}}}),
            vec!["m6"],
        ),
        (
            json!({"selector": {"year": {"$mod": [2, 0]}}}),
            vec!["m2", "m4"],
        ),
        (
            json!({"selector": {"title": {"$regex": "^Al"}}}),
            vec!["m1", "m2"],
        ),
        (
            json!({"selector": {"rating": {"$keyMapMatch": {"$eq": "imdb"}}}}),
            vec!["m1", "m2", "m3"],
        ),
        (
            json!({"selector": {"$or": [{"year": 1979}, {"title": "Heat"}]}}),
            vec!["m1", "m3"],
        ),
        (
            json!({"selector": {"$nor": [{"year": 1979}, {"title": "Heat"}]}}),
            vec!["m2", "m4", "m5", "m6", "m7"],
        ),
        // Empty lists as CouchDB: `$or: []` matches everything, `$all: []` nothing.
        (
            json!({"selector": {"$or": []}}),
            vec!["m1", "m2", "m3", "m4", "m5", "m6", "m7"],
        ),
        (json!({"selector": {"$or": [], "year": 1985}}), vec!["m5"]),
        (json!({"selector": {"genres": {"$all": []}}}), vec![]),
        (
            json!({"selector": {"year": {"$not": {"$gt": 1980}}}}),
            vec!["m1", "m7"],
        ),
        (
            json!({"selector": {"year": {"$ne": 1979}}}),
            vec!["m2", "m3", "m4", "m5", "m6", "m7"],
        ),
        (
            json!({"selector": {}, "sort": [{"year": "DESC"}], "limit": 3}),
            vec!["m6", "m3", "m2"],
        ),
        (
            json!({"selector": {}, "sort": ["year"], "skip": 1, "limit": 2}),
            vec!["m1", "m4"],
        ),
        (
            json!({"selector": {"year": {"$exists": true}}, "sort": [{"genres": "asc"}, {"title": "desc"}]}),
            vec!["m6", "m5", "m2", "m4", "m3", "m1", "m7"],
        ),
        (json!({"limit": 2}), vec!["m1", "m2"]),
    ];
    for (q, expected) in cases {
        let got = find(store, &inst, q.clone()).await;
        assert_eq!(ids(&got), expected, "{q}");
    }
    let got = find(
        store,
        &inst,
        json!({"selector": {"_id": "m1"}, "fields": ["title", "rating.imdb"]}),
    )
    .await;
    assert_eq!(got, [json!({"title": "Alien", "rating": {"imdb": 8.5}})]);
    let out = store
        .find(
            &inst,
            FindQuery::from_json(&json!({"selector": {"title": "Heat"}, "execution_stats": true}))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(out.warning.as_deref(), Some(NO_INDEX_WARNING));
    let stats = out.stats.expect("stats");
    assert_eq!((stats.results_returned, stats.index), (1, None));
    // A scan reads every document, unless the engine filters some out before the
    // evaluator sees them (PostgreSQL checks exact equalities in SQL).
    assert!(
        (1..=7).contains(&stats.docs_examined),
        "{} documents examined",
        stats.docs_examined
    );
    store.drop_instance(&inst).await.unwrap();
}

fn dataset() -> Vec<Value> {
    let values = [
        json!(null),
        json!(false),
        json!(true),
        json!(0),
        json!(1),
        json!(1.5),
        json!(2),
        json!("a"),
        json!("ab"),
        json!("b"),
        json!([1]),
        json!([1, 2]),
        json!({"x": 1}),
    ];
    (0..240usize)
        .map(|i| {
            let mut m = serde_json::Map::new();
            m.insert("_id".into(), json!(format!("k{:03}", (i * 7919) % 240)));
            if i % 11 != 0 {
                m.insert("a".into(), values[(i * 5) % values.len()].clone());
            }
            if i % 7 != 0 {
                m.insert("b".into(), values[(i * 3 + 1) % values.len()].clone());
            }
            m.insert("n".into(), json!(i % 17));
            Value::Object(m)
        })
        .collect()
}

/// With indexes (created before or after the data, partial or not) every query answers
/// what a full scan answers, and uses an index where one fits.
pub async fn indexes_answer_like_a_full_scan(store: &dyn DocStore) {
    let plain = fresh(store).await;
    let indexed = fresh(store).await;
    let data = dataset();
    let (first, second) = data.split_at(120);
    let defs = [
        json!({"fields": ["a"]}),
        json!({"fields": ["b", "a"], "name": "ba"}),
    ];
    for d in &defs {
        store
            .create_index(&indexed, IndexDef::from_json(d).unwrap())
            .await
            .unwrap();
    }
    for part in [first, second] {
        for inst in [&plain, &indexed] {
            let ops = BulkOp::parse_all(Value::Array(part.to_vec())).unwrap();
            store.bulk(inst, ops).await.unwrap();
        }
    }
    // Created over existing documents.
    store
        .create_index(
            &indexed,
            IndexDef::from_json(
                &json!({"fields": ["n"], "partialFilter": {"a": {"$exists": true}}, "name": "pn"}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let queries = [
        json!({"selector": {"a": 1}}),
        json!({"selector": {"a": {"$gt": 1}}}),
        json!({"selector": {"a": {"$lte": "ab"}, "b": {"$exists": true}}}),
        json!({"selector": {"a": {"$in": [1, "b", null]}}}),
        json!({"selector": {"a": {"$beginsWith": "a"}}}),
        json!({"selector": {"b": 2, "a": {"$gte": 0, "$lt": "b"}}}),
        json!({"selector": {"b": {"$in": [true, 0]}, "a": {"$exists": false}}}),
        json!({"selector": {"a": {"$type": "array"}}}),
        json!({"selector": {"a": {"$exists": true}, "n": {"$gt": 10}}}),
        json!({"selector": {"n": {"$gt": 10}, "a": {"$exists": true}}, "sort": ["n"], "limit": 6, "use_index": "pn"}),
        json!({"selector": {"a": {"$gt": 0}}, "sort": [{"a": "desc"}], "limit": 7, "skip": 3}),
        json!({"selector": {"b": {"$gt": null}}, "sort": ["b", "a"], "limit": 9}),
        json!({"selector": {"b": 1}, "sort": [{"a": "desc"}], "limit": 4}),
        json!({"selector": {"a": {"$ne": 1}}, "sort": [{"b": "asc"}, {"a": "desc"}], "limit": 11}),
        json!({"selector": {"b": {"$gte": 1}}, "sort": [{"n": "asc"}], "limit": 5}),
    ];
    for q in queries {
        let mut body = q.clone();
        if q.get("sort").is_none() {
            body["limit"] = json!(100_000);
        }
        let scan = find(store, &plain, body.clone()).await;
        let mut fq = FindQuery::from_json(&body).unwrap();
        fq.execution_stats = true;
        let out = store.find(&indexed, fq).await.unwrap();
        if q.get("sort").is_some() {
            assert_eq!(out.docs, scan, "{q}");
        }
        let (mut a, mut b) = (ids(&scan), ids(&out.docs));
        a.sort();
        b.sort();
        assert_eq!(a, b, "{q}");
        let stats = out.stats.expect("stats");
        assert!(stats.index.is_some(), "{q} used no index");
        assert_eq!(out.warning, None, "{q}");
    }
    store.drop_instance(&plain).await.unwrap();
    store.drop_instance(&indexed).await.unwrap();
}

/// Creates, replaces, removes and bulk writes keep every index exact; a partial index
/// holds only matching documents.
pub async fn indexes_follow_every_write(store: &dyn DocStore) {
    let inst = fresh(store).await;
    let by_type = IndexDef::from_json(&json!({"fields": ["type"], "name": "t"})).unwrap();
    let active = IndexDef::from_json(
        &json!({"fields": ["type"], "name": "active", "partialFilter": {"active": true}}),
    )
    .unwrap();
    store.create_index(&inst, by_type).await.unwrap();
    store.create_index(&inst, active).await.unwrap();
    let q =
        |t: &str, index: &str| json!({"selector": {"type": t}, "use_index": index, "limit": 100});
    store
        .create(
            &inst,
            Some(id("a")),
            doc(json!({"type": "x", "active": true})),
        )
        .await
        .unwrap();
    store
        .create(
            &inst,
            Some(id("b")),
            doc(json!({"type": "x", "active": false})),
        )
        .await
        .unwrap();
    assert_eq!(ids(&find(store, &inst, q("x", "t")).await), ["a", "b"]);
    assert_eq!(ids(&find(store, &inst, q("x", "active")).await), ["a"]);

    store
        .replace(&inst, &id("a"), doc(json!({"type": "y", "active": true})))
        .await
        .unwrap();
    assert_eq!(ids(&find(store, &inst, q("x", "t")).await), ["b"]);
    assert_eq!(ids(&find(store, &inst, q("y", "t")).await), ["a"]);
    assert!(find(store, &inst, q("x", "active")).await.is_empty());

    let ops = BulkOp::parse_all(json!([
        {"_id": "b", "type": "y", "active": true},
        {"_id": "c", "type": "x", "active": true},
        {"_id": "a", "_deleted": true},
    ]))
    .unwrap();
    store.bulk(&inst, ops).await.unwrap();
    assert_eq!(ids(&find(store, &inst, q("y", "t")).await), ["b"]);
    assert_eq!(ids(&find(store, &inst, q("x", "active")).await), ["c"]);
    store.remove(&inst, &id("c")).await.unwrap();
    assert!(find(store, &inst, q("x", "t")).await.is_empty());
    // A failed write leaves the index as it was.
    let dup = store
        .create(&inst, Some(id("b")), doc(json!({"type": "z"})))
        .await;
    assert!(matches!(dup, Err(Error::Conflict(_))));
    assert!(find(store, &inst, q("z", "t")).await.is_empty());
    store.drop_instance(&inst).await.unwrap();
}

/// Creating an index twice is fine; another definition under the same name conflicts;
/// the list names them all.
pub async fn index_definitions(store: &dyn DocStore) {
    let inst = fresh(store).await;
    let def = IndexDef::from_json(&json!({"fields": ["a", {"b": "desc"}]})).unwrap();
    store.create_index(&inst, def.clone()).await.unwrap();
    store.create_index(&inst, def.clone()).await.unwrap();
    let other = IndexDef::from_json(&json!({"fields": ["c"], "name": def.name})).unwrap();
    let r = store.create_index(&inst, other).await;
    assert!(matches!(r, Err(Error::Conflict(_))), "{r:?}");
    let listed = store.indexes(&inst).await.unwrap();
    assert_eq!(listed, [def]);
    store.drop_instance(&inst).await.unwrap();
}

/// A document over the size limit is refused and nothing is stored.
pub async fn oversized_documents_are_refused(store: &dyn DocStore) {
    let inst = fresh(store).await;
    let big = "x".repeat(MAX_DOC_BYTES);
    let r = store
        .create(&inst, Some(id("big")), doc(json!({"s": big})))
        .await;
    assert!(matches!(r, Err(Error::TooLarge(_))), "{r:?}");
    assert_eq!(get(store, &inst, "big").await, None);
    store.drop_instance(&inst).await.unwrap();
}

async fn collect<T>(mut s: Pin<Box<dyn Stream<Item = T> + Send>>) -> Vec<T> {
    let mut out = Vec::new();
    while let Some(item) = poll_fn(|cx| s.as_mut().poll_next(cx)).await {
        out.push(item);
    }
    out
}

/// The change log as [`DocStore::changes`] answers it from `since` on, page by page.
async fn all_changes(
    store: &dyn DocStore,
    inst: &Instance,
    since: u64,
) -> Vec<(u64, String, bool)> {
    let mut out = Vec::new();
    let mut at = since;
    loop {
        let page = store.changes(inst, at, 3).await.expect("changes");
        if page.changes.is_empty() {
            assert_eq!(page.last_seq, at);
            return out;
        }
        at = page.last_seq;
        out.extend(page.changes.into_iter().map(|c| (c.seq, c.id, c.deleted)));
    }
}

/// Every applied write appends its changes, numbered from 1 in order; failed writes and
/// bulk entries that did not apply append nothing; reads resume exactly after `since`.
pub async fn changes_follow_every_write_in_order(store: &dyn DocStore) {
    let inst = fresh(store).await;
    assert_eq!(store.change_head(&inst).await.unwrap(), 0);
    let empty = store.changes(&inst, 0, 10).await.unwrap();
    assert!(empty.changes.is_empty());
    assert_eq!(empty.last_seq, 0);
    store
        .create(&inst, Some(id("a")), doc(json!({"v": 1})))
        .await
        .unwrap();
    store
        .replace(&inst, &id("a"), doc(json!({"v": 2})))
        .await
        .unwrap();
    assert!(
        store
            .create(&inst, Some(id("a")), doc(json!({"v": 3})))
            .await
            .is_err()
    );
    assert!(
        store
            .replace(&inst, &id("zz"), doc(json!({"v": 3})))
            .await
            .is_err()
    );
    assert!(store.remove(&inst, &id("zz")).await.is_err());
    store
        .create(&inst, Some(id("b")), doc(json!({"v": 1})))
        .await
        .unwrap();
    store.remove(&inst, &id("a")).await.unwrap();
    let ops = BulkOp::parse_all(json!([
        {"_id": "c", "v": 1},
        {"_id": "b", "_deleted": true},
        {"_id": "nope", "_deleted": true},
        {"v": "no id"},
        {"_id": "c", "v": 2},
    ]))
    .unwrap();
    store.bulk(&inst, ops).await.unwrap();
    let want: Vec<(u64, String, bool)> = [
        ("a", false),
        ("a", false),
        ("b", false),
        ("a", true),
        ("c", false),
        ("b", true),
        ("c", false),
    ]
    .iter()
    .enumerate()
    .map(|(i, (d, del))| (i as u64 + 1, (*d).to_owned(), *del))
    .collect();
    assert_eq!(all_changes(store, &inst, 0).await, want);
    assert_eq!(all_changes(store, &inst, 4).await, want[4..].to_vec());
    assert_eq!(store.change_head(&inst).await.unwrap(), 7);
    let page = store.changes(&inst, 2, 2).await.unwrap();
    assert_eq!(
        page.changes.iter().map(|c| c.seq).collect::<Vec<_>>(),
        vec![3, 4]
    );
    assert_eq!(page.last_seq, 4);
    // Beyond the head: the client must start over.
    assert!(matches!(
        store.changes(&inst, 8, 10).await,
        Err(Error::Gone(_))
    ));
    // Another instance's log is its own.
    let other = fresh(store).await;
    assert_eq!(store.change_head(&other).await.unwrap(), 0);
}

/// Compaction removes old entries; a position before the oldest kept one is refused
/// ([`Error::Gone`]), later ones still read, and numbering goes on after the head.
pub async fn compaction_refuses_positions_it_removed(store: &dyn DocStore) {
    let inst = fresh(store).await;
    for k in ["a", "b", "c"] {
        store
            .create(&inst, Some(id(k)), doc(json!({"v": 1})))
            .await
            .unwrap();
    }
    assert_eq!(
        store.compact_changes(0).await.unwrap(),
        0,
        "nothing is that old"
    );
    assert_eq!(all_changes(store, &inst, 0).await.len(), 3);
    assert!(store.compact_changes(i64::MAX).await.unwrap() >= 3);
    for since in [0, 2] {
        let err = store.changes(&inst, since, 10).await.unwrap_err();
        assert!(
            matches!(&err, Error::Gone(m) if m.contains("since=0")),
            "{err:?}"
        );
    }
    let page = store.changes(&inst, 3, 10).await.unwrap();
    assert!(page.changes.is_empty());
    assert_eq!(page.last_seq, 3);
    assert_eq!(store.change_head(&inst).await.unwrap(), 3);
    store.remove(&inst, &id("a")).await.unwrap();
    assert_eq!(
        all_changes(store, &inst, 3).await,
        vec![(4, "a".to_owned(), true)]
    );
}

/// Subscribed listeners are told about a write's instance before it is acknowledged.
pub async fn writes_tell_feed_listeners(store: &dyn DocStore) {
    use crate::{InstanceId, ports::changes::FeedListener};
    use std::sync::{Arc, Mutex, Weak};
    #[derive(Default)]
    struct Seen(Mutex<Vec<InstanceId>>);
    impl FeedListener for Seen {
        fn changed(&self, instance: InstanceId) {
            self.0.lock().unwrap().push(instance);
        }
        fn resync(&self) {}
    }
    let seen = Arc::new(Seen::default());
    let weak: Weak<Seen> = Arc::downgrade(&seen);
    let weak: Weak<dyn FeedListener> = weak;
    store.subscribe_changes(weak);
    let inst = fresh(store).await;
    store
        .create(&inst, Some(id("a")), doc(json!({"v": 1})))
        .await
        .unwrap();
    assert!(seen.0.lock().unwrap().contains(&inst.id));
    seen.0.lock().unwrap().clear();
    let ops = BulkOp::parse_all(json!([{"_id": "b"}, {"_id": "a", "_deleted": true}])).unwrap();
    store.bulk(&inst, ops).await.unwrap();
    assert!(seen.0.lock().unwrap().contains(&inst.id));
}

/// Writers running at once: a reader following the log while they write sees every
/// applied write exactly once, numbered without gaps, and never an entry it already read.
pub async fn concurrent_writes_are_read_exactly_once(store: &dyn DocStore) {
    use std::cell::Cell;
    let inst = fresh(store).await;
    const WRITERS: usize = 8;
    const EACH: usize = 25;
    let done = Cell::new(0usize);
    let writers = (0..WRITERS).map(|w| {
        let (inst, done) = (&inst, &done);
        async move {
            for i in 0..EACH {
                if i % 5 == 4 {
                    let ops = BulkOp::parse_all(json!([
                        {"_id": format!("w{w}-{i}-x")},
                        {"_id": format!("w{w}-{i}-y")},
                    ]))
                    .unwrap();
                    store.bulk(inst, ops).await.unwrap();
                } else {
                    store
                        .create(inst, Some(id(&format!("w{w}-{i}"))), doc(json!({"i": i})))
                        .await
                        .unwrap();
                }
            }
            done.set(done.get() + 1);
        }
    });
    let reader = async {
        let mut got: Vec<(u64, String, bool)> = Vec::new();
        let mut at = 0;
        loop {
            let finished = done.get() == WRITERS;
            let page = store.changes(&inst, at, 7).await.unwrap();
            at = page.last_seq;
            let empty = page.changes.is_empty();
            got.extend(page.changes.into_iter().map(|c| (c.seq, c.id, c.deleted)));
            if finished && empty {
                return got;
            }
            tokio_yield().await;
        }
    };
    let (_, got) =
        futures_util::future::join(futures_util::future::join_all(writers), reader).await;
    let per_writer = EACH + EACH / 5;
    assert_eq!(got.len(), WRITERS * per_writer);
    for (i, (seq, _, _)) in got.iter().enumerate() {
        assert_eq!(*seq, i as u64 + 1, "numbered without gaps, in order");
    }
    let ids: std::collections::HashSet<&str> = got.iter().map(|(_, d, _)| d.as_str()).collect();
    assert_eq!(ids.len(), got.len(), "each write once");
}

/// Let other futures of the same task run (a reader polling between writes).
async fn tokio_yield() {
    let mut yielded = false;
    poll_fn(|cx| {
        if yielded {
            std::task::Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
    .await;
}
