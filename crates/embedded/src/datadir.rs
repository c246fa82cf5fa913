//! The data directory: one place for everything the embedded adapters keep.
//!
//! ```text
//! <data-dir>/
//!   LOCK              held exclusively while a server uses the directory
//!   registry.db       applications, keys, instances (SQLite)
//!   data.db           documents and indexes (SQLite)
//!   cache.log         cache entries (append-only log)
//!   queue.db          jobs (SQLite)
//!   storage.db        object metadata: path → blob, size, type, etag (SQLite)
//!   search/<id>/      one full-text index per search instance
//!   storage/<id>/     one directory of blob files per storage instance
//! ```
//!
//! Each store is created when a node first uses it, so a node whose services all live
//! on shared engines keeps nothing here but the lock (and what the binary adds: the
//! admin token, the registry binding).

use std::{
    fs::{self, File, OpenOptions, TryLockError},
    path::{Path, PathBuf},
};

use quintet_core::{Error, Result};

/// The registry's file.
pub const REGISTRY: &str = "registry.db";
/// The documents' file.
pub const DATA: &str = "data.db";
/// The cache's log.
pub const CACHE: &str = "cache.log";
/// The queues' file.
pub const QUEUE: &str = "queue.db";
/// The directory of the search indexes.
pub const SEARCH: &str = "search";

/// Every name a store of this crate creates in the data directory, earlier versions'
/// included (`cache.db`).
pub const STORES: &[&str] = &[
    REGISTRY,
    DATA,
    CACHE,
    "cache.db",
    QUEUE,
    SEARCH,
    crate::storage::DB,
    crate::storage::DIR,
    crate::storage::KEY,
];

/// Why `root` cannot be a data directory, as the operator should hear it (these are
/// mistakes in the settings, not faults of the server): `action` is what failed.
fn unusable(root: &Path, action: &str, e: &std::io::Error) -> Error {
    use std::io::ErrorKind;
    let path = root.display();
    let why = match e.kind() {
        ErrorKind::NotADirectory | ErrorKind::AlreadyExists => format!(
            "{path} is a file, or lies under one: give --data-dir a directory (it is created \
             when missing)"
        ),
        ErrorKind::PermissionDenied => format!(
            "this user may not {action} {path}: give --data-dir a directory the server's \
             user owns, or change the directory's owner"
        ),
        ErrorKind::ReadOnlyFilesystem => {
            format!("{path} is on a read-only file system: give --data-dir a writable directory")
        }
        ErrorKind::StorageFull | ErrorKind::QuotaExceeded => {
            format!("the disk holding {path} is full: free some space or choose another --data-dir")
        }
        _ => format!("cannot {action} {path} ({e}): check --data-dir"),
    };
    Error::Invalid(why)
}

/// What a data directory held when it was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// It did not exist: this open created it.
    Missing,
    /// It existed with no entry (a pre-created directory: a volume, a package's, systemd's
    /// `StateDirectory`).
    Empty,
    /// It held something.
    Used,
}

/// An opened data directory, locked against a second server for as long as it lives.
#[derive(Debug)]
pub struct DataDir {
    root: PathBuf,
    found: Found,
    /// Whether this open created the `LOCK` file.
    created_lock: bool,
    _lock: File,
}

impl DataDir {
    /// Create `root` when missing and take its lock. Fails when another process holds it.
    pub fn open(root: &Path) -> Result<Self> {
        let found = match fs::read_dir(root).map(|mut entries| entries.next().is_none()) {
            Ok(true) => Found::Empty,
            Ok(false) => Found::Used,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Found::Missing,
            Err(e) => return Err(unusable(root, "read", &e)),
        };
        fs::create_dir_all(root).map_err(|e| unusable(root, "create", &e))?;
        let lock_path = root.join("LOCK");
        let created_lock = !lock_path.exists();
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| unusable(root, "write in", &e))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(Error::Unavailable(format!(
                    "data directory {} is in use by another quintet server",
                    root.display()
                )));
            }
            Err(TryLockError::Error(e)) => {
                return Err(Error::internal(format!(
                    "cannot lock {}: {e}",
                    lock_path.display()
                )));
            }
        }
        Ok(Self {
            root: root.to_owned(),
            found,
            created_lock,
            _lock: lock,
        })
    }

    /// The directory's path.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// What the directory held before this open.
    pub fn found(&self) -> Found {
        self.found
    }

    /// Whether a store of this crate keeps anything here ([`STORES`]).
    pub fn holds_stores(&self) -> bool {
        STORES.iter().any(|name| self.join(name).exists())
    }

    /// Give the directory up after a start that failed, leaving it as it was found: a
    /// directory this open created is removed, one found empty is emptied again, and from
    /// one that held something only the lock file goes, if this open created it (what the
    /// start added to existing stores stays). Then the lock is released.
    pub fn abandon(self) {
        let emptied = match self.found {
            Found::Missing => fs::remove_dir_all(&self.root),
            Found::Empty => fs::read_dir(&self.root).and_then(|entries| {
                entries.into_iter().try_for_each(|entry| {
                    let path = entry?.path();
                    if path.is_dir() {
                        fs::remove_dir_all(path)
                    } else {
                        fs::remove_file(path)
                    }
                })
            }),
            Found::Used if self.created_lock => fs::remove_file(self.join("LOCK")),
            Found::Used => Ok(()),
        };
        if let Err(e) = emptied {
            tracing::warn!(
                dir = %self.root.display(),
                error = %e,
                "could not remove what a failed start created in the data directory"
            );
        }
    }

    /// Path of a file or directory directly inside the data directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }
}

/// Make the entries of `dir` (a created or renamed file) durable.
pub(crate) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The directory holding `path` (`.` for a bare file name).
pub(crate) fn dir_of(path: &Path) -> PathBuf {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// Remove the file at `path`; returns whether there was one.
pub(crate) fn remove_file_if_present(path: &Path) -> std::io::Result<bool> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abandoning_leaves_the_directory_as_it_was_found() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let opened = DataDir::open(&missing).unwrap();
        assert_eq!(opened.found(), Found::Missing);
        fs::write(opened.join(DATA), "x").unwrap();
        opened.abandon();
        assert!(!missing.exists());

        let empty = dir.path().join("empty");
        fs::create_dir(&empty).unwrap();
        let opened = DataDir::open(&empty).unwrap();
        assert_eq!(opened.found(), Found::Empty);
        assert!(!opened.holds_stores());
        fs::create_dir_all(opened.join(SEARCH).join("1")).unwrap();
        assert!(opened.holds_stores());
        opened.abandon();
        assert_eq!(fs::read_dir(&empty).unwrap().count(), 0);

        fs::write(empty.join("registry-id"), "embedded").unwrap();
        let used = DataDir::open(&empty).unwrap();
        assert_eq!(used.found(), Found::Used);
        used.abandon();
        assert_eq!(fs::read_dir(&empty).unwrap().count(), 1, "only registry-id");

        drop(DataDir::open(&empty).unwrap());
        let used = DataDir::open(&empty).unwrap();
        fs::write(used.join(REGISTRY), "x").unwrap();
        used.abandon();
        assert!(empty.join(REGISTRY).exists() && empty.join("LOCK").exists());
    }

    #[test]
    fn a_second_open_is_refused_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let first = DataDir::open(dir.path()).unwrap();
        assert!(matches!(
            DataDir::open(dir.path()),
            Err(Error::Unavailable(_))
        ));
        drop(first);
        assert!(DataDir::open(dir.path()).is_ok());
    }
}
