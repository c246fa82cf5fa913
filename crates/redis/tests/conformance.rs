//! The core conformance suites against [`RedisCache`], one test per case (see
//! `quintet_core::conformance`), each in a key prefix of its own.
//!
//! The cache cases step a [`ManualClock`]; the adapter reads time from it like the
//! embedded cache does (the expiry instant is stored with each entry), so the suite runs
//! unchanged. Redis' own expiry of each entry is the TTL in real time, longer than a case
//! takes between a write and the reads that expect it live.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use quintet_core::{ManualClock, conformance::Subject, ports::cache::Cache};
use quintet_redis::{RedisCache, RedisConfig};

async fn open(test: &str, clock: Arc<ManualClock>) -> Option<Subject<dyn Cache>> {
    let target = quintet_engine_test::redis(test)?;
    let config = RedisConfig::new(&target.url)
        .unwrap()
        .with_prefix(target.prefix);
    let port: Arc<dyn Cache> = Arc::new(RedisCache::connect(&config, clock).await.unwrap());
    Some(Subject::new(port))
}

async fn lifecycle(test: &str) -> Option<Subject<dyn Cache>> {
    open(
        test,
        Arc::new(ManualClock::new(quintet_core::conformance::T0)),
    )
    .await
}

mod cache {
    quintet_core::cache_conformance!(super::open);
}

mod lifecycle {
    quintet_core::lifecycle_conformance!(super::lifecycle, quintet_core::InstanceConfig::Cache);
}

/// Every query and drop takes many SCAN steps: the answers must not change.
mod small_scan_steps {
    use super::*;

    async fn open(test: &str, clock: Arc<ManualClock>) -> Option<Subject<dyn Cache>> {
        let target = quintet_engine_test::redis(test)?;
        let config = RedisConfig::new(&target.url)
            .unwrap()
            .with_prefix(target.prefix);
        let cache = RedisCache::connect(&config, clock).await.unwrap();
        let port: Arc<dyn Cache> = Arc::new(cache.with_scan_count(3));
        Some(Subject::new(port))
    }

    quintet_core::cache_conformance!(open);
}

/// The adapter never sends `KEYS` (it blocks Redis for the whole keyspace) nor flushes a
/// database: every case passes for a Redis user denied those commands, so a use of
/// either would fail it.
mod without_keys_or_flush {
    use super::*;

    /// A Redis user of its own, denied `KEYS`, `FLUSHDB` and `FLUSHALL`; deleted when
    /// dropped.
    struct Restricted {
        admin: String,
        user: String,
    }

    impl Drop for Restricted {
        fn drop(&mut self) {
            if let Ok(mut admin) =
                redis::Client::open(self.admin.as_str()).and_then(|c| c.get_connection())
            {
                let _: redis::RedisResult<()> = redis::cmd("ACL")
                    .arg("DELUSER")
                    .arg(&self.user)
                    .query(&mut admin);
            }
        }
    }

    async fn open(test: &str, clock: Arc<ManualClock>) -> Option<Subject<dyn Cache>> {
        let target = quintet_engine_test::redis(test)?;
        let user = format!("quintet-{}", target.prefix.trim_end_matches(':'));
        let admin = redis::Client::open(target.url.as_str()).unwrap();
        let mut admin = admin.get_multiplexed_async_connection().await.unwrap();
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(&user)
            .arg("on")
            .arg(">no-keys-secret")
            .arg("~*")
            .arg("&*")
            .arg("+@all")
            .arg("-keys")
            .arg("-flushdb")
            .arg("-flushall")
            .query_async(&mut admin)
            .await
            .unwrap();
        let restricted = Restricted {
            admin: target.url.clone(),
            user: user.clone(),
        };
        let url = target
            .url
            .replacen("redis://", &format!("redis://{user}:no-keys-secret@"), 1);
        // The restriction is real: this user's KEYS is refused.
        let mut probe = redis::Client::open(url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let refused: redis::RedisResult<Vec<String>> =
            redis::cmd("KEYS").arg("*").query_async(&mut probe).await;
        assert!(refused.is_err(), "KEYS should be refused for {user}");
        let config = RedisConfig::new(&url).unwrap().with_prefix(target.prefix);
        let port: Arc<dyn Cache> = Arc::new(RedisCache::connect(&config, clock).await.unwrap());
        Some(Subject::new(port).keeping(restricted))
    }

    async fn lifecycle(test: &str) -> Option<Subject<dyn Cache>> {
        open(
            test,
            Arc::new(ManualClock::new(quintet_core::conformance::T0)),
        )
        .await
    }

    quintet_core::cache_conformance!(open);
    mod lifecycle {
        quintet_core::lifecycle_conformance!(super::lifecycle, quintet_core::InstanceConfig::Cache);
    }
}
