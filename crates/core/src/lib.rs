//! quintet's core: domain types, the error type, one port trait per service, and the pure
//! logic every adapter shares.
//!
//! This crate does no I/O beyond reading the clock and the system's random source: no
//! HTTP, no SQL, no files. Adapters (`quintet-embedded`, the scale-out crates) implement
//! the traits in [`ports`]; the HTTP layer (`quintet-server`) calls them.
//!
//! - [`names`]: validated service types, instance and application names.
//! - [`cache`]: cache keys, values, TTLs and glob patterns.
//! - [`instance`]: instances and their per-type configuration.
//! - [`ports`]: [`ports::Lifecycle`] plus one trait per service and the registry, each
//!   with the answers and preconditions every adapter shares ([`ports::registry::answers`],
//!   [`ports::data::document_missing`], …), and the paged list walk ([`ports::list`]).
//! - [`object`]: object paths, byte ranges and pre-signed URLs of the storage service.
//! - [`search`]: tokenizing, typo tolerance, query plans and match shaping for search.
//! - [`clock`], [`id`], [`json`], [`hmac`]: time, identifiers, guards for untrusted JSON and
//!   the signing primitive.
//! - [`js_json`], [`delivery`]: JSON text as JavaScript writes it, and the rules of queue
//!   deliveries (signature, retry schedule, forbidden targets).
//! - [`accounts`], [`keys`], [`jwt`]: accounts and plans, access keys and connection
//!   strings, and the HS256 tokens clients sign with them.
//! - [`breaker`]: the circuit breaker every engine client uses to fail fast while its
//!   engine is down.
//! - [`keyring`]: the master key, secrets sealed at rest with it, and keys derived from it.
//! - [`redact`]: how a setting that may carry a secret is shown.
//! - [`archive`]: the portable archive of export and import: framing, version, record
//!   order and the digests that compare copies.

pub mod account_tokens;
pub mod accounts;
pub mod archive;
pub mod breaker;
pub mod cache;
pub mod clock;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod delivery;
pub mod error;
pub mod hmac;
pub mod id;
pub mod instance;
pub mod js_json;
pub mod json;
pub mod jwt;
pub mod keyring;
pub mod keys;
pub mod mango;
pub mod names;
pub mod object;
pub mod ports;
pub mod redact;
pub mod search;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{Error, Result};
pub use instance::{Instance, InstanceConfig, InstanceId};
pub use names::{AppName, InstanceName, ServiceType};
