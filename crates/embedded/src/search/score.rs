//! Scoring a query: every document that matches one of the words' expansions gets one
//! number whose order is the ranking order ([`quintet_core::search::query::rank`]), and the
//! best `limit` are kept.
//!
//! The number: every matched word adds `word_unit`, its best tier adds `tier × tier_unit`,
//! and its BM25 part — the best weighted term of its best field, plus
//! [`FIELD_TIE_BREAKER`] of the best term of each other field ("best fields") — adds less
//! than `tier_unit`. The units come from a bound on the BM25 part ([`Units`]), so more
//! words always beat better tiers, which always beat BM25.
//!
//! This was a tantivy query tree (per word, a disjunction-max of constant-score unions per
//! tier plus a disjunction-max over fields of disjunction-maxes over boosted term queries).
//! It scored the same, but each of its dozens of unions set up a 4,096-document buffer per
//! segment and every term was read twice (for the tier, then for BM25): for a two-word
//! query over 100,000 documents that was about 3 million instructions, mostly set-up. Here
//! each posting list is read once, term at a time, into per-document accumulators of a
//! window of documents, which are then scored in document order — about a third of that.
//! The arithmetic is tantivy's (its `Bm25Weight`, the same sums in the same order for up to
//! two fields and two words), and so is the choice of the top documents (by score, ties to
//! the lower address, as tantivy's `TopDocs` collector chooses them), so answers did
//! not change.

use std::{
    cmp::{Ordering, Reverse},
    collections::BinaryHeap,
    sync::{Arc, Mutex, PoisonError},
};

use quintet_core::{
    Result,
    search::{Expansion, MatchKind, QueryPlan},
};
use tantivy::{
    DocAddress, DocId, DocSet, InvertedIndexReader, Searcher, SegmentReader, TERMINATED, Term,
    columnar::Column,
    directory::OwnedBytes,
    fieldnorm::FieldNormReader,
    postings::{BlockSegmentPostings, SegmentPostings, TermInfo},
    schema::{Field, IndexRecordOption},
};

use super::engine_error;

/// A word's BM25 part is its best field's score plus this share of its other fields'
/// (Lucene's "best fields"): a word in a short title is not outscored by the same word
/// spread thinly over several long fields.
const FIELD_TIE_BREAKER: f32 = 0.2;

/// BM25 of one term is at most idf × (k1 + 1), and idf at most ln(1 + N) for N documents.
fn bm25_bound(total_docs: u64) -> f32 {
    2.2 * (1.0 + total_docs as f32).ln()
}

/// BM25's term-frequency saturation and length normalization, as tantivy has them.
const K1: f32 = 1.2;
const B: f32 = 0.75;

/// The BM25 of one term in one field, weighted: tantivy's `Bm25Weight`, the same
/// arithmetic in the same order (so scores are the query tree's to the bit, which the
/// property tests below hold), but with one length table per field and query. tantivy's
/// fills a fresh 256-entry table for every term, though it depends only on the field's
/// average length: 3 % of a query.
#[derive(Clone)]
struct Bm25 {
    /// idf × (k1 + 1) × the match kind's weight.
    weight: f32,
    /// Per field-length code, k1 × (1 − b + b × length / average length).
    lengths: Arc<[f32; 256]>,
}

impl Bm25 {
    /// The weight of a term that `doc_freq` of `total_docs` documents hold, boosted by
    /// `boost`.
    fn new(doc_freq: u64, total_docs: u64, boost: f32, lengths: &Arc<[f32; 256]>) -> Self {
        let x = (total_docs.saturating_sub(doc_freq) as f32 + 0.5) / (doc_freq as f32 + 0.5);
        let idf = (1.0 + x).ln();
        Self {
            weight: idf * (1.0 + K1) * boost,
            lengths: Arc::clone(lengths),
        }
    }

    /// The length table of a field whose average length is `average`.
    fn lengths(average: f32) -> Arc<[f32; 256]> {
        let mut table = [0.0f32; 256];
        for (code, entry) in table.iter_mut().enumerate() {
            let length = FieldNormReader::id_to_fieldnorm(code as u8);
            *entry = K1 * (1.0 - B + B * length as f32 / average);
        }
        Arc::new(table)
    }

    #[inline]
    fn score(&self, fieldnorm_id: u8, term_freq: u32) -> f32 {
        let term_freq = term_freq as f32;
        let norm = self.lengths[usize::from(fieldnorm_id)];
        self.weight * (term_freq / (term_freq + norm))
    }
}

/// The constant parts of the score.
struct Units {
    /// What a matched word adds, before its tier: more than any tiers and BM25 of all words.
    word: f32,
    /// What each tier of a word's best match adds: more than the BM25 part of all words.
    tier: f32,
    /// More than the BM25 part of all words together can add (by at least 1).
    bm25: f32,
}

impl Units {
    /// The units for `words` words, each found in the fields listed per expansion in
    /// `in_fields`, over `total_docs` documents.
    fn new(words: usize, in_fields: &[&[Vec<Field>]], total_docs: u64) -> Self {
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
        let tier = bm25_total + 1.0;
        let max_tier = MatchKind::BEST_TIER as f32;
        let word = max_tier * tier * words as f32 + bm25_total + 1.0;
        Self {
            word,
            tier,
            bm25: bm25_total,
        }
    }
}

/// One posting list to read: an expansion of a word, in one field.
struct Source {
    word: usize,
    /// The expansion's number, counting across the words in plan order.
    expansion: usize,
    /// Position of the field among the searched fields.
    field: usize,
    /// The expansion's [`MatchKind::tier`] plus one (0 stands for "no match").
    tier: u8,
    /// BM25 over the whole index, times the match kind's weight.
    bm25: Bm25,
    /// The term's postings in each segment, by segment ordinal.
    in_segments: InSegments,
}

/// A document of the answer.
pub(super) struct Hit {
    pub score: f32,
    pub address: DocAddress,
}

/// The documents of the answer, best first, and which expansions each holds.
pub(super) struct Hits {
    pub hits: Vec<Hit>,
    /// Per hit, per expansion (numbered across the words in plan order) and searched
    /// field: whether the document's field holds the expansion (see
    /// [`quintet_core::search::Explainer`]). One buffer for all hits: a vector per hit was
    /// an allocation per match.
    found: Vec<bool>,
    /// Flags per hit.
    width: usize,
}

impl Hits {
    /// The flags of the `i`th hit.
    pub fn found(&self, i: usize) -> &[bool] {
        self.found
            .get(i * self.width..(i + 1) * self.width)
            .unwrap_or_default()
    }
}

/// Where each term's postings are in each segment, remembered for one view of the index (a
/// searcher generation): a query's expansions are looked up in every segment's dictionary
/// of every searched field — for a one-typo word, about a hundred lookups in each of a
/// handful of segments, more than a third of scoring a query that asks for 10 documents —
/// and popular words come back. Forgotten all at once when the view changes or
/// [`TermInfoCache::TERMS`] are kept.
#[derive(Debug, Default)]
pub(super) struct TermInfoCache {
    /// The generation, and term → per field id, what is known of it.
    terms: Mutex<(u64, TermInfos)>,
}

/// Term → per field id (the searched fields it was looked up in), what is known of it. By
/// term first, so that a lookup takes the query's `&str` without allocating a key.
type TermInfos = foldhash::HashMap<String, Vec<(u32, Known)>>;

/// A term of one field, as a generation of the index has it.
#[derive(Debug, Clone)]
struct Known {
    /// Where its postings are in each segment.
    in_segments: InSegments,
    /// Documents holding it, deleted ones included, over all segments.
    doc_freq: u64,
}

/// Where a term's postings are in each segment, by segment ordinal.
type InSegments = Arc<[Option<TermInfo>]>;

impl TermInfoCache {
    /// Terms kept at most (about 100 bytes each, plus 40 per segment).
    const TERMS: usize = 65_536;
}

/// The best documents of a query, best first, at most `limit`.
///
/// `expansions[w]` are the terms word `w` of `plan` matches and `in_fields[w][e]` the
/// searched fields expansion `e` occurs in; `fields` are the searched fields, in configured
/// order. Documents must also contain every term of `filter`. `cache` keeps where terms'
/// postings are for the next queries on the same searcher.
#[allow(clippy::too_many_arguments)]
pub(super) fn top_docs(
    searcher: &Searcher,
    plan: &QueryPlan,
    expansions: &[&[Expansion]],
    in_fields: &[&[Vec<Field>]],
    fields: &[Field],
    filter: &Filter,
    limit: usize,
    cache: Option<&TermInfoCache>,
) -> Result<Hits> {
    let segments = searcher.segment_readers();
    let total_docs: u64 = segments.iter().map(|s| u64::from(s.max_doc())).sum();
    let units = Units::new(plan.words.len(), in_fields, total_docs);
    // The constant part of a word's score by its best tier (+ 1), as the query tree added it.
    let scale = Scale {
        tier_score: (0..=MatchKind::BEST_TIER)
            .map(|tier| units.word + tier as f32 * units.tier)
            .collect(),
        bm25: units.bm25,
    };
    // Each segment's inverted index of each searched field, looked up once: a lookup takes a
    // read lock and clones an Arc, counters shared by every query thread, and a query
    // would otherwise make about a hundred and fifty of them.
    let inverted = segments
        .iter()
        .map(|s| {
            fields
                .iter()
                .map(|&f| s.inverted_index(f).map_err(engine_error))
                .collect::<Result<Vec<_>>>()
        })
        .collect::<Result<Vec<_>>>()?;
    // BM25's average field length: tokens over documents, deleted ones included, as
    // tantivy's statistics count them.
    let average_norms: Vec<f32> = (0..fields.len())
        .map(|p| {
            let tokens: u64 = inverted.iter().map(|s| s[p].total_num_tokens()).sum();
            tokens as f32 / total_docs as f32
        })
        .collect();

    // Where each (searched field, expansion) has postings, per segment: from the cache,
    // else from the dictionaries.
    let generation = searcher.generation().generation_id();
    let wanted: Vec<(u32, &str)> = expansions
        .iter()
        .zip(in_fields)
        .flat_map(|(exps, fields_of)| exps.iter().zip(fields_of.iter()))
        .flat_map(|(e, fs)| fs.iter().map(|f| (f.field_id(), e.term.as_str())))
        .collect();
    let mut known: Vec<Option<Known>> = vec![None; wanted.len()];
    if let Some(cache) = cache {
        let terms = cache.terms.lock().unwrap_or_else(PoisonError::into_inner);
        if terms.0 == generation {
            for (k, (field, term)) in known.iter_mut().zip(&wanted) {
                *k = terms
                    .1
                    .get(*term)
                    .and_then(|by_field| by_field.iter().find(|(f, _)| f == field))
                    .map(|(_, known)| known.clone());
            }
        }
    }
    let mut learned = Vec::new();
    for (k, (field, term)) in known.iter_mut().zip(&wanted) {
        if k.is_some() {
            continue;
        }
        let Some(position) = fields.iter().position(|f| f.field_id() == *field) else {
            continue;
        };
        let term_key = Term::from_field_text(fields[position], term);
        let mut infos = Vec::with_capacity(segments.len());
        for s in &inverted {
            infos.push(s[position].get_term_info(&term_key).map_err(engine_error)?);
        }
        let found = Known {
            doc_freq: infos.iter().flatten().map(|i| u64::from(i.doc_freq)).sum(),
            in_segments: infos.into(),
        };
        learned.push((*field, *term, found.clone()));
        *k = Some(found);
    }
    if let Some(cache) = cache
        && !learned.is_empty()
    {
        let mut terms = cache.terms.lock().unwrap_or_else(PoisonError::into_inner);
        if terms.0 != generation || terms.1.len() + learned.len() > TermInfoCache::TERMS {
            terms.1.clear();
            terms.0 = generation;
        }
        for (field, term, found) in learned {
            terms
                .1
                .entry(term.to_owned())
                .or_default()
                .push((field, found));
        }
    }
    let mut known = known.into_iter();
    let lengths: Vec<Arc<[f32; 256]>> = average_norms.iter().map(|&a| Bm25::lengths(a)).collect();

    let mut sources = Vec::new();
    let mut expansion = 0;
    let words = plan.words.iter().zip(expansions.iter().zip(in_fields));
    for (w, (word, (exps, fields_of))) in words.enumerate() {
        let word_chars = word.text.chars().count();
        for (e, in_fields) in exps.iter().zip(fields_of.iter()) {
            expansion += 1;
            let weight = e.kind.weight(word_chars, e.term.chars().count());
            for field in in_fields {
                let infos = known.next().flatten();
                let Some(position) = fields.iter().position(|f| f == field) else {
                    continue;
                };
                let Some(found) = infos else {
                    continue;
                };
                if found.doc_freq == 0 {
                    continue;
                }
                sources.push(Source {
                    word: w,
                    expansion: expansion - 1,
                    field: position,
                    tier: u8::try_from(e.kind.tier() + 1).unwrap_or(u8::MAX),
                    bm25: Bm25::new(found.doc_freq, total_docs, weight, &lengths[position]),
                    in_segments: found.in_segments,
                });
            }
        }
    }

    let scoring = Scoring {
        fields,
        inverted,
        filter,
        limit,
        sources,
        scale,
        expansions: expansion,
    };
    WINDOW.with_borrow_mut(|window| {
        window.reset(plan.words.len(), fields.len());
        let hits = scoring.collect(searcher, window);
        window.trim();
        hits
    })
}

/// What [`top_docs`] prepared for the segments.
struct Scoring<'a> {
    fields: &'a [Field],
    /// Per segment, the inverted index of each searched field.
    inverted: Vec<Vec<Arc<InvertedIndexReader>>>,
    filter: &'a Filter,
    limit: usize,
    sources: Vec<Source>,
    scale: Scale,
    /// How many expansions the words have in all.
    expansions: usize,
}

thread_local! {
    /// The accumulators of the queries scored on this thread, reused: allocating and freeing
    /// up to 72 KB per query made the allocator consolidate its free lists each time. Those
    /// of a query with many words are not kept ([`Window::trim`]).
    static WINDOW: std::cell::RefCell<Window> = std::cell::RefCell::new(Window::default());
}

impl Scoring<'_> {
    /// The best documents, scored in `window`.
    fn collect(&self, searcher: &Searcher, window: &mut Window) -> Result<Hits> {
        let Self {
            fields,
            ref inverted,
            filter,
            limit,
            ref sources,
            ref scale,
            expansions,
        } = *self;
        let segments = searcher.segment_readers();
        // One heap for all segments: a document of a later segment must beat the best
        // `limit` of the earlier ones, so most are turned away by one comparison.
        let mut heap = TopHeap::new(limit);
        // Postings are large (two decoded blocks each, a kilobyte): their vector is the
        // thread's, kept from query to query, as a fresh one per segment was a large
        // allocation, after which the allocator consolidated its free lists each time.
        let mut lists = std::mem::take(&mut window.lists);
        lists.reserve(sources.len());
        // Per segment, per source: whether its list may hold a document of the answer.
        let mut needed: Vec<Vec<bool>> = vec![Vec::new(); segments.len()];
        'segments: for (ord, segment) in segments.iter().enumerate() {
            let ord = u32::try_from(ord).map_err(engine_error)?;
            let Some(mut admits) = filter.in_segment(segment)? else {
                continue 'segments;
            };
            lists.clear();
            for (i, source) in sources.iter().enumerate() {
                if let Some(Some(info)) = source.in_segments.get(ord as usize) {
                    let block = inverted[ord as usize][source.field]
                        .read_block_postings_from_terminfo(info, IndexRecordOption::WithFreqs)
                        .map_err(engine_error)?;
                    lists.push(List {
                        block,
                        at: 0,
                        source: i,
                    });
                }
            }
            if lists.is_empty() {
                continue;
            }
            let mut codes = Vec::with_capacity(fields.len());
            for &field in fields {
                codes.push(LengthCodes::of(segment, field)?);
            }
            let norms: Vec<&[u8]> = codes.iter().map(LengthCodes::as_slice).collect();
            let alive = segment.alive_bitset();
            window.run(
                &mut lists,
                sources,
                &norms,
                scale,
                heap.bar(),
                &mut |doc, score| {
                    if alive.is_none_or(|a| !a.is_deleted(doc)) && admits.admits(doc) {
                        heap.push(score, DocAddress::new(ord, doc));
                    }
                    heap.bar()
                },
            );
            if let Some(needed) = needed.get_mut(ord as usize) {
                needed.resize(sources.len(), false);
                for (list, &n) in lists.iter().zip(&window.needed) {
                    if let Some(source) = needed.get_mut(list.source) {
                        *source |= n;
                    }
                }
            }
        }
        lists.clear();
        window.lists = lists;
        let hits: Vec<Hit> = heap
            .into_sorted_vec()
            .into_iter()
            .map(|(score, address)| Hit { score, address })
            .collect();
        let width = expansions * fields.len();
        let mut hits = Hits {
            found: vec![false; hits.len() * width],
            hits,
            width,
        };
        find_terms(inverted, sources, &needed, fields.len(), &mut hits)?;
        Ok(hits)
    }
}

/// Note in each hit which expansions occur in which of its fields, by looking the hits up
/// in the postings again (seeking, in document order), so that matches are explained
/// from the index without reading their words from the stored documents: an answer's
/// explanations cost a few seeks per term instead of tokenizing up to 1,000 documents.
/// Only the lists `needed` (per segment, per source) are opened: those that noted a
/// posting in a window where a document was handed to the top k. A list with no posting
/// in such a window holds no document of the answer, and most of a typo's expansions are
/// rare terms with none.
fn find_terms(
    inverted: &[Vec<Arc<InvertedIndexReader>>],
    sources: &[Source],
    needed: &[Vec<bool>],
    width: usize,
    hits: &mut Hits,
) -> Result<()> {
    for (ord, inverted) in inverted.iter().enumerate() {
        let mut here: Vec<(DocId, usize)> = hits
            .hits
            .iter()
            .enumerate()
            .filter(|(_, h)| h.address.segment_ord as usize == ord)
            .map(|(i, h)| (h.address.doc_id, i))
            .collect();
        if here.is_empty() {
            continue;
        }
        here.sort_unstable();
        let needed = needed.get(ord).map_or(&[][..], Vec::as_slice);
        for (source, _) in sources.iter().zip(needed).filter(|(_, needed)| **needed) {
            let Some(Some(info)) = source.in_segments.get(ord) else {
                continue;
            };
            let mut postings = inverted[source.field]
                .read_postings_from_terminfo(info, IndexRecordOption::Basic)
                .map_err(engine_error)?;
            for &(doc, i) in &here {
                if postings.doc() < doc {
                    postings.seek(doc);
                }
                if postings.doc() == doc
                    && let Some(found) = hits
                        .found
                        .get_mut(i * hits.width + source.expansion * width + source.field)
                {
                    *found = true;
                }
            }
        }
    }
    Ok(())
}

/// A query's `filter`: the hashed terms of its entries, all of which a document must have.
#[derive(Debug, Clone)]
pub(super) struct Filter {
    /// The field holding each document's hashed filter terms.
    pub field: Field,
    /// Whether that field is a fast field (a column of values per document) or indexed.
    pub fast: bool,
    /// The hashes a document must have; none admits every document.
    pub hashes: Vec<u64>,
}

impl Filter {
    /// The check of one segment's documents, or `None` when none of them can pass.
    fn in_segment(&self, segment: &SegmentReader) -> Result<Option<SegmentFilter>> {
        if self.hashes.is_empty() {
            return Ok(Some(SegmentFilter::All));
        }
        if self.fast {
            let name = segment.schema().get_field_name(self.field);
            let column: Option<Column<u64>> = segment
                .fast_fields()
                .column_opt(name)
                .map_err(engine_error)?;
            return Ok(column.map(|c| SegmentFilter::Column(c, self.hashes.clone())));
        }
        let inverted = segment.inverted_index(self.field).map_err(engine_error)?;
        let mut lists = Vec::with_capacity(self.hashes.len());
        for &hash in &self.hashes {
            let term = Term::from_field_u64(self.field, hash);
            match inverted
                .read_postings(&term, IndexRecordOption::Basic)
                .map_err(engine_error)?
            {
                Some(p) => lists.push(p),
                None => return Ok(None),
            }
        }
        Ok(Some(SegmentFilter::Postings(lists)))
    }
}

/// [`Filter`] over one segment.
enum SegmentFilter {
    /// No filter.
    All,
    /// A fast field and the hashes each document must have among its values.
    Column(Column<u64>, Vec<u64>),
    /// One posting list per hash (indexes made before the fast field).
    Postings(Vec<SegmentPostings>),
}

impl SegmentFilter {
    /// Whether `doc` passes; documents come in increasing order.
    fn admits(&mut self, doc: DocId) -> bool {
        match self {
            Self::All => true,
            Self::Column(column, hashes) => hashes
                .iter()
                .all(|h| column.values_for_doc(doc).any(|v| v == *h)),
            Self::Postings(lists) => lists.iter_mut().all(|f| {
                if f.doc() < doc {
                    f.seek(doc);
                }
                f.doc() == doc
            }),
        }
    }
}

/// A field's length codes in one segment, one byte per document: what tantivy's
/// `FieldNormReader` reads, taken as the byte array it is so that scoring indexes it
/// directly (the reader's per-document dispatch was 4 % of a query).
enum LengthCodes {
    /// The segment's fieldnorm data, as tantivy stores it.
    Stored(OwnedBytes),
    /// Every document's code, from a reader that has no data (a field without lengths).
    Built(Vec<u8>),
}

impl LengthCodes {
    fn of(segment: &SegmentReader, field: Field) -> Result<Self> {
        let readers = segment.fieldnorms_readers();
        if let Some(file) = readers.get_inner_file().open_read(field) {
            let bytes = file.read_bytes().map_err(engine_error)?;
            if bytes.len() >= segment.max_doc() as usize {
                return Ok(Self::Stored(bytes));
            }
        }
        let reader = readers
            .get_field(field)
            .map_err(engine_error)?
            .unwrap_or_else(|| FieldNormReader::constant(segment.max_doc(), 1));
        Ok(Self::Built(
            (0..segment.max_doc())
                .map(|doc| reader.fieldnorm_id(doc))
                .collect(),
        ))
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            Self::Stored(bytes) => bytes.as_slice(),
            Self::Built(codes) => codes,
        }
    }
}

/// A posting list being read: its decoded block and where in it (past its end only when
/// the list has ended, its block then empty).
struct List {
    block: BlockSegmentPostings,
    at: usize,
    /// Its index in the sources.
    source: usize,
}

impl List {
    /// The document it is on, or [`TERMINATED`] when it has ended.
    fn doc(&self) -> DocId {
        self.block
            .docs()
            .get(self.at)
            .copied()
            .unwrap_or(TERMINATED)
    }
}

/// What a document's score is made of, for scoring and for bounding it.
struct Scale {
    /// The constant part of a word's score, by its best tier + 1.
    tier_score: Vec<f32>,
    /// More than the BM25 parts of all words together can add (by at least 1).
    bm25: f32,
}

/// Which posting lists cannot, on their own, lift a document above the top k's bar
/// (MaxScore, by word and tier). A document's score is a constant per matched word and
/// its best tier, plus BM25 parts that together stay below [`Scale::bm25`]; so once the
/// bar is at least the constants of some words' lower tiers plus that bound, a document
/// found only in those lists (the weak ones) cannot enter, and windows are read from the
/// other lists' documents. Weak lists still add to those documents, so every score is
/// exactly what it would be without pruning.
///
/// For two-word queries it is the common first word whose lists turn weak, once the
/// top k all match both words; for one word, its typos and completions that rank below
/// a corrected word with enough documents.
struct Pruning {
    /// Per word, the distinct tiers (+ 1) of its lists in ascending order, each with the
    /// postings of the word's lists at that tier or below.
    options: Vec<Vec<(u8, u64)>>,
    /// The bar from which some split not yet allowed becomes allowed.
    next: f32,
    /// Whether some list is weak.
    any: bool,
}

impl Pruning {
    /// Splits allowed by the bars that are met are searched only this far; more words
    /// than a few are rare.
    const VISITS: usize = 1_024;

    fn new(lists: &[List], sources: &[Source], words: usize) -> Self {
        let mut options: Vec<Vec<(u8, u64)>> = vec![Vec::new(); words];
        for list in lists {
            if let Some(source) = sources.get(list.source)
                && let Some(of_word) = options.get_mut(source.word)
            {
                of_word.push((source.tier, u64::from(list.block.doc_freq())));
            }
        }
        for of_word in &mut options {
            of_word.sort_unstable_by_key(|&(tier, _)| tier);
            let mut merged: Vec<(u8, u64)> = Vec::with_capacity(of_word.len());
            let mut total = 0;
            for &(tier, postings) in of_word.iter() {
                total += postings;
                match merged.last_mut() {
                    Some(last) if last.0 == tier => last.1 = total,
                    _ => merged.push((tier, total)),
                }
            }
            *of_word = merged;
        }
        Self {
            options,
            next: f32::NEG_INFINITY,
            any: false,
        }
    }

    /// Mark in `weak` the lists of the split that `bar` allows and that spares the most
    /// postings: per word, its lists up to some tier, as long as the constants of those
    /// words at those tiers plus the BM25 bound stay at or below `bar`.
    fn split(
        &mut self,
        lists: &[List],
        sources: &[Source],
        scale: &Scale,
        bar: f32,
        weak: &mut [bool],
    ) {
        let words = self.options.len();
        let mut search = SplitSearch {
            options: &self.options,
            scale,
            bar,
            choice: vec![0; words],
            best: (0, vec![0; words]),
            next: f32::INFINITY,
            visits: 0,
        };
        search.visit(0, 0.0, 0);
        self.next = search.next;
        let best = search.best.1;
        self.any = false;
        for (list, weak) in lists.iter().zip(weak.iter_mut()) {
            *weak = sources
                .get(list.source)
                .is_some_and(|s| best.get(s.word).is_some_and(|&t| s.tier <= t));
            self.any |= *weak;
        }
    }
}

/// The search of [`Pruning::split`]: per word, none of its lists or those up to a tier.
struct SplitSearch<'a> {
    options: &'a [Vec<(u8, u64)>],
    scale: &'a Scale,
    bar: f32,
    /// Per word, the highest weak tier (+ 1), 0 for none, of the split being built.
    choice: Vec<u8>,
    /// The postings the best split found spares, and that split.
    best: (u64, Vec<u8>),
    /// The least bar that would allow a split refused so far.
    next: f32,
    visits: usize,
}

impl SplitSearch<'_> {
    /// Choose for word `w` and the ones after it, the words before having added `used`
    /// to the bound and spared `saved` postings.
    fn visit(&mut self, w: usize, used: f32, saved: u64) {
        self.visits += 1;
        let Some(of_word) = self.options.get(w) else {
            if saved > self.best.0 {
                self.best = (saved, self.choice.clone());
            }
            return;
        };
        if self.visits > Pruning::VISITS {
            return;
        }
        self.visit(w + 1, used, saved);
        for &(tier, postings) in of_word {
            let constant = self
                .scale
                .tier_score
                .get(usize::from(tier).saturating_sub(1))
                .copied()
                .unwrap_or(f32::INFINITY);
            let bound = used + constant + self.scale.bm25;
            if bound > self.bar {
                self.next = self.next.min(bound);
                break; // higher tiers add more
            }
            self.choice[w] = tier;
            self.visit(w + 1, used + constant, saved + postings);
        }
        self.choice[w] = 0;
    }
}

/// Per-document accumulators for a window of consecutive documents. They are all zero
/// between runs: scoring a document clears its accumulators.
#[derive(Default)]
struct Window {
    words: usize,
    fields: usize,
    /// Documents per window, a multiple of 64.
    size: usize,
    /// Per document and word: the best tier + 1, 0 when the word did not match.
    tiers: Vec<u8>,
    /// Per document, word and field: the best weighted BM25 of the word's terms.
    bm25: Vec<f32>,
    /// Which documents of the window matched something.
    touched: Vec<u64>,
    /// A run began and did not finish (it unwound): the accumulators may not be zero.
    dirty: bool,
    /// Room for the posting lists of a segment, empty between queries.
    lists: Vec<List>,
    /// Room for which of them are weak ([`Pruning`]).
    weak: Vec<bool>,
    /// Per list: whether it noted a posting in the current window.
    active: Vec<bool>,
    /// Per list of the last run: whether it noted a posting in a window where a document
    /// was handed over. Only those lists can hold a document of the answer, so only they
    /// are opened again to explain the answer ([`find_terms`]).
    pub needed: Vec<bool>,
    /// Postings noted in the accumulators, for tests of what pruning spares.
    #[cfg(test)]
    noted: usize,
}

/// The score of a document from its accumulators — per word its best tier + 1 and per word
/// and field its best weighted BM25 — which are cleared for the next window (reading and
/// clearing in one pass is cheaper than clearing a few bytes per document afterwards).
/// Per matched word, in query order: its tier's constant plus its best field's BM25 and a
/// share of its other fields', summed as tantivy's combiners sum them.
#[inline(always)]
fn take_score(tiers: &mut [u8], bm25: &mut [f32], fields: usize, tier_score: &[f32]) -> f32 {
    let mut score = 0.0f32;
    for (tier, bm25) in tiers.iter_mut().zip(bm25.chunks_exact_mut(fields)) {
        let tier = std::mem::take(tier);
        if tier == 0 {
            continue; // nothing was noted for the word: its BM25 entries are still 0
        }
        let (mut max, mut sum) = (0.0f32, 0.0f32);
        for s in bm25 {
            let s = std::mem::take(s);
            max = f32::max(s, max);
            sum += s;
        }
        let constant = tier_score
            .get(usize::from(tier) - 1)
            .copied()
            .unwrap_or_default();
        score += constant + (max + (sum - max) * FIELD_TIE_BREAKER);
    }
    score
}

impl Window {
    /// Make room for `words` words over `fields` fields: at most 64K accumulators, all
    /// zero. They are zero already after a run, whatever the shape of the last query, so
    /// only room beyond what the thread's last queries used is added (zeroing the window
    /// for every query was about 55,000 of a query's 910,000 instructions at limit 10).
    fn reset(&mut self, words: usize, fields: usize) {
        let per_doc = (words * fields).max(1);
        self.size = ((1 << 16) / per_doc).clamp(64, 4096) / 64 * 64;
        self.words = words;
        self.fields = fields;
        if std::mem::take(&mut self.dirty) {
            self.bm25.clear();
            self.tiers.clear();
            self.touched.clear();
        }
        grow(&mut self.bm25, self.size * words * fields);
        grow(&mut self.tiers, self.size * words);
        grow(&mut self.touched, self.size / 64);
        #[cfg(test)]
        {
            self.noted = 0;
        }
    }

    /// Give back the memory of a window made for many words: blocking threads come and go
    /// with the load, and each keeps its window.
    fn trim(&mut self) {
        const KEEP_BYTES: usize = 256 * 1024;
        let bytes = self.bm25.capacity() * 4
            + self.tiers.capacity()
            + self.touched.capacity() * 8
            + self.lists.capacity() * std::mem::size_of::<List>()
            + self.weak.capacity()
            + self.active.capacity()
            + self.needed.capacity();
        if bytes > KEEP_BYTES {
            *self = Self::default();
        }
    }

    /// Read `lists` (postings, index in `sources`) to the end, calling `f` with each
    /// matching document, in increasing order, and its score ([`take_score`]), when the
    /// score is above the bar: `bar` at first, then what `f` last returned. Most
    /// documents are turned away by that one comparison, without a call.
    fn run(
        &mut self,
        lists: &mut [List],
        sources: &[Source],
        norms: &[&[u8]],
        scale: &Scale,
        bar: f32,
        f: &mut impl FnMut(DocId, f32) -> f32,
    ) {
        // The common shapes with their sizes known to the compiler, which then unrolls
        // the sums and drops most bounds checks: an eighth of a query at limit 10.
        match (self.words, self.fields) {
            (1, 1) => self.run_shaped::<1, 1>(lists, sources, norms, scale, bar, f),
            (1, 2) => self.run_shaped::<1, 2>(lists, sources, norms, scale, bar, f),
            (2, 1) => self.run_shaped::<2, 1>(lists, sources, norms, scale, bar, f),
            (2, 2) => self.run_shaped::<2, 2>(lists, sources, norms, scale, bar, f),
            _ => self.run_shaped::<0, 0>(lists, sources, norms, scale, bar, f),
        }
    }

    /// [`Window::run`] for `W` words and `F` fields, or 0 for "as the window says".
    ///
    /// Windows start at the documents of the strong lists; weak lists (see [`Pruning`])
    /// only add to documents a strong list touched, and skip the blocks that hold none.
    fn run_shaped<const W: usize, const F: usize>(
        &mut self,
        lists: &mut [List],
        sources: &[Source],
        norms: &[&[u8]],
        scale: &Scale,
        mut bar: f32,
        f: &mut impl FnMut(DocId, f32) -> f32,
    ) {
        let words = if W == 0 { self.words } else { W };
        let fields = if F == 0 { self.fields } else { F };
        self.dirty = true;
        let mut pruning = Pruning::new(lists, sources, words);
        let mut weak = std::mem::take(&mut self.weak);
        weak.clear();
        weak.resize(lists.len(), false);
        self.active.clear();
        self.active.resize(lists.len(), false);
        self.needed.clear();
        self.needed.resize(lists.len(), false);
        loop {
            if bar >= pruning.next {
                pruning.split(lists, sources, scale, bar, &mut weak);
            }
            let start = lists
                .iter()
                .zip(&weak)
                .filter(|(_, weak)| !**weak)
                .map(|(list, _)| list.doc())
                .min()
                .unwrap_or(TERMINATED);
            if start == TERMINATED {
                // What only weak lists still hold cannot clear the bar.
                self.weak = weak;
                self.dirty = false;
                return;
            }
            let end = start.saturating_add(self.size as u32);
            for (l, list) in lists.iter_mut().enumerate() {
                if weak.get(l).copied().unwrap_or_default() {
                    continue;
                }
                let Some(source) = sources.get(list.source) else {
                    continue;
                };
                let Some(norms) = norms.get(source.field) else {
                    continue;
                };
                // Block by block, straight from the decoded arrays.
                let mut noted = false;
                loop {
                    let docs = list.block.docs();
                    let mut at = list.at;
                    while let Some(&doc) = docs.get(at)
                        && doc < end
                    {
                        let i = (doc - start) as usize;
                        self.touched[i / 64] |= 1 << (i % 64);
                        self.note::<W, F>(i, source, norms, doc, list.block.freq(at));
                        at += 1;
                    }
                    noted |= at > list.at;
                    if at < docs.len() || docs.is_empty() {
                        list.at = at;
                        break; // the window ends here, or the list did
                    }
                    list.block.advance();
                    list.at = 0;
                }
                if let Some(active) = self.active.get_mut(l) {
                    *active = noted;
                }
            }
            if pruning.any {
                for (l, list) in lists.iter_mut().enumerate() {
                    if !weak.get(l).copied().unwrap_or_default() {
                        continue;
                    }
                    let Some(source) = sources.get(list.source) else {
                        continue;
                    };
                    let Some(norms) = norms.get(source.field) else {
                        continue;
                    };
                    let noted = self.add_weak::<W, F>(list, source, norms, start, end);
                    if let Some(active) = self.active.get_mut(l) {
                        *active = noted;
                    }
                }
            }
            if self.take_window(start, words, fields, &scale.tier_score, &mut bar, f) {
                for (needed, active) in self.needed.iter_mut().zip(&self.active) {
                    *needed |= *active;
                }
            }
            self.active.fill(false);
        }
    }

    /// Note one posting of `source` (document `doc`, `i`th of the window) in the
    /// accumulators.
    #[inline(always)]
    fn note<const W: usize, const F: usize>(
        &mut self,
        i: usize,
        source: &Source,
        norms: &[u8],
        doc: DocId,
        term_freq: u32,
    ) {
        let words = if W == 0 { self.words } else { W };
        let fields = if F == 0 { self.fields } else { F };
        let slot = i * words + source.word;
        self.tiers[slot] = self.tiers[slot].max(source.tier);
        let score = source.bm25.score(
            norms.get(doc as usize).copied().unwrap_or_default(),
            term_freq,
        );
        let best = &mut self.bm25[slot * fields + source.field];
        *best = f32::max(score, *best);
        #[cfg(test)]
        {
            self.noted += 1;
        }
    }

    /// Add a weak list's postings in the window `start..end` to the documents a strong
    /// list touched, leaving it at its first document at or after `end`; whether it added
    /// any. Blocks with no
    /// touched document before their last are skipped through the skip list, not decoded.
    fn add_weak<const W: usize, const F: usize>(
        &mut self,
        list: &mut List,
        source: &Source,
        norms: &[u8],
        start: DocId,
        end: DocId,
    ) -> bool {
        let mut noted = false;
        loop {
            let docs = list.block.docs();
            let (Some(&doc), Some(&last)) = (docs.get(list.at), docs.last()) else {
                if docs.is_empty() {
                    return noted; // the list has ended
                }
                list.block.advance();
                list.at = 0;
                continue;
            };
            if doc >= end {
                return noted;
            }
            let from = doc.saturating_sub(start) as usize;
            let target = match self.next_touched(from) {
                Some(i) => start + i as u32,
                None => end,
            };
            if last < target {
                list.at = list.block.seek(target);
                continue;
            }
            let mut at = list.at;
            while let Some(&doc) = docs.get(at)
                && doc < end
            {
                if doc >= start {
                    let i = (doc - start) as usize;
                    if self.touched[i / 64] & (1 << (i % 64)) != 0 {
                        self.note::<W, F>(i, source, norms, doc, list.block.freq(at));
                        noted = true;
                    }
                }
                at += 1;
            }
            if at < docs.len() {
                list.at = at;
                return noted;
            }
            list.block.advance();
            list.at = 0;
        }
    }

    /// The first touched document of the window at or after its `from`th.
    fn next_touched(&self, from: usize) -> Option<usize> {
        let blocks = self.size / 64;
        let mut block = from / 64;
        if block >= blocks {
            return None;
        }
        let mut bits = self.touched[block] & (u64::MAX << (from % 64));
        loop {
            if bits != 0 {
                return Some(block * 64 + bits.trailing_zeros() as usize);
            }
            block += 1;
            if block >= blocks {
                return None;
            }
            bits = self.touched[block];
        }
    }

    /// Score the window's touched documents (starting at document `start`) in order,
    /// calling `f` with each, and clear their accumulators.
    #[inline(always)]
    fn take_window(
        &mut self,
        start: DocId,
        words: usize,
        fields: usize,
        tier_score: &[f32],
        bar: &mut f32,
        f: &mut impl FnMut(DocId, f32) -> f32,
    ) -> bool {
        let per_doc = words * fields;
        let mut handed = false;
        for block in 0..self.size / 64 {
            let mut bits = std::mem::take(&mut self.touched[block]);
            while bits != 0 {
                let i = block * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let (Some(tiers), Some(bm25)) = (
                    self.tiers.get_mut(i * words..(i + 1) * words),
                    self.bm25.get_mut(i * per_doc..(i + 1) * per_doc),
                ) else {
                    continue;
                };
                let score = take_score(tiers, bm25, fields, tier_score);
                if score > *bar {
                    *bar = f(start + i as u32, score);
                    handed = true;
                }
            }
        }
        handed
    }
}

/// Make `v` at least `len` long, with zeros.
fn grow<T: Default + Clone>(v: &mut Vec<T>, len: usize) {
    if v.len() < len {
        v.resize(len, T::default());
    }
}

/// A document and its score, ordered by score, then by the lower address first.
struct Entry {
    score: f32,
    doc: DocAddress,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .partial_cmp(&other.score)
            .unwrap_or(Ordering::Equal)
            .then_with(|| other.doc.cmp(&self.doc))
    }
}

/// The best documents, pushed in increasing address order (segment by segment, each in
/// document order); a later document needs a strictly higher score to displace one, so
/// ties keep the lower address. These are the documents, in the same order, that
/// tantivy's collector keeps: a top-k by score per segment (`TopNHeap`, ties to the lower
/// document), merged by `TopNComputer` (ties to the lower address).
struct TopHeap {
    heap: BinaryHeap<Reverse<Entry>>,
    limit: usize,
    threshold: Option<f32>,
}

impl TopHeap {
    fn new(limit: usize) -> Self {
        Self {
            heap: BinaryHeap::with_capacity(limit),
            limit,
            threshold: None,
        }
    }

    /// The score a document later than those pushed must exceed to be kept: −∞ until
    /// `limit` are kept (scores are never NaN).
    fn bar(&self) -> f32 {
        match self.threshold {
            Some(t) if self.heap.len() >= self.limit => t,
            _ => f32::NEG_INFINITY,
        }
    }

    fn push(&mut self, score: f32, doc: DocAddress) {
        if self.heap.len() < self.limit {
            self.heap.push(Reverse(Entry { score, doc }));
            if self.heap.len() == self.limit {
                self.threshold = self.heap.peek().map(|Reverse(e)| e.score);
            }
        } else if let Some(threshold) = self.threshold
            && score > threshold
        {
            if let Some(mut min) = self.heap.peek_mut() {
                *min = Reverse(Entry { score, doc });
            }
            self.threshold = self.heap.peek().map(|Reverse(e)| e.score);
        }
    }

    /// The kept documents, best first.
    fn into_sorted_vec(self) -> Vec<(f32, DocAddress)> {
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|Reverse(e)| (e.score, e.doc))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    //! [`top_docs`] against the tantivy query tree it replaced, on random indexes.

    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use quintet_core::search::QueryWord;
    use tantivy::{
        Index, IndexWriter, TantivyDocument,
        collector::TopDocs,
        indexer::NoMergePolicy,
        query::{
            BooleanQuery, BoostQuery, ConstScoreQuery, DisjunctionMaxQuery, Occur, Query, TermQuery,
        },
        schema::{FAST, INDEXED, STORED, Schema, TEXT, Value},
    };

    use super::*;

    /// The query tree: per word, a disjunction-max of constant-score unions per tier, plus
    /// a disjunction-max over fields of disjunction-maxes over boosted term queries.
    fn words_query(
        plan: &QueryPlan,
        expansions: &[Vec<Expansion>],
        in_fields: &[Vec<Vec<Field>>],
        total_docs: u64,
    ) -> Box<dyn Query> {
        let borrowed: Vec<&[Vec<Field>]> = in_fields.iter().map(Vec::as_slice).collect();
        let units = Units::new(plan.words.len(), &borrowed, total_docs);
        let mut words: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        for (word, (exps, fields)) in plan.words.iter().zip(expansions.iter().zip(in_fields)) {
            if exps.is_empty() {
                continue;
            }
            let word_chars = word.text.chars().count();
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
                        units.word + tier as f32 * units.tier,
                    )));
                }
            }
            let mut parts: Vec<(Occur, Box<dyn Query>)> =
                vec![(Occur::Should, Box::new(DisjunctionMaxQuery::new(tiers)))];
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

    const VOCABULARY: [&str; 8] = ["ab", "abc", "abd", "b", "bc", "cab", "d", "dd"];
    const KINDS: [MatchKind; 6] = [
        MatchKind::Exact,
        MatchKind::Prefix,
        MatchKind::Fuzzy(1),
        MatchKind::FuzzyPrefix(1),
        MatchKind::Fuzzy(2),
        MatchKind::FuzzyPrefix(2),
    ];

    /// A document: per field, its words (indexes into [`VOCABULARY`]), and a filter value.
    type Doc = (Vec<Vec<usize>>, u64);

    struct Fixture {
        index: Index,
        text: Vec<Field>,
        filter: Field,
    }

    /// An index of `batches` (one segment each) over `fields` text fields; `deleted` are
    /// document numbers removed afterwards.
    fn index(fields: usize, batches: &[Vec<Doc>], deleted: &[u64]) -> Fixture {
        let mut b = Schema::builder();
        let text: Vec<Field> = (0..fields)
            .map(|i| b.add_text_field(&format!("f{i}"), TEXT | STORED))
            .collect();
        // Both indexed and fast, so that both ways of filtering can be compared.
        let filter = b.add_u64_field("filter", INDEXED | FAST);
        let id = b.add_u64_field("id", INDEXED);
        let index = Index::create_in_ram(b.build());
        let mut writer: IndexWriter = index.writer_with_num_threads(1, 15_000_000).unwrap();
        writer.set_merge_policy(Box::new(NoMergePolicy));
        let mut n = 0u64;
        for batch in batches {
            for (words, value) in batch {
                let mut d = TantivyDocument::new();
                for (field, words) in text.iter().zip(words) {
                    let s: Vec<&str> = words.iter().map(|w| VOCABULARY[*w]).collect();
                    d.add_text(*field, s.join(" "));
                }
                d.add_u64(filter, *value);
                d.add_u64(id, n);
                n += 1;
                writer.add_document(d).unwrap();
            }
            writer.commit().unwrap();
        }
        for d in deleted {
            writer.delete_term(Term::from_field_u64(id, *d));
        }
        writer.commit().unwrap();
        Fixture {
            index,
            text,
            filter,
        }
    }

    fn doc_strategy(fields: usize) -> impl Strategy<Value = Doc> {
        (
            proptest::collection::vec(proptest::collection::vec(0..VOCABULARY.len(), 0..5), fields),
            0..3u64,
        )
    }

    /// Words of a query: per word, its expansions (term, kind).
    fn plan_strategy(words: usize) -> impl Strategy<Value = Vec<Vec<(usize, usize)>>> {
        proptest::collection::vec(
            proptest::collection::btree_map(0..VOCABULARY.len(), 0..KINDS.len(), 0..4)
                .prop_map(|m| m.into_iter().collect::<Vec<_>>()),
            1..=words,
        )
    }

    /// Compare [`top_docs`] with the query tree on one index and query.
    fn compare(
        fixture: &Fixture,
        words: &[Vec<(usize, usize)>],
        fields: usize,
        filter: Option<u64>,
        limit: usize,
        exact: bool,
    ) -> std::result::Result<(), TestCaseError> {
        let searcher = fixture.index.reader().unwrap().searcher();
        let searched = &fixture.text[..fields];
        let plan = QueryPlan {
            words: (0..words.len())
                .map(|i| QueryWord {
                    text: "x".repeat(i + 2),
                    budget: 1,
                    prefix: false,
                })
                .collect(),
        };
        let expansions: Vec<Vec<Expansion>> = words
            .iter()
            .map(|w| {
                w.iter()
                    .map(|&(t, k)| Expansion {
                        term: VOCABULARY[t].to_owned(),
                        kind: KINDS[k],
                        doc_freq: 1,
                    })
                    .collect()
            })
            .collect();
        // As `expand` finds them: the searched fields holding the term in some segment.
        let in_fields: Vec<Vec<Vec<Field>>> = expansions
            .iter()
            .map(|w| {
                w.iter()
                    .map(|e| {
                        searched
                            .iter()
                            .copied()
                            .filter(|f| {
                                searcher
                                    .doc_freq(&Term::from_field_text(*f, &e.term))
                                    .unwrap()
                                    > 0
                            })
                            .collect()
                    })
                    .collect()
            })
            .collect();
        let filter_terms: Vec<Term> = filter
            .map(|v| Term::from_field_u64(fixture.filter, v))
            .into_iter()
            .collect();
        let total_docs = searcher
            .segment_readers()
            .iter()
            .map(|s| u64::from(s.max_doc()))
            .sum();
        let mut tree = words_query(&plan, &expansions, &in_fields, total_docs);
        if let Some(term) = filter_terms.first() {
            let exact_filter = TermQuery::new(term.clone(), IndexRecordOption::Basic);
            tree = Box::new(BooleanQuery::new(vec![
                (Occur::Must, tree),
                (
                    Occur::Must,
                    Box::new(ConstScoreQuery::new(Box::new(exact_filter), 0.0)),
                ),
            ]));
        }
        let expected = searcher
            .search(&*tree, &TopDocs::with_limit(limit).order_by_score())
            .unwrap();
        let filtered = |fast| {
            let filter = Filter {
                field: fixture.filter,
                fast,
                hashes: filter.into_iter().collect(),
            };
            let expansions: Vec<&[Expansion]> = expansions.iter().map(Vec::as_slice).collect();
            let in_fields: Vec<&[Vec<Field>]> = in_fields.iter().map(Vec::as_slice).collect();
            top_docs(
                &searcher,
                &plan,
                &expansions,
                &in_fields,
                searched,
                &filter,
                limit,
                None,
            )
            .unwrap()
        };
        let top = filtered(false);
        let hits = &top.hits;
        let by_column = filtered(true).hits;
        prop_assert_eq!(
            by_column
                .iter()
                .map(|h| (h.score, h.address))
                .collect::<Vec<_>>(),
            hits.iter()
                .map(|h| (h.score, h.address))
                .collect::<Vec<_>>()
        );
        let got: Vec<(f32, DocAddress)> = hits.iter().map(|h| (h.score, h.address)).collect();
        if exact {
            prop_assert_eq!(&got, &expected);
        } else {
            prop_assert_eq!(got.len(), expected.len());
            for ((a, _), (b, _)) in got.iter().zip(&expected) {
                prop_assert!((a - b).abs() <= 1e-3, "{} vs {}", a, b);
            }
        }
        // Which expansions each hit holds, by reading its stored words.
        for (i, hit) in hits.iter().enumerate() {
            let doc: TantivyDocument = searcher.doc(hit.address).unwrap();
            for (at, e) in expansions.iter().flatten().enumerate() {
                for (f, field) in searched.iter().enumerate() {
                    let holds = doc
                        .get_first(*field)
                        .and_then(|v| v.as_str())
                        .is_some_and(|s| s.split(' ').any(|w| w == e.term));
                    prop_assert_eq!(top.found(i)[at * fields + f], holds, "{} in f{}", e.term, f);
                }
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Up to two words and two fields, the sums add the same numbers in any order, so
        /// scores and order are exactly the query tree's, ties included.
        #[test]
        fn top_docs_are_the_query_trees(
            batches in proptest::collection::vec(proptest::collection::vec(doc_strategy(2), 1..40), 1..4),
            deleted in proptest::collection::vec(0..100u64, 0..10),
            words in plan_strategy(2),
            fields in 1..=2usize,
            filter in proptest::option::of(0..3u64),
            limit in 1..12usize,
        ) {
            let fixture = index(2, &batches, &deleted);
            compare(&fixture, &words, fields, filter, limit, true)?;
        }

        /// More words and fields: the same documents with the same scores up to rounding.
        #[test]
        fn more_words_and_fields_score_alike(
            batches in proptest::collection::vec(proptest::collection::vec(doc_strategy(3), 1..30), 1..3),
            words in plan_strategy(4),
            limit in 1..8usize,
        ) {
            let fixture = index(3, &batches, &[]);
            compare(&fixture, &words, 3, None, limit, false)?;
        }
    }

    proptest! {
        /// [`Bm25`] is tantivy's `Bm25Weight` to the bit, whatever the statistics, boost,
        /// length code and term frequency.
        #[test]
        fn bm25_is_tantivys_to_the_bit(
            total_docs in 1..10_000_000u64,
            doc_freq_share in 0.0..1.0f64,
            average in 0.5..500.0f32,
            boost in prop_oneof![Just(1.0f32), 0.01..1.0f32],
            fieldnorm_id in any::<u8>(),
            term_freq in 1..1_000u32,
        ) {
            let doc_freq = ((total_docs as f64 * doc_freq_share) as u64).max(1);
            let ours = Bm25::new(doc_freq, total_docs, boost, &Bm25::lengths(average));
            let theirs = tantivy::query::Bm25Weight::for_one_term_without_explain(
                doc_freq, total_docs, average,
            )
            .boost_by(boost);
            prop_assert_eq!(
                ours.score(fieldnorm_id, term_freq).to_bits(),
                theirs.score(fieldnorm_id, term_freq).to_bits()
            );
        }
    }

    /// A run that did not finish (a panic unwound it) may leave accumulators set; the
    /// next query starts from zeros all the same. A finished run leaves zeros (the
    /// property tests above, whose queries share each thread's window, hold that).
    #[test]
    fn a_window_left_dirty_starts_from_zeros() {
        let mut w = Window::default();
        w.reset(2, 2);
        w.bm25[5] = 1.0;
        w.tiers[3] = 2;
        w.touched[0] = 1;
        w.dirty = true;
        w.reset(1, 3);
        assert!(w.bm25.iter().all(|&s| s == 0.0));
        assert!(w.tiers.iter().all(|&t| t == 0));
        assert!(w.touched.iter().all(|&b| b == 0));
        assert!(!w.dirty);
    }

    /// Windows are smaller than some segments, so a segment is read in several windows.
    #[test]
    fn large_segments_are_read_window_by_window() {
        let docs: Vec<Doc> = (0..10_000)
            .map(|i| {
                (
                    vec![vec![i % VOCABULARY.len()], vec![(i / 3) % VOCABULARY.len()]],
                    0,
                )
            })
            .collect();
        let fixture = index(2, &[docs], &[17, 4_500]);
        let words = vec![vec![(0, 0), (1, 2)], vec![(2, 1)]];
        compare(&fixture, &words, 2, None, 50, true).unwrap();
        compare(&fixture, &words, 2, Some(0), 3, true).unwrap();
    }

    /// Once the top k all hold both words, the common word's lists only add to the
    /// documents of the rare one: most of its blocks are skipped (all but the first
    /// window of each segment, read before the bar is known), and the answer is still the
    /// query tree's.
    #[test]
    fn lists_that_cannot_lift_a_document_only_add_to_candidates() {
        let docs: Vec<Doc> = (0..30_000)
            .map(|i| {
                let mut title = vec![0]; // "ab" in every document
                if i % 293 == 0 {
                    title.push(7); // "dd" in a few
                }
                if i % 4_001 == 1 {
                    title.push(6); // "d" in fewer
                }
                (vec![title, vec![(i / 5) % 3]], 0)
            })
            .collect();
        let fixture = index(2, &[docs.clone(), docs], &[293, 30_001]);
        let words = vec![vec![(0, 0), (1, 2), (2, 1)], vec![(7, 0), (6, 2)]];
        let searcher = fixture.index.reader().unwrap().searcher();
        let postings: u64 = [0, 1, 2, 6, 7]
            .iter()
            .flat_map(|&t| fixture.text.iter().map(move |&f| (t, f)))
            .map(|(t, f)| {
                searcher
                    .doc_freq(&Term::from_field_text(f, VOCABULARY[t]))
                    .unwrap()
            })
            .sum();
        for limit in [1, 10, 20] {
            compare(&fixture, &words, 2, None, limit, true).unwrap();
            let noted = WINDOW.with_borrow(|w| w.noted) as u64;
            assert!(
                noted * 5 < postings,
                "limit {limit}: {noted} of {postings} postings noted"
            );
        }
        // When more documents are asked for than hold both words, a document with one
        // word can still enter: every posting counts.
        compare(&fixture, &words, 2, None, 1_000, true).unwrap();
        assert_eq!(WINDOW.with_borrow(|w| w.noted) as u64, postings);
    }
}
