//! quintet on PostgreSQL: the adapters that let N stateless nodes share one database.
//!
//! - [`PgConfig`]: the URL, pool size and timeout; [`PgDatabase`]: a connection pool over
//!   one database and schema, shared by every adapter of a node, with versioned
//!   migrations applied under an advisory lock ([`PgDatabase::migrate`]).
//! - [`PgRegistry`]: accounts, applications, keys and instances, implementing
//!   [`quintet_core::ports::registry::Registry`] with the same rules and messages as the
//!   SQLite registry, plus a change feed across nodes (`NOTIFY` in each change's
//!   transaction, one `LISTEN` connection per node; see [`feed`]).
//! - [`PgJobQueue`]: the jobs of every queue, implementing
//!   [`quintet_core::ports::queue::JobQueue`] like the SQLite queue, with leases in the
//!   job rows (`FOR UPDATE SKIP LOCKED`) so N nodes share the work, and `NOTIFY` on
//!   enqueue so an idle node picks up a job enqueued through a busy one (see [`queue`]).
//! - [`PgDocStore`]: the documents of every data instance, implementing
//!   [`quintet_core::ports::data::DocStore`]: the stored text as sent (plus `jsonb`), the
//!   indexes of `quintet_core::mango` as a B-tree of order-preserving keys, queries
//!   planned by the core planner and re-checked by the core evaluator, so answers equal
//!   the embedded engine's (see [`data`]).
//! - [`PgSearchIndex`]: search instances in shared tables (postings, a vocabulary with a
//!   `pg_trgm` index for typos, BM25 statistics), implementing
//!   [`quintet_core::ports::search::SearchIndex`] with the ranking rules of
//!   `quintet_core::search`.
//! - [`PgStorageEventLog`]: the event logs of storage instances whose objects are on S3
//!   (which has no database), implementing
//!   [`quintet_core::ports::storage_events::StorageEventLog`], woken across nodes by
//!   `NOTIFY` like the data change feed (see [`storage_events`]).
//! - [`error`]: PostgreSQL's errors as `core::Error`s, mapped in one place.
//!
//! Everything lives in the schema the URL's `search_path` names, in tables prefixed
//! `quintet_`, so one database can hold several deployments (and the tests' throwaway
//! schemas). The crate knows nothing of HTTP.

mod changelog;
pub mod config;
pub mod data;
pub mod database;
pub mod error;
pub mod feed;
mod listen;
pub mod queue;
pub mod registry;
pub mod search;
pub mod storage_events;

pub use config::PgConfig;
pub use data::PgDocStore;
pub use database::{PgClient, PgDatabase};
pub use queue::PgJobQueue;
pub use registry::PgRegistry;
pub use search::PgSearchIndex;
pub use storage_events::PgStorageEventLog;
