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
    let mut in_string = false;
    let mut escaped = false;
    for &b in text {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
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
    }
}
