//! Which registry a data directory belongs to.
//!
//! At start-up a node removes from its data directory the contents of every instance the
//! registry does not know (the sweep that repairs an interrupted destroy). Started by
//! mistake against another registry — `--registry` forgotten once, or pointed at another
//! database — that sweep would delete every instance's contents. So a node that keeps
//! stores in the directory writes the registry's identity to `<data-dir>/registry-id`
//! (`embedded`, or `postgres:<id>` with the id created with the registry's tables), and
//! every later start with another registry is refused before anything is opened.
//!
//! A directory holding stores but no such file (from before the file existed) belongs to
//! its embedded registry. A directory holding no store belongs to nobody: an empty,
//! pre-created one (a volume, systemd's `StateDirectory`), or one a node whose services
//! all live on shared engines used.

use std::{
    fs,
    io::ErrorKind,
    path::{Path, PathBuf},
};

use anyhow::{Context, bail};
use quintet_embedded::datadir::DataDir;

use crate::open::EMBEDDED_REGISTRY;

/// Name of the file inside the data directory.
pub const FILE: &str = "registry-id";

/// Path of the file of `data_dir`.
pub fn path(data_dir: &Path) -> PathBuf {
    data_dir.join(FILE)
}

/// Refuse to start on `dir` with the registry `identity` when the directory belongs to
/// another registry. Reads only.
pub fn check(dir: &DataDir, identity: &str) -> anyhow::Result<()> {
    let path = path(dir.root());
    let bound = match recorded(&path)? {
        Some(bound) => bound,
        // Stores of a version that wrote no binding: it knew only the embedded registry.
        None if dir.holds_stores() => EMBEDDED_REGISTRY.to_owned(),
        None => return Ok(()),
    };
    if bound == identity {
        return Ok(());
    }
    let remedy = if path.exists() {
        format!(
            "If the registry was replaced on purpose and those contents may go, delete {}",
            path.display()
        )
    } else {
        "Its stores predate the binding file and belong to the embedded registry".to_owned()
    };
    bail!(
        "data directory {} belongs to registry \"{bound}\", but this start uses registry \
         \"{identity}\": starting would delete the contents of every instance that registry \
         does not know. Start with the --registry it was used with, or use another \
         --data-dir. ({remedy})",
        dir.root().display(),
    )
}

/// Record that `data_dir` belongs to the registry `identity` (after [`check`] accepted it).
pub fn record(data_dir: &Path, identity: &str) -> anyhow::Result<()> {
    let path = path(data_dir);
    if recorded(&path)?.as_deref() == Some(identity) {
        return Ok(());
    }
    fs::write(&path, format!("{identity}\n"))
        .with_context(|| format!("cannot write {}", path.display()))
}

fn recorded(path: &Path) -> anyhow::Result<Option<String>> {
    match fs::read_to_string(path) {
        Ok(text) => Ok(Some(text.trim().to_owned())),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use quintet_embedded::datadir;

    use super::*;

    #[test]
    fn a_directory_stays_with_its_registry() {
        let dir = tempfile::tempdir().unwrap();
        let opened = DataDir::open(dir.path()).unwrap();
        check(&opened, "postgres:abc").unwrap();
        record(opened.root(), "postgres:abc").unwrap();
        check(&opened, "postgres:abc").unwrap();
        let msg = check(&opened, "embedded").unwrap_err().to_string();
        assert!(
            msg.contains("belongs to registry \"postgres:abc\"") && msg.contains("--registry"),
            "{msg}"
        );
        assert!(check(&opened, "postgres:other").is_err());
    }

    #[test]
    fn stores_without_a_binding_belong_to_the_embedded_registry() {
        let dir = tempfile::tempdir().unwrap();
        let opened = DataDir::open(dir.path()).unwrap();
        fs::write(opened.join(datadir::DATA), "").unwrap();
        let msg = check(&opened, "postgres:abc").unwrap_err().to_string();
        assert!(msg.contains("predate the binding file"), "{msg}");
        check(&opened, "embedded").unwrap();
    }

    #[test]
    fn a_directory_without_stores_belongs_to_nobody() {
        let dir = tempfile::tempdir().unwrap();
        let opened = DataDir::open(dir.path()).unwrap();
        fs::write(crate::admin_token::path(opened.root()), "token\n").unwrap();
        check(&opened, "postgres:abc").unwrap();
        check(&opened, "embedded").unwrap();
    }
}
