//! The data service on SQLite (`data.db`).
//!
//! Per instance `<id>`:
//! - `d<id>`: `(id TEXT PRIMARY KEY, body TEXT)` without rowid — one B-tree, so a get by id
//!   is one lookup; `body` is the document's compact JSON text, served as stored.
//! - `d<id>_ix`: the index definitions, `(name, num, def)`.
//! - `d<id>_ch`: the change log, `(seq, id, deleted, at_ms)`: one row per changed document,
//!   written in the write's transaction. `seq` is `AUTOINCREMENT`, so numbers are never
//!   reused even once compaction removed the newest rows; one writer thread commits in
//!   order, so numbers follow commit order. The head is the table's `sqlite_sequence`
//!   entry.
//! - `d<id>_i<num>`: one table per index, `(k BLOB, id TEXT)` with primary key `(k, id)`,
//!   `k` the [`keycode`](quintet_core::mango::keycode) encoding of the indexed fields.
//!
//! Recently read documents are also held in memory ([`crate::hot`]); writes drop the
//! ones they change once committed, before they are acknowledged.
//!
//! Every write maintains every index of its instance inside the same transaction. The
//! index definitions are cached twice: for the writer thread (loaded through the writer's
//! connection, so a write queued right after `create_index` in the same batch sees the new
//! index) and for readers (loaded through a reader, so a query never plans over an index
//! whose table is not committed yet).

use std::{
    collections::HashMap,
    path::Path,
    sync::{
        Arc, Mutex, RwLock, Weak,
        atomic::{AtomicU64, Ordering},
    },
    time::Instant,
};

use async_trait::async_trait;
use quintet_core::{
    Clock, Error, Instance, InstanceId, Result,
    id::IdGenerator,
    mango::{Collector, plan},
    ports::{
        Keep, Lifecycle, PoolUsage,
        changes::{Change, ChangesPage, FeedListener, check_since},
        data::{
            BulkOp, BulkOutcome, DocId, DocStore, DocStream, Document, FindOutcome, FindQuery,
            IndexDef, ListQuery, MAX_INDEXES, QUERY_DEADLINE, RawJson, document_exists,
            document_missing, index_name_taken, stored_index, stored_raw, stored_text,
            stored_value, too_many_indexes,
        },
        list::{ListPages, Page, list_stream},
    },
};
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};
use serde_json::Value;

use crate::{
    changelog::{self, Listeners, table_exists, tell},
    disk::DiskSpace,
    hot::{Held, HotCache},
    instance_store::TableLifecycle,
    sqlite::{INSTANCE_GONE, SqliteDb, SqliteOptions, is_unique_violation, sql_error},
};

/// Documents listed per round trip to the database while streaming a list.
const LIST_PAGE: usize = 256;

/// Bytes of documents held in memory at most (every instance together).
pub const HOT_DOCS_BYTES: usize = 32 << 20;

impl Held for RawJson {
    fn held_bytes(&self) -> usize {
        self.get().len()
    }
}

/// Documents of every data instance, in one SQLite file.
#[derive(Debug, Clone)]
pub struct SqliteDocStore {
    tables: TableLifecycle,
    clock: Arc<dyn Clock>,
    ids: Arc<IdGenerator>,
    writer_indexes: Arc<Mutex<HashMap<InstanceId, Arc<Indexes>>>>,
    reader_indexes: Arc<RwLock<HashMap<InstanceId, Arc<Indexes>>>>,
    generation: Arc<AtomicU64>,
    hot: Arc<HotCache<RawJson>>,
    /// Admits writes while the disk has room; removals are not asked.
    disk: Arc<DiskSpace>,
    /// Told after every commit.
    listeners: Listeners,
}

/// The DDL of an instance's change log.
fn changes_ddl(table: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS \"{table}_ch\" (\
           seq   INTEGER PRIMARY KEY AUTOINCREMENT, \
           id    TEXT NOT NULL, \
           deleted INTEGER NOT NULL, \
           at_ms INTEGER NOT NULL\
         ) STRICT;"
    )
}

/// The statement that appends a change to the log of `table`.
fn record_sql(table: &str) -> String {
    format!("INSERT INTO \"{table}_ch\" (id, deleted, at_ms) VALUES (?1, ?2, ?3)")
}

/// Append the change of document `id` to the log of `table`, in the write's transaction.
fn record(c: &Connection, table: &str, id: &str, deleted: bool, at_ms: i64) -> Result<()> {
    let mut log = c.prepare_cached(&record_sql(table)).map_err(sql_error)?;
    record_with(&mut log, id, deleted, at_ms)
}

/// [`record`] with the statement prepared once for many changes.
fn record_with(
    log: &mut rusqlite::CachedStatement<'_>,
    id: &str,
    deleted: bool,
    at_ms: i64,
) -> Result<()> {
    log.execute(params![id, deleted, at_ms])
        .map_err(sql_error)?;
    Ok(())
}

/// The indexes of one instance: definitions and their tables, in name order.
#[derive(Debug, Default)]
struct Indexes {
    defs: Vec<IndexDef>,
    tables: Vec<String>,
}

fn ddl(table: &str) -> String {
    format!(
        "CREATE TABLE \"{table}\" (\
           id   TEXT PRIMARY KEY NOT NULL, \
           body TEXT NOT NULL\
         ) STRICT, WITHOUT ROWID;\
         CREATE TABLE \"{table}_ix\" (\
           name TEXT PRIMARY KEY NOT NULL, \
           num  INTEGER NOT NULL, \
           def  TEXT NOT NULL\
         ) STRICT;{}",
        changes_ddl(table)
    )
}

fn missing(instance: &Instance, id: &DocId) -> Error {
    document_missing(&instance.name, id)
}

impl SqliteDocStore {
    /// Open (or create) the document database at `path`; `clock` dates generated ids.
    pub fn open(path: &Path, clock: Arc<dyn Clock>) -> Result<Self> {
        let db = SqliteDb::open(path, &[], SqliteOptions::default())?;
        Ok(Self {
            tables: TableLifecycle::new(db, "d", ddl),
            clock,
            ids: Arc::new(IdGenerator::new()),
            writer_indexes: Arc::default(),
            reader_indexes: Arc::default(),
            generation: Arc::default(),
            hot: Arc::new(HotCache::new(HOT_DOCS_BYTES)),
            disk: Arc::new(DiskSpace::unchecked(path)),
            listeners: Arc::default(),
        })
    }

    /// The same store with writes admitted by `disk` (see [`crate::disk`]).
    pub fn with_disk(mut self, disk: Arc<DiskSpace>) -> Self {
        self.disk = disk;
        self
    }

    fn db(&self) -> &SqliteDb {
        self.tables.db()
    }

    fn table(&self, instance: &Instance) -> String {
        self.tables.table(instance.id)
    }

    /// Run `f` on the writer with the instance's indexes as the writer sees them. A failed
    /// write forgets the cached indexes, so a cache gone stale heals on the next write.
    /// The documents `changed` are dropped from the held ones once the write committed.
    async fn write<T, F>(&self, instance: &Instance, changed: Vec<String>, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &str, &Indexes) -> Result<T> + Send + 'static,
    {
        let (id, table) = (instance.id, self.table(instance));
        let cache = Arc::clone(&self.writer_indexes);
        let hot = Arc::clone(&self.hot);
        let listeners = Arc::clone(&self.listeners);
        let forget = move || {
            hot.invalidate(id, changed.iter().map(String::as_str));
            tell(&listeners, id);
        };
        self.db()
            .write_then(
                move |c| {
                    let cached = cache.lock().ok().and_then(|m| m.get(&id).cloned());
                    let indexes = match cached {
                        Some(i) => i,
                        None => {
                            // Once per instance and process: an instance created before
                            // change logs existed gets an empty one.
                            c.execute_batch(&changes_ddl(&table)).map_err(sql_error)?;
                            let loaded = Arc::new(load_indexes(c, &table)?);
                            if let Ok(mut m) = cache.lock() {
                                m.insert(id, Arc::clone(&loaded));
                            }
                            loaded
                        }
                    };
                    let out = f(c, &table, &indexes);
                    if out.is_err()
                        && let Ok(mut m) = cache.lock()
                    {
                        m.remove(&id);
                    }
                    out
                },
                forget,
            )
            .await
    }

    /// The instance's indexes as committed, for planning queries.
    async fn reader_indexes(&self, instance: &Instance) -> Result<Arc<Indexes>> {
        if let Some(hit) = self
            .reader_indexes
            .read()
            .ok()
            .and_then(|m| m.get(&instance.id).cloned())
        {
            return Ok(hit);
        }
        let generation = self.generation.load(Ordering::SeqCst);
        let table = self.table(instance);
        let loaded = Arc::new(self.db().read(move |c| load_indexes(c, &table)).await?);
        if let Ok(mut m) = self.reader_indexes.write()
            && self.generation.load(Ordering::SeqCst) == generation
        {
            m.insert(instance.id, Arc::clone(&loaded));
        }
        Ok(loaded)
    }

    fn forget_indexes(&self, id: InstanceId) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut m) = self.reader_indexes.write() {
            m.remove(&id);
        }
        if let Ok(mut m) = self.writer_indexes.lock() {
            m.remove(&id);
        }
    }
}

fn load_indexes(c: &Connection, table: &str) -> Result<Indexes> {
    let mut stmt = c
        .prepare_cached(&format!(
            "SELECT num, def FROM \"{table}_ix\" ORDER BY name"
        ))
        .map_err(sql_error)?;
    let rows = stmt
        .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
        .map_err(sql_error)?;
    let mut out = Indexes::default();
    for row in rows {
        let (num, def) = row.map_err(sql_error)?;
        out.defs.push(stored_index(&def)?);
        out.tables.push(format!("{table}_i{num}"));
    }
    Ok(out)
}

/// Add the index entries of the document stored as `text`. The text is parsed only when
/// the instance has indexes, so writes to unindexed instances never parse on the writer.
fn add_keys(c: &Connection, idx: &Indexes, id: &str, text: &str) -> Result<()> {
    if idx.defs.is_empty() {
        return Ok(());
    }
    let doc: Value = stored_value(text)?;
    for (def, table) in idx.defs.iter().zip(&idx.tables) {
        if let Some(key) = def.key_of(&doc) {
            c.prepare_cached(&format!("INSERT INTO \"{table}\" (k, id) VALUES (?1, ?2)"))
                .and_then(|mut s| s.execute(params![key, id]))
                .map_err(sql_error)?;
        }
    }
    Ok(())
}

fn remove_keys(c: &Connection, idx: &Indexes, id: &str, old_body: &str) -> Result<()> {
    let old: Value = stored_value(old_body)?;
    for (def, table) in idx.defs.iter().zip(&idx.tables) {
        if let Some(key) = def.key_of(&old) {
            c.prepare_cached(&format!("DELETE FROM \"{table}\" WHERE k = ?1 AND id = ?2"))
                .and_then(|mut s| s.execute(params![key, id]))
                .map_err(sql_error)?;
        }
    }
    Ok(())
}

fn stored_body(c: &Connection, table: &str, id: &str) -> Result<Option<String>> {
    c.prepare_cached(&format!("SELECT body FROM \"{table}\" WHERE id = ?1"))
        .and_then(|mut s| s.query_row([id], |r| r.get::<_, String>(0)).optional())
        .map_err(sql_error)
}

/// Remove document `id` and its index entries; `false` when it does not exist.
fn delete_doc(c: &Connection, table: &str, idx: &Indexes, id: &str) -> Result<bool> {
    if !idx.defs.is_empty() {
        match stored_body(c, table, id)? {
            Some(old) => remove_keys(c, idx, id, &old)?,
            None => return Ok(false),
        }
    }
    let n = c
        .prepare_cached(&format!("DELETE FROM \"{table}\" WHERE id = ?1"))
        .and_then(|mut s| s.execute([id]))
        .map_err(sql_error)?;
    Ok(n > 0)
}

fn upsert_sql(table: &str) -> String {
    format!(
        "INSERT INTO \"{table}\" (id, body) VALUES (?1, ?2) \
         ON CONFLICT (id) DO UPDATE SET body = excluded.body"
    )
}

/// Store `text` as document `id` with `upsert` (see [`upsert_sql`]), creating or replacing
/// it, with its index entries.
fn upsert_doc(
    c: &Connection,
    table: &str,
    idx: &Indexes,
    upsert: &mut rusqlite::CachedStatement<'_>,
    id: &str,
    text: &str,
) -> Result<()> {
    if !idx.defs.is_empty()
        && let Some(old) = stored_body(c, table, id)?
    {
        remove_keys(c, idx, id, &old)?;
    }
    upsert.execute(params![id, text]).map_err(sql_error)?;
    add_keys(c, idx, id, text)
}

enum Prepared {
    Put { id: DocId, text: String },
    Delete { id: DocId },
    Done(BulkOutcome),
}

#[async_trait]
impl DocStore for SqliteDocStore {
    async fn create(&self, instance: &Instance, id: Option<DocId>, doc: Document) -> Result<DocId> {
        self.disk.admit()?;
        let id = match id {
            Some(id) => id,
            None => self.ids.next_id(&*self.clock)?.parse()?,
        };
        let text = stored_text(&id, doc)?;
        let name = instance.name.clone();
        let key = id.clone();
        let at = self.clock.now_ms();
        // A new document was held by no one: nothing to forget.
        self.write(instance, Vec::new(), move |c, table, idx| {
            c.prepare_cached(&format!(
                "INSERT INTO \"{table}\" (id, body) VALUES (?1, ?2)"
            ))
            .and_then(|mut s| s.execute(params![key.as_str(), text]))
            .map_err(|e| {
                if is_unique_violation(&e) {
                    document_exists(&name, &key)
                } else {
                    sql_error(e)
                }
            })?;
            add_keys(c, idx, key.as_str(), &text)?;
            record(c, table, key.as_str(), false, at)
        })
        .await?;
        Ok(id)
    }

    async fn get(&self, instance: &Instance, id: &DocId) -> Result<Option<RawJson>> {
        let miss = match self.hot.get(instance.id, id.as_str()) {
            Ok(doc) => return Ok(Some(doc)),
            Err(miss) => miss,
        };
        let table = self.table(instance);
        let text = self
            .db()
            .read_now(|c| stored_body(c, &table, id.as_str()))?;
        let doc = text.map(stored_raw).transpose()?;
        if let Some(doc) = &doc {
            self.hot.fill(instance.id, id.as_str(), doc, miss);
        }
        Ok(doc)
    }

    async fn replace(&self, instance: &Instance, id: &DocId, doc: Document) -> Result<()> {
        self.disk.admit()?;
        let text = stored_text(id, doc)?;
        let not_found = missing(instance, id);
        let key = id.clone();
        let at = self.clock.now_ms();
        self.write(
            instance,
            vec![id.as_str().to_owned()],
            move |c, table, idx| {
                if !idx.defs.is_empty() {
                    let Some(old) = stored_body(c, table, key.as_str())? else {
                        return Err(not_found);
                    };
                    remove_keys(c, idx, key.as_str(), &old)?;
                }
                let n = c
                    .prepare_cached(&format!("UPDATE \"{table}\" SET body = ?2 WHERE id = ?1"))
                    .and_then(|mut s| s.execute(params![key.as_str(), text]))
                    .map_err(sql_error)?;
                if n == 0 {
                    return Err(not_found);
                }
                add_keys(c, idx, key.as_str(), &text)?;
                record(c, table, key.as_str(), false, at)
            },
        )
        .await
    }

    async fn remove(&self, instance: &Instance, id: &DocId) -> Result<()> {
        let not_found = missing(instance, id);
        let key = id.clone();
        let at = self.clock.now_ms();
        self.write(
            instance,
            vec![id.as_str().to_owned()],
            move |c, table, idx| {
                if delete_doc(c, table, idx, key.as_str())? {
                    record(c, table, key.as_str(), true, at)
                } else {
                    Err(not_found)
                }
            },
        )
        .await
    }

    async fn bulk(&self, instance: &Instance, ops: Vec<BulkOp>) -> Result<Vec<BulkOutcome>> {
        self.disk.admit()?;
        let prepared: Vec<Prepared> = ops
            .into_iter()
            .map(|op| match op {
                BulkOp::Put { id, text } => Prepared::Put { id, text },
                BulkOp::Delete { id } => Prepared::Delete { id },
                BulkOp::Reject { id, error } => Prepared::Done(BulkOutcome::failed(id, error)),
            })
            .collect();
        let name = instance.name.clone();
        let changed = prepared
            .iter()
            .filter_map(|p| match p {
                Prepared::Put { id, .. } | Prepared::Delete { id } => Some(id.as_str().to_owned()),
                Prepared::Done(_) => None,
            })
            .collect();
        let at = self.clock.now_ms();
        self.write(instance, changed, move |c, table, idx| {
            let mut out = Vec::with_capacity(prepared.len());
            // Prepared once for the whole batch, not looked up per document.
            let mut upsert = c.prepare_cached(&upsert_sql(table)).map_err(sql_error)?;
            let mut log = c.prepare_cached(&record_sql(table)).map_err(sql_error)?;
            for p in prepared {
                out.push(match p {
                    Prepared::Put { id, text } => {
                        upsert_doc(c, table, idx, &mut upsert, id.as_str(), &text)?;
                        record_with(&mut log, id.as_str(), false, at)?;
                        BulkOutcome::applied(&id)
                    }
                    Prepared::Delete { id } => {
                        if delete_doc(c, table, idx, id.as_str())? {
                            record_with(&mut log, id.as_str(), true, at)?;
                            BulkOutcome::applied(&id)
                        } else {
                            BulkOutcome::failed(
                                Some(id.as_str().to_owned()),
                                document_missing(&name, &id).public_message(),
                            )
                        }
                    }
                    Prepared::Done(o) => o,
                });
            }
            Ok(out)
        })
        .await
    }

    async fn list(&self, instance: &Instance, query: ListQuery) -> Result<DocStream> {
        let pages = Pages {
            db: self.db().clone(),
            table: self.table(instance),
        };
        list_stream(pages, query, LIST_PAGE).await
    }

    async fn find(&self, instance: &Instance, query: FindQuery) -> Result<FindOutcome> {
        let indexes = self.reader_indexes(instance).await?;
        let table = self.table(instance);
        self.db()
            .read_bounded(QUERY_DEADLINE, move |c| {
                let started = Instant::now();
                let p = plan(&query, &indexes.defs);
                let mut col = Collector::new(&query, p.ordered);
                let mut offer_rows = |sql: &str, params: &[&dyn rusqlite::ToSql]| -> Result<bool> {
                    let mut stmt = c.prepare_cached(sql).map_err(sql_error)?;
                    let mut rows = stmt.query(params).map_err(sql_error)?;
                    while let Some(row) = rows.next().map_err(sql_error)? {
                        let body = row
                            .get_ref(0)
                            .and_then(|v| v.as_str().map_err(Into::into))
                            .map_err(sql_error)?;
                        if !col.offer_json(body)? {
                            return Ok(false);
                        }
                    }
                    Ok(true)
                };
                let name = match p.index {
                    None => {
                        offer_rows(&format!("SELECT body FROM \"{table}\" ORDER BY id"), &[])?;
                        None
                    }
                    Some(i) => {
                        let ix = &indexes.tables[i];
                        let dir = if p.descending { "DESC" } else { "ASC" };
                        let mut ranges: Vec<_> = p.ranges.iter().collect();
                        if p.descending {
                            ranges.reverse();
                        }
                        for r in ranges {
                            let more = match &r.hi {
                                Some(hi) => offer_rows(
                                    &format!(
                                        "SELECT d.body FROM \"{ix}\" AS x JOIN \"{table}\" AS d \
                                         ON d.id = x.id WHERE x.k >= ?1 AND x.k < ?2 \
                                         ORDER BY x.k {dir}, x.id {dir}"
                                    ),
                                    &[&r.lo, hi],
                                )?,
                                None => offer_rows(
                                    &format!(
                                        "SELECT d.body FROM \"{ix}\" AS x JOIN \"{table}\" AS d \
                                         ON d.id = x.id WHERE x.k >= ?1 \
                                         ORDER BY x.k {dir}, x.id {dir}"
                                    ),
                                    &[&r.lo],
                                )?,
                            };
                            if !more {
                                break;
                            }
                        }
                        Some(indexes.defs[i].name.clone())
                    }
                };
                let elapsed = started.elapsed().as_secs_f64() * 1000.0;
                Ok(col.finish(&p, name, elapsed))
            })
            .await
    }

    async fn create_index(&self, instance: &Instance, index: IndexDef) -> Result<()> {
        self.disk.admit()?;
        let def_text = index.to_json().to_string();
        let name = instance.name.clone();
        let cache = Arc::clone(&self.writer_indexes);
        let id = instance.id;
        let created = self
            .write(instance, Vec::new(), move |c, table, _| {
                let meta = format!("{table}_ix");
                let existing: Option<String> = c
                    .prepare_cached(&format!("SELECT def FROM \"{meta}\" WHERE name = ?1"))
                    .and_then(|mut s| s.query_row([&index.name], |r| r.get(0)).optional())
                    .map_err(sql_error)?;
                if let Some(existing) = existing {
                    let same = serde_json::from_str::<Value>(&existing)
                        .is_ok_and(|v| v == index.to_json());
                    return if same {
                        Ok(false)
                    } else {
                        Err(index_name_taken(&name, &index.name))
                    };
                }
                let (count, num): (i64, i64) = c
                    .query_row(
                        &format!("SELECT count(*), coalesce(max(num), 0) + 1 FROM \"{meta}\""),
                        [],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .map_err(sql_error)?;
                if count as usize >= MAX_INDEXES {
                    return Err(too_many_indexes(&name));
                }
                let ix = format!("{table}_i{num}");
                c.execute_batch(&format!(
                    "CREATE TABLE \"{ix}\" (k BLOB NOT NULL, id TEXT NOT NULL, \
                     PRIMARY KEY (k, id)) STRICT, WITHOUT ROWID"
                ))
                .map_err(sql_error)?;
                let mut insert = c
                    .prepare(&format!("INSERT INTO \"{ix}\" (k, id) VALUES (?1, ?2)"))
                    .map_err(sql_error)?;
                let mut docs = c
                    .prepare(&format!("SELECT id, body FROM \"{table}\""))
                    .map_err(sql_error)?;
                let mut rows = docs.query([]).map_err(sql_error)?;
                while let Some(row) = rows.next().map_err(sql_error)? {
                    let id: String = row.get(0).map_err(sql_error)?;
                    let body = row
                        .get_ref(1)
                        .and_then(|v| v.as_str().map_err(Into::into))
                        .map_err(sql_error)?;
                    let doc = stored_value(body)?;
                    if let Some(key) = index.key_of(&doc) {
                        insert.execute(params![key, id]).map_err(sql_error)?;
                    }
                }
                c.prepare_cached(&format!(
                    "INSERT INTO \"{meta}\" (name, num, def) VALUES (?1, ?2, ?3)"
                ))
                .and_then(|mut s| s.execute(params![index.name, num, def_text]))
                .map_err(sql_error)?;
                // The next write of this instance reloads the list, new index included.
                if let Ok(mut m) = cache.lock() {
                    m.remove(&id);
                }
                Ok(true)
            })
            .await?;
        if created {
            self.forget_indexes(instance.id);
        }
        Ok(())
    }

    async fn indexes(&self, instance: &Instance) -> Result<Vec<IndexDef>> {
        Ok(self.reader_indexes(instance).await?.defs.clone())
    }

    async fn changes(&self, instance: &Instance, since: u64, limit: usize) -> Result<ChangesPage> {
        let table = self.table(instance);
        // Pages are small and indexed by seq: read on the caller's thread, like `get`.
        self.db().read_now(|c| {
            let log = format!("{table}_ch");
            if !table_exists(c, &log)? {
                // An instance untouched since before change logs existed has none yet.
                return if table_exists(c, &table)? {
                    check_since(instance, since, 0, None)?;
                    Ok(ChangesPage::default())
                } else {
                    Err(Error::not_found(INSTANCE_GONE))
                };
            }
            changelog::page(c, &log, "id, deleted", instance, since, limit, |r| {
                Ok(Change {
                    seq: r.get::<_, i64>(0)? as u64,
                    id: r.get(1)?,
                    deleted: r.get(2)?,
                })
            })
        })
    }

    async fn change_head(&self, instance: &Instance) -> Result<u64> {
        let table = self.table(instance);
        self.db().read_now(|c| {
            if !table_exists(c, &table)? {
                return Err(Error::not_found(INSTANCE_GONE));
            }
            changelog::head(c, &format!("{table}_ch"))
        })
    }

    async fn compact_changes(&self, before_ms: i64) -> Result<u64> {
        changelog::compact(self.db(), "d[0-9]*_ch", before_ms).await
    }

    fn subscribe_changes(&self, listener: Weak<dyn FeedListener>) {
        changelog::subscribe(&self.listeners, listener);
    }
}

/// Where a list reads its pages: the instance's table.
struct Pages {
    db: SqliteDb,
    table: String,
}

#[async_trait]
impl ListPages for Pages {
    async fn by_ids(&self, ids: &[String], limit: usize) -> Result<Vec<RawJson>> {
        let (table, ids) = (self.table.clone(), ids.to_vec());
        self.db
            .read(move |c| {
                let mut out = Vec::new();
                for id in ids {
                    if out.len() >= limit {
                        break;
                    }
                    if let Some(body) = stored_body(c, &table, &id)? {
                        out.push(stored_raw(body)?);
                    }
                }
                Ok(out)
            })
            .await
    }

    async fn page(&self, page: Page<'_>) -> Result<Vec<(String, RawJson)>> {
        let (mut conds, mut args) = (Vec::new(), Vec::new());
        if let Some(l) = page.low {
            conds.push("id >= ?");
            args.push(l.to_owned());
        }
        if let Some(h) = page.high {
            conds.push("id <= ?");
            args.push(h.to_owned());
        }
        if let Some(after) = page.after {
            conds.push(if page.descending { "id < ?" } else { "id > ?" });
            args.push(after.to_owned());
        }
        let sql = format!(
            "SELECT id, body FROM \"{}\"{}{} ORDER BY id {} LIMIT {}",
            self.table,
            if conds.is_empty() { "" } else { " WHERE " },
            conds.join(" AND "),
            if page.descending { "DESC" } else { "ASC" },
            page.size,
        );
        // A list may walk the whole table (an export does): read it without mapping the
        // file, so the walk does not leave the table's pages resident in the process.
        self.db
            .scan(move |c| {
                let mut stmt = c.prepare_cached(&sql).map_err(sql_error)?;
                let rows = stmt
                    .query_map(params_from_iter(args.iter()), |r| {
                        Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
                    })
                    .map_err(sql_error)?;
                let mut out = Vec::new();
                for row in rows {
                    let (id, body) = row.map_err(sql_error)?;
                    out.push((id, stored_raw(body)?));
                }
                Ok(out)
            })
            .await
    }
}

#[async_trait]
impl Lifecycle for SqliteDocStore {
    async fn create_instance(&self, instance: &Instance) -> Result<()> {
        self.disk.admit()?;
        self.tables.create(instance.id).await
    }

    async fn drop_instance(&self, instance: &Instance) -> Result<()> {
        let dropped = self.tables.drop(instance.id).await;
        // Even when the drop reports a failure its tables may be gone (a failed fsync after
        // the commit): what is cached of them must go either way.
        self.forget_indexes(instance.id);
        self.hot.forget_instance(instance.id);
        dropped
    }

    async fn ready(&self) -> Result<()> {
        self.disk.ready()
    }

    async fn sweep(&self, keep: &Keep) -> Result<usize> {
        let swept = self.tables.sweep(keep).await;
        self.hot.retain_instances(|i| keep.keeps(i));
        swept
    }

    fn pool(&self) -> Option<PoolUsage> {
        // Files of the node's own: no engine connections.
        None
    }

    async fn close(&self) -> Result<()> {
        self.tables.db().close().await
    }
}
