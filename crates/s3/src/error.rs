//! The S3 store's errors as [`quintet_core::Error`]s: the one place they are mapped.
//!
//! | `object_store` | `core::Error` |
//! |---|---|
//! | `NotFound` | handled by each caller (`None`, or [`Error::NotFound`] for `delete`) |
//! | `Unauthenticated`, `PermissionDenied` | [`Error::Unavailable`]: check the credentials |
//! | `Generic` (connection failures, timeouts, 5xx after retries) | [`Error::Unavailable`]: retrying may succeed |
//! | anything else | [`Error::Internal`] (detail logged, never shown) |
//!
//! Detail goes to the log here, with the operation, so the messages callers see stay free
//! of engine text.

use quintet_core::Error;

/// What the S3 store's failure in `op` means for the caller.
pub fn s3_error(op: &'static str, e: object_store::Error) -> Error {
    tracing::error!(op, error = %e, "S3 request failed");
    match e {
        object_store::Error::Unauthenticated { .. }
        | object_store::Error::PermissionDenied { .. } => Error::Unavailable(
            "the S3 store refused quintet's credentials: check access_key_id and \
                 secret_access_key of the storage URL"
                .into(),
        ),
        object_store::Error::Generic { .. } => {
            Error::Unavailable("the S3 store is unreachable or failing; retry shortly".into())
        }
        other => Error::internal(format!("S3 {op}: {other}")),
    }
}
