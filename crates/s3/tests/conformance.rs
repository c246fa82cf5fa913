//! The core storage and lifecycle suites against S3BlobStore on a real S3 store
//! (SeaweedFS from `scripts/engines`), one test per case (see
//! `quintet_core::conformance`), each on a key prefix of its own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use quintet_core::{conformance::Subject, ports::storage::ObjectStorage};
use quintet_s3::{S3BlobStore, S3Config};

/// A store on a fresh prefix of the test bucket, or `None` when S3 is not configured.
async fn store(test: &str) -> Option<Subject<dyn ObjectStorage>> {
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
    let port: Arc<dyn ObjectStorage> = Arc::new(S3BlobStore::open(&config).await.expect("open S3"));
    Some(Subject::new(port))
}

mod storage {
    quintet_core::storage_conformance!(super::store);
}

mod lifecycle {
    quintet_core::lifecycle_conformance!(super::store, quintet_core::InstanceConfig::Storage);
}
