//! The settings that bound what clients, the disk and the engines can cost a node: request
//! bodies that stall, connections in all and per client, the disk space kept for
//! deletes, and how long reaching an engine may take. Flags, `QUINTET_*` variables and TOML
//! keys like every other setting (see [`crate::cli`]); documented in `docs/operations.md`.

use std::time::Duration;

use anyhow::bail;
use clap::Args;
use quintet_server::config::{ConnectionSettings, DEFAULT_MAX_CONNECTIONS_PER_CLIENT};
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Default time to open a connection to PostgreSQL, Redis or S3.
pub const DEFAULT_ENGINE_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Longest `--body-timeout` and `--engine-connect-timeout` accepted: a day.
const MAX_TIMEOUT: Duration = Duration::from_secs(86_400);

/// The limits' flags, part of `quintet serve`'s.
#[derive(Debug, Default, Clone, Args)]
pub struct LimitArgs {
    /// Seconds a request body may pause, and the time every body starts with; each
    /// --body-min-rate bytes received earn another second, so uploads that keep moving
    /// finish however large they are [default: 30]
    #[arg(long, env = "QUINTET_BODY_TIMEOUT", value_name = "SECONDS")]
    pub body_timeout: Option<u64>,

    /// Bytes per second that earn a request body another second; 0 counts pauses only
    /// [default: 1024]
    #[arg(long, env = "QUINTET_BODY_MIN_RATE", value_name = "BYTES")]
    pub body_min_rate: Option<u64>,

    /// Most connections open at once; more are closed as they arrive [default: half the
    /// process' open-file limit]
    #[arg(long, env = "QUINTET_MAX_CONNECTIONS", value_name = "N")]
    pub max_connections: Option<usize>,

    /// Most connections open at once from one client address (IPv6: per /64); 0 for no
    /// bound, e.g. behind a proxy whose address every connection comes from [default: 256,
    /// or a quarter of --max-connections when lower]
    #[arg(long, env = "QUINTET_MAX_CONNECTIONS_PER_CLIENT", value_name = "N")]
    pub max_connections_per_client: Option<usize>,

    /// Bytes of free disk space kept for deletes: writes to the data directory answer 507
    /// while less is free, and deletes go on [default: 5 % of the data directory's file
    /// system, at most 64 MiB]
    #[arg(long, env = "QUINTET_DISK_RESERVE", value_name = "BYTES")]
    pub disk_reserve: Option<u64>,

    /// Milliseconds to open a connection to PostgreSQL, Redis or S3; an engine that does
    /// not answer in time counts as down [default: 2000]
    #[arg(long, env = "QUINTET_ENGINE_CONNECT_TIMEOUT", value_name = "MS")]
    pub engine_connect_timeout: Option<u64>,
}

/// The same settings as keys of the TOML file.
#[derive(Debug, Default, Clone, serde::Deserialize)]
pub(crate) struct FileLimits {
    pub(crate) body_timeout: Option<u64>,
    pub(crate) body_min_rate: Option<u64>,
    pub(crate) max_connections: Option<usize>,
    pub(crate) max_connections_per_client: Option<usize>,
    pub(crate) disk_reserve: Option<u64>,
    pub(crate) engine_connect_timeout: Option<u64>,
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
    /// Flags and environment over `file` over the defaults; `fd_limit` is the process'
    /// open-file limit, which the default connection bound derives from.
    pub(crate) fn resolve(self, file: FileLimits, fd_limit: u64) -> anyhow::Result<Limits> {
        let body_timeout = Duration::from_secs(
            self.body_timeout
                .or(file.body_timeout)
                .unwrap_or(quintet_server::config::DEFAULT_BODY_TIMEOUT.as_secs()),
        );
        if body_timeout.is_zero() || body_timeout > MAX_TIMEOUT {
            bail!(
                "body-timeout must be 1 to {} seconds",
                MAX_TIMEOUT.as_secs()
            );
        }
        let max_connections = match self.max_connections.or(file.max_connections) {
            Some(0) => bail!(
                "max-connections must be at least 1 (leave it unset for half the open-file limit)"
            ),
            Some(n) => n,
            None => default_max_connections(fd_limit),
        };
        let max_connections_per_client = self
            .max_connections_per_client
            .or(file.max_connections_per_client)
            .unwrap_or_else(|| (max_connections / 4).clamp(1, DEFAULT_MAX_CONNECTIONS_PER_CLIENT));
        let engine_connect_timeout = self
            .engine_connect_timeout
            .or(file.engine_connect_timeout)
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
                    .or(file.body_min_rate)
                    .unwrap_or(quintet_server::config::DEFAULT_BODY_MIN_RATE),
                max_connections,
                max_connections_per_client,
            },
            disk_reserve: self.disk_reserve.or(file.disk_reserve),
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

    fn resolve(args: LimitArgs, file: FileLimits, fd_limit: u64) -> anyhow::Result<Limits> {
        args.resolve(file, fd_limit)
    }

    #[test]
    fn defaults_derive_from_the_open_file_limit() {
        let l = resolve(LimitArgs::default(), FileLimits::default(), 1024).unwrap();
        assert_eq!(l.connections.body_timeout, Duration::from_secs(30));
        assert_eq!(l.connections.body_min_rate, 1024);
        assert_eq!(l.connections.max_connections, 512);
        assert_eq!(l.connections.max_connections_per_client, 128);
        assert_eq!(l.disk_reserve, None);
        assert_eq!(l.engine_connect_timeout, Duration::from_secs(2));
        let l = resolve(LimitArgs::default(), FileLimits::default(), 1 << 20).unwrap();
        assert_eq!(l.connections.max_connections, 1 << 19);
        assert_eq!(l.connections.max_connections_per_client, 256);
    }

    #[test]
    fn flags_beat_the_file_and_zero_per_client_means_no_bound() {
        let args = LimitArgs {
            body_timeout: Some(5),
            max_connections_per_client: Some(0),
            ..LimitArgs::default()
        };
        let file = FileLimits {
            body_timeout: Some(60),
            body_min_rate: Some(0),
            max_connections: Some(100),
            disk_reserve: Some(1 << 20),
            engine_connect_timeout: Some(250),
            ..FileLimits::default()
        };
        let l = resolve(args, file, 1024).unwrap();
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
        let l = resolve(LimitArgs::default(), file.limits(), 1024).unwrap();
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
            let err = resolve(args, FileLimits::default(), 1024).unwrap_err();
            assert!(err.to_string().contains(what), "{err}");
        }
    }
}
