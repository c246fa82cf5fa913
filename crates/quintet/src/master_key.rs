//! Where a node's master key comes from, and the commands around it.
//!
//! The master key (see [`quintet_core::keyring`]) seals the secrets quintet stores and
//! derives the admin token and the key of pre-signed URLs, so it must not live with the
//! data it protects. In order:
//! - `--master-key` / `QUINTET_MASTER_KEY`: the key itself (64 hex digits);
//! - `--master-key-file` / `QUINTET_MASTER_KEY_FILE`: a file holding it;
//! - else `$XDG_CONFIG_HOME/quintet/master.key`, or `~/.config/quintet/master.key`.
//!
//! A key file that does not exist yet is created (0600, its directory 0700) with a new
//! random key. `--previous-master-key-file` adds the key being rotated out: values sealed
//! with it still open and are resealed at start, and its pre-signed URLs stay valid.
//!
//! `quintet admin-token` prints the admin token derived from the key, and `quintet
//! master-key generate` prints a new key.

use std::{
    fs,
    io::{ErrorKind, Write},
    path::{Path, PathBuf},
};

use anyhow::{Context, bail};
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use clap::{Args, Subcommand};
use quintet_core::keyring::{Keyring, MasterKey};

/// The purpose under which the generated admin token is derived.
const ADMIN_TOKEN_PURPOSE: &str = "admin-token";

/// Where a node finds its master keys, as configured.
#[derive(Debug, Clone)]
pub enum MasterKeySource {
    /// The key given as text (flag or environment), and the previous key's file.
    Given(Box<MasterKey>, Option<PathBuf>),
    /// A key file (created when missing), and the previous key's file.
    File(PathBuf, Option<PathBuf>),
}

impl MasterKeySource {
    /// The source named by the settings: the key text wins over a file, a file over the
    /// default path.
    pub fn new(
        key: Option<String>,
        file: Option<PathBuf>,
        previous: Option<PathBuf>,
    ) -> anyhow::Result<Self> {
        if let Some(text) = key {
            if file.is_some() {
                bail!("give --master-key or --master-key-file, not both");
            }
            let key = text.parse().context("--master-key is not valid")?;
            return Ok(Self::Given(Box::new(key), previous));
        }
        let file = match file {
            Some(f) => f,
            None => default_path()?,
        };
        Ok(Self::File(file, previous))
    }

    /// The file of the current key, when the key comes from one.
    pub fn file(&self) -> Option<&Path> {
        match self {
            Self::Given(..) => None,
            Self::File(f, _) => Some(f),
        }
    }

    /// Read the keys, creating the key file with a new key when it does not exist. The
    /// flag says whether the file was created now.
    pub fn load_or_create(&self) -> anyhow::Result<(Keyring, bool)> {
        let (current, created, previous) = match self {
            Self::Given(key, previous) => ((**key).clone(), false, previous),
            Self::File(path, previous) => {
                let (key, created) = read_or_create(path)?;
                (key, created, previous)
            }
        };
        let previous = match previous {
            Some(path) => vec![read(path)?.with_context(|| {
                format!(
                    "--previous-master-key-file {} does not exist",
                    path.display()
                )
            })?],
            None => Vec::new(),
        };
        Ok((Keyring::new(current, previous), created))
    }

    /// Read the keys without creating anything: for commands that talk to a server that
    /// already made its key.
    pub fn load(&self) -> anyhow::Result<Keyring> {
        match self {
            Self::Given(key, _) => Ok(Keyring::new((**key).clone(), Vec::new())),
            Self::File(path, _) => match read(path)? {
                Some(key) => Ok(Keyring::new(key, Vec::new())),
                None => bail!(
                    "no master key at {}: the server creates it on its first start; pass the \
                     server's --master-key-file, or QUINTET_MASTER_KEY",
                    path.display()
                ),
            },
        }
    }
}

/// `$XDG_CONFIG_HOME/quintet/master.key`, else `$HOME/.config/quintet/master.key`.
pub fn default_path() -> anyhow::Result<PathBuf> {
    let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = env("XDG_CONFIG_HOME") {
        return Ok(PathBuf::from(dir).join("quintet").join("master.key"));
    }
    if let Some(home) = env("HOME") {
        return Ok(PathBuf::from(home)
            .join(".config")
            .join("quintet")
            .join("master.key"));
    }
    bail!(
        "no place for the master key: neither XDG_CONFIG_HOME nor HOME is set; pass \
         --master-key-file (or QUINTET_MASTER_KEY)"
    )
}

/// The key in `path`, if the file exists.
pub fn read(path: &Path) -> anyhow::Result<Option<MasterKey>> {
    match fs::read_to_string(path) {
        Ok(text) => Ok(Some(text.parse().with_context(|| {
            format!("the master key file {} is not valid", path.display())
        })?)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// The key in `path`, or a new one written there (owner-only). The flag says whether it
/// was created now.
pub fn read_or_create(path: &Path) -> anyhow::Result<(MasterKey, bool)> {
    if let Some(key) = read(path)? {
        warn_if_open_to_others(path);
        return Ok((key, false));
    }
    let key = MasterKey::generate()?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        let mut builder = fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder
            .create(dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(mut file) => {
            file.write_all(format!("{}\n", key.to_text()).as_bytes())
                .and_then(|()| file.sync_all())
                .with_context(|| format!("cannot write {}", path.display()))?;
            Ok((key, true))
        }
        // Another process created it first: use its key.
        Err(e) if e.kind() == ErrorKind::AlreadyExists => match read(path)? {
            Some(key) => Ok((key, false)),
            None => bail!("{} vanished while being created", path.display()),
        },
        Err(e) => Err(e).with_context(|| format!("cannot create {}", path.display())),
    }
}

#[cfg(unix)]
fn warn_if_open_to_others(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(
            path = %path.display(),
            "the master key file is readable by other users; run chmod 600 on it"
        );
    }
}

#[cfg(not(unix))]
fn warn_if_open_to_others(_: &Path) {}

/// The admin token derived from `ring`'s current key: 32 bytes, unpadded base64url.
pub fn derived_admin_token(ring: &Keyring) -> String {
    URL_SAFE_NO_PAD.encode(ring.current().derive(ADMIN_TOKEN_PURPOSE))
}

/// Arguments of `quintet admin-token`.
#[derive(Debug, Args)]
pub struct AdminTokenArgs {
    /// The server's master key file [default: as `quintet serve` finds it]
    #[arg(long, env = "QUINTET_MASTER_KEY_FILE", value_name = "FILE")]
    pub master_key_file: Option<PathBuf>,

    /// The server's master key itself
    #[arg(
        long,
        env = "QUINTET_MASTER_KEY",
        value_name = "KEY",
        hide_env_values = true
    )]
    pub master_key: Option<String>,
}

/// Print the admin token a server derives from its master key (when it was started
/// without `--admin-token`).
pub fn run_admin_token(args: AdminTokenArgs) -> anyhow::Result<()> {
    let source = MasterKeySource::new(args.master_key, args.master_key_file, None)?;
    println!("{}", derived_admin_token(&source.load()?));
    Ok(())
}

/// `quintet master-key …`
#[derive(Debug, Subcommand)]
pub enum MasterKeyCommand {
    /// Print a new random master key (64 hex digits), e.g. to start a rotation or to give
    /// every node of a deployment the same key.
    Generate,
    /// Print the id of the key in a file (the id sealed values name).
    Id {
        /// The key file.
        file: PathBuf,
    },
}

/// Run `quintet master-key …`.
pub fn run_master_key(cmd: MasterKeyCommand) -> anyhow::Result<()> {
    match cmd {
        MasterKeyCommand::Generate => println!("{}", MasterKey::generate()?.to_text()),
        MasterKeyCommand::Id { file } => match read(&file)? {
            Some(key) => println!("{}", key.id()),
            None => bail!("{} does not exist", file.display()),
        },
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_file_is_created_owner_only_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("conf").join("master.key");
        let (key, created) = read_or_create(&path).unwrap();
        assert!(created);
        let (again, created) = read_or_create(&path).unwrap();
        assert!(!created);
        assert_eq!(key, again);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&path), 0o600);
            assert_eq!(mode(path.parent().unwrap()), 0o700);
        }
    }

    #[test]
    fn the_key_text_wins_and_previous_keys_join_the_ring() {
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("old.key");
        let (old_key, _) = read_or_create(&old).unwrap();
        let current = MasterKey::generate().unwrap();
        let source =
            MasterKeySource::new(Some(current.to_text()), None, Some(old.clone())).unwrap();
        let (ring, created) = source.load_or_create().unwrap();
        assert!(!created);
        assert_eq!(ring.current(), &current);
        assert!(ring.keys().any(|k| k == &old_key));
        assert!(
            MasterKeySource::new(Some(current.to_text()), Some(old), None).is_err(),
            "key and file together"
        );
        assert!(MasterKeySource::new(Some("nope".into()), None, None).is_err());
    }

    #[test]
    fn the_admin_token_follows_the_key() {
        let a = Keyring::ephemeral().unwrap();
        let b = Keyring::ephemeral().unwrap();
        assert_eq!(derived_admin_token(&a), derived_admin_token(&a));
        assert_ne!(derived_admin_token(&a), derived_admin_token(&b));
        assert_eq!(derived_admin_token(&a).len(), 43);
    }
}
