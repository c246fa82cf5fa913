//! The one error type every port returns.
//!
//! Variants are grouped by what the caller does next, not by where the failure happened:
//! the HTTP layer maps each variant to exactly one status code, and adapters map their
//! engine's errors onto these variants in one place each.

use std::fmt;

/// A `Result` whose error is quintet's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every failure a port or the pure logic can report.
///
/// The `String` carried by user-facing variants is a complete sentence a person can act on:
/// it names the offending input and, where useful, the fix. [`Error::Internal`] carries
/// detail for the log only; the HTTP layer never shows it to clients.
///
/// Deliberately exhaustive (not `#[non_exhaustive]`): every crate that consumes it lives in
/// this workspace, and the HTTP status table must fail to compile when a variant is added.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The request could not be parsed at all (for example malformed JSON).
    #[error("{0}")]
    BadRequest(String),
    /// The request was understood but a value in it breaks a rule.
    #[error("{0}")]
    Invalid(String),
    /// The addressed instance, document, key, job or object does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The thing being created already exists.
    #[error("{0}")]
    Conflict(String),
    /// No credentials, or credentials that are not valid.
    #[error("{0}")]
    Unauthenticated(String),
    /// Valid credentials that do not grant this operation.
    #[error("{0}")]
    Forbidden(String),
    /// A body or value is larger than the configured limit.
    #[error("{0}")]
    TooLarge(String),
    /// A position the server no longer keeps (a change feed's `since` older than its
    /// retention): the client starts over.
    #[error("{0}")]
    Gone(String),
    /// A byte range that the object cannot satisfy.
    #[error("{0}")]
    RangeNotSatisfiable(String),
    /// A body sent with a content type this call does not take (for JSON calls, anything
    /// but `application/json`).
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// Too many requests or attempts; the number is how many seconds to wait before
    /// trying again.
    #[error("{0}")]
    RateLimited(String, u64),
    /// A backing engine is temporarily unreachable; retrying may succeed.
    #[error("{0}")]
    Unavailable(String),
    /// The disk the data lives on is full: the write is refused (deletes still work), and
    /// retrying succeeds once space is freed.
    #[error("{0}")]
    InsufficientStorage(String),
    /// A fault of the server itself. The detail is logged, never sent to clients.
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    /// Build [`Error::Invalid`] from anything printable.
    pub fn invalid(msg: impl fmt::Display) -> Self {
        Self::Invalid(msg.to_string())
    }

    /// Build [`Error::NotFound`] from anything printable.
    pub fn not_found(msg: impl fmt::Display) -> Self {
        Self::NotFound(msg.to_string())
    }

    /// Build [`Error::Conflict`] from anything printable.
    pub fn conflict(msg: impl fmt::Display) -> Self {
        Self::Conflict(msg.to_string())
    }

    /// Build [`Error::Internal`] from anything printable (typically an engine error).
    pub fn internal(detail: impl fmt::Display) -> Self {
        Self::Internal(detail.to_string())
    }

    /// The error's kind as a short stable word, used in logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::BadRequest(_) => "bad_request",
            Self::Invalid(_) => "invalid",
            Self::NotFound(_) => "not_found",
            Self::Conflict(_) => "conflict",
            Self::Unauthenticated(_) => "unauthenticated",
            Self::Forbidden(_) => "forbidden",
            Self::TooLarge(_) => "too_large",
            Self::Gone(_) => "gone",
            Self::RangeNotSatisfiable(_) => "range_not_satisfiable",
            Self::UnsupportedMediaType(_) => "unsupported_media_type",
            Self::RateLimited(..) => "rate_limited",
            Self::Unavailable(_) => "unavailable",
            Self::InsufficientStorage(_) => "insufficient_storage",
            Self::Internal(_) => "internal",
        }
    }

    /// The message meant for the client. Internal errors get a fixed sentence so that no
    /// engine detail leaks.
    pub fn public_message(&self) -> String {
        match self {
            Self::Internal(_) => {
                "the server failed to handle this request; the error was logged".to_owned()
            }
            Self::BadRequest(m)
            | Self::Invalid(m)
            | Self::NotFound(m)
            | Self::Conflict(m)
            | Self::Unauthenticated(m)
            | Self::Forbidden(m)
            | Self::TooLarge(m)
            | Self::Gone(m)
            | Self::RangeNotSatisfiable(m)
            | Self::UnsupportedMediaType(m)
            | Self::RateLimited(m, _)
            | Self::Unavailable(m)
            | Self::InsufficientStorage(m) => m.clone(),
        }
    }
}

impl Error {
    /// An I/O failure while `doing` something: [`Error::InsufficientStorage`] when the disk
    /// is full, else [`Error::Internal`] with the context.
    pub fn io(doing: impl fmt::Display, e: &std::io::Error) -> Self {
        if io_is_disk_full(e) {
            return Self::InsufficientStorage(DISK_FULL.to_owned());
        }
        Self::Internal(format!("{doing}: {e}"))
    }

    /// Whether this says the disk is full ([`Error::InsufficientStorage`]).
    pub fn is_disk_full(&self) -> bool {
        matches!(self, Self::InsufficientStorage(_))
    }
}

/// The message of [`Error::InsufficientStorage`] when a write found no room on the disk.
pub const DISK_FULL: &str = "the server's disk is full: the write was refused; deletes still \
                             work, and writes succeed again once space is freed";

/// Whether `e` is the operating system saying there is no room: no space left on the
/// device (`ENOSPC`) or a quota exceeded (`EDQUOT`).
pub fn io_is_disk_full(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        if io_is_disk_full(&e) {
            return Self::InsufficientStorage(DISK_FULL.to_owned());
        }
        Self::Internal(format!("i/o: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_is_insufficient_storage_and_other_io_errors_internal() {
        let full = Error::from(std::io::Error::from(std::io::ErrorKind::StorageFull));
        assert!(full.is_disk_full(), "{full:?}");
        assert_eq!(full.public_message(), DISK_FULL);
        let quota = Error::from(std::io::Error::from_raw_os_error(122)); // EDQUOT on Linux
        assert!(quota.is_disk_full(), "{quota:?}");
        let other = Error::from(std::io::Error::from(std::io::ErrorKind::PermissionDenied));
        assert!(matches!(other, Error::Internal(_)), "{other:?}");
    }
}
