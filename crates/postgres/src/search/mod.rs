//! Search on PostgreSQL: every node answers from the same tables, so a document indexed
//! through one node is found through any other.
//!
//! The engine-neutral rules (words, typo budget, expansions, explanation, ranking) are
//! `quintet_core::search`'s; this module supplies what an engine must: per field token
//! postings with BM25 statistics, the index terms each query word may match, and the
//! documents containing them.
//!
//! Tables, shared by every instance and keyed by the instance id:
//!
//! | table | row | why |
//! |---|---|---|
//! | `quintet_search_instances` | instance, documents, tokens per field | BM25's N and average lengths; its row lock serializes an instance's writes |
//! | `quintet_search_docs` | id, instance, key, JSON text, tokens per field | `get`, shaping matches, BM25's document length |
//! | `quintet_search_postings` | instance, field, term, document, term frequency | which documents hold a term, BM25's tf and df |
//! | `quintet_search_terms` | instance, field, term, documents | the vocabulary: exact, prefix (B-tree range) and typo (`pg_trgm` GIN) lookups |
//!
//! - `query`: answering a query.
//! - `write`: index, update, remove, bulk in one transaction each.
//!
//! Writes to one instance take its `quintet_search_instances` row `FOR UPDATE` first, so
//! they run one at a time (as on the embedded engine's single writer) and the vocabulary
//! counts never deadlock; writes to different instances do not wait for each other. A
//! write returns after its transaction commits, so it is durable and visible to every
//! query that starts afterwards, on any node.

mod query;
mod write;

use async_trait::async_trait;
use quintet_core::{
    Error, Instance, Result,
    ports::{
        Keep, Lifecycle, PoolUsage,
        data::RawJson,
        search::{
            SearchDoc, SearchIndex, SearchKey, SearchMatch, SearchQuery, config_of, index_missing,
            stored_raw,
        },
    },
};

use crate::{database::PgDatabase, error::pg_error};

/// The schema migrations of search, append only (see [`PgDatabase::migrate`]). `{trgm}` is
/// replaced by the schema `pg_trgm` is installed in.
const MIGRATIONS: &[&str] = &[r#"
CREATE TABLE quintet_search_instances (
    instance    BIGINT PRIMARY KEY,
    docs        BIGINT NOT NULL,
    tokens      BIGINT[] NOT NULL
);

CREATE TABLE quintet_search_docs (
    id        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    instance  BIGINT NOT NULL,
    key       TEXT COLLATE "C" NOT NULL,
    src       TEXT NOT NULL,
    lengths   INTEGER[] NOT NULL,
    UNIQUE (instance, key)
);

CREATE TABLE quintet_search_postings (
    instance  BIGINT NOT NULL,
    field     SMALLINT NOT NULL,
    term      TEXT COLLATE "C" NOT NULL,
    doc       BIGINT NOT NULL,
    tf        INTEGER NOT NULL,
    PRIMARY KEY (instance, field, term, doc)
);
CREATE INDEX quintet_search_postings_by_doc ON quintet_search_postings (doc);

CREATE TABLE quintet_search_terms (
    instance  BIGINT NOT NULL,
    field     SMALLINT NOT NULL,
    term      TEXT COLLATE "C" NOT NULL,
    docs      INTEGER NOT NULL,
    PRIMARY KEY (instance, field, term)
);
CREATE INDEX quintet_search_terms_trgm ON quintet_search_terms
    USING GIN (term "{trgm}".gin_trgm_ops);
"#];

/// Full-text indexes of every search instance, in PostgreSQL tables shared by all nodes.
#[derive(Debug, Clone)]
pub struct PgSearchIndex {
    db: PgDatabase,
    /// The schema `pg_trgm`'s operators live in, for qualified references.
    trgm: String,
}

fn gone(instance: &str) -> Error {
    index_missing(instance)
}

impl PgSearchIndex {
    /// Install `pg_trgm` when the database lacks it, apply the search migrations and open
    /// the adapter over `db` (typically the pool the registry uses).
    pub async fn open(db: PgDatabase) -> Result<Self> {
        let trgm = install_trgm(&db).await?;
        let migrations: Vec<String> = MIGRATIONS
            .iter()
            .map(|m| m.replace("{trgm}", &trgm.replace('"', "\"\"")))
            .collect();
        let refs: Vec<&str> = migrations.iter().map(String::as_str).collect();
        db.migrate("search", &refs).await?;
        Ok(Self { db, trgm })
    }

    /// The database this adapter uses.
    pub fn database(&self) -> &PgDatabase {
        &self.db
    }
}

/// Create the `pg_trgm` extension unless it exists, and name the schema it is in.
///
/// Extensions are per database, not per schema. A new one goes into `public` when it can
/// (so dropping one deployment's schema never drops the operators another deployment's
/// index uses), else into the current schema. A global advisory lock keeps nodes and
/// deployments starting at once from racing on `CREATE EXTENSION`.
async fn install_trgm(db: &PgDatabase) -> Result<String> {
    let mut client = db.client().await?;
    let tx = client.transaction().await.map_err(pg_error)?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended('quintet pg_trgm', 0))",
        &[],
    )
    .await
    .map_err(pg_error)?;
    let find =
        "SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'pg_trgm'";
    if let Some(row) = tx.query_opt(find, &[]).await.map_err(pg_error)? {
        let schema: String = row.get(0);
        tx.commit().await.map_err(pg_error)?;
        return Ok(schema.trim_matches('"').to_owned());
    }
    // Without a `public` schema (or where the extension may not go there), it goes into
    // the current schema.
    tx.batch_execute("SAVEPOINT quintet_trgm")
        .await
        .map_err(pg_error)?;
    let in_public = tx
        .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_trgm WITH SCHEMA public")
        .await;
    if let Err(e) = in_public {
        tracing::debug!(error = %crate::error::detail(&e), "pg_trgm cannot go into public");
        tx.batch_execute("ROLLBACK TO SAVEPOINT quintet_trgm")
            .await
            .map_err(pg_error)?;
        tx.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
            .await
            .map_err(|e| {
                tracing::error!(
                    error = %crate::error::detail(&e),
                    "cannot create the pg_trgm extension"
                );
                Error::Unavailable(
                    "search on PostgreSQL needs the pg_trgm extension: install the PostgreSQL \
                     contrib package, or have a superuser run CREATE EXTENSION pg_trgm in the \
                     database"
                        .into(),
                )
            })?;
    }
    let schema: String = tx.query_one(find, &[]).await.map_err(pg_error)?.get(0);
    tx.commit().await.map_err(pg_error)?;
    Ok(schema.trim_matches('"').to_owned())
}

/// Remove every row of instance `id`. The instance row goes first: it is the lock writers
/// take, so a write racing the drop either finishes before or finds the instance gone.
async fn drop_rows(db: &PgDatabase, id: i64) -> Result<()> {
    db.drop_instance_rows(
        "quintet_search_instances",
        &[
            "quintet_search_postings",
            "quintet_search_terms",
            "quintet_search_docs",
        ],
        id,
    )
    .await
}

#[async_trait]
impl Lifecycle for PgSearchIndex {
    async fn create_instance(&self, instance: &Instance) -> Result<()> {
        let fields = i32::try_from(config_of(instance)?.fields.len())
            .map_err(|_| Error::internal("too many search fields"))?;
        self.db
            .client()
            .await?
            .execute(
                "INSERT INTO quintet_search_instances (instance, docs, tokens) \
                 VALUES ($1, 0, array_fill(0::bigint, ARRAY[$2::int])) \
                 ON CONFLICT (instance) DO NOTHING",
                &[&instance.id.0, &fields],
            )
            .await
            .map_err(pg_error)?;
        Ok(())
    }

    async fn drop_instance(&self, instance: &Instance) -> Result<()> {
        drop_rows(&self.db, instance.id.0).await
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
                "SELECT instance FROM quintet_search_instances \
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
        }
        if !orphans.is_empty() {
            tracing::info!(
                count = orphans.len(),
                "removed search instances the registry does not know"
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
        Ok(())
    }
}

#[async_trait]
impl SearchIndex for PgSearchIndex {
    async fn index(&self, instance: &Instance, doc: SearchDoc) -> Result<()> {
        write::apply(&self.db, instance, write::Write::Index(doc)).await
    }

    async fn get(&self, instance: &Instance, key: &SearchKey) -> Result<Option<RawJson>> {
        let client = self.db.client().await?;
        let row = client
            .query_opt(
                "SELECT src FROM quintet_search_docs WHERE instance = $1 AND key = $2",
                &[&instance.id.0, &key.as_str()],
            )
            .await
            .map_err(pg_error)?;
        let Some(row) = row else {
            let exists = client
                .query_opt(
                    "SELECT 1 FROM quintet_search_instances WHERE instance = $1",
                    &[&instance.id.0],
                )
                .await
                .map_err(pg_error)?;
            return match exists {
                Some(_) => Ok(None),
                None => Err(gone(instance.name.as_str())),
            };
        };
        let src: String = row.get(0);
        stored_raw(src).map(Some)
    }

    async fn update(&self, instance: &Instance, doc: SearchDoc) -> Result<()> {
        write::apply(&self.db, instance, write::Write::Update(doc)).await
    }

    async fn remove(&self, instance: &Instance, key: &SearchKey) -> Result<()> {
        write::apply(&self.db, instance, write::Write::Remove(key.clone())).await
    }

    async fn bulk(&self, instance: &Instance, docs: Vec<SearchDoc>) -> Result<()> {
        if docs.is_empty() {
            return Ok(());
        }
        write::apply(&self.db, instance, write::Write::Bulk(docs)).await
    }

    async fn query(&self, instance: &Instance, query: &SearchQuery) -> Result<Vec<SearchMatch>> {
        query::run(&self.db, &self.trgm, instance, query).await
    }

    async fn documents(
        &self,
        instance: &Instance,
        after: Option<&SearchKey>,
        limit: usize,
    ) -> Result<Vec<(SearchKey, RawJson)>> {
        let client = self.db.client().await?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = client
            .query(
                "SELECT key, src FROM quintet_search_docs WHERE instance = $1 AND key > $2 \
                 ORDER BY key LIMIT $3",
                &[&instance.id.0, &after.map_or("", |k| k.as_str()), &limit],
            )
            .await
            .map_err(pg_error)?;
        rows.into_iter()
            .map(|row| {
                let key: String = row.get(0);
                let src: String = row.get(1);
                Ok((key.parse()?, stored_raw(src)?))
            })
            .collect()
    }

    async fn count(&self, instance: &Instance) -> Result<u64> {
        let client = self.db.client().await?;
        // The instance's row and its count in one statement: no row, no instance.
        let row = client
            .query_opt(
                "SELECT (SELECT count(*) FROM quintet_search_docs WHERE instance = $1) \
                 FROM quintet_search_instances WHERE instance = $1",
                &[&instance.id.0],
            )
            .await
            .map_err(pg_error)?;
        let Some(row) = row else {
            return Err(gone(instance.name.as_str()));
        };
        let n: i64 = row.try_get(0).map_err(pg_error)?;
        Ok(u64::try_from(n).unwrap_or(0))
    }
}
