//! Opening the adapters a node's [`Adapters`] name: one small function per engine.
//!
//! Shared engines come first: opening them writes nothing into the data directory. Then
//! the caller checks that the directory belongs to the registry (see [`crate::binding`]),
//! and only then are the embedded stores opened, each only if a service uses it. So a
//! refused start has created nothing in the directory, and a node whose services all
//! live on shared engines creates no store there at all.

use std::sync::Arc;

use quintet_core::{
    Clock,
    keyring::Keyring,
    object::UrlSigner,
    ports::{
        cache::Cache, data::DocStore, queue::JobQueue, registry::Registry, search::SearchIndex,
        storage::ObjectStorage, storage_events::StorageEvents,
    },
};
use quintet_embedded::{cache::CacheOptions, datadir::DataDir, disk::DiskSpace};
use quintet_server::Services;

use crate::adapters::{Adapters, PgConfig, Place, RedisConfig, S3Config};

/// The identity of the embedded registry, for [`crate::binding`].
pub const EMBEDDED_REGISTRY: &str = "embedded";

/// What [`open`] opened.
#[derive(Debug)]
pub struct Opened {
    /// One adapter per port, for the HTTP layer.
    pub services: Services,
    /// Names the registry the node uses: [`EMBEDDED_REGISTRY`], or
    /// `postgres:<the registry's id>`.
    pub registry_identity: String,
    /// What a backup copies, when every service is embedded (see [`crate::backup`]).
    pub backup_source: Option<quintet_embedded::backup::Source>,
}

/// Open the adapters `adapters` names: those on shared engines, then, once `accept` agreed
/// to the registry's identity, the embedded ones in `dir` (the cache with `cache`).
pub async fn open(
    adapters: &Adapters,
    dir: &DataDir,
    cache: &CacheOptions,
    disk_reserve: Option<u64>,
    clock: Arc<dyn Clock>,
    ring: Arc<Keyring>,
    accept: impl FnOnce(&str) -> anyhow::Result<()>,
) -> anyhow::Result<Opened> {
    let mut shared = Shared::new(clock, Arc::clone(&ring));
    let registry = shared.registry(&adapters.registry).await?;
    let data = shared.data(&adapters.data).await?;
    let queue = shared.queue(&adapters.queue).await?;
    let search = shared.search(&adapters.search).await?;
    let shared_cache = shared.cache(&adapters.cache).await?;
    let storage = shared
        .storage(&adapters.storage, &adapters.registry)
        .await?;
    accept(&shared.identity)?;
    let local = Local {
        dir,
        clock: shared.clock,
        cache,
        ring,
        disk: std::cell::OnceCell::new(),
        disk_reserve,
        cache_store: std::cell::OnceCell::new(),
        blob_store: std::cell::OnceCell::new(),
    };
    let (storage, storage_events) = match storage {
        Some(shared) => shared,
        None => local.storage()?,
    };
    let services = Services {
        registry: registry.map_or_else(|| local.registry(), Ok)?,
        data: data.map_or_else(|| local.data(), Ok)?,
        cache: shared_cache.map_or_else(|| local.cache(), Ok)?,
        search: search.map_or_else(|| local.search(), Ok)?,
        queue: queue.map_or_else(|| local.queue(), Ok)?,
        storage,
        storage_events,
    };
    let all_embedded = [
        adapters.registry.is_shared(),
        adapters.data.is_shared(),
        adapters.cache.is_shared(),
        adapters.search.is_shared(),
        adapters.queue.is_shared(),
        adapters.storage.is_shared(),
    ]
    .iter()
    .all(|shared| !shared);
    let backup_source = all_embedded.then(|| {
        quintet_embedded::backup::Source::new(
            dir.root(),
            local.cache_store.get().cloned(),
            local.blob_store.get().cloned(),
        )
    });
    Ok(Opened {
        services,
        registry_identity: shared.identity,
        backup_source,
    })
}

/// The embedded stores of the data directory, each opened when asked for.
struct Local<'a> {
    dir: &'a DataDir,
    clock: Arc<dyn Clock>,
    cache: &'a CacheOptions,
    /// Seals the registry's secrets, and signs pre-signed URLs.
    ring: Arc<Keyring>,
    /// The free space every embedded store admits its writes by, measured on first use.
    disk: std::cell::OnceCell<Arc<DiskSpace>>,
    disk_reserve: Option<u64>,
    /// The cache and storage as opened, for backups, which ask them for their points.
    cache_store: std::cell::OnceCell<Arc<quintet_embedded::cache::EmbeddedCache>>,
    blob_store: std::cell::OnceCell<Arc<quintet_embedded::storage::FsBlobStore>>,
}

impl Local<'_> {
    fn registry(&self) -> anyhow::Result<Arc<dyn Registry>> {
        Ok(Arc::new(self.dir.registry(
            self.clock(),
            Arc::clone(&self.ring),
            self.disk()?,
        )?))
    }

    fn data(&self) -> anyhow::Result<Arc<dyn DocStore>> {
        Ok(Arc::new(self.dir.data(self.clock(), self.disk()?)?))
    }

    fn cache(&self) -> anyhow::Result<Arc<dyn Cache>> {
        let cache = Arc::new(self.dir.cache(self.clock(), self.cache, self.disk()?)?);
        let _ = self.cache_store.set(Arc::clone(&cache));
        Ok(cache)
    }

    fn search(&self) -> anyhow::Result<Arc<dyn SearchIndex>> {
        Ok(Arc::new(self.dir.search(self.disk()?)?))
    }

    fn queue(&self) -> anyhow::Result<Arc<dyn JobQueue>> {
        Ok(Arc::new(self.dir.queue(self.disk()?)?))
    }

    /// The filesystem store, which keeps its event logs itself.
    fn storage(&self) -> anyhow::Result<(Arc<dyn ObjectStorage>, Arc<dyn StorageEvents>)> {
        let signer = UrlSigner::from_keyring(&self.ring);
        let storage = Arc::new(self.dir.storage(self.clock(), signer, self.disk()?)?);
        let _ = self.blob_store.set(Arc::clone(&storage));
        Ok((storage.clone(), storage))
    }

    fn clock(&self) -> Arc<dyn Clock> {
        Arc::clone(&self.clock)
    }

    fn disk(&self) -> anyhow::Result<&Arc<DiskSpace>> {
        if let Some(disk) = self.disk.get() {
            return Ok(disk);
        }
        let disk = Arc::new(self.dir.disk(self.disk_reserve)?);
        Ok(self.disk.get_or_init(|| disk))
    }
}

/// The shared engines a node's adapters are opened on, with the PostgreSQL pools opened so
/// far (one per URL: adapters on one database share connections).
struct Shared {
    clock: Arc<dyn Clock>,
    /// Seals the shared registry's secrets.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    ring: Arc<Keyring>,
    /// The registry's identity, known once [`Shared::registry`] ran.
    identity: String,
    #[cfg(feature = "postgres")]
    pools: Vec<(String, quintet_postgres::PgDatabase)>,
}

impl Shared {
    fn new(clock: Arc<dyn Clock>, ring: Arc<Keyring>) -> Self {
        Self {
            clock,
            ring,
            identity: EMBEDDED_REGISTRY.to_owned(),
            #[cfg(feature = "postgres")]
            pools: Vec::new(),
        }
    }

    /// The registry on PostgreSQL, when `place` names it; it gives the identity.
    async fn registry(
        &mut self,
        place: &Place<PgConfig>,
    ) -> anyhow::Result<Option<Arc<dyn Registry>>> {
        Ok(match place.clone() {
            Place::Embedded => None,
            #[cfg(feature = "postgres")]
            Place::Shared(config) => {
                let (clock, ring) = (Arc::clone(&self.clock), Arc::clone(&self.ring));
                let registry = self
                    .postgres("the registry", &config, |db| {
                        quintet_postgres::PgRegistry::open(db, clock, ring)
                    })
                    .await?;
                self.identity = format!("postgres:{}", registry.id());
                Some(Arc::new(registry))
            }
        })
    }

    /// Documents on PostgreSQL, when `place` names it.
    async fn data(&mut self, place: &Place<PgConfig>) -> anyhow::Result<Option<Arc<dyn DocStore>>> {
        Ok(match place.clone() {
            Place::Embedded => None,
            #[cfg(feature = "postgres")]
            Place::Shared(config) => {
                let clock = Arc::clone(&self.clock);
                let store = self
                    .postgres("documents", &config, |db| {
                        quintet_postgres::PgDocStore::open(db, clock)
                    })
                    .await?;
                Some(Arc::new(store))
            }
        })
    }

    /// Jobs on PostgreSQL, when `place` names it.
    async fn queue(
        &mut self,
        place: &Place<PgConfig>,
    ) -> anyhow::Result<Option<Arc<dyn JobQueue>>> {
        Ok(match place.clone() {
            Place::Embedded => None,
            #[cfg(feature = "postgres")]
            Place::Shared(config) => {
                let clock = Arc::clone(&self.clock);
                let queue = self
                    .postgres("the queue", &config, |db| {
                        quintet_postgres::PgJobQueue::open(db, clock)
                    })
                    .await?;
                tracing::info!(node = %queue.node(), "this node delivers jobs of the shared queue");
                Some(Arc::new(queue))
            }
        })
    }

    /// Search indexes on PostgreSQL, when `place` names it.
    async fn search(
        &mut self,
        place: &Place<PgConfig>,
    ) -> anyhow::Result<Option<Arc<dyn SearchIndex>>> {
        Ok(match place.clone() {
            Place::Embedded => None,
            #[cfg(feature = "postgres")]
            Place::Shared(config) => {
                let index = self
                    .postgres("search", &config, quintet_postgres::PgSearchIndex::open)
                    .await?;
                Some(Arc::new(index))
            }
        })
    }

    /// Open `what` with `open` on the pool of `config`'s URL (opened on first use).
    #[cfg(feature = "postgres")]
    async fn postgres<T, F>(
        &mut self,
        what: &str,
        config: &PgConfig,
        open: impl FnOnce(quintet_postgres::PgDatabase) -> F,
    ) -> anyhow::Result<T>
    where
        F: Future<Output = quintet_core::Result<T>>,
    {
        use anyhow::Context as _;
        let url = config.redacted_url();
        let known = self.pools.iter().find(|(u, _)| *u == config.url);
        let db = match known {
            Some((_, db)) => db.clone(),
            None => {
                let db = quintet_postgres::PgDatabase::connect(config)
                    .await
                    .with_context(|| format!("cannot open {what} on PostgreSQL at {url}"))?;
                self.pools.push((config.url.clone(), db.clone()));
                db
            }
        };
        let schema = db.schema().to_owned();
        let opened = open(db)
            .await
            .with_context(|| format!("cannot open {what} on PostgreSQL at {url}"))?;
        tracing::info!(%url, %schema, "{what} on PostgreSQL, shared by every node");
        Ok(opened)
    }

    /// The cache on Redis, when `place` names it. Its keys go under
    /// `quintet:<registry identity>:`, so deployments on different registries can share a
    /// Redis database without meeting (nor sweeping) each other's entries.
    async fn cache(&self, place: &Place<RedisConfig>) -> anyhow::Result<Option<Arc<dyn Cache>>> {
        Ok(match place.clone() {
            Place::Embedded => None,
            #[cfg(feature = "redis")]
            Place::Shared(config) => {
                use anyhow::Context as _;
                let config = config.with_prefix(format!("quintet:{}:", self.identity));
                let url = config.redacted_url();
                let cache = quintet_redis::RedisCache::connect(&config, Arc::clone(&self.clock))
                    .await
                    .with_context(|| format!("cannot open the cache on Redis at {url}"))?;
                tracing::info!(%url, prefix = %config.prefix, "cache on Redis");
                Some(Arc::new(cache))
            }
        })
    }

    /// Storage on S3, when `place` names it, bound to the registry's identity before the
    /// start-up sweep (which removes what this registry does not know), its writes
    /// recorded in the event logs of the registry's database (`registry`, which
    /// [`Adapters::check`] made shared).
    async fn storage(
        &mut self,
        place: &Place<S3Config>,
        registry: &Place<PgConfig>,
    ) -> anyhow::Result<Option<(Arc<dyn ObjectStorage>, Arc<dyn StorageEvents>)>> {
        Ok(match (place.clone(), registry.clone()) {
            (Place::Embedded, _) => None,
            #[cfg(feature = "s3")]
            (Place::Shared(_), Place::Embedded) => {
                anyhow::bail!("storage on S3 needs the registry on PostgreSQL")
            }
            #[cfg(feature = "s3")]
            (Place::Shared(config), Place::Shared(pg)) => {
                let store = s3(&config, &self.identity).await?;
                let log: Arc<quintet_postgres::PgStorageEventLog> = Arc::new(
                    self.postgres(
                        "storage events",
                        &pg,
                        quintet_postgres::PgStorageEventLog::open,
                    )
                    .await?,
                );
                let storage = quintet_core::ports::storage_events::Logged::new(store, log.clone());
                Some((Arc::new(storage), log))
            }
        })
    }
}

#[cfg(feature = "s3")]
async fn s3(config: &S3Config, identity: &str) -> anyhow::Result<quintet_s3::S3BlobStore> {
    use anyhow::Context as _;
    let store = quintet_s3::S3BlobStore::open(config)
        .await
        .context("cannot open storage on S3")?;
    store
        .bind(identity)
        .await
        .context("cannot open storage on S3")?;
    tracing::info!(store = %config.describe(), "storage on S3");
    Ok(store)
}
