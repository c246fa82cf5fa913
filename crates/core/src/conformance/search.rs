//! Conformance of [`SearchIndex`]: every search adapter runs each case (see [`super`]),
//! including the relevance set ([`relevance`]): a fixed corpus (`search_corpus.json`) and
//! queries with typos, prefixes and several words (`search_queries.json`), each with the
//! document that must rank first.

use serde_json::{Value, json};

use super::instance;
use crate::{
    Error, Instance, InstanceConfig,
    ports::search::{SearchConfig, SearchIndex},
    search::{SearchDoc, SearchMatch, SearchQuery},
};

/// The relevance corpus: movies with `id`, `title`, `body`, `year`, `genre`.
pub const CORPUS: &str = include_str!("search_corpus.json");
/// The relevance queries: `{query, top, why}`; `top` is the id that must rank first.
pub const QUERIES: &str = include_str!("search_queries.json");

fn config(fields: &[&str], store: &[&str]) -> SearchConfig {
    SearchConfig {
        fields: fields.iter().map(|s| (*s).to_owned()).collect(),
        store_fields: store.iter().map(|s| (*s).to_owned()).collect(),
    }
}

async fn fresh(port: &dyn SearchIndex, fields: &[&str], store: &[&str]) -> Instance {
    let inst = instance(InstanceConfig::Search(config(fields, store)));
    port.create_instance(&inst).await.expect("create_instance");
    inst
}

fn search_config(inst: &Instance) -> &SearchConfig {
    match &inst.config {
        InstanceConfig::Search(c) => c,
        other => panic!("not a search instance: {other:?}"),
    }
}

fn doc(inst: &Instance, key: &str, body: Value) -> SearchDoc {
    let Value::Object(map) = body else {
        panic!("documents are objects")
    };
    SearchDoc::new(key.parse().expect("key"), map, search_config(inst)).expect("valid document")
}

async fn query(port: &dyn SearchIndex, inst: &Instance, body: Value) -> Vec<SearchMatch> {
    let q = SearchQuery::from_json(&body, search_config(inst)).expect("valid query");
    port.query(inst, &q).await.expect("query")
}

async fn ids(port: &dyn SearchIndex, inst: &Instance, text: &str) -> Vec<String> {
    query(port, inst, json!({ "query": text }))
        .await
        .into_iter()
        .map(|m| m.id)
        .collect()
}

async fn get_text(port: &dyn SearchIndex, inst: &Instance, key: &str) -> Option<String> {
    port.get(inst, &key.parse().expect("key"))
        .await
        .expect("get")
        .map(|raw| raw.get().to_owned())
}

/// Index, read back exactly, refuse a duplicate, replace, remove; each with its error.
pub async fn index_get_update_remove(port: &dyn SearchIndex) {
    let inst = fresh(port, &["title"], &[]).await;
    let name = inst.name.as_str().to_owned();
    port.index(
        &inst,
        doc(
            &inst,
            "k1",
            json!({"title": "Alpha", "b": [1, {"z": 2, "a": 1}]}),
        ),
    )
    .await
    .expect("index");
    assert_eq!(
        get_text(port, &inst, "k1").await.as_deref(),
        Some(r#"{"title":"Alpha","b":[1,{"z":2,"a":1}]}"#),
        "get answers the document as indexed, key order kept"
    );
    let dup = port
        .index(&inst, doc(&inst, "k1", json!({"title": "Other"})))
        .await;
    assert_eq!(
        dup,
        Err(Error::Conflict(format!(
            "search document \"k1\" already exists in \"{name}\"; replace it with PUT \
             /search/{name}/k1 or bulk-index it"
        )))
    );
    assert_eq!(ids(port, &inst, "other").await, Vec::<String>::new());
    port.update(&inst, doc(&inst, "k1", json!({"title": "Beta"})))
        .await
        .expect("update");
    assert_eq!(
        get_text(port, &inst, "k1").await.as_deref(),
        Some(r#"{"title":"Beta"}"#)
    );
    let missing = format!("search document \"nope\" does not exist in \"{name}\"");
    assert_eq!(
        port.update(&inst, doc(&inst, "nope", json!({"title": "x"})))
            .await,
        Err(Error::NotFound(missing.clone()))
    );
    assert_eq!(get_text(port, &inst, "nope").await, None);
    port.remove(&inst, &"k1".parse().expect("key"))
        .await
        .expect("remove");
    assert_eq!(get_text(port, &inst, "k1").await, None);
    assert_eq!(
        port.remove(&inst, &"nope".parse().expect("key")).await,
        Err(Error::NotFound(missing))
    );
    // A removed key can be indexed again.
    port.index(&inst, doc(&inst, "k1", json!({"title": "Gamma"})))
        .await
        .expect("index again");
    assert_eq!(ids(port, &inst, "gamma").await, ["k1"]);
    port.drop_instance(&inst).await.expect("drop");
}

/// Every acknowledged write is visible to the query that follows it.
pub async fn writes_are_visible_to_the_next_query(port: &dyn SearchIndex) {
    let inst = fresh(port, &["title"], &[]).await;
    let words = ["alpha", "bravo", "charlie", "delta", "echo"];
    for (i, word) in words.into_iter().enumerate() {
        let key = format!("d{i}");
        port.index(
            &inst,
            doc(&inst, &key, json!({"title": format!("{word} shared")})),
        )
        .await
        .expect("index");
        assert_eq!(ids(port, &inst, word).await, std::slice::from_ref(&key));
        assert_eq!(ids(port, &inst, "shared").await.len(), i + 1);
    }
    port.update(&inst, doc(&inst, "d0", json!({"title": "replaced"})))
        .await
        .expect("update");
    assert_eq!(ids(port, &inst, "alpha").await, Vec::<String>::new());
    assert_eq!(ids(port, &inst, "replaced").await, ["d0"]);
    port.remove(&inst, &"d1".parse().expect("key"))
        .await
        .expect("remove");
    assert_eq!(ids(port, &inst, "bravo").await, Vec::<String>::new());
    assert_eq!(ids(port, &inst, "shared").await.len(), 3);
    port.drop_instance(&inst).await.expect("drop");
}

/// Bulk upserts every document in order; a later entry with the same key wins.
pub async fn bulk_upserts_in_order(port: &dyn SearchIndex) {
    let inst = fresh(port, &["title"], &["title"]).await;
    port.index(&inst, doc(&inst, "b", json!({"title": "old b"})))
        .await
        .expect("index");
    let docs = vec![
        doc(&inst, "a", json!({"_id": "a", "title": "first a"})),
        doc(&inst, "b", json!({"_id": "b", "title": "new b"})),
        doc(&inst, "a", json!({"_id": "a", "title": "second a"})),
    ];
    port.bulk(&inst, docs).await.expect("bulk");
    assert_eq!(
        get_text(port, &inst, "a").await.as_deref(),
        Some(r#"{"_id":"a","title":"second a"}"#)
    );
    assert_eq!(
        get_text(port, &inst, "b").await.as_deref(),
        Some(r#"{"_id":"b","title":"new b"}"#)
    );
    assert_eq!(ids(port, &inst, "first").await, Vec::<String>::new());
    assert_eq!(ids(port, &inst, "old").await, Vec::<String>::new());
    let mut all = ids(port, &inst, "a b").await;
    all.sort();
    assert_eq!(all, ["a", "b"]);
    port.bulk(&inst, Vec::new()).await.expect("empty bulk");
    port.drop_instance(&inst).await.expect("drop");
}

/// `documents` walks every live document once, by key, page by page, as `get` answers it,
/// also after replacements and removals spread over several commits.
pub async fn documents_walk_every_document_by_key(port: &dyn SearchIndex) {
    let inst = fresh(port, &["title"], &[]).await;
    let keys = ["b", "a", "é", "a1", "Z", "c", "bb", "z"];
    for (i, k) in keys.iter().enumerate() {
        port.index(&inst, doc(&inst, k, json!({"title": format!("t{i}")})))
            .await
            .expect("index");
    }
    port.update(&inst, doc(&inst, "c", json!({"title": "new c"})))
        .await
        .expect("update");
    port.remove(&inst, &"bb".parse().expect("key"))
        .await
        .expect("remove");
    let mut expected: Vec<&str> = keys.iter().copied().filter(|k| *k != "bb").collect();
    expected.sort_unstable();
    for page in [1, 3, 100] {
        let mut got: Vec<(String, String)> = Vec::new();
        let mut after: Option<crate::search::SearchKey> = None;
        loop {
            let chunk = port
                .documents(&inst, after.as_ref(), page)
                .await
                .expect("documents");
            assert!(chunk.len() <= page);
            let Some((last, _)) = chunk.last() else { break };
            after = Some(last.clone());
            got.extend(
                chunk
                    .into_iter()
                    .map(|(k, raw)| (k.as_str().to_owned(), raw.get().to_owned())),
            );
        }
        assert_eq!(
            got.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
            expected,
            "page {page}"
        );
        for (k, text) in &got {
            assert_eq!(
                get_text(port, &inst, k).await.as_deref(),
                Some(text.as_str())
            );
        }
    }
    port.drop_instance(&inst).await.expect("drop");
}

/// `count` follows every acknowledged write: index, bulk (a replacement counts once),
/// remove; other indexes are not counted.
pub async fn count_follows_every_write(port: &dyn SearchIndex) {
    let inst = fresh(port, &["title"], &[]).await;
    let other = fresh(port, &["title"], &[]).await;
    assert_eq!(port.count(&inst).await.expect("count"), 0);
    for k in ["a", "b", "c"] {
        port.index(&inst, doc(&inst, k, json!({"title": k})))
            .await
            .expect("index");
    }
    port.index(&other, doc(&other, "a", json!({"title": "a"})))
        .await
        .expect("index");
    assert_eq!(port.count(&inst).await.expect("count"), 3);
    let docs = vec![
        doc(&inst, "a", json!({"title": "new a"})),
        doc(&inst, "d", json!({"title": "d"})),
    ];
    port.bulk(&inst, docs).await.expect("bulk");
    assert_eq!(port.count(&inst).await.expect("count"), 4);
    port.remove(&inst, &"b".parse().expect("key"))
        .await
        .expect("remove");
    assert_eq!(port.count(&inst).await.expect("count"), 3);
    assert_eq!(port.count(&other).await.expect("count"), 1);
    port.drop_instance(&inst).await.expect("drop");
    port.drop_instance(&other).await.expect("drop");
}

/// No typo below 5 letters, one from 5, two from 9.
pub async fn typo_budget_follows_word_length(port: &dyn SearchIndex) {
    let inst = fresh(port, &["title"], &[]).await;
    let docs = vec![
        doc(&inst, "wars", json!({"title": "wars"})),
        doc(&inst, "matrix", json!({"title": "matrix"})),
        doc(&inst, "terminator", json!({"title": "terminator"})),
    ];
    port.bulk(&inst, docs).await.expect("bulk");
    // (query, expected) — each query ends with a space, so no prefix matching.
    let cases: [(&str, &[&str]); 9] = [
        ("wars ", &["wars"]),
        ("ward ", &[]),          // 4 letters: exact only
        ("wras ", &[]),          // not even a swap
        ("matrx ", &["matrix"]), // 5 letters: one edit
        ("mtrx ", &[]),          // 4 letters
        ("maatrixx ", &[]),      // 8 letters, two edits
        ("terminatr ", &["terminator"]),
        ("termintr ", &[]),               // 8 letters, two edits
        ("treminatro ", &["terminator"]), // 10 letters, two swaps
    ];
    for (q, expected) in cases {
        assert_eq!(ids(port, &inst, q).await, expected, "query {q:?}");
    }
    port.drop_instance(&inst).await.expect("drop");
}

/// Completions match for the last word only, and not after a trailing space.
pub async fn prefix_applies_to_the_last_word_only(port: &dyn SearchIndex) {
    let inst = fresh(port, &["title"], &[]).await;
    port.index(&inst, doc(&inst, "gb", json!({"title": "Ghostbusters"})))
        .await
        .expect("index");
    assert_eq!(ids(port, &inst, "ghost").await, ["gb"]);
    assert_eq!(ids(port, &inst, "gh").await, ["gb"]);
    assert_eq!(
        ids(port, &inst, "ghots").await,
        ["gb"],
        "prefix within one typo"
    );
    assert_eq!(ids(port, &inst, "ghost ").await, Vec::<String>::new());
    assert_eq!(ids(port, &inst, "ghost night").await, Vec::<String>::new());
    assert_eq!(ids(port, &inst, "night ghost").await, ["gb"]);
    port.drop_instance(&inst).await.expect("drop");
}

/// Any word matching is enough; documents matching more words come first, whatever their
/// BM25 score.
pub async fn words_are_ored_and_more_words_rank_first(port: &dyn SearchIndex) {
    let inst = fresh(port, &["title"], &[]).await;
    let docs = vec![
        doc(
            &inst,
            "both",
            json!({"title": "a red apple in a long title with many other words"}),
        ),
        doc(&inst, "red", json!({"title": "red red red"})),
        doc(&inst, "apple", json!({"title": "apple"})),
        doc(&inst, "none", json!({"title": "green pear"})),
    ];
    port.bulk(&inst, docs).await.expect("bulk");
    let found = ids(port, &inst, "red apple ").await;
    assert_eq!(found.len(), 3, "{found:?}");
    assert_eq!(found[0], "both");
    port.drop_instance(&inst).await.expect("drop");
}

/// For the same number of words, an exact match beats a completion, which beats a typo,
/// whatever their BM25 score.
pub async fn exact_beats_prefix_beats_fuzzy(port: &dyn SearchIndex) {
    let inst = fresh(port, &["title"], &[]).await;
    let docs = vec![
        doc(&inst, "fuzzy", json!({"title": "nihgt"})),
        doc(&inst, "prefix", json!({"title": "nightly nightly nightly"})),
        doc(
            &inst,
            "exact",
            json!({"title": "a night among many other words in a long title"}),
        ),
    ];
    port.bulk(&inst, docs).await.expect("bulk");
    assert_eq!(
        ids(port, &inst, "night").await,
        ["exact", "prefix", "fuzzy"]
    );
    port.drop_instance(&inst).await.expect("drop");
}

/// `fields` searches only the named configured fields.
pub async fn fields_limit_the_search(port: &dyn SearchIndex) {
    let inst = fresh(port, &["title", "body"], &[]).await;
    let docs = vec![
        doc(&inst, "t", json!({"title": "comet", "body": "x"})),
        doc(&inst, "b", json!({"title": "x", "body": "comet"})),
    ];
    port.bulk(&inst, docs).await.expect("bulk");
    let only = |fields: Value| json!({"query": "comet", "fields": fields});
    let found = query(port, &inst, only(json!(["title"]))).await;
    assert_eq!(
        found.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(),
        ["t"]
    );
    assert_eq!(
        found[0].explained.matched,
        *json!({"comet": ["title"]}).as_object().unwrap()
    );
    let found = query(port, &inst, only(json!(["body"]))).await;
    assert_eq!(
        found.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(),
        ["b"]
    );
    assert_eq!(query(port, &inst, json!({"query": "comet"})).await.len(), 2);
    port.drop_instance(&inst).await.expect("drop");
}

/// `filter` keeps documents whose top-level fields equal every given value, on any field of
/// the stored document (configured, stored or neither).
pub async fn filter_is_anded_equality_on_top_level_fields(port: &dyn SearchIndex) {
    let inst = fresh(port, &["title"], &["title"]).await;
    let docs = vec![
        doc(
            &inst,
            "m84",
            json!({"title": "night film", "type": "movie", "year": 1984, "tags": ["a", "b"]}),
        ),
        doc(
            &inst,
            "m90",
            json!({"title": "night film", "type": "movie", "year": 1990}),
        ),
        doc(
            &inst,
            "s84",
            json!({"title": "night show", "type": "series", "year": 1984}),
        ),
        doc(&inst, "n", json!({"title": "night", "type": null})),
    ];
    port.bulk(&inst, docs).await.expect("bulk");
    let cases: [(Value, &[&str]); 8] = [
        (json!({"type": "movie"}), &["m84", "m90"]),
        (json!({"type": "movie", "year": 1984}), &["m84"]),
        (json!({"year": 1984.0}), &["m84", "s84"]),
        (json!({"tags": ["a", "b"]}), &["m84"]),
        (json!({"type": null}), &["n"]),
        (json!({"type": "Movie"}), &[]),
        (json!({"year": "1984"}), &[]),
        (json!({"absent": 1}), &[]),
    ];
    for (filter, expected) in cases {
        let mut found: Vec<String> =
            query(port, &inst, json!({"query": "night", "filter": filter}))
                .await
                .into_iter()
                .map(|m| m.id)
                .collect();
        found.sort();
        assert_eq!(found, expected, "filter {filter}");
    }
    // A filter never adds documents the words do not match.
    let found = query(
        port,
        &inst,
        json!({"query": "show", "filter": {"type": "movie"}}),
    )
    .await;
    assert!(found.is_empty());
    port.drop_instance(&inst).await.expect("drop");
}

/// `{id, score, terms, queryTerms, match, ...storeFields}`: matched document terms, the
/// query words they matched, the fields of each term, then the stored fields (a stored
/// field may replace a built-in member, as in MiniSearch; absent ones are left out).
pub async fn matches_have_the_minisearch_shape(port: &dyn SearchIndex) {
    let inst = fresh(port, &["title", "body"], &["title", "year", "id", "absent"]).await;
    port.index(
        &inst,
        doc(
            &inst,
            "k",
            json!({"title": "Ghostbusters", "body": "A ghost story",
                               "year": 1984, "id": "stored id", "hidden": true}),
        ),
    )
    .await
    .expect("index");
    let found = query(port, &inst, json!({"query": "story ghost"})).await;
    assert_eq!(found.len(), 1);
    let m = &found[0];
    assert_eq!(m.id, "k");
    assert!(m.score > 0.0, "{}", m.score);
    let mut wire = m.to_json();
    wire["score"] = json!(1);
    assert_eq!(
        serde_json::to_string(&wire).expect("json"),
        r#"{"id":"stored id","score":1,"terms":["story","ghost","ghostbusters"],"queryTerms":["story","ghost"],"match":{"story":["body"],"ghost":["body"],"ghostbusters":["title"]},"title":"Ghostbusters","year":1984}"#
    );
    port.drop_instance(&inst).await.expect("drop");
}

/// `limit` caps the answer; the best matches are kept.
pub async fn limit_caps_the_answer(port: &dyn SearchIndex) {
    let inst = fresh(port, &["title"], &[]).await;
    let docs = (0..20)
        .map(|i| {
            let title = if i == 7 {
                "lamp lamp".to_owned()
            } else {
                format!("lamp filler words number {i}")
            };
            doc(&inst, &format!("d{i}"), json!({ "title": title }))
        })
        .collect();
    port.bulk(&inst, docs).await.expect("bulk");
    let found = query(port, &inst, json!({"query": "lamp", "limit": 3})).await;
    assert_eq!(found.len(), 3);
    assert_eq!(found[0].id, "d7");
    assert_eq!(query(port, &inst, json!({"query": "lamp"})).await.len(), 20);
    port.drop_instance(&inst).await.expect("drop");
}

/// Without `limit` a query answers at most 100 matches.
pub async fn limit_defaults_to_100(port: &dyn SearchIndex) {
    let inst = fresh(port, &["title"], &[]).await;
    let docs = (0..120)
        .map(|i| {
            doc(
                &inst,
                &format!("d{i:03}"),
                json!({ "title": format!("lamp {i}") }),
            )
        })
        .collect();
    port.bulk(&inst, docs).await.expect("bulk");
    assert_eq!(
        query(port, &inst, json!({"query": "lamp"})).await.len(),
        100
    );
    assert_eq!(
        query(port, &inst, json!({"query": "lamp", "limit": 1000}))
            .await
            .len(),
        120
    );
    port.drop_instance(&inst).await.expect("drop");
}

/// Case and diacritics fold on both sides; numbers, booleans, arrays and nested objects in
/// configured fields are searchable.
pub async fn text_is_folded_and_any_value_is_searchable(port: &dyn SearchIndex) {
    let inst = fresh(port, &["title", "extra"], &[]).await;
    let docs = vec![
        doc(&inst, "am", json!({"title": "AMÉLIE", "extra": null})),
        doc(
            &inst,
            "st",
            json!({"title": "Straße", "extra": ["Überraschung", {"deep": 1984}]}),
        ),
        doc(&inst, "n", json!({"title": 2001, "extra": true})),
    ];
    port.bulk(&inst, docs).await.expect("bulk");
    for (q, expected) in [
        ("amelie ", "am"),
        ("Amélie ", "am"),
        ("strasse ", "st"),
        ("uberraschung ", "st"),
        ("1984 ", "st"),
        ("2001 ", "n"),
        ("true ", "n"),
    ] {
        assert_eq!(ids(port, &inst, q).await, [expected], "query {q:?}");
    }
    port.drop_instance(&inst).await.expect("drop");
}

/// A query text without words (only spaces, punctuation or symbols) is refused by name
/// before it reaches the port; a query built by hand without words finds nothing.
pub async fn queries_without_words_are_refused(port: &dyn SearchIndex) {
    let inst = fresh(port, &["title"], &[]).await;
    port.index(&inst, doc(&inst, "k", json!({"title": "?! hello"})))
        .await
        .expect("index");
    for text in ["?! …", "  ", "-- $ --"] {
        match SearchQuery::from_json(&json!({ "query": text }), search_config(&inst)) {
            Err(Error::Invalid(msg)) => {
                let named = format!("\"query\" {} has no words to search for", json!(text));
                assert!(msg.starts_with(&named), "query {text:?}: {msg}");
            }
            other => panic!("query {text:?}: expected Invalid, got {other:?}"),
        }
    }
    let mut q = SearchQuery::from_json(&json!({"query": "hello"}), search_config(&inst))
        .expect("valid query");
    q.query = "?! …".to_owned();
    assert_eq!(port.query(&inst, &q).await.expect("query"), Vec::new());
    port.drop_instance(&inst).await.expect("drop");
}

/// The relevance set: every query's expected document ranks first. All failures are
/// reported together.
pub async fn relevance(port: &dyn SearchIndex) {
    let inst = fresh(port, &["title", "body"], &["title"]).await;
    let corpus: Vec<Value> = serde_json::from_str(CORPUS).expect("corpus");
    let docs = corpus
        .into_iter()
        .map(|d| SearchDoc::from_bulk_entry(d, search_config(&inst)).expect("corpus document"))
        .collect();
    port.bulk(&inst, docs).await.expect("bulk");
    let queries: Vec<Value> = serde_json::from_str(QUERIES).expect("queries");
    let mut failures = Vec::new();
    for q in &queries {
        let text = q["query"].as_str().expect("query text");
        let top = q["top"].as_str().expect("expected top");
        let found = query(port, &inst, json!({ "query": text, "limit": 5 })).await;
        if found.first().map(|m| m.id.as_str()) != Some(top) {
            let got: Vec<String> = found
                .iter()
                .map(|m| format!("{} ({:.2})", m.id, m.score))
                .collect();
            failures.push(format!(
                "{text:?}: expected {top} ({}), got {}",
                q["why"].as_str().unwrap_or(""),
                got.join(", ")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} relevance queries failed:\n{}",
        failures.len(),
        queries.len(),
        failures.join("\n")
    );
    port.drop_instance(&inst).await.expect("drop");
}
