//! The rules of the cache service that every adapter shares: what a key, a value, a
//! time-to-live and a query pattern are, and the errors for missing and existing keys.
//!
//! | Thing | Rule | Type |
//! |---|---|---|
//! | key | `^[a-z][a-z0-9_$+-]*$`, at most 512 bytes | [`CacheKey`] |
//! | value | a JSON object, at most 10 MiB of JSON text | [`CacheValue`] |
//! | ttl | `<n><unit>`, `n` ≥ 1, unit `s m h d w y` | [`Ttl`] |
//! | pattern | `*` matches any run of characters, anything else itself | [`Glob`] |
//!
//! Every type is built by a constructor that enforces its rule, so ports take them and
//! adapters never check again.

pub mod glob;
pub mod key;
pub mod ttl;
pub mod value;

pub use glob::Glob;
pub use key::CacheKey;
pub use ttl::Ttl;
pub use value::CacheValue;

use crate::{Error, InstanceName};

/// The error for a key with no live entry (missing, or expired).
pub fn missing_key(instance: &InstanceName, key: &CacheKey) -> Error {
    Error::not_found(format!(
        "key \"{key}\" does not exist in cache \"{instance}\" (or it has expired); \
         add it first with a POST of {{key, value, ttl?}} to the instance"
    ))
}

/// The error for adding a key that has a live entry.
pub fn existing_key(instance: &InstanceName, key: &CacheKey) -> Error {
    Error::conflict(format!(
        "key \"{key}\" already exists in cache \"{instance}\"; \
         replace its value with a PUT to the key"
    ))
}
