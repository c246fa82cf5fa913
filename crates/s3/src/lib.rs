//! quintet on S3: the storage adapter that lets N stateless nodes share one bucket.
//!
//! - [`S3Config`]: the `s3://bucket[/prefix]?endpoint=…&region=…` URL.
//! - [`S3BlobStore`]: implements [`quintet_core::ports::storage::BlobStore`],
//!   [`quintet_core::ports::storage::Presign`] and [`quintet_core::ports::Lifecycle`] on
//!   any S3-compatible store (AWS S3, MinIO, SeaweedFS, Garage, …) through `object_store`.
//!   Uploads and downloads stream; pre-signed URLs are the store's own (SigV4), so clients
//!   transfer large objects with S3 directly.
//! - [`error`]: the store's errors as `core::Error`s, mapped in one place.
//!
//! The crate knows nothing of HTTP routes and reads no environment.

pub mod config;
pub mod error;
pub mod store;

pub use config::{ConfigError, S3Config};
pub use store::S3BlobStore;
