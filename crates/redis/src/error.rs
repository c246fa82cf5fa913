//! Redis' errors as [`quintet_core::Error`]s: the one place they are mapped.
//!
//! | Redis | `core::Error` |
//! |---|---|
//! | I/O: refused, reset, timed out, dropped connection | [`Error::Unavailable`]: retrying may succeed |
//! | `LOADING`, `READONLY`, `MASTERDOWN`, `TRYAGAIN`, `CLUSTERDOWN`, `BUSY` (a long script) | [`Error::Unavailable`] |
//! | `OOM` (`maxmemory` reached under `noeviction`) | [`Error::Unavailable`], saying so |
//! | authentication failed, `NOAUTH`, `WRONGPASS`, `NOPERM` | [`Error::Unavailable`] with what to fix |
//! | anything else (`WRONGTYPE` on a key someone else wrote, a script error…) | [`Error::Internal`] (detail logged, never shown) |
//!
//! Detail goes to the log here, so the messages callers see stay free of engine text.

use quintet_core::Error;
use redis::{ErrorKind, RedisError, ServerErrorKind};

/// What Redis' failure means for the caller.
pub fn redis_error(e: RedisError) -> Error {
    let code = e.code().unwrap_or_default();
    if e.kind() == ErrorKind::AuthenticationFailed
        || matches!(code, "NOAUTH" | "WRONGPASS" | "NOPERM")
    {
        tracing::error!(error = %e, "Redis refused the connection or the command");
        return Error::Unavailable(
            "Redis refused the connection: check the user and password of the Redis URL and \
             that its ACL allows GET, SET, GETRANGE, SETRANGE, MGET, SCAN, UNLINK, SADD, \
             SREM, SMEMBERS, EVALSHA, SCRIPT and PING"
                .into(),
        );
    }
    if code == "OOM" {
        tracing::error!(error = %e, "Redis is out of memory");
        return Error::Unavailable(
            "Redis is out of memory (maxmemory) and refuses writes; free memory or choose an \
             eviction policy"
                .into(),
        );
    }
    let transient = e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::ReadOnly
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
            )
        )
        || code == "BUSY";
    if transient {
        tracing::warn!(error = %e, "Redis unavailable");
        return Error::Unavailable("Redis is unreachable or busy; retry shortly".into());
    }
    Error::internal(format!("Redis: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_failures_are_unavailable_and_the_rest_internal() {
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(matches!(redis_error(refused), Error::Unavailable(_)));
        let timeout = RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert!(matches!(redis_error(timeout), Error::Unavailable(_)));
        let other = RedisError::from((ErrorKind::UnexpectedReturnType, "odd"));
        assert!(matches!(redis_error(other), Error::Internal(_)));
        let auth = RedisError::from((ErrorKind::AuthenticationFailed, "no"));
        assert!(matches!(redis_error(auth), Error::Unavailable(m) if m.contains("password")),);
    }
}
