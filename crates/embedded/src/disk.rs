//! Free space on the data directory's file system, kept for deletes.
//!
//! A full disk must not stop an operator from freeing space through quintet, and deletes
//! need a little room themselves (SQLite writes a dropped table's pages to its WAL, the
//! cache log appends a removal record). So quintet keeps a reserve: every write to the
//! data directory first asks [`DiskSpace::admit`], which refuses it with
//! [`Error::InsufficientStorage`] (507) while less than the reserve is free; deletes do not
//! ask, and use the reserve. Once space is freed the next write is admitted.
//!
//! Checking costs a `statvfs`: at most one every [`CHECK_EVERY`] while space is
//! plentiful, one per write while it is short, so a freed disk is noticed by the very next
//! write. A write that fails anyway for lack of space (another program filled the disk,
//! or one upload is larger than what is left) answers 507 too: every adapter maps the
//! operating system's `ENOSPC` and SQLite's `SQLITE_FULL` to it.
//!
//! The reserve protects deletes from quintet's own writes; it cannot stop another program
//! from taking the last byte. Keep the data directory on a file system of its own.

use std::{
    fs,
    path::{Path, PathBuf},
    sync::{
        OnceLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use quintet_core::{Error, Result};

/// Most space kept free by default.
pub const DEFAULT_RESERVE_MAX: u64 = 64 * 1024 * 1024;

/// Share of the file system kept free by default, when it is smaller than
/// [`DEFAULT_RESERVE_MAX`]: one part in this many (5 %).
pub const DEFAULT_RESERVE_SHARE: u64 = 20;

/// Longest a write trusts the last look at the free space while it was plentiful.
pub const CHECK_EVERY: Duration = Duration::from_millis(10);

/// The file [`DiskSpace::ready`] writes to find out whether the directory is writable.
const PROBE_FILE: &str = ".ready-probe";

/// The free space of one data directory's file system, and the reserve kept for deletes.
#[derive(Debug)]
pub struct DiskSpace {
    root: PathBuf,
    /// Bytes that must stay free for writes to be admitted; 0 admits every write.
    reserve: u64,
    short: AtomicBool,
    /// Nanoseconds since [`epoch`] of the next look at the file system.
    next_check: AtomicU64,
}

/// A fixed instant times are measured from, so they fit an atomic.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_nanos() -> u64 {
    u64::try_from(epoch().elapsed().as_nanos()).unwrap_or(u64::MAX)
}

impl DiskSpace {
    /// The space of the file system holding `root`, keeping `reserve` bytes free, or by
    /// default 5 % of the file system, at most 64 MiB.
    pub fn new(root: &Path, reserve: Option<u64>) -> Result<Self> {
        let reserve = match reserve {
            Some(bytes) => bytes,
            None => {
                let size = space(root)?.size;
                (size / DEFAULT_RESERVE_SHARE).min(DEFAULT_RESERVE_MAX)
            }
        };
        Ok(Self {
            root: root.to_owned(),
            reserve,
            short: AtomicBool::new(false),
            next_check: AtomicU64::new(0),
        })
    }

    /// A check that admits every write: for stores opened on their own in tests.
    pub fn unchecked(root: &Path) -> Self {
        Self {
            root: root.to_owned(),
            reserve: 0,
            short: AtomicBool::new(false),
            next_check: AtomicU64::new(u64::MAX),
        }
    }

    /// The bytes kept free for deletes.
    pub fn reserve(&self) -> u64 {
        self.reserve
    }

    /// Before a write: `Ok` while more than the reserve is free, else the 507 to answer.
    pub fn admit(&self) -> Result<()> {
        if self.reserve == 0 {
            return Ok(());
        }
        let now = now_nanos();
        if !self.short.load(Ordering::Acquire) && now < self.next_check.load(Ordering::Acquire) {
            return Ok(());
        }
        let free = match space(&self.root) {
            Ok(s) => s.free,
            // Cannot tell: let the write find out.
            Err(_) => return Ok(()),
        };
        let short = free < self.reserve;
        let was_short = self.short.swap(short, Ordering::AcqRel);
        let step = u64::try_from(CHECK_EVERY.as_nanos()).unwrap_or(u64::MAX);
        self.next_check
            .store(now.saturating_add(step), Ordering::Release);
        if short && !was_short {
            tracing::warn!(
                dir = %self.root.display(),
                free,
                reserve = self.reserve,
                "the data directory's disk is full: writes are refused (507) until space is freed; deletes still work"
            );
        } else if !short && was_short {
            tracing::info!(dir = %self.root.display(), free, "disk space is available again: writes are accepted");
        }
        if short {
            return Err(self.full(free));
        }
        Ok(())
    }

    /// Whether `bytes` more can be taken while leaving the reserve free (always, without
    /// a reserve): for space taken ahead of need, such as the cache log's zero-filled run.
    pub fn has_room(&self, bytes: u64) -> bool {
        if self.reserve == 0 {
            return true;
        }
        space(&self.root).is_ok_and(|s| s.free >= self.reserve.saturating_add(bytes))
    }

    fn full(&self, free: u64) -> Error {
        Error::InsufficientStorage(format!(
            "the server's disk is full ({} free, {} kept for deletes): the write was refused; \
             deletes still work, and writes succeed again once space is freed",
            mib(free),
            mib(self.reserve)
        ))
    }

    /// For readiness: `Ok` when the directory can be written and more than the reserve is
    /// free, else what is wrong.
    pub fn ready(&self) -> Result<()> {
        let probe = self.root.join(PROBE_FILE);
        fs::write(&probe, b"ok")
            .and_then(|()| fs::remove_file(&probe))
            .map_err(|e| {
                if quintet_core::error::io_is_disk_full(&e) {
                    self.full(0)
                } else {
                    Error::Unavailable(format!("the data directory cannot be written: {e}"))
                }
            })?;
        // A fresh look, whatever the last one said.
        self.next_check.store(0, Ordering::Release);
        self.admit().map_err(|e| match e {
            Error::InsufficientStorage(_) => Error::InsufficientStorage(format!(
                "the data directory's disk is full: less than {} free; writes are refused \
                 until space is freed",
                mib(self.reserve)
            )),
            other => other,
        })
    }
}

/// Size and free space (for unprivileged users) of the file system holding `path`.
struct Space {
    size: u64,
    free: u64,
}

fn space(path: &Path) -> Result<Space> {
    let st = rustix::fs::statvfs(path)
        .map_err(|e| Error::internal(format!("statvfs {}: {e}", path.display())))?;
    Ok(Space {
        size: st.f_blocks.saturating_mul(st.f_frsize),
        free: st.f_bavail.saturating_mul(st.f_frsize),
    })
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_reserve_is_a_share_of_the_file_system_at_most_64_mib() {
        let dir = tempfile::tempdir().unwrap();
        let size = space(dir.path()).unwrap().size;
        let d = DiskSpace::new(dir.path(), None).unwrap();
        assert_eq!(d.reserve(), (size / 20).min(DEFAULT_RESERVE_MAX));
        assert_eq!(DiskSpace::new(dir.path(), Some(7)).unwrap().reserve(), 7);
    }

    #[test]
    fn a_reserve_larger_than_the_free_space_refuses_writes_until_it_is_lowered() {
        let dir = tempfile::tempdir().unwrap();
        let free = space(dir.path()).unwrap().free;
        let full = DiskSpace::new(dir.path(), Some(free.saturating_mul(2).max(1 << 40))).unwrap();
        let e = full.admit().unwrap_err();
        assert!(
            matches!(&e, Error::InsufficientStorage(m) if m.contains("deletes still work")),
            "{e:?}"
        );
        assert!(matches!(full.ready(), Err(Error::InsufficientStorage(_))));
        let roomy = DiskSpace::new(dir.path(), Some(1)).unwrap();
        roomy.admit().unwrap();
        roomy.ready().unwrap();
        assert!(!dir.path().join(PROBE_FILE).exists());
        DiskSpace::unchecked(dir.path()).admit().unwrap();
    }

    #[test]
    fn an_unwritable_directory_is_not_ready() {
        let dir = tempfile::tempdir().unwrap();
        let gone = DiskSpace::new(dir.path(), Some(1)).unwrap();
        drop(dir);
        assert!(matches!(gone.ready(), Err(Error::Unavailable(_))));
    }
}
