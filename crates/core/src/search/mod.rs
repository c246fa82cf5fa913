//! Search logic every search adapter shares, so that engines answer alike.
//!
//! - [`tokenize`]: what a word is and how it is normalized (case, diacritics).
//! - [`typo`]: the typo budget by word length, edit distances, how a term matches a word.
//! - [`document`]: keys, document validation, field text and filter terms.
//! - [`query`]: query bodies, query plans, term expansion, match explanation, the MiniSearch
//!   match shape and the ranking order.
//!
//! An engine's part is small: index each configured field's tokens with BM25 statistics,
//! enumerate the index terms each query word may match (exactly, as a prefix, or within
//! its typo budget), keep the best [`query::MAX_EXPANSIONS`] with
//! [`query::select_expansions`], find the documents containing any of them ranked as
//! [`query::rank`] says, and explain each with a [`query::Explainer`] (from the stored
//! document's words, or from where the engine's index says the expansions occur).

pub mod document;
pub mod query;
pub mod tokenize;
pub mod typo;

pub use document::{BulkReject, SearchDoc, SearchKey};
pub use query::{
    Expansion, Explained, Explainer, QueryPlan, QueryWord, SearchMatch, SearchQuery, StoredFields,
    answer_json,
};
pub use typo::MatchKind;

use crate::Error;

/// The error for a document key that is not in the instance.
pub fn missing(instance: &str, key: &str) -> Error {
    Error::not_found(format!(
        "search document \"{}\" does not exist in \"{instance}\"",
        document::shorten(key)
    ))
}

/// The error for indexing a key that is already in the instance.
pub fn exists(instance: &str, key: &str) -> Error {
    Error::conflict(format!(
        "search document \"{key}\" already exists in \"{instance}\"; replace it with PUT \
         /search/{instance}/{key} or bulk-index it"
    ))
}
