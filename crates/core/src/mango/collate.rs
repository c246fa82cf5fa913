//! CouchDB collation of JSON values: what `$lt`, `$eq`, sorting and index order compare with.
//!
//! Types order as `null < false < true < numbers < strings < arrays < objects`. Numbers
//! compare by value (`1 == 1.0`), exactly even beyond 2^53. Strings compare by Unicode code
//! point (the byte order of their UTF-8), not by ICU collation: see `docs/data.md`. Arrays
//! compare element by element, a prefix first; objects member by member (key, then value),
//! in their stored member order, a prefix first.

use std::cmp::Ordering;

use serde_json::{Number, Value};

/// The six JSON types as `$type` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonType {
    /// `null`.
    Null,
    /// `true` or `false`.
    Boolean,
    /// Any number.
    Number,
    /// A string.
    String,
    /// An array.
    Array,
    /// An object.
    Object,
}

impl JsonType {
    /// The type of `v`.
    pub fn of(v: &Value) -> Self {
        match v {
            Value::Null => Self::Null,
            Value::Bool(_) => Self::Boolean,
            Value::Number(_) => Self::Number,
            Value::String(_) => Self::String,
            Value::Array(_) => Self::Array,
            Value::Object(_) => Self::Object,
        }
    }

    /// The type named `name` (`"null" "boolean" "number" "string" "array" "object"`).
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "null" => Self::Null,
            "boolean" => Self::Boolean,
            "number" => Self::Number,
            "string" => Self::String,
            "array" => Self::Array,
            "object" => Self::Object,
            _ => return None,
        })
    }
}

/// Rank of a value's type in the collation (booleans split into false and true).
pub(crate) fn rank(v: &Value) -> u8 {
    match v {
        Value::Null => 0,
        Value::Bool(false) => 1,
        Value::Bool(true) => 2,
        Value::Number(_) => 3,
        Value::String(_) => 4,
        Value::Array(_) => 5,
        Value::Object(_) => 6,
    }
}

/// A number as `(nearest f64, exact integer tiebreak)`. Two numbers are equal exactly when
/// both parts are; the tiebreak only matters where f64 cannot tell integers apart (beyond
/// 2^53), and for a non-integral float it is 0 (no integer shares its f64).
pub(crate) fn number_parts(n: &Number) -> (f64, i128) {
    if let Some(i) = n.as_i64() {
        (i as f64, i128::from(i))
    } else if let Some(u) = n.as_u64() {
        (u as f64, i128::from(u))
    } else {
        let f = n.as_f64().unwrap_or(0.0);
        let f = if f == 0.0 { 0.0 } else { f }; // -0 == 0
        let t = if f.fract() == 0.0 { f as i128 } else { 0 };
        (f, t)
    }
}

fn cmp_numbers(a: &Number, b: &Number) -> Ordering {
    let (fa, ta) = number_parts(a);
    let (fb, tb) = number_parts(b);
    fa.total_cmp(&fb).then(ta.cmp(&tb))
}

/// Compare two JSON values in CouchDB collation (code-point order for strings).
pub fn cmp(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => cmp_numbers(x, y),
        (Value::String(x), Value::String(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Value::Array(x), Value::Array(y)) => {
            for (l, r) in x.iter().zip(y) {
                match cmp(l, r) {
                    Ordering::Equal => {}
                    other => return other,
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Object(x), Value::Object(y)) => {
            for ((kl, vl), (kr, vr)) in x.iter().zip(y) {
                match kl.as_bytes().cmp(kr.as_bytes()).then_with(|| cmp(vl, vr)) {
                    Ordering::Equal => {}
                    other => return other,
                }
            }
            x.len().cmp(&y.len())
        }
        _ => rank(a).cmp(&rank(b)),
    }
}

/// Whether two values are equal in collation (`1 == 1.0`).
pub fn eq(a: &Value, b: &Value) -> bool {
    cmp(a, b) == Ordering::Equal
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn type_order() {
        let ordered = [
            json!(null),
            json!(false),
            json!(true),
            json!(-5),
            json!(1),
            json!(1.5),
            json!(""),
            json!("A"),
            json!("a"),
            json!("aa"),
            json!("b"),
            json!([]),
            json!([1]),
            json!([1, 2]),
            json!([2]),
            json!({}),
            json!({"a": 1}),
            json!({"a": 2}),
            json!({"b": 0}),
        ];
        for (i, a) in ordered.iter().enumerate() {
            for (j, b) in ordered.iter().enumerate() {
                assert_eq!(cmp(a, b), i.cmp(&j), "{a} vs {b}");
            }
        }
    }

    #[test]
    fn numbers_compare_by_value_exactly() {
        assert!(eq(&json!(1), &json!(1.0)));
        assert!(eq(&json!(0), &json!(-0.0)));
        let big = json!(9_007_199_254_740_993_i64);
        let near = json!(9_007_199_254_740_992.0_f64);
        assert_eq!(cmp(&near, &big), Ordering::Less);
        assert_eq!(cmp(&json!(u64::MAX), &json!(i64::MAX)), Ordering::Greater);
        assert_eq!(cmp(&json!(-1e300), &json!(i64::MIN)), Ordering::Less);
    }
}
