//! The real `quintet` binary in a child process, for tests that kill it or read what it
//! prints.
//!
//! It logs at `warn` unless the arguments set `--log`; its stderr is passed through and
//! also kept, for [`Process::stderr_lines`].

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::{Arc, Mutex, mpsc},
    time::{Duration, Instant},
};

use crate::Client;

/// Lines a child printed, shared with the thread reading them.
type Lines = Arc<Mutex<Vec<String>>>;

/// A `quintet serve` child process on an ephemeral loopback port.
#[derive(Debug)]
pub struct Process {
    child: Child,
    client: Client,
    bin: PathBuf,
    data_dir: PathBuf,
    extra: Vec<String>,
    envs: Vec<(String, String)>,
    stdout: Lines,
    stderr: Lines,
}

impl std::ops::Deref for Process {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

impl Process {
    /// Start `bin serve` on `data_dir` with `extra` arguments; waits until it listens.
    pub fn spawn(bin: &Path, data_dir: &Path, extra: &[&str]) -> Self {
        Self::spawn_with_env(bin, data_dir, extra, &[])
    }

    /// Like [`Process::spawn`], with extra environment variables.
    pub fn spawn_with_env(
        bin: &Path,
        data_dir: &Path,
        extra: &[&str],
        envs: &[(&str, &str)],
    ) -> Self {
        let extra: Vec<String> = extra.iter().map(|s| (*s).to_owned()).collect();
        let envs: Vec<(String, String)> = envs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let (child, base) = start(bin, data_dir, &extra, &envs, (&stdout, &stderr));
        Self {
            child,
            client: Client::new(&base),
            bin: bin.to_owned(),
            data_dir: data_dir.to_owned(),
            extra,
            envs,
            stdout,
            stderr,
        }
    }

    /// Every line the process (and its earlier runs, see [`Process::restart`]) printed on
    /// stdout so far.
    pub fn stdout_lines(&self) -> Vec<String> {
        self.stdout.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Every line the process (and its earlier runs) printed on stderr so far: its log.
    pub fn stderr_lines(&self) -> Vec<String> {
        self.stderr.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `kill -9`: the process gets no chance to flush or close anything.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Send a signal (`"TERM"`, `"INT"`) and wait up to `within` for the process to exit.
    pub fn signal_and_wait(&mut self, signal: &str, within: Duration) -> ExitStatus {
        self.signal(signal);
        self.wait_exit(within)
    }

    /// Send a signal (`"TERM"`, `"INT"`) without waiting for its effect.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([format!("-{signal}"), self.child.id().to_string()])
            .status()
            .expect("kill command");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// The exit status, when the process has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("wait")
    }

    /// Wait (blocking) up to `within` for the process to exit.
    pub fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.exited() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "quintet did not exit within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Start the binary again on the same data directory with the same arguments.
    pub fn restart(&mut self) {
        self.kill9();
        let (child, base) = start(
            &self.bin,
            &self.data_dir,
            &self.extra,
            &self.envs,
            (&self.stdout, &self.stderr),
        );
        self.child = child;
        self.client = Client::new(&base);
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(
    bin: &Path,
    data_dir: &Path,
    extra: &[String],
    envs: &[(String, String)],
    (lines, err_lines): (&Lines, &Lines),
) -> (Child, String) {
    let sets_log = extra
        .iter()
        .any(|a| a == "--log" || a.starts_with("--log="));
    let default_log: &[&str] = if sets_log { &[] } else { &["--log", "warn"] };
    let sets_key = extra.iter().any(|a| a.starts_with("--master-key"))
        || envs
            .iter()
            .any(|(k, _)| k.starts_with("QUINTET_MASTER_KEY"));
    let mut command = Command::new(bin);
    if !sets_key {
        command.env("QUINTET_MASTER_KEY", crate::test_master_key());
    }
    let mut child = command
        .arg("serve")
        .arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--data-dir")
        .arg(data_dir)
        .args(default_log)
        .args(extra)
        .env_remove("QUINTET_CONFIG")
        .envs(envs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("quintet binary starts");
    let stderr = child.stderr.take().expect("stderr");
    let err_lines = Arc::clone(err_lines);
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("{line}");
            if let Ok(mut all) = err_lines.lock() {
                all.push(line);
            }
        }
    });
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    let lines = Arc::clone(lines);
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // The line as text, or as JSON with --log-format json.
            let url = line
                .strip_prefix("quintet listening on ")
                .map(|u| u.trim().to_owned())
                .or_else(|| {
                    serde_json::from_str::<serde_json::Value>(&line)
                        .ok()
                        .and_then(|v| v["listening"].as_str().map(str::to_owned))
                });
            if let Some(url) = url {
                let _ = tx.send(url);
            }
            if let Ok(mut all) = lines.lock() {
                all.push(line);
            }
        }
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(base) => (child, base),
        Err(_) => {
            let _ = child.kill();
            let status = child.wait().ok();
            panic!("quintet did not report its address (exit status {status:?})");
        }
    }
}
