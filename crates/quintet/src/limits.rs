//! The settings that bound what clients, the disk and the engines can cost a node: request
//! bodies that stall, connections in all and per client, the disk space kept for
//! deletes, and how long reaching an engine may take. Flags, `QUINTET_*` variables and TOML
//! keys like every other setting (see [`crate::cli`]); documented in `docs/operations.md`.

use std::time::Duration;

use anyhow::bail;
use quintet_server::config::{ConnectionSettings, DEFAULT_MAX_CONNECTIONS_PER_CLIENT};
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Default time to open a connection to PostgreSQL, Redis or S3.
pub const DEFAULT_ENGINE_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Longest `--body-timeout` and `--engine-connect-timeout` accepted: a day.
const MAX_TIMEOUT: Duration = Duration::from_secs(86_400);

/// The limits' settings as given (fields of [`crate::cli::ServeArgs`], so flags,
/// environment variables and TOML keys), before defaults and checks.
#[derive(Debug, Default, Clone)]
pub struct LimitArgs {
    /// `--body-timeout`, seconds.
    pub body_timeout: Option<u64>,
    /// `--body-min-rate`, bytes per second.
    pub body_min_rate: Option<u64>,
    /// `--max-connections`.
    pub max_connections: Option<usize>,
    /// `--max-connections-per-client`; 0 for no bound.
    pub max_connections_per_client: Option<usize>,
    /// `--disk-reserve`, bytes.
    pub disk_reserve: Option<u64>,
    /// `--engine-connect-timeout`, milliseconds.
    pub engine_connect_timeout: Option<u64>,
}

/// The limits, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Connections and request bodies.
    pub connections: ConnectionSettings,
    /// Disk space kept for deletes; `None`: the default share of the file system.
    pub disk_reserve: Option<u64>,
    /// Time to open a connection to an engine.
    pub engine_connect_timeout: Duration,
}

impl LimitArgs {
    /// The settings over the defaults; `fd_limit` is the process' open-file limit, which
    /// the default connection bound derives from.
    pub(crate) fn resolve(self, fd_limit: u64) -> anyhow::Result<Limits> {
        let body_timeout = Duration::from_secs(
            self.body_timeout
                .unwrap_or(quintet_server::config::DEFAULT_BODY_TIMEOUT.as_secs()),
        );
        if body_timeout.is_zero() || body_timeout > MAX_TIMEOUT {
            bail!(
                "body-timeout must be 1 to {} seconds",
                MAX_TIMEOUT.as_secs()
            );
        }
        let max_connections = match self.max_connections {
            Some(0) => bail!(
                "max-connections must be at least 1 (leave it unset for half the open-file limit)"
            ),
            Some(n) => n,
            None => default_max_connections(fd_limit),
        };
        let max_connections_per_client = self
            .max_connections_per_client
            .unwrap_or_else(|| (max_connections / 4).clamp(1, DEFAULT_MAX_CONNECTIONS_PER_CLIENT));
        let engine_connect_timeout = self
            .engine_connect_timeout
            .map_or(DEFAULT_ENGINE_CONNECT_TIMEOUT, Duration::from_millis);
        if engine_connect_timeout.is_zero() || engine_connect_timeout > MAX_TIMEOUT {
            bail!(
                "engine-connect-timeout must be 1 to {} milliseconds",
                MAX_TIMEOUT.as_millis()
            );
        }
        Ok(Limits {
            connections: ConnectionSettings {
                body_timeout,
                body_min_rate: self
                    .body_min_rate
                    .unwrap_or(quintet_server::config::DEFAULT_BODY_MIN_RATE),
                max_connections,
                max_connections_per_client,
            },
            disk_reserve: self.disk_reserve,
            engine_connect_timeout,
        })
    }
}

/// Half the open-file limit: the other half is left for the stores' files (SQLite
/// databases and their readers, search segments, uploads in progress) and engine
/// connections.
fn default_max_connections(fd_limit: u64) -> usize {
    usize::try_from(fd_limit / 2).unwrap_or(usize::MAX).max(1)
}

/// The process' open-file limit (its soft limit).
pub fn fd_limit() -> u64 {
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// Raise the open-file soft limit to the hard limit, as far as the kernel allows (many
/// systems start processes at 1024 with a far higher hard limit); returns the limit in
/// force afterwards.
pub fn raise_fd_limit() -> u64 {
    let Rlimit { current, maximum } = getrlimit(Resource::Nofile);
    if current.is_some() && current != maximum {
        // Linux refuses more than fs.nr_open even when the hard limit is unlimited.
        let wanted = maximum.unwrap_or(1 << 20);
        let raised = Rlimit {
            current: Some(wanted),
            maximum,
        };
        if let Err(e) = setrlimit(Resource::Nofile, raised) {
            tracing::debug!(error = %e, "cannot raise the open-file limit");
        }
    }
    fd_limit()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::ServeArgs;

    #[test]
    fn defaults_derive_from_the_open_file_limit() {
        let l = LimitArgs::default().resolve(1024).unwrap();
        assert_eq!(l.connections.body_timeout, Duration::from_secs(30));
        assert_eq!(l.connections.body_min_rate, 1024);
        assert_eq!(l.connections.max_connections, 512);
        assert_eq!(l.connections.max_connections_per_client, 128);
        assert_eq!(l.disk_reserve, None);
        assert_eq!(l.engine_connect_timeout, Duration::from_secs(2));
        let l = LimitArgs::default().resolve(1 << 20).unwrap();
        assert_eq!(l.connections.max_connections, 1 << 19);
        assert_eq!(l.connections.max_connections_per_client, 256);
    }

    #[test]
    fn flags_beat_the_file_and_zero_per_client_means_no_bound() {
        let flags = ServeArgs {
            body_timeout: Some(5),
            max_connections_per_client: Some(0),
            ..ServeArgs::default()
        };
        let file = ServeArgs {
            body_timeout: Some(60),
            body_min_rate: Some(0),
            max_connections: Some(100),
            disk_reserve: Some(1 << 20),
            engine_connect_timeout: Some(250),
            ..ServeArgs::default()
        };
        let l = flags.over(file).unwrap().limits().resolve(1024).unwrap();
        assert_eq!(l.connections.body_timeout, Duration::from_secs(5));
        assert_eq!(l.connections.body_min_rate, 0);
        assert_eq!(l.connections.max_connections, 100);
        assert_eq!(l.connections.max_connections_per_client, 0);
        assert_eq!(l.disk_reserve, Some(1 << 20));
        assert_eq!(l.engine_connect_timeout, Duration::from_millis(250));
    }

    #[test]
    fn the_toml_file_has_a_key_per_setting() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(
            &mut file,
            b"body_timeout = 7\nbody_min_rate = 10\nmax_connections = 40\n\
              max_connections_per_client = 4\ndisk_reserve = 1024\n\
              engine_connect_timeout = 900\n",
        )
        .unwrap();
        let file = crate::cli::read_file(file.path()).unwrap();
        let l = file.limits().resolve(1024).unwrap();
        assert_eq!(l.connections.body_timeout, Duration::from_secs(7));
        assert_eq!(l.connections.body_min_rate, 10);
        assert_eq!(l.connections.max_connections, 40);
        assert_eq!(l.connections.max_connections_per_client, 4);
        assert_eq!(l.disk_reserve, Some(1024));
        assert_eq!(l.engine_connect_timeout, Duration::from_millis(900));
    }

    #[test]
    fn out_of_range_values_are_refused() {
        for (args, what) in [
            (
                LimitArgs {
                    body_timeout: Some(0),
                    ..LimitArgs::default()
                },
                "body-timeout",
            ),
            (
                LimitArgs {
                    max_connections: Some(0),
                    ..LimitArgs::default()
                },
                "max-connections",
            ),
            (
                LimitArgs {
                    engine_connect_timeout: Some(0),
                    ..LimitArgs::default()
                },
                "engine-connect-timeout",
            ),
        ] {
            let err = args.resolve(1024).unwrap_err();
            assert!(err.to_string().contains(what), "{err}");
        }
    }
}
