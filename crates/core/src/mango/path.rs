//! Dotted field paths: `"address.city"`, `"tags.0"`, and `"a\\.b"` for a field whose name
//! contains a dot.

use std::fmt;

use serde_json::Value;

use crate::{Error, Result};

/// Longest field path accepted, in bytes.
pub const MAX_PATH_BYTES: usize = 1024;

/// A field path: the segments of a dotted name. The empty path addresses the value itself
/// (used inside `$elemMatch`, `$allMatch` and `$keyMapMatch`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct FieldPath {
    segments: Vec<String>,
}

impl FieldPath {
    /// The path addressing the value itself.
    pub fn root() -> Self {
        Self::default()
    }

    /// Parse a dotted name; `\.` is a literal dot. Fails on an empty name or segment.
    pub fn parse(text: &str) -> Result<Self> {
        let mut p = Self::root();
        p.push_dotted(text)?;
        Ok(p)
    }

    /// Append the segments of dotted name `text`.
    pub fn push_dotted(&mut self, text: &str) -> Result<()> {
        if text.is_empty() {
            return Err(Error::invalid(
                "a field name is empty; name the field a condition applies to",
            ));
        }
        if text.len() > MAX_PATH_BYTES {
            return Err(Error::invalid(format!(
                "the field name \"{}…\" is longer than {MAX_PATH_BYTES} bytes",
                &text[..text.floor_char_boundary(32)]
            )));
        }
        let mut seg = String::new();
        let mut chars = text.chars().peekable();
        let mut segments = Vec::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' if chars.peek() == Some(&'.') => {
                    seg.push('.');
                    chars.next();
                }
                '.' => segments.push(std::mem::take(&mut seg)),
                c => seg.push(c),
            }
        }
        segments.push(seg);
        if segments.iter().any(String::is_empty) {
            return Err(Error::invalid(format!(
                "the field name \"{text}\" has an empty segment; write paths as \"a.b.c\""
            )));
        }
        self.segments.extend(segments);
        Ok(())
    }

    /// The segments, outermost first.
    pub fn segments(&self) -> &[String] {
        &self.segments
    }

    /// Whether this is the root path.
    pub fn is_root(&self) -> bool {
        self.segments.is_empty()
    }

    /// The value at this path in `v`: object members by name, array elements by a decimal
    /// index; `None` when any step is missing.
    pub fn get<'a>(&self, v: &'a Value) -> Option<&'a Value> {
        let mut cur = v;
        for seg in &self.segments {
            cur = match cur {
                Value::Object(m) => m.get(seg)?,
                Value::Array(a) => {
                    if seg.is_empty() || !seg.bytes().all(|b| b.is_ascii_digit()) {
                        return None;
                    }
                    a.get(seg.parse::<usize>().ok()?)?
                }
                _ => return None,
            };
        }
        Some(cur)
    }

    /// Write `value` at this path into `out`, creating objects along the way (for
    /// projections). Does nothing for the root path.
    pub fn insert_into(&self, out: &mut serde_json::Map<String, Value>, value: Value) {
        let Some((last, parents)) = self.segments.split_last() else {
            return;
        };
        let mut cur = out;
        for seg in parents {
            let slot = cur
                .entry(seg.clone())
                .or_insert_with(|| Value::Object(serde_json::Map::new()));
            if !slot.is_object() {
                *slot = Value::Object(serde_json::Map::new());
            }
            let Value::Object(next) = slot else { return };
            cur = next;
        }
        cur.insert(last.clone(), value);
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.segments.iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            f.write_str(&seg.replace('.', "\\."))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_dots_and_escapes() {
        assert_eq!(FieldPath::parse("a.b").unwrap().segments(), ["a", "b"]);
        assert_eq!(FieldPath::parse("a\\.b").unwrap().segments(), ["a.b"]);
        assert_eq!(FieldPath::parse("a\\.b").unwrap().to_string(), "a\\.b");
        for bad in ["", "a..b", ".a", "a."] {
            assert!(FieldPath::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn gets_through_objects_and_array_indexes() {
        let doc = json!({"a": {"b": [10, {"c": 3}]}, "x.y": 1});
        let get = |p: &str| FieldPath::parse(p).unwrap().get(&doc).cloned();
        assert_eq!(get("a.b.0"), Some(json!(10)));
        assert_eq!(get("a.b.1.c"), Some(json!(3)));
        assert_eq!(get("a.b.2"), None);
        assert_eq!(get("a.b.x"), None);
        assert_eq!(get("a.b.0.z"), None);
        assert_eq!(get("x\\.y"), Some(json!(1)));
        assert_eq!(FieldPath::root().get(&doc), Some(&doc));
    }

    #[test]
    fn inserts_nested() {
        let mut out = serde_json::Map::new();
        FieldPath::parse("a.b")
            .unwrap()
            .insert_into(&mut out, json!(1));
        FieldPath::parse("a.c")
            .unwrap()
            .insert_into(&mut out, json!(2));
        assert_eq!(Value::Object(out), json!({"a": {"b": 1, "c": 2}}));
    }
}
