//! The parts of a selector PostgreSQL can check exactly, so that fewer documents travel
//! to the core evaluator, which re-checks every candidate anyway.
//!
//! A prefilter may only ever be wider than the selector: it keeps every document the
//! selector matches. So only conditions whose SQL meaning is exactly Mango's are taken:
//!
//! - `{"a.b": "x"}` (equality with a string, `true`, `false` or `null`, on a path of object
//!   members) → `doc @> '{"a":{"b":"x"}}'`. Numbers are left out: a document's text may
//!   spell a number more precisely than the `f64` Mango compares, and `jsonb` compares the
//!   spelled value. Path segments of digits are left out: Mango also reads them as array
//!   positions. Documents whose text `jsonb` cannot hold (`doc IS NULL`) always pass.
//! - Equality and ranges on `_id` with a string → `id = / > / >= / < / <=`: ids are
//!   always strings, and the `"C"` collation orders them by bytes, which for UTF-8 is
//!   Mango's code point order.

use quintet_core::mango::{Cond, Selector};
use serde_json::{Map, Value};

/// What a query's documents must satisfy in SQL.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Prefilter {
    /// A JSON object every match contains (`jsonb @>`).
    contains: Option<String>,
    /// The lowest id, and whether it is included.
    lower: Option<(String, bool)>,
    /// The highest id, and whether it is included.
    upper: Option<(String, bool)>,
}

impl Prefilter {
    /// The exact SQL part of `selector`'s top-level conditions.
    pub(super) fn of(selector: &Selector) -> Self {
        let mut out = Self::default();
        let mut contains = Map::new();
        for c in selector.conjuncts() {
            let Selector::Field(path, cond) = c else {
                continue;
            };
            let segments = path.segments();
            if segments == ["_id"] {
                out.bound_id(cond);
            } else if let Cond::Eq(v) = cond
                && exact_in_jsonb(v)
                && !segments.is_empty()
                && segments.iter().all(|s| plain_member(s))
            {
                insert(&mut contains, segments, v.clone());
            }
        }
        if !contains.is_empty() {
            out.contains = Some(Value::Object(contains).to_string());
        }
        out
    }

    fn bound_id(&mut self, cond: &Cond) {
        let (value, lower, upper) = match cond {
            Cond::Eq(Value::String(s)) => (s, Some(true), Some(true)),
            Cond::Gt(Value::String(s)) => (s, Some(false), None),
            Cond::Gte(Value::String(s)) => (s, Some(true), None),
            Cond::Lt(Value::String(s)) => (s, None, Some(false)),
            Cond::Lte(Value::String(s)) => (s, None, Some(true)),
            _ => return,
        };
        if value.contains('\0') {
            return; // PostgreSQL text cannot hold it; no id does either
        }
        if let Some(inclusive) = lower {
            let tighter = match &self.lower {
                None => true,
                Some((v, inc)) => value > v || (value == v && *inc && !inclusive),
            };
            if tighter {
                self.lower = Some((value.clone(), inclusive));
            }
        }
        if let Some(inclusive) = upper {
            let tighter = match &self.upper {
                None => true,
                Some((v, inc)) => value < v || (value == v && *inc && !inclusive),
            };
            if tighter {
                self.upper = Some((value.clone(), inclusive));
            }
        }
    }

    /// SQL conditions (each beginning with ` AND `) on the documents table aliased
    /// `alias`, with parameters numbered from `first`, and those parameters' values (all
    /// text).
    pub(super) fn sql(&self, alias: &str, first: usize) -> (String, Vec<String>) {
        let mut sql = String::new();
        let mut args = Vec::new();
        if let Some(c) = &self.contains {
            args.push(c.clone());
            sql.push_str(&format!(
                " AND ({alias}.doc IS NULL OR {alias}.doc @> ${}::text::jsonb)",
                first + args.len() - 1
            ));
        }
        for (bound, below) in [(&self.lower, false), (&self.upper, true)] {
            if let Some((value, inclusive)) = bound {
                args.push(value.clone());
                let op = match (below, inclusive) {
                    (false, true) => ">=",
                    (false, false) => ">",
                    (true, true) => "<=",
                    (true, false) => "<",
                };
                sql.push_str(&format!(" AND {alias}.id {op} ${}", first + args.len() - 1));
            }
        }
        (sql, args)
    }
}

/// Values `jsonb` compares exactly as Mango does.
fn exact_in_jsonb(v: &Value) -> bool {
    match v {
        Value::String(s) => !s.contains('\0'),
        Value::Bool(_) | Value::Null => true,
        _ => false,
    }
}

/// A segment that can only name an object member.
fn plain_member(s: &str) -> bool {
    !s.is_empty() && !s.bytes().all(|b| b.is_ascii_digit()) && !s.contains('\0')
}

/// Put `value` at `path` in `out`; a path that meets a value already there is left out
/// (two conditions on one place: leaving one out only widens the filter).
fn insert(out: &mut Map<String, Value>, path: &[String], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = out;
    for seg in parents {
        let slot = cur
            .entry(seg.clone())
            .or_insert_with(|| Value::Object(Map::new()));
        let Value::Object(next) = slot else {
            return;
        };
        cur = next;
    }
    if !cur.contains_key(last) {
        cur.insert(last.clone(), value);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn of(selector: Value) -> Prefilter {
        Prefilter::of(&Selector::parse(&selector).unwrap())
    }

    #[test]
    fn scalar_equalities_become_one_containment() {
        let p = of(json!({
            "type": "movie",
            "meta.draft": false,
            "meta.note": null,
            "year": 1979,
            "tags.0": "x",
            "cast": {"$eq": ["a"]},
            "title": {"$gt": "A"}
        }));
        assert_eq!(
            p.contains.as_deref(),
            Some(r#"{"type":"movie","meta":{"draft":false,"note":null}}"#)
        );
        assert_eq!((p.lower, p.upper), (None, None));
    }

    #[test]
    fn alternatives_and_negations_are_left_to_the_evaluator() {
        assert_eq!(
            of(json!({"$or": [{"a": "x"}, {"b": "y"}]})),
            Prefilter::default()
        );
        assert_eq!(of(json!({"a": {"$ne": "x"}})), Prefilter::default());
        assert_eq!(of(json!({"$not": {"a": "x"}})), Prefilter::default());
        assert_eq!(of(json!({"a": "\u{0}"})), Prefilter::default());
        // Two conditions on one place: one of them is enough for a wider filter.
        let p = of(json!({"$and": [{"a": "x"}, {"a": "y"}, {"a.b": "z"}]}));
        assert_eq!(p.contains.as_deref(), Some(r#"{"a":"x"}"#));
    }

    #[test]
    fn id_conditions_become_the_tightest_bounds() {
        let p = of(json!({"_id": {"$gt": "b", "$gte": "a", "$lte": "m", "$lt": "m"}}));
        assert_eq!(p.lower, Some(("b".into(), false)));
        assert_eq!(p.upper, Some(("m".into(), false)));
        let p = of(json!({"_id": "k", "x": true}));
        assert_eq!(p.lower, Some(("k".into(), true)));
        assert_eq!(p.upper, Some(("k".into(), true)));
        assert_eq!(p.contains.as_deref(), Some(r#"{"x":true}"#));
        // Numbers collate below every string: left to the evaluator.
        assert_eq!(of(json!({"_id": {"$gt": 5}})), Prefilter::default());
    }

    #[test]
    fn sql_numbers_parameters_from_the_first_free_one() {
        let p = of(json!({"_id": {"$gte": "a", "$lt": "b"}, "t": "x"}));
        let (sql, args) = p.sql("d", 4);
        assert_eq!(
            sql,
            " AND (d.doc IS NULL OR d.doc @> $4::text::jsonb) AND d.id >= $5 AND d.id < $6"
        );
        assert_eq!(args, [r#"{"t":"x"}"#, "a", "b"]);
        assert_eq!(Prefilter::default().sql("d", 2), (String::new(), vec![]));
    }
}
