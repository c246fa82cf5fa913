//! An order-preserving ("memcomparable") byte encoding of JSON values in CouchDB collation.
//!
//! `encode(a) < encode(b)` (byte-wise) exactly when `collate::cmp(a, b)` is `Less`, and the
//! encodings are equal exactly when the values collate equal. Every encoding is
//! self-delimiting (no encoding is a prefix of another), so the concatenation of several
//! encodings orders like the tuple of the values: index keys over several fields are plain
//! concatenations, and any engine with byte-ordered keys (a SQLite `BLOB` primary key, a
//! PostgreSQL `bytea` index) can walk them.
//!
//! Layout: a type tag, then
//! - number: 8 bytes of the f64 with the sign folded so bytes order like values, then, only
//!   for magnitudes ≥ 2^53, 16 bytes of the exact integer (the f64 decides that part);
//! - string: the UTF-8 bytes with `00` written as `00 FF`, then `00 01`;
//! - array: each element's encoding, then `00`;
//! - object: each member as the key's string encoding and the value's encoding, then `00`.
//!
//! A missing field encodes as the lowest tag, so an index can hold every document and still
//! be walked in sort order.

use serde_json::Value;

use super::collate::number_parts;

/// Ends an array or an object; lower than every tag.
pub const END: u8 = 0x00;
/// A missing field.
pub const TAG_MISSING: u8 = 0x01;
/// `null`.
pub const TAG_NULL: u8 = 0x02;
/// `false`.
pub const TAG_FALSE: u8 = 0x03;
/// `true`.
pub const TAG_TRUE: u8 = 0x04;
/// A number.
pub const TAG_NUMBER: u8 = 0x05;
/// A string.
pub const TAG_STRING: u8 = 0x06;
/// An array.
pub const TAG_ARRAY: u8 = 0x07;
/// An object.
pub const TAG_OBJECT: u8 = 0x08;

const EXACT_FROM: f64 = 9_007_199_254_740_992.0; // 2^53

/// Append the encoding of `v` to `out`.
pub fn encode_into(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Null => out.push(TAG_NULL),
        Value::Bool(false) => out.push(TAG_FALSE),
        Value::Bool(true) => out.push(TAG_TRUE),
        Value::Number(n) => {
            out.push(TAG_NUMBER);
            let (f, exact) = number_parts(n);
            let bits = f.to_bits();
            let ordered = if bits >> 63 == 1 {
                !bits
            } else {
                bits ^ (1 << 63)
            };
            out.extend_from_slice(&ordered.to_be_bytes());
            if f.abs() >= EXACT_FROM {
                out.extend_from_slice(&((exact as u128) ^ (1 << 127)).to_be_bytes());
            }
        }
        Value::String(s) => encode_str_into(s, out),
        Value::Array(items) => {
            out.push(TAG_ARRAY);
            for item in items {
                encode_into(item, out);
            }
            out.push(END);
        }
        Value::Object(members) => {
            out.push(TAG_OBJECT);
            for (k, item) in members {
                encode_str_into(k, out);
                encode_into(item, out);
            }
            out.push(END);
        }
    }
}

/// Append the encoding of string `s`.
pub fn encode_str_into(s: &str, out: &mut Vec<u8>) {
    string_prefix_into(s, out);
    out.extend_from_slice(&[0x00, 0x01]);
}

/// Append the bytes every string beginning with `prefix` starts with (tag and escaped text,
/// no terminator).
pub fn string_prefix_into(prefix: &str, out: &mut Vec<u8>) {
    out.push(TAG_STRING);
    for &b in prefix.as_bytes() {
        out.push(b);
        if b == 0 {
            out.push(0xFF);
        }
    }
}

/// The encoding of `v`.
pub fn encode(v: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    encode_into(v, &mut out);
    out
}

/// Append the encoding of an optional value: `None` (a missing field) is [`TAG_MISSING`].
pub fn encode_opt_into(v: Option<&Value>, out: &mut Vec<u8>) {
    match v {
        Some(v) => encode_into(v, out),
        None => out.push(TAG_MISSING),
    }
}

/// The smallest byte string greater than every string that starts with `prefix`, or `None`
/// when there is none (the prefix is all `FF`).
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut out = prefix.to_vec();
    while let Some(last) = out.pop() {
        if last < 0xFF {
            out.push(last + 1);
            return Some(out);
        }
    }
    None
}

/// Complement every byte from `from` on: turns an ascending encoding into a descending one
/// (complementing preserves self-delimitation and reverses the order).
pub fn invert_from(buf: &mut [u8], from: usize) {
    for b in &mut buf[from..] {
        *b = !*b;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mango::collate::cmp;
    use proptest::prelude::*;

    pub(crate) fn arb_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|i| serde_json::json!(i)),
            any::<u64>().prop_map(|i| serde_json::json!(i)),
            (-3i64..3).prop_map(|i| serde_json::json!(i)),
            (-3i64..3).prop_map(|i| serde_json::json!(i as f64)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| serde_json::json!(f)),
            prop_oneof![
                Just(9_007_199_254_740_992.0_f64),
                Just(1.8446744073709552e19),
                Just(-9_223_372_036_854_775_808.0)
            ]
            .prop_map(|f| serde_json::json!(f)),
            "[a-c\\x00\\x01é]{0,4}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec(("[ab\\x00]{0,2}", inner), 0..3)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn byte_order_is_collation_order(a in arb_value(), b in arb_value()) {
            prop_assert_eq!(encode(&a).cmp(&encode(&b)), cmp(&a, &b), "{} vs {}", a, b);
        }

        #[test]
        fn tuples_order_like_their_encodings(
            a in (arb_value(), arb_value()), b in (arb_value(), arb_value())
        ) {
            let enc = |(x, y): &(Value, Value)| { let mut v = encode(x); encode_into(y, &mut v); v };
            let expected = cmp(&a.0, &b.0).then(cmp(&a.1, &b.1));
            prop_assert_eq!(enc(&a).cmp(&enc(&b)), expected);
        }

        #[test]
        fn inverted_encodings_order_descending(a in arb_value(), b in arb_value()) {
            let (mut x, mut y) = (encode(&a), encode(&b));
            invert_from(&mut x, 0);
            invert_from(&mut y, 0);
            prop_assert_eq!(x.cmp(&y), cmp(&b, &a));
        }

        #[test]
        fn string_prefixes_bound_exactly_the_strings_beginning_with_them(
            p in "[ab\\x00]{0,3}", s in "[ab\\x00]{0,5}"
        ) {
            let mut lo = Vec::new();
            string_prefix_into(&p, &mut lo);
            let hi = prefix_successor(&lo).unwrap();
            let e = encode(&Value::String(s.clone()));
            prop_assert_eq!(e >= lo && e < hi, s.starts_with(&p));
        }
    }

    #[test]
    fn missing_sorts_first_and_successor_skips_ff() {
        let mut m = Vec::new();
        encode_opt_into(None, &mut m);
        assert!(m < encode(&Value::Null));
        assert_eq!(prefix_successor(&[1, 0xFF]), Some(vec![2]));
        assert_eq!(prefix_successor(&[0xFF]), None);
    }
}
