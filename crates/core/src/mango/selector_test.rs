use super::*;
use serde_json::json;

#[track_caller]
fn check(selector: Value, doc: Value, expected: bool) {
    let s = Selector::parse(&selector).unwrap_or_else(|e| panic!("{selector}: {e}"));
    assert_eq!(s.matches(&doc), expected, "{selector} on {doc}");
}

#[track_caller]
fn invalid(selector: Value, msg: &str) {
    match Selector::parse(&selector) {
        Err(Error::Invalid(m)) => assert_eq!(m, msg, "{selector}"),
        other => panic!("{selector}: expected Invalid, got {other:?}"),
    }
}

#[test]
fn equality_and_implicit_forms() {
    check(json!({}), json!({"a": 1}), true);
    check(json!({"a": 1}), json!({"a": 1.0}), true);
    check(json!({"a": 1}), json!({"a": 2}), false);
    check(json!({"a": 1}), json!({}), false);
    check(json!({"a": {"b": 1}}), json!({"a": {"b": 1, "c": 2}}), true);
    check(json!({"a.b": 1}), json!({"a": {"b": 1}}), true);
    check(json!({"a": {}}), json!({"a": {}}), true);
    check(json!({"a": {}}), json!({"a": {"b": 1}}), false);
    check(
        json!({"a": {"$eq": {"b": 1}}}),
        json!({"a": {"b": 1}}),
        true,
    );
    check(json!({"a": [1, 2]}), json!({"a": [1, 2]}), true);
    check(json!({"a": 1}), json!({"a": [1, 2]}), false);
    check(json!({"a": 1, "b": 2}), json!({"a": 1, "b": 2}), true);
    check(json!({"a": 1, "b": 2}), json!({"a": 1, "b": 3}), false);
    check(json!({"a.0": "x"}), json!({"a": ["x", "y"]}), true);
    check(json!({"a\\.b": 1}), json!({"a.b": 1}), true);
}

#[test]
fn comparisons_use_collation_and_need_the_field() {
    check(json!({"n": {"$gt": 5}}), json!({"n": 6}), true);
    check(json!({"n": {"$gt": 5}}), json!({"n": "a"}), true); // strings sort after numbers
    check(json!({"n": {"$lt": 5}}), json!({"n": null}), true);
    check(json!({"n": {"$gte": 5, "$lt": 7}}), json!({"n": 7}), false);
    check(json!({"n": {"$lte": 5}}), json!({"n": 5.0}), true);
    check(json!({"n": {"$ne": 5}}), json!({"n": 4}), true);
    check(json!({"n": {"$ne": 5}}), json!({}), false);
    check(json!({"n": {"$lt": 5}}), json!({}), false);
    check(json!({"s": {"$gt": "B"}}), json!({"s": "a"}), true); // code-point order
}

#[test]
fn exists_and_type() {
    check(json!({"a": {"$exists": true}}), json!({"a": null}), true);
    check(json!({"a": {"$exists": true}}), json!({}), false);
    check(json!({"a": {"$exists": false}}), json!({}), true);
    check(json!({"a": {"$exists": false}}), json!({"a": 1}), false);
    check(json!({"a.b": {"$exists": false}}), json!({"a": 5}), true);
    for (t, v) in [
        ("null", json!(null)),
        ("boolean", json!(false)),
        ("number", json!(1.5)),
        ("string", json!("")),
        ("array", json!([])),
        ("object", json!({})),
    ] {
        check(json!({"a": {"$type": t}}), json!({"a": v}), true);
        check(json!({"a": {"$type": t}}), json!({"a": 7.5}), t == "number");
    }
}

#[test]
fn in_and_nin_test_array_elements() {
    check(json!({"a": {"$in": [1, 2]}}), json!({"a": 2}), true);
    check(json!({"a": {"$in": [1, 2]}}), json!({"a": 3}), false);
    check(json!({"a": {"$in": [1, 2]}}), json!({"a": [5, 2]}), true);
    check(json!({"a": {"$in": [[5, 2]]}}), json!({"a": [5, 2]}), false);
    check(json!({"a": {"$in": []}}), json!({"a": 1}), false);
    check(json!({"a": {"$nin": [1, 2]}}), json!({"a": 3}), true);
    check(json!({"a": {"$nin": [1, 2]}}), json!({"a": [3, 1]}), false);
    check(json!({"a": {"$nin": [1]}}), json!({}), false);
}

#[test]
fn array_operators() {
    check(json!({"a": {"$size": 2}}), json!({"a": [1, 2]}), true);
    check(json!({"a": {"$size": 2}}), json!({"a": "ab"}), false);
    check(
        json!({"a": {"$all": [1, 2]}}),
        json!({"a": [2, 3, 1]}),
        true,
    );
    check(
        json!({"a": {"$all": [1, 4]}}),
        json!({"a": [2, 3, 1]}),
        false,
    );
    check(json!({"a": {"$all": [[1, 2]]}}), json!({"a": [1, 2]}), true);
    check(json!({"a": {"$all": [1]}}), json!({"a": 1}), false);
    // CouchDB: `match({[{<<"$all">>, []}]}, _, _) -> false`.
    check(json!({"a": {"$all": []}}), json!({"a": [1]}), false);
    check(json!({"a": {"$all": []}}), json!({"a": []}), false);
    check(json!({"a": {"$all": []}}), json!({"a": 1}), false);
    // Its negation holds for every value, but still needs the field.
    check(
        json!({"a": {"$not": {"$all": []}}}),
        json!({"a": [1]}),
        true,
    );
    check(json!({"a": {"$not": {"$all": []}}}), json!({}), false);
    let em = json!({"a": {"$elemMatch": {"$gte": 80, "$lt": 85}}});
    check(em.clone(), json!({"a": [70, 82]}), true);
    check(em.clone(), json!({"a": [70, 90]}), false);
    check(em, json!({"a": 82}), false);
    check(
        json!({"a": {"$elemMatch": {"name": "x"}}}),
        json!({"a": [{"name": "y"}, {"name": "x"}]}),
        true,
    );
    let am = json!({"a": {"$allMatch": {"$gt": 0}}});
    check(am.clone(), json!({"a": [1, 2]}), true);
    check(am.clone(), json!({"a": [1, 0]}), false);
    check(am, json!({"a": []}), false);
    let km = json!({"a": {"$keyMapMatch": {"$beginsWith": "x"}}});
    check(km.clone(), json!({"a": {"y": 1, "xz": 2}}), true);
    check(km.clone(), json!({"a": {"y": 1}}), false);
    check(km, json!({"a": ["xz"]}), false);
}

#[test]
fn misc_operators() {
    check(json!({"n": {"$mod": [3, 1]}}), json!({"n": 7}), true);
    check(json!({"n": {"$mod": [3, -1]}}), json!({"n": -7}), true);
    check(json!({"n": {"$mod": [3, 1]}}), json!({"n": 7.0}), false);
    check(json!({"n": {"$mod": [3, 1]}}), json!({"n": "7"}), false);
    check(
        json!({"s": {"$regex": "^ab+c"}}),
        json!({"s": "abbbc!"}),
        true,
    );
    check(json!({"s": {"$regex": "b"}}), json!({"s": "abc"}), true);
    check(json!({"s": {"$regex": "b"}}), json!({"s": ["b"]}), false);
    check(
        json!({"s": {"$beginsWith": "ab"}}),
        json!({"s": "abc"}),
        true,
    );
    check(
        json!({"s": {"$beginsWith": "ab"}}),
        json!({"s": "Abc"}),
        false,
    );
    check(json!({"s": {"$beginsWith": "1"}}), json!({"s": 12}), false);
}

#[test]
fn combinations_and_negation_pushdown() {
    check(json!({"$or": [{"a": 1}, {"b": 1}]}), json!({"b": 1}), true);
    check(json!({"$and": []}), json!({"b": 1}), true);
    check(json!({"$or": [{"a": 1}]}), json!({"b": 1}), false);
    check(json!({"$nor": [{"a": 1}]}), json!({"a": 1}), false);
    check(json!({"$nor": [{"a": 2}]}), json!({"a": 1}), true);
    check(
        json!({"$nor": [{"a": 1}, {"b": 1}]}),
        json!({"a": 2, "b": 2}),
        true,
    );
    check(json!({"$nor": [{"a": 1}]}), json!({}), false); // $ne needs the field
    check(json!({"$not": {"a": {"$gt": 5}}}), json!({"a": 3}), true);
    check(json!({"$not": {"a": {"$gt": 5}}}), json!({}), false);
    check(json!({"a": {"$not": {"$gt": 5}}}), json!({"a": 6}), false);
    check(json!({"a": {"$not": {"$exists": true}}}), json!({}), true);
    check(
        json!({"a": {"$not": {"$regex": "x"}}}),
        json!({"a": "y"}),
        true,
    );
    check(json!({"a": {"$not": {"$regex": "x"}}}), json!({}), false);
    check(json!({"$not": {"$not": {"a": 1}}}), json!({"a": 1}), true);
    check(
        json!({"a": {"$or": [{"$lt": 0}, {"$gt": 10}]}}),
        json!({"a": 11}),
        true,
    );
    check(
        json!({"a": {"$or": [{"$lt": 0}, {"$gt": 10}]}}),
        json!({"a": 5}),
        false,
    );
}

/// Empty lists as CouchDB's `mango_selector.erl` matches them ("We need to treat an empty
/// array as always true"), and what pushing a negation through them gives.
#[test]
fn empty_lists_match_as_in_couchdb() {
    for doc in [json!({}), json!({"a": 1}), json!({"b": [1]})] {
        check(json!({"$or": []}), doc.clone(), true);
        check(json!({"$and": []}), doc.clone(), true);
        check(json!({"$nor": []}), doc.clone(), true);
        check(json!({"a": {"$or": []}}), doc.clone(), true);
        // `$not` is pushed down by De Morgan: `$not $or []` is `$and []` and `$not $and []`
        // is `$or []`, both everything in CouchDB too.
        check(json!({"$not": {"$or": []}}), doc.clone(), true);
        check(json!({"$not": {"$and": []}}), doc.clone(), true);
        check(json!({"$not": {"$nor": []}}), doc.clone(), true);
        check(
            json!({"$and": [{"$or": []}, {"$and": []}]}),
            doc.clone(),
            true,
        );
    }
    check(json!({"$or": [], "a": 1}), json!({"a": 2}), false);
    check(json!({"$or": [], "a": 1}), json!({"a": 1}), true);
}

#[test]
fn invalid_selectors_name_the_problem() {
    invalid(json!(5), "a selector must be a JSON object, not 5");
    invalid(
        json!({"a": {"$regx": "x"}}),
        "unknown operator \"$regx\" in selector at \"a\"; see docs/data.md for the operators",
    );
    invalid(
        json!({"a": {"$in": 5}}),
        "the argument of \"$in\" at \"a\" must be an array of values, not 5",
    );
    invalid(
        json!({"a": {"$exists": "yes"}}),
        "the argument of \"$exists\" at \"a\" must be true or false, not \"yes\"",
    );
    invalid(
        json!({"a": {"$mod": [0, 1]}}),
        "the argument of \"$mod\" at \"a\" must be [divisor, remainder] with integers and a \
         non-zero divisor, not [0,1]",
    );
    invalid(
        json!({"a": {"$size": -1}}),
        "the argument of \"$size\" at \"a\" must be a non-negative integer, not -1",
    );
    invalid(
        json!({"$and": {"a": 1}}),
        "the argument of \"$and\" must be an array of selectors, not {\"a\":1}",
    );
    invalid(
        json!({"$gt": 1}),
        "the operator \"$gt\" is not applied to any field; write {\"<field>\": {\"$gt\": …}}",
    );
    invalid(
        json!({"a": {"$text": "x"}}),
        "the operator \"$text\" is not supported at \"a\"",
    );
    invalid(
        json!({"$not": {}}),
        "the argument of \"$not\" must be a non-empty selector object, not {}",
    );
    invalid(
        json!({"a": {"$not": {}}}),
        "the argument of \"$not\" at \"a\" must be a non-empty selector object, not {}",
    );
    invalid(
        json!({"": 1}),
        "a field name is empty; name the field a condition applies to",
    );
    let err = Selector::parse(&json!({"a": {"$regex": "("}})).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("the $regex \"(\" at \"a\" is not a valid regular expression"),
        "{err}"
    );
    invalid(
        json!({"a": {"$type": "date"}}),
        "the argument of \"$type\" at \"a\" must be one of \"null\", \"boolean\", \"number\", \
         \"string\", \"array\", \"object\", not \"date\"",
    );
}

/// Issue 17: a 252 KB `$or` of 3,000 `\w{20}…` patterns took the server to 7 GB (`\w{8}`
/// compiles to 800 KB, under the old 1 MiB limit per pattern). Every
/// pattern now gets an equal share of one budget, and the selector a size limit.
#[test]
fn one_selector_cannot_take_unbounded_memory() {
    let many: Vec<Value> = (0..3000)
        .map(|i| json!({"t": {"$regex": format!("\\w{{8}}{i}\\w{{8}}")}}))
        .collect();
    let err = Selector::parse(&json!({"$or": many})).unwrap_err();
    assert!(matches!(err, Error::Invalid(_)));
    let msg = err.to_string();
    assert!(
        msg.contains("more than its share") && msg.contains("8 MiB"),
        "{msg}"
    );
    // A handful of the same patterns fit.
    let few: Vec<Value> = (0..3)
        .map(|i| json!({"t": {"$regex": format!("\\w{{4}}{i}\\w{{4}}")}}))
        .collect();
    let s = Selector::parse(&json!({"$or": few})).unwrap();
    assert!(s.matches(&json!({"t": "aaaa1bbbb"})));
    // Hundreds of simple patterns fit: the budget is on size.
    let simple: Vec<Value> = (0..300)
        .map(|i| json!({"t": {"$regex": format!("^id-{i}$")}}))
        .collect();
    assert!(Selector::parse(&json!({"$or": simple})).is_ok());
    // Past MAX_SELECTOR_NODES conditions: refused with the limit named.
    let huge: Vec<Value> = (0..MAX_SELECTOR_NODES).map(|i| json!({"n": i})).collect();
    let msg = Selector::parse(&json!({"$or": huge}))
        .unwrap_err()
        .to_string();
    assert_eq!(
        msg,
        format!(
            "the selector holds more than {MAX_SELECTOR_NODES} conditions; split the query \
             or use $in for long lists of values"
        )
    );
    // Values do not count: a long $in is one condition.
    let ids: Vec<Value> = (0..50_000).map(|i| json!(i)).collect();
    assert!(Selector::parse(&json!({"n": {"$in": ids}})).is_ok());
}
