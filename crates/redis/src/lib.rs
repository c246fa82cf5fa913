//! quintet on Redis: the cache shared by N stateless nodes.
//!
//! - [`RedisConfig`]: the URL, key prefix and timeout.
//! - [`RedisCache`]: implements [`quintet_core::ports::cache::Cache`] with the same rules
//!   and messages as the embedded cache (the core conformance suite runs against both):
//!   conditional writes as atomic Lua scripts, TTLs as Redis expiries set with the value
//!   (`SET … PX`), queries by `SCAN MATCH` re-checked with the core glob, one key prefix per
//!   instance so dropping it removes exactly its keys.
//! - [`keys`]: what is stored under which Redis key, and how patterns are translated.
//! - [`error`]: Redis' errors as `core::Error`s, mapped in one place.
//!
//! Durability is Redis' own: a write returns once Redis applied it; whether it survives a
//! Redis restart depends on its persistence settings (`appendonly`, `appendfsync`). The
//! crate knows nothing of HTTP.

pub mod cache;
pub mod config;
pub mod error;
pub mod keys;

pub use cache::RedisCache;
pub use config::RedisConfig;
