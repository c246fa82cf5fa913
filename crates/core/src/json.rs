//! Guards for untrusted JSON text.

use crate::{Error, Result};

/// Default limit on nesting of arrays and objects in request bodies.
pub const DEFAULT_MAX_DEPTH: usize = 64;

/// Reject JSON text whose arrays and objects nest deeper than `max_depth`.
///
/// Runs over the raw bytes before parsing, in one pass, skipping string contents, so a
/// hostile body costs no more than its length. Text that is not valid JSON passes through
/// unchanged for the parser to reject with a precise message.
///
/// ```
/// use quintet_core::json::check_depth;
/// assert!(check_depth(br#"{"a":[1,{"b":2}]}"#, 3).is_ok());
/// assert!(check_depth(br#"[[[[]]]]"#, 3).is_err());
/// assert!(check_depth(br#"{"s":"[[[[[["}"#, 1).is_ok());
/// ```
pub fn check_depth(text: &[u8], max_depth: usize) -> Result<()> {
    let mut depth = 0usize;
    for b in structural_bytes(text) {
        match b {
            b'[' | b'{' => {
                depth += 1;
                if depth > max_depth {
                    return Err(Error::invalid(format!(
                        "the JSON body nests arrays and objects deeper than {max_depth} levels"
                    )));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// Whether JSON text has no whitespace outside its strings (as `serde_json` writes it), so
/// it can be stored as given.
///
/// ```
/// use quintet_core::json::is_compact;
/// assert!(is_compact(r#"{"a":"x y"}"#));
/// assert!(!is_compact(r#"{"a": 1}"#));
/// ```
pub fn is_compact(text: &str) -> bool {
    !structural_bytes(text.as_bytes()).any(|b| b.is_ascii_whitespace())
}

/// Whether every number in valid JSON `text` is plain: no exponent and at most
/// [`MAX_PLAIN_DIGITS`] digits in a row. Such text can be stored as sent: every engine
/// reads its numbers (an exponent may overflow an `f64`, which then fails to parse, or
/// PostgreSQL's `numeric`); other text is parsed and written anew.
///
/// ```
/// use quintet_core::json::numbers_are_plain;
/// assert!(numbers_are_plain(r#"{"a":-12.5,"b":"1e999","c":true}"#));
/// assert!(!numbers_are_plain(r#"{"a":1e5}"#));
/// ```
pub fn numbers_are_plain(text: &str) -> bool {
    let (mut prev, mut run) = (b' ', 0usize);
    for b in structural_bytes(text.as_bytes()) {
        if b.is_ascii_digit() {
            run += 1;
            if run > MAX_PLAIN_DIGITS {
                return false;
            }
        } else {
            // `e` also ends `true` and `false`; only after a digit or `.` is it an exponent.
            if matches!(b, b'e' | b'E') && (prev.is_ascii_digit() || prev == b'.') {
                return false;
            }
            run = 0;
        }
        prev = b;
    }
    true
}

/// Most digits in a row of a number [`numbers_are_plain`] accepts (`JSON.stringify` writes
/// at most 21 before it switches to an exponent).
pub const MAX_PLAIN_DIGITS: usize = 40;

/// The bytes of JSON text outside its strings (quotes included), for one-pass scans that
/// must not be fooled by brackets or spaces inside strings.
fn structural_bytes(text: &[u8]) -> impl Iterator<Item = u8> + '_ {
    let (mut in_string, mut escaped) = (false, false);
    text.iter().copied().filter(move |&b| {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            return false;
        }
        if b == b'"' {
            in_string = true;
        }
        true
    })
}

/// How a JSON value is named in messages: `"an object"`, `"a string"`, `"null"`…
pub fn kind(v: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// [`kind`] of valid JSON text, from its first byte (no parse).
///
/// ```
/// use quintet_core::json::kind_of_text;
/// assert_eq!(kind_of_text("[1]"), "an array");
/// assert_eq!(kind_of_text("-2.5"), "a number");
/// ```
pub fn kind_of_text(text: &str) -> &'static str {
    match text.trim_start().as_bytes().first() {
        Some(b'{') => "an object",
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        _ => "a number",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn true_depth(v: &serde_json::Value) -> usize {
        match v {
            serde_json::Value::Array(a) => 1 + a.iter().map(true_depth).max().unwrap_or(0),
            serde_json::Value::Object(o) => 1 + o.values().map(true_depth).max().unwrap_or(0),
            _ => 0,
        }
    }

    fn arb_json() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::Bool),
            "[\\[\\]{}\"\\\\a-z]{0,6}".prop_map(serde_json::Value::String),
        ];
        leaf.prop_recursive(8, 64, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
                prop::collection::btree_map("[a-z\\[{\"]{0,3}", inner, 0..4)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn agrees_with_the_parsed_depth(v in arb_json(), limit in 0usize..10) {
            let text = serde_json::to_vec(&v).unwrap();
            prop_assert_eq!(check_depth(&text, limit).is_ok(), true_depth(&v) <= limit);
        }

        #[test]
        fn compact_is_what_serde_writes(v in arb_json()) {
            let compact = serde_json::to_string(&v).unwrap();
            prop_assert!(is_compact(&compact));
            let pretty = serde_json::to_string_pretty(&v).unwrap();
            prop_assert_eq!(is_compact(&pretty), pretty == compact);
        }

        #[test]
        fn kinds_agree_on_text_and_values(v in arb_json()) {
            prop_assert_eq!(kind_of_text(&serde_json::to_string(&v).unwrap()), kind(&v));
        }
    }
}
