//! The words of an index's large segments, merged into one in-memory dictionary, so that a
//! query word's typos and completions are looked up once instead of once per segment and
//! field.
//!
//! Segments are immutable, so the dictionary stays valid until the set of large segments
//! changes (a merge); it is rebuilt then, on the next query. Small segments — those of
//! recent commits, until merged — are scanned directly, so a word indexed a moment ago is
//! found at once.

use std::collections::HashMap;

use quintet_core::{Error, Result};
use tantivy::{
    Searcher,
    index::{SegmentId, SegmentReader},
    query::DfaWrapper,
    schema::Field,
};
use tantivy_fst::{IntoStreamer, Map, Streamer};

use super::engine_error;

/// Segments with at least this many documents are merged into the dictionary.
pub(super) const LARGE_SEGMENT_DOCS: u32 = 2_000;

/// One merged dictionary: every term of some segments with its document frequency in each
/// configured field.
pub(super) struct Vocabulary {
    /// The segments it covers, sorted.
    pub covers: Vec<SegmentId>,
    /// Term → its ordinal.
    terms: Map<Vec<u8>>,
    /// Document frequencies: term ordinal × field.
    freqs: Vec<u32>,
    fields: usize,
}

/// Whether `segment` belongs in the dictionary.
pub(super) fn is_large(segment: &SegmentReader) -> bool {
    segment.max_doc() >= LARGE_SEGMENT_DOCS
}

/// The sorted ids of `searcher`'s large segments.
pub(super) fn large_segments(searcher: &Searcher) -> Vec<SegmentId> {
    let mut ids: Vec<SegmentId> = searcher
        .segment_readers()
        .iter()
        .filter(|s| is_large(s))
        .map(SegmentReader::segment_id)
        .collect();
    ids.sort();
    ids
}

impl Vocabulary {
    /// The dictionary of `searcher`'s large segments, over the text `fields` (configured
    /// order).
    pub fn build(searcher: &Searcher, fields: &[Field]) -> Result<Self> {
        // term → its row in `rows` (document frequency per field)
        let mut index: HashMap<Vec<u8>, usize> = HashMap::new();
        let mut rows: Vec<u32> = Vec::new();
        for segment in searcher.segment_readers().iter().filter(|s| is_large(s)) {
            for (i, &field) in fields.iter().enumerate() {
                let inverted = segment.inverted_index(field).map_err(engine_error)?;
                let mut stream = inverted.terms().stream().map_err(engine_error)?;
                while stream.advance() {
                    let row = match index.get(stream.key()) {
                        Some(row) => *row,
                        None => {
                            let row = index.len();
                            index.insert(stream.key().to_vec(), row);
                            rows.resize(rows.len() + fields.len(), 0);
                            row
                        }
                    };
                    rows[row * fields.len() + i] += stream.value().doc_freq;
                }
            }
        }
        let mut keys: Vec<(Vec<u8>, usize)> = index.into_iter().collect();
        keys.sort_unstable();
        let mut freqs = Vec::with_capacity(rows.len());
        for (_, row) in &keys {
            freqs.extend_from_slice(&rows[row * fields.len()..(row + 1) * fields.len()]);
        }
        let terms = Map::from_iter(
            keys.into_iter()
                .enumerate()
                .map(|(ord, (k, _))| (k, ord as u64)),
        )
        .map_err(|e| Error::internal(format!("building a search vocabulary: {e}")))?;
        Ok(Self {
            covers: large_segments(searcher),
            terms,
            freqs,
            fields: fields.len(),
        })
    }

    /// Call `f` with each term in `[lower, upper)` that `automaton` accepts (every term in
    /// the range without one), and its document frequency per configured field.
    pub fn scan(
        &self,
        automaton: &DfaWrapper,
        lower: &[u8],
        upper: Option<&[u8]>,
        f: &mut impl FnMut(&[u8], &[u32]),
    ) {
        let builder = self.terms.search(automaton).ge(lower);
        let builder = match upper {
            Some(u) => builder.lt(u),
            None => builder,
        };
        let mut stream = builder.into_stream();
        while let Some((term, ord)) = stream.next() {
            let at = ord as usize * self.fields;
            if let Some(freqs) = self.freqs.get(at..at + self.fields) {
                f(term, freqs);
            }
        }
    }

    /// The document frequencies per configured field of exactly `term`.
    pub fn get(&self, term: &[u8]) -> Option<&[u32]> {
        let at = self.terms.get(term)? as usize * self.fields;
        self.freqs.get(at..at + self.fields)
    }
}
