//! Objects of the storage service: the pure rules every storage adapter and the HTTP layer
//! share.
//!
//! - [`ObjectPath`]: the validated path of an object (no escape from its instance).
//! - [`RangeSpec`] / [`ByteRange`]: `Range: bytes=…` parsing and resolution;
//!   [`if_none_match`], [`if_range_etag`]: entity-tag comparisons.
//! - [`presign`]: the signed URLs quintet serves itself.
//! - Content types ([`content_type`]), entity tags ([`EtagHasher`]) and listing limits.

pub mod path;
pub mod presign;
pub mod range;

use sha2::{Digest, Sha256};

pub use path::{MAX_OBJECT_PATH_LEN, ObjectPath, form_object_path};
pub use presign::{PresignMethod, UrlSigner};
pub use range::{ByteRange, RangeSpec, if_none_match, if_range_etag};

use crate::{Error, Result};

/// The content type of an object when the upload gives none and the extension says nothing.
pub const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";
/// Longest content type kept, in bytes.
pub const MAX_CONTENT_TYPE_LEN: usize = 256;
/// Objects a listing answers when the request sets no `limit`, and the most it may set.
pub const MAX_LIST_LIMIT: usize = 1000;

/// The content type to store for an upload of `path`: `given` (the request's or the form
/// part's) when present, else a guess from the path's extension, else
/// [`DEFAULT_CONTENT_TYPE`]. A given type that is not printable ASCII or is longer than
/// [`MAX_CONTENT_TYPE_LEN`] is refused.
///
/// ```
/// use quintet_core::object::{ObjectPath, content_type};
/// let p: ObjectPath = "img/cat.png".parse().unwrap();
/// assert_eq!(content_type(None, &p).unwrap(), "image/png");
/// assert_eq!(content_type(Some("text/x-cat"), &p).unwrap(), "text/x-cat");
/// let p: ObjectPath = "README".parse().unwrap();
/// assert_eq!(content_type(Some("  "), &p).unwrap(), "application/octet-stream");
/// ```
pub fn content_type(given: Option<&str>, path: &ObjectPath) -> Result<String> {
    match given.map(str::trim).filter(|g| !g.is_empty()) {
        Some(g) => {
            if g.len() > MAX_CONTENT_TYPE_LEN
                || !g.bytes().all(|b| b == b' ' || b.is_ascii_graphic())
            {
                return Err(Error::invalid(format!(
                    "content type {} is not valid: use a media type such as image/png, at most \
                     {MAX_CONTENT_TYPE_LEN} printable ASCII characters",
                    path::quote(g)
                )));
            }
            Ok(g.to_owned())
        }
        None => Ok(mime_guess::from_path(path.file_name())
            .first_raw()
            .unwrap_or(DEFAULT_CONTENT_TYPE)
            .to_owned()),
    }
}

/// The `limit` query value of a listing: default and maximum [`MAX_LIST_LIMIT`].
pub fn parse_list_limit(value: Option<&str>) -> Result<usize> {
    let Some(value) = value else {
        return Ok(MAX_LIST_LIMIT);
    };
    match value.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_LIST_LIMIT).contains(&n) => Ok(n),
        _ => Err(Error::invalid(format!(
            "limit {} is not valid: list from 1 to {MAX_LIST_LIMIT} objects per request, and \
             pass the last path as after= for the next page",
            path::quote(value)
        ))),
    }
}

/// The `prefix` or `after` query value of a listing: any text up to
/// [`MAX_OBJECT_PATH_LEN`] bytes without control characters.
pub fn parse_list_bound(name: &str, value: &str) -> Result<()> {
    if value.len() > MAX_OBJECT_PATH_LEN || value.chars().any(char::is_control) {
        return Err(Error::invalid(format!(
            "{name} {} is not valid: use at most {MAX_OBJECT_PATH_LEN} bytes without control \
             characters",
            path::quote(value)
        )));
    }
    Ok(())
}

/// Computes an object's entity tag while its bytes stream past: the lowercase hex SHA-256
/// of the content (a strong validator).
#[derive(Debug, Clone, Default)]
pub struct EtagHasher(Sha256);

impl EtagHasher {
    /// A hasher that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add the next bytes of the content.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The entity tag, without quotes.
    pub fn finish(self) -> String {
        crate::hmac::to_hex(&self.0.finalize())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types() {
        let p = |s: &str| s.parse::<ObjectPath>().unwrap();
        assert_eq!(
            content_type(None, &p("a/b.json")).unwrap(),
            "application/json"
        );
        assert_eq!(content_type(None, &p("a.HTML")).unwrap(), "text/html");
        assert_eq!(
            content_type(None, &p("a.tar.gz")).unwrap(),
            "application/gzip"
        );
        assert_eq!(
            content_type(None, &p("x.unknownext")).unwrap(),
            DEFAULT_CONTENT_TYPE
        );
        assert_eq!(
            content_type(None, &p("dir.png/file")).unwrap(),
            DEFAULT_CONTENT_TYPE
        );
        assert_eq!(
            content_type(Some("text/plain; charset=utf-8"), &p("a.png")).unwrap(),
            "text/plain; charset=utf-8"
        );
        assert!(content_type(Some("tëxt/plain"), &p("a")).is_err());
        assert!(content_type(Some(&"a".repeat(300)), &p("a")).is_err());
    }

    #[test]
    fn list_limits() {
        assert_eq!(parse_list_limit(None).unwrap(), 1000);
        assert_eq!(parse_list_limit(Some("5")).unwrap(), 5);
        for bad in ["0", "1001", "x", "-1", ""] {
            assert!(parse_list_limit(Some(bad)).is_err(), "{bad}");
        }
        assert!(parse_list_bound("prefix", "a/b/").is_ok());
        assert!(parse_list_bound("prefix", "a\u{1}").is_err());
    }

    #[test]
    fn etag_is_the_sha256_of_the_content() {
        let mut h = EtagHasher::new();
        h.update(b"ab");
        h.update(b"c");
        assert_eq!(
            h.finish(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
