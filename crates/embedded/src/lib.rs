//! quintet's embedded adapters: everything in one data directory, nothing else installed.
//!
//! - [`registry::SqliteRegistry`]: applications, keys and instances (`registry.db`).
//! - [`data::SqliteDocStore`], [`queue::SqliteJobQueue`]: one SQLite file each, one table
//!   per instance.
//! - [`cache::EmbeddedCache`]: entries indexed in memory, every write appended to
//!   `cache.log`, or in memory only.
//! - [`search::TantivySearchIndex`]: one index directory per instance.
//! - [`storage::FsBlobStore`]: one directory of objects per instance, metadata in SQLite.
//!
//! [`backup`] copies the whole directory consistently while the stores serve.
//!
//! SQLite files are reached through [`sqlite::SqliteDb`]: one writer thread per file that
//! commits waiting writes together (group commit), and pooled readers. Adapters know
//! nothing of HTTP.

pub mod backup;
pub mod cache;
mod changelog;
pub mod data;
pub mod datadir;
pub mod disk;
pub mod hot;
pub mod instance_store;
pub mod queue;
pub mod registry;
pub mod search;
pub mod sqlite;
pub mod storage;

use std::{path::Path, sync::Arc};

use quintet_core::{Clock, Result, keyring::Keyring, object::UrlSigner};

/// Every embedded adapter, opened on one data directory.
#[derive(Debug)]
pub struct Embedded {
    /// The locked data directory; the lock is released when this is dropped.
    pub dir: datadir::DataDir,
    /// Applications, keys and instances.
    pub registry: Arc<registry::SqliteRegistry>,
    /// Documents.
    pub data: Arc<data::SqliteDocStore>,
    /// Cache entries.
    pub cache: Arc<cache::EmbeddedCache>,
    /// Full-text indexes.
    pub search: Arc<search::TantivySearchIndex>,
    /// Jobs.
    pub queue: Arc<queue::SqliteJobQueue>,
    /// Objects.
    pub storage: Arc<storage::FsBlobStore>,
    /// The directory's free space and the reserve kept for deletes.
    pub disk: Arc<disk::DiskSpace>,
}

/// Settings of the embedded adapters.
#[derive(Debug, Clone)]
pub struct EmbeddedOptions {
    /// The cache's size bound and durability.
    pub cache: cache::CacheOptions,
    /// The master keys: they seal the registry's secrets and sign pre-signed URLs.
    pub keyring: Arc<Keyring>,
    /// Bytes of free space kept for deletes (see [`disk`]); `None`: the default share of
    /// the file system.
    pub disk_reserve: Option<u64>,
}

impl EmbeddedOptions {
    /// Default settings with `keyring`.
    pub fn new(keyring: Arc<Keyring>) -> Self {
        Self {
            cache: cache::CacheOptions::default(),
            keyring,
            disk_reserve: None,
        }
    }
}

impl Embedded {
    /// Lock `data_dir` (creating it when missing) and open every adapter in it with
    /// default settings and a throwaway master key: for tests that never reopen the
    /// directory's secrets with another process.
    pub fn open(data_dir: &Path, clock: Arc<dyn Clock>) -> Result<Self> {
        Self::open_with(
            data_dir,
            clock,
            &EmbeddedOptions::new(Arc::new(Keyring::ephemeral()?)),
        )
    }

    /// Lock `data_dir` (creating it when missing) and open every adapter in it.
    pub fn open_with(
        data_dir: &Path,
        clock: Arc<dyn Clock>,
        options: &EmbeddedOptions,
    ) -> Result<Self> {
        let dir = datadir::DataDir::open(data_dir)?;
        // Every store writing to the directory admits its writes by the same reserve.
        let disk = Arc::new(disk::DiskSpace::new(dir.root(), options.disk_reserve)?);
        Ok(Self {
            registry: Arc::new(dir.registry(
                Arc::clone(&clock),
                Arc::clone(&options.keyring),
                &disk,
            )?),
            data: Arc::new(dir.data(Arc::clone(&clock), &disk)?),
            cache: Arc::new(dir.cache(Arc::clone(&clock), &options.cache, &disk)?),
            search: Arc::new(dir.search(&disk)?),
            queue: Arc::new(dir.queue(&disk)?),
            storage: Arc::new(dir.storage(
                clock,
                UrlSigner::from_keyring(&options.keyring),
                &disk,
            )?),
            disk,
            dir,
        })
    }
}

/// Each store of the data directory, opened (and created when missing) on its own, so a
/// node opens only the stores it uses; every one admits its writes by `disk`'s reserve.
impl datadir::DataDir {
    /// Applications, keys and instances (`registry.db`), secrets sealed with `keyring`.
    pub fn registry(
        &self,
        clock: Arc<dyn Clock>,
        keyring: Arc<Keyring>,
        disk: &Arc<disk::DiskSpace>,
    ) -> Result<registry::SqliteRegistry> {
        Ok(
            registry::SqliteRegistry::open(&self.join(datadir::REGISTRY), clock, keyring)?
                .with_disk(Arc::clone(disk)),
        )
    }

    /// Documents (`data.db`).
    pub fn data(
        &self,
        clock: Arc<dyn Clock>,
        disk: &Arc<disk::DiskSpace>,
    ) -> Result<data::SqliteDocStore> {
        Ok(
            data::SqliteDocStore::open(&self.join(datadir::DATA), clock)?
                .with_disk(Arc::clone(disk)),
        )
    }

    /// Cache entries (`cache.log`), with `options`.
    pub fn cache(
        &self,
        clock: Arc<dyn Clock>,
        options: &cache::CacheOptions,
        disk: &Arc<disk::DiskSpace>,
    ) -> Result<cache::EmbeddedCache> {
        cache::EmbeddedCache::open_on(&self.join(datadir::CACHE), clock, options, Arc::clone(disk))
    }

    /// Full-text indexes (`search/`).
    pub fn search(&self, disk: &Arc<disk::DiskSpace>) -> Result<search::TantivySearchIndex> {
        Ok(
            search::TantivySearchIndex::open(&self.join(datadir::SEARCH))?
                .with_disk(Arc::clone(disk)),
        )
    }

    /// Jobs (`queue.db`).
    pub fn queue(&self, disk: &Arc<disk::DiskSpace>) -> Result<queue::SqliteJobQueue> {
        Ok(queue::SqliteJobQueue::open(&self.join(datadir::QUEUE))?.with_disk(Arc::clone(disk)))
    }

    /// Objects (`storage.db`, `storage/`), their pre-signed URLs signed by `signer`.
    pub fn storage(
        &self,
        clock: Arc<dyn Clock>,
        signer: UrlSigner,
        disk: &Arc<disk::DiskSpace>,
    ) -> Result<storage::FsBlobStore> {
        Ok(storage::FsBlobStore::open(self.root(), clock, signer)?.with_disk(Arc::clone(disk)))
    }

    /// The free space of the directory's file system, with `reserve` kept for deletes
    /// (`None`: the default share).
    pub fn disk(&self, reserve: Option<u64>) -> Result<disk::DiskSpace> {
        disk::DiskSpace::new(self.root(), reserve)
    }
}
