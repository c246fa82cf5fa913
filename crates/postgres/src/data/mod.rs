//! Data on PostgreSQL: JSON documents shared by every node, with the Mango indexes of
//! `quintet_core::mango` kept in a PostgreSQL B-tree.
//!
//! Tables, shared by every instance and keyed by the instance id:
//!
//! | table | row | why |
//! |---|---|---|
//! | `quintet_data_instances` | instance, version of its index definitions | the lock writers share and index creation and drops take alone |
//! | `quintet_data_docs` | instance, id, stored text, the same as `jsonb` | `get` and lists serve the text as stored (member order, number spelling); the `jsonb` lets PostgreSQL filter candidates (and operators query documents in SQL) |
//! | `quintet_data_indexes` | instance, name, number, definition | the instance's indexes |
//! | `quintet_data_keys` | instance, index number, key, id | one entry per indexed document: the [`keycode`](quintet_core::mango::keycode) encoding of its indexed fields |
//!
//! **Why index keys and not `jsonb` expression indexes.** Mango compares in CouchDB
//! collation (`null < false < true < numbers < strings < arrays < objects`, strings by
//! code point). `jsonb` orders types differently and strings by the database's collation,
//! so a range over an expression index on `doc->'year'` would miss or add documents. The
//! core planner already turns a selector into byte ranges over order-preserving keys; a
//! `bytea` B-tree compares bytes as the embedded engine does, so both adapters walk the same
//! ranges in the same order and answer alike. A partial index holds entries for matching
//! documents only. The selector's remaining conditions are translated to SQL where that
//! is exact (`prefilter`), and the core evaluator re-checks every candidate.
//!
//! **Consistency across nodes.** Every write shares its instance's row lock
//! (`FOR SHARE`) and checks the version of the index definitions it computed keys with;
//! `create_index` and drops take the row alone (`FOR UPDATE`, `DELETE`). So a write either
//! commits before an index is built (and the build sees it) or waits and recomputes its
//! keys with the new definitions; no node ever writes a document without its index
//! entries. Writes that replace or remove an indexed document lock its row before they
//! delete its old entries, so entries always match the committed document.
//!
//! - `changes`: the change log (`quintet_data_seq`, `quintet_data_changes`, a trigger)
//!   and the `LISTEN` task telling this node about changes made through any node.
//! - `write`: create, replace, remove, bulk, index creation.
//! - `group`: concurrent creates of a node committed together.
//! - `read`: get, list, find.
//! - `prefilter`: the parts of a selector PostgreSQL can check exactly.

mod changes;
mod group;
mod prefilter;
mod read;
mod write;

use std::{
    collections::HashMap,
    sync::{Arc, RwLock, Weak},
};

use async_trait::async_trait;
use quintet_core::{
    Clock, Error, Instance, InstanceId, Result,
    id::IdGenerator,
    ports::{
        Keep, Lifecycle, PoolUsage,
        changes::{ChangesPage, FeedListener},
        data::{
            BulkOp, BulkOutcome, DocId, DocStore, DocStream, Document, FindOutcome, FindQuery,
            IndexDef, ListQuery, RawJson, document_missing, stored_index,
        },
    },
};
use tokio_postgres::GenericClient;

use crate::{database::PgDatabase, error::pg_error, listen::FeedWaker};

/// The schema migrations of data, append only (see [`PgDatabase::migrate`]).
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE quintet_data_instances (
    instance  BIGINT PRIMARY KEY,
    indexes   BIGINT NOT NULL DEFAULT 0
);

CREATE TABLE quintet_data_docs (
    instance  BIGINT NOT NULL,
    id        TEXT COLLATE "C" NOT NULL,
    body      TEXT NOT NULL,
    doc       JSONB,
    PRIMARY KEY (instance, id)
);

CREATE TABLE quintet_data_indexes (
    instance  BIGINT NOT NULL,
    name      TEXT COLLATE "C" NOT NULL,
    num       INTEGER NOT NULL,
    def       TEXT NOT NULL,
    PRIMARY KEY (instance, name),
    UNIQUE (instance, num)
);

CREATE TABLE quintet_data_keys (
    instance  BIGINT NOT NULL,
    num       INTEGER NOT NULL,
    k         BYTEA NOT NULL,
    id        TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (instance, num, k, id)
);
CREATE INDEX quintet_data_keys_by_doc ON quintet_data_keys (instance, id);
"#,
    changes::MIGRATION,
];

/// The index definitions of one instance at one version, in name order (the order the
/// embedded engine plans over, so both choose the same index).
#[derive(Debug, Default)]
struct Indexes {
    /// `quintet_data_instances.indexes` when these were read.
    version: i64,
    defs: Vec<IndexDef>,
    /// The number of each index, its entries' `num`.
    nums: Vec<i32>,
}

/// Documents of every data instance, in PostgreSQL tables shared by all nodes.
#[derive(Debug, Clone)]
pub struct PgDocStore {
    db: PgDatabase,
    clock: Arc<dyn Clock>,
    ids: Arc<IdGenerator>,
    /// Index definitions per instance as last read; every use checks the version.
    indexes: Arc<RwLock<HashMap<InstanceId, Arc<Indexes>>>>,
    /// Tells this node's feed listeners about changes made through any node.
    wake: Arc<FeedWaker>,
    /// Commits this node's concurrent creates together.
    groups: Arc<group::Groups>,
}

fn instance_gone(instance: &Instance) -> Error {
    Error::not_found(format!(
        "data instance \"{}\" does not exist; create it with PUT /data/{}",
        instance.name, instance.name
    ))
}

fn missing(instance: &Instance, id: &DocId) -> Error {
    document_missing(&instance.name, id)
}

/// The definitions and version as one statement reads them (one snapshot).
const LOAD_INDEXES: &str = "SELECT i.indexes, x.name, x.num, x.def \
     FROM quintet_data_instances i \
     LEFT JOIN quintet_data_indexes x ON x.instance = i.instance \
     WHERE i.instance = $1 ORDER BY x.name";

impl PgDocStore {
    /// Apply the data migrations and open the adapter over `db` (typically the pool the
    /// registry uses); `clock` dates generated ids.
    pub async fn open(db: PgDatabase, clock: Arc<dyn Clock>) -> Result<Self> {
        db.migrate("data", MIGRATIONS).await?;
        let channel: String = db
            .client()
            .await?
            .query_one("SELECT 'quintet_data_' || md5(current_schema())", &[])
            .await
            .map_err(pg_error)?
            .try_get(0)
            .map_err(pg_error)?;
        let wake = Arc::new(FeedWaker::start(&db, "data-listen", "data changes", &channel).await?);
        let groups = Arc::new(group::Groups::new(&db));
        Ok(Self {
            db,
            clock,
            ids: Arc::new(IdGenerator::new()),
            indexes: Arc::default(),
            wake,
            groups,
        })
    }

    /// The database this adapter uses.
    pub fn database(&self) -> &PgDatabase {
        &self.db
    }

    fn cached(&self, id: InstanceId) -> Option<Arc<Indexes>> {
        self.indexes.read().ok().and_then(|m| m.get(&id).cloned())
    }

    fn remember(&self, id: InstanceId, indexes: &Arc<Indexes>) {
        if let Ok(mut m) = self.indexes.write() {
            // A slower reader must not put back an older version than one already known.
            let newer = m
                .get(&id)
                .is_some_and(|known| known.version > indexes.version);
            if !newer {
                m.insert(id, Arc::clone(indexes));
            }
        }
    }

    fn forget(&self, id: InstanceId) {
        if let Ok(mut m) = self.indexes.write() {
            m.remove(&id);
        }
    }

    /// The instance's index definitions at `version`: the cached ones when they are of it,
    /// else read through `client` (inside the caller's transaction, so they match what it
    /// sees). [`Error::NotFound`] when the instance is gone.
    async fn indexes_at(
        &self,
        client: &impl GenericClient,
        instance: &Instance,
        version: Option<i64>,
    ) -> Result<Arc<Indexes>> {
        if let (Some(v), Some(hit)) = (version, self.cached(instance.id))
            && hit.version == v
        {
            return Ok(hit);
        }
        let rows = client
            .query(LOAD_INDEXES, &[&instance.id.0])
            .await
            .map_err(pg_error)?;
        let Some(first) = rows.first() else {
            return Err(instance_gone(instance));
        };
        let mut loaded = Indexes {
            version: first.get(0),
            ..Indexes::default()
        };
        for row in &rows {
            let Some(def) = row.get::<_, Option<String>>(3) else {
                continue;
            };
            loaded.defs.push(stored_index(&def)?);
            loaded.nums.push(row.get(2));
        }
        let loaded = Arc::new(loaded);
        self.remember(instance.id, &loaded);
        Ok(loaded)
    }

    /// The definitions as last known, read when unknown: a guess a write checks.
    async fn indexes_guess(&self, instance: &Instance) -> Result<Arc<Indexes>> {
        match self.cached(instance.id) {
            Some(hit) => Ok(hit),
            None => {
                let client = self.db.client().await?;
                self.indexes_at(&**client, instance, None).await
            }
        }
    }
}

/// Remove every row of instance `id`. The instance row goes first: writers share its
/// lock, so the drop waits for them, and a write that starts later finds the instance gone.
async fn drop_rows(db: &PgDatabase, id: i64) -> Result<()> {
    db.drop_instance_rows(
        "quintet_data_instances",
        &[
            // The counter first: the change trigger, run at commit, then records nothing
            // for the documents this transaction deletes.
            "quintet_data_seq",
            "quintet_data_changes",
            "quintet_data_keys",
            "quintet_data_indexes",
            "quintet_data_docs",
        ],
        id,
    )
    .await
}

#[async_trait]
impl Lifecycle for PgDocStore {
    async fn create_instance(&self, instance: &Instance) -> Result<()> {
        self.db
            .client()
            .await?
            .batch_execute(&format!(
                "INSERT INTO quintet_data_instances (instance) VALUES ({id}) \
                 ON CONFLICT (instance) DO NOTHING; \
                 INSERT INTO quintet_data_seq (instance) VALUES ({id}) \
                 ON CONFLICT (instance) DO NOTHING",
                id = instance.id.0
            ))
            .await
            .map_err(pg_error)?;
        Ok(())
    }

    async fn drop_instance(&self, instance: &Instance) -> Result<()> {
        drop_rows(&self.db, instance.id.0).await?;
        self.forget(instance.id);
        Ok(())
    }

    async fn ready(&self) -> Result<()> {
        self.db.ping().await
    }

    async fn sweep(&self, keep: &Keep) -> Result<usize> {
        // Ids above the registry's highest are kept: an instance another node creates
        // meanwhile stays.
        let live: Vec<i64> = keep.listed().map(|i| i.0).collect();
        let orphans: Vec<i64> = self
            .db
            .client()
            .await?
            .query(
                "SELECT instance FROM quintet_data_instances \
                 WHERE NOT (instance = ANY($1)) AND instance <= $2",
                &[&live, &keep.kept_above()],
            )
            .await
            .map_err(pg_error)?
            .iter()
            .map(|r| r.get(0))
            .collect();
        for id in &orphans {
            drop_rows(&self.db, *id).await?;
            self.forget(InstanceId(*id));
        }
        if !orphans.is_empty() {
            tracing::info!(
                count = orphans.len(),
                "removed data instances the registry does not know"
            );
        }
        Ok(orphans.len())
    }

    fn pool(&self) -> Option<PoolUsage> {
        Some(self.db.pool_usage())
    }

    async fn close(&self) -> Result<()> {
        // The pool is shared with the other PostgreSQL adapters of the node; whoever opened
        // it closes it.
        self.wake.stop();
        Ok(())
    }
}

#[async_trait]
impl DocStore for PgDocStore {
    async fn create(&self, instance: &Instance, id: Option<DocId>, doc: Document) -> Result<DocId> {
        let id = match id {
            Some(id) => id,
            None => self.ids.next_id(&*self.clock)?.parse()?,
        };
        let text = quintet_core::ports::data::stored_text(&id, doc)?;
        write::create(self, instance, &id, &text).await?;
        self.wake.tell(instance.id);
        Ok(id)
    }

    async fn get(&self, instance: &Instance, id: &DocId) -> Result<Option<RawJson>> {
        read::get(&self.db, instance, id).await
    }

    async fn replace(&self, instance: &Instance, id: &DocId, doc: Document) -> Result<()> {
        let text = quintet_core::ports::data::stored_text(id, doc)?;
        write::replace(self, instance, id, text).await?;
        self.wake.tell(instance.id);
        Ok(())
    }

    async fn remove(&self, instance: &Instance, id: &DocId) -> Result<()> {
        write::remove(self, instance, id).await?;
        self.wake.tell(instance.id);
        Ok(())
    }

    async fn bulk(&self, instance: &Instance, ops: Vec<BulkOp>) -> Result<Vec<BulkOutcome>> {
        let out = write::bulk(self, instance, ops).await?;
        self.wake.tell(instance.id);
        Ok(out)
    }

    async fn list(&self, instance: &Instance, query: ListQuery) -> Result<DocStream> {
        read::list(&self.db, instance, query).await
    }

    async fn find(&self, instance: &Instance, query: FindQuery) -> Result<FindOutcome> {
        read::find(self, instance, query).await
    }

    async fn create_index(&self, instance: &Instance, index: IndexDef) -> Result<()> {
        write::create_index(self, instance, index).await
    }

    async fn indexes(&self, instance: &Instance) -> Result<Vec<IndexDef>> {
        let client = self.db.client().await?;
        let version: Option<i64> = client
            .query_opt(
                "SELECT indexes FROM quintet_data_instances WHERE instance = $1",
                &[&instance.id.0],
            )
            .await
            .map_err(pg_error)?
            .map(|r| r.get(0));
        let Some(version) = version else {
            return Err(instance_gone(instance));
        };
        Ok(self
            .indexes_at(&**client, instance, Some(version))
            .await?
            .defs
            .clone())
    }

    async fn changes(&self, instance: &Instance, since: u64, limit: usize) -> Result<ChangesPage> {
        changes::page(&self.db, instance, since, limit).await
    }

    async fn change_head(&self, instance: &Instance) -> Result<u64> {
        changes::head(&self.db, instance).await
    }

    async fn compact_changes(&self, before_ms: i64) -> Result<u64> {
        changes::compact(&self.db, before_ms).await
    }

    fn subscribe_changes(&self, listener: Weak<dyn FeedListener>) {
        self.wake.subscribe(listener);
    }
}
