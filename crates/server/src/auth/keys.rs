//! The in-memory cache of access keys, so verifying a token does not touch the disk.
//!
//! A key is read from the registry the first time a token names it and kept from then on.
//! Revoking a key or deleting its application updates the cache in the same request, so a
//! revoked key fails from the moment the revocation is answered. Every invalidation bumps an
//! epoch, and a key read from the registry is cached only when no invalidation happened
//! while it was read, so a slow read cannot put a stale key back.
//!
//! Key ids the registry does not know are remembered too (at most [`MISSING_CAPACITY`],
//! forgotten all at once when full), so a well-formed token naming an unknown key does not
//! cost a registry read on every request. Creating a key forgets that it was missing (on
//! every node: the change feed carries key creations), and a miss is recorded only when no
//! key was created while it was read, so a key created right after a miss is usable at once.
//!
//! `lastUsed` is recorded in memory on every authenticated request and written to the
//! registry by a background task every [`LAST_USED_FLUSH`] (and once more at shutdown): one
//! write per interval, whatever the request rate. The admin API overlays the in-memory
//! times, so it is never behind.
//!
//! Several nodes over one registry: the registry's change feed reports revocations and
//! application deletions made through other nodes, and [`KeyCache::apply`] applies them
//! the same way; a resync (the feed may have missed changes) forgets every key, keeping
//! the use times not yet written so the next flush still records them.

use std::{
    collections::{HashMap, HashSet},
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering},
    },
    time::Duration,
};

use quintet_core::{
    AppName, Result,
    keys::{AccessKey, KeyId, Secret},
    ports::registry::{Registry, RegistryChange},
};
use tokio::task::JoinHandle;

/// How often key use times are written to the registry.
pub const LAST_USED_FLUSH: Duration = Duration::from_secs(10);

/// Reads of one key retried when invalidations keep racing them.
const LOAD_ATTEMPTS: usize = 3;

/// Most key ids remembered as missing; the set is emptied when it would grow beyond.
/// Ids are at most 64 bytes, so this bounds it to about a megabyte whatever a client
/// sends.
pub const MISSING_CAPACITY: usize = 10_000;

/// A key as the authentication layer needs it.
#[derive(Debug)]
pub struct CachedKey {
    /// The key id.
    pub key: KeyId,
    /// The application it grants access to.
    pub app: AppName,
    secret: Secret,
    revoked: AtomicBool,
    /// Latest use seen by this node, ms since the epoch (0: none).
    last_used: AtomicI64,
    /// Latest use written to the registry.
    flushed: AtomicI64,
}

impl CachedKey {
    fn new(k: AccessKey) -> Self {
        let last = k.last_used_ms.unwrap_or(0);
        Self {
            revoked: AtomicBool::new(k.is_revoked()),
            last_used: AtomicI64::new(last),
            flushed: AtomicI64::new(last),
            key: k.key,
            app: k.app,
            secret: k.secret,
        }
    }

    /// The signing secret.
    pub fn secret(&self) -> &Secret {
        &self.secret
    }

    /// Whether the key was revoked.
    pub fn is_revoked(&self) -> bool {
        self.revoked.load(Ordering::SeqCst)
    }

    /// Note a successful authentication at `now_ms`.
    pub fn touch(&self, now_ms: i64) {
        self.last_used.fetch_max(now_ms, Ordering::Relaxed);
    }
}

/// Access keys by id, read through from the registry.
#[derive(Debug)]
pub struct KeyCache {
    registry: Arc<dyn Registry>,
    entries: RwLock<HashMap<KeyId, Arc<CachedKey>>>,
    epoch: AtomicU64,
    /// Key ids the registry did not have when last read.
    missing: Mutex<HashSet<KeyId>>,
    /// Bumped by every key creation (and resync): a miss read across a bump is not
    /// recorded, since the read may predate the new key.
    creations: AtomicU64,
    /// Use times of keys forgotten before they were written: the next flush writes them.
    orphaned_uses: Mutex<Vec<(KeyId, i64)>>,
    flusher: Mutex<Option<JoinHandle<()>>>,
}

impl KeyCache {
    /// An empty cache over `registry`.
    pub fn new(registry: Arc<dyn Registry>) -> Self {
        Self {
            registry,
            entries: RwLock::new(HashMap::new()),
            epoch: AtomicU64::new(0),
            missing: Mutex::new(HashSet::new()),
            creations: AtomicU64::new(0),
            orphaned_uses: Mutex::new(Vec::new()),
            flusher: Mutex::new(None),
        }
    }

    fn cached(&self, key: &KeyId) -> Option<Arc<CachedKey>> {
        self.entries.read().ok()?.get(key).cloned()
    }

    fn known_missing(&self, key: &KeyId) -> bool {
        self.missing.lock().is_ok_and(|m| m.contains(key))
    }

    /// Remember that the registry had no `key`, unless a key was created since
    /// `creations` was read (before the registry read): the read may have missed it.
    fn note_missing(&self, key: &KeyId, creations: u64) {
        let Ok(mut missing) = self.missing.lock() else {
            return;
        };
        // Checked under the lock that `created` takes after bumping the counter: either
        // the bump is seen here, or `created` removes what is inserted here.
        if self.creations.load(Ordering::SeqCst) != creations {
            return;
        }
        if missing.len() >= MISSING_CAPACITY {
            missing.clear();
        }
        missing.insert(key.clone());
    }

    /// The key `key`, revoked or not, from memory or else from the registry. While the
    /// registry says this node may have missed changes ([`Registry::caches_current`]),
    /// from the registry every time, cached or not.
    pub async fn get(&self, key: &KeyId) -> Result<Option<Arc<CachedKey>>> {
        if !self.registry.caches_current() {
            let fresh = self.registry.get_key(key).await?;
            return Ok(fresh.map(|k| match self.cached(key) {
                // The cached entry (with its use times), brought up to date.
                Some(entry) => {
                    if k.is_revoked() {
                        entry.revoked.store(true, Ordering::SeqCst);
                    }
                    entry
                }
                None => Arc::new(CachedKey::new(k)),
            }));
        }
        if let Some(hit) = self.cached(key) {
            return Ok(Some(hit));
        }
        if self.known_missing(key) {
            return Ok(None);
        }
        let mut loaded = None;
        for _ in 0..LOAD_ATTEMPTS {
            let epoch = self.epoch.load(Ordering::SeqCst);
            let creations = self.creations.load(Ordering::SeqCst);
            let Some(found) = self.registry.get_key(key).await? else {
                self.note_missing(key, creations);
                return Ok(None);
            };
            let entry = Arc::new(CachedKey::new(found));
            if let Ok(mut map) = self.entries.write()
                && self.epoch.load(Ordering::SeqCst) == epoch
            {
                return Ok(Some(Arc::clone(map.entry(key.clone()).or_insert(entry))));
            }
            loaded = Some(entry);
        }
        // Invalidations kept racing the read: answer from the last read, cache nothing.
        Ok(loaded)
    }

    /// Forget that `key` was missing; call after the registry recorded its creation.
    pub fn created(&self, key: &KeyId) {
        self.creations.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut missing) = self.missing.lock() {
            missing.remove(key);
        }
    }

    /// Mark `key` revoked; call after the registry recorded the revocation.
    pub fn revoked(&self, key: &KeyId) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        if let Some(entry) = self.cached(key) {
            entry.revoked.store(true, Ordering::SeqCst);
        }
    }

    /// Forget every key of `app`; call after the registry deleted the application.
    pub fn forget_app(&self, app: &AppName) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut map) = self.entries.write() {
            map.retain(|_, entry| &entry.app != app);
        }
    }

    /// Forget every key (they are read again on their next use) and every miss, keeping
    /// the use times not yet written for the next flush.
    pub fn forget_all(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        self.creations.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut missing) = self.missing.lock() {
            missing.clear();
        }
        let forgotten = match self.entries.write() {
            Ok(mut map) => std::mem::take(&mut *map),
            Err(_) => return,
        };
        let unwritten = forgotten.into_values().filter_map(|e| {
            let used = e.last_used.load(Ordering::Relaxed);
            (used > e.flushed.load(Ordering::Relaxed)).then(|| (e.key.clone(), used))
        });
        if let Ok(mut orphans) = self.orphaned_uses.lock() {
            orphans.extend(unwritten);
        }
    }

    /// Bring the cache in line with a change to the registry, made by this node or
    /// another: a new key is no longer missing, a revoked key is marked revoked, a
    /// deleted application's keys are forgotten, a resync forgets every key and every
    /// miss. Instance changes need nothing.
    pub fn apply(&self, change: &RegistryChange) {
        match change {
            RegistryChange::KeyCreated { key, .. } => self.created(key),
            RegistryChange::KeyRevoked { key, .. } => self.revoked(key),
            RegistryChange::AppDeleted { app } => self.forget_app(app),
            RegistryChange::Resync => self.forget_all(),
            RegistryChange::InstanceCreated { .. } | RegistryChange::InstanceDeleted { .. } => {}
        }
    }

    /// The latest use of `key` this node has seen, if it has seen one.
    pub fn last_used(&self, key: &KeyId) -> Option<i64> {
        self.cached(key)
            .map(|e| e.last_used.load(Ordering::Relaxed))
            .filter(|ms| *ms > 0)
    }

    /// Write use times not yet in the registry, in one registry write.
    pub async fn flush(&self) -> Result<()> {
        let pending: Vec<(Arc<CachedKey>, i64)> = match self.entries.read() {
            Ok(map) => map
                .values()
                .filter_map(|e| {
                    let used = e.last_used.load(Ordering::Relaxed);
                    (used > e.flushed.load(Ordering::Relaxed)).then(|| (Arc::clone(e), used))
                })
                .collect(),
            Err(_) => return Ok(()),
        };
        let orphans = self
            .orphaned_uses
            .lock()
            .map(|mut o| std::mem::take(&mut *o))
            .unwrap_or_default();
        if pending.is_empty() && orphans.is_empty() {
            return Ok(());
        }
        let uses: Vec<(KeyId, i64)> = pending
            .iter()
            .map(|(e, used)| (e.key.clone(), *used))
            .chain(orphans.iter().cloned())
            .collect();
        if let Err(e) = self.registry.record_key_use(&uses).await {
            // Try these again with the next flush.
            if let Ok(mut o) = self.orphaned_uses.lock() {
                o.extend(orphans);
            }
            return Err(e);
        }
        for (entry, used) in pending {
            entry.flushed.fetch_max(used, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Start writing use times every [`LAST_USED_FLUSH`] in a background task.
    pub fn start_flusher(self: &Arc<Self>) {
        let cache = Arc::clone(self);
        let task = tokio::spawn(async move {
            let mut every = tokio::time::interval(LAST_USED_FLUSH);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            every.tick().await; // the first tick is immediate
            loop {
                every.tick().await;
                if let Err(e) = cache.flush().await {
                    tracing::warn!(error = %e, "recording when access keys were last used failed");
                }
            }
        });
        if let Ok(mut slot) = self.flusher.lock()
            && let Some(old) = slot.replace(task)
        {
            old.abort();
        }
    }

    /// Stop the background task and write what is pending.
    pub async fn close(&self) -> Result<()> {
        let task = self.flusher.lock().ok().and_then(|mut slot| slot.take());
        if let Some(task) = task {
            task.abort();
        }
        self.flush().await
    }
}

#[cfg(test)]
#[path = "keys_test.rs"]
mod tests;
