//! The data port: JSON documents, bulk writes, listing, Mango queries and indexes.
//!
//! The request shapes are parsed here and in [`crate::mango`], so every adapter receives
//! validated values: [`DocId`]s, documents that are objects, typed queries and indexes.

use std::{fmt, pin::Pin, str::FromStr, sync::Weak};

use async_trait::async_trait;
use futures_core::Stream;
use serde_json::{Map, Value, value::RawValue};

pub use crate::mango::{ExecutionStats, FindOutcome, FindQuery, IndexDef, SortDir};
use crate::{
    Error, Instance, Result,
    ports::{
        Lifecycle,
        changes::{ChangesPage, FeedListener},
    },
};

/// A JSON document: always an object.
pub type Document = Map<String, Value>;

/// JSON text as stored, handed back without re-parsing (reads are served as stored bytes).
pub type RawJson = Box<RawValue>;

/// A stream of stored documents, produced while the client reads the response.
pub type DocStream = Pin<Box<dyn Stream<Item = Result<RawJson>> + Send>>;

/// Longest document id, in bytes.
pub const MAX_ID_BYTES: usize = 512;
/// Largest stored document (its compact JSON text), in bytes.
pub const MAX_DOC_BYTES: usize = 8 * 1024 * 1024;
/// Most entries in one bulk request.
pub const MAX_BULK_ENTRIES: usize = 10_000;
/// Most indexes per instance.
pub const MAX_INDEXES: usize = 64;
/// Longest a query ([`DocStore::find`]) may run before it is stopped with
/// [`crate::Error::Invalid`]: one request cannot hold a reader (or a PostgreSQL backend)
/// for longer. Adapters also stop a query once its caller stops waiting, where the engine
/// allows.
pub const QUERY_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// A document id: 1 to [`MAX_ID_BYTES`] bytes of UTF-8 without control characters, not
/// beginning with `_` (names beginning with `_` are routes such as `_query`). Ids compare
/// byte-wise.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DocId(String);

impl DocId {
    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id as an owned string.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl FromStr for DocId {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let ok = !s.is_empty()
            && s.len() <= MAX_ID_BYTES
            && !s.starts_with('_')
            && !s.chars().any(char::is_control);
        if ok {
            Ok(Self(s.to_owned()))
        } else {
            let mut shown = s.to_owned();
            if shown.len() > 64 {
                shown.truncate(shown.floor_char_boundary(64));
                shown.push('…');
            }
            Err(Error::invalid(format!(
                "the document id {shown:?} is not valid: use 1 to {MAX_ID_BYTES} bytes without \
                 control characters, not beginning with \"_\""
            )))
        }
    }
}

impl fmt::Display for DocId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Check a create body: an object with at least one member, whose `_id`, when present, is
/// a valid id. Returns the document and its id.
pub fn new_document(body: Value) -> Result<(Option<DocId>, Document)> {
    let Value::Object(doc) = body else {
        return Err(Error::invalid(format!(
            "a document must be a JSON object, not {}",
            crate::json::kind(&body)
        )));
    };
    if doc.is_empty() {
        return Err(Error::BadRequest(
            "the document is empty; send a JSON object with at least one field".into(),
        ));
    }
    let id = match doc.get("_id") {
        None => None,
        Some(Value::String(s)) => Some(s.parse::<DocId>()?),
        Some(other) => {
            return Err(Error::invalid(format!(
                "_id must be a string, not {}",
                crate::json::kind(other)
            )));
        }
    };
    Ok((id, doc))
}

/// Check a replace body: any JSON object (its `_id`, if any, is replaced by the path's).
pub fn replacement(body: Value) -> Result<Document> {
    match body {
        Value::Object(doc) => Ok(doc),
        other => Err(Error::invalid(format!(
            "a document must be a JSON object, not {}",
            crate::json::kind(&other)
        ))),
    }
}

/// The compact JSON text to store for `doc` under `id`: `_id` first, then the other
/// members in their order (a body `_id` is replaced). [`Error::TooLarge`] beyond
/// [`MAX_DOC_BYTES`]. Writes the text directly instead of rebuilding the map.
pub fn stored_text(id: &DocId, doc: Document) -> Result<String> {
    let ser = |e: serde_json::Error| Error::internal(format!("serializing a document: {e}"));
    let mut out: Vec<u8> = Vec::with_capacity(64 + 32 * doc.len());
    out.extend_from_slice(b"{\"_id\":");
    serde_json::to_writer(&mut out, id.as_str()).map_err(ser)?;
    for (k, v) in &doc {
        if k == "_id" {
            continue;
        }
        out.push(b',');
        serde_json::to_writer(&mut out, k).map_err(ser)?;
        out.push(b':');
        serde_json::to_writer(&mut out, v).map_err(ser)?;
    }
    out.push(b'}');
    if out.len() > MAX_DOC_BYTES {
        return Err(Error::TooLarge(format!(
            "the document \"{id}\" is {} bytes, more than the limit of {MAX_DOC_BYTES}",
            out.len()
        )));
    }
    // serde_json writes UTF-8 only.
    String::from_utf8(out).map_err(|e| Error::internal(format!("serialized text: {e}")))
}

/// `GET /data/<d>` parameters: a walk over ids in byte order, or a fetch by ids.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListQuery {
    /// First id of the walk (inclusive); with `descending` it is the high end.
    pub start_key: Option<String>,
    /// Last id of the walk (inclusive).
    pub end_key: Option<String>,
    /// Fetch exactly these ids, answered in this order, missing ids left out.
    pub keys: Option<Vec<String>>,
    /// At most this many documents.
    pub limit: Option<usize>,
    /// Walk from high ids to low ones.
    pub descending: bool,
}

impl ListQuery {
    /// Parse query-string parameters: `startkey`/`start_key`, `endkey`/`end_key`, `limit`,
    /// `keys` (comma-separated), `descending` (`true` or `false`). Others are ignored.
    pub fn from_params<'a>(params: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Self> {
        let mut q = Self::default();
        for (k, v) in params {
            match k {
                "startkey" | "start_key" => q.start_key = Some(v.to_owned()),
                "endkey" | "end_key" => q.end_key = Some(v.to_owned()),
                "keys" => {
                    q.keys = Some(
                        v.split(',')
                            .filter(|k| !k.is_empty())
                            .map(str::to_owned)
                            .collect(),
                    );
                }
                "limit" => {
                    q.limit = Some(v.trim().parse().map_err(|_| {
                        Error::invalid(format!("limit must be a non-negative integer, not {v:?}"))
                    })?);
                }
                "descending" => {
                    q.descending = if v.eq_ignore_ascii_case("true") {
                        true
                    } else if v.eq_ignore_ascii_case("false") || v.is_empty() {
                        false
                    } else {
                        return Err(Error::invalid(format!(
                            "descending must be true or false, not {v:?}"
                        )));
                    };
                }
                _ => {}
            }
        }
        if let (Some(s), Some(e)) = (&q.start_key, &q.end_key)
            && q.keys.is_none()
        {
            if !q.descending && s > e {
                return Err(Error::invalid(format!(
                    "startkey {s:?} is after endkey {e:?}, so no document can match; swap \
                     them, or set descending=true to walk from high ids to low"
                )));
            }
            if q.descending && s < e {
                return Err(Error::invalid(format!(
                    "with descending=true the walk starts at startkey, the high end, but \
                     startkey {s:?} is before endkey {e:?}; swap them"
                )));
            }
        }
        Ok(q)
    }
}

/// One entry of a bulk request.
#[derive(Debug, Clone, PartialEq)]
pub enum BulkOp {
    /// Create or replace the document with this `_id`.
    Put {
        /// The document's id.
        id: DocId,
        /// The text to store: compact JSON, `_id` first (see [`stored_text`]).
        text: String,
    },
    /// Remove the document with this id (`_deleted: true`).
    Delete {
        /// The document's id.
        id: DocId,
    },
    /// An entry that cannot be applied (for example it has no `_id`); reported, not applied.
    Reject {
        /// The entry's id when it had one.
        id: Option<String>,
        /// Why it was rejected.
        error: String,
    },
}

/// The members of a bulk entry that decide what it does; the rest is skipped unparsed.
#[derive(serde::Deserialize)]
struct EntryHead<'a> {
    #[serde(rename = "_id", borrow)]
    id: Option<std::borrow::Cow<'a, str>>,
    #[serde(rename = "_deleted")]
    deleted: Option<serde::de::IgnoredAny>,
    #[serde(rename = "_update")]
    update: Option<serde::de::IgnoredAny>,
}

impl BulkOp {
    /// Parse a bulk body given as JSON text: an array of documents, each with `_id`;
    /// `_deleted: true` removes; hyper's `_update` flag is dropped. Bad entries become
    /// [`BulkOp::Reject`].
    ///
    /// An entry that is already compact, begins with its `_id`, carries neither flag and
    /// has only plain numbers ([`crate::json::numbers_are_plain`]) is stored as it arrived,
    /// without building a JSON tree; any other entry is parsed and written anew (a number
    /// out of range is then refused).
    pub fn parse_text(body: &str) -> Result<Vec<BulkOp>> {
        let entries: Vec<&RawValue> = serde_json::from_str(body).map_err(|_| {
            let kind = match body.trim_start().bytes().next() {
                Some(b'{') => "an object",
                Some(b'"') => "a string",
                Some(b'n') => "null",
                Some(b't' | b'f') => "a boolean",
                _ => "a number",
            };
            Error::invalid(format!(
                "a bulk request must be a JSON array of documents, not {kind}"
            ))
        })?;
        check_count(entries.len())?;
        Ok(entries
            .into_iter()
            .map(|raw| Self::parse_entry(raw.get()))
            .collect())
    }

    /// Parse a bulk body given as a JSON value; see [`BulkOp::parse_text`].
    pub fn parse_all(body: Value) -> Result<Vec<BulkOp>> {
        let Value::Array(entries) = body else {
            return Err(Error::invalid(format!(
                "a bulk request must be a JSON array of documents, not {}",
                crate::json::kind(&body)
            )));
        };
        check_count(entries.len())?;
        Ok(entries.into_iter().map(Self::parse_one).collect())
    }

    /// Parse one entry of a bulk body given as its own JSON text, as
    /// [`BulkOp::parse_text`] parses each entry of the array: text already in stored form
    /// is kept as it is, other text is parsed and checked.
    pub fn parse_entry(text: &str) -> Self {
        if let Ok(head) = serde_json::from_str::<EntryHead<'_>>(text)
            && head.deleted.is_none()
            && head.update.is_none()
            && let Some(id) = head.id
            && let Ok(id) = id.parse::<DocId>()
            && text.starts_with("{\"_id\":")
            && text.len() <= MAX_DOC_BYTES
            && crate::json::is_compact(text)
            && crate::json::numbers_are_plain(text)
        {
            return Self::Put {
                id,
                text: text.to_owned(),
            };
        }
        match serde_json::from_str::<Value>(text) {
            Ok(v) => Self::parse_one(v),
            Err(e) => Self::Reject {
                id: None,
                error: format!("the entry is not valid JSON: {e}"),
            },
        }
    }

    fn parse_one(entry: Value) -> Self {
        let Value::Object(mut doc) = entry else {
            return Self::Reject {
                id: None,
                error: format!(
                    "the entry is {}, not a JSON object",
                    crate::json::kind(&entry)
                ),
            };
        };
        let raw = match doc.get("_id") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                return Self::Reject {
                    id: None,
                    error: format!("_id must be a string, not {}", crate::json::kind(other)),
                };
            }
            None => {
                return Self::Reject {
                    id: None,
                    error: "the entry has no _id; every document of a bulk request needs one"
                        .into(),
                };
            }
        };
        let id = match raw.parse::<DocId>() {
            Ok(id) => id,
            Err(e) => {
                return Self::Reject {
                    id: Some(raw),
                    error: e.public_message(),
                };
            }
        };
        doc.shift_remove("_update");
        if let Some(Value::Bool(true)) = doc.shift_remove("_deleted") {
            return Self::Delete { id };
        }
        match stored_text(&id, doc) {
            Ok(text) => Self::Put { id, text },
            Err(e) => Self::Reject {
                id: Some(id.into_string()),
                error: e.public_message(),
            },
        }
    }
}

fn check_count(n: usize) -> Result<()> {
    if n > MAX_BULK_ENTRIES {
        return Err(Error::TooLarge(format!(
            "a bulk request holds at most {MAX_BULK_ENTRIES} documents, not {n}; split it"
        )));
    }
    Ok(())
}

/// The per-entry result of a bulk request.
#[derive(Debug, Clone, PartialEq)]
pub struct BulkOutcome {
    /// The entry's id (absent when the entry had none).
    pub id: Option<String>,
    /// Whether the entry was applied.
    pub ok: bool,
    /// Why it was not.
    pub error: Option<String>,
}

impl BulkOutcome {
    /// An applied entry.
    pub fn applied(id: &DocId) -> Self {
        Self {
            id: Some(id.as_str().to_owned()),
            ok: true,
            error: None,
        }
    }

    /// An entry that was not applied, and why.
    pub fn failed(id: Option<String>, error: impl Into<String>) -> Self {
        Self {
            id,
            ok: false,
            error: Some(error.into()),
        }
    }
}

/// JSON documents addressed by `_id`.
///
/// # Contract
/// - A write returns only once it is durable; a later read on any connection sees it.
/// - `create` stores the document with `_id` set (as its first member) to the given id or,
///   when none is given, to a new time-ordered id (later creates get greater ids); it fails
///   with [`crate::Error::Conflict`] when the id exists. `replace` and `remove` fail with
///   [`crate::Error::NotFound`] when it does not. A failed write changes nothing.
/// - `bulk` applies all entries in one transaction, in order (a later entry for the same
///   id sees the earlier one); a `Delete` of a missing id and a `Reject` are reported as
///   `ok: false` with an error and change nothing; the others apply.
/// - `get`/`list` hand back the stored JSON text: `_id` first, then the members as given.
/// - `list` walks ids byte-wise, `start_key` and `end_key` inclusive; with `descending`
///   from `start_key` (the high end) down to `end_key`; `keys` answers in the order given,
///   missing ids left out; `limit` applies to both.
/// - `find` answers exactly what a scan of every document checked by
///   [`crate::mango::Selector::matches`] would, whatever indexes exist: sorted by the sort
///   keys (ties by `_id`), else in the order of the index walked (by `_id` for a scan);
///   `warning` is [`crate::mango::plan::NO_INDEX_WARNING`] when no index was used.
/// - `create_index` builds the index over existing documents before it returns; creating
///   an identical index again succeeds and changes nothing; another definition under an
///   existing name is a [`crate::Error::Conflict`].
/// - Ids compare byte-wise for listing.
/// - Every applied write appends one change entry per document it changed (a bulk: one
///   per applied entry, in order) in its own transaction; entries are numbered from 1
///   without gaps in commit order, and `changes` never answers an entry whose number
///   is above one a later read could still add (see [`crate::ports::changes`]).
/// - After a commit, subscribed [`FeedListener`]s are told (`changed`) before the write
///   is acknowledged on this node.
#[async_trait]
pub trait DocStore: Lifecycle {
    /// Store a new document under `id` (or a generated id); returns the id.
    async fn create(&self, instance: &Instance, id: Option<DocId>, doc: Document) -> Result<DocId>;

    /// The stored JSON text of document `id`.
    async fn get(&self, instance: &Instance, id: &DocId) -> Result<Option<RawJson>>;

    /// Replace document `id` entirely.
    async fn replace(&self, instance: &Instance, id: &DocId, doc: Document) -> Result<()>;

    /// Remove document `id`.
    async fn remove(&self, instance: &Instance, id: &DocId) -> Result<()>;

    /// Apply a batch of writes in one transaction; one outcome per entry, in order.
    async fn bulk(&self, instance: &Instance, ops: Vec<BulkOp>) -> Result<Vec<BulkOutcome>>;

    /// Walk documents by id, or fetch the listed ids.
    async fn list(&self, instance: &Instance, query: ListQuery) -> Result<DocStream>;

    /// Answer a Mango query.
    async fn find(&self, instance: &Instance, query: FindQuery) -> Result<FindOutcome>;

    /// Create (or keep, when an identical one exists) an index.
    async fn create_index(&self, instance: &Instance, index: IndexDef) -> Result<()>;

    /// The instance's indexes, by name.
    async fn indexes(&self, instance: &Instance) -> Result<Vec<IndexDef>>;

    /// At most `limit` entries of the instance's change log after entry `since`, in order
    /// (see [`crate::ports::changes`]). [`Error::Gone`] when entries after `since` were
    /// compacted away or `since` is beyond the head
    /// ([`crate::ports::changes::check_since`]).
    async fn changes(&self, instance: &Instance, since: u64, limit: usize) -> Result<ChangesPage>;

    /// The number of the instance's latest change (0 before the first write).
    async fn change_head(&self, instance: &Instance) -> Result<u64>;

    /// Remove change entries written before `before_ms` (ms since the epoch), in every
    /// instance; returns how many.
    async fn compact_changes(&self, before_ms: i64) -> Result<u64>;

    /// Tell `listener` whenever an instance's log may have grown, until it is dropped.
    fn subscribe_changes(&self, listener: Weak<dyn FeedListener>);
}

/// The answer for document `id` missing from data instance `instance`.
pub fn document_missing(instance: impl fmt::Display, id: impl fmt::Display) -> Error {
    Error::not_found(format!(
        "document \"{id}\" does not exist in data instance \"{instance}\""
    ))
}

/// The answer for creating document `id` that data instance `instance` already holds.
pub fn document_exists(instance: impl fmt::Display, id: impl fmt::Display) -> Error {
    Error::conflict(format!(
        "document \"{id}\" already exists in data instance \"{instance}\"; replace it with PUT"
    ))
}

/// The answer for an index named like another one of `instance` with another definition.
pub fn index_name_taken(instance: impl fmt::Display, index: impl fmt::Display) -> Error {
    Error::conflict(format!(
        "data instance \"{instance}\" has an index named \"{index}\" with another \
         definition; choose another name"
    ))
}

/// The answer for one index more than [`MAX_INDEXES`] on `instance`.
pub fn too_many_indexes(instance: impl fmt::Display) -> Error {
    Error::invalid(format!(
        "data instance \"{instance}\" has {MAX_INDEXES} indexes, the most allowed"
    ))
}

/// A stored document's text as [`RawJson`], answered as stored.
pub fn stored_raw(text: String) -> Result<RawJson> {
    RawValue::from_string(text).map_err(corrupt_document)
}

/// A stored document's text parsed, to read its fields.
pub fn stored_value(text: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(corrupt_document)
}

/// A stored index definition parsed.
pub fn stored_index(text: &str) -> Result<IndexDef> {
    let def: Value = serde_json::from_str(text)
        .map_err(|e| Error::internal(format!("stored index definition: {e}")))?;
    IndexDef::from_stored_json(&def)
}

fn corrupt_document(e: serde_json::Error) -> Error {
    Error::internal(format!("a stored document is not JSON: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn doc_id_rules() {
        for ok in ["a", "a/b", "é", "0", "a_", &"x".repeat(MAX_ID_BYTES)] {
            assert!(ok.parse::<DocId>().is_ok(), "{ok}");
        }
        for bad in ["", "_a", "_query", "a\nb", &"x".repeat(MAX_ID_BYTES + 1)] {
            assert!(bad.parse::<DocId>().is_err(), "{bad}");
        }
    }

    #[test]
    fn new_documents() {
        assert!(matches!(new_document(json!({})), Err(Error::BadRequest(_))));
        assert!(matches!(new_document(json!([1])), Err(Error::Invalid(_))));
        assert!(matches!(
            new_document(json!({"_id": 5})),
            Err(Error::Invalid(_))
        ));
        let (id, _) = new_document(json!({"_id": "x", "a": 1})).unwrap();
        assert_eq!(id.unwrap().as_str(), "x");
        let id: DocId = "y\"".parse().unwrap();
        let doc = Map::from_iter([("a".to_owned(), json!(1)), ("_id".to_owned(), json!("x"))]);
        assert_eq!(stored_text(&id, doc).unwrap(), r#"{"_id":"y\"","a":1}"#);
        assert_eq!(stored_text(&id, Map::new()).unwrap(), r#"{"_id":"y\""}"#);
    }

    #[test]
    fn list_params() {
        let q = ListQuery::from_params([
            ("startkey", "b"),
            ("endkey", "a"),
            ("descending", "true"),
            ("limit", "2"),
        ])
        .unwrap();
        assert!(q.descending);
        assert_eq!(q.limit, Some(2));
        let q = ListQuery::from_params([("descending", "false"), ("keys", "a,,b")]).unwrap();
        assert!(!q.descending);
        assert_eq!(q.keys, Some(vec!["a".into(), "b".into()]));
        assert!(ListQuery::from_params([("descending", "yes")]).is_err());
        assert!(ListQuery::from_params([("limit", "-1")]).is_err());
        assert!(ListQuery::from_params([("startkey", "b"), ("endkey", "a")]).is_err());
    }

    #[test]
    fn bulk_entries() {
        let body = r#"[
            {"_id": "a", "x": 1, "_update": true},
            {"_id":"b","_deleted":true},
            {"x": 1},
            {"_id": "_bad"},
            7,
            {"_id":"fast","n":[1,"a b"]},
            {"n":2,"_id":"late"},
            {"_id":"c","_deleted":false,"y":1}
        ]"#;
        let from_text = BulkOp::parse_text(body).unwrap();
        let from_value = BulkOp::parse_all(serde_json::from_str(body).unwrap()).unwrap();
        assert_eq!(from_text, from_value);
        let ops = from_text;
        let put = |i: usize| match &ops[i] {
            BulkOp::Put { id, text } => (id.as_str().to_owned(), text.clone()),
            other => panic!("{other:?}"),
        };
        assert_eq!(put(0), ("a".into(), r#"{"_id":"a","x":1}"#.into()));
        assert!(matches!(&ops[1], BulkOp::Delete { id } if id.as_str() == "b"));
        assert!(matches!(&ops[2], BulkOp::Reject { id: None, .. }));
        assert!(matches!(&ops[3], BulkOp::Reject { id: Some(i), .. } if i == "_bad"));
        assert!(matches!(&ops[4], BulkOp::Reject { id: None, .. }));
        assert_eq!(
            put(5),
            ("fast".into(), r#"{"_id":"fast","n":[1,"a b"]}"#.into())
        );
        assert_eq!(put(6), ("late".into(), r#"{"_id":"late","n":2}"#.into()));
        assert_eq!(put(7), ("c".into(), r#"{"_id":"c","y":1}"#.into()));
        assert!(BulkOp::parse_all(json!({})).is_err());
        // Numbers with an exponent are parsed: stored as any engine can read them back,
        // or refused when out of range.
        let ops = BulkOp::parse_text(
            r#"[{"_id":"e","x":1e-20000,"y":2E3},{"_id":"big","x":1e200000},{"_id":"d","x":123456789012345678901234567890123456789012}]"#,
        )
        .unwrap();
        assert!(
            matches!(&ops[0], BulkOp::Put { text, .. } if text == r#"{"_id":"e","x":0.0,"y":2000.0}"#)
        );
        assert!(
            matches!(&ops[1], BulkOp::Reject { id: None, .. }),
            "{:?}",
            ops[1]
        );
        assert!(
            matches!(&ops[2], BulkOp::Put { text, .. } if !text.contains("1234567890123456789012345678901234567890"))
        );
        assert_eq!(
            BulkOp::parse_text(r#"{"_id":"x"}"#)
                .unwrap_err()
                .to_string(),
            "a bulk request must be a JSON array of documents, not an object"
        );
    }

    #[test]
    fn compactness() {
        assert!(crate::json::is_compact(r#"{"a":"x y","b":[1,2]}"#));
        assert!(crate::json::is_compact(r#"{"a":"q\" z"}"#));
        assert!(!crate::json::is_compact(r#"{"a": 1}"#));
        assert!(!crate::json::is_compact("{\"a\":1}\n"));
    }
}
