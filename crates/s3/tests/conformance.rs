//! The core storage and lifecycle suites against S3BlobStore on a real S3 store
//! (SeaweedFS from `scripts/engines`), each test on a key prefix of its own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use quintet_core::{InstanceConfig, conformance};
use quintet_s3::{S3BlobStore, S3Config};

/// A store on a fresh prefix of the test bucket, or `None` when S3 is not configured.
pub async fn store(test: &str) -> Option<S3BlobStore> {
    let s3 = quintet_engine_test::s3(test)?;
    let config = S3Config {
        bucket: s3.bucket,
        prefix: s3.prefix,
        endpoint: Some(s3.endpoint),
        region: s3.region,
        access_key_id: Some(s3.key),
        secret_access_key: Some(s3.secret),
        connect_timeout: quintet_s3::config::DEFAULT_CONNECT_TIMEOUT,
    };
    Some(S3BlobStore::open(&config).await.expect("open S3"))
}

#[tokio::test]
async fn storage() {
    let Some(store) = store("s3_storage_conformance").await else {
        return;
    };
    conformance::storage::run_all(&store).await;
}

#[tokio::test]
async fn lifecycle() {
    let Some(store) = store("s3_lifecycle_conformance").await else {
        return;
    };
    conformance::lifecycle::run_all(&store, InstanceConfig::Storage).await;
}
