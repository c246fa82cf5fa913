//! The search port: a typo-tolerant full-text index over JSON documents.

use async_trait::async_trait;
use serde_json::{Map, Value};

pub use crate::search::{SearchDoc, SearchKey, SearchMatch, SearchQuery};
use crate::{
    Error, Instance, Result,
    ports::{Lifecycle, data::RawJson},
};

/// Most fields a search instance may index or store.
pub const MAX_FIELDS: usize = 64;

/// Configuration of a search instance, given at creation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchConfig {
    /// Document fields that are indexed and searched. Never empty.
    pub fields: Vec<String>,
    /// Document fields returned with each match.
    pub store_fields: Vec<String>,
}

impl SearchConfig {
    /// Validate `{fields: string[] (non-empty), storeFields?: string[]}`.
    pub fn from_json(body: &Map<String, Value>) -> Result<Self> {
        let fields = match body.get("fields") {
            None | Some(Value::Null) => {
                return Err(Error::invalid(
                    "\"fields\" is required: a non-empty array of the document fields to index",
                ));
            }
            Some(v) => field_list("fields", v)?,
        };
        if fields.is_empty() {
            return Err(Error::invalid(
                "\"fields\" must name at least one document field to index",
            ));
        }
        let store_fields = match body.get("storeFields") {
            None | Some(Value::Null) => Vec::new(),
            Some(v) => field_list("storeFields", v)?,
        };
        Ok(Self {
            fields,
            store_fields,
        })
    }

    /// The configuration in its wire shape.
    pub fn to_json(&self) -> Value {
        serde_json::json!({ "fields": self.fields, "storeFields": self.store_fields })
    }
}

fn field_list(name: &str, v: &Value) -> Result<Vec<String>> {
    let bad = || {
        Error::invalid(format!(
            "\"{name}\" must be an array of field names (strings)"
        ))
    };
    let items = v.as_array().ok_or_else(bad)?;
    if items.len() > MAX_FIELDS {
        return Err(Error::invalid(format!(
            "\"{name}\" lists {} fields; at most {MAX_FIELDS} are allowed",
            items.len()
        )));
    }
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let s = item.as_str().filter(|s| !s.is_empty()).ok_or_else(bad)?;
        if !out.iter().any(|f| f == s) {
            out.push(s.to_owned());
        }
    }
    Ok(out)
}

/// A full-text index of documents by key, one per search instance.
///
/// The shared rules live in [`crate::search`]: adapters tokenize with
/// [`crate::search::tokenize`], match words as [`crate::search::QueryWord::classify`] says,
/// expand each word to at most [`crate::search::query::MAX_EXPANSIONS`] terms chosen by
/// [`crate::search::query::select_expansions`], explain and shape matches with
/// [`crate::search::query::Explainer`] and [`SearchMatch`], and order the answer with
/// [`crate::search::query::rank`].
///
/// # Contract
/// - Visibility and durability: when `index`, `update`, `remove` or `bulk` returns `Ok`, the
///   change is durable (it survives a crash of the process) and visible to every `get` and
///   `query` that starts afterwards. Concurrent writes may be committed together.
/// - `index` fails with [`crate::Error::Conflict`] ([`crate::search::exists`]) when the key
///   is in the index; `update` and `remove` fail with [`crate::Error::NotFound`]
///   ([`crate::search::missing`]) when it is not. A failed write changes nothing.
/// - `bulk` upserts every document in order (a later entry with the same key wins) and
///   commits them together: all or none.
/// - `get` answers the document exactly as indexed (its compact JSON text).
/// - `query` answers at most `query.limit` matches, each document at most once, ordered as
///   [`crate::search::query::rank`] orders them; documents must match at least one query
///   word in a searched field and every `filter` entry
///   ([`crate::search::document::filter_matches`]). [`SearchQuery::from_json`] refuses a
///   query without words; one built by hand answers nothing.
/// - `documents` walks every document once, by key, as `get` answers it.
/// - `drop_instance` removes the index from disk.
#[async_trait]
pub trait SearchIndex: Lifecycle {
    /// Index a new document.
    async fn index(&self, instance: &Instance, doc: SearchDoc) -> Result<()>;

    /// The document under `key`, as indexed.
    async fn get(&self, instance: &Instance, key: &SearchKey) -> Result<Option<RawJson>>;

    /// Replace the document under the document's key.
    async fn update(&self, instance: &Instance, doc: SearchDoc) -> Result<()>;

    /// Remove the document under `key`.
    async fn remove(&self, instance: &Instance, key: &SearchKey) -> Result<()>;

    /// Upsert many documents in one commit.
    async fn bulk(&self, instance: &Instance, docs: Vec<SearchDoc>) -> Result<()>;

    /// The best matches, best first.
    async fn query(&self, instance: &Instance, query: &SearchQuery) -> Result<Vec<SearchMatch>>;

    /// Up to `limit` documents whose keys sort after `after` (from the first when `None`),
    /// in key order (bytewise), each as indexed: the walk an export takes, page by page.
    async fn documents(
        &self,
        instance: &Instance,
        after: Option<&SearchKey>,
        limit: usize,
    ) -> Result<Vec<(SearchKey, RawJson)>>;

    /// How many documents the index holds, every write acknowledged so far counted, for
    /// the metrics.
    async fn count(&self, instance: &Instance) -> Result<u64>;
}

/// The configuration of search instance `instance`.
pub fn config_of(instance: &Instance) -> Result<&SearchConfig> {
    match &instance.config {
        crate::InstanceConfig::Search(c) => Ok(c),
        _ => Err(Error::internal(format!(
            "instance {} is not a search instance",
            instance.id
        ))),
    }
}

/// The answer for a search instance whose storage is gone.
pub fn index_missing(name: impl std::fmt::Display) -> Error {
    Error::not_found(format!(
        "search instance \"{name}\" does not exist; create it with PUT /search/{name}"
    ))
}

/// A stored search document's text, answered as stored.
pub fn stored_raw(text: String) -> Result<RawJson> {
    serde_json::value::RawValue::from_string(text).map_err(corrupt_document)
}

/// The answer for a stored search document that cannot be read back.
pub fn corrupt_document(e: impl std::fmt::Display) -> Error {
    Error::internal(format!("stored search document: {e}"))
}

/// One write call of [`SearchIndex`], as adapters that queue or batch writes carry it.
#[derive(Debug)]
pub enum SearchWrite {
    /// Add a document whose key must be new.
    Index(SearchDoc),
    /// Replace the document whose key must exist.
    Update(SearchDoc),
    /// Remove the document whose key must exist.
    Remove(SearchKey),
    /// Add or replace every document, in order.
    Bulk(Vec<SearchDoc>),
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<SearchConfig> {
        SearchConfig::from_json(v.as_object().unwrap())
    }

    #[test]
    fn valid_configs() {
        let c = parse(json!({"fields": ["title", "title", "body"]})).unwrap();
        assert_eq!(c.fields, ["title", "body"]);
        assert!(c.store_fields.is_empty());
        let c = parse(json!({"fields": ["t"], "storeFields": ["t", "year"]})).unwrap();
        assert_eq!(c.store_fields, ["t", "year"]);
    }

    #[test]
    fn invalid_configs_name_the_field() {
        let cases = [
            (json!({}), "\"fields\""),
            (json!({"fields": []}), "\"fields\""),
            (json!({"fields": "title"}), "\"fields\""),
            (json!({"fields": [1]}), "\"fields\""),
            (json!({"fields": [""]}), "\"fields\""),
            (
                json!({"fields": ["a"], "storeFields": "a"}),
                "\"storeFields\"",
            ),
            (
                json!({"fields": ["a"], "storeFields": [true]}),
                "\"storeFields\"",
            ),
        ];
        for (body, field) in cases {
            match parse(body.clone()) {
                Err(Error::Invalid(msg)) => assert!(msg.contains(field), "{body}: {msg}"),
                other => panic!("{body}: {other:?}"),
            }
        }
    }
}
