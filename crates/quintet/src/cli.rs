//! Command-line arguments, `QUINTET_*` environment variables and the optional TOML file,
//! merged into one validated configuration.
//!
//! Precedence, highest first: flag, environment variable, TOML file, built-in default.
//! clap resolves flag over environment; the file fills what both left unset.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Deserialize;

/// quintet: data, cache, search, queue and storage for applications, in one program.
#[derive(Debug, Parser)]
#[command(name = "quintet", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP server.
    Serve(ServeArgs),
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Settings of `quintet serve`. Every one can also be set by its environment variable or
/// in the TOML file given with `--config` (key = the flag's name with `_` for `-`).
#[derive(Debug, Default, Args)]
pub struct ServeArgs {
    /// TOML file with settings; flags and environment variables override it.
    #[arg(long, env = "QUINTET_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Address and port to listen on [default: 127.0.0.1:6363]
    #[arg(long, env = "QUINTET_LISTEN", value_name = "ADDR")]
    pub listen: Option<SocketAddr>,

    /// Directory holding all data of the embedded stores [default: ./quintet-data]
    #[arg(long, env = "QUINTET_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// Largest JSON request body, in bytes; larger bodies get 413 [default: 16777216]
    #[arg(long, env = "QUINTET_MAX_BODY_BYTES", value_name = "BYTES")]
    pub max_body_bytes: Option<usize>,

    /// Deepest nesting of arrays and objects in a JSON body [default: 64]
    #[arg(long, env = "QUINTET_MAX_JSON_DEPTH", value_name = "LEVELS")]
    pub max_json_depth: Option<usize>,

    /// Seconds in-flight requests may run after SIGINT/SIGTERM [default: 30]
    #[arg(long, env = "QUINTET_SHUTDOWN_TIMEOUT", value_name = "SECONDS")]
    pub shutdown_timeout: Option<u64>,

    /// URL clients reach this server at, for the absolute URLs it hands out (pre-signed
    /// URLs, connection strings) [default: built from each request's Host header]
    #[arg(long, env = "QUINTET_PUBLIC_URL", value_name = "URL")]
    pub public_url: Option<String>,

    /// Most bytes (keys plus values) the cache entries of all instances may take; when a
    /// write would go beyond, the least recently used entries are evicted [default: no
    /// limit, nothing is evicted]
    #[arg(long, env = "QUINTET_CACHE_MAX_BYTES", value_name = "BYTES")]
    pub cache_max_bytes: Option<u64>,

    /// Keep cache entries in memory only: nothing written to disk, every entry gone after
    /// a restart [default: false, entries are durable]
    #[arg(
        long,
        env = "QUINTET_CACHE_MEMORY_ONLY",
        value_name = "BOOL",
        num_args = 0..=1,
        default_missing_value = "true",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub cache_memory_only: Option<bool>,

    /// Log filter, e.g. `info`, `warn`, `quintet=debug` [default: info]
    #[arg(long, env = "QUINTET_LOG", value_name = "FILTER")]
    pub log: Option<String>,

    /// Log format [default: text]
    #[arg(long, env = "QUINTET_LOG_FORMAT", value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,
}

/// The TOML file: the same settings as the flags, all optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<SocketAddr>,
    data_dir: Option<PathBuf>,
    max_body_bytes: Option<usize>,
    max_json_depth: Option<usize>,
    shutdown_timeout: Option<u64>,
    public_url: Option<String>,
    cache_max_bytes: Option<u64>,
    cache_memory_only: Option<bool>,
    log: Option<String>,
    log_format: Option<LogFormat>,
}

/// Everything `quintet serve` needs, each setting resolved.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The HTTP server's settings.
    pub server: quintet_server::Config,
    /// The embedded stores' directory.
    pub data_dir: PathBuf,
    /// The embedded cache's bound and durability.
    pub cache: quintet_embedded::cache::CacheOptions,
    /// Log filter.
    pub log: String,
    /// Log format.
    pub log_format: LogFormat,
}

impl ServeArgs {
    /// Merge flags and environment (already in `self`) over the TOML file and defaults.
    pub fn resolve(self) -> anyhow::Result<ServeConfig> {
        let file = match &self.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        let defaults = quintet_server::Config::default();
        let max_json_depth = self
            .max_json_depth
            .or(file.max_json_depth)
            .unwrap_or(defaults.max_json_depth);
        if max_json_depth == 0 {
            bail!("max-json-depth must be at least 1");
        }
        let max_body_bytes = self
            .max_body_bytes
            .or(file.max_body_bytes)
            .unwrap_or(defaults.max_body_bytes);
        if max_body_bytes == 0 {
            bail!("max-body-bytes must be at least 1");
        }
        let cache_max_bytes = self.cache_max_bytes.or(file.cache_max_bytes);
        if cache_max_bytes == Some(0) {
            bail!("cache-max-bytes must be at least 1; leave it unset for no limit");
        }
        Ok(ServeConfig {
            server: quintet_server::Config {
                listen: self.listen.or(file.listen).unwrap_or(defaults.listen),
                max_body_bytes,
                max_json_depth,
                shutdown_timeout: self
                    .shutdown_timeout
                    .or(file.shutdown_timeout)
                    .map(Duration::from_secs)
                    .unwrap_or(defaults.shutdown_timeout),
                public_url: self
                    .public_url
                    .or(file.public_url)
                    .map(|u| check_public_url(&u))
                    .transpose()?,
            },
            data_dir: self
                .data_dir
                .or(file.data_dir)
                .unwrap_or_else(|| PathBuf::from("quintet-data")),
            cache: quintet_embedded::cache::CacheOptions {
                max_bytes: cache_max_bytes,
                memory_only: self
                    .cache_memory_only
                    .or(file.cache_memory_only)
                    .unwrap_or(false),
            },
            log: self.log.or(file.log).unwrap_or_else(|| "info".to_owned()),
            log_format: self
                .log_format
                .or(file.log_format)
                .unwrap_or(LogFormat::Text),
        })
    }
}

/// An absolute http(s) URL, returned without a trailing slash.
fn check_public_url(url: &str) -> anyhow::Result<String> {
    let trimmed = url.trim_end_matches('/');
    let ok = (trimmed.starts_with("http://") || trimmed.starts_with("https://"))
        && trimmed
            .split("://")
            .nth(1)
            .is_some_and(|rest| !rest.is_empty());
    if !ok {
        bail!(
            "public-url \"{url}\" must be an absolute http or https URL, e.g. https://quintet.example.com"
        );
    }
    Ok(trimmed.to_owned())
}

fn read_file(path: &Path) -> anyhow::Result<FileConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("config file {} is not valid", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn parse(args: &[&str]) -> ServeArgs {
        let mut argv = vec!["quintet", "serve"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Serve(a) => a,
        }
    }

    fn toml_file(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        f
    }

    #[test]
    fn defaults_apply_when_nothing_is_set() {
        let c = ServeArgs::default().resolve().unwrap();
        assert_eq!(c.server.listen.to_string(), "127.0.0.1:6363");
        assert_eq!(c.data_dir, PathBuf::from("quintet-data"));
        assert_eq!(c.server.max_json_depth, 64);
        assert_eq!(c.log_format, LogFormat::Text);
    }

    #[test]
    fn a_flag_beats_the_file_and_the_file_beats_the_default() {
        let f = toml_file(
            "listen = \"127.0.0.1:7000\"\ndata_dir = \"/from/file\"\nmax_json_depth = 9\n",
        );
        let path = f.path().to_str().unwrap();
        let c = parse(&["--config", path, "--listen", "127.0.0.1:8000"])
            .resolve()
            .unwrap();
        assert_eq!(c.server.listen.to_string(), "127.0.0.1:8000");
        assert_eq!(c.data_dir, PathBuf::from("/from/file"));
        assert_eq!(c.server.max_json_depth, 9);
    }

    #[test]
    fn unknown_keys_in_the_file_are_errors() {
        let f = toml_file("lisen = \"127.0.0.1:7000\"\n");
        let err = parse(&["--config", f.path().to_str().unwrap()])
            .resolve()
            .unwrap_err();
        assert!(format!("{err:#}").contains("lisen"), "{err:#}");
    }

    #[test]
    fn a_missing_file_is_an_error() {
        let err = parse(&["--config", "/nonexistent/q.toml"])
            .resolve()
            .unwrap_err();
        assert!(format!("{err:#}").contains("/nonexistent/q.toml"));
    }

    #[test]
    fn public_url_is_checked_and_trimmed() {
        let c = parse(&["--public-url", "https://q.example.com/"])
            .resolve()
            .unwrap();
        assert_eq!(
            c.server.public_url.as_deref(),
            Some("https://q.example.com")
        );
        assert!(parse(&["--public-url", "q.example.com"]).resolve().is_err());
    }

    #[test]
    fn zero_limits_are_refused() {
        assert!(parse(&["--max-json-depth", "0"]).resolve().is_err());
        assert!(parse(&["--max-body-bytes", "0"]).resolve().is_err());
        assert!(parse(&["--cache-max-bytes", "0"]).resolve().is_err());
    }

    #[test]
    fn cache_settings_from_flags_and_the_file() {
        let c = ServeArgs::default().resolve().unwrap();
        assert_eq!(c.cache, quintet_embedded::cache::CacheOptions::default());
        let c = parse(&["--cache-max-bytes", "1048576", "--cache-memory-only"])
            .resolve()
            .unwrap();
        assert_eq!(c.cache.max_bytes, Some(1_048_576));
        assert!(c.cache.memory_only);
        assert!(
            !parse(&["--cache-memory-only=false"])
                .resolve()
                .unwrap()
                .cache
                .memory_only
        );
        let f = toml_file("cache_max_bytes = 4096\ncache_memory_only = true\n");
        let path = f.path().to_str().unwrap();
        let c = parse(&["--config", path]).resolve().unwrap();
        assert_eq!(c.cache.max_bytes, Some(4096));
        assert!(c.cache.memory_only);
        let c = parse(&[
            "--config",
            path,
            "--cache-memory-only=false",
            "--cache-max-bytes",
            "9",
        ])
        .resolve()
        .unwrap();
        assert_eq!(c.cache.max_bytes, Some(9));
        assert!(!c.cache.memory_only, "a flag beats the file");
    }
}
