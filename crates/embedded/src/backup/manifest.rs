//! A backup's manifest (`manifest.json`): every file with its size and SHA-256, written
//! last, so a backup without one is incomplete; and what checks a backup against it
//! ([`verify`]) and copies it into a data directory ([`restore`]).

use std::{
    collections::BTreeSet,
    fs::{self, File},
    io::{self, Read, Write},
    path::{Component, Path, PathBuf},
};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::datadir::{DataDir, Found};

/// The manifest's file name inside a backup.
pub const MANIFEST: &str = "manifest.json";

/// What the `format` member says: this is a quintet backup.
pub const FORMAT: &str = "quintet-backup";

/// The manifest's version this build writes and reads.
pub const VERSION: u32 = 1;

/// Bytes read at a time while hashing or copying.
const CHUNK: usize = 1 << 20;

/// The list of a complete backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always [`FORMAT`].
    pub format: String,
    /// The manifest's version ([`VERSION`]).
    pub version: u32,
    /// When the backup's consistent point was taken, RFC 3339 (UTC, milliseconds).
    pub created: String,
    /// The quintet version that wrote it.
    pub quintet: String,
    /// Total bytes of the files.
    pub bytes: u64,
    /// Directories to create even when empty (an instance with no blob yet), relative,
    /// `/`-separated.
    pub dirs: Vec<String>,
    /// Every file, ordered by path.
    pub files: Vec<FileEntry>,
}

/// One file of a backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Relative, `/`-separated.
    pub path: String,
    /// Bytes.
    pub size: u64,
    /// SHA-256 of the content, lowercase hex.
    pub sha256: String,
}

/// Why a backup cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// There is no backup there at all.
    #[error("{0} is not a directory")]
    NotADirectory(PathBuf),
    /// No manifest: the backup was interrupted, or is still being written.
    #[error(
        "{0} is incomplete: it has no {MANIFEST} (the backup was interrupted, or is still being \
         written); take another backup"
    )]
    Incomplete(PathBuf),
    /// The manifest cannot be read as one.
    #[error("the manifest of {0} is damaged: {1}")]
    BadManifest(PathBuf, String),
    /// Written by a newer quintet.
    #[error(
        "{0} was written by a newer quintet (backup format version {1}; this quintet reads \
         version {VERSION}): restore it with that version or a later one"
    )]
    Newer(PathBuf, u32),
    /// A file differs from what the manifest says.
    #[error("{path} in the backup {why}: the backup was changed or damaged since it was taken")]
    Mismatch {
        /// The file, relative to the backup.
        path: String,
        /// How it differs.
        why: String,
    },
    /// Reading the backup failed.
    #[error("cannot read {0}: {1}")]
    Io(PathBuf, io::Error),
}

/// SHA-256 of a file's content and its length.
pub(crate) fn hash_file(path: &Path) -> io::Result<(u64, String)> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0; CHUNK];
    let mut len = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        len += n as u64;
    }
    Ok((len, hex(&hasher.finalize())))
}

fn hex(bytes: &[u8]) -> String {
    quintet_core::hmac::to_hex(bytes)
}

/// A manifest path as a relative path that stays inside its directory, or `None`.
fn safe_relative(path: &str) -> Option<PathBuf> {
    let p = Path::new(path);
    if path.is_empty() || p.is_absolute() || path.contains('\\') {
        return None;
    }
    p.components()
        .all(|c| matches!(c, Component::Normal(_)))
        .then(|| p.to_path_buf())
}

impl Manifest {
    /// Write the manifest into `dir` atomically (a temporary file, synced, renamed, the
    /// directory synced): once it is there, the backup is complete.
    pub fn write(&self, dir: &Path) -> io::Result<()> {
        let tmp = dir.join(format!("{MANIFEST}.tmp"));
        let mut text = serde_json::to_vec_pretty(self).map_err(io::Error::other)?;
        text.push(b'\n');
        let mut file = File::create(&tmp)?;
        file.write_all(&text)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, dir.join(MANIFEST))?;
        crate::datadir::sync_dir(dir)
    }

    /// The manifest of the backup in `dir`, read but not checked against the files.
    pub fn read(dir: &Path) -> Result<Self, VerifyError> {
        if !dir.is_dir() {
            return Err(VerifyError::NotADirectory(dir.to_owned()));
        }
        let path = dir.join(MANIFEST);
        let text = match fs::read(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(VerifyError::Incomplete(dir.to_owned()));
            }
            Err(e) => return Err(VerifyError::Io(path, e)),
        };
        let value: serde_json::Value = serde_json::from_slice(&text)
            .map_err(|e| VerifyError::BadManifest(dir.to_owned(), e.to_string()))?;
        if value["format"] != FORMAT {
            return Err(VerifyError::BadManifest(
                dir.to_owned(),
                format!("it does not say \"format\": \"{FORMAT}\""),
            ));
        }
        if let Some(v) = value["version"].as_u64()
            && v > u64::from(VERSION)
        {
            return Err(VerifyError::Newer(
                dir.to_owned(),
                u32::try_from(v).unwrap_or(u32::MAX),
            ));
        }
        let manifest: Self = serde_json::from_value(value)
            .map_err(|e| VerifyError::BadManifest(dir.to_owned(), e.to_string()))?;
        for path in manifest.files.iter().map(|f| &f.path).chain(&manifest.dirs) {
            if safe_relative(path).is_none() || path == MANIFEST {
                return Err(VerifyError::BadManifest(
                    dir.to_owned(),
                    format!("it names \"{path}\", which is not a path inside the backup"),
                ));
            }
        }
        Ok(manifest)
    }
}

/// Check the backup in `dir`: its manifest is there and readable, every file it lists has
/// its size and checksum, and no other file is there. `progress` is told the bytes checked
/// so far after each step.
pub fn verify(dir: &Path, progress: &(dyn Fn(u64) + Sync)) -> Result<Manifest, VerifyError> {
    let manifest = Manifest::read(dir)?;
    let listed: BTreeSet<&str> = manifest.files.iter().map(|f| f.path.as_str()).collect();
    for found in walk(dir).map_err(|e| VerifyError::Io(dir.to_owned(), e))? {
        if found != MANIFEST && !listed.contains(found.as_str()) {
            return Err(VerifyError::Mismatch {
                path: found,
                why: "is not in the manifest".into(),
            });
        }
    }
    let done = std::sync::atomic::AtomicU64::new(0);
    let check = |entry: &FileEntry| -> Result<(), VerifyError> {
        let path = dir.join(&entry.path);
        let (size, sum) = match hash_file(&path) {
            Ok(x) => x,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(VerifyError::Mismatch {
                    path: entry.path.clone(),
                    why: "is missing".into(),
                });
            }
            Err(e) => return Err(VerifyError::Io(path, e)),
        };
        if size != entry.size {
            return Err(VerifyError::Mismatch {
                path: entry.path.clone(),
                why: format!("has {size} bytes, not {}", entry.size),
            });
        }
        if sum != entry.sha256 {
            return Err(VerifyError::Mismatch {
                path: entry.path.clone(),
                why: "does not match its checksum".into(),
            });
        }
        let now = done.fetch_add(size, std::sync::atomic::Ordering::Relaxed) + size;
        progress(now);
        Ok(())
    };
    super::parallel(&manifest.files, check)?;
    Ok(manifest)
}

/// Every file under `dir`, relative and `/`-separated (directories are walked, not listed).
pub(crate) fn walk(dir: &Path) -> io::Result<Vec<String>> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((at, prefix)) = stack.pop() {
        for entry in fs::read_dir(&at)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let rel = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            if entry.file_type()?.is_dir() {
                stack.push((entry.path(), rel));
            } else {
                out.push(rel);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Why a restore did not happen.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// The backup failed its verification.
    #[error(transparent)]
    Verify(#[from] VerifyError),
    /// The target holds something and `force` was not given.
    #[error(
        "{0} is not empty: restore into an empty or new directory, or pass --force to replace \
         what it holds"
    )]
    NotEmpty(PathBuf),
    /// The target is locked by a running server, or cannot be a data directory.
    #[error("{0}")]
    Target(String),
    /// Copying failed.
    #[error("restoring into {0} failed: {1}")]
    Io(PathBuf, io::Error),
}

/// Restore the backup in `src` into the data directory `dst`: verify the backup, refuse a
/// `dst` that holds anything unless `force` (then its content is removed first), copy
/// every file (checking each checksum again as it is copied) and sync. `progress` is told
/// the bytes verified, then the bytes copied. On failure a directory that was new or empty
/// is left empty.
pub fn restore(
    src: &Path,
    dst: &Path,
    force: bool,
    progress: &(dyn Fn(&str, u64, u64) + Sync),
) -> Result<Manifest, RestoreError> {
    let total = Manifest::read(src)?.bytes;
    // Refused before the (long) verification; checked again under the lock below.
    let holds_something = fs::read_dir(dst)
        .is_ok_and(|mut entries| entries.any(|e| e.is_ok_and(|e| e.file_name() != "LOCK")));
    if holds_something && !force {
        return Err(RestoreError::NotEmpty(dst.to_owned()));
    }
    let manifest = verify(src, &|done| progress("verify", done, total))?;
    let dir = DataDir::open(dst).map_err(|e| RestoreError::Target(e.to_string()))?;
    if dir.found() == Found::Used {
        let held: Vec<_> = fs::read_dir(dst)
            .map_err(|e| RestoreError::Io(dst.to_owned(), e))?
            .filter_map(Result::ok)
            .filter(|e| e.file_name() != "LOCK")
            .collect();
        if !held.is_empty() {
            if !force {
                dir.abandon();
                return Err(RestoreError::NotEmpty(dst.to_owned()));
            }
            for entry in held {
                let path = entry.path();
                let removed = if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    fs::remove_dir_all(&path)
                } else {
                    fs::remove_file(&path)
                };
                removed.map_err(|e| RestoreError::Io(path, e))?;
            }
        }
    }
    match copy_in(src, &dir, &manifest, progress) {
        Ok(()) => Ok(manifest),
        Err(e) => {
            if dir.found() != Found::Used {
                dir.abandon();
            }
            Err(e)
        }
    }
}

fn copy_in(
    src: &Path,
    dir: &DataDir,
    manifest: &Manifest,
    progress: &(dyn Fn(&str, u64, u64) + Sync),
) -> Result<(), RestoreError> {
    let root = dir.root();
    let io_err = |p: &Path| {
        let p = p.to_owned();
        move |e| RestoreError::Io(p, e)
    };
    let mut dirs: BTreeSet<PathBuf> = manifest.dirs.iter().map(|d| root.join(d)).collect();
    for f in &manifest.files {
        if let Some(parent) = Path::new(&f.path).parent()
            && !parent.as_os_str().is_empty()
        {
            dirs.insert(root.join(parent));
        }
    }
    for d in &dirs {
        fs::create_dir_all(d).map_err(io_err(d))?;
    }
    let done = std::sync::atomic::AtomicU64::new(0);
    let copy = |entry: &FileEntry| -> Result<(), RestoreError> {
        let (from, to) = (src.join(&entry.path), root.join(&entry.path));
        let sum = copy_hashed(&from, &to).map_err(io_err(&to))?;
        if sum != entry.sha256 {
            return Err(VerifyError::Mismatch {
                path: entry.path.clone(),
                why: "changed while it was restored".into(),
            }
            .into());
        }
        let now = done.fetch_add(entry.size, std::sync::atomic::Ordering::Relaxed) + entry.size;
        progress("restore", now, manifest.bytes);
        Ok(())
    };
    super::parallel(&manifest.files, copy)?;
    for d in dirs.iter().chain(std::iter::once(&root.to_path_buf())) {
        crate::datadir::sync_dir(d).map_err(io_err(d))?;
    }
    Ok(())
}

/// Copy `from` to a new file `to`, synced; returns the SHA-256 of what was copied.
fn copy_hashed(from: &Path, to: &Path) -> io::Result<String> {
    let mut input = File::open(from)?;
    let mut output = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(to)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0; CHUNK];
    loop {
        let n = input.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        output.write_all(&buf[..n])?;
    }
    output.sync_all()?;
    Ok(hex(&hasher.finalize()))
}
