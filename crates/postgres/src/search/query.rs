//! Answering a query: expand each word to index terms from the vocabulary, read their
//! postings, score documents with BM25 in Rust, rank them as `core::search::query::rank`
//! does, and read only the documents the answer shows.
//!
//! Candidate terms for a word come from `quintet_search_terms`:
//! - exact: the term itself (primary key);
//! - completions (last word): the B-tree range `[word, successor(word))`, the 50 most
//!   frequent (what [`select_expansions`] would keep of them);
//! - typos: terms with the word's first letter (typos spare it) and a length within the
//!   budget, narrowed by `pg_trgm`'s GIN index where that cannot lose a match (see
//!   [`trigram_threshold`]); `core::search::typo` decides which candidates really match.
//!
//! A query is a handful of round trips in one read-only snapshot: begin, the statistics,
//! the trigram threshold (when a word has typos), one statement for every word's
//! candidates, the expansions' postings joined with their documents' keys and lengths, the
//! shown documents (200 per round trip), commit.

use std::collections::{BTreeMap, HashMap, HashSet};

use quintet_core::{
    Instance, Result,
    ports::{data::Document, search::corrupt_document},
    search::{
        Expansion, QueryPlan, SearchMatch, SearchQuery,
        document::filter_matches,
        query::{MAX_EXPANSIONS, explain, rank, select_expansions},
    },
};
use tokio_postgres::{IsolationLevel, Transaction, types::ToSql};

use super::{config_of, gone};
use crate::{database::PgDatabase, error::pg_error};

/// BM25's term frequency saturation, as in tantivy and Lucene.
const K1: f64 = 1.2;
/// BM25's length normalization, as in tantivy and Lucene.
const B: f64 = 0.75;
/// A word's score is its best field's plus this share of its other fields' (as the
/// embedded engine's "best fields" query).
const FIELD_TIE_BREAKER: f64 = 0.2;
/// Documents read per round trip while shaping the answer.
const READ_CHUNK: usize = 200;

/// Answer `query` on `instance`; `trgm` is the schema of `pg_trgm`.
pub(super) async fn run(
    db: &PgDatabase,
    trgm: &str,
    instance: &Instance,
    query: &SearchQuery,
) -> Result<Vec<SearchMatch>> {
    let config = config_of(instance)?;
    let id = instance.id.0;
    let plan = QueryPlan::new(&query.query);
    let fields: Vec<i16> = config
        .fields
        .iter()
        .enumerate()
        .filter(|(_, f)| query.fields.contains(f))
        .filter_map(|(i, _)| i16::try_from(i).ok())
        .collect();
    if plan.words.is_empty() || fields.is_empty() {
        return Ok(Vec::new());
    }
    let mut client = db.client().await?;
    // One snapshot for statistics, vocabulary, postings and documents.
    let tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(pg_error)?;
    let stats = tx
        .query_opt(
            "SELECT docs, tokens FROM quintet_search_instances WHERE instance = $1",
            &[&id],
        )
        .await
        .map_err(pg_error)?
        .ok_or_else(|| gone(instance.name.as_str()))?;
    let total_docs: i64 = stats.get(0);
    let tokens: Vec<i64> = stats.get(1);

    let expansions = expand(&tx, trgm, id, &fields, &plan).await?;
    if expansions.iter().all(Vec::is_empty) {
        return Ok(Vec::new());
    }
    let terms: Vec<&str> = {
        let mut set: Vec<&str> = expansions
            .iter()
            .flatten()
            .map(|e| e.term.as_str())
            .collect();
        set.sort_unstable();
        set.dedup();
        set
    };
    // Postings of every expansion in the searched fields, with their documents' keys and
    // lengths: doc → (field, term, tf).
    let rows = tx
        .query(
            "SELECT p.field, p.term, p.doc, p.tf, d.key, d.lengths \
             FROM quintet_search_postings p JOIN quintet_search_docs d ON d.id = p.doc \
             WHERE p.instance = $1 AND p.field = ANY($2) AND p.term = ANY($3)",
            &[&id, &fields, &terms],
        )
        .await
        .map_err(pg_error)?;
    let mut doc_freq: HashMap<(i16, String), u64> = HashMap::new();
    let mut postings: HashMap<i64, Vec<(i16, String, i32)>> = HashMap::new();
    let mut lengths: HashMap<i64, (String, Vec<i32>)> = HashMap::new();
    for r in &rows {
        let (field, term, doc, tf): (i16, String, i64, i32) =
            (r.get(0), r.get(1), r.get(2), r.get(3));
        *doc_freq.entry((field, term.clone())).or_default() += 1;
        postings.entry(doc).or_default().push((field, term, tf));
        lengths.entry(doc).or_insert_with(|| (r.get(4), r.get(5)));
    }

    let bm25 = Bm25::new(total_docs, &tokens);
    let mut scored: Vec<Scored> = postings
        .iter()
        .filter_map(|(doc, found)| {
            let (key, lengths) = lengths.get(doc)?;
            Some(score(
                *doc,
                key,
                lengths,
                found,
                &plan,
                &expansions,
                &doc_freq,
                &bm25,
            ))
        })
        .collect();
    scored.sort_by(|a, b| {
        b.words
            .cmp(&a.words)
            .then(b.tiers.cmp(&a.tiers))
            .then(b.score.total_cmp(&a.score))
            // Ties in the order documents were written, as tantivy breaks them.
            .then(a.doc.cmp(&b.doc))
    });

    // Read documents best first until the answer is full (the filter may skip some).
    let mut matches = Vec::with_capacity(query.limit.min(scored.len()));
    for chunk in scored.chunks(READ_CHUNK) {
        let ids: Vec<i64> = chunk.iter().map(|s| s.doc).collect();
        let srcs: HashMap<i64, String> = tx
            .query(
                "SELECT id, src FROM quintet_search_docs WHERE id = ANY($1)",
                &[&ids],
            )
            .await
            .map_err(pg_error)?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        for s in chunk {
            let Some(src) = srcs.get(&s.doc) else {
                continue;
            };
            let doc: Document = serde_json::from_str(src).map_err(corrupt_document)?;
            if !filter_matches(&doc, &query.filter) {
                continue;
            }
            let explained = explain(&plan, &expansions, &doc, &query.fields);
            matches.push(SearchMatch::new(
                s.key.clone(),
                s.score,
                explained,
                &doc,
                config,
            ));
            if matches.len() == query.limit {
                break;
            }
        }
        if matches.len() == query.limit {
            break;
        }
    }
    tx.commit().await.map_err(pg_error)?;
    rank(&mut matches);
    Ok(matches)
}

/// A candidate document with its ranking keys.
struct Scored {
    doc: i64,
    key: String,
    words: usize,
    tiers: u32,
    score: f64,
}

/// BM25 statistics of the instance.
struct Bm25 {
    total_docs: f64,
    /// Average tokens per document, per configured field.
    average: Vec<f64>,
}

impl Bm25 {
    fn new(total_docs: i64, tokens: &[i64]) -> Self {
        let n = total_docs.max(1) as f64;
        Self {
            total_docs: total_docs.max(0) as f64,
            average: tokens.iter().map(|t| (*t).max(0) as f64 / n).collect(),
        }
    }

    /// The BM25 score of a term found `tf` times in a field of `length` tokens, the term
    /// being in `doc_freq` documents' field `field`.
    fn score(&self, field: i16, tf: i32, length: i32, doc_freq: u64) -> f64 {
        let df = doc_freq as f64;
        let idf = (1.0 + (self.total_docs - df + 0.5) / (df + 0.5)).ln();
        let average = self
            .average
            .get(usize::try_from(field).unwrap_or(0))
            .copied()
            .filter(|a| *a > 0.0)
            .unwrap_or(1.0);
        let tf = f64::from(tf);
        let norm = K1 * (1.0 - B + B * f64::from(length) / average);
        idf * (K1 + 1.0) * tf / (tf + norm)
    }
}

/// The ranking keys of document `doc` holding `found` (field, term, tf) of the expansions,
/// computed as `explain` does (words matched, best tiers) plus the BM25 part: per word, the
/// best weighted term in each field, the best field plus a share of the others.
#[allow(clippy::too_many_arguments)]
fn score(
    doc: i64,
    key: &str,
    lengths: &[i32],
    found: &[(i16, String, i32)],
    plan: &QueryPlan,
    expansions: &[Vec<Expansion>],
    doc_freq: &HashMap<(i16, String), u64>,
    bm25: &Bm25,
) -> Scored {
    let mut out = Scored {
        doc,
        key: key.to_owned(),
        words: 0,
        tiers: 0,
        score: 0.0,
    };
    for (word, exps) in plan.words.iter().zip(expansions) {
        let word_chars = word.text.chars().count();
        let mut best_tier: Option<u32> = None;
        let mut per_field: BTreeMap<i16, f64> = BTreeMap::new();
        for e in exps {
            for (field, term, tf) in found.iter().filter(|(_, t, _)| *t == e.term) {
                best_tier = best_tier.max(Some(e.kind.tier()));
                let length = lengths
                    .get(usize::try_from(*field).unwrap_or(0))
                    .copied()
                    .unwrap_or(0);
                let df = doc_freq.get(&(*field, term.clone())).copied().unwrap_or(1);
                let weight = f64::from(e.kind.weight(word_chars, e.term.chars().count()));
                let s = weight * bm25.score(*field, *tf, length, df);
                let slot = per_field.entry(*field).or_insert(0.0);
                if s > *slot {
                    *slot = s;
                }
            }
        }
        let Some(tier) = best_tier else {
            continue;
        };
        out.words += 1;
        out.tiers += tier;
        let best = per_field.values().copied().fold(0.0, f64::max);
        let sum: f64 = per_field.values().sum();
        out.score += best + FIELD_TIE_BREAKER * (sum - best);
    }
    out
}

/// The smallest string above every string starting with `s` (`None` when `s` ends with
/// the last code point).
fn successor(s: &str) -> Option<String> {
    let last = s.chars().last()?;
    let next = (u32::from(last) + 1..=0x10FFFF).find_map(char::from_u32)?;
    let mut out = s[..s.len() - last.len_utf8()].to_owned();
    out.push(next);
    Some(out)
}

/// The `pg_trgm.word_similarity_threshold` below which no term within `budget` typos of
/// `word` (or completing such a word, when `prefix`) can fall, or `None` when trigrams
/// cannot narrow the search without losing matches.
///
/// `pg_trgm` pads a word with two spaces in front and one behind. `word_similarity(w, t)`
/// is the best, over continuous extents `e` of `t`'s trigrams, of `c / (|w| + |e| − c)`,
/// `c` being the trigrams of `w` in `e` (counts of distinct trigrams). Take for `e` the
/// part of `t` that matches `w`: an edit destroys at most three of `w`'s trigrams, a swap
/// of neighbours four, and a completion also loses `w`'s last (padded) trigram, so
/// `c ≥ |w| − 4·budget − prefix`; the part has at most `len(w) + budget` characters, so
/// `|e| ≤ len(w) + budget + 1` (one less for a completion, whose padded end is not in
/// the part). The bound is the similarity at those extremes (it grows with `c`). Only for
/// ASCII words: `pg_trgm`'s idea of a word character depends on the database's locale
/// elsewhere. `the_trigram_condition_keeps_every_typo_match` checks it against PostgreSQL.
fn trigram_threshold(word: &str, budget: u8, prefix: bool) -> Option<f64> {
    if !word.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return None;
    }
    let padded: Vec<u8> = [b"  ", word.as_bytes(), b" "].concat();
    let distinct: HashSet<&[u8]> = padded.windows(3).collect();
    let all = distinct.len();
    let lost = 4 * usize::from(budget) + usize::from(prefix);
    let kept = all.checked_sub(lost).filter(|k| *k > 0)?;
    let extent = word.len() + usize::from(budget) + usize::from(!prefix);
    // A little below the bound, against rounding in PostgreSQL's float4 arithmetic.
    Some(kept as f64 / (all + extent - kept) as f64 - 0.001)
}

/// The index terms each word of `plan` may match in the searched `fields`, the best kept,
/// looked up in one statement: per word, a branch for the exact term, one for its
/// completions and one for its typos.
async fn expand(
    tx: &Transaction<'_>,
    trgm: &str,
    id: i64,
    fields: &[i16],
    plan: &QueryPlan,
) -> Result<Vec<Vec<Expansion>>> {
    let trgm = trgm.replace('"', "\"\"");
    let mut params: Vec<Box<dyn ToSql + Sync + Send>> =
        vec![Box::new(id), Box::new(fields.to_vec())];
    let mut param = |v: Box<dyn ToSql + Sync + Send>| {
        params.push(v);
        params.len()
    };
    let from = "FROM quintet_search_terms WHERE instance = $1 AND field = ANY($2)";
    let mut branches: Vec<String> = Vec::new();
    // The GIN index is searched at the lowest threshold of all words; each word's own
    // threshold is then checked on the candidates.
    let mut lowest: Option<f64> = None;
    for (i, word) in plan.words.iter().enumerate() {
        let text = param(Box::new(word.text.clone()));
        branches.push(format!(
            "(SELECT {i} AS w, term, sum(docs)::bigint AS n {from} AND term = ${text} GROUP BY term)"
        ));
        if word.prefix {
            let range = match successor(&word.text) {
                Some(upper) => format!("term < ${}", param(Box::new(upper))),
                None => format!("starts_with(term, ${text})"),
            };
            branches.push(format!(
                "(SELECT {i}, term, sum(docs)::bigint AS n {from} AND term > ${text} AND {range} \
                 GROUP BY term ORDER BY n DESC, char_length(term), term LIMIT {MAX_EXPANSIONS})"
            ));
        }
        let Some(first) = word.text.chars().next().filter(|_| word.budget > 0) else {
            continue;
        };
        let chars = word.text.chars().count();
        let budget = usize::from(word.budget);
        let shortest = chars.saturating_sub(budget);
        let longest = if word.prefix {
            i32::MAX as usize
        } else {
            chars + budget
        };
        let first_p = param(Box::new(first.to_string()));
        let mut sql = format!(
            "(SELECT {i}, term, sum(docs)::bigint {from} AND starts_with(term, ${first_p}) \
             AND term >= ${first_p} AND char_length(term) BETWEEN {shortest} AND {longest}"
        );
        if let Some(upper) = successor(&first.to_string()) {
            sql.push_str(&format!(" AND term < ${}", param(Box::new(upper))));
        }
        if let Some(threshold) = trigram_threshold(&word.text, word.budget, word.prefix) {
            lowest = Some(lowest.map_or(threshold, |l| l.min(threshold)));
            sql.push_str(&format!(
                " AND ${text} OPERATOR(\"{trgm}\".<%) term \
                 AND \"{trgm}\".word_similarity(${text}, term) >= {threshold}"
            ));
        }
        sql.push_str(" GROUP BY term)");
        branches.push(sql);
    }
    if let Some(lowest) = lowest {
        let lowest = format!("{lowest:.6}");
        tx.execute(
            "SELECT set_config('pg_trgm.word_similarity_threshold', $1, true)",
            &[&lowest],
        )
        .await
        .map_err(pg_error)?;
    }
    let refs: Vec<&(dyn ToSql + Sync)> = params
        .iter()
        .map(|p| p.as_ref() as &(dyn ToSql + Sync))
        .collect();
    let rows = tx
        .query(&branches.join(" UNION ALL "), &refs)
        .await
        .map_err(pg_error)?;
    // Per word: term → documents holding it in any searched field.
    let mut found: Vec<BTreeMap<String, u64>> = vec![BTreeMap::new(); plan.words.len()];
    for r in rows {
        let (w, term, n): (i32, String, i64) = (r.get(0), r.get(1), r.get(2));
        if let Some(terms) = usize::try_from(w).ok().and_then(|w| found.get_mut(w)) {
            terms.insert(term, u64::try_from(n).unwrap_or(0));
        }
    }
    Ok(plan
        .words
        .iter()
        .zip(found)
        .map(|(word, terms)| {
            select_expansions(
                terms
                    .into_iter()
                    .filter_map(|(term, doc_freq)| {
                        word.classify(&term).map(|kind| Expansion {
                            term,
                            kind,
                            doc_freq,
                        })
                    })
                    .collect(),
            )
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use quintet_core::search::QueryWord;

    #[test]
    fn successors_bound_prefix_ranges() {
        assert_eq!(successor("ab").as_deref(), Some("ac"));
        assert_eq!(successor("a\u{D7FF}").as_deref(), Some("a\u{E000}"));
        assert_eq!(successor("\u{10FFFF}"), None);
        assert_eq!(successor(""), None);
    }

    #[test]
    fn trigram_thresholds_keep_every_match() {
        // "matirx" → "matrix": PostgreSQL's word similarity is 0.4286.
        let t = trigram_threshold("matirx", 1, false).unwrap();
        assert!((t - (3.0 / 12.0 - 0.001)).abs() < 1e-9, "{t}");
        // "treminatro" → "terminator" (two swaps): 0.2727.
        let t = trigram_threshold("treminatro", 2, false).unwrap();
        assert!(t <= 0.2727, "{t}");
        assert_eq!(
            trigram_threshold("ghots", 1, true),
            Some(1.0 / 11.0 - 0.001)
        );
        // Too short to narrow, or not ASCII: no trigram condition.
        assert_eq!(trigram_threshold("abcd", 1, true), None);
        assert_eq!(trigram_threshold("straße", 1, false), None);
    }

    /// A small deterministic generator (xorshift), enough to vary typos.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }

        fn letter(&mut self) -> char {
            let alphabet = b"abcdeilmnorst0123";
            char::from(alphabet[self.below(alphabet.len())])
        }
    }

    /// `word` with one random edit that spares the first letter.
    fn edit(rng: &mut Rng, word: &str) -> String {
        let mut c: Vec<char> = word.chars().collect();
        let at = 1 + rng.below(c.len().max(2) - 1);
        match rng.below(4) {
            0 if at < c.len() => c[at] = rng.letter(),
            1 => c.insert(at.min(c.len()), rng.letter()),
            2 if at < c.len() && c.len() > 2 => {
                c.remove(at);
            }
            _ if at + 1 < c.len() => c.swap(at, at + 1),
            _ => c.push(rng.letter()),
        }
        c.into_iter().collect()
    }

    /// The trigram condition never loses a match: for random words and terms within the
    /// typo budget (and completions of them), PostgreSQL's `word_similarity` reaches the
    /// threshold the query uses.
    #[tokio::test]
    async fn the_trigram_condition_keeps_every_typo_match() {
        let Some(pg) = quintet_engine_test::postgres("trigram_condition").await else {
            return;
        };
        let db = PgDatabase::connect(&crate::PgConfig::new(pg.url()).unwrap())
            .await
            .unwrap();
        let trgm = super::super::install_trgm(&db).await.unwrap();
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let (mut words, mut terms, mut thresholds) = (Vec::new(), Vec::new(), Vec::new());
        while words.len() < 10000 {
            let len = 5 + rng.below(9);
            let word: String = (0..len).map(|_| rng.letter()).collect();
            let budget = budget(len);
            let prefix = rng.below(2) == 0;
            let mut term = word.clone();
            for _ in 0..1 + rng.below(usize::from(budget)) {
                term = edit(&mut rng, &term);
            }
            if prefix {
                for _ in 0..rng.below(6) {
                    term.push(rng.letter());
                }
            }
            let Some(threshold) = trigram_threshold(&word, budget, prefix) else {
                continue;
            };
            let typo = QueryWord {
                text: word.clone(),
                budget,
                prefix,
            };
            if typo.classify(&term).is_none() {
                continue;
            }
            words.push(word);
            terms.push(term);
            thresholds.push(threshold);
        }
        let client = db.client().await.unwrap();
        let sql = format!(
            "SELECT \"{trgm}\".word_similarity(w, t)::float8 FROM unnest($1::text[], $2::text[]) \
             WITH ORDINALITY AS u(w, t, n) ORDER BY n"
        );
        let rows = client.query(&sql, &[&words, &terms]).await.unwrap();
        for (i, row) in rows.iter().enumerate() {
            let similarity: f64 = row.get(0);
            assert!(
                similarity >= thresholds[i],
                "{} → {}: similarity {similarity} below the threshold {}",
                words[i],
                terms[i],
                thresholds[i]
            );
        }
    }

    fn budget(len: usize) -> u8 {
        quintet_core::search::typo::typo_budget(len)
    }
}
