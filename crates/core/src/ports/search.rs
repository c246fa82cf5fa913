//! The search port: a typo-tolerant full-text index over JSON documents.

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::{
    Error, Instance, Result,
    ports::{Lifecycle, data::Document},
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

/// A query (`POST /search/<i>/_query`).
#[derive(Debug, Clone, PartialEq)]
pub struct SearchQuery {
    /// The text to search for.
    pub query: String,
    /// Search only these configured fields (all configured fields when absent).
    pub fields: Option<Vec<String>>,
    /// Keep documents whose top-level fields equal these values (AND-ed).
    pub filter: Option<Document>,
    /// At most this many matches (default 100).
    pub limit: usize,
}

/// One match, shaped as MiniSearch shapes it: `{id, score, terms, queryTerms, match,
/// ...storeFields}`.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchMatch {
    /// The document's key.
    pub id: String,
    /// Relevance; higher is better.
    pub score: f64,
    /// Document terms that matched.
    pub terms: Vec<String>,
    /// Query terms that matched.
    pub query_terms: Vec<String>,
    /// For each matched document term, the fields it matched in.
    pub matched: Map<String, Value>,
    /// The configured stored fields of the document.
    pub stored: Document,
}

/// The per-entry result of a bulk request.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchBulkOutcome {
    /// The document's key.
    pub id: Option<String>,
    /// Whether it was indexed.
    pub ok: bool,
    /// Why it was not.
    pub error: Option<String>,
}

/// A full-text index of documents by key.
///
/// # Contract
/// - A document acknowledged by `index`, `update` or `bulk` is durable and visible to the
///   next `query`.
/// - `index` fails with [`crate::Error::Conflict`] for an existing key; `update` and
///   `remove` with [`crate::Error::NotFound`] for a missing one.
#[async_trait]
pub trait SearchIndex: Lifecycle {
    /// Index a new document under `key`.
    async fn index(&self, instance: &Instance, key: &str, doc: Document) -> Result<()>;

    /// The document as indexed.
    async fn get(&self, instance: &Instance, key: &str) -> Result<Option<Document>>;

    /// Replace the document under `key`.
    async fn update(&self, instance: &Instance, key: &str, doc: Document) -> Result<()>;

    /// Remove the document under `key`.
    async fn remove(&self, instance: &Instance, key: &str) -> Result<()>;

    /// Upsert many documents in one commit; one outcome per entry, in order.
    async fn bulk(
        &self,
        instance: &Instance,
        docs: Vec<(String, Document)>,
    ) -> Result<Vec<SearchBulkOutcome>>;

    /// Best matches first.
    async fn query(&self, instance: &Instance, query: SearchQuery) -> Result<Vec<SearchMatch>>;
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
