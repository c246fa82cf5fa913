//! What quintet keeps in Redis, and how.
//!
//! | Redis key | type | holds |
//! |---|---|---|
//! | `<prefix>cache:<instance id>:<cache key>` | string | one entry: [`HEADER_LEN`] digits of expiry, then the value's JSON text |
//! | `<prefix>cache-instances` | set | the ids of the instances created and not yet dropped, for [`quintet_core::ports::Lifecycle::sweep`] |
//!
//! Instances are told apart by their id, not their name: ids are unique across
//! applications and never reused, so an instance deleted and created again under the same
//! name never meets its old entries, and one `SCAN MATCH <prefix>cache:<id>:*` finds exactly
//! one instance's keys.
//!
//! **Entries.** The value is stored as a string: the expiry instant (milliseconds since the
//! epoch by the adapter's clock) as exactly [`HEADER_LEN`] decimal digits, zero-padded,
//! `0000000000000000` meaning "never", followed by the JSON text byte for byte. The same
//! write gives the key a Redis expiry (`PX`) of the TTL, so Redis hides and reclaims it on
//! time; the header lets the conditional writes see an entry's expiry instant from Lua
//! (`GETRANGE key 0 15`, without reading the value) and keep it on a write without TTL.
//!
//! **Patterns.** Cache keys hold only `a-z 0-9 _ $ + -`, none special to Redis; a quintet
//! pattern's only wildcard is `*`, and every other character is literal. Redis' `MATCH`
//! also knows `?`, `[…]` and `\`, so those are escaped with `\` (as is anything in the
//! prefix). [`match_pattern`] is only a filter for `SCAN`: every key found is checked again
//! with [`Glob::matches`], so answers are the embedded adapter's by construction.

use quintet_core::{
    InstanceId,
    cache::{CacheKey, CacheValue, Glob},
};

/// Bytes of the expiry header in front of every stored value.
pub const HEADER_LEN: usize = 16;

/// The header of an entry that never expires.
pub const NEVER: &str = "0000000000000000";

/// Where one deployment's keys live in Redis.
#[derive(Debug, Clone)]
pub struct Layout {
    prefix: String,
}

impl Layout {
    /// The keys under `prefix`.
    pub fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
        }
    }

    /// The prefix of every key of `instance` (ends with `:`).
    pub fn instance_prefix(&self, instance: InstanceId) -> String {
        format!("{}cache:{}:", self.prefix, instance.0)
    }

    /// The Redis key of `key` in `instance`.
    pub fn entry(&self, instance: InstanceId, key: &CacheKey) -> String {
        let mut k = self.instance_prefix(instance);
        k.push_str(key.as_str());
        k
    }

    /// The set of created instance ids.
    pub fn instances(&self) -> String {
        format!("{}cache-instances", self.prefix)
    }

    /// The `SCAN MATCH` pattern of every key of `instance`.
    pub fn all_of(&self, instance: InstanceId) -> String {
        let mut p = escape(&self.instance_prefix(instance));
        p.push('*');
        p
    }

    /// The `SCAN MATCH` pattern of the keys of `instance` that `glob` may match.
    pub fn matching(&self, instance: InstanceId, glob: &Glob) -> String {
        let mut p = escape(&self.instance_prefix(instance));
        p.push_str(&match_pattern(glob));
        p
    }
}

/// `text` with every character special to Redis' glob (`* ? [ ] \`) escaped.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\' | '^') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A quintet pattern in Redis `MATCH` syntax: `*` stays a wildcard, every other character
/// is literal.
pub fn match_pattern(glob: &Glob) -> String {
    glob.as_str()
        .split('*')
        .map(escape)
        .collect::<Vec<_>>()
        .join("*")
}

/// The string stored for `value`, expiring at `expires_at` (never when `None`).
pub fn encode(value: &CacheValue, expires_at: Option<i64>) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + value.len());
    match expires_at {
        // At least 1, so that a clock set before the epoch cannot write "never".
        Some(at) => out.extend_from_slice(format!("{:016}", at.max(1)).as_bytes()),
        None => out.extend_from_slice(NEVER.as_bytes()),
    }
    out.extend_from_slice(value.as_str().as_bytes());
    out
}

/// A stored string split into its expiry (`None`: never) and value; `None` when it is not
/// one quintet wrote.
pub fn decode(stored: Vec<u8>) -> Option<(Option<i64>, CacheValue)> {
    let at = decode_expiry(&stored)?;
    let mut text = String::from_utf8(stored).ok()?;
    text.drain(..HEADER_LEN);
    Some((at, CacheValue::from_stored(text)))
}

/// The expiry (`None`: never) in the header at the start of `stored`; `None` outside
/// `Some` when it is not a header quintet wrote.
pub fn decode_expiry(stored: &[u8]) -> Option<Option<i64>> {
    let header = std::str::from_utf8(stored.get(..HEADER_LEN)?).ok()?;
    if !header.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let at: i64 = header.parse().ok()?;
    Some((at != 0).then_some(at))
}

/// Whether an entry expiring at `expires_at` is live at `now`.
pub fn is_live(expires_at: Option<i64>, now: i64) -> bool {
    expires_at.is_none_or(|at| now < at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(p: &str) -> Glob {
        Glob::new(p).unwrap()
    }

    #[test]
    fn patterns_escape_what_redis_treats_specially() {
        assert_eq!(match_pattern(&glob("movie-*")), "movie-*");
        assert_eq!(match_pattern(&glob("*a*b*")), "*a*b*");
        assert_eq!(match_pattern(&glob("a?c")), "a\\?c");
        assert_eq!(match_pattern(&glob("[ab]*")), "\\[ab\\]*");
        assert_eq!(match_pattern(&glob("a\\*")), "a\\\\*");
        assert_eq!(match_pattern(&glob("a+b$c_d-e")), "a+b$c_d-e");
        assert_eq!(match_pattern(&glob("^x")), "\\^x");
        assert_eq!(match_pattern(&Glob::all()), "*");
    }

    #[test]
    fn instance_keys_have_their_own_prefix() {
        let l = Layout::new("t[1]:");
        let k: CacheKey = "movie".parse().unwrap();
        assert_eq!(l.entry(InstanceId(12), &k), "t[1]:cache:12:movie");
        assert_eq!(l.all_of(InstanceId(12)), "t\\[1\\]:cache:12:*");
        assert_eq!(
            l.matching(InstanceId(1), &glob("m?*")),
            "t\\[1\\]:cache:1:m\\?*"
        );
        assert_eq!(l.instances(), "t[1]:cache-instances");
    }

    #[test]
    fn values_round_trip_with_their_expiry() {
        let v = CacheValue::from_stored(r#"{"a":"é\n", "b":[1, 2.50]}"#);
        for at in [
            None,
            Some(1),
            Some(1_700_000_000_000),
            Some(9_999_999_999_999_999),
        ] {
            let stored = encode(&v, at);
            assert_eq!(stored.len(), HEADER_LEN + v.len());
            assert_eq!(decode(stored), Some((at, v.clone())));
        }
        assert_eq!(decode(encode(&v, Some(-5))).unwrap().0, Some(1));
        assert_eq!(decode(b"short".to_vec()), None);
        assert_eq!(decode(b"00000000000000x0{}".to_vec()), None);
    }

    #[test]
    fn liveness_is_strictly_before_the_instant() {
        assert!(is_live(None, i64::MAX));
        assert!(is_live(Some(1_000), 999));
        assert!(!is_live(Some(1_000), 1_000));
    }
}
