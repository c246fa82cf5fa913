//! The core conformance suites against the PostgreSQL adapters, one test per case (see
//! `quintet_core::conformance`), each on a schema of its own (`quintet-engine-test`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use quintet_core::{
    InstanceConfig, SystemClock,
    conformance::Subject,
    ports::{
        data::DocStore,
        queue::{JobQueue, QueueConfig},
        registry::Registry,
        search::{SearchConfig, SearchIndex},
        storage_events::{EventedStorage, Logged},
    },
};
use quintet_engine_test::PgSchema;
use quintet_postgres::{
    PgConfig, PgDatabase, PgDocStore, PgJobQueue, PgRegistry, PgSearchIndex, PgStorageEventLog,
};

/// A pool on a fresh schema for `test`, or `None` when PostgreSQL is not configured.
async fn database(test: &str) -> Option<(PgDatabase, PgSchema)> {
    let pg = quintet_engine_test::postgres(test).await?;
    let db = PgDatabase::connect(&PgConfig::new(pg.url()).unwrap())
        .await
        .unwrap();
    Some((db, pg))
}

async fn registry(test: &str) -> Option<Subject<dyn Registry>> {
    let (db, pg) = database(test).await?;
    let port: Arc<dyn Registry> = Arc::new(
        PgRegistry::open(
            db,
            Arc::new(SystemClock),
            quintet_core::keyring::Keyring::for_tests(),
        )
        .await
        .unwrap(),
    );
    Some(Subject::new(port).keeping(pg))
}

async fn data(test: &str) -> Option<Subject<dyn DocStore>> {
    let (db, pg) = database(test).await?;
    let port: Arc<dyn DocStore> =
        Arc::new(PgDocStore::open(db, Arc::new(SystemClock)).await.unwrap());
    Some(Subject::new(port).keeping(pg))
}

async fn queue(test: &str) -> Option<Subject<dyn JobQueue>> {
    let (db, pg) = database(test).await?;
    let port: Arc<dyn JobQueue> =
        Arc::new(PgJobQueue::open(db, Arc::new(SystemClock)).await.unwrap());
    Some(Subject::new(port).keeping(pg))
}

async fn search(test: &str) -> Option<Subject<dyn SearchIndex>> {
    let (db, pg) = database(test).await?;
    let port: Arc<dyn SearchIndex> = Arc::new(PgSearchIndex::open(db).await.unwrap());
    Some(Subject::new(port).keeping(pg))
}

/// The storage event log, recording the writes of objects kept in memory (S3's part is
/// the S3 adapter's own suite).
async fn storage_events(test: &str) -> Option<Subject<dyn EventedStorage>> {
    let (db, pg) = database(test).await?;
    let log = Arc::new(PgStorageEventLog::open(db).await.unwrap());
    let port: Arc<dyn EventedStorage> = Arc::new(Logged::new(
        quintet_core::conformance::storage_events::MemoryBlobStore::default(),
        log,
    ));
    Some(Subject::new(port).keeping(pg))
}

fn search_config() -> InstanceConfig {
    InstanceConfig::Search(SearchConfig {
        fields: vec!["title".into()],
        store_fields: vec![],
    })
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

mod queue {
    quintet_core::queue_conformance!(super::queue);
    mod lifecycle {
        quintet_core::lifecycle_conformance!(
            super::super::queue,
            quintet_core::InstanceConfig::Queue(super::super::QueueConfig::new(
                "http://127.0.0.1:9/"
            ))
        );
    }
}

mod search {
    quintet_core::search_conformance!(super::search);
    mod lifecycle {
        quintet_core::lifecycle_conformance!(super::super::search, super::super::search_config());
    }
}

mod storage_events {
    quintet_core::storage_events_conformance!(super::storage_events);
    mod lifecycle {
        quintet_core::lifecycle_conformance!(
            super::super::storage_events,
            quintet_core::InstanceConfig::Storage
        );
    }
}
