//! How to reach PostgreSQL.

use std::{fmt, str::FromStr, time::Duration};

use quintet_core::{Error, Result};
use tokio_postgres::config::SslMode;

/// Connections a pool opens at most, unless configured.
pub const DEFAULT_POOL_SIZE: usize = 8;

/// How long opening a connection may take, unless configured: short, so that an
/// unreachable PostgreSQL is noticed in seconds (see [`crate::database`]'s breaker).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a call waits for a free connection of a busy pool.
pub const POOL_WAIT: Duration = Duration::from_secs(10);

/// Where and how to connect.
///
/// The URL is libpq's: `postgres://user:password@host:port/database?param=value`. The
/// schema everything lives in is the connection's `search_path`, set in the URL with
/// `options=-c%20search_path%3D<schema>` (default: the server's, usually `public`).
/// Connections are not encrypted: `sslmode=require` is refused (see `docs/scale-out.md`).
#[derive(Clone, PartialEq, Eq)]
pub struct PgConfig {
    /// The connection URL.
    pub url: String,
    /// Connections the pool opens at most.
    pub pool_size: usize,
    /// How long opening a connection may take (a `connect_timeout` parameter of the URL,
    /// in seconds, takes precedence).
    pub connect_timeout: Duration,
}

impl PgConfig {
    /// Settings for `url` with the default timeout, and the pool size its `pool_size`
    /// parameter gives (quintet's own; not passed to PostgreSQL), else
    /// [`DEFAULT_POOL_SIZE`]; [`Error::Invalid`] when `url` is not a PostgreSQL URL quintet
    /// can use.
    pub fn new(url: &str) -> Result<Self> {
        let (_, pool_size) = split_pool_size(url)?;
        let config = Self {
            url: url.to_owned(),
            pool_size: pool_size.unwrap_or(DEFAULT_POOL_SIZE),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        };
        config.client_config()?;
        Ok(config)
    }

    /// Whether `url` names PostgreSQL (`postgres://` or `postgresql://`).
    pub fn is_postgres_url(url: &str) -> bool {
        url.starts_with("postgres://") || url.starts_with("postgresql://")
    }

    /// The URL with its password, if any, replaced by `***`: fit for logs and messages.
    pub fn redacted_url(&self) -> String {
        quintet_core::redact::url(&self.url)
    }

    /// The client settings, checked.
    pub(crate) fn client_config(&self) -> Result<tokio_postgres::Config> {
        let shown = self.redacted_url();
        if !Self::is_postgres_url(&self.url) {
            return Err(Error::invalid(format!(
                "\"{shown}\" is not a PostgreSQL URL: write postgres://user@host:5432/database"
            )));
        }
        let (url, _) = split_pool_size(&self.url)?;
        let mut config = tokio_postgres::Config::from_str(&url)
            .map_err(|e| Error::invalid(format!("PostgreSQL URL \"{shown}\" is not valid: {e}")))?;
        if config.get_ssl_mode() == SslMode::Require {
            return Err(Error::invalid(format!(
                "PostgreSQL URL \"{shown}\" asks for sslmode=require, but quintet connects to \
                 PostgreSQL without TLS: reach it over a trusted network or a tunnel, and drop \
                 sslmode or set it to disable or prefer"
            )));
        }
        if self.pool_size == 0 {
            return Err(Error::invalid(
                "the PostgreSQL pool size must be at least 1",
            ));
        }
        if config.get_application_name().is_none() {
            config.application_name("quintet");
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(self.connect_timeout);
        }
        Ok(config)
    }
}

impl fmt::Debug for PgConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgConfig")
            .field("url", &self.redacted_url())
            .field("pool_size", &self.pool_size)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

/// Most connections a pool may be given.
const MAX_POOL_SIZE: usize = 1024;

/// `url` without its `pool_size` parameter, and that parameter's value.
fn split_pool_size(url: &str) -> Result<(String, Option<usize>)> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), None));
    };
    let mut size = None;
    let mut kept = Vec::new();
    for param in query.split('&') {
        match param.split_once('=') {
            Some(("pool_size", v)) => {
                let n = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_POOL_SIZE).contains(n));
                size = Some(n.ok_or_else(|| {
                    Error::invalid(format!(
                        "pool_size={v} in the PostgreSQL URL is not valid: use a number of \
                         connections from 1 to {MAX_POOL_SIZE}"
                    ))
                })?);
            }
            _ => kept.push(param),
        }
    }
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((url, size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_size_is_a_parameter_of_the_url() {
        let c = PgConfig::new("postgres://u@h/db?pool_size=32&options=-c%20x%3Dy").unwrap();
        assert_eq!(c.pool_size, 32);
        let client = c.client_config().unwrap();
        assert_eq!(client.get_options(), Some("-c x=y"));
        assert_eq!(
            PgConfig::new("postgres://u@h/db").unwrap().pool_size,
            DEFAULT_POOL_SIZE
        );
        for bad in ["0", "-1", "many", "100000"] {
            let err = PgConfig::new(&format!("postgres://u@h/db?pool_size={bad}")).unwrap_err();
            assert!(err.to_string().contains("pool_size"), "{err}");
        }
    }

    #[test]
    fn urls_are_checked() {
        assert!(PgConfig::new("postgres://postgres@127.0.0.1:5432/quintet").is_ok());
        assert!(
            PgConfig::new("postgres://u@h/db?options=-c%20search_path%3Dqt_1")
                .unwrap()
                .client_config()
                .unwrap()
                .get_options()
                .is_some_and(|o| o == "-c search_path=qt_1")
        );
        let msg = |url: &str| PgConfig::new(url).unwrap_err().to_string();
        assert!(msg("redis://h").contains("not a PostgreSQL URL"));
        assert!(msg("postgres://u@h/db?colour=blue").contains("is not valid"));
        assert!(msg("postgres://u:secret@h/db?sslmode=require").contains("without TLS"));
        assert!(!msg("postgres://u:secret@h/db?sslmode=require").contains("secret"));
    }
}
