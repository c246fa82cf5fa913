//! Mango, CouchDB's query language, as the data service speaks it: selectors, collation,
//! the order-preserving key encoding of indexes, the planner and the executor every
//! data adapter shares.
//!
//! | Kind | Operators |
//! |---|---|
//! | (in)equality | `$eq $ne $lt $lte $gt $gte` (CouchDB collation) |
//! | object | `$exists` (bool), `$type` (`null boolean number string array object`) |
//! | array | `$in $nin` (an array field matches when an element does), `$size`, `$all`, `$elemMatch`, `$allMatch` (false on `[]`) |
//! | misc | `$mod [d, r]` (integers only), `$regex` (strings only, linear time), `$beginsWith` |
//! | combination | `$and $or $nor $not`, `$keyMapMatch` (object keys) |
//!
//! A condition holds only when its field exists, except `$exists: false`. Field names are
//! dotted paths (`a.b`, `tags.0`; `\.` for a literal dot).
//!
//! Collation (comparisons, sorting, index order): `null < false < true < numbers < strings
//! < arrays < objects`; numbers by value; strings by Unicode code point (not ICU); arrays
//! and objects element by element, a prefix first.
//!
//! - [`selector`]: parsing (with CouchDB's normalization) and matching.
//! - [`collate`]: comparing values; [`keycode`]: the same order as bytes.
//! - [`query`]: `_query` and `_index` bodies; projection.
//! - [`plan`](mod@plan): which index and key ranges answer a query; [`exec`]: the answer from
//!   candidates.

pub mod collate;
pub mod exec;
pub mod keycode;
pub mod path;
pub mod plan;
pub mod query;
pub mod selector;

pub use exec::{Collector, ExecutionStats, FindOutcome};
pub use path::FieldPath;
pub use plan::{KeyRange, Plan, plan};
pub use query::{FindQuery, IndexDef, SortDir};
pub use selector::{Cond, Selector};
