//! How to reach Redis, and where in it quintet keeps its keys.

use std::{fmt, time::Duration};

use quintet_core::{Error, Result};

/// How long each command may take unless configured.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long opening a connection may take unless configured: short, so that an
/// unreachable Redis is noticed in seconds (see the cache's breaker).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Key prefix used unless configured.
pub const DEFAULT_PREFIX: &str = "quintet:";

/// Where and how to connect.
///
/// The URL is redis-rs': `redis://[user:password@]host:port[/db]` (TLS, `rediss://`, is
/// not compiled in). Every key quintet writes starts with `prefix`, so one Redis database
/// can hold several deployments, and the tests' throwaway namespaces.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// The connection URL.
    pub url: String,
    /// The text every key starts with (see [`crate::keys`]).
    pub prefix: String,
    /// How long each command may take before the request answers 503.
    pub timeout: Duration,
    /// How long opening a connection may take; a Redis that does not answer in time counts
    /// as down.
    pub connect_timeout: Duration,
}

impl RedisConfig {
    /// Settings for `url` with the default prefix and timeout; [`Error::Invalid`] when
    /// `url` is not a Redis URL quintet can use.
    pub fn new(url: &str) -> Result<Self> {
        let config = Self {
            url: url.to_owned(),
            prefix: DEFAULT_PREFIX.to_owned(),
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        };
        config.client()?;
        Ok(config)
    }

    /// The same settings with every key under `prefix`.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Whether `url` names Redis (`redis://`).
    pub fn is_redis_url(url: &str) -> bool {
        url.starts_with("redis://")
    }

    /// The URL with its password, if any, replaced by `***`: fit for logs and messages.
    pub fn redacted_url(&self) -> String {
        quintet_core::redact::url(&self.url)
    }

    /// A client for the URL, checked (it does not connect yet).
    pub(crate) fn client(&self) -> Result<redis::Client> {
        let shown = self.redacted_url();
        if !Self::is_redis_url(&self.url) {
            return Err(Error::invalid(format!(
                "\"{shown}\" is not a Redis URL: write redis://host:6379/0 (rediss:// and \
                 unix sockets are not supported)"
            )));
        }
        redis::Client::open(self.url.as_str()).map_err(|e| {
            Error::invalid(format!(
                "\"{shown}\" is not a valid Redis URL ({}): write \
                 redis://[user:password@]host:6379/0",
                e.category()
            ))
        })
    }
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &self.redacted_url())
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_and_passwords_hidden() {
        let c = RedisConfig::new("redis://127.0.0.1:6379/2").unwrap();
        assert_eq!(c.prefix, DEFAULT_PREFIX);
        assert_eq!(c.with_prefix("x:").prefix, "x:");
        let e = RedisConfig::new("memcached://h:1").unwrap_err();
        assert!(e.to_string().contains("not a Redis URL"), "{e}");
        let e = RedisConfig::new("redis://u:pw@h:notaport/0").unwrap_err();
        assert!(matches!(e, Error::Invalid(_)), "{e:?}");
        assert!(!e.to_string().contains("pw"), "{e}");
        let c = RedisConfig::new("redis://u:pw@h:6379/0").unwrap();
        assert_eq!(c.redacted_url(), "redis://u:***@h:6379/0");
        assert!(!format!("{c:?}").contains("pw"));
    }
}
