//! The data port: JSON documents, bulk writes, listing, Mango queries and indexes.

use std::pin::Pin;

use async_trait::async_trait;
use futures_core::Stream;
use serde_json::{Map, Value, value::RawValue};

use crate::{Instance, Result, ports::Lifecycle};

/// A JSON document: always an object.
pub type Document = Map<String, Value>;

/// JSON text as stored, handed back without re-parsing (reads are served as stored bytes).
pub type RawJson = Box<RawValue>;

/// A stream of stored documents, produced while the client reads the response.
pub type DocStream = Pin<Box<dyn Stream<Item = Result<RawJson>> + Send>>;

/// Sort direction of an index field or a query sort key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortDir {
    /// Ascending in CouchDB collation.
    Asc,
    /// Descending in CouchDB collation.
    Desc,
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

/// A Mango query (`POST /data/<d>/_query`).
#[derive(Debug, Clone, PartialEq)]
pub struct FindQuery {
    /// The selector, as sent; the data issue parses it into a typed selector.
    pub selector: Value,
    /// Projection: dotted field paths to return (no implicit `_id`).
    pub fields: Option<Vec<String>>,
    /// Sort keys, most significant first.
    pub sort: Vec<(String, SortDir)>,
    /// At most this many documents (default 25).
    pub limit: usize,
    /// Skip this many matching documents first.
    pub skip: usize,
    /// Name of the index the client suggests.
    pub use_index: Option<String>,
    /// Whether to report execution statistics.
    pub execution_stats: bool,
}

/// Execution statistics of a query, as CouchDB reports them.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutionStats {
    /// Documents read and checked against the selector.
    pub docs_examined: u64,
    /// Documents returned.
    pub results_returned: u64,
    /// Wall time spent answering, milliseconds.
    pub execution_time_ms: f64,
    /// The index used, if any.
    pub index: Option<String>,
}

/// The answer to a [`FindQuery`].
#[derive(Debug)]
pub struct FindOutcome {
    /// The matching documents, projected and sorted.
    pub docs: Vec<Value>,
    /// A CouchDB-style warning, e.g. when no index was usable.
    pub warning: Option<String>,
    /// Present when the query asked for statistics.
    pub stats: Option<ExecutionStats>,
}

/// An index definition (`POST /data/<d>/_index`).
#[derive(Debug, Clone, PartialEq)]
pub struct IndexDef {
    /// The index name; derived from the fields when absent.
    pub name: Option<String>,
    /// Indexed fields (dotted paths) with their order.
    pub fields: Vec<(String, SortDir)>,
    /// Only documents matching this selector are indexed.
    pub partial_filter: Option<Value>,
}

/// One entry of a bulk request.
#[derive(Debug, Clone, PartialEq)]
pub enum BulkOp {
    /// Create or replace the document with this `_id`.
    Put {
        /// The document's id.
        id: String,
        /// The whole document, `_id` included.
        doc: Document,
    },
    /// Remove the document with this id (`_deleted: true`).
    Delete {
        /// The document's id.
        id: String,
    },
    /// An entry that cannot be applied (for example it has no `_id`); reported, not applied.
    Reject {
        /// The entry's id when it had one.
        id: Option<String>,
        /// Why it was rejected.
        error: String,
    },
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

/// JSON documents addressed by `_id`.
///
/// # Contract
/// - A write returns only once it is durable; a later read on any connection sees it.
/// - `create` fails with [`crate::Error::Conflict`] when the id exists; `replace` and
///   `remove` fail with [`crate::Error::NotFound`] when it does not.
/// - `bulk` applies all non-rejected entries in one transaction.
/// - Ids compare byte-wise for listing.
#[async_trait]
pub trait DocStore: Lifecycle {
    /// Store a new document; its `_id` is set by the caller.
    async fn create(&self, instance: &Instance, id: &str, doc: Document) -> Result<()>;

    /// The stored JSON text of document `id`.
    async fn get(&self, instance: &Instance, id: &str) -> Result<Option<RawJson>>;

    /// Replace document `id` entirely.
    async fn replace(&self, instance: &Instance, id: &str, doc: Document) -> Result<()>;

    /// Remove document `id`.
    async fn remove(&self, instance: &Instance, id: &str) -> Result<()>;

    /// Apply a batch of writes in one transaction; one outcome per entry, in order.
    async fn bulk(&self, instance: &Instance, ops: Vec<BulkOp>) -> Result<Vec<BulkOutcome>>;

    /// Walk documents by id, or fetch the listed ids.
    async fn list(&self, instance: &Instance, query: ListQuery) -> Result<DocStream>;

    /// Answer a Mango query.
    async fn find(&self, instance: &Instance, query: FindQuery) -> Result<FindOutcome>;

    /// Create (or keep, when an identical one exists) an index.
    async fn create_index(&self, instance: &Instance, index: IndexDef) -> Result<()>;
}
