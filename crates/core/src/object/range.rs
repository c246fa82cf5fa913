//! Byte ranges (`Range: bytes=…`) and entity-tag comparisons (`If-None-Match`, `If-Range`).
//!
//! Only a single range is served, as S3 does. Following RFC 9110, a `Range` header that is
//! malformed, names another unit or lists several ranges is ignored (the whole object is
//! served); a well-formed range that misses the object is unsatisfiable (416).

use crate::{Error, Result};

/// A requested byte range, before it meets an object's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeSpec {
    /// `bytes=a-b`: bytes `a` to `b` inclusive (`b` is clamped to the last byte).
    FromTo(u64, u64),
    /// `bytes=a-`: byte `a` to the end.
    From(u64),
    /// `bytes=-n`: the last `n` bytes.
    Suffix(u64),
}

/// A byte range checked against an object's size: `start..=end`, both within the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    /// First byte, inclusive.
    pub start: u64,
    /// Last byte, inclusive.
    pub end: u64,
}

impl ByteRange {
    /// Number of bytes in the range.
    pub fn len(&self) -> u64 {
        self.end - self.start + 1
    }

    /// Always false: a range holds at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The `Content-Range` value for an object of `size` bytes: `bytes a-b/size`.
    pub fn content_range(&self, size: u64) -> String {
        format!("bytes {}-{}/{size}", self.start, self.end)
    }
}

impl RangeSpec {
    /// Parse a `Range` header value. `None` when it is to be ignored: malformed, another
    /// unit than `bytes`, or more than one range.
    ///
    /// ```
    /// use quintet_core::object::RangeSpec;
    /// assert_eq!(RangeSpec::parse("bytes=0-99"), Some(RangeSpec::FromTo(0, 99)));
    /// assert_eq!(RangeSpec::parse("bytes=100-"), Some(RangeSpec::From(100)));
    /// assert_eq!(RangeSpec::parse("bytes=-5"), Some(RangeSpec::Suffix(5)));
    /// assert_eq!(RangeSpec::parse("bytes=0-1,4-5"), None);
    /// ```
    pub fn parse(header: &str) -> Option<Self> {
        let (unit, set) = header.trim().split_once('=')?;
        if !unit.trim().eq_ignore_ascii_case("bytes") {
            return None;
        }
        let set = set.trim();
        if set.contains(',') {
            return None;
        }
        let (first, last) = set.split_once('-')?;
        let num = |s: &str| -> Option<u64> {
            let s = s.trim();
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            s.parse().ok()
        };
        match (first.trim().is_empty(), last.trim().is_empty()) {
            (true, true) => None,
            (true, false) => num(last).map(Self::Suffix),
            (false, true) => num(first).map(Self::From),
            (false, false) => {
                let (a, b) = (num(first)?, num(last)?);
                (a <= b).then_some(Self::FromTo(a, b))
            }
        }
    }

    /// The range within an object of `size` bytes, or [`Error::RangeNotSatisfiable`].
    pub fn resolve(self, size: u64) -> Result<ByteRange> {
        let unsatisfiable = |what: String| {
            Err(Error::RangeNotSatisfiable(format!(
                "the range {what} cannot be served: the object is {size} bytes long; \
                 ask for bytes 0 to {} or leave out the Range header",
                size.saturating_sub(1)
            )))
        };
        match self {
            Self::FromTo(a, b) if a < size => Ok(ByteRange {
                start: a,
                end: b.min(size - 1),
            }),
            Self::From(a) if a < size => Ok(ByteRange {
                start: a,
                end: size - 1,
            }),
            Self::Suffix(n) if n > 0 && size > 0 => Ok(ByteRange {
                start: size - n.min(size),
                end: size - 1,
            }),
            other => unsatisfiable(other.to_string()),
        }
    }
}

impl std::fmt::Display for RangeSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::FromTo(a, b) => write!(f, "bytes={a}-{b}"),
            Self::From(a) => write!(f, "bytes={a}-"),
            Self::Suffix(n) => write!(f, "bytes=-{n}"),
        }
    }
}

/// The entity tags of an `If-None-Match` or `If-Range` value: `*`, or a comma-separated
/// list of `"tag"` and `W/"tag"`. Yields `(weak, opaque tag)`; `*` yields `(false, "*")`.
fn entity_tags(header: &str) -> impl Iterator<Item = (bool, &str)> {
    header.split(',').filter_map(|t| {
        let t = t.trim();
        if t == "*" {
            return Some((false, "*"));
        }
        let (weak, t) = match t.strip_prefix("W/") {
            Some(rest) => (true, rest),
            None => (false, t),
        };
        let tag = t.strip_prefix('"')?.strip_suffix('"')?;
        Some((weak, tag))
    })
}

/// Whether an `If-None-Match` value matches an object whose entity tag is `etag` (without
/// quotes): weak comparison, `*` matches any object.
///
/// ```
/// use quintet_core::object::if_none_match;
/// assert!(if_none_match(r#""abc""#, "abc"));
/// assert!(if_none_match(r#"W/"x", "abc""#, "abc"));
/// assert!(if_none_match("*", "abc"));
/// assert!(!if_none_match(r#""abd""#, "abc"));
/// ```
pub fn if_none_match(header: &str, etag: &str) -> bool {
    entity_tags(header).any(|(_, t)| t == "*" || t == etag)
}

/// Whether an `If-Range` entity tag matches `etag` (strong comparison: a weak tag never
/// matches). `None` when the value is not an entity tag (it may be an HTTP date).
pub fn if_range_etag(header: &str, etag: &str) -> Option<bool> {
    let h = header.trim();
    if !(h.starts_with('"') || h.starts_with("W/")) {
        return None;
    }
    Some(
        entity_tags(h)
            .next()
            .is_some_and(|(weak, t)| !weak && t != "*" && t == etag),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parse_table() {
        use RangeSpec::*;
        let cases: &[(&str, Option<RangeSpec>)] = &[
            ("bytes=0-0", Some(FromTo(0, 0))),
            ("bytes=10-20", Some(FromTo(10, 20))),
            (" Bytes = 3 - 4 ", Some(FromTo(3, 4))),
            ("bytes=7-", Some(From(7))),
            ("bytes=-1", Some(Suffix(1))),
            ("bytes=-0", Some(Suffix(0))),
            ("bytes=5-4", None),
            ("bytes=-", None),
            ("bytes=", None),
            ("bytes=a-b", None),
            ("bytes=+1-2", None),
            ("bytes=1-2,3-4", None),
            ("items=1-2", None),
            ("bytes 1-2", None),
            ("bytes=99999999999999999999999-", None),
        ];
        for (h, expected) in cases {
            assert_eq!(RangeSpec::parse(h), *expected, "{h}");
        }
    }

    #[test]
    fn resolve_table() {
        use RangeSpec::*;
        let r = |s, e| Some(ByteRange { start: s, end: e });
        let cases: &[(RangeSpec, u64, Option<ByteRange>)] = &[
            (FromTo(0, 9), 10, r(0, 9)),
            (FromTo(2, 100), 10, r(2, 9)),
            (FromTo(9, 9), 10, r(9, 9)),
            (FromTo(10, 12), 10, None),
            (From(0), 10, r(0, 9)),
            (From(9), 10, r(9, 9)),
            (From(10), 10, None),
            (Suffix(3), 10, r(7, 9)),
            (Suffix(30), 10, r(0, 9)),
            (Suffix(0), 10, None),
            (From(0), 0, None),
            (Suffix(5), 0, None),
        ];
        for (spec, size, expected) in cases {
            assert_eq!(spec.resolve(*size).ok(), *expected, "{spec} of {size}");
        }
        let e = From(10).resolve(10).unwrap_err();
        assert_eq!(
            e,
            Error::RangeNotSatisfiable(
                "the range bytes=10- cannot be served: the object is 10 bytes long; ask for \
                 bytes 0 to 9 or leave out the Range header"
                    .into()
            )
        );
        assert_eq!(r(7, 9).unwrap().content_range(10), "bytes 7-9/10");
    }

    #[test]
    fn entity_tag_comparisons() {
        assert!(!if_none_match("", "a"));
        assert!(!if_none_match("abc", "abc"), "unquoted tags are malformed");
        assert_eq!(if_range_etag(r#""abc""#, "abc"), Some(true));
        assert_eq!(if_range_etag(r#"W/"abc""#, "abc"), Some(false));
        assert_eq!(if_range_etag(r#""abd""#, "abc"), Some(false));
        assert_eq!(if_range_etag("Tue, 15 Nov 1994 08:12:31 GMT", "abc"), None);
    }

    proptest! {
        #[test]
        fn resolved_ranges_lie_within_the_object(a in 0u64..50, b in 0u64..50, n in 0u64..50, size in 0u64..40) {
            for spec in [RangeSpec::FromTo(a, a + b), RangeSpec::From(a), RangeSpec::Suffix(n)] {
                if let Ok(r) = spec.resolve(size) {
                    prop_assert!(r.start <= r.end && r.end < size);
                    prop_assert_eq!(r.len(), r.end - r.start + 1);
                }
            }
        }

        #[test]
        fn display_round_trips(a in 0u64..1_000_000, b in 0u64..1_000_000) {
            for spec in [RangeSpec::FromTo(a, a + b), RangeSpec::From(a), RangeSpec::Suffix(b)] {
                prop_assert_eq!(RangeSpec::parse(&spec.to_string()), Some(spec));
            }
        }
    }
}
