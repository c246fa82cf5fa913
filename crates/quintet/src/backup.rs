//! Backups of an embedded node: `quintet backup DEST`, `quintet backup verify DEST`,
//! `quintet restore SRC --data-dir DIR`, and what writes the backups of `/_admin/backups`
//! ([`NodeBackups`]).
//!
//! `quintet backup DEST` finds the server running on the data directory as the admin
//! commands do ([`crate::discovery`]); it asks it for a backup (`POST /_admin/backups`,
//! written into the server's `--backup-dir`), follows its progress (`GET`), and moves it to
//! `DEST`. With no server running it locks the data directory and copies it itself. The
//! copy itself, and why it is consistent: [`quintet_embedded::backup`].

use std::{
    io::IsTerminal,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use async_trait::async_trait;
use clap::{Args, Subcommand};
use quintet_core::{Error, Result};
use quintet_embedded::backup::{Manifest, Progress, Source};
use quintet_server::backups::{BackupInfo, BackupName, BackupRun, Backups};
use serde_json::{Value, json};

use crate::admin::Conn;

/// Name of the backup directory inside the data directory when `--backup-dir` is not set.
pub const DEFAULT_DIR: &str = "backups";

/// `quintet backup …`
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct BackupArgs {
    /// Check a backup instead of taking one.
    #[command(subcommand)]
    pub command: Option<BackupCommand>,

    /// Directory to write the backup into; it must not exist, or be empty
    #[arg(required = true, value_name = "DEST")]
    pub dest: Option<PathBuf>,

    /// How to reach the running server (or which data directory to copy when none runs).
    #[command(flatten)]
    pub conn: Conn,
}

/// `quintet backup verify …`
#[derive(Debug, Subcommand)]
pub enum BackupCommand {
    /// Check a backup: its manifest is there (else it is incomplete) and every file has its
    /// size and checksum.
    Verify {
        /// The backup's directory.
        #[arg(value_name = "DEST")]
        dest: PathBuf,
    },
}

/// `quintet restore …`
#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The backup's directory
    #[arg(value_name = "SRC")]
    pub src: PathBuf,

    /// The data directory to restore into; it must not exist, or be empty
    #[arg(long, env = "QUINTET_DATA_DIR", value_name = "DIR")]
    pub data_dir: PathBuf,

    /// Replace what the data directory holds
    #[arg(long)]
    pub force: bool,
}

/// The crash point of tests: once the files are copied, before the manifest.
fn midway(p: Progress) {
    if p.phase == "hash" {
        quintet_server::failpoint::hit("backup-midway");
    }
}

/// Progress on a terminal as a bar, else as JSON lines on standard output.
struct Reporter {
    bar: Option<indicatif::ProgressBar>,
    last: Mutex<Option<Instant>>,
}

impl Reporter {
    fn new() -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new(0);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{msg:8} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} {eta}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            bar
        });
        Self {
            bar,
            last: Mutex::new(None),
        }
    }

    fn update(&self, phase: &str, done: u64, total: u64) {
        if let Some(bar) = &self.bar {
            bar.set_message(phase.to_owned());
            bar.set_length(total);
            bar.set_position(done);
            return;
        }
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let due = last.is_none_or(|t| t.elapsed() >= Duration::from_millis(500));
        if due || done >= total {
            *last = Some(Instant::now());
            println!(
                "{}",
                json!({"progress": phase, "done": done, "total": total})
            );
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Say what happened: a line for people, or one JSON object.
fn report(text: &str, value: Value) {
    if std::io::stdout().is_terminal() {
        println!("{text}");
    } else {
        println!("{value}");
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")
}

/// `quintet backup …`
pub fn run(args: BackupArgs) -> anyhow::Result<()> {
    match (args.command, args.dest) {
        (Some(BackupCommand::Verify { dest }), _) => verify(&dest),
        (None, Some(dest)) => runtime()?.block_on(take(dest, args.conn)),
        (None, None) => bail!("give the directory to write the backup into: quintet backup DEST"),
    }
}

fn verify(dest: &Path) -> anyhow::Result<()> {
    let reporter = Reporter::new();
    let total = Manifest::read(dest).map(|m| m.bytes).unwrap_or(0);
    let checked = quintet_embedded::backup::verify(dest, &|done| {
        reporter.update("verify", done, total);
    });
    reporter.finish();
    let manifest = checked.map_err(anyhow::Error::new)?;
    report(
        &format!(
            "{}: complete and intact: {} files, {} bytes, taken {}",
            dest.display(),
            manifest.files.len(),
            manifest.bytes,
            manifest.created
        ),
        json!({"ok": true, "backup": dest, "files": manifest.files.len(),
               "bytes": manifest.bytes, "created": manifest.created}),
    );
    Ok(())
}

/// `DEST` must not exist or be empty; an empty one is removed (the backup makes it).
fn prepare_dest(dest: &Path) -> anyhow::Result<()> {
    match std::fs::read_dir(dest) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                bail!(
                    "{} is not empty: give a new or empty directory for the backup",
                    dest.display()
                );
            }
            std::fs::remove_dir(dest).with_context(|| format!("cannot use {}", dest.display()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot use {}", dest.display())),
    }
}

async fn take(dest: PathBuf, conn: Conn) -> anyhow::Result<()> {
    prepare_dest(&dest)?;
    let data_dir = conn.resolved_data_dir()?;
    let manifest = if conn.url.is_some() || crate::discovery::Record::read(&data_dir).is_some() {
        through_server(&dest, conn).await?
    } else {
        offline(&data_dir, &dest, &conn).await?
    };
    report(
        &format!(
            "backup written to {}: {} files, {} bytes, taken {}",
            dest.display(),
            manifest.files.len(),
            manifest.bytes,
            manifest.created
        ),
        json!({"ok": true, "backup": dest, "files": manifest.files.len(),
               "bytes": manifest.bytes, "created": manifest.created}),
    );
    Ok(())
}

/// No server runs on `data_dir`: lock it and copy it.
async fn offline(data_dir: &Path, dest: &Path, conn: &Conn) -> anyhow::Result<Manifest> {
    let dir = quintet_embedded::datadir::DataDir::open(data_dir)
        .with_context(|| format!("cannot back up {}", data_dir.display()))?;
    if dir.found() != quintet_embedded::datadir::Found::Used {
        dir.abandon();
        bail!(
            "{} holds no data directory: give --data-dir (or --config) of the server to back up",
            data_dir.display()
        );
    }
    let source = Source::new(dir.root(), None, None).excluding(&conn.resolved_backup_dir()?);
    let written = async {
        let captured = source.capture(dest).await?;
        let reporter = Reporter::new();
        let manifest = tokio::task::spawn_blocking(move || {
            let out = captured.write(&|p: Progress| {
                midway(p);
                reporter.update(p.phase, p.done, p.total);
            });
            reporter.finish();
            out
        })
        .await??;
        Ok::<_, anyhow::Error>(manifest)
    }
    .await;
    drop(dir);
    if written.is_err() {
        // DEST was new or empty: what a failed backup wrote there is of no use.
        let _ = std::fs::remove_dir_all(dest);
    }
    written
}

/// Ask the running server for a backup, follow it, move it to `dest`.
///
/// `dest` is made at once, empty: until the backup is moved onto it (a rename replaces an
/// empty directory), it is a backup without a manifest, which `verify` calls incomplete. So
/// a `quintet backup` killed while the server copies leaves no doubt about `dest`; the
/// server finishes its copy in its backup directory regardless (listed there, to delete).
async fn through_server(dest: &Path, conn: Conn) -> anyhow::Result<Manifest> {
    std::fs::create_dir(dest).with_context(|| format!("cannot create {}", dest.display()))?;
    let taken = take_through_server(dest, conn).await;
    if taken.is_err() {
        // Only while still empty: what the move put there is kept to look at.
        let _ = std::fs::remove_dir(dest);
    }
    taken
}

async fn take_through_server(dest: &Path, conn: Conn) -> anyhow::Result<Manifest> {
    let admin = conn.connect()?;
    let name = format!(
        "cli-{}-{}",
        quintet_core::clock::format_rfc3339_ms(quintet_core::Clock::now_ms(
            &quintet_core::SystemClock
        ))
        .replace(':', "."),
        std::process::id()
    );
    let reporter = Reporter::new();
    let create = admin.call_long(
        reqwest::Method::POST,
        "/_admin/backups",
        Some(json!({ "name": name })),
    );
    tokio::pin!(create);
    let answer = loop {
        tokio::select! {
            answer = &mut create => break answer?,
            () = tokio::time::sleep(Duration::from_millis(250)) => {
                if let Ok(list) = admin.call_long(reqwest::Method::GET, "/_admin/backups", None).await
                    && let Some(b) = list["backups"].as_array().and_then(|l| l.iter().find(|b| b["name"] == name.as_str()))
                {
                    reporter.update("copy", b["bytes"].as_u64().unwrap_or(0), b["totalBytes"].as_u64().unwrap_or(0));
                }
            }
        }
    };
    reporter.finish();
    let written = answer["backup"]["path"]
        .as_str()
        .map(PathBuf::from)
        .context("the server's answer names no backup")?;
    move_backup(&written, dest)
        .await
        .with_context(|| format!("the backup is in {}", written.display()))
}

/// Move the backup at `from` to `to`: a rename on the same file system, else a copy that
/// is verified, then the original removed.
async fn move_backup(from: &Path, to: &Path) -> anyhow::Result<Manifest> {
    match std::fs::rename(from, to) {
        Ok(()) => return Ok(Manifest::read(to)?),
        Err(e) if e.raw_os_error() != Some(rustix::io::Errno::XDEV.raw_os_error()) => {
            return Err(e).with_context(|| format!("cannot move the backup to {}", to.display()));
        }
        Err(_) => {}
    }
    let (from, to) = (from.to_owned(), to.to_owned());
    tokio::task::spawn_blocking(move || {
        copy_backup(&from, &to)?;
        let reporter = Reporter::new();
        let total = Manifest::read(&to)?.bytes;
        let manifest = quintet_embedded::backup::verify(&to, &|done| {
            reporter.update("verify", done, total);
        });
        reporter.finish();
        let manifest = manifest?;
        std::fs::remove_dir_all(&from)?;
        Ok(manifest)
    })
    .await?
}

/// Copy the backup at `from` into `to`, its manifest last: a copy cut short has none, so
/// it reads as incomplete rather than as a backup missing files.
fn copy_backup(from: &Path, to: &Path) -> anyhow::Result<()> {
    copy_tree(from, to, Some(quintet_embedded::backup::MANIFEST))?;
    let manifest = quintet_embedded::backup::MANIFEST;
    std::fs::copy(from.join(manifest), to.join(manifest))?;
    Ok(())
}

/// Copy the tree at `from` into `to`, leaving out the file `skip` at its top.
fn copy_tree(from: &Path, to: &Path, skip: Option<&str>) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        if skip.is_some_and(|s| entry.file_name() == s) {
            continue;
        }
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target, None)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// `quintet restore …`
pub fn restore(args: RestoreArgs) -> anyhow::Result<()> {
    // What is restored is for the server's user only, like everything it writes.
    #[cfg(unix)]
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    let reporter = Reporter::new();
    let restored = quintet_embedded::backup::restore(
        &args.src,
        &args.data_dir,
        args.force,
        &|phase, done, total| reporter.update(phase, done, total),
    );
    reporter.finish();
    let manifest = restored?;
    report(
        &format!(
            "restored {} into {}: {} files, {} bytes, taken {}; start the server on it with \
             the master key it used (secrets in the registry are sealed with it)",
            args.src.display(),
            args.data_dir.display(),
            manifest.files.len(),
            manifest.bytes,
            manifest.created
        ),
        json!({"ok": true, "restored": args.src, "dataDir": args.data_dir,
               "files": manifest.files.len(), "bytes": manifest.bytes, "created": manifest.created}),
    );
    Ok(())
}

/// The backups of a serving node, written into its backup directory.
#[derive(Debug)]
pub struct NodeBackups {
    dir: PathBuf,
    source: Source,
    running: Arc<Mutex<Option<Running>>>,
}

/// The backup being written, and how far it is.
#[derive(Debug)]
struct Running {
    name: String,
    done: Arc<AtomicU64>,
    total: Arc<AtomicU64>,
}

impl NodeBackups {
    /// Backups of `source` written into `dir` (created when first needed, for the server's
    /// user only).
    pub fn new(dir: PathBuf, source: Source) -> Self {
        let source = source.excluding(&dir);
        Self {
            dir,
            source,
            running: Arc::default(),
        }
    }

    fn running(&self) -> std::sync::MutexGuard<'_, Option<Running>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn info(&self, name: &str, path: &Path) -> BackupInfo {
        let shown = path.display().to_string();
        if let Some(r) = self.running().as_ref().filter(|r| r.name == name) {
            return BackupInfo {
                name: name.to_owned(),
                state: "running",
                created: None,
                bytes: r.done.load(Ordering::Relaxed),
                files: None,
                total_bytes: Some(r.total.load(Ordering::Relaxed)),
                path: shown,
            };
        }
        match Manifest::read(path) {
            Ok(m) => BackupInfo {
                name: name.to_owned(),
                state: "complete",
                created: Some(m.created),
                bytes: m.bytes,
                files: Some(m.files.len()),
                total_bytes: None,
                path: shown,
            },
            Err(_) => BackupInfo {
                name: name.to_owned(),
                state: "incomplete",
                created: None,
                bytes: 0,
                files: None,
                total_bytes: None,
                path: shown,
            },
        }
    }
}

fn io(what: &Path, e: &std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::StorageFull {
        return Error::InsufficientStorage(format!(
            "the disk holding {} is full: free some space",
            what.display()
        ));
    }
    Error::internal(format!("backups: {}: {e}", what.display()))
}

#[async_trait]
impl Backups for NodeBackups {
    async fn begin(&self, name: &BackupName) -> Result<Box<dyn BackupRun>> {
        let mut running = self.running();
        if let Some(r) = running.as_ref() {
            return Err(Error::conflict(format!(
                "backup \"{}\" is being written: wait until it is complete",
                r.name
            )));
        }
        std::fs::create_dir_all(&self.dir).map_err(|e| io(&self.dir, &e))?;
        let dest = self.dir.join(name.as_str());
        if dest.exists() {
            return Err(Error::conflict(format!(
                "backup \"{name}\" exists already: choose another name, or delete it first"
            )));
        }
        let (done, total) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        *running = Some(Running {
            name: name.as_str().to_owned(),
            done: Arc::clone(&done),
            total: Arc::clone(&total),
        });
        Ok(Box::new(Run {
            dest,
            source: self.source.clone(),
            captured: None,
            done,
            total,
            _slot: Slot(Arc::clone(&self.running)),
            finished: false,
        }))
    }

    async fn list(&self) -> Result<Vec<BackupInfo>> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(&self.dir, &e)),
        };
        let mut out = Vec::new();
        for entry in entries.filter_map(std::result::Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.parse::<BackupName>().is_err() || !entry.path().is_dir() {
                continue;
            }
            out.push(self.info(&name, &entry.path()));
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    async fn delete(&self, name: &BackupName) -> Result<()> {
        if self
            .running()
            .as_ref()
            .is_some_and(|r| r.name == name.as_str())
        {
            return Err(Error::conflict(format!(
                "backup \"{name}\" is being written: wait until it is complete"
            )));
        }
        let path = self.dir.join(name.as_str());
        if !path.is_dir() {
            return Err(Error::not_found(format!(
                "there is no backup named \"{name}\""
            )));
        }
        tokio::task::spawn_blocking(move || {
            std::fs::remove_dir_all(&path).map_err(|e| io(&path, &e))
        })
        .await
        .map_err(|e| Error::internal(format!("deleting a backup: {e}")))?
    }
}

/// Frees the running slot when the backup ends, however it ends.
#[derive(Debug)]
struct Slot(Arc<Mutex<Option<Running>>>);

impl Drop for Slot {
    fn drop(&mut self) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

struct Run {
    dest: PathBuf,
    source: Source,
    captured: Option<quintet_embedded::backup::Captured>,
    done: Arc<AtomicU64>,
    total: Arc<AtomicU64>,
    _slot: Slot,
    /// Set once complete: a run dropped before removes what it wrote.
    finished: bool,
}

impl Drop for Run {
    fn drop(&mut self) {
        if !self.finished && self.dest.exists() {
            let _ = std::fs::remove_dir_all(&self.dest);
        }
    }
}

#[async_trait]
impl BackupRun for Run {
    async fn capture(&mut self) -> Result<()> {
        let captured = self.source.capture(&self.dest).await?;
        self.total.store(captured.total_bytes(), Ordering::Relaxed);
        self.captured = Some(captured);
        Ok(())
    }

    async fn finish(mut self: Box<Self>) -> Result<BackupInfo> {
        let captured = self
            .captured
            .take()
            .ok_or_else(|| Error::internal("a backup finished before its capture"))?;
        let (done, total) = (Arc::clone(&self.done), Arc::clone(&self.total));
        let manifest = tokio::task::spawn_blocking(move || {
            captured.write(&|p: Progress| {
                midway(p);
                if p.phase == "copy" {
                    done.store(p.done, Ordering::Relaxed);
                    total.store(p.total, Ordering::Relaxed);
                }
            })
        })
        .await
        .map_err(|e| Error::internal(format!("the backup task failed: {e}")))??;
        self.finished = true;
        let name = self
            .dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(BackupInfo {
            name,
            state: "complete",
            created: Some(manifest.created),
            bytes: manifest.bytes,
            files: Some(manifest.files.len()),
            total_bytes: None,
            path: self.dest.display().to_string(),
        })
    }
}
