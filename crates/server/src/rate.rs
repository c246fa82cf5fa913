//! Request rate limits per access key and per client address, so one client or one tenant
//! cannot take a node's whole capacity.
//!
//! Each limit is a token bucket: `rate` requests per second, with a burst of one second's
//! worth. A request over the limit answers 429 with `Retry-After` (the seconds until a
//! token is back) and reaches no handler. Buckets live in this node's memory: with N
//! scale-out nodes behind a balancer a client may get up to N times the rate, which keeps
//! the hot path free of a round trip to a shared store.

use std::{
    collections::HashMap,
    hash::Hash,
    net::IpAddr,
    sync::{Arc, Mutex, PoisonError},
};

use quintet_core::{Clock, Error, Result, keys::KeyId};

/// Past this many tracked clients, buckets that have refilled completely are dropped
/// (they hold nothing a new bucket would not).
const PRUNE_AT: usize = 100_000;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at_ms: i64,
}

/// Token buckets by `K`.
#[derive(Debug)]
struct Buckets<K>(Mutex<HashMap<K, Bucket>>);

impl<K: Hash + Eq + Clone> Buckets<K> {
    fn new() -> Self {
        Self(Mutex::new(HashMap::new()))
    }

    /// Take one token of `who`'s bucket refilled at `rate` per second; `Err(wait_ms)` when
    /// empty.
    fn take(&self, who: &K, rate: u32, now_ms: i64) -> std::result::Result<(), i64> {
        let rate = f64::from(rate.max(1));
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if map.len() >= PRUNE_AT && !map.contains_key(who) {
            map.retain(|_, b| b.at_ms > now_ms.saturating_sub(1000));
        }
        let bucket = map.entry(who.clone()).or_insert(Bucket {
            tokens: rate,
            at_ms: now_ms,
        });
        let elapsed = now_ms.saturating_sub(bucket.at_ms).max(0) as f64 / 1000.0;
        bucket.tokens = (bucket.tokens + elapsed * rate).min(rate);
        bucket.at_ms = now_ms;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(((1.0 - bucket.tokens) / rate * 1000.0).ceil() as i64)
        }
    }
}

/// The rate limits of one node; see the module documentation.
#[derive(Debug)]
pub struct RateLimits {
    per_client: Option<u32>,
    clients: Buckets<IpAddr>,
    keys: Buckets<KeyId>,
    clock: Arc<dyn Clock>,
}

impl RateLimits {
    /// Limits of `per_client` requests per second per client address (none when `None`),
    /// timed by `clock`. Per-key rates are given with each request ([`RateLimits::key`]).
    pub fn new(per_client: Option<u32>, clock: Arc<dyn Clock>) -> Self {
        Self {
            per_client,
            clients: Buckets::new(),
            keys: Buckets::new(),
            clock,
        }
    }

    /// Count a request from `client`.
    pub fn client(&self, client: IpAddr) -> Result<()> {
        let Some(rate) = self.per_client else {
            return Ok(());
        };
        self.clients
            .take(&client, rate, self.clock.now_ms())
            .map_err(|wait| {
                refused(
                    wait,
                    format!(
                        "too many requests from this address: at most {rate} per second \
                         (--rate-limit-per-client); slow down and retry"
                    ),
                )
            })
    }

    /// Count a request signed with `key`, limited to `rate` per second.
    pub fn key(&self, key: &KeyId, rate: u32) -> Result<()> {
        self.keys
            .take(key, rate, self.clock.now_ms())
            .map_err(|wait| {
                refused(
                    wait,
                    format!(
                        "too many requests with key \"{key}\": at most {rate} per second; slow \
                     down and retry"
                    ),
                )
            })
    }
}

/// The rate-limit layer: after authentication, count the request against its client
/// address and, when signed with an access key, against that key (at its plan's rate, or
/// `--rate-limit-per-key` when lower).
pub async fn limit(
    axum::extract::State(state): axum::extract::State<crate::AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let client = req
        .extensions()
        .get::<crate::ClientAddr>()
        .map(|c| c.0.ip());
    let key = match req.extensions().get::<crate::auth::Principal>() {
        Some(crate::auth::Principal::Key { app, key }) => Some((app.clone(), key.clone())),
        _ => None,
    };
    match check(&state, client, key).await {
        Ok(()) => next.run(req).await,
        Err(e) => axum::response::IntoResponse::into_response(crate::error::ApiError(e)),
    }
}

async fn check(
    state: &crate::AppState,
    client: Option<IpAddr>,
    key: Option<(quintet_core::AppName, KeyId)>,
) -> Result<()> {
    if let Some(client) = client {
        state.rates.client(client)?;
    }
    if let Some((app, key)) = key {
        let plan = state
            .quotas
            .of(&app)
            .await?
            .map(|(_, limits)| limits.requests_per_second_per_key);
        let ceiling = state.config.rate_limit_per_key.map(u64::from);
        let rate = match (plan, ceiling) {
            (Some(p), Some(c)) => Some(p.min(c)),
            (p, c) => p.or(c),
        };
        if let Some(rate) = rate {
            state
                .rates
                .key(&key, u32::try_from(rate).unwrap_or(u32::MAX))?;
        }
    }
    Ok(())
}

fn refused(wait_ms: i64, msg: String) -> Error {
    let secs = u64::try_from((wait_ms.max(1) + 999) / 1000)
        .unwrap_or(1)
        .max(1);
    Error::RateLimited(msg, secs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_bucket_allows_its_burst_then_refills_with_time() {
        let b = Buckets::<u8>::new();
        for _ in 0..3 {
            assert_eq!(b.take(&1, 3, 0), Ok(()));
        }
        assert_eq!(b.take(&1, 3, 0), Err(334));
        // Another client has its own bucket.
        assert_eq!(b.take(&2, 3, 0), Ok(()));
        // A third of a second gives one token back.
        assert_eq!(b.take(&1, 3, 334), Ok(()));
        assert!(b.take(&1, 3, 334).is_err());
        // A long pause refills no more than the burst.
        for _ in 0..3 {
            assert_eq!(b.take(&1, 3, 60_000), Ok(()));
        }
        assert!(b.take(&1, 3, 60_000).is_err());
    }

    #[test]
    fn the_refusal_says_when_to_retry_in_whole_seconds() {
        for (wait_ms, secs) in [(1, 1), (999, 1), (1000, 1), (1001, 2), (0, 1)] {
            match refused(wait_ms, String::new()) {
                Error::RateLimited(_, s) => assert_eq!(s, secs, "{wait_ms}"),
                other => panic!("{other:?}"),
            }
        }
    }

    proptest! {
        /// Over any sequence of request times, a bucket never lets through more than its
        /// burst plus what the elapsed time refilled.
        #[test]
        fn never_more_than_rate_times_time_plus_burst(
            rate in 1u32..50,
            gaps in proptest::collection::vec(0i64..200, 1..300),
        ) {
            let b = Buckets::<u8>::new();
            let (mut now, mut passed) = (0i64, 0u64);
            for gap in gaps {
                now += gap;
                if b.take(&0, rate, now).is_ok() {
                    passed += 1;
                }
            }
            let allowed = f64::from(rate) * (1.0 + now as f64 / 1000.0);
            prop_assert!(passed as f64 <= allowed + 1e-9, "{passed} > {allowed}");
        }
    }
}
