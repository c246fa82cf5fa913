//! One open search index: its tantivy index and reader, the schema mapping, key lookups
//! and queries. Writes go through the index's writer thread ([`super::writer`]).

use std::{
    collections::BTreeMap,
    path::Path,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
};

use quintet_core::{
    Error, Result,
    ports::{data::Document, search::SearchConfig},
    search::{
        Expansion, MatchKind, QueryPlan, QueryWord, SearchDoc, SearchKey, SearchMatch, SearchQuery,
        document::{filter_matches, filter_term, filter_terms, for_each_text},
        query::{explain, rank, select_expansions},
    },
};
use tantivy::{
    DocAddress, DocSet, Index, IndexReader, ReloadPolicy, Searcher, TERMINATED, TantivyDocument,
    Term,
    collector::TopDocs,
    directory::MmapDirectory,
    query::{
        BooleanQuery, BoostQuery, ConstScoreQuery, DisjunctionMaxQuery, FuzzyTermQuery, Occur,
        Query, TermQuery,
    },
    schema::{
        Field, IndexRecordOption, NumericOptions, STORED, STRING, Schema, TextFieldIndexing,
        TextOptions, Value,
    },
    tokenizer::TokenizerManager,
};

use super::{
    analyzer::{NAME, WordTokenizer},
    engine_error,
    vocabulary::{self, Vocabulary},
    writer::WriterSlot,
};

/// The tantivy fields of an index.
#[derive(Debug, Clone)]
pub(super) struct Fields {
    /// The document key (raw, indexed, stored).
    pub key: Field,
    /// The document as compact JSON text (stored only).
    pub src: Field,
    /// Filter terms of the document's top-level fields, hashed ([`filter_hash`]), indexed.
    pub filter: Field,
    /// One text field per configured field, in configured order.
    pub text: Vec<Field>,
}

/// The 64-bit FNV-1a hash of a filter term. Filter terms are indexed as these numbers:
/// short fixed-size terms are far cheaper to index than the values' text (most are unique
/// per document), and a hash collision is caught when matches are checked against the
/// stored document. The function is fixed: indexes on disk depend on it.
fn filter_hash(term: &str) -> u64 {
    term.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The schema for `config`: configured field `i` is indexed as `f<i>`, so any field name is
/// fine.
fn schema(config: &SearchConfig) -> (Schema, Fields) {
    let mut b = Schema::builder();
    let key = b.add_text_field("_key", STRING | STORED);
    let src = b.add_text_field("_src", TextOptions::default().set_stored());
    let filter = b.add_u64_field("_filter", NumericOptions::default().set_indexed());
    let indexing = TextFieldIndexing::default()
        .set_tokenizer(NAME)
        .set_index_option(IndexRecordOption::WithFreqs);
    let text = (0..config.fields.len())
        .map(|i| {
            b.add_text_field(
                &format!("f{i}"),
                TextOptions::default().set_indexing_options(indexing.clone()),
            )
        })
        .collect();
    (
        b.build(),
        Fields {
            key,
            src,
            filter,
            text,
        },
    )
}

/// An open index.
pub(super) struct IndexHandle {
    /// The instance's name, for messages.
    pub name: String,
    pub config: SearchConfig,
    pub index: Index,
    pub reader: IndexReader,
    pub fields: Fields,
    /// The writer thread, started on the first write and stopped when idle.
    pub writer: Mutex<WriterSlot>,
    /// The merged dictionary of the large segments, rebuilt when they change.
    vocabulary: Mutex<Option<Arc<Vocabulary>>>,
    /// Whether a query is rebuilding the dictionary.
    rebuilding: AtomicBool,
}

impl std::fmt::Debug for IndexHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexHandle")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl IndexHandle {
    /// Open the index in `dir`, creating it (and `dir`) when there is none.
    pub fn open(dir: &Path, name: String, config: SearchConfig) -> Result<Arc<Self>> {
        std::fs::create_dir_all(dir)?;
        let (schema, fields) = schema(&config);
        let tokenizers = TokenizerManager::default();
        tokenizers.register(NAME, WordTokenizer::default());
        let directory = MmapDirectory::open(dir)
            .map_err(|e| Error::internal(format!("opening {}: {e}", dir.display())))?;
        let index = Index::builder()
            .schema(schema)
            .tokenizers(tokenizers)
            .open_or_create(directory)
            .map_err(engine_error)?;
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(engine_error)?;
        Ok(Arc::new(Self {
            name,
            config,
            index,
            reader,
            fields,
            writer: Mutex::new(WriterSlot::default()),
            vocabulary: Mutex::new(None),
            rebuilding: AtomicBool::new(false),
        }))
    }

    /// The tantivy document for `doc`.
    pub fn tantivy_doc(&self, doc: &SearchDoc) -> TantivyDocument {
        let mut d = TantivyDocument::new();
        d.add_text(self.fields.key, doc.key().as_str());
        d.add_text(self.fields.src, doc.json());
        for term in filter_terms(doc.doc()) {
            d.add_u64(self.fields.filter, filter_hash(&term));
        }
        for (name, field) in self.config.fields.iter().zip(&self.fields.text) {
            if let Some(value) = doc.doc().get(name) {
                for_each_text(value, &mut |text| d.add_text(*field, text));
            }
        }
        d
    }

    /// The term of `key` in the key field.
    pub fn key_term(&self, key: &SearchKey) -> Term {
        Term::from_field_text(self.fields.key, key.as_str())
    }

    /// Where the live document under `key` is in `searcher`'s view.
    pub fn find(&self, searcher: &Searcher, key: &SearchKey) -> Result<Option<DocAddress>> {
        let term = self.key_term(key);
        for (ord, segment) in searcher.segment_readers().iter().enumerate() {
            let postings = segment
                .inverted_index(self.fields.key)
                .map_err(engine_error)?
                .read_postings(&term, IndexRecordOption::Basic)
                .map_err(engine_error)?;
            let Some(mut postings) = postings else {
                continue;
            };
            let mut doc = postings.doc();
            while doc != TERMINATED {
                if !segment.is_deleted(doc) {
                    let ord = u32::try_from(ord)
                        .map_err(|_| Error::internal("too many segments in a search index"))?;
                    return Ok(Some(DocAddress::new(ord, doc)));
                }
                doc = postings.advance();
            }
        }
        Ok(None)
    }

    /// The stored key and JSON text of the document at `addr`.
    fn stored(&self, searcher: &Searcher, addr: DocAddress) -> Result<(String, String)> {
        let doc: TantivyDocument = searcher.doc(addr).map_err(engine_error)?;
        let text = |field: Field| {
            doc.get_first(field)
                .and_then(|v| v.as_str().map(str::to_owned))
                .ok_or_else(|| Error::internal("a search document lacks its stored key or text"))
        };
        Ok((text(self.fields.key)?, text(self.fields.src)?))
    }

    /// The document under `key` as indexed (compact JSON text).
    pub fn get(&self, key: &SearchKey) -> Result<Option<String>> {
        let searcher = self.reader.searcher();
        match self.find(&searcher, key)? {
            Some(addr) => Ok(Some(self.stored(&searcher, addr)?.1)),
            None => Ok(None),
        }
    }

    /// The dictionary of `searcher`'s large segments, built when they changed; `None` when
    /// it has none.
    fn vocabulary(&self, searcher: &Searcher) -> Result<Option<Arc<Vocabulary>>> {
        let large = vocabulary::large_segments(searcher);
        let cached = self
            .vocabulary
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if cached.as_ref().is_some_and(|v| v.covers == large) || large.is_empty() {
            return Ok(cached);
        }
        // Stale: one query rebuilds it while the others use the old one, scanning the
        // segments it does not cover.
        if self.rebuilding.swap(true, Ordering::AcqRel) {
            return Ok(cached);
        }
        let built = Vocabulary::build(searcher, &self.fields.text).map(Arc::new);
        if let Ok(v) = &built {
            *self
                .vocabulary
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(v));
        }
        self.rebuilding.store(false, Ordering::Release);
        built.map(Some)
    }

    /// Answer `query`.
    pub fn search(&self, query: &SearchQuery) -> Result<Vec<SearchMatch>> {
        let plan = QueryPlan::new(&query.query);
        let searcher = self.reader.searcher();
        // The searched fields: (position in the configuration, tantivy field).
        let fields: Vec<(usize, Field)> = self
            .config
            .fields
            .iter()
            .zip(&self.fields.text)
            .enumerate()
            .filter(|(_, (name, _))| query.fields.contains(name))
            .map(|(i, (_, f))| (i, *f))
            .collect();
        if plan.words.is_empty() || fields.is_empty() {
            return Ok(Vec::new());
        }
        let vocabulary = self.vocabulary(&searcher)?;
        let mut expansions = Vec::with_capacity(plan.words.len());
        let mut in_fields = Vec::with_capacity(plan.words.len());
        for word in &plan.words {
            let (e, f) = expand(&searcher, vocabulary.as_deref(), &fields, word)?;
            expansions.push(e);
            in_fields.push(f);
        }
        if expansions.iter().all(Vec::is_empty) {
            return Ok(Vec::new());
        }
        let total_docs: u64 = searcher
            .segment_readers()
            .iter()
            .map(|s| u64::from(s.max_doc()))
            .sum();
        let mut full = words_query(&plan, &expansions, &in_fields, total_docs);
        if !query.filter.is_empty() {
            let mut clauses: Vec<(Occur, Box<dyn Query>)> = vec![(Occur::Must, full)];
            for (k, v) in &query.filter {
                let term =
                    Term::from_field_u64(self.fields.filter, filter_hash(&filter_term(k, v)));
                let exact = TermQuery::new(term, IndexRecordOption::Basic);
                clauses.push((
                    Occur::Must,
                    Box::new(ConstScoreQuery::new(Box::new(exact), 0.0)),
                ));
            }
            full = Box::new(BooleanQuery::new(clauses));
        }
        let top = searcher
            .search(&*full, &TopDocs::with_limit(query.limit).order_by_score())
            .map_err(engine_error)?;
        let mut matches = Vec::with_capacity(top.len());
        for (score, addr) in top {
            let (key, src) = self.stored(&searcher, addr)?;
            let doc: Document = serde_json::from_str(&src)
                .map_err(|e| Error::internal(format!("stored search document: {e}")))?;
            if !filter_matches(&doc, &query.filter) {
                continue; // a filter-term hash collision
            }
            let explained = explain(&plan, &expansions, &doc, &query.fields);
            // The f32 score's shortest decimal form, not its binary expansion.
            let score = score.to_string().parse::<f64>().unwrap_or(f64::from(score));
            matches.push(SearchMatch::new(key, score, explained, &doc, &self.config));
        }
        rank(&mut matches);
        Ok(matches)
    }
}

/// The index terms `word` may match in the searched `fields` (configured position, tantivy
/// field), the best [`select_expansions`] kept, each with the fields it occurs in. Large
/// segments are looked up in `vocabulary`, the others one by one.
fn expand(
    searcher: &Searcher,
    vocabulary: Option<&Vocabulary>,
    fields: &[(usize, Field)],
    word: &QueryWord,
) -> Result<(Vec<Expansion>, Vec<Vec<Field>>)> {
    // term → (kind, documents containing it, fields it occurs in)
    let mut found: BTreeMap<String, (MatchKind, u64, Vec<Field>)> = BTreeMap::new();
    let mut note = |term: &[u8], doc_freq: u32, field: Field| {
        if doc_freq == 0 {
            return;
        }
        let Ok(term) = std::str::from_utf8(term) else {
            return;
        };
        if let Some(entry) = found.get_mut(term) {
            entry.1 += u64::from(doc_freq);
            if !entry.2.contains(&field) {
                entry.2.push(field);
            }
        } else if let Some(kind) = word.classify(term) {
            found.insert(term.to_owned(), (kind, u64::from(doc_freq), vec![field]));
        }
    };
    let Some(&(_, first_field)) = fields.first() else {
        return Ok((Vec::new(), Vec::new()));
    };
    // Every match starts with the word's first letter (typos spare it), so scans are
    // limited to the terms that do.
    let lower: Vec<u8> = word
        .text
        .chars()
        .next()
        .map(|c| c.to_string().into_bytes())
        .unwrap_or_default();
    let upper: Option<Vec<u8>> = lower.last().map(|last| {
        let mut u = lower.clone();
        let end = u.len() - 1;
        u[end] = last + 1; // the last byte of a UTF-8 character is below 0xF5
        u
    });
    let automaton = if word.budget == 0 && !word.prefix {
        None
    } else {
        let term = Term::from_field_text(first_field, &word.text);
        let query = if word.prefix {
            FuzzyTermQuery::new_prefix(term, word.budget, true)
        } else {
            FuzzyTermQuery::new(term, word.budget, true)
        };
        Some(query.automaton().map_err(engine_error)?)
    };
    if let Some(vocabulary) = vocabulary {
        let mut from_vocabulary = |term: &[u8], freqs: &[u32]| {
            for &(i, field) in fields {
                note(term, freqs.get(i).copied().unwrap_or(0), field);
            }
        };
        match &automaton {
            Some(a) => vocabulary.scan(a, &lower, upper.as_deref(), &mut from_vocabulary),
            None => {
                if let Some(freqs) = vocabulary.get(word.text.as_bytes()) {
                    from_vocabulary(word.text.as_bytes(), freqs);
                }
            }
        }
    }
    for segment in searcher.segment_readers() {
        if vocabulary.is_some_and(|v| v.covers.binary_search(&segment.segment_id()).is_ok()) {
            continue;
        }
        for &(_, field) in fields {
            let inverted = segment.inverted_index(field).map_err(engine_error)?;
            let terms = inverted.terms();
            match &automaton {
                None => {
                    if let Some(info) = terms.get(word.text.as_bytes()).map_err(engine_error)? {
                        note(word.text.as_bytes(), info.doc_freq, field);
                    }
                }
                Some(a) => {
                    let builder = terms.search(a).ge(&lower);
                    let builder = match &upper {
                        Some(u) => builder.lt(u),
                        None => builder,
                    };
                    let mut stream = builder.into_stream().map_err(engine_error)?;
                    while stream.advance() {
                        note(stream.key(), stream.value().doc_freq, field);
                    }
                }
            }
        }
    }
    let candidates = found
        .iter()
        .map(|(term, (kind, df, _))| Expansion {
            term: term.clone(),
            kind: *kind,
            doc_freq: *df,
        })
        .collect();
    let chosen = select_expansions(candidates);
    let fields_of = chosen
        .iter()
        .map(|e| found.get(&e.term).map(|f| f.2.clone()).unwrap_or_default())
        .collect();
    Ok((chosen, fields_of))
}

/// A word's BM25 part is its best field's score plus this share of its other fields'
/// (Lucene's "best fields"): a word in a short title is not outscored by the same word
/// spread thinly over several long fields.
const FIELD_TIE_BREAKER: f32 = 0.2;

/// BM25 of one term is at most idf × (k1 + 1), and idf at most ln(1 + N) for N documents.
fn bm25_bound(total_docs: u64) -> f32 {
    2.2 * (1.0 + total_docs as f32).ln()
}

/// The query over the words' expansions, scored so that tantivy's order is the ranking
/// order ([`rank`]): every matched word adds `word_unit`, the best tier of each matched word
/// adds `tier × tier_unit`, and the BM25 part (per word, the best weighted term of its best
/// field plus a share of its other fields) adds less than `tier_unit`. The units are chosen from a bound on the BM25 part, so more
/// words always beat better tiers, which always beat BM25.
fn words_query(
    plan: &QueryPlan,
    expansions: &[Vec<Expansion>],
    in_fields: &[Vec<Vec<Field>>],
    total_docs: u64,
) -> Box<dyn Query> {
    let per_field = bm25_bound(total_docs);
    let bm25_total: f32 = in_fields
        .iter()
        .map(|word| {
            let mut distinct: Vec<Field> = word.iter().flatten().copied().collect();
            distinct.sort_unstable_by_key(|f| f.field_id());
            distinct.dedup();
            let n = distinct.len() as f32;
            if n == 0.0 {
                0.0
            } else {
                per_field * (1.0 + FIELD_TIE_BREAKER * (n - 1.0))
            }
        })
        .sum::<f32>()
        + 1.0;
    let tier_unit = bm25_total + 1.0;
    let max_tier = MatchKind::BEST_TIER as f32;
    let word_unit = max_tier * tier_unit * plan.words.len() as f32 + bm25_total + 1.0;

    let mut words: Vec<(Occur, Box<dyn Query>)> = Vec::new();
    for (word, (exps, fields)) in plan.words.iter().zip(expansions.iter().zip(in_fields)) {
        if exps.is_empty() {
            continue;
        }
        let word_chars = word.text.chars().count();
        // The word's constant part: the unit, plus its best tier.
        let mut tiers: Vec<Box<dyn Query>> = Vec::new();
        for tier in (0..=MatchKind::BEST_TIER).rev() {
            let terms: Vec<(Occur, Box<dyn Query>)> = exps
                .iter()
                .zip(fields)
                .filter(|(e, _)| e.kind.tier() == tier)
                .flat_map(|(e, fs)| {
                    fs.iter().map(move |f| {
                        let q: Box<dyn Query> = Box::new(TermQuery::new(
                            Term::from_field_text(*f, &e.term),
                            IndexRecordOption::Basic,
                        ));
                        (Occur::Should, q)
                    })
                })
                .collect();
            if !terms.is_empty() {
                tiers.push(Box::new(ConstScoreQuery::new(
                    Box::new(BooleanQuery::new(terms)),
                    word_unit + tier as f32 * tier_unit,
                )));
            }
        }
        let mut parts: Vec<(Occur, Box<dyn Query>)> =
            vec![(Occur::Should, Box::new(DisjunctionMaxQuery::new(tiers)))];
        // The BM25 part: per field, the best weighted term of the word.
        let mut by_field: BTreeMap<u32, Vec<Box<dyn Query>>> = BTreeMap::new();
        for (e, fs) in exps.iter().zip(fields) {
            let weight = e.kind.weight(word_chars, e.term.chars().count());
            for f in fs {
                let term = TermQuery::new(
                    Term::from_field_text(*f, &e.term),
                    IndexRecordOption::WithFreqs,
                );
                by_field
                    .entry(f.field_id())
                    .or_default()
                    .push(Box::new(BoostQuery::new(Box::new(term), weight)));
            }
        }
        let best_in_each_field: Vec<Box<dyn Query>> = by_field
            .into_values()
            .map(|terms| Box::new(DisjunctionMaxQuery::new(terms)) as Box<dyn Query>)
            .collect();
        parts.push((
            Occur::Should,
            Box::new(DisjunctionMaxQuery::with_tie_breaker(
                best_in_each_field,
                FIELD_TIE_BREAKER,
            )),
        ));
        words.push((Occur::Should, Box::new(BooleanQuery::new(parts))));
    }
    Box::new(BooleanQuery::new(words))
}
