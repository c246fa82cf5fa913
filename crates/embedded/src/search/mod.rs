//! The search service on tantivy: one index directory per instance under `search/<id>/`.
//!
//! - [`analyzer`]: quintet's word rules as a tantivy tokenizer.
//! - [`handle`]: an open index: schema, key lookups, queries.
//! - [`score`]: scoring a query's matches and keeping the best.
//! - [`vocabulary`]: the merged dictionary of large segments, for fast typo lookups.
//! - [`writer`]: the per-index writer thread that batches writes into commits.
//!
//! Indexes are opened on first use and stay open (a reader holds memory maps and little
//! else). Writers are the expensive part — a heap budget and a few threads each — so each
//! index gets one only while it is being written, and gives it back after
//! [`Settings::writer_idle`] without writes.

mod analyzer;
mod handle;
mod score;
mod stored;
mod vocabulary;
mod writer;

use std::{
    collections::{HashMap, HashSet},
    path::Path,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use async_trait::async_trait;
use quintet_core::{
    Error, Instance, InstanceId, Result,
    ports::{
        Keep, Lifecycle, PoolUsage,
        data::RawJson,
        search::{
            SearchDoc, SearchIndex, SearchKey, SearchMatch, SearchQuery, config_of, index_missing,
            stored_raw,
        },
    },
};

use crate::{
    disk::DiskSpace,
    instance_store::{InstanceDirs, blocking},
};
use handle::IndexHandle;
use writer::{Counters, OpenIndex, Write};

/// How the search adapter spends memory and threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Heap of each indexing thread of an index's writer before it flushes a segment
    /// (tantivy's minimum is 15 MB). It is taken as documents arrive (a term table of up to
    /// a third of it, then 1 MB pages), and given back at each commit, so an idle writer
    /// holds none of it.
    pub writer_heap_bytes: usize,
    /// Indexing threads of one index's writer: a bulk load's documents are split between
    /// them, each building its own segment, so that building segments (tokenizing,
    /// sorting terms, writing postings) is not bound to one core.
    pub writer_threads: usize,
    /// A writer without writes for this long is closed (its heap and threads released).
    pub writer_idle: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            writer_heap_bytes: 32 * 1024 * 1024,
            // One thread builds a segment at about 50,000 documents/s, so a second one pays
            // off only where a core is free for it: on two cores, alternating runs of the
            // benchmark's bulk load gave 47,600 documents/s with two threads against 45,600
            // with one (within the spread), for twice the heap and twice the segments. More
            // would split a bulk load into more, smaller segments for merges to put
            // together again.
            writer_threads: if std::thread::available_parallelism().map_or(1, |n| n.get()) >= 4 {
                2
            } else {
                1
            },
            writer_idle: Duration::from_secs(30),
        }
    }
}

/// Full-text indexes of every search instance, one tantivy index each.
#[derive(Debug, Clone)]
pub struct TantivySearchIndex {
    inner: Arc<Inner>,
    /// Admits writes while the disk has room; removals are not asked.
    disk: Arc<DiskSpace>,
}

#[derive(Debug)]
struct Inner {
    dirs: InstanceDirs,
    settings: Settings,
    /// Recently answered documents of every index.
    stored: Arc<stored::StoredCache>,
    state: Mutex<State>,
    counters: Arc<Counters>,
}

/// What the adapter's writers have done since it was opened (see [`TantivySearchIndex::write_stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriteStats {
    /// Writes (index, update, remove, bulk) handed to writer threads.
    pub writes: u64,
    /// Commits made. Concurrent writes share commits, so this grows slower than `writes`
    /// under load.
    pub commits: u64,
}

#[derive(Debug, Default)]
struct State {
    open: HashMap<InstanceId, Arc<OpenIndex>>,
    /// Dropped instances: ids are never reused, so a late request for one is refused
    /// instead of re-creating its directory.
    dropped: HashSet<InstanceId>,
    closed: bool,
}

/// An engine error: a full disk (507), else a fault of the server, logged, never shown.
fn engine_error(e: impl std::fmt::Display) -> Error {
    let text = e.to_string();
    // tantivy wraps I/O errors in its own types; the OS error number survives in the text:
    // ENOSPC (28) and EDQUOT (122).
    if text.contains("(os error 28)") || text.contains("(os error 122)") {
        return Error::InsufficientStorage(quintet_core::error::DISK_FULL.to_owned());
    }
    Error::internal(format!("search engine: {text}"))
}

fn gone(instance: &str) -> Error {
    index_missing(instance)
}

impl TantivySearchIndex {
    /// Open the index directories under `root` with default [`Settings`].
    pub fn open(root: &Path) -> Result<Self> {
        Self::open_with(root, Settings::default())
    }

    /// Open the index directories under `root`.
    pub fn open_with(root: &Path, settings: Settings) -> Result<Self> {
        Ok(Self {
            inner: Arc::new(Inner {
                dirs: InstanceDirs::open(root.to_owned())?,
                settings,
                stored: Arc::new(stored::StoredCache::new(stored::STORED_CACHE_BYTES)),
                state: Mutex::new(State::default()),
                counters: Arc::default(),
            }),
            disk: Arc::new(DiskSpace::unchecked(root)),
        })
    }

    /// The same index with writes admitted by `disk` (see [`crate::disk`]).
    pub fn with_disk(mut self, disk: Arc<DiskSpace>) -> Self {
        self.disk = disk;
        self
    }

    /// How many indexes currently have a writer thread (for tests and metrics).
    pub fn open_writers(&self) -> usize {
        let handles: Vec<Arc<OpenIndex>> = self.inner.lock().open.values().cloned().collect();
        handles.iter().filter(|h| h.has_writer()).count()
    }

    /// Writes queued and commits made so far, over every index (two relaxed atomic loads).
    pub fn write_stats(&self) -> WriteStats {
        let (writes, commits) = self.inner.counters.get();
        WriteStats { writes, commits }
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The open index of `instance`, opening it when needed. Blocking.
    fn handle(&self, instance: &Instance) -> Result<Arc<OpenIndex>> {
        let config = config_of(instance)?;
        let mut state = self.lock();
        if state.closed {
            return Err(Error::Unavailable(
                "the server is shutting down; retry on the next server".into(),
            ));
        }
        if state.dropped.contains(&instance.id) {
            return Err(gone(instance.name.as_str()));
        }
        if let Some(h) = state.open.get(&instance.id) {
            return Ok(Arc::clone(h));
        }
        let h = Arc::new(OpenIndex::new(IndexHandle::open(
            &self.dirs.dir(instance.id),
            instance.name.as_str().to_owned(),
            config.clone(),
            Arc::clone(&self.stored),
        )?));
        state.open.insert(instance.id, Arc::clone(&h));
        Ok(h)
    }
}

impl TantivySearchIndex {
    /// Submit `write` to the instance's writer and wait until it is committed.
    async fn write(&self, instance: &Instance, write: Write) -> Result<()> {
        let inner = Arc::clone(&self.inner);
        let instance = instance.clone();
        let answer = blocking(move || {
            let h = inner.handle(&instance)?;
            writer::submit(&h, inner.settings, &inner.counters, write)
        })
        .await?;
        answer
            .await
            .map_err(|_| Error::internal("a search writer stopped before answering"))?
    }

    /// Run `f` on the instance's open index, on the blocking pool.
    async fn read<T: Send + 'static>(
        &self,
        instance: &Instance,
        f: impl FnOnce(&IndexHandle) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let inner = Arc::clone(&self.inner);
        let instance = instance.clone();
        blocking(move || f(&*inner.handle(&instance)?)).await
    }
}

#[async_trait]
impl Lifecycle for TantivySearchIndex {
    async fn create_instance(&self, instance: &Instance) -> Result<()> {
        self.disk.admit()?;
        self.read(instance, |_| Ok(())).await
    }

    async fn drop_instance(&self, instance: &Instance) -> Result<()> {
        let inner = Arc::clone(&self.inner);
        let (id, name) = (instance.id, instance.name.as_str().to_owned());
        blocking(move || {
            let handle = {
                let mut state = inner.lock();
                state.dropped.insert(id);
                state.open.remove(&id)
            };
            if let Some(h) = handle {
                writer::close(&h, gone(&name));
            }
            inner.dirs.remove(id)
        })
        .await
    }

    async fn ready(&self) -> Result<()> {
        self.disk.ready()
    }

    async fn sweep(&self, keep: &Keep) -> Result<usize> {
        let (inner, keep) = (Arc::clone(&self.inner), keep.clone());
        blocking(move || inner.dirs.sweep(&keep)).await
    }

    fn pool(&self) -> Option<PoolUsage> {
        // Files of the node's own: no engine connections.
        None
    }

    async fn close(&self) -> Result<()> {
        let inner = Arc::clone(&self.inner);
        blocking(move || {
            let handles: Vec<Arc<OpenIndex>> = {
                let mut state = inner.lock();
                state.closed = true;
                state.open.drain().map(|(_, h)| h).collect()
            };
            for h in handles {
                writer::close(
                    &h,
                    Error::Unavailable(
                        "the server is shutting down; retry on the next server".into(),
                    ),
                );
            }
            Ok(())
        })
        .await
    }
}

#[async_trait]
impl SearchIndex for TantivySearchIndex {
    async fn index(&self, instance: &Instance, doc: SearchDoc) -> Result<()> {
        self.disk.admit()?;
        self.write(instance, Write::Index(doc)).await
    }

    async fn get(&self, instance: &Instance, key: &SearchKey) -> Result<Option<RawJson>> {
        let key = key.clone();
        let text = self.read(instance, move |h| h.get(&key)).await?;
        text.map(stored_raw).transpose()
    }

    async fn update(&self, instance: &Instance, doc: SearchDoc) -> Result<()> {
        self.disk.admit()?;
        self.write(instance, Write::Update(doc)).await
    }

    async fn remove(&self, instance: &Instance, key: &SearchKey) -> Result<()> {
        self.write(instance, Write::Remove(key.clone())).await
    }

    async fn bulk(&self, instance: &Instance, docs: Vec<SearchDoc>) -> Result<()> {
        self.disk.admit()?;
        if docs.is_empty() {
            return Ok(());
        }
        self.write(instance, Write::Bulk(docs)).await
    }

    async fn query(&self, instance: &Instance, query: &SearchQuery) -> Result<Vec<SearchMatch>> {
        let query = query.clone();
        self.read(instance, move |h| h.search(&query)).await
    }

    async fn documents(
        &self,
        instance: &Instance,
        after: Option<&SearchKey>,
        limit: usize,
    ) -> Result<Vec<(SearchKey, RawJson)>> {
        let after = after.map(|k| k.as_str().to_owned());
        let found = self
            .read(instance, move |h| h.documents(after.as_deref(), limit))
            .await?;
        found
            .into_iter()
            .map(|(key, text)| Ok((key.parse()?, stored_raw(text)?)))
            .collect()
    }

    async fn count(&self, instance: &Instance) -> Result<u64> {
        self.read(instance, |h| Ok(h.count())).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quintet_core::{InstanceConfig, conformance, ports::search::SearchConfig};
    use serde_json::json;

    fn config() -> SearchConfig {
        SearchConfig {
            fields: vec!["title".into()],
            store_fields: vec![],
        }
    }

    fn doc(key: &str, title: &str) -> SearchDoc {
        let body = json!({ "title": title });
        SearchDoc::new(
            key.parse().unwrap(),
            body.as_object().unwrap().clone(),
            &config(),
        )
        .unwrap()
    }

    async fn count(index: &TantivySearchIndex, inst: &Instance, q: &str) -> usize {
        let q = SearchQuery::from_json(&json!({ "query": q }), &config()).unwrap();
        index.query(inst, &q).await.unwrap().len()
    }

    /// Poll `f` until it holds, for at most 20 s.
    async fn eventually(f: impl Fn() -> bool) {
        for _ in 0..2000 {
            if f() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("condition not reached in 20 s");
    }

    #[tokio::test]
    async fn idle_writers_are_released_and_restarted_on_demand() {
        let dir = tempfile::tempdir().unwrap();
        let settings = Settings {
            writer_idle: Duration::from_millis(50),
            ..Settings::default()
        };
        let index = TantivySearchIndex::open_with(dir.path(), settings).unwrap();
        let inst = conformance::instance(InstanceConfig::Search(config()));
        index.create_instance(&inst).await.unwrap();
        assert_eq!(index.open_writers(), 0, "creating an index opens no writer");
        index.index(&inst, doc("a", "first")).await.unwrap();
        assert_eq!(index.open_writers(), 1);
        eventually(|| index.open_writers() == 0).await;
        // A write after the release starts a new writer (the index lock was given back).
        index.index(&inst, doc("b", "second")).await.unwrap();
        assert_eq!(count(&index, &inst, "first second").await, 2);
        index.close().await.unwrap();
        assert_eq!(index.open_writers(), 0);
    }

    /// Writes waiting while the writer is busy share one commit. The writer is held at the
    /// start of its first batch until every write has been queued, so batching is certain,
    /// not a matter of timing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_writes_share_commits() {
        const WRITES: u64 = 40;
        let dir = tempfile::tempdir().unwrap();
        let index = TantivySearchIndex::open(dir.path()).unwrap();
        let inst = conformance::instance(InstanceConfig::Search(config()));
        index.create_instance(&inst).await.unwrap();
        assert_eq!(index.write_stats(), WriteStats::default());
        let gate = &index.inner.counters.gate;
        gate.set_closed(true);
        let tasks: Vec<_> = (0..WRITES)
            .map(|i| {
                let (index, inst) = (index.clone(), inst.clone());
                tokio::spawn(async move {
                    let (key, title) = (format!("k{i}"), format!("word{i}"));
                    index.index(&inst, doc(&key, &title)).await
                })
            })
            .collect();
        eventually(|| index.write_stats().writes == WRITES).await;
        assert_eq!(index.write_stats().commits, 0, "the writer is held");
        gate.set_closed(false);
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        let stats = index.write_stats();
        assert_eq!(stats.writes, WRITES);
        assert!(stats.commits < stats.writes, "{stats:?}");
        // The first write's batch waited at the gate; all others queued behind it.
        assert_eq!(stats.commits, 1, "{stats:?}");
        for i in 0..WRITES {
            let key = format!("k{i}").parse().unwrap();
            assert!(index.get(&inst, &key).await.unwrap().is_some(), "k{i}");
        }
        index.close().await.unwrap();
    }

    #[tokio::test]
    async fn a_dropped_instance_refuses_late_requests_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let index = TantivySearchIndex::open(dir.path()).unwrap();
        let inst = conformance::instance(InstanceConfig::Search(config()));
        index.create_instance(&inst).await.unwrap();
        index.index(&inst, doc("a", "kept")).await.unwrap();
        let path = dir.path().join(inst.id.to_string());
        assert!(path.join("meta.json").exists());
        index.drop_instance(&inst).await.unwrap();
        assert!(!path.exists());
        let late = index.index(&inst, doc("b", "late")).await.unwrap_err();
        assert!(matches!(late, Error::NotFound(_)), "{late:?}");
        assert!(
            !path.exists(),
            "a late request must not re-create the directory"
        );
    }

    /// Indexes made when filter terms were indexed (posting lists) rather than a fast field
    /// open as they are and filter alike; new indexes get the fast field.
    #[tokio::test]
    async fn indexes_with_indexed_filter_terms_keep_filtering() {
        let dir = tempfile::tempdir().unwrap();
        let legacy = conformance::instance(InstanceConfig::Search(config()));
        let (schema, _) = handle::schema(&config(), true);
        let path = dir.path().join(legacy.id.to_string());
        std::fs::create_dir_all(&path).unwrap();
        drop(tantivy::Index::create_in_dir(&path, schema.clone()).unwrap());
        let index = TantivySearchIndex::open(dir.path()).unwrap();
        let mut fresh = conformance::instance(InstanceConfig::Search(config()));
        fresh.id = InstanceId(legacy.id.0 + 1);
        index.create_instance(&fresh).await.unwrap();
        let query =
            SearchQuery::from_json(&json!({"query": "red", "filter": {"shelf": 2}}), &config())
                .unwrap();
        for inst in [&legacy, &fresh] {
            for (key, shelf) in [("a", 1), ("b", 2), ("c", 2)] {
                let body = json!({"title": "red book", "shelf": shelf});
                let doc = SearchDoc::new(
                    key.parse().unwrap(),
                    body.as_object().unwrap().clone(),
                    &config(),
                )
                .unwrap();
                index.index(inst, doc).await.unwrap();
            }
            let mut ids: Vec<String> = index
                .query(inst, &query)
                .await
                .unwrap()
                .into_iter()
                .map(|m| m.id)
                .collect();
            ids.sort();
            assert_eq!(ids, ["b", "c"], "instance {}", inst.id);
        }
        index.close().await.unwrap();
        let reopened = tantivy::Index::open_in_dir(&path).unwrap();
        assert_eq!(reopened.schema(), schema, "the old index keeps its schema");
        let fresh_path = dir.path().join(fresh.id.to_string());
        let fresh_schema = tantivy::Index::open_in_dir(&fresh_path).unwrap().schema();
        let filter = fresh_schema.get_field("_filter").unwrap();
        let entry = fresh_schema.get_field_entry(filter);
        assert!(entry.is_fast() && !entry.is_indexed());
    }

    /// Answered documents are held in memory; a changed document is answered as changed,
    /// since it is held under its new place in the index.
    #[tokio::test]
    async fn answered_documents_are_held_and_changes_are_answered() {
        let config = SearchConfig {
            fields: vec!["title".into()],
            store_fields: vec!["title".into(), "n".into()],
        };
        let dir = tempfile::tempdir().unwrap();
        let index = TantivySearchIndex::open(dir.path()).unwrap();
        let inst = conformance::instance(InstanceConfig::Search(config.clone()));
        index.create_instance(&inst).await.unwrap();
        let put = |n: u64| {
            let body = json!({"title": "red book", "n": n});
            SearchDoc::new(
                "a".parse().unwrap(),
                body.as_object().unwrap().clone(),
                &config,
            )
            .unwrap()
        };
        index.index(&inst, put(1)).await.unwrap();
        let query = SearchQuery::from_json(&json!({"query": "red"}), &config).unwrap();
        let n = |m: &[SearchMatch]| m[0].stored.get("n").map(|v| v.get().to_owned());
        assert_eq!(index.inner.stored.bytes(), 0);
        let first = index.query(&inst, &query).await.unwrap();
        assert_eq!(n(&first).as_deref(), Some("1"));
        assert!(
            index.inner.stored.bytes() > 0,
            "the answered document is held"
        );
        assert_eq!(index.inner.stored.hits(), 0);
        assert_eq!(index.query(&inst, &query).await.unwrap(), first);
        assert_eq!(index.inner.stored.hits(), 1, "answered from memory");
        index.update(&inst, put(2)).await.unwrap();
        let changed = index.query(&inst, &query).await.unwrap();
        assert_eq!(n(&changed).as_deref(), Some("2"));
        index.close().await.unwrap();
    }

    #[tokio::test]
    async fn writes_after_close_are_refused_and_data_survives_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let inst = conformance::instance(InstanceConfig::Search(config()));
        {
            let index = TantivySearchIndex::open(dir.path()).unwrap();
            index.create_instance(&inst).await.unwrap();
            index.index(&inst, doc("a", "durable")).await.unwrap();
            index.close().await.unwrap();
            let after = index.index(&inst, doc("b", "late")).await.unwrap_err();
            assert!(matches!(after, Error::Unavailable(_)), "{after:?}");
        }
        let index = TantivySearchIndex::open(dir.path()).unwrap();
        assert_eq!(count(&index, &inst, "durable").await, 1);
        index.index(&inst, doc("b", "more")).await.unwrap();
        assert_eq!(count(&index, &inst, "durable more").await, 2);
    }
}
