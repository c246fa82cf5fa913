//! The server under test: the release binary in a child process on a temporary directory.

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use anyhow::{Context, bail};

/// A running `quintet serve` on loopback.
#[derive(Debug)]
pub struct Server {
    child: Child,
    /// `host:port` it listens on.
    pub addr: String,
    dir: tempfile::TempDir,
}

impl Server {
    /// Start `bin` on a fresh data directory with `extra` arguments.
    pub fn start(bin: &Path, extra: &[String]) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let mut child = Command::new(bin)
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--log",
                "warn",
                "--data-dir",
            ])
            .arg(dir.path().join("data"))
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let stdout = child.stdout.take().context("stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("quintet listening on http://") {
                    let _ = tx.send(url.trim().to_owned());
                }
            }
        });
        let Ok(addr) = rx.recv_timeout(Duration::from_secs(60)) else {
            let _ = child.kill();
            bail!("the server did not report its address");
        };
        Ok(Self { child, addr, dir })
    }

    /// The server's data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The server's process id (for memory readings).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident memory of the server, bytes (Linux).
    pub fn rss_bytes(&self) -> Option<u64> {
        self.status_bytes("VmRSS:")
    }

    /// The anonymous part of the resident memory (heap, stacks), bytes, without the pages
    /// of mapped files (SQLite maps its database files).
    pub fn anon_bytes(&self) -> Option<u64> {
        self.status_bytes("RssAnon:")
    }

    /// CPU time the server has used, user and system, in clock ticks (Linux; 100 a second
    /// on usual kernels).
    pub fn cpu_ticks(&self) -> Option<u64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).ok()?;
        // Fields after the command name, which may hold spaces: state is the first,
        // utime the 12th and stime the 13th.
        let mut after = stat.rsplit_once(')')?.1.split_whitespace().skip(11);
        let user: u64 = after.next()?.parse().ok()?;
        let system: u64 = after.next()?.parse().ok()?;
        Some(user + system)
    }

    fn status_bytes(&self, field: &str) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        let line = status.lines().find(|l| l.starts_with(field))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The release server binary beside this one.
pub fn default_binary() -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe()?;
    Ok(me.with_file_name("quintet"))
}
