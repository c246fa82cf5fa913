//! Reads: a document by id, streamed lists, and Mango queries planned by
//! `quintet_core::mango` and walked over the index entries in PostgreSQL.

use std::time::Instant;

use async_trait::async_trait;
use deadpool_postgres::Transaction;
use quintet_core::{
    Error, Instance, Result,
    mango::{Collector, plan},
    ports::{
        data::{
            DocId, DocStream, FindOutcome, FindQuery, ListQuery, QUERY_DEADLINE, RawJson,
            stored_raw,
        },
        list::{ListPages, Page, list_stream},
    },
};
use tokio_postgres::{IsolationLevel, types::ToSql};

use super::{PgDocStore, instance_gone, prefilter::Prefilter};
use crate::{database::PgDatabase, error::pg_error};

/// Documents listed per round trip while streaming a list.
const LIST_PAGE: usize = 256;

/// Candidates fetched per round trip while answering a query.
const FIND_PAGE: i32 = 128;

pub(super) async fn get(
    db: &PgDatabase,
    instance: &Instance,
    id: &DocId,
) -> Result<Option<RawJson>> {
    let client = db.client().await?;
    let stmt = client
        .prepare_cached("SELECT body FROM quintet_data_docs WHERE instance = $1 AND id = $2")
        .await
        .map_err(pg_error)?;
    client
        .query_opt(&stmt, &[&instance.id.0, &id.as_str()])
        .await
        .map_err(pg_error)?
        .map(|row| stored_raw(row.get(0)))
        .transpose()
}

pub(super) async fn list(
    db: &PgDatabase,
    instance: &Instance,
    query: ListQuery,
) -> Result<DocStream> {
    let pages = Pages {
        db: db.clone(),
        instance: instance.id.0,
    };
    list_stream(pages, query, LIST_PAGE).await
}

/// Where a list reads its pages: the instance's rows.
struct Pages {
    db: PgDatabase,
    instance: i64,
}

#[async_trait]
impl ListPages for Pages {
    async fn by_ids(&self, ids: &[String], limit: usize) -> Result<Vec<RawJson>> {
        let client = self.db.client().await?;
        let stmt = client
            .prepare_cached(
                "SELECT id, body FROM quintet_data_docs \
                 WHERE instance = $1 AND id = ANY($2::text[])",
            )
            .await
            .map_err(pg_error)?;
        // No id holds a NUL (ids have no control characters), and PostgreSQL text cannot
        // hold one either.
        let asked: Vec<&str> = ids
            .iter()
            .map(String::as_str)
            .filter(|k| !k.contains('\0'))
            .collect();
        let found: std::collections::HashMap<String, String> = client
            .query(&stmt, &[&self.instance, &asked])
            .await
            .map_err(pg_error)?
            .into_iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        // In the order asked; an id asked twice is answered twice.
        ids.iter()
            .filter_map(|k| found.get(k))
            .take(limit)
            .map(|body| stored_raw(body.clone()))
            .collect()
    }

    async fn page(&self, page: Page<'_>) -> Result<Vec<(String, RawJson)>> {
        let client = self.db.client().await?;
        let mut conds: Vec<(&str, &str)> = Vec::new();
        // A bound with a NUL, which PostgreSQL text cannot hold, means the same as its part
        // before the NUL for ids, which hold none: `>= "p\0…"` is `> "p"`, `<= "p\0…"` is
        // `<= "p"`.
        if let Some(l) = page.low {
            conds.push(match l.split_once('\0') {
                Some((p, _)) => (">", p),
                None => (">=", l),
            });
        }
        if let Some(h) = page.high {
            conds.push(("<=", h.split('\0').next().unwrap_or_default()));
        }
        if let Some(after) = page.after {
            conds.push((if page.descending { "<" } else { ">" }, after));
        }
        let mut sql = String::from("SELECT id, body FROM quintet_data_docs WHERE instance = $1");
        for (i, (op, _)) in conds.iter().enumerate() {
            sql.push_str(&format!(" AND id {op} ${}", i + 2));
        }
        // The page size is a parameter: one cached statement per shape, not per size.
        sql.push_str(&format!(
            " ORDER BY id {} LIMIT ${}",
            if page.descending { "DESC" } else { "ASC" },
            conds.len() + 2
        ));
        let stmt = client.prepare_cached(&sql).await.map_err(pg_error)?;
        let limit = i64::try_from(page.size).unwrap_or(i64::MAX);
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&self.instance];
        params.extend(conds.iter().map(|(_, v)| v as &(dyn ToSql + Sync)));
        params.push(&limit);
        let rows = client.query(&stmt, &params).await.map_err(pg_error)?;
        rows.into_iter()
            .map(|row| Ok((row.get(0), stored_raw(row.get(1))?)))
            .collect()
    }
}

/// Run a query, for at most [`QUERY_DEADLINE`]: PostgreSQL cancels each of its statements
/// past it (`statement_timeout`), and the whole walk is abandoned past it too (a dropped
/// transaction is rolled back).
pub(super) async fn find(
    store: &PgDocStore,
    instance: &Instance,
    query: FindQuery,
) -> Result<FindOutcome> {
    let too_long = || {
        Error::Invalid(format!(
            "the query ran longer than the {} s a query may take; narrow the selector, use \
             an index (POST …/_index) or page with a range on an indexed field",
            QUERY_DEADLINE.as_secs()
        ))
    };
    match tokio::time::timeout(QUERY_DEADLINE, find_within(store, instance, query)).await {
        Ok(Err(Error::Internal(detail))) if detail.contains("statement timeout") => Err(too_long()),
        Ok(result) => result,
        Err(_) => Err(too_long()),
    }
}

async fn find_within(
    store: &PgDocStore,
    instance: &Instance,
    query: FindQuery,
) -> Result<FindOutcome> {
    let started = Instant::now();
    let mut client = store.db.client().await?;
    // One snapshot for the definitions, the entries and the documents.
    let tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(pg_error)?;
    tx.batch_execute(&format!(
        "SET LOCAL statement_timeout = {}",
        QUERY_DEADLINE.as_millis()
    ))
    .await
    .map_err(pg_error)?;
    let version: i64 = tx
        .query_opt(
            "SELECT indexes FROM quintet_data_instances WHERE instance = $1",
            &[&instance.id.0],
        )
        .await
        .map_err(pg_error)?
        .ok_or_else(|| instance_gone(instance))?
        .get(0);
    let idx = store.indexes_at(&*tx, instance, Some(version)).await?;
    let p = plan(&query, &idx.defs);
    let filter = Prefilter::of(&query.selector);
    let mut col = Collector::new(&query, p.ordered);
    let name = match p.index {
        None => {
            let (sql_filter, args) = filter.sql("d", 2);
            let sql = format!(
                "SELECT d.body FROM quintet_data_docs d WHERE d.instance = $1{sql_filter} ORDER BY d.id"
            );
            let mut params: Vec<&(dyn ToSql + Sync)> = vec![&instance.id.0];
            params.extend(args.iter().map(|a| a as &(dyn ToSql + Sync)));
            walk(&tx, &sql, &params, &mut col).await?;
            None
        }
        Some(i) => {
            let num = idx.nums[i];
            let dir = if p.descending { "DESC" } else { "ASC" };
            let mut ranges: Vec<_> = p.ranges.iter().collect();
            if p.descending {
                ranges.reverse();
            }
            for r in ranges {
                let first = if r.hi.is_some() { 5 } else { 4 };
                let (sql_filter, args) = filter.sql("d", first);
                let hi = if r.hi.is_some() { " AND x.k < $4" } else { "" };
                let sql = format!(
                    "SELECT d.body FROM quintet_data_keys x \
                     JOIN quintet_data_docs d ON d.instance = x.instance AND d.id = x.id \
                     WHERE x.instance = $1 AND x.num = $2 AND x.k >= $3{hi}{sql_filter} \
                     ORDER BY x.k {dir}, x.id {dir}"
                );
                let mut params: Vec<&(dyn ToSql + Sync)> = vec![&instance.id.0, &num, &r.lo];
                if let Some(h) = &r.hi {
                    params.push(h);
                }
                params.extend(args.iter().map(|a| a as &(dyn ToSql + Sync)));
                if !walk(&tx, &sql, &params, &mut col).await? {
                    break;
                }
            }
            Some(idx.defs[i].name.clone())
        }
    };
    tx.commit().await.map_err(pg_error)?;
    let elapsed = started.elapsed().as_secs_f64() * 1000.0;
    Ok(col.finish(&p, name, elapsed))
}

/// Offer the documents `sql` answers, a page at a time, until the collector has its
/// answer; `false` when it stopped early.
async fn walk(
    tx: &Transaction<'_>,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
    col: &mut Collector<'_>,
) -> Result<bool> {
    if !col.wants_more() {
        return Ok(false);
    }
    // Statements are cached per connection; a query's SQL is one of a few dozen shapes.
    let stmt = tx.prepare_cached(sql).await.map_err(pg_error)?;
    let portal = tx.bind(&stmt, params).await.map_err(pg_error)?;
    loop {
        let rows = tx
            .query_portal(&portal, FIND_PAGE)
            .await
            .map_err(pg_error)?;
        for row in &rows {
            if !col.offer_json(row.get(0))? {
                return Ok(false);
            }
        }
        if rows.len() < FIND_PAGE as usize {
            return Ok(true);
        }
    }
}
