//! PostgreSQL's errors as [`quintet_core::Error`]s: the one place they are mapped.
//!
//! | PostgreSQL | `core::Error` |
//! |---|---|
//! | `23505` unique violation | [`Error::Conflict`] (callers name what exists: [`violation_as`], [`unique_as`]) |
//! | `23503` foreign key violation | [`Error::NotFound`] (callers name what is missing: [`violation_as`]) |
//! | class `08` connection exception, `57P01`–`57P03` shutdown or start-up, `53300` too many connections, `40001` serialization failure, `40P01` deadlock; a broken or timed-out connection; a pool with no free connection in time | [`Error::Unavailable`]: retrying may succeed |
//! | class `28` invalid authorization, `3D000` unknown database | [`Error::Unavailable`] with what to fix |
//! | anything else | [`Error::Internal`] (detail logged, never shown) |
//!
//! Detail of unavailable and internal errors goes to the log here, with the operation, so
//! the messages callers see stay free of engine text.

use quintet_core::Error;
use tokio_postgres::error::SqlState;

/// What PostgreSQL's failure means for the caller.
pub fn pg_error(e: tokio_postgres::Error) -> Error {
    if let Some(code) = e.code() {
        if *code == SqlState::UNIQUE_VIOLATION {
            return Error::conflict("the record already exists");
        }
        if *code == SqlState::FOREIGN_KEY_VIOLATION {
            return Error::not_found("a record it refers to does not exist");
        }
        let class = &code.code()[..2];
        if class == "28" || *code == SqlState::INVALID_CATALOG_NAME {
            tracing::error!(error = %detail(&e), "PostgreSQL refused the connection");
            return Error::Unavailable(
                "PostgreSQL refused the connection: check the user, password and database \
                 of the PostgreSQL URL"
                    .into(),
            );
        }
        let transient = class == "08"
            || [
                SqlState::ADMIN_SHUTDOWN,
                SqlState::CRASH_SHUTDOWN,
                SqlState::CANNOT_CONNECT_NOW,
                SqlState::TOO_MANY_CONNECTIONS,
                SqlState::T_R_SERIALIZATION_FAILURE,
                SqlState::T_R_DEADLOCK_DETECTED,
            ]
            .contains(code);
        if transient {
            return unavailable(&e);
        }
        return Error::internal(format!("PostgreSQL: {}", detail(&e)));
    }
    let io = std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>());
    if e.is_closed() || io || e.to_string() == "timeout waiting for server" {
        return unavailable(&e);
    }
    Error::internal(format!("PostgreSQL: {}", detail(&e)))
}

/// [`pg_error`], except that a unique violation becomes `unique()` and a foreign key
/// violation `missing()`: the errors the caller expects, in its own words.
pub fn violation_as(
    e: tokio_postgres::Error,
    unique: impl FnOnce() -> Error,
    missing: impl FnOnce() -> Error,
) -> Error {
    match e.code() {
        Some(code) if *code == SqlState::UNIQUE_VIOLATION => unique(),
        Some(code) if *code == SqlState::FOREIGN_KEY_VIOLATION => missing(),
        _ => pg_error(e),
    }
}

/// [`pg_error`], with a unique violation reported as `Conflict(msg())`.
pub fn unique_as(e: tokio_postgres::Error, msg: impl FnOnce() -> String) -> Error {
    violation_as(
        e,
        || Error::Conflict(msg()),
        || Error::not_found("a record it refers to does not exist"),
    )
}

/// A pool that could not hand out a connection.
pub fn pool_error(e: deadpool_postgres::PoolError) -> Error {
    use deadpool_postgres::PoolError;
    match e {
        PoolError::Backend(e) => pg_error(e),
        PoolError::Timeout(deadpool_postgres::TimeoutType::Wait) => {
            tracing::warn!("no free PostgreSQL connection in time");
            Error::Unavailable(
                "PostgreSQL did not provide a connection in time (all are busy); retry shortly"
                    .into(),
            )
        }
        PoolError::Timeout(kind) => {
            tracing::warn!(?kind, "no PostgreSQL connection within the connect timeout");
            Error::Unavailable(
                "PostgreSQL is unreachable: no connection within the connect timeout; retry \
                 shortly"
                    .into(),
            )
        }
        PoolError::Closed => Error::Unavailable("the PostgreSQL pool is closed".into()),
        PoolError::NoRuntimeSpecified | PoolError::PostCreateHook(_) => {
            Error::internal(format!("PostgreSQL pool: {e}"))
        }
    }
}

fn unavailable(e: &tokio_postgres::Error) -> Error {
    tracing::warn!(error = %detail(e), "PostgreSQL unavailable");
    Error::Unavailable("PostgreSQL is unreachable or busy; retry shortly".into())
}

/// The error with its cause, for logs and start-up messages.
pub fn detail(e: &tokio_postgres::Error) -> String {
    match std::error::Error::source(e) {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}
