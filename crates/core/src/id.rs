//! Time-ordered unique identifiers.
//!
//! An id is 26 characters of lowercase Crockford base32: 48 bits of milliseconds since the
//! epoch followed by 80 bits that start random for each millisecond and count up within it.
//! Ids therefore sort byte-wise in creation order within a process (monotonic even when the
//! clock stands still or steps back), and collide across processes only with negligible
//! probability. Sequential keys also keep B-tree inserts at the right edge, which is faster
//! than random UUIDs.

use std::sync::Mutex;

use crate::{Clock, Error, Result};

const ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";
const RANDOM_MASK: u128 = (1 << 80) - 1;

/// Generates time-ordered unique ids; see the module documentation for the format.
#[derive(Debug, Default)]
pub struct IdGenerator {
    last: Mutex<(i64, u128)>,
}

impl IdGenerator {
    /// A generator with no history.
    pub fn new() -> Self {
        Self::default()
    }

    /// The next id, strictly greater (byte-wise) than every id this generator returned.
    pub fn next_id(&self, clock: &dyn Clock) -> Result<String> {
        let now = clock.now_ms().clamp(0, (1 << 48) - 1);
        let mut last = self
            .last
            .lock()
            .map_err(|_| Error::internal("id generator lock poisoned"))?;
        let (ms, rand) = if now > last.0 {
            (now, random_80()? >> 1) // top bit clear leaves room to count up
        } else if last.1 < RANDOM_MASK {
            (last.0, last.1 + 1)
        } else {
            (last.0 + 1, random_80()? >> 1)
        };
        *last = (ms, rand);
        Ok(encode((u128::from(ms as u64) << 80) | rand))
    }
}

fn random_80() -> Result<u128> {
    let mut buf = [0u8; 16];
    getrandom::fill(&mut buf).map_err(|e| Error::internal(format!("random source: {e}")))?;
    Ok(u128::from_be_bytes(buf) & RANDOM_MASK)
}

fn encode(mut v: u128) -> String {
    let mut out = [0u8; 26];
    for slot in out.iter_mut().rev() {
        *slot = ALPHABET[(v & 31) as usize];
        v >>= 5;
    }
    out.iter().map(|&b| b as char).collect()
}

/// Fill a buffer of `n` bytes from the operating system's secure random source.
pub fn random_bytes(n: usize) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; n];
    getrandom::fill(&mut buf).map_err(|e| Error::internal(format!("random source: {e}")))?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;

    #[test]
    fn ids_are_monotonic_when_the_clock_stands_still_or_steps_back() {
        let clock = ManualClock::new(1_700_000_000_000);
        let ids = IdGenerator::new();
        let mut prev = ids.next_id(&clock).unwrap();
        for i in 0..1000 {
            if i == 500 {
                clock.advance(-10_000);
            }
            let next = ids.next_id(&clock).unwrap();
            assert!(next > prev, "{next} <= {prev}");
            assert_eq!(next.len(), 26);
            prev = next;
        }
    }

    #[test]
    fn ids_follow_time() {
        let clock = ManualClock::new(1_000);
        let ids = IdGenerator::new();
        let a = ids.next_id(&clock).unwrap();
        clock.advance(1);
        let b = IdGenerator::new().next_id(&clock).unwrap();
        assert!(b > a);
    }

    #[test]
    fn random_bytes_has_the_length_asked() {
        assert_eq!(random_bytes(32).unwrap().len(), 32);
    }
}
