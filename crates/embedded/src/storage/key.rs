//! The server key that signs pre-signed URLs: 32 random bytes in `presign.key`, created at
//! first start (mode 0600) and reused afterwards, so URLs outlive restarts.

use std::{
    fs::{self, OpenOptions},
    io::{self, Write},
    os::unix::fs::{OpenOptionsExt, PermissionsExt},
    path::Path,
};

use quintet_core::{Error, Result, object::UrlSigner};

use crate::datadir::sync_dir;

const LEN: usize = UrlSigner::KEY_LEN;

/// The key in `path`, created when missing.
pub(super) fn load_or_create(path: &Path) -> Result<[u8; LEN]> {
    match fs::read(path) {
        Ok(bytes) => {
            warn_if_readable_by_others(path);
            bytes.try_into().map_err(|bytes: Vec<u8>| {
                Error::internal(format!(
                    "the pre-signing key {} holds {} bytes instead of {LEN}; remove it to \
                     create a new one (URLs handed out before stop working)",
                    path.display(),
                    bytes.len()
                ))
            })
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => create(path),
        Err(e) => Err(Error::internal(format!(
            "cannot read the pre-signing key {}: {e}",
            path.display()
        ))),
    }
}

/// Write a new key beside `path` and rename it into place, so a crash never leaves a
/// short key behind.
fn create(path: &Path) -> Result<[u8; LEN]> {
    let key: [u8; LEN] = quintet_core::id::random_bytes(LEN)?
        .try_into()
        .map_err(|_| Error::internal("the random source gave a short key"))?;
    let tmp = path.with_extension("key.tmp");
    let write = || -> io::Result<()> {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(&key)?;
        file.sync_all()?;
        fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            sync_dir(dir)?;
        }
        Ok(())
    };
    write().map_err(|e| {
        Error::internal(format!(
            "cannot create the pre-signing key {}: {e}",
            path.display()
        ))
    })?;
    Ok(key)
}

fn warn_if_readable_by_others(path: &Path) {
    if let Ok(meta) = fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(
            path = %path.display(),
            "the pre-signing key is readable by other users; chmod 600 it"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_once_private_then_reused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("presign.key");
        let first = load_or_create(&path).unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(load_or_create(&path).unwrap(), first);
        assert!(!dir.path().join("presign.key.tmp").exists());
        let other = tempfile::tempdir().unwrap();
        assert_ne!(
            load_or_create(&other.path().join("presign.key")).unwrap(),
            first
        );
    }

    #[test]
    fn a_damaged_key_is_refused_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("presign.key");
        fs::write(&path, b"short").unwrap();
        let e = load_or_create(&path).unwrap_err().to_string();
        assert!(e.contains("presign.key") && e.contains("5 bytes"), "{e}");
    }
}
