//! How the admin commands find the server that owns a data directory.
//!
//! A serving node writes `<data-dir>/server.json` (`{"url", "pid"}`, owner-only like the
//! rest of the directory) once it listens, and removes it when it stops. The admin
//! commands read it, so `quintet key create shop` reaches the server using
//! `./quintet-data` whatever address it was given (flag, environment, config file). A
//! record left by a killed server names a process that no longer runs and is ignored.

use std::{
    fs,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    path::{Path, PathBuf},
};

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// Name of the record inside the data directory.
pub const FILE: &str = "server.json";

/// Where a running server listens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The URL to reach it from this machine (loopback for a wildcard address).
    pub url: String,
    /// Its process id.
    pub pid: u32,
}

/// The URL that reaches `addr` from this machine.
pub fn local_url(scheme: &str, addr: SocketAddr) -> String {
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!("{scheme}://{}", SocketAddr::new(ip, addr.port()))
}

impl Record {
    /// The record of this process listening on `addr`.
    pub fn new(scheme: &str, addr: SocketAddr) -> Self {
        Self {
            url: local_url(scheme, addr),
            pid: std::process::id(),
        }
    }

    fn path(data_dir: &Path) -> PathBuf {
        data_dir.join(FILE)
    }

    /// Write the record into `data_dir`.
    pub fn write(&self, data_dir: &Path) -> anyhow::Result<()> {
        let path = Self::path(data_dir);
        let tmp = path.with_extension("json.tmp");
        fs::write(&tmp, serde_json::to_vec(self)?)
            .and_then(|()| fs::rename(&tmp, &path))
            .with_context(|| format!("cannot write {}", path.display()))
    }

    /// Remove the record of `data_dir` (the server stopped).
    pub fn remove(data_dir: &Path) {
        let _ = fs::remove_file(Self::path(data_dir));
    }

    /// The record of a server running on `data_dir`, if there is one and its process still
    /// runs.
    pub fn read(data_dir: &Path) -> Option<Self> {
        let text = fs::read(Self::path(data_dir)).ok()?;
        let record: Self = serde_json::from_slice(&text).ok()?;
        record.is_running().then_some(record)
    }

    fn is_running(&self) -> bool {
        if cfg!(target_os = "linux") {
            Path::new(&format!("/proc/{}", self.pid)).exists()
        } else {
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_names_a_running_server_until_removed() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Record::read(dir.path()), None);
        let record = Record::new("https", "0.0.0.0:7000".parse().unwrap());
        assert_eq!(record.url, "https://127.0.0.1:7000");
        record.write(dir.path()).unwrap();
        assert_eq!(Record::read(dir.path()), Some(record));
        Record::remove(dir.path());
        assert_eq!(Record::read(dir.path()), None);
        // A killed server's record names a process that is gone.
        let stale = Record {
            url: "http://127.0.0.1:1".into(),
            pid: u32::MAX - 1,
        };
        stale.write(dir.path()).unwrap();
        assert_eq!(Record::read(dir.path()), None);
    }
}
