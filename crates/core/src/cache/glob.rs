//! Key patterns of cache queries: `*` matches any run of characters (also none), every other
//! character matches itself.
//!
//! Unlike Redis globs there is no `?`, no `[...]` class and no escape: cache keys cannot
//! contain `*`, so nothing needs escaping, and `?`/`[` are simply characters no key holds.
//! Matching is byte-wise and case-sensitive (keys are lowercase).

use std::fmt;

use crate::{Error, Result};

/// Longest pattern accepted, in bytes (keys are at most 512 bytes; a pattern may add stars).
pub const MAX_PATTERN_BYTES: usize = 2048;

/// A compiled key pattern.
///
/// ```
/// use quintet_core::cache::Glob;
/// let g = Glob::new("movie-*-1984").unwrap();
/// assert!(g.matches("movie-ghostbusters-1984"));
/// assert!(!g.matches("movie-ghostbusters-1985"));
/// assert_eq!(g.literal_prefix(), "movie-");
/// assert!(Glob::new("*").unwrap().matches(""));
/// assert!(Glob::new("a*b*c").unwrap().matches("abc"));
/// assert!(Glob::new("exact").unwrap().matches("exact"));
/// assert!(!Glob::new("exact").unwrap().matches("exactly"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    pattern: String,
    /// The literal pieces between stars; one piece when there is no star.
    pieces: Vec<String>,
}

impl Glob {
    /// Compile `pattern`. [`Error::Invalid`] when it is longer than [`MAX_PATTERN_BYTES`].
    pub fn new(pattern: &str) -> Result<Self> {
        if pattern.len() > MAX_PATTERN_BYTES {
            return Err(Error::invalid(format!(
                "the pattern is {} bytes long; patterns are at most {MAX_PATTERN_BYTES} bytes",
                pattern.len()
            )));
        }
        Ok(Self {
            pattern: pattern.to_owned(),
            pieces: pattern.split('*').map(str::to_owned).collect(),
        })
    }

    /// The pattern that matches every key (`*`).
    pub fn all() -> Self {
        Self {
            pattern: "*".to_owned(),
            pieces: vec![String::new(), String::new()],
        }
    }

    /// The pattern as given.
    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// The text every matching key starts with: everything before the first `*` (the whole
    /// pattern when it has none). Adapters use it to read only a range of keys.
    pub fn literal_prefix(&self) -> &str {
        self.pieces.first().map_or("", String::as_str)
    }

    /// Whether the pattern has no `*`, so it matches exactly one key.
    pub fn is_exact(&self) -> bool {
        self.pieces.len() == 1
    }

    /// Whether `key` matches the pattern.
    pub fn matches(&self, key: &str) -> bool {
        let (first, rest) = match self.pieces.split_first() {
            Some(split) => split,
            None => return key.is_empty(),
        };
        let Some((last, middle)) = rest.split_last() else {
            return key == first;
        };
        if key.len() < first.len() + last.len()
            || !key.starts_with(first.as_str())
            || !key.ends_with(last.as_str())
        {
            return false;
        }
        // Each middle piece at its leftmost place after the previous one: taking the
        // leftmost occurrence never loses a match, because stars absorb whatever lies
        // between pieces.
        let mut hay = &key[first.len()..key.len() - last.len()];
        for piece in middle {
            match hay.find(piece.as_str()) {
                Some(at) => hay = &hay[at + piece.len()..],
                None => return false,
            }
        }
        true
    }
}

impl fmt::Display for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.pattern)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The reference model: the textbook recursive definition of `*`.
    fn model(p: &[u8], k: &[u8]) -> bool {
        match p.split_first() {
            None => k.is_empty(),
            Some((b'*', rest)) => (0..=k.len()).any(|i| model(rest, &k[i..])),
            Some((c, rest)) => k.first() == Some(c) && model(rest, &k[1..]),
        }
    }

    #[test]
    fn shapes_from_the_spec() {
        let cases = [
            ("movie-*", "movie-1984", true),
            ("movie-*", "movie-", true),
            ("movie-*", "movi", false),
            ("*-1984", "ghostbusters-1984", true),
            ("*-1984", "ghostbusters-1985", false),
            ("movie*1984", "movie-ghostbusters-1984", true),
            ("movie*1984", "movie1984", true),
            ("movie*1984", "movie984", false),
            ("a*a", "a", false),
            ("a*a", "aa", true),
            ("*a*b*", "xxaxxbxx", true),
            ("*a*b*", "xxbxxaxx", false),
            ("**", "", true),
            ("", "", true),
            ("", "a", false),
            ("ab", "ab", true),
            ("ab", "abc", false),
            ("a?c", "abc", false),
            ("a?c", "a?c", true),
            ("a+b$c", "a+b$c", true),
        ];
        for (p, k, expected) in cases {
            assert_eq!(Glob::new(p).unwrap().matches(k), expected, "{p:?} {k:?}");
        }
    }

    #[test]
    fn prefix_and_exactness() {
        assert_eq!(Glob::new("ab*c*").unwrap().literal_prefix(), "ab");
        assert_eq!(Glob::new("*ab").unwrap().literal_prefix(), "");
        assert_eq!(Glob::new("abc").unwrap().literal_prefix(), "abc");
        assert!(Glob::new("abc").unwrap().is_exact());
        assert!(!Glob::new("a*").unwrap().is_exact());
        assert_eq!(Glob::all(), Glob::new("*").unwrap());
    }

    #[test]
    fn overlong_patterns_are_refused() {
        let e = Glob::new(&"*".repeat(MAX_PATTERN_BYTES + 1)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the pattern is 2049 bytes long; patterns are at most 2048 bytes"
        );
        assert!(Glob::new(&"*".repeat(MAX_PATTERN_BYTES)).is_ok());
    }

    proptest! {
        #[test]
        fn agrees_with_the_model(p in "[ab*]{0,8}", k in "[abc]{0,10}") {
            let g = Glob::new(&p).unwrap();
            prop_assert_eq!(g.matches(&k), model(p.as_bytes(), k.as_bytes()), "{} {}", p, k);
        }

        #[test]
        fn every_match_starts_with_the_prefix(p in "[ab*]{0,8}", k in "[ab]{0,10}") {
            let g = Glob::new(&p).unwrap();
            if g.matches(&k) {
                prop_assert!(k.starts_with(g.literal_prefix()));
            }
        }

        #[test]
        fn a_key_matches_itself_and_star_matches_all(k in "[a-z0-9_$+-]{0,20}") {
            prop_assert!(Glob::new(&k).unwrap().matches(&k));
            prop_assert!(Glob::all().matches(&k));
        }
    }
}
