//! Search documents: keys, validation against the instance's configuration, the text of a
//! field, and the equality terms that `filter` matches.

use std::{fmt, str::FromStr};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::{Error, Result, ports::data::Document, ports::search::SearchConfig};

/// Longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 512;
/// Largest document, in bytes of compact JSON.
pub const MAX_DOC_BYTES: usize = 1024 * 1024;
/// Most documents in one bulk request.
pub const MAX_BULK_DOCS: usize = 10_000;
/// Keys that are route names (`/search/<i>/_query`), so a document under them could not be
/// read back by URL.
const RESERVED_KEYS: [&str; 2] = ["_query", "_bulk"];

/// The key of a search document: 1–512 bytes, no control characters, not `_query` or
/// `_bulk`.
///
/// ```
/// use quintet_core::search::SearchKey;
/// assert!("movie-1".parse::<SearchKey>().is_ok());
/// assert!("".parse::<SearchKey>().is_err());
/// assert!("_bulk".parse::<SearchKey>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SearchKey(String);

impl SearchKey {
    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SearchKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for SearchKey {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        if s.is_empty() || s.len() > MAX_KEY_BYTES {
            return Err(Error::invalid(format!(
                "search key \"{}\" must be 1 to {MAX_KEY_BYTES} bytes long",
                shorten(s)
            )));
        }
        if s.chars().any(char::is_control) {
            return Err(Error::invalid(format!(
                "search key {s:?} contains a control character; use printable text"
            )));
        }
        if RESERVED_KEYS.contains(&s) {
            return Err(Error::invalid(format!(
                "search key \"{s}\" is reserved for a route; choose another key"
            )));
        }
        Ok(Self(s.to_owned()))
    }
}

/// A long value cut for an error message (its first 40 characters and `…`).
pub fn shorten(s: &str) -> String {
    match s.char_indices().nth(40) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

/// A document ready to index: its key, the document, and the document's compact JSON text.
/// Built only by [`SearchDoc::new`], which checks it against the instance's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchDoc {
    key: SearchKey,
    doc: Document,
    json: String,
}

impl SearchDoc {
    /// Check `doc` against `config`: it must contain every configured field (a field whose
    /// value is `null` counts as present) and be at most [`MAX_DOC_BYTES`] as JSON.
    pub fn new(key: SearchKey, doc: Document, config: &SearchConfig) -> Result<Self> {
        if let Some(missing) = config.fields.iter().find(|f| !doc.contains_key(*f)) {
            return Err(Error::invalid(format!(
                "document \"{}\" has no field \"{missing}\"; every document must contain the \
                 configured fields {}",
                shorten(key.as_str()),
                quoted_list(&config.fields)
            )));
        }
        let json = serde_json::to_string(&doc)
            .map_err(|e| Error::internal(format!("serializing a document: {e}")))?;
        if json.len() > MAX_DOC_BYTES {
            return Err(Error::TooLarge(format!(
                "document \"{}\" is {} bytes of JSON; a search document may be at most \
                 {MAX_DOC_BYTES} bytes",
                shorten(key.as_str()),
                json.len()
            )));
        }
        Ok(Self { key, doc, json })
    }

    /// Read one entry of a bulk request: a document object whose key is its `_id` (or, when
    /// it has none, its `id`), a string or an integer. The whole object is the document.
    pub fn from_bulk_entry(entry: Value, config: &SearchConfig) -> Result<Self, BulkReject> {
        let Value::Object(doc) = entry else {
            return Err(BulkReject {
                id: None,
                error: "a bulk entry must be a JSON object (a document with \"_id\" or \"id\")"
                    .to_owned(),
            });
        };
        let raw_id = ["_id", "id"]
            .iter()
            .find_map(|f| doc.get(*f).filter(|v| !v.is_null()));
        let id = match raw_id {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
            Some(_) => {
                return Err(BulkReject {
                    id: None,
                    error: "\"_id\" (or \"id\") must be a string or an integer".to_owned(),
                });
            }
            None => {
                return Err(BulkReject {
                    id: None,
                    error: "the document has no \"_id\" or \"id\"; bulk entries need a key"
                        .to_owned(),
                });
            }
        };
        let reject = |e: Error| BulkReject {
            id: Some(id.clone()),
            error: e.public_message(),
        };
        let key = id.parse::<SearchKey>().map_err(reject)?;
        Self::new(key, doc, config).map_err(reject)
    }

    /// The key.
    pub fn key(&self) -> &SearchKey {
        &self.key
    }

    /// The document.
    pub fn doc(&self) -> &Document {
        &self.doc
    }

    /// The document as compact JSON text (key order kept).
    pub fn json(&self) -> &str {
        &self.json
    }
}

/// Why one entry of a bulk request was not indexed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BulkReject {
    /// The entry's key, when it had a usable one.
    pub id: Option<String>,
    /// A sentence saying what is wrong.
    pub error: String,
}

fn quoted_list(items: &[String]) -> String {
    items
        .iter()
        .map(|f| format!("\"{f}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Call `f` with each piece of text in a field's value: a string as is, a number or boolean
/// as its JSON text, and the items of arrays and values of objects in order. `null` has no
/// text.
pub fn for_each_text(value: &Value, f: &mut impl FnMut(&str)) {
    match value {
        Value::Null => {}
        Value::String(s) => f(s),
        Value::Bool(b) => f(if *b { "true" } else { "false" }),
        Value::Number(n) => f(&n.to_string()),
        Value::Array(items) => items.iter().for_each(|v| for_each_text(v, f)),
        Value::Object(map) => map.values().for_each(|v| for_each_text(v, f)),
    }
}

/// Canonical text of a JSON value for equality: numbers equal as numbers (`1` = `1.0`),
/// object keys sorted, compact.
fn canonical(value: &Value) -> String {
    let mut out = String::new();
    canonical_into(value, &mut out);
    out
}

/// [`canonical`], appended to `out`.
fn canonical_into(value: &Value, out: &mut String) {
    fn write(value: &Value, out: &mut String) {
        match value {
            Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    out.push_str(&i.to_string());
                } else if let Some(u) = n.as_u64() {
                    out.push_str(&u.to_string());
                } else if let Some(f) = n.as_f64() {
                    if f.fract() == 0.0 && f.abs() < 9.0e18 {
                        out.push_str(&(f as i64).to_string());
                    } else {
                        out.push_str(&f.to_string());
                    }
                }
            }
            Value::Array(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(v, out);
                }
                out.push(']');
            }
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_json(&Value::String(k.clone()), out);
                    out.push(':');
                    if let Some(v) = map.get(k) {
                        write(v, out);
                    }
                }
                out.push('}');
            }
            other => write_json(other, out),
        }
    }
    /// `value`'s compact JSON, as its `Display` writes it but several times faster (no
    /// formatter in between).
    fn write_json(value: &Value, out: &mut String) {
        match serde_json::to_string(value) {
            Ok(text) => out.push_str(&text),
            Err(_) => out.push_str(&value.to_string()),
        }
    }
    write(value, out);
}

/// Longest filter term kept as text; longer ones are replaced by a hash.
const MAX_FILTER_TERM_BYTES: usize = 240;

/// The term that stands for "top-level field `field` equals `value`". Engines index the
/// terms of every top-level field ([`for_each_filter_term`]) and answer a filter by requiring the
/// term of each of its entries. Values compare as JSON: numbers by value, objects
/// regardless of key order.
pub fn filter_term(field: &str, value: &Value) -> String {
    let mut term = String::new();
    filter_term_into(field, value, &mut term);
    term
}

/// [`filter_term`] written into `out` (cleared first), so that one buffer serves all the
/// terms of a bulk load.
pub fn filter_term_into(field: &str, value: &Value, out: &mut String) {
    out.clear();
    out.push_str(field);
    out.push('\u{0}');
    canonical_into(value, out);
    if out.len() > MAX_FILTER_TERM_BYTES {
        let digest = hex::encode(Sha256::digest(out.as_bytes()));
        out.clear();
        out.push('#');
        out.push_str(&digest);
    }
}

/// Call `f` with the filter term of every top-level field of `doc`.
pub fn for_each_filter_term(doc: &Document, mut f: impl FnMut(&str)) {
    let mut term = String::new();
    for (k, v) in doc {
        filter_term_into(k, v, &mut term);
        f(&term);
    }
}

/// Whether `doc` has every top-level field of `filter` with an equal value.
pub fn filter_matches(doc: &Document, filter: &Map<String, Value>) -> bool {
    filter
        .iter()
        .all(|(k, v)| doc.get(k).is_some_and(|d| canonical(d) == canonical(v)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config() -> SearchConfig {
        SearchConfig {
            fields: vec!["title".into(), "body".into()],
            store_fields: vec!["title".into()],
        }
    }

    fn obj(v: Value) -> Document {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn keys() {
        for ok in ["a", "movie-1", "Ünïcode key", "a/b", &"k".repeat(512)] {
            assert!(ok.parse::<SearchKey>().is_ok(), "{ok}");
        }
        for bad in ["", "_query", "_bulk", "a\nb", &"k".repeat(513)] {
            assert!(
                matches!(bad.parse::<SearchKey>(), Err(Error::Invalid(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_document_needs_every_configured_field() {
        let key: SearchKey = "k1".parse().unwrap();
        let ok = SearchDoc::new(
            key.clone(),
            obj(json!({"body": 1, "title": null})),
            &config(),
        );
        assert_eq!(ok.unwrap().json(), r#"{"body":1,"title":null}"#);
        let err = SearchDoc::new(key, obj(json!({"title": "t"})), &config()).unwrap_err();
        assert_eq!(
            err,
            Error::Invalid(
                "document \"k1\" has no field \"body\"; every document must contain the \
                 configured fields \"title\", \"body\""
                    .into()
            )
        );
    }

    #[test]
    fn an_oversized_document_is_too_large() {
        let big = "x".repeat(MAX_DOC_BYTES);
        let err = SearchDoc::new(
            "k".parse().unwrap(),
            obj(json!({"title": big, "body": ""})),
            &config(),
        )
        .unwrap_err();
        assert!(matches!(err, Error::TooLarge(_)), "{err:?}");
    }

    #[test]
    fn bulk_entries_take_their_key_from_id_fields() {
        let c = config();
        let d =
            SearchDoc::from_bulk_entry(json!({"_id": "a", "id": "b", "title": "", "body": ""}), &c)
                .unwrap();
        assert_eq!(d.key().as_str(), "a");
        let d = SearchDoc::from_bulk_entry(json!({"id": 7, "title": "", "body": ""}), &c).unwrap();
        assert_eq!(d.key().as_str(), "7");
        assert_eq!(d.doc()["id"], 7);
        let rejects = [
            (json!([1]), None),
            (json!({"title": "", "body": ""}), None),
            (json!({"_id": 1.5, "title": "", "body": ""}), None),
            (
                json!({"_id": "_query", "title": "", "body": ""}),
                Some("_query"),
            ),
            (json!({"_id": "x", "title": ""}), Some("x")),
        ];
        for (entry, id) in rejects {
            let r = SearchDoc::from_bulk_entry(entry.clone(), &c).unwrap_err();
            assert_eq!(r.id.as_deref(), id, "{entry}");
            assert!(!r.error.is_empty());
        }
    }

    #[test]
    fn field_text_walks_values() {
        let mut out = Vec::new();
        let v = json!(["a", 1, {"x": "b", "y": [true, null]}, 2.5]);
        for_each_text(&v, &mut |s| out.push(s.to_owned()));
        assert_eq!(out, ["a", "1", "b", "true", "2.5"]);
    }

    #[test]
    fn filters_compare_json_values() {
        let doc = obj(json!({"type": "movie", "year": 1984, "tags": ["a", "b"],
                             "meta": {"x": 1, "y": 2}, "none": null, "score": 7.5}));
        let yes = [
            json!({}),
            json!({"type": "movie"}),
            json!({"type": "movie", "year": 1984.0}),
            json!({"tags": ["a", "b"]}),
            json!({"meta": {"y": 2, "x": 1.0}}),
            json!({"none": null}),
            json!({"score": 7.5}),
        ];
        let no = [
            json!({"type": "Movie"}),
            json!({"type": "movie", "year": 1985}),
            json!({"tags": ["b", "a"]}),
            json!({"year": "1984"}),
            json!({"missing": null}),
            json!({"score": 7}),
        ];
        let mut terms = Vec::new();
        for_each_filter_term(&doc, |t| terms.push(t.to_owned()));
        for f in yes {
            assert!(filter_matches(&doc, f.as_object().unwrap()), "{f}");
            for (k, v) in f.as_object().unwrap() {
                assert!(terms.contains(&filter_term(k, v)), "{f}");
            }
        }
        for f in no {
            assert!(!filter_matches(&doc, f.as_object().unwrap()), "{f}");
            let all = f
                .as_object()
                .unwrap()
                .iter()
                .all(|(k, v)| terms.contains(&filter_term(k, v)));
            assert!(!all, "{f}");
        }
    }

    #[test]
    fn long_filter_terms_are_hashed() {
        let long = "v".repeat(500);
        let t = filter_term("f", &json!(long));
        assert_eq!(t.len(), 65);
        assert!(t.starts_with('#'));
        assert_ne!(t, filter_term("f", &json!(format!("{long}w"))));
    }
}
