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
//! SQLite files are reached through [`sqlite::SqliteDb`]: one writer thread per file that
//! commits waiting writes together (group commit), and pooled readers. Adapters know
//! nothing of HTTP.

pub mod cache;
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

use quintet_core::{Clock, Result};

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
#[derive(Debug, Clone, Default)]
pub struct EmbeddedOptions {
    /// The cache's size bound and durability.
    pub cache: cache::CacheOptions,
    /// Bytes of free space kept for deletes (see [`disk`]); `None`: the default share of
    /// the file system.
    pub disk_reserve: Option<u64>,
}

impl Embedded {
    /// Lock `data_dir` (creating it when missing) and open every adapter in it with
    /// default settings.
    pub fn open(data_dir: &Path, clock: Arc<dyn Clock>) -> Result<Self> {
        Self::open_with(data_dir, clock, &EmbeddedOptions::default())
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
            registry: Arc::new(
                registry::SqliteRegistry::open(&dir.join("registry.db"), Arc::clone(&clock))?
                    .with_disk(Arc::clone(&disk)),
            ),
            data: Arc::new(
                data::SqliteDocStore::open(&dir.join("data.db"), Arc::clone(&clock))?
                    .with_disk(Arc::clone(&disk)),
            ),
            cache: Arc::new(cache::EmbeddedCache::open_on(
                &dir.join("cache.log"),
                Arc::clone(&clock),
                &options.cache,
                Arc::clone(&disk),
            )?),
            search: Arc::new(
                search::TantivySearchIndex::open(&dir.join("search"))?.with_disk(Arc::clone(&disk)),
            ),
            queue: Arc::new(
                queue::SqliteJobQueue::open(&dir.join("queue.db"))?.with_disk(Arc::clone(&disk)),
            ),
            storage: Arc::new(
                storage::FsBlobStore::open(dir.root(), Arc::clone(&clock))?
                    .with_disk(Arc::clone(&disk)),
            ),
            disk,
            dir,
        })
    }
}
