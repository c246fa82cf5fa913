//! Property-based fuzzing of every parser that reads user input, through the public API:
//! arbitrary text or JSON never panics, only errors; where a parser has an inverse or an
//! invariant, it holds. The modules' own proptests cover their models (glob against a
//! reference matcher, TTL and range round trips, JWT tampering, Mango plans against full
//! scans); this file adds the inputs an attacker picks.
//!
//! Cases per property: proptest's default (256), or `PROPTEST_CASES`; `scripts/fuzz` runs
//! many more. A failing case is kept in `tests/parsers.proptest-regressions` and replayed
//! first on every run.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use proptest::prelude::*;
use quintet_core::{
    AppName, InstanceConfig, InstanceId, InstanceName, ServiceType,
    cache::{CacheKey, Glob, Ttl},
    jwt,
    keys::ConnectionString,
    mango::{FieldPath, FindQuery, IndexDef, Selector},
    object::{
        ObjectPath, PresignMethod, RangeSpec, UrlSigner, if_none_match, if_range_etag,
        presign::{Grant, parse_expiry},
    },
    ports::{
        data::{BulkOp, DocId, ListQuery},
        queue::{IdempotencyKey, JobStatus},
    },
    search::{QueryPlan, SearchKey, SearchQuery},
};
use serde_json::{Map, Value, json};

/// Any JSON value, nested a few levels, with the keys and strings Mango and the
/// configurations read (operators, field names) mixed into arbitrary ones.
fn arb_json() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        prop::sample::select(vec![
            "$eq",
            "$ne",
            "$gt",
            "$gte",
            "$lt",
            "$lte",
            "$exists",
            "$type",
            "$in",
            "$nin",
            "$size",
            "$mod",
            "$regex",
            "$beginsWith",
            "$and",
            "$or",
            "$nor",
            "$not",
            "$all",
            "$elemMatch",
            "$allMatch",
            "$keyMapMatch",
            "$unknown",
            "selector",
            "fields",
            "sort",
            "limit",
            "skip",
            "use_index",
            "execution_stats",
            "name",
            "type",
            "partialFilter",
            "partial_filter_selector",
            "index",
            "_id",
            "_deleted",
            "query",
            "filter",
            "storeFields",
            "target",
            "secret",
            "concurrency",
            "timeout",
            "retries",
            "signJobId",
            "a",
            "a.b",
            "",
        ])
        .prop_map(str::to_owned),
        "\\PC{0,8}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        prop::sample::select(vec![
            "asc",
            "desc",
            "ASC",
            "json",
            "string",
            "number",
            "null",
            "a",
            "a.b",
            "http://127.0.0.1:1/x",
            "",
        ])
        .prop_map(|s| Value::String(s.to_owned())),
        "\\PC{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

proptest! {
    #[test]
    fn mango_selectors_never_panic(sel in arb_json(), doc in arb_json()) {
        if let Ok(s) = Selector::parse(&sel) {
            let _ = s.matches(&doc);
        }
    }

    #[test]
    fn mango_queries_and_indexes_never_panic(body in arb_json(), wrapped in arb_json()) {
        let _ = FindQuery::from_json(&body);
        let _ = FindQuery::from_json(&json!({"selector": wrapped.clone(), "sort": body.clone()}));
        let _ = IndexDef::from_json(&body);
        let _ = IndexDef::from_json(&json!({"fields": wrapped, "partial_filter_selector": body}));
    }

    #[test]
    fn field_paths_never_panic(s in "\\PC{0,40}") {
        let _ = FieldPath::parse(&s);
    }

    #[test]
    fn bulk_bodies_and_documents_never_panic(body in arb_json(), text in "\\PC{0,64}") {
        let _ = BulkOp::parse_all(body.clone());
        let _ = BulkOp::parse_text(&text);
        let _ = BulkOp::parse_text(&body.to_string());
        let _ = quintet_core::ports::data::new_document(body);
    }

    #[test]
    fn list_parameters_never_panic(
        params in prop::collection::vec((
            prop::sample::select(vec!["startkey", "endkey", "start_key", "end_key", "limit", "keys", "descending", "x"]),
            "\\PC{0,10}",
        ), 0..6)
    ) {
        let _ = ListQuery::from_params(params.iter().map(|(k, v)| (*k, v.as_str())));
    }

    #[test]
    fn instance_configurations_never_panic(body in arb_json()) {
        for kind in ServiceType::ALL {
            let _ = InstanceConfig::from_request(kind, Some(&body));
        }
    }

    #[test]
    fn names_and_keys_never_panic_and_round_trip(s in "\\PC{0,80}") {
        if let Ok(n) = s.parse::<InstanceName>() { prop_assert_eq!(n.to_string(), s.clone()); }
        if let Ok(n) = s.parse::<AppName>() { prop_assert_eq!(n.as_str(), s.as_str()); }
        if let Ok(k) = s.parse::<CacheKey>() { prop_assert_eq!(k.as_str(), s.as_str()); }
        let _ = s.parse::<SearchKey>();
        let _ = s.parse::<DocId>();
        let _ = s.parse::<JobStatus>();
        let _ = s.parse::<IdempotencyKey>();
    }

    #[test]
    fn cache_globs_and_ttls_never_panic(p in "\\PC{0,40}", k in "\\PC{0,40}") {
        if let Ok(g) = Glob::new(&p) {
            let _ = g.matches(&k);
            // A pattern without `*` matches exactly itself.
            if !p.contains('*') {
                prop_assert_eq!(g.matches(&k), p == k);
            }
        }
        let _ = p.parse::<Ttl>();
    }

    #[test]
    fn search_queries_never_panic(body in arb_json(), text in "\\PC{0,200}") {
        let config = quintet_core::ports::search::SearchConfig::from_json(
            json!({"fields": ["title", "a"]}).as_object().unwrap(),
        ).unwrap();
        let _ = SearchQuery::from_json(&body, &config);
        let _ = SearchQuery::from_json(&json!({"query": text.clone(), "filter": body}), &config);
        let plan = QueryPlan::new(&text);
        prop_assert!(plan.words.len() <= text.chars().count());
    }

    #[test]
    fn object_paths_never_panic_and_stay_inside(s in "\\PC{0,64}") {
        if let Ok(p) = s.parse::<ObjectPath>() {
            for seg in p.as_str().split('/') {
                prop_assert!(!seg.is_empty() && seg != "." && seg != "..");
            }
            prop_assert!(!p.as_str().contains('\\'));
        }
    }

    #[test]
    fn range_and_condition_headers_never_panic(h in "\\PC{0,40}", size in 0u64..1_000_000) {
        if let Some(spec) = RangeSpec::parse(&h)
            && let Ok(r) = spec.resolve(size)
        {
            prop_assert!(r.start <= r.end && r.end < size);
        }
        let _ = RangeSpec::parse(&format!("bytes={h}"));
        let _ = if_none_match(&h, "\"abc\"");
        let _ = if_range_etag(&h, "\"abc\"");
    }

    #[test]
    fn jwts_never_panic(t in "[A-Za-z0-9_.=-]{0,300}", secret in "\\PC{0,16}") {
        if let Ok(u) = jwt::Unverified::parse(&t) {
            let _ = u.verify(secret.as_bytes(), 0);
        }
    }

    #[test]
    fn connection_strings_never_panic(s in "\\PC{0,120}", tail in "[a-z0-9:@/.%-]{0,40}") {
        let _ = s.parse::<ConnectionString>();
        let _ = format!("cloud://{tail}").parse::<ConnectionString>();
        let _ = format!("http://{tail}").parse::<ConnectionString>();
    }

    #[test]
    fn presigned_parameters_never_panic_and_only_the_signature_passes(
        expires in prop::option::of("\\PC{0,12}"),
        sig in "\\PC{0,80}",
        at in 0i64..4_000_000_000,
    ) {
        let _ = parse_expiry(expires.as_deref());
        let signer = UrlSigner::new("k1", [7; UrlSigner::KEY_LEN], Vec::new());
        let path: ObjectPath = "a/b.txt".parse().unwrap();
        let grant = Grant {
            method: PresignMethod::Get,
            instance: InstanceId(1),
            path: &path,
            expires_at_s: at,
        };
        prop_assert!(signer.verify(&grant, &sig, 0).is_err());
    }
}
