//! The core conformance suites against every embedded adapter, one test per case (see
//! `quintet_core::conformance`), each on a data directory of its own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use quintet_core::{
    Clock, ManualClock, SystemClock,
    conformance::Subject,
    ports::{
        cache::Cache, data::DocStore, queue::JobQueue, registry::Registry, search::SearchIndex,
        storage::ObjectStorage, storage_events::EventedStorage,
    },
};
use quintet_embedded::{cache::CacheOptions, datadir::DataDir, disk::DiskSpace};

/// A fresh, locked data directory, kept (with its temporary parent) by the subject.
fn dir() -> (tempfile::TempDir, DataDir) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::open(tmp.path()).unwrap();
    (tmp, dir)
}

/// The directory's free space, with the default reserve (the conformance cases write
/// little; `disk.rs` and the system tests cover a full disk).
fn disk(dir: &DataDir) -> Arc<DiskSpace> {
    Arc::new(dir.disk(None).unwrap())
}

fn clock() -> Arc<dyn Clock> {
    Arc::new(SystemClock)
}

async fn registry(_: &str) -> Option<Subject<dyn Registry>> {
    let (tmp, dir) = dir();
    let ring = quintet_core::keyring::Keyring::for_tests();
    let port: Arc<dyn Registry> = Arc::new(dir.registry(clock(), ring, &disk(&dir)).unwrap());
    Some(Subject::new(port).keeping((dir, tmp)))
}

async fn data(_: &str) -> Option<Subject<dyn DocStore>> {
    let (tmp, dir) = dir();
    let port: Arc<dyn DocStore> = Arc::new(dir.data(clock(), &disk(&dir)).unwrap());
    Some(Subject::new(port).keeping((dir, tmp)))
}

async fn search(_: &str) -> Option<Subject<dyn SearchIndex>> {
    let (tmp, dir) = dir();
    let port: Arc<dyn SearchIndex> = Arc::new(dir.search(&disk(&dir)).unwrap());
    Some(Subject::new(port).keeping((dir, tmp)))
}

async fn queue(_: &str) -> Option<Subject<dyn JobQueue>> {
    let (tmp, dir) = dir();
    let port: Arc<dyn JobQueue> = Arc::new(dir.queue(&disk(&dir)).unwrap());
    Some(Subject::new(port).keeping((dir, tmp)))
}

async fn storage(_: &str) -> Option<Subject<dyn ObjectStorage>> {
    let (tmp, dir) = dir();
    let signer = quintet_core::object::UrlSigner::new("test", [7; 32], vec![]);
    let port: Arc<dyn ObjectStorage> = Arc::new(dir.storage(clock(), signer, &disk(&dir)).unwrap());
    Some(Subject::new(port).keeping((dir, tmp)))
}

async fn storage_events(_: &str) -> Option<Subject<dyn EventedStorage>> {
    let (tmp, dir) = dir();
    let signer = quintet_core::object::UrlSigner::new("test", [7; 32], vec![]);
    let port: Arc<dyn EventedStorage> =
        Arc::new(dir.storage(clock(), signer, &disk(&dir)).unwrap());
    Some(Subject::new(port).keeping((dir, tmp)))
}

/// The cache on `clock` with `options`.
fn cache_with(options: &CacheOptions, clock: Arc<ManualClock>) -> Subject<dyn Cache> {
    let (tmp, dir) = dir();
    let port: Arc<dyn Cache> = Arc::new(dir.cache(clock, options, &disk(&dir)).unwrap());
    Subject::new(port).keeping((dir, tmp))
}

mod registry {
    quintet_core::registry_conformance!(super::registry);
}

mod data {
    quintet_core::data_conformance!(super::data);
    mod lifecycle {
        quintet_core::lifecycle_conformance!(
            super::super::data,
            quintet_core::InstanceConfig::Data
        );
    }
}

mod search {
    quintet_core::search_conformance!(super::search);
    mod lifecycle {
        quintet_core::lifecycle_conformance!(
            super::super::search,
            quintet_core::InstanceConfig::Search(quintet_core::ports::search::SearchConfig {
                fields: vec!["title".into()],
                store_fields: vec![],
            })
        );
    }
}

mod queue {
    quintet_core::queue_conformance!(super::queue);
    mod lifecycle {
        quintet_core::lifecycle_conformance!(
            super::super::queue,
            quintet_core::InstanceConfig::Queue(quintet_core::ports::queue::QueueConfig::new(
                "http://127.0.0.1:9/"
            ))
        );
    }
}

mod storage {
    quintet_core::storage_conformance!(super::storage);
    mod lifecycle {
        quintet_core::lifecycle_conformance!(
            super::super::storage,
            quintet_core::InstanceConfig::Storage
        );
    }
    mod events {
        quintet_core::storage_events_conformance!(super::super::storage_events);
    }
}

/// The durable cache: values in `cache.log`.
mod cache_durable {
    use super::*;

    async fn open(_: &str, clock: Arc<ManualClock>) -> Option<Subject<dyn Cache>> {
        Some(cache_with(&CacheOptions::default(), clock))
    }

    async fn lifecycle(_: &str) -> Option<Subject<dyn Cache>> {
        open(
            "",
            Arc::new(ManualClock::new(quintet_core::conformance::T0)),
        )
        .await
    }

    quintet_core::cache_conformance!(open);
    mod lifecycle {
        quintet_core::lifecycle_conformance!(super::lifecycle, quintet_core::InstanceConfig::Cache);
    }
}

/// The memory-only cache: nothing on disk.
mod cache_memory_only {
    use super::*;

    async fn open(_: &str, clock: Arc<ManualClock>) -> Option<Subject<dyn Cache>> {
        let options = CacheOptions {
            memory_only: true,
            max_bytes: None,
        };
        Some(cache_with(&options, clock))
    }

    async fn lifecycle(_: &str) -> Option<Subject<dyn Cache>> {
        open(
            "",
            Arc::new(ManualClock::new(quintet_core::conformance::T0)),
        )
        .await
    }

    quintet_core::cache_conformance!(open);
    mod lifecycle {
        quintet_core::lifecycle_conformance!(super::lifecycle, quintet_core::InstanceConfig::Cache);
    }
}

/// A bound far above what the suite stores: the recency bookkeeping runs on every call
/// and must not change any answer.
mod cache_bounded {
    use super::*;

    async fn open(_: &str, clock: Arc<ManualClock>) -> Option<Subject<dyn Cache>> {
        let options = CacheOptions {
            memory_only: false,
            max_bytes: Some(1 << 30),
        };
        Some(cache_with(&options, clock))
    }

    quintet_core::cache_conformance!(open);
}
