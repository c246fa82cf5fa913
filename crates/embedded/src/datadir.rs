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
//!   presign.key       the key that signs pre-signed storage URLs (mode 0600)
//!   search/<id>/      one full-text index per search instance
//!   storage/<id>/     one directory of blob files per storage instance
//! ```

use std::{
    fs::{self, File, OpenOptions, TryLockError},
    path::{Path, PathBuf},
};

use quintet_core::{Error, Result};

/// An opened data directory, locked against a second server for as long as it lives.
#[derive(Debug)]
pub struct DataDir {
    root: PathBuf,
    _lock: File,
}

impl DataDir {
    /// Create `root` when missing and take its lock. Fails when another process holds it.
    pub fn open(root: &Path) -> Result<Self> {
        fs::create_dir_all(root).map_err(|e| {
            Error::internal(format!(
                "cannot create data directory {}: {e}",
                root.display()
            ))
        })?;
        let lock_path = root.join("LOCK");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| Error::internal(format!("cannot open {}: {e}", lock_path.display())))?;
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
            _lock: lock,
        })
    }

    /// The directory's path.
    pub fn root(&self) -> &Path {
        &self.root
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
