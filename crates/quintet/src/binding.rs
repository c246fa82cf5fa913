//! Which registry a data directory belongs to.
//!
//! At start-up a node removes from its data directory the contents of every instance the
//! registry does not know (the sweep that repairs an interrupted destroy). Started by
//! mistake against another registry — `--registry` forgotten once, or pointed at another
//! database — that sweep would delete every instance's contents. So the first start
//! writes the registry's identity to `<data-dir>/registry-id` (`embedded`, or
//! `postgres:<id>` with the id created with the registry's tables), and every later start
//! with another registry is refused before anything is swept.
//!
//! A data directory from before this file existed belongs to its embedded registry.

use std::{
    fs,
    io::ErrorKind,
    path::{Path, PathBuf},
};

use anyhow::{Context, bail};

/// Name of the file inside the data directory.
pub const FILE: &str = "registry-id";

/// Path of the file of `data_dir`.
pub fn path(data_dir: &Path) -> PathBuf {
    data_dir.join(FILE)
}

/// Check that `data_dir` belongs to the registry `identity`, recording it on the first
/// start. `fresh` says the directory was created by this start.
pub fn check(data_dir: &Path, fresh: bool, identity: &str) -> anyhow::Result<()> {
    let path = path(data_dir);
    let recorded = match fs::read_to_string(&path) {
        Ok(text) => Some(text.trim().to_owned()),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let bound = match recorded {
        Some(bound) => bound,
        // Older data directories knew only the embedded registry.
        None if !fresh => "embedded".to_owned(),
        None => identity.to_owned(),
    };
    if bound != identity {
        bail!(
            "data directory {} belongs to registry \"{bound}\", but this start uses registry \
             \"{identity}\": starting would delete the contents of every instance that \
             registry does not know. Start with the --registry it was used with, or use \
             another --data-dir. (If the registry was replaced on purpose and those contents \
             may go, delete {})",
            data_dir.display(),
            path.display()
        );
    }
    fs::write(&path, format!("{identity}\n"))
        .with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_stays_with_its_registry() {
        let dir = tempfile::tempdir().unwrap();
        check(dir.path(), true, "postgres:abc").unwrap();
        check(dir.path(), false, "postgres:abc").unwrap();
        let err = check(dir.path(), false, "embedded").unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("belongs to registry \"postgres:abc\"") && msg.contains("--registry"),
            "{msg}"
        );
        assert!(check(dir.path(), false, "postgres:other").is_err());
    }

    #[test]
    fn an_older_directory_belongs_to_the_embedded_registry() {
        let dir = tempfile::tempdir().unwrap();
        assert!(check(dir.path(), false, "postgres:abc").is_err());
        check(dir.path(), false, "embedded").unwrap();
        assert_eq!(
            fs::read_to_string(path(dir.path())).unwrap().trim(),
            "embedded"
        );
    }
}
