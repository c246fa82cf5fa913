use super::*;
use crate::mango::{exec::Collector, keycode::encode};
use proptest::prelude::*;
use serde_json::json;

/// Answer `q` the way an adapter does: walk the planned index (an in-memory sorted list of
/// `(key, id)` entries) or every document in `_id` order, feeding a collector.
fn run(q: &FindQuery, docs: &[Value], indexes: &[IndexDef]) -> (Vec<Value>, Plan, u64) {
    let p = plan(q, indexes);
    let mut c = Collector::new(q, p.ordered);
    let mut by_id: Vec<&Value> = docs.iter().collect();
    by_id.sort_by_key(|d| d["_id"].as_str().unwrap_or_default().to_owned());
    match p.index {
        None => {
            for d in by_id {
                if !c.offer(d.clone()) {
                    break;
                }
            }
        }
        Some(i) => {
            let def = &indexes[i];
            let mut entries: Vec<(Vec<u8>, String, &Value)> = by_id
                .iter()
                .filter_map(|d| {
                    let id = d["_id"].as_str()?.to_owned();
                    def.key_of(d).map(|k| (k, id, *d))
                })
                .collect();
            entries.sort_by(|x, y| (&x.0, &x.1).cmp(&(&y.0, &y.1)));
            let mut ranges: Vec<&KeyRange> = p.ranges.iter().collect();
            if p.descending {
                ranges.reverse();
            }
            'walk: for r in ranges {
                let mut hits: Vec<_> = entries.iter().filter(|e| r.contains(&e.0)).collect();
                if p.descending {
                    hits.reverse();
                }
                for e in hits {
                    if !c.offer(e.2.clone()) {
                        break 'walk;
                    }
                }
            }
        }
    }
    let examined = c.examined();
    (c.finish(&p, None, 0.0).docs, p, examined)
}

fn query(v: Value) -> FindQuery {
    FindQuery::from_json(&v).unwrap()
}

fn index(v: Value) -> IndexDef {
    IndexDef::from_json(&v).unwrap()
}

fn docs() -> Vec<Value> {
    (0..40)
        .map(|i| {
            let t = ["a", "b", "c", "d"][i % 4];
            json!({"_id": format!("d{i:02}"), "type": t, "n": i})
        })
        .collect()
}

#[test]
fn equality_on_an_indexed_field_walks_only_its_point() {
    let idx = [index(json!({"fields": ["type"]}))];
    let q = query(json!({"selector": {"type": "b"}, "limit": 3}));
    let (got, p, examined) = run(&q, &docs(), &idx);
    assert_eq!(p.index, Some(0));
    assert_eq!(p.ranges.len(), 1);
    assert!(p.ordered);
    assert_eq!(p.warning, None);
    let ids: Vec<_> = got.iter().map(|d| d["_id"].clone()).collect();
    assert_eq!(ids, [json!("d01"), json!("d05"), json!("d09")]);
    assert_eq!(examined, 3, "stops after the limit");
}

#[test]
fn without_a_usable_index_it_scans_and_warns() {
    let idx = [index(json!({"fields": ["type"]}))];
    let q = query(json!({"selector": {"n": {"$gt": 35}}}));
    let (got, p, examined) = run(&q, &docs(), &idx);
    assert_eq!(p.index, None);
    assert_eq!(p.warning.as_deref(), Some(NO_INDEX_WARNING));
    assert_eq!(got.len(), 4);
    assert_eq!(examined, 40);
}

#[test]
fn compound_ranges_and_sort_by_index_order() {
    let idx = [
        index(json!({"fields": ["type"]})),
        index(json!({"fields": ["type", "n"]})),
    ];
    let q = query(json!({
        "selector": {"type": "c", "n": {"$gte": 10, "$lt": 30}},
        "sort": [{"type": "desc"}, {"n": "desc"}], "limit": 2
    }));
    let (got, p, examined) = run(&q, &docs(), &idx);
    assert_eq!(p.index, Some(1));
    assert!(p.ordered && p.descending);
    assert_eq!(got, [docs()[26].clone(), docs()[22].clone()]);
    assert_eq!(examined, 2);

    // Sorting on the field after the fixed one is served too.
    let q = query(json!({"selector": {"type": "c"}, "sort": [{"n": "DESC"}], "limit": 1}));
    let (got, p, _) = run(&q, &docs(), &idx);
    assert_eq!((p.index, p.ordered), (Some(1), true));
    assert_eq!(got, [docs()[38].clone()]);
}

#[test]
fn mixed_directions_sort_in_memory() {
    let idx = [index(json!({"fields": ["type", "n"]}))];
    let q = query(json!({"selector": {"type": {"$in": ["a", "b"]}},
                         "sort": [{"type": "asc"}, {"n": "desc"}], "limit": 3}));
    let (got, p, _) = run(&q, &docs(), &idx);
    assert_eq!(p.index, Some(0));
    assert!(!p.ordered);
    let ns: Vec<_> = got.iter().map(|d| d["n"].clone()).collect();
    assert_eq!(ns, [json!(36), json!(32), json!(28)]);
}

#[test]
fn partial_indexes_only_when_implied_or_named() {
    let idx = [index(
        json!({"fields": ["n"], "partialFilter": {"type": "a"}}),
    )];
    let q = query(json!({"selector": {"n": {"$gt": 5}}}));
    assert_eq!(plan(&q, &idx).index, None);
    let q = query(json!({"selector": {"type": "a", "n": {"$gt": 5}}}));
    assert_eq!(plan(&q, &idx).index, Some(0));
    let q = query(json!({"selector": {"n": {"$gt": 5}}, "use_index": "idx-n-partial-x"}));
    let p = plan(&q, &idx);
    assert_eq!(p.index, None);
    assert_eq!(
        p.warning.as_deref(),
        Some("use_index \"idx-n-partial-x\" is not an index of this instance; it was ignored")
    );
    let q = query(json!({"selector": {"n": {"$gt": 5}}, "use_index": idx[0].name}));
    assert_eq!(plan(&q, &idx).index, Some(0));
}

#[test]
fn in_ranges_include_arrays() {
    let idx = [index(json!({"fields": ["t"]}))];
    let docs = vec![
        json!({"_id": "1", "t": "x"}),
        json!({"_id": "2", "t": ["y", "x"]}),
        json!({"_id": "3", "t": "z"}),
    ];
    let q = query(json!({"selector": {"t": {"$in": ["x"]}}}));
    let (got, p, _) = run(&q, &docs, &idx);
    assert_eq!(p.index, Some(0));
    assert_eq!(got, docs[..2]);
}

#[test]
fn begins_with_is_a_prefix_range() {
    let idx = [index(json!({"fields": ["s"]}))];
    let docs: Vec<Value> = ["a", "ab", "abc", "b", "a\u{0}"]
        .iter()
        .enumerate()
        .map(|(i, s)| json!({"_id": i.to_string(), "s": s}))
        .collect();
    let q = query(json!({"selector": {"s": {"$beginsWith": "ab"}}}));
    let (got, p, examined) = run(&q, &docs, &idx);
    assert_eq!(p.ranges[0].lo[..], encode(&json!("ab"))[..3]);
    assert_eq!(got.len(), 2);
    assert_eq!(examined, 2);
}

#[test]
fn empty_or_and_empty_all_as_in_couchdb() {
    let idx = [index(
        json!({"fields": ["a"], "partialFilter": {"$or": []}}),
    )];
    let docs = vec![
        json!({"_id": "1", "a": 1}),
        json!({"_id": "2", "a": [2]}),
        json!({"_id": "3"}),
    ];
    // `$or: []` matches everything, so the partial index holds every document.
    let q = query(json!({"selector": {"$or": [], "a": {"$gte": 1}}}));
    let (got, p, _) = run(&q, &docs, &idx);
    assert_eq!(p.index, Some(0));
    assert_eq!(got, docs[..2]);
    let (got, _, _) = run(&query(json!({"selector": {"$or": []}})), &docs, &idx);
    assert_eq!(got, docs);
    // `$all: []` matches nothing, arrays included.
    let q = query(json!({"selector": {"$or": [], "a": {"$all": []}}}));
    let (got, p, _) = run(&q, &docs, &idx);
    assert_eq!(p.index, Some(0));
    assert_eq!(got, Vec::<Value>::new());
}

fn arb_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(null)),
        Just(json!(false)),
        Just(json!(true)),
        Just(json!(0)),
        Just(json!(1)),
        Just(json!(1.0)),
        Just(json!(2)),
        Just(json!(1.5)),
        Just(json!("a")),
        Just(json!("ab")),
        Just(json!("b")),
        Just(json!([1])),
        Just(json!([1, 2])),
        Just(json!([])),
        Just(json!({"x": 1})),
    ]
}

fn arb_doc(i: usize) -> impl Strategy<Value = Value> {
    (prop::option::of(arb_value()), prop::option::of(arb_value())).prop_map(move |(a, b)| {
        let mut m = serde_json::Map::new();
        m.insert("_id".into(), json!(format!("d{i:03}")));
        if let Some(a) = a {
            m.insert("a".into(), a);
        }
        if let Some(b) = b {
            m.insert("b".into(), b);
        }
        Value::Object(m)
    })
}

fn arb_cond() -> impl Strategy<Value = Value> {
    prop_oneof![
        arb_value(),
        arb_value().prop_map(|v| json!({"$eq": v})),
        arb_value().prop_map(|v| json!({"$gt": v})),
        arb_value().prop_map(|v| json!({"$gte": v})),
        arb_value().prop_map(|v| json!({"$lt": v})),
        arb_value().prop_map(|v| json!({"$lte": v})),
        arb_value().prop_map(|v| json!({"$ne": v})),
        prop::collection::vec(arb_value(), 0..3).prop_map(|v| json!({"$in": v})),
        prop::collection::vec(arb_value(), 0..3).prop_map(|v| json!({"$nin": v})),
        any::<bool>().prop_map(|b| json!({"$exists": b})),
        prop_oneof![
            Just("number"),
            Just("string"),
            Just("array"),
            Just("boolean")
        ]
        .prop_map(|t| json!({"$type": t})),
        prop_oneof![Just("a"), Just("")].prop_map(|p| json!({"$beginsWith": p})),
        Just(json!({"$size": 1})),
        Just(json!({"$elemMatch": {"$eq": 1}})),
        Just(json!({"$not": {"$gt": 1}})),
        prop::collection::vec(arb_value(), 0..3).prop_map(|v| json!({"$all": v})),
        Just(json!({"$or": []})),
        Just(json!({"$not": {"$all": []}})),
    ]
}

fn arb_selector() -> impl Strategy<Value = Value> {
    let field = prop_oneof![Just("a"), Just("b")];
    // Empty `$or`/`$nor` lists match everything (CouchDB), so they may sit beside
    // conditions an index can use, and may be the partial filter of the index chosen.
    let atom = prop_oneof![
        8 => (field, arb_cond()).prop_map(|(f, c)| json!({ f: c })),
        1 => Just(json!({"$or": []})),
        1 => Just(json!({"$nor": []})),
        1 => Just(json!({"$not": {"$or": []}})),
    ]
    .boxed();
    prop_oneof![
        atom.clone(),
        prop::collection::vec(atom.clone(), 0..4).prop_map(|v| json!({"$and": v})),
        prop::collection::vec(atom.clone(), 0..3).prop_map(|v| json!({"$or": v})),
        prop::collection::vec(atom, 0..3).prop_map(|v| json!({"$nor": v})),
    ]
}

fn arb_sort() -> impl Strategy<Value = Value> {
    let dir = prop_oneof![Just("asc"), Just("desc")];
    prop_oneof![
        Just(json!([])),
        dir.clone().prop_map(|d| json!([{"a": d}])),
        dir.clone().prop_map(|d| json!([{"a": d}, {"b": d}])),
        dir.clone().prop_map(|d| json!([{"b": d}])),
        (dir.clone(), dir).prop_map(|(d, e)| json!([{"b": d}, {"a": e}])),
    ]
}

fn indexes() -> Vec<IndexDef> {
    vec![
        // First, so it wins ties with `[a]` whenever the selector has an `$or: []` conjunct.
        index(json!({"fields": ["a"], "partialFilter": {"$or": []}})),
        index(json!({"fields": ["a"]})),
        index(json!({"fields": ["a", "b"]})),
        index(json!({"fields": ["b", "a"]})),
        index(json!({"fields": ["b"], "partialFilter": {"a": {"$exists": true}}})),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Whatever index the planner picks, the answer is the full scan's.
    #[test]
    fn answers_with_indexes_equal_answers_by_full_scan(
        docs in (0usize..30).prop_flat_map(|n| (0..n).map(arb_doc).collect::<Vec<_>>()),
        selector in arb_selector(),
        sort in arb_sort(),
        limit in 0usize..8,
        skip in 0usize..4,
    ) {
        let sorted = sort.as_array().is_some_and(|s| !s.is_empty());
        let body = if sorted {
            json!({"selector": selector, "sort": sort, "limit": limit, "skip": skip})
        } else {
            json!({"selector": selector, "limit": 100_000})
        };
        let q = query(body);
        let (with_index, _, _) = run(&q, &docs, &indexes());
        let (by_scan, p, _) = run(&q, &docs, &[]);
        prop_assert_eq!(p.index, None);
        if sorted {
            prop_assert_eq!(with_index, by_scan);
        } else {
            let ids = |v: &[Value]| {
                let mut ids: Vec<String> = v.iter().map(|d| d["_id"].to_string()).collect();
                ids.sort();
                ids
            };
            prop_assert_eq!(ids(&with_index), ids(&by_scan));
        }
    }
}
