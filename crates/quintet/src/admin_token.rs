//! The admin token kept in the data directory when none is configured.
//!
//! On the first start without `--admin-token`, quintet generates a token (32 random bytes,
//! unpadded base64url), writes it to `<data-dir>/admin-token` readable by its owner only
//! (0600), and the binary prints it once. Later starts read it back, and so do the admin
//! commands (`quintet key create …`) on the same machine.

use std::{
    fs,
    io::{ErrorKind, Write},
    path::{Path, PathBuf},
};

use anyhow::{Context, bail};
use quintet_core::keys::Secret;

/// Name of the token file inside the data directory.
pub const FILE: &str = "admin-token";

/// Path of the token file of `data_dir`.
pub fn path(data_dir: &Path) -> PathBuf {
    data_dir.join(FILE)
}

/// The stored token of `data_dir`, if there is one.
pub fn read(data_dir: &Path) -> anyhow::Result<Option<Secret>> {
    let path = path(data_dir);
    match fs::read_to_string(&path) {
        Ok(text) => {
            let token = text.trim();
            if token.is_empty() {
                bail!(
                    "{} is empty; delete it to generate a new admin token",
                    path.display()
                );
            }
            warn_if_readable_by_others(&path);
            Ok(Some(Secret::from_stored(token)))
        }
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// A new token, written to `data_dir` (owner-only); it must be shown to the operator.
pub fn create(data_dir: &Path) -> anyhow::Result<Secret> {
    let token = Secret::generate()?;
    let path = path(data_dir);
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(&path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    file.write_all(format!("{}\n", token.expose()).as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(token)
}

/// Keep the data directory private: it holds the admin token and the secrets of every
/// access key (they must be stored readable, to verify tokens and to be revealed). A
/// directory this start created (`created`) is made owner-only (0700); for an existing one
/// that other users can enter, a warning is logged and nothing is changed.
pub fn protect_data_dir(data_dir: &Path, created: bool) -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if created {
            fs::set_permissions(data_dir, fs::Permissions::from_mode(0o700)).with_context(
                || format!("cannot make {} private (chmod 700)", data_dir.display()),
            )?;
        } else if let Ok(meta) = fs::metadata(data_dir)
            && meta.permissions().mode() & 0o077 != 0
        {
            tracing::warn!(
                path = %data_dir.display(),
                "the data directory is accessible to other users and holds the secrets of \
                 every access key; run chmod 700 on it"
            );
        }
    }
    #[cfg(not(unix))]
    let _ = (data_dir, created);
    Ok(())
}

#[cfg(unix)]
fn warn_if_readable_by_others(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(
            path = %path.display(),
            "the admin token file is readable by other users; run chmod 600 on it"
        );
    }
}

#[cfg(not(unix))]
fn warn_if_readable_by_others(_: &Path) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_once_then_read_back_with_owner_only_permissions() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read(dir.path()).unwrap().is_none());
        let token = create(dir.path()).unwrap();
        assert_eq!(token.expose().len(), 43);
        assert_eq!(read(dir.path()).unwrap(), Some(token));
        assert!(create(dir.path()).is_err(), "never overwritten");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(path(dir.path())).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_new_data_directory_is_made_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        fs::create_dir(&data).unwrap();
        fs::set_permissions(&data, fs::Permissions::from_mode(0o755)).unwrap();
        protect_data_dir(&data, false).unwrap();
        assert_eq!(
            fs::metadata(&data).unwrap().permissions().mode() & 0o777,
            0o755
        );
        protect_data_dir(&data, true).unwrap();
        assert_eq!(
            fs::metadata(&data).unwrap().permissions().mode() & 0o777,
            0o700
        );
    }

    #[test]
    fn an_empty_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(path(dir.path()), "\n").unwrap();
        let err = read(dir.path()).unwrap_err();
        assert!(format!("{err}").contains("is empty"), "{err}");
    }
}
