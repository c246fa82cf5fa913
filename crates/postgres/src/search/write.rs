//! Writes: each call is one transaction that removes the documents it replaces and adds
//! the new ones, keeping postings, vocabulary counts and BM25 statistics in step.

use std::collections::{BTreeMap, HashMap};

use quintet_core::{
    Error, Instance, Result,
    search::{SearchDoc, document::for_each_text, exists, missing, tokenize::for_each_token},
};
use tokio_postgres::Transaction;

use super::{config_of, gone};
use crate::{database::PgDatabase, error::pg_error};

/// One write call.
pub(super) use quintet_core::ports::search::SearchWrite as Write;

/// A document's postings: per configured field, term → frequency, and its token count.
struct Analyzed {
    terms: Vec<BTreeMap<String, i32>>,
    lengths: Vec<i64>,
}

fn analyze(doc: &SearchDoc, fields: &[String]) -> Analyzed {
    let mut terms = Vec::with_capacity(fields.len());
    let mut lengths = Vec::with_capacity(fields.len());
    for name in fields {
        let mut counts: BTreeMap<String, i32> = BTreeMap::new();
        let mut length = 0i64;
        if let Some(value) = doc.doc().get(name) {
            for_each_text(value, &mut |text| {
                for_each_token(text, |t| {
                    length += 1;
                    *counts.entry(t.to_owned()).or_default() += 1;
                })
            });
        }
        terms.push(counts);
        lengths.push(length);
    }
    Analyzed { terms, lengths }
}

/// Apply `write` to `instance` in one transaction.
pub(super) async fn apply(db: &PgDatabase, instance: &Instance, write: Write) -> Result<()> {
    let config = config_of(instance)?;
    let name = instance.name.as_str();
    let id = instance.id.0;
    let mut client = db.client().await?;
    let tx = client.transaction().await.map_err(pg_error)?;
    // The instance's lock: writes to one instance run one at a time.
    let row = tx
        .query_opt(
            "SELECT docs, tokens FROM quintet_search_instances WHERE instance = $1 FOR UPDATE",
            &[&id],
        )
        .await
        .map_err(pg_error)?
        .ok_or_else(|| gone(name))?;
    let mut docs: i64 = row.get(0);
    let mut tokens: Vec<i64> = row.get(1);
    tokens.resize(config.fields.len(), 0);

    // The keys this write replaces or removes, and the documents it adds (last one wins).
    let (keys, adds): (Vec<String>, Vec<SearchDoc>) = match write {
        Write::Index(doc) => {
            if find(&tx, id, doc.key().as_str()).await?.is_some() {
                return Err(exists(name, doc.key().as_str()));
            }
            (Vec::new(), vec![doc])
        }
        Write::Update(doc) => {
            if find(&tx, id, doc.key().as_str()).await?.is_none() {
                return Err(missing(name, doc.key().as_str()));
            }
            (vec![doc.key().as_str().to_owned()], vec![doc])
        }
        Write::Remove(key) => {
            if find(&tx, id, key.as_str()).await?.is_none() {
                return Err(missing(name, key.as_str()));
            }
            (vec![key.as_str().to_owned()], Vec::new())
        }
        Write::Bulk(list) => {
            let mut last: HashMap<String, usize> = HashMap::new();
            for (i, d) in list.iter().enumerate() {
                last.insert(d.key().as_str().to_owned(), i);
            }
            let adds: Vec<SearchDoc> = list
                .into_iter()
                .enumerate()
                .filter(|(i, d)| last.get(d.key().as_str()) == Some(i))
                .map(|(_, d)| d)
                .collect();
            (
                adds.iter().map(|d| d.key().as_str().to_owned()).collect(),
                adds,
            )
        }
    };

    if !keys.is_empty() {
        let (removed, lengths) = remove(&tx, id, &keys).await?;
        docs -= removed;
        for (total, l) in tokens.iter_mut().zip(lengths) {
            *total -= l;
        }
    }
    if !adds.is_empty() {
        let lengths = add(&tx, id, &config.fields, &adds).await?;
        docs += i64::try_from(adds.len()).map_err(|_| Error::internal("too many documents"))?;
        for (total, l) in tokens.iter_mut().zip(lengths) {
            *total += l;
        }
    }
    tx.execute(
        "UPDATE quintet_search_instances SET docs = $2, tokens = $3 WHERE instance = $1",
        &[&id, &docs, &tokens],
    )
    .await
    .map_err(pg_error)?;
    tx.commit().await.map_err(pg_error)
}

async fn find(tx: &Transaction<'_>, id: i64, key: &str) -> Result<Option<i64>> {
    Ok(tx
        .query_opt(
            "SELECT id FROM quintet_search_docs WHERE instance = $1 AND key = $2",
            &[&id, &key],
        )
        .await
        .map_err(pg_error)?
        .map(|r| r.get(0)))
}

/// Remove the documents under `keys` (those that exist) with their postings and
/// vocabulary counts; answer how many there were and their token counts per field.
async fn remove(tx: &Transaction<'_>, id: i64, keys: &[String]) -> Result<(i64, Vec<i64>)> {
    let rows = tx
        .query(
            "DELETE FROM quintet_search_docs WHERE instance = $1 AND key = ANY($2) \
             RETURNING id, lengths",
            &[&id, &keys],
        )
        .await
        .map_err(pg_error)?;
    if rows.is_empty() {
        return Ok((0, Vec::new()));
    }
    let mut ids = Vec::with_capacity(rows.len());
    let mut lengths: Vec<i64> = Vec::new();
    for r in &rows {
        ids.push(r.get::<_, i64>(0));
        let l: Vec<i32> = r.get(1);
        if lengths.len() < l.len() {
            lengths.resize(l.len(), 0);
        }
        for (t, x) in lengths.iter_mut().zip(l) {
            *t += i64::from(x);
        }
    }
    // Decrement the vocabulary by the removed postings, then drop terms no document holds.
    let emptied = tx
        .query(
            "WITH gone AS (
                 DELETE FROM quintet_search_postings WHERE instance = $1 AND doc = ANY($2)
                 RETURNING field, term
             ), counts AS (
                 SELECT field, term, count(*)::int AS n FROM gone GROUP BY field, term
             )
             UPDATE quintet_search_terms t SET docs = t.docs - c.n FROM counts c
             WHERE t.instance = $1 AND t.field = c.field AND t.term = c.term
             RETURNING t.field, t.term, t.docs",
            &[&id, &ids],
        )
        .await
        .map_err(pg_error)?;
    let (mut fields, mut terms): (Vec<i16>, Vec<String>) = (Vec::new(), Vec::new());
    for r in &emptied {
        if r.get::<_, i32>(2) <= 0 {
            fields.push(r.get(0));
            terms.push(r.get(1));
        }
    }
    if !fields.is_empty() {
        tx.execute(
            "DELETE FROM quintet_search_terms t USING unnest($2::smallint[], $3::text[]) AS u(f, term) \
             WHERE t.instance = $1 AND t.field = u.f AND t.term = u.term AND t.docs <= 0",
            &[&id, &fields, &terms],
        )
        .await
        .map_err(pg_error)?;
    }
    Ok((i64::try_from(rows.len()).unwrap_or(i64::MAX), lengths))
}

/// Add `docs` (distinct keys, none present) with their postings and vocabulary counts;
/// answer their token counts per field.
async fn add(
    tx: &Transaction<'_>,
    id: i64,
    fields: &[String],
    docs: &[SearchDoc],
) -> Result<Vec<i64>> {
    let analyzed: Vec<Analyzed> = docs.iter().map(|d| analyze(d, fields)).collect();
    let keys: Vec<&str> = docs.iter().map(|d| d.key().as_str()).collect();
    let srcs: Vec<&str> = docs.iter().map(SearchDoc::json).collect();
    // Per-document arrays travel as text: unnest flattens arrays of arrays.
    let lengths: Vec<String> = analyzed
        .iter()
        .map(|a| {
            a.lengths
                .iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect();
    let rows = tx
        .query(
            "INSERT INTO quintet_search_docs (instance, key, src, lengths)
             SELECT $1, k, s, string_to_array(l, ',')::int[]
             FROM unnest($2::text[], $3::text[], $4::text[]) AS u(k, s, l)
             RETURNING id, key",
            &[&id, &keys, &srcs, &lengths],
        )
        .await
        .map_err(pg_error)?;
    let ids: HashMap<String, i64> = rows.iter().map(|r| (r.get(1), r.get(0))).collect();

    let (mut p_doc, mut p_field, mut p_term, mut p_tf) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut vocabulary: BTreeMap<(i16, &str), i32> = BTreeMap::new();
    let mut totals = vec![0i64; fields.len()];
    for (doc, a) in docs.iter().zip(&analyzed) {
        let doc_id = *ids
            .get(doc.key().as_str())
            .ok_or_else(|| Error::internal("an inserted search document has no id"))?;
        for (field, (terms, length)) in a.terms.iter().zip(&a.lengths).enumerate() {
            let field = i16::try_from(field).map_err(|_| Error::internal("too many fields"))?;
            totals[field as usize] += length;
            for (term, tf) in terms {
                p_doc.push(doc_id);
                p_field.push(field);
                p_term.push(term.as_str());
                p_tf.push(*tf);
                *vocabulary.entry((field, term.as_str())).or_default() += 1;
            }
        }
    }
    if !p_doc.is_empty() {
        tx.execute(
            "INSERT INTO quintet_search_postings (instance, field, term, doc, tf)
             SELECT $1, f, t, d, tf FROM unnest($2::smallint[], $3::text[], $4::bigint[], $5::int[])
                 AS u(f, t, d, tf)",
            &[&id, &p_field, &p_term, &p_doc, &p_tf],
        )
        .await
        .map_err(pg_error)?;
        let (mut v_field, mut v_term, mut v_n) = (Vec::new(), Vec::new(), Vec::new());
        for ((f, t), n) in vocabulary {
            v_field.push(f);
            v_term.push(t);
            v_n.push(n);
        }
        tx.execute(
            "INSERT INTO quintet_search_terms (instance, field, term, docs)
             SELECT $1, f, t, n FROM unnest($2::smallint[], $3::text[], $4::int[]) AS u(f, t, n)
             ON CONFLICT (instance, field, term) DO UPDATE
                 SET docs = quintet_search_terms.docs + EXCLUDED.docs",
            &[&id, &v_field, &v_term, &v_n],
        )
        .await
        .map_err(pg_error)?;
    }
    Ok(totals)
}
