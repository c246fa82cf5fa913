//! JSON text exactly as JavaScript writes it: `JSON.stringify(JSON.parse(text))`, byte for
//! byte.
//!
//! Queue deliveries are signed over their body, and a worker in JavaScript verifies the
//! signature over `JSON.stringify(JSON.parse(body))` (or over `JSON.stringify(req.body)`
//! after a framework parsed it). Both only match when quintet writes the body the way a
//! JavaScript engine would:
//!
//! | value | written as |
//! |---|---|
//! | numbers | the shortest text that round-trips, in JavaScript's `Number#toString` shape: `100` for `100.0`, `1e+21`, `1.5e-7`, `0` for `-0`; integers beyond 2⁵³ rounded to the nearest double (`12345678901234567890` → `12345678901234567000`) |
//! | strings | `"` and `\` escaped; `\b \f \n \r \t`; other control characters as `\u00xx` (lowercase hex); everything else, including non-ASCII, U+2028 and U+2029, as it is |
//! | object keys | array-index keys (`"0"` … `"4294967294"`, canonical decimal) first, in ascending numeric order, then the others in insertion order |
//! | whitespace | none |
//!
//! Duplicate keys keep their first position and their last value, as `JSON.parse` does
//! (serde_json's `preserve_order` map already behaves that way when parsing).
//!
//! ```
//! use serde_json::json;
//! let v: serde_json::Value =
//!     serde_json::from_str(r#"{"b":1.0,"10":"x","a":[1e21,-0.0],"2":"\u0001"}"#).unwrap();
//! assert_eq!(
//!     quintet_core::js_json::to_string(&v),
//!     r#"{"2":"\u0001","10":"x","b":1,"a":[1e+21,0]}"#
//! );
//! ```

use serde_json::{Map, Number, Value};

/// Largest integer magnitude a double holds exactly (2⁵³); smaller integers are written
/// as they are, larger ones go through the double formatter like JavaScript does.
const MAX_SAFE: u64 = 1 << 53;

/// Largest array index: 2³² − 2.
const MAX_ARRAY_INDEX: u64 = 4_294_967_294;

/// `value` as compact JSON text in JavaScript's `JSON.stringify` form.
pub fn to_string(value: &Value) -> String {
    let mut out = String::with_capacity(128);
    write(value, &mut out);
    out
}

/// Append `value` to `out` in JavaScript's `JSON.stringify` form.
pub fn write(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_str(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => write_object(map, out),
    }
}

/// Append the object `map` to `out` in JavaScript's `JSON.stringify` form.
pub fn write_object(map: &Map<String, Value>, out: &mut String) {
    out.push('{');
    let mut first = true;
    let mut entry = |k: &str, v: &Value, out: &mut String| {
        if !first {
            out.push(',');
        }
        first = false;
        write_str(k, out);
        out.push(':');
        write(v, out);
    };
    // Most objects have no array-index keys: write them in insertion order without
    // collecting anything.
    if !map.keys().any(|k| array_index(k).is_some()) {
        for (k, v) in map {
            entry(k, v, out);
        }
    } else {
        let mut indexed: Vec<(u64, &str, &Value)> = map
            .iter()
            .filter_map(|(k, v)| array_index(k).map(|i| (i, k.as_str(), v)))
            .collect();
        indexed.sort_unstable_by_key(|(i, _, _)| *i);
        for (_, k, v) in indexed {
            entry(k, v, out);
        }
        for (k, v) in map.iter().filter(|(k, _)| array_index(k).is_none()) {
            entry(k, v, out);
        }
    }
    out.push('}');
}

/// The numeric value of `key` when it is an array index: the canonical decimal text of an
/// integer from 0 to 2³² − 2 ("0", "7", "4294967294"; not "01", "-1", "1.0" or "4294967295").
pub fn array_index(key: &str) -> Option<u64> {
    let bytes = key.as_bytes();
    if bytes.is_empty() || bytes.len() > 10 || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if bytes.len() > 1 && bytes[0] == b'0' {
        return None;
    }
    let n = bytes
        .iter()
        .fold(0u64, |acc, b| acc * 10 + u64::from(b - b'0'));
    (n <= MAX_ARRAY_INDEX).then_some(n)
}

fn write_number(n: &Number, out: &mut String) {
    if let Some(u) = n.as_u64() {
        if u <= MAX_SAFE {
            out.push_str(&u.to_string());
        } else {
            write_double(u as f64, out);
        }
    } else if let Some(i) = n.as_i64() {
        if i.unsigned_abs() <= MAX_SAFE {
            out.push_str(&i.to_string());
        } else {
            write_double(i as f64, out);
        }
    } else if let Some(f) = n.as_f64() {
        write_double(f, out);
    } else {
        // serde_json numbers are always one of the three above; `null` is what
        // JavaScript writes for a number it cannot represent.
        out.push_str("null");
    }
}

fn write_double(f: f64, out: &mut String) {
    if !f.is_finite() {
        out.push_str("null");
    } else if f == 0.0 {
        out.push('0'); // also -0, which JavaScript writes as 0
    } else {
        let mut buf = ryu_js::Buffer::new();
        out.push_str(buf.format_finite(f));
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn write_str(s: &str, out: &mut String) {
    out.push('"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: Option<&str> = match b {
            b'"' => Some("\\\""),
            b'\\' => Some("\\\\"),
            0x08 => Some("\\b"),
            0x0c => Some("\\f"),
            b'\n' => Some("\\n"),
            b'\r' => Some("\\r"),
            b'\t' => Some("\\t"),
            0x00..=0x1f => None,
            _ => continue,
        };
        // Bytes below 0x80 are whole characters, so these slice boundaries are valid.
        out.push_str(&s[start..i]);
        match escape {
            Some(e) => out.push_str(e),
            None => {
                out.push_str("\\u00");
                out.push(char::from(HEX[usize::from(b >> 4)]));
                out.push(char::from(HEX[usize::from(b & 0xf)]));
            }
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn js(text: &str) -> String {
        to_string(&serde_json::from_str::<Value>(text).unwrap())
    }

    #[test]
    fn numbers_as_javascript_writes_them() {
        let cases = [
            ("100.0", "100"),
            ("1e21", "1e+21"),
            ("1E21", "1e+21"),
            ("1e20", "100000000000000000000"),
            ("123456789012345678901", "123456789012345680000"),
            ("12345678901234567890", "12345678901234567000"),
            ("9007199254740993", "9007199254740992"),
            ("9007199254740992", "9007199254740992"),
            ("-9007199254740993", "-9007199254740992"),
            ("-0", "0"),
            ("-0.0", "0"),
            ("0.1", "0.1"),
            ("1.5e-7", "1.5e-7"),
            ("0.000001", "0.000001"),
            ("0.0000001", "1e-7"),
            ("5e-324", "5e-324"),
            ("1.7976931348623157e308", "1.7976931348623157e+308"),
            ("-1.25", "-1.25"),
            ("3.14159", "3.14159"),
            ("1e2", "100"),
            ("-42", "-42"),
            ("0.30000000000000004", "0.30000000000000004"),
        ];
        for (input, expected) in cases {
            assert_eq!(js(input), expected, "{input}");
        }
    }

    #[test]
    fn strings_escape_what_json_stringify_escapes() {
        let v = json!("q\"b\\s/\u{8}\u{c}\n\r\t\u{0}\u{1f}\u{7f}é😀\u{2028}\u{2029}<>&'");
        assert_eq!(
            to_string(&v),
            "\"q\\\"b\\\\s/\\b\\f\\n\\r\\t\\u0000\\u001f\u{7f}é😀\u{2028}\u{2029}<>&'\""
        );
        assert_eq!(to_string(&json!("\u{1b}[0m")), r#""\u001b[0m""#);
    }

    #[test]
    fn array_index_keys_come_first_in_numeric_order() {
        assert_eq!(
            js(r#"{"b":1,"10":2,"a":3,"2":4,"01":5,"-1":6,"4294967295":7,"4294967294":8,"0":9}"#),
            r#"{"0":9,"2":4,"10":2,"4294967294":8,"b":1,"a":3,"01":5,"-1":6,"4294967295":7}"#
        );
    }

    #[test]
    fn duplicate_keys_keep_first_position_and_last_value() {
        assert_eq!(js(r#"{"a":1,"b":2,"a":3}"#), r#"{"a":3,"b":2}"#);
    }

    #[test]
    fn array_index_rule() {
        for (k, want) in [
            ("0", Some(0)),
            ("7", Some(7)),
            ("4294967294", Some(4_294_967_294)),
            ("4294967295", None),
            ("99999999999", None),
            ("01", None),
            ("", None),
            ("1a", None),
            ("+1", None),
            ("１", None),
        ] {
            assert_eq!(array_index(k), want, "{k:?}");
        }
    }

    fn arb_key() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z]{0,4}",
            (0u64..20).prop_map(|n| n.to_string()),
            (4_294_967_290u64..4_294_967_300).prop_map(|n| n.to_string()),
            "0[0-9]{1,2}",
            "\\PC{0,3}",
        ]
    }

    fn arb_number() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
        ]
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            arb_number(),
            "\\PC{0,8}".prop_map(Value::String),
            "[\\x00-\\x1f\"\\\\a\u{2028}é]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::vec((arb_key(), inner), 0..6)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    /// Equal as JavaScript sees them: numbers compare as doubles, object key order aside.
    fn same(a: &Value, b: &Value) -> bool {
        match (a, b) {
            (Value::Number(x), Value::Number(y)) => {
                let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
                x == y
            }
            (Value::Array(x), Value::Array(y)) => {
                x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
            }
            (Value::Object(x), Value::Object(y)) => {
                x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
            }
            _ => a == b,
        }
    }

    fn keys_in_js_order(v: &Value) -> bool {
        match v {
            Value::Array(a) => a.iter().all(keys_in_js_order),
            Value::Object(m) => {
                let idx: Vec<Option<u64>> = m.keys().map(|k| array_index(k)).collect();
                let first_plain = idx.iter().position(Option::is_none).unwrap_or(idx.len());
                idx[first_plain..].iter().all(Option::is_none)
                    && idx[..first_plain].windows(2).all(|w| w[0] < w[1])
                    && m.values().all(keys_in_js_order)
            }
            _ => true,
        }
    }

    proptest! {
        /// The text parses back to the same value, with keys in JavaScript's order.
        #[test]
        fn parses_back_to_the_same_value(v in arb_json()) {
            let text = to_string(&v);
            let back: Value = serde_json::from_str(&text).unwrap();
            prop_assert!(same(&back, &v), "{} vs {}", text, v);
            prop_assert!(keys_in_js_order(&back), "{}", text);
        }

        /// Writing is a fixed point: stringify(parse(stringify(v))) == stringify(v).
        #[test]
        fn writing_is_idempotent(v in arb_json()) {
            let once = to_string(&v);
            let twice = to_string(&serde_json::from_str::<Value>(&once).unwrap());
            prop_assert_eq!(once, twice);
        }

        /// Strings agree with serde_json's escaping except where JavaScript differs
        /// (serde_json escapes the same set, but writes `\u001F` in uppercase hex).
        #[test]
        fn strings_match_serde_json_modulo_hex_case(s in "\\PC{0,16}|[\\x00-\\x1f]{0,4}") {
            let ours = to_string(&Value::String(s.clone()));
            let theirs = serde_json::to_string(&s).unwrap();
            prop_assert_eq!(ours.to_ascii_lowercase(), theirs.to_ascii_lowercase());
        }
    }
}
