//! Cache keys.

use std::{fmt, str::FromStr, sync::Arc};

use crate::{Error, Result};

/// Longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 512;

/// A cache key: a lowercase letter `a-z`, then lowercase letters, digits `0-9` and the
/// characters `_ $ + -`; at most [`MAX_KEY_BYTES`] bytes.
///
/// Keys are ASCII, so they compare byte-wise and need no escaping in JSON or URLs (`+` in a
/// path is a plus sign).
///
/// ```
/// use quintet_core::cache::CacheKey;
/// assert!("user-42".parse::<CacheKey>().is_ok());
/// assert!("a$b+c_d".parse::<CacheKey>().is_ok());
/// assert!("42".parse::<CacheKey>().is_err());
/// assert!("User".parse::<CacheKey>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CacheKey(Arc<str>);

impl CacheKey {
    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key as a shared string (cheap to clone into indexes).
    pub fn as_arc(&self) -> &Arc<str> {
        &self.0
    }
}

/// Whether `b` may appear after the first character of a key.
fn allowed(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'$' | b'+' | b'-')
}

/// `s` quoted for a message, cut short when long.
pub(crate) fn quoted(s: &str) -> String {
    const SHOWN: usize = 40;
    match s.char_indices().nth(SHOWN) {
        Some((cut, _)) => format!("{:?}…", &s[..cut]),
        None => format!("{s:?}"),
    }
}

/// Check `s` against the key rule.
fn check(s: &str) -> Result<()> {
    if s.len() > MAX_KEY_BYTES {
        return Err(Error::invalid(format!(
            "cache key {} is {} bytes long; keys are at most {MAX_KEY_BYTES} bytes",
            quoted(s),
            s.len()
        )));
    }
    let mut bytes = s.bytes();
    let first_ok = bytes.next().is_some_and(|b| b.is_ascii_lowercase());
    if first_ok && bytes.all(allowed) {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "cache key {} is not valid: a key starts with a lowercase letter a-z, \
             followed by lowercase letters, digits 0-9 and the characters _ $ + -",
            quoted(s)
        )))
    }
}

impl FromStr for CacheKey {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        check(s)?;
        Ok(Self(Arc::from(s)))
    }
}

/// A shared string that holds a key (as adapters keep them), checked without copying.
impl TryFrom<Arc<str>> for CacheKey {
    type Error = Error;

    fn try_from(s: Arc<str>) -> Result<Self> {
        check(&s)?;
        Ok(Self(s))
    }
}

impl fmt::Display for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for CacheKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn key_table() {
        let long_ok = format!("a{}", "b".repeat(MAX_KEY_BYTES - 1));
        let too_long = format!("a{}", "b".repeat(MAX_KEY_BYTES));
        let cases: &[(&str, bool)] = &[
            ("a", true),
            ("movie-1984", true),
            ("a_b$c+d-e9", true),
            ("z0", true),
            (&long_ok, true),
            (&too_long, false),
            ("", false),
            ("0a", false),
            ("_a", false),
            ("$a", false),
            ("-a", false),
            ("A", false),
            ("aB", false),
            ("a b", false),
            ("a/b", false),
            ("a.b", false),
            ("a~b", false),
            ("a*", false),
            ("é", false),
            ("aé", false),
            ("a\n", false),
        ];
        for (key, ok) in cases {
            assert_eq!(key.parse::<CacheKey>().is_ok(), *ok, "{key:?}");
        }
    }

    #[test]
    fn shared_strings_are_checked_too() {
        assert!(CacheKey::try_from(Arc::<str>::from("ok")).is_ok());
        assert!(CacheKey::try_from(Arc::<str>::from("Not ok")).is_err());
    }

    #[test]
    fn messages_name_the_key_and_the_rule() {
        let e = "Bad".parse::<CacheKey>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "cache key \"Bad\" is not valid: a key starts with a lowercase letter a-z, \
             followed by lowercase letters, digits 0-9 and the characters _ $ + -"
        );
        assert!(matches!(e, Error::Invalid(_)));
        let e = "a".repeat(600).parse::<CacheKey>().unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "cache key \"{}\"… is 600 bytes long; keys are at most 512 bytes",
                "a".repeat(40)
            )
        );
    }

    proptest! {
        #[test]
        fn agrees_with_the_rule(s in "[a-zA-Z0-9_$+~./ -]{0,12}") {
            let expected = s.len() <= MAX_KEY_BYTES
                && s.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
                && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()
                    || b"_$+-".contains(&b));
            prop_assert_eq!(s.parse::<CacheKey>().is_ok(), expected);
        }

        #[test]
        fn valid_keys_round_trip(s in "[a-z][a-z0-9_$+-]{0,40}") {
            let k: CacheKey = s.parse().unwrap();
            prop_assert_eq!(k.as_str(), s.as_str());
            prop_assert_eq!(k.to_string(), s);
        }
    }
}
