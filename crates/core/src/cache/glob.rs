//! Key patterns of cache queries: `*` matches any run of characters (also none), every other
//! character matches itself.
//!
//! Unlike Redis globs there is no `?`, no `[...]` class and no escape: cache keys cannot
//! contain `*`, so nothing needs escaping, and `?`/`[` are simply characters no key holds.
//! Matching is byte-wise and case-sensitive (keys are lowercase).

use std::fmt;

use memchr::memmem::Finder;

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
#[derive(Debug, Clone)]
pub struct Glob {
    pattern: String,
    /// The literal pieces between stars; one piece when there is no star.
    pieces: Vec<String>,
    /// A prepared substring search for each piece between the first and the last (so a
    /// scan over many keys does not set up a search per key).
    middle: Vec<Finder<'static>>,
}

impl PartialEq for Glob {
    fn eq(&self, other: &Self) -> bool {
        self.pattern == other.pattern
    }
}

impl Eq for Glob {}

impl Glob {
    /// Compile `pattern`. [`Error::Invalid`] when it is longer than [`MAX_PATTERN_BYTES`].
    pub fn new(pattern: &str) -> Result<Self> {
        if pattern.len() > MAX_PATTERN_BYTES {
            return Err(Error::invalid(format!(
                "the pattern is {} bytes long; patterns are at most {MAX_PATTERN_BYTES} bytes",
                pattern.len()
            )));
        }
        let pieces: Vec<String> = pattern.split('*').map(str::to_owned).collect();
        let middle = match pieces.len() {
            0..=2 => Vec::new(),
            n => pieces[1..n - 1]
                .iter()
                .map(|p| Finder::new(p.as_bytes()).into_owned())
                .collect(),
        };
        Ok(Self {
            pattern: pattern.to_owned(),
            pieces,
            middle,
        })
    }

    /// The pattern that matches every key (`*`).
    pub fn all() -> Self {
        Self {
            pattern: "*".to_owned(),
            pieces: vec![String::new(), String::new()],
            middle: Vec::new(),
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
        self.matches_bytes(key.as_bytes())
    }

    /// Whether the key with these bytes matches the pattern (for adapters that keep keys
    /// as bytes).
    pub fn matches_bytes(&self, key: &[u8]) -> bool {
        let (first, rest) = match self.pieces.split_first() {
            Some(split) => split,
            None => return key.is_empty(),
        };
        let Some(last) = rest.last() else {
            return same(key, first.as_bytes());
        };
        let (first, last) = (first.as_bytes(), last.as_bytes());
        if key.len() < first.len() + last.len()
            || !same(&key[..first.len()], first)
            || !same(&key[key.len() - last.len()..], last)
        {
            return false;
        }
        // Each middle piece at its leftmost place after the previous one: taking the
        // leftmost occurrence never loses a match, because stars absorb whatever lies
        // between pieces.
        let mut hay = &key[first.len()..key.len() - last.len()];
        for finder in &self.middle {
            match find(finder, hay) {
                Some(at) => hay = &hay[at + finder.needle().len()..],
                None => return false,
            }
        }
        true
    }
}

/// Where `finder`'s needle first occurs in `hay`. Keys are short, and for a short haystack a
/// plain loop beats setting up a vectorised search; long ones get the linear-time search.
fn find(finder: &Finder<'_>, hay: &[u8]) -> Option<usize> {
    const SHORT: usize = 64;
    let needle = finder.needle();
    if hay.len() >= SHORT {
        return finder.find(hay);
    }
    let Some((&first, rest)) = needle.split_first() else {
        return Some(0);
    };
    let last_start = hay.len().checked_sub(needle.len())?;
    (0..=last_start).find(|&i| hay[i] == first && same(&hay[i + 1..i + needle.len()], rest))
}

/// Whether two short byte strings are equal. Keys and pattern pieces are short and often
/// empty: a loop here beats a call into libc's `memcmp`, which `==` on slices makes and
/// which dominated scans of many keys.
#[inline]
pub fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
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

    /// The reference model: the textbook dynamic programme over pattern and key prefixes
    /// (`m[i][j]`: the first `i` pattern bytes match the first `j` key bytes).
    fn model(p: &[u8], k: &[u8]) -> bool {
        let mut m = vec![vec![false; k.len() + 1]; p.len() + 1];
        m[0][0] = true;
        for i in 1..=p.len() {
            for j in 0..=k.len() {
                m[i][j] = if p[i - 1] == b'*' {
                    m[i - 1][j] || (j > 0 && m[i][j - 1])
                } else {
                    j > 0 && m[i - 1][j - 1] && p[i - 1] == k[j - 1]
                };
            }
        }
        m[p.len()][k.len()]
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
        fn long_keys_take_the_same_answers(p in "[ab*]{0,8}", k in "[abc]{60,90}") {
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
