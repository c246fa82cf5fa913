//! Keys as the index stores them: short keys inline, so walking a sorted map of keys reads
//! the map's own memory instead of following a pointer per key.

use std::{borrow::Borrow, cmp::Ordering, fmt, hash::Hash, sync::Arc};

/// Longest key kept inline.
const INLINE: usize = 22;

/// A cache key in the index; ordered, compared and borrowed as its bytes.
#[derive(Clone)]
pub(crate) enum IndexKey {
    /// Up to [`INLINE`] bytes, in place.
    Inline {
        /// Bytes used.
        len: u8,
        /// The key, zero-padded.
        bytes: [u8; INLINE],
    },
    /// A longer key, shared.
    Shared(Arc<str>),
}

impl IndexKey {
    /// The key `s` (a checked cache key: ASCII).
    pub(crate) fn new(s: &str) -> Self {
        if s.len() <= INLINE {
            let mut bytes = [0; INLINE];
            bytes[..s.len()].copy_from_slice(s.as_bytes());
            Self::Inline {
                len: s.len() as u8,
                bytes,
            }
        } else {
            Self::Shared(Arc::from(s))
        }
    }

    /// The key's bytes.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Self::Shared(s) => s.as_bytes(),
        }
    }

    /// The key as text. Keys are built from `&str`, so this never fails; an empty string
    /// would be answered if it somehow did.
    pub(crate) fn as_str(&self) -> &str {
        std::str::from_utf8(self.as_bytes()).unwrap_or_default()
    }
}

impl PartialEq for IndexKey {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for IndexKey {}

impl PartialOrd for IndexKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for IndexKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl Hash for IndexKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl Borrow<[u8]> for IndexKey {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl fmt::Debug for IndexKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn short_keys_are_inline_and_long_ones_shared() {
        assert!(matches!(
            IndexKey::new(&"a".repeat(22)),
            IndexKey::Inline { .. }
        ));
        assert!(matches!(
            IndexKey::new(&"a".repeat(23)),
            IndexKey::Shared(_)
        ));
        assert_eq!(IndexKey::new("").as_str(), "");
    }

    proptest! {
        /// Order and equality are the strings' byte order, across both representations.
        #[test]
        fn orders_like_the_strings(a in "[a-z0-9_$+-]{0,30}", b in "[a-z0-9_$+-]{0,30}") {
            let (ka, kb) = (IndexKey::new(&a), IndexKey::new(&b));
            prop_assert_eq!(ka.cmp(&kb), a.as_bytes().cmp(b.as_bytes()));
            prop_assert_eq!(ka == kb, a == b);
            prop_assert_eq!(ka.as_str(), a.as_str());
        }
    }
}
