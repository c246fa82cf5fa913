//! Cache values: JSON objects kept as text.

use std::{fmt, sync::Arc};

use serde_json::value::RawValue;

use crate::{Error, Result, ports::data::Document};

/// Largest value, in bytes of JSON text: 10 MiB.
pub const MAX_VALUE_BYTES: usize = 10 * 1024 * 1024;

/// A cache value: the JSON text of an object, at most [`MAX_VALUE_BYTES`] long.
///
/// The text is kept as the client sent it (key order, numbers and escapes untouched) and
/// handed back byte for byte; it is shared, so cloning is cheap.
///
/// ```
/// use quintet_core::cache::CacheValue;
/// use serde_json::value::RawValue;
/// let raw = RawValue::from_string(r#"{"title":"Ghostbusters"}"#.to_owned()).unwrap();
/// let v = CacheValue::from_raw(&raw).unwrap();
/// assert_eq!(v.as_str(), r#"{"title":"Ghostbusters"}"#);
/// let not_object = RawValue::from_string("[1,2]".to_owned()).unwrap();
/// assert!(CacheValue::from_raw(&not_object).is_err());
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct CacheValue(Arc<str>);

impl CacheValue {
    /// Check JSON text parsed by the caller: it must be an object ([`Error::Invalid`]) of at
    /// most [`MAX_VALUE_BYTES`] ([`Error::TooLarge`]).
    pub fn from_raw(raw: &RawValue) -> Result<Self> {
        let text = raw.get();
        let kind = crate::json::kind_of_text(text);
        if kind != "an object" {
            return Err(Error::invalid(format!(
                "the cache value must be a JSON object, such as {{\"name\": \"x\"}}; got {kind}"
            )));
        }
        if text.len() > MAX_VALUE_BYTES {
            return Err(Error::TooLarge(format!(
                "the cache value is {} bytes of JSON; values are at most {MAX_VALUE_BYTES} \
                 bytes (10 MiB)",
                text.len()
            )));
        }
        Ok(Self(Arc::from(text)))
    }

    /// The value of a document (always an object); [`Error::TooLarge`] beyond the limit.
    pub fn from_document(doc: &Document) -> Result<Self> {
        let text = serde_json::to_string(doc)
            .map_err(|e| Error::internal(format!("serializing a cache value: {e}")))?;
        if text.len() > MAX_VALUE_BYTES {
            return Err(Error::TooLarge(format!(
                "the cache value is {} bytes of JSON; values are at most {MAX_VALUE_BYTES} \
                 bytes (10 MiB)",
                text.len()
            )));
        }
        Ok(Self(Arc::from(text)))
    }

    /// Rebuild a value from text an adapter stored earlier from a [`CacheValue`]. Not
    /// checked again: adapters only hand back what they were given.
    pub fn from_stored(text: impl Into<Arc<str>>) -> Self {
        Self(text.into())
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The JSON text, shared.
    pub fn as_arc(&self) -> &Arc<str> {
        &self.0
    }

    /// Length of the JSON text in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the text is empty (never, for a checked value).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for CacheValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 80;
        match self.0.char_indices().nth(SHOWN) {
            Some((cut, _)) => write!(f, "CacheValue({}… {} bytes)", &self.0[..cut], self.len()),
            None => write!(f, "CacheValue({})", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    #[test]
    fn only_objects_are_values() {
        for (text, kind) in [
            ("[]", "an array"),
            ("\"x\"", "a string"),
            ("true", "a boolean"),
            ("false", "a boolean"),
            ("null", "null"),
            ("12", "a number"),
            ("-1.5", "a number"),
        ] {
            let e = CacheValue::from_raw(&raw(text)).unwrap_err();
            assert_eq!(
                e,
                Error::Invalid(format!(
                    "the cache value must be a JSON object, such as {{\"name\": \"x\"}}; got {kind}"
                ))
            );
        }
        assert_eq!(
            CacheValue::from_raw(&raw(r#"{"b":1, "a":[2]}"#))
                .unwrap()
                .as_str(),
            r#"{"b":1, "a":[2]}"#
        );
    }

    #[test]
    fn the_limit_is_ten_mebibytes_of_text() {
        let filler = |n: usize| format!(r#"{{"s":"{}"}}"#, "x".repeat(n - 8));
        let at_limit = filler(MAX_VALUE_BYTES);
        assert_eq!(at_limit.len(), MAX_VALUE_BYTES);
        assert!(CacheValue::from_raw(&raw(&at_limit)).is_ok());
        let over = filler(MAX_VALUE_BYTES + 1);
        let e = CacheValue::from_raw(&raw(&over)).unwrap_err();
        assert_eq!(
            e,
            Error::TooLarge(
                "the cache value is 10485761 bytes of JSON; values are at most 10485760 bytes \
                 (10 MiB)"
                    .into()
            )
        );
        let mut doc = Document::new();
        doc.insert("s".into(), "x".repeat(MAX_VALUE_BYTES).into());
        assert!(matches!(
            CacheValue::from_document(&doc),
            Err(Error::TooLarge(_))
        ));
    }
}
