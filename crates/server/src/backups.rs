//! The node's backups, as the admin API sees them (`/_admin/backups`): the binary supplies
//! what writes them ([`Backups`]), this crate serves the calls and holds instance creation
//! and destruction while a backup fixes its point in time (see `routes::backups`).

use std::fmt::Debug;

use async_trait::async_trait;
use quintet_core::{Error, Result};
use serde::Serialize;

/// A backup's name: 1 to 100 of `A-Z a-z 0-9 . _ -`, starting with a letter or digit. Never
/// a path: it names a directory inside the configured backup directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupName(String);

impl BackupName {
    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for BackupName {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let ok = (1..=100).contains(&s.len())
            && s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if ok {
            Ok(Self(s.to_owned()))
        } else {
            Err(Error::invalid(format!(
                "\"{s}\" is not a backup name: use 1 to 100 letters, digits, '.', '_' and '-', \
                 starting with a letter or digit (a name, never a path)"
            )))
        }
    }
}

impl std::fmt::Display for BackupName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One backup as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackupInfo {
    /// Its name.
    pub name: String,
    /// `complete` (its manifest is written), `running`, or `incomplete` (interrupted).
    pub state: &'static str,
    /// When its point in time was taken (complete backups), RFC 3339.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    /// Bytes of its files (complete backups), or copied so far (a running one).
    pub bytes: u64,
    /// Files it holds (complete backups).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files: Option<usize>,
    /// Bytes a running backup will hold.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_bytes: Option<u64>,
    /// Where it lies on the server's machine.
    pub path: String,
}

/// What writes, lists and deletes the node's backups.
#[async_trait]
pub trait Backups: Send + Sync + Debug {
    /// Begin backup `name`: [`Error::Conflict`] when it exists or another backup runs.
    async fn begin(&self, name: &BackupName) -> Result<Box<dyn BackupRun>>;

    /// Every backup, ordered by name.
    async fn list(&self) -> Result<Vec<BackupInfo>>;

    /// Delete backup `name`: [`Error::NotFound`] when there is none, [`Error::Conflict`]
    /// while it is being written.
    async fn delete(&self, name: &BackupName) -> Result<()>;
}

/// A backup being taken.
#[async_trait]
pub trait BackupRun: Send {
    /// Fix the backup's point in time; quick. Called while no instance is created or
    /// destroyed.
    async fn capture(&mut self) -> Result<()>;

    /// Copy what was captured and write the manifest; the backup as listed.
    async fn finish(self: Box<Self>) -> Result<BackupInfo>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_names_never_paths() {
        for good in ["nightly", "2026-11-26T19.00", "a", "A_b-c.d"] {
            assert!(good.parse::<BackupName>().is_ok(), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "a/b",
            "/etc",
            ".hidden",
            "-x",
            "a b",
            "a\\b",
            "é",
            &"x".repeat(101),
        ] {
            assert!(bad.parse::<BackupName>().is_err(), "{bad:?}");
        }
    }
}
