//! Failed admin authentications, counted per client address, so that guessing the admin
//! token is slowed to a handful of tries a minute.
//!
//! A client address with [`MAX_FAILURES`] failures within [`WINDOW_MS`] is refused (429
//! with `Retry-After`) until its window ends, before its token is even compared. Memory
//! stays bounded: at most [`MAX_TRACKED`] addresses are tracked; when full, windows that
//! ended are dropped, and if none ended the address is counted under one shared slot.

use std::{
    collections::HashMap,
    net::IpAddr,
    sync::{Arc, Mutex},
};

use quintet_core::{Clock, Error, Result};

/// Failures allowed per client address in a window.
pub const MAX_FAILURES: u32 = 10;
/// The window, in milliseconds.
pub const WINDOW_MS: i64 = 60_000;
/// Most addresses tracked at once.
const MAX_TRACKED: usize = 10_000;

/// The failure counts; see the module documentation.
#[derive(Debug)]
pub struct Failures {
    clock: Arc<dyn Clock>,
    /// Address (`None`: the shared overflow slot, or a client without one) → (window
    /// start, failures in it).
    seen: Mutex<HashMap<Option<IpAddr>, (i64, u32)>>,
}

impl Failures {
    /// Counts on `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            seen: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Option<IpAddr>, (i64, u32)>> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// [`Error::RateLimited`] while `client` has used up its failures.
    pub fn check(&self, client: Option<IpAddr>) -> Result<()> {
        let now = self.clock.now_ms();
        let seen = self.lock();
        match seen.get(&client) {
            Some(&(start, n)) if n >= MAX_FAILURES && now < start + WINDOW_MS => {
                let wait = (start + WINDOW_MS - now + 999) / 1000;
                Err(Error::RateLimited(
                    format!(
                        "too many failed admin authentications from this address: try again \
                         in {wait} seconds with the right admin token"
                    ),
                    u64::try_from(wait).unwrap_or(1),
                ))
            }
            _ => Ok(()),
        }
    }

    /// Count one failure of `client`.
    pub fn record(&self, client: Option<IpAddr>) {
        let now = self.clock.now_ms();
        let mut seen = self.lock();
        if !seen.contains_key(&client) && seen.len() >= MAX_TRACKED {
            seen.retain(|_, (start, _)| now < *start + WINDOW_MS);
        }
        let slot = if seen.contains_key(&client) || seen.len() < MAX_TRACKED {
            client
        } else {
            None
        };
        let entry = seen.entry(slot).or_insert((now, 0));
        if now >= entry.0 + WINDOW_MS {
            *entry = (now, 0);
        }
        entry.1 = entry.1.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use quintet_core::ManualClock;

    use super::*;

    #[test]
    fn an_address_is_refused_after_its_failures_until_the_window_ends() {
        let clock = Arc::new(ManualClock::new(1_000_000));
        let f = Failures::new(clock.clone());
        let a = Some("10.0.0.1".parse().unwrap());
        let b = Some("10.0.0.2".parse().unwrap());
        for _ in 0..MAX_FAILURES {
            f.check(a).unwrap();
            f.record(a);
        }
        let Err(Error::RateLimited(msg, wait)) = f.check(a) else {
            panic!("not refused")
        };
        assert_eq!(wait, 60);
        assert!(msg.contains("60 seconds"), "{msg}");
        f.check(b).unwrap();
        clock.advance(59_001);
        assert!(matches!(f.check(a), Err(Error::RateLimited(_, 1))));
        clock.advance(1_000);
        f.check(a).unwrap();
        f.record(a);
        f.check(a).unwrap();
    }
}
