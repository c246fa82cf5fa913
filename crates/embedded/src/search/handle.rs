//! One open search index: its tantivy index and reader, the schema mapping, key lookups
//! and queries. Writes go through the index's writer thread (`super::writer`).

use std::{
    borrow::Cow,
    collections::{BTreeMap, HashMap},
    marker::PhantomData,
    path::Path,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
};

use quintet_core::{
    Error, Result,
    ports::{
        data::Document,
        search::{SearchConfig, corrupt_document},
    },
    search::{
        Expansion, Explained, MatchKind, QueryPlan, QueryWord, SearchDoc, SearchKey, SearchMatch,
        SearchQuery, StoredFields,
        document::{filter_matches, filter_term, for_each_filter_term, for_each_text},
        query::{Explainer, rank, select_expansions},
    },
};
use serde::de::{Deserialize, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Value, value::RawValue};
use tantivy::{
    DocAddress, DocSet, Index, IndexReader, InvertedIndexReader, ReloadPolicy, Searcher,
    SegmentReader, TERMINATED, TantivyDocument, Term,
    directory::MmapDirectory,
    query::FuzzyTermQuery,
    schema::document::{DeserializeError, DocumentDeserialize, DocumentDeserializer},
    schema::{
        Field, IndexRecordOption, NumericOptions, STORED, STRING, Schema, TextFieldIndexing,
        TextOptions,
    },
    store::Compressor,
    tokenizer::TokenizerManager,
};

use super::{
    analyzer::{NAME, WordTokenizer},
    engine_error, score,
    stored::{Stored, StoredCache, StoredDoc},
    vocabulary::{self, Vocabulary},
};

/// Bytes of documents per block of the document store (see [`IndexHandle::open`]).
const DOCSTORE_BLOCK_BYTES: usize = 512;

/// The tantivy fields of an index.
#[derive(Debug, Clone)]
pub(super) struct Fields {
    /// The document key (raw, indexed, stored).
    pub key: Field,
    /// The document as compact JSON text (stored only).
    pub src: Field,
    /// Filter terms of the document's top-level fields, hashed ([`filter_hash`]).
    pub filter: Field,
    /// Whether `filter` is a multi-valued fast field (checked per candidate) rather than
    /// indexed (posting lists), as in indexes made before it became one.
    pub filter_fast: bool,
    /// One text field per configured field, in configured order.
    pub text: Vec<Field>,
}

/// The 64-bit FNV-1a hash of a filter term. Filter terms are kept as these numbers: short
/// fixed-size values are far cheaper to keep than the values' text (most are unique per
/// document), and a hash collision is caught when matches are checked against the stored
/// document. The function is fixed: indexes on disk depend on it.
fn filter_hash(term: &str) -> u64 {
    term.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The schema for `config`: configured field `i` is indexed as `f<i>`, so any field name is
/// fine. The filter hashes are a fast field (a column of values per document), not
/// indexed: most are unique to their document, and as terms they were half of an index's
/// dictionary, its sorting, its FST and its merges, for posting lists of one document
/// each. A query checks its candidates' values instead. `indexed_filter` gives the schema
/// of indexes made before that, which are opened as they are.
pub(super) fn schema(config: &SearchConfig, indexed_filter: bool) -> (Schema, Fields) {
    let mut b = Schema::builder();
    let key = b.add_text_field("_key", STRING | STORED);
    let src = b.add_text_field("_src", TextOptions::default().set_stored());
    let filter = b.add_u64_field(
        "_filter",
        if indexed_filter {
            NumericOptions::default().set_indexed()
        } else {
            NumericOptions::default().set_fast()
        },
    );
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
            filter_fast: !indexed_filter,
            text,
        },
    )
}

/// The stored fields of a document, which are all text (`_key`, `_src`). Read directly as
/// strings rather than as a `TantivyDocument`, which builds a value tree first: an answer
/// reads up to 1,000 documents.
struct StoredText(Vec<(Field, String)>);

impl DocumentDeserialize for StoredText {
    fn deserialize<'de, D: DocumentDeserializer<'de>>(
        mut deserializer: D,
    ) -> std::result::Result<Self, DeserializeError> {
        let mut values = Vec::with_capacity(2);
        while let Some(value) = deserializer.next_field::<String>()? {
            values.push(value);
        }
        Ok(Self(values))
    }
}

/// The members of the stored document `src` (compact JSON text) named by `names`, in that
/// order. Only those members' values are parsed; the others are skipped over: a match needs
/// its stored fields (and the filter's, to check it), not the searched text, which is
/// usually most of a document.
fn members(src: &str, names: &[&str]) -> Result<Document> {
    let picked = pick::<Value>(src, names)?;
    Ok(names
        .iter()
        .zip(picked)
        .filter_map(|(name, v)| Some(((*name).to_owned(), v?)))
        .collect())
}

/// [`members`] as their values' JSON text, copied out of `src`: a match's stored fields
/// are written into the answer as they are.
fn raw_members(src: &str, names: &[&str]) -> Result<StoredFields> {
    let picked = pick::<&RawValue>(src, names)?;
    Ok(names
        .iter()
        .zip(picked)
        .filter_map(|(name, raw)| Some(((*name).to_owned(), raw?.to_owned())))
        .collect())
}

/// The values of the members of `src` named by `names`, in that order.
fn pick<'de, V: Deserialize<'de>>(src: &'de str, names: &[&str]) -> Result<Vec<Option<V>>> {
    let mut de = serde_json::Deserializer::from_str(src);
    Pick(names, PhantomData)
        .deserialize(&mut de)
        .and_then(|picked| de.end().map(|()| picked))
        .map_err(corrupt_document)
}

/// A member name, borrowed from the JSON text unless it has escapes (serde's `Cow` always
/// allocates).
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Name;
        impl<'de> Visitor<'de> for Name {
            type Value = Key<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a member name")
            }

            fn visit_borrowed_str<E>(self, v: &'de str) -> std::result::Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }

            fn visit_str<E>(self, v: &str) -> std::result::Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(Name)
    }
}

/// Reads a JSON object into the values of the members it names (the last of a repeated
/// member, as a map would keep), skipping the others.
struct Pick<'a, V>(&'a [&'a str], PhantomData<V>);

impl<'de, V: Deserialize<'de>> DeserializeSeed<'de> for Pick<'_, V> {
    type Value = Vec<Option<V>>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, V: Deserialize<'de>> Visitor<'de> for Pick<'_, V> {
    type Value = Vec<Option<V>>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let mut values: Vec<Option<V>> =
            std::iter::repeat_with(|| None).take(self.0.len()).collect();
        while let Some(Key(key)) = map.next_key()? {
            match self.0.iter().position(|name| *name == key) {
                Some(i) => values[i] = Some(map.next_value()?),
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(values)
    }
}

/// Finds documents by key in one view of an index ([`IndexHandle::keys`]).
pub(super) struct Keys<'a> {
    field: Field,
    /// Each segment and its key dictionary.
    segments: Vec<(&'a SegmentReader, Arc<InvertedIndexReader>)>,
}

impl Keys<'_> {
    /// Where the live document under `key` is.
    pub fn find(&self, key: &SearchKey) -> Result<Option<DocAddress>> {
        let term = Term::from_field_text(self.field, key.as_str());
        for (ord, (segment, inverted)) in self.segments.iter().enumerate() {
            let postings = inverted
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
}

/// An open index.
pub(super) struct IndexHandle {
    /// The instance's name, for messages.
    pub name: String,
    pub config: SearchConfig,
    pub index: Index,
    pub reader: IndexReader,
    pub fields: Fields,
    /// The merged dictionary of the large segments, rebuilt when they change.
    vocabulary: Mutex<Option<Arc<Vocabulary>>>,
    /// Whether a query is rebuilding the dictionary.
    rebuilding: AtomicBool,
    /// The expansions of recent query words.
    expansions: Mutex<ExpansionCache>,
    /// Where recent expansions' postings are.
    term_infos: score::TermInfoCache,
    /// Recently answered documents of every index of the adapter.
    stored_cache: Arc<StoredCache>,
}

/// A query word's expansions and the searched fields each occurs in, as [`expand`] finds
/// them.
type Expanded = Arc<(Vec<Expansion>, Vec<Vec<Field>>)>;

/// The expansions of recent query words, for one view of the index (a searcher
/// generation): finding a word's typos and completions is most of a query's work when few
/// documents are asked for, and a word's expansions depend only on the segments' terms.
/// Forgotten all at once when the view changes or [`ExpansionCache::WORDS`] are kept.
#[derive(Default)]
struct ExpansionCache {
    generation: u64,
    words: HashMap<(String, u8, bool, u64), Expanded>,
}

impl ExpansionCache {
    /// Words kept at most (about 200 bytes each plus their expansions).
    const WORDS: usize = 8_192;
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
    pub fn open(
        dir: &Path,
        name: String,
        config: SearchConfig,
        stored_cache: Arc<StoredCache>,
    ) -> Result<Arc<Self>> {
        std::fs::create_dir_all(dir)?;
        let tokenizers = TokenizerManager::default();
        tokenizers.register(NAME, WordTokenizer::default());
        let directory = MmapDirectory::open(dir)
            .map_err(|e| Error::internal(format!("opening {}: {e}", dir.display())))?;
        let exists = Index::exists(&directory).map_err(engine_error)?;
        let (mut index, fields) = if exists {
            let mut index = Index::open(directory).map_err(engine_error)?;
            index.set_tokenizers(tokenizers);
            let found = index.schema();
            let fields = [false, true]
                .into_iter()
                .map(|indexed_filter| schema(&config, indexed_filter))
                .find(|(s, _)| *s == found)
                .map(|(_, fields)| fields)
                .ok_or_else(|| {
                    Error::internal(format!(
                        "the search index in {} has a schema this version does not know",
                        dir.display()
                    ))
                })?;
            (index, fields)
        } else {
            let (schema, fields) = schema(&config, false);
            let index = Index::builder()
                .schema(schema)
                .tokenizers(tokenizers)
                .open_or_create(directory)
                .map_err(engine_error)?;
            (index, fields)
        };
        // Every returned match reads its stored document, so reading one must be cheap:
        // tantivy's default (LZ4 over 16 KB blocks) decompresses a whole block per document,
        // about 45,000 instructions, most of a query's time at the default limit of 100.
        // Uncompressed blocks cost about 7,000 whatever their size (the skip index costs
        // more as blocks get smaller), but each read copies its block out of the mapped
        // file: small blocks copy and allocate little (512 bytes stay in the allocator's
        // per-thread cache). The store takes about 60% more disk than with LZ4. Settings
        // apply to segments written from now on: older ones keep their format until a
        // merge rewrites them.
        let settings = index.settings_mut();
        settings.docstore_compression = Compressor::None;
        settings.docstore_blocksize = DOCSTORE_BLOCK_BYTES;
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            // No cache of document-store blocks: a query's matches are spread over the
            // store, so a block read again soon is rare with 512-byte blocks, and the cache
            // cost a lock, an LRU update and an eviction per document read.
            .doc_store_cache_num_blocks(0)
            .try_into()
            .map_err(engine_error)?;
        Ok(Arc::new(Self {
            name,
            config,
            index,
            reader,
            fields,
            vocabulary: Mutex::new(None),
            rebuilding: AtomicBool::new(false),
            expansions: Mutex::new(ExpansionCache::default()),
            term_infos: score::TermInfoCache::default(),
            stored_cache,
        }))
    }

    /// The tantivy document for `doc`.
    pub fn tantivy_doc(&self, doc: &SearchDoc) -> TantivyDocument {
        let mut d = TantivyDocument::new();
        d.add_text(self.fields.key, doc.key().as_str());
        d.add_text(self.fields.src, doc.json());
        for_each_filter_term(doc.doc(), |term| {
            d.add_u64(self.fields.filter, filter_hash(term));
        });
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
        self.keys(searcher)?.find(key)
    }

    /// Key lookups in `searcher`'s view, for many keys: each segment's key dictionary is
    /// opened once (a lock and a reference count each), not once per key.
    pub fn keys<'a>(&self, searcher: &'a Searcher) -> Result<Keys<'a>> {
        let segments = searcher
            .segment_readers()
            .iter()
            .map(|s| Ok((s, s.inverted_index(self.fields.key).map_err(engine_error)?)))
            .collect::<Result<_>>()?;
        Ok(Keys {
            field: self.fields.key,
            segments,
        })
    }

    /// The stored key and JSON text of each document of `addresses`, in order: from the
    /// cache of recently answered documents where it holds them, else from the document
    /// store (and then held).
    fn stored_many(&self, searcher: &Searcher, addresses: &[DocAddress]) -> Result<Vec<Stored>> {
        let at = |a: &DocAddress| {
            (
                searcher.segment_reader(a.segment_ord).segment_id(),
                a.doc_id,
            )
        };
        let wanted: Vec<_> = addresses.iter().map(at).collect();
        let mut found = self.stored_cache.get_many(&wanted);
        let mut read = Vec::new();
        let stored_names: Vec<&str> = self
            .config
            .store_fields
            .iter()
            .map(String::as_str)
            .collect();
        for ((slot, addr), address) in found.iter_mut().zip(addresses).zip(&wanted) {
            if slot.is_none() {
                let (key, src) = self.stored(searcher, *addr)?;
                let fields = raw_members(&src, &stored_names)?;
                let stored = Arc::new(StoredDoc { key, src, fields });
                read.push((*address, Arc::clone(&stored)));
                *slot = Some(stored);
            }
        }
        if !read.is_empty() {
            self.stored_cache.fill(read);
        }
        Ok(found.into_iter().flatten().collect())
    }

    /// The stored key and JSON text of the document at `addr`, from the document store.
    fn stored(&self, searcher: &Searcher, addr: DocAddress) -> Result<(String, String)> {
        let StoredText(mut values) = searcher.doc(addr).map_err(engine_error)?;
        let mut text = |field: Field| {
            values
                .iter_mut()
                .find(|(f, _)| *f == field)
                .map(|(_, text)| std::mem::take(text))
                .ok_or_else(|| Error::internal("a search document lacks its stored key or text"))
        };
        Ok((text(self.fields.key)?, text(self.fields.src)?))
    }

    /// Up to `limit` documents (key, text) whose keys sort after `after`, by key. Each
    /// segment contributes its next `limit` live keys from its term dictionary (a key is
    /// live in one segment at most); the first `limit` of their union are the answer.
    pub fn documents(&self, after: Option<&str>, limit: usize) -> Result<Vec<(String, String)>> {
        let searcher = self.reader.searcher();
        let mut keys: Vec<(Vec<u8>, DocAddress)> = Vec::new();
        for (ord, segment) in searcher.segment_readers().iter().enumerate() {
            let ord = u32::try_from(ord)
                .map_err(|_| Error::internal("too many segments in a search index"))?;
            let inverted = segment
                .inverted_index(self.fields.key)
                .map_err(engine_error)?;
            let range = inverted.terms().range();
            let range = match after {
                Some(a) => range.gt(a.as_bytes()),
                None => range,
            };
            let mut stream = range.into_stream().map_err(engine_error)?;
            let mut taken = 0;
            while taken < limit && stream.advance() {
                let mut postings = inverted
                    .read_postings_from_terminfo(stream.value(), IndexRecordOption::Basic)
                    .map_err(engine_error)?;
                let mut doc = postings.doc();
                while doc != TERMINATED {
                    if !segment.is_deleted(doc) {
                        keys.push((stream.key().to_vec(), DocAddress::new(ord, doc)));
                        taken += 1;
                        break;
                    }
                    doc = postings.advance();
                }
            }
        }
        keys.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        keys.truncate(limit);
        keys.into_iter()
            .map(|(_, addr)| self.stored(&searcher, addr))
            .collect()
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
    /// it has none. The flag says whether it is the dictionary of exactly those segments
    /// (or there are none), not an older one used while another query rebuilds it.
    fn vocabulary(&self, searcher: &Searcher) -> Result<(Option<Arc<Vocabulary>>, bool)> {
        let large = vocabulary::large_segments(searcher);
        let cached = self
            .vocabulary
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if large.is_empty() {
            return Ok((cached, true));
        }
        if cached.as_ref().is_some_and(|v| v.covers == large) {
            return Ok((cached, true));
        }
        // Stale: one query rebuilds it while the others use the old one, scanning the
        // segments it does not cover.
        if self.rebuilding.swap(true, Ordering::AcqRel) {
            return Ok((cached, false));
        }
        let built = Vocabulary::build(searcher, &self.fields.text).map(Arc::new);
        if let Ok(v) = &built {
            *self
                .vocabulary
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(v));
        }
        self.rebuilding.store(false, Ordering::Release);
        built.map(|v| (Some(v), true))
    }

    /// [`expand`], remembered per searcher generation when `current` (the vocabulary is
    /// that of `searcher`'s segments, so the answer is the same as without it).
    fn expand_cached(
        &self,
        searcher: &Searcher,
        vocabulary: Option<&Vocabulary>,
        current: bool,
        fields: &[(usize, Field)],
        word: &QueryWord,
    ) -> Result<Expanded> {
        // The searched fields as a bit set of their configured positions.
        let mask = fields
            .iter()
            .try_fold(0u64, |m, &(i, _)| (i < 64).then(|| m | (1 << i)));
        let generation = searcher.generation().generation_id();
        let key = match mask {
            Some(mask) if current => Some((word.text.clone(), word.budget, word.prefix, mask)),
            _ => None,
        };
        if let Some(key) = &key {
            let cache = self
                .expansions
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if cache.generation == generation
                && let Some(found) = cache.words.get(key)
            {
                return Ok(Arc::clone(found));
            }
        }
        let found = Arc::new(expand(searcher, vocabulary, fields, word)?);
        if let Some(key) = key {
            let mut cache = self
                .expansions
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if cache.generation != generation || cache.words.len() >= ExpansionCache::WORDS {
                cache.words.clear();
                cache.generation = generation;
            }
            cache.words.insert(key, Arc::clone(&found));
        }
        Ok(found)
    }

    /// How many documents the index holds (deleted ones not counted).
    pub fn count(&self) -> u64 {
        self.reader.searcher().num_docs()
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
        let (vocabulary, current) = self.vocabulary(&searcher)?;
        // Borrowed from the cache of expansions, not copied out of it (a hundred terms).
        let found = plan
            .words
            .iter()
            .map(|word| {
                self.expand_cached(&searcher, vocabulary.as_deref(), current, &fields, word)
            })
            .collect::<Result<Vec<_>>>()?;
        let expansions: Vec<&[Expansion]> = found.iter().map(|f| f.0.as_slice()).collect();
        let in_fields: Vec<&[Vec<Field>]> = found.iter().map(|f| f.1.as_slice()).collect();
        if expansions.iter().all(|e| e.is_empty()) {
            return Ok(Vec::new());
        }
        let searched: Vec<Field> = fields.iter().map(|&(_, f)| f).collect();
        let filter = score::Filter {
            field: self.fields.filter,
            fast: self.fields.filter_fast,
            hashes: query
                .filter
                .iter()
                .map(|(k, v)| filter_hash(&filter_term(k, v)))
                .collect(),
        };
        let top = score::top_docs(
            &searcher,
            &plan,
            &expansions,
            &in_fields,
            &searched,
            &filter,
            query.limit,
            Some(&self.term_infos),
        )?;
        let explainer = Explainer::new(&plan, &expansions, &query.fields);
        let filter_names: Vec<&str> = query.filter.keys().map(String::as_str).collect();
        // Matches holding the same expansions in the same fields share one explanation.
        // Hashed with foldhash: SipHash of the flags cost more than the explanations.
        let mut explained: foldhash::HashMap<Vec<bool>, Arc<Explained>> =
            foldhash::HashMap::default();
        let mut matches = Vec::with_capacity(top.hits.len());
        let addresses: Vec<DocAddress> = top.hits.iter().map(|h| h.address).collect();
        let documents = self.stored_many(&searcher, &addresses)?;
        for (i, (hit, document)) in top.hits.iter().zip(documents).enumerate() {
            if !query.filter.is_empty()
                && !filter_matches(&members(&document.src, &filter_names)?, &query.filter)
            {
                continue; // a filter-term hash collision
            }
            let score = shortest(hit.score);
            let found = top.found(i);
            let explained = match explained.get(found) {
                Some(e) => Arc::clone(e),
                None => {
                    let e = Arc::new(explainer.explain_found(found));
                    explained.insert(found.to_vec(), Arc::clone(&e));
                    e
                }
            };
            matches.push(SearchMatch {
                id: document.key.clone(),
                score,
                explained,
                stored: document.fields.clone(),
            });
        }
        rank(&mut matches);
        Ok(matches)
    }
}

/// `score` as the f64 of its shortest decimal form, so that the answer says `1.25`, not the
/// binary expansion `1.2500000476837158`. `zmij` finds the digits about ten times faster
/// than `Display`, which was a twentieth of a query's time at the default limit. They
/// differ only where two shortest forms are equally near (about one score in 500): `zmij`
/// takes the even last digit (`1916.2812` for 1916.28125), `Display` rounds up.
fn shortest(score: f32) -> f64 {
    if !score.is_finite() {
        return f64::from(score);
    }
    let mut buffer = zmij::Buffer::new();
    let text = buffer.format_finite(score);
    plain_decimal(text).unwrap_or_else(|| text.parse().unwrap_or(f64::from(score)))
}

/// `text`, digits with at most one point, as the nearest f64, when its digits make an
/// integer below 10^15 and it has at most 22 decimals: both are then exact f64s and one
/// division rounds their quotient correctly (Clinger's fast path). Scores always are such
/// text, and the general parser took a third of the instructions of answering a match.
fn plain_decimal(text: &str) -> Option<f64> {
    const POWERS: [f64; 23] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
        1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
    ];
    let (mut digits, mut value, mut decimals) = (0u32, 0u64, None::<usize>);
    for b in text.bytes() {
        match b {
            b'0'..=b'9' => {
                digits += 1;
                if digits > 15 {
                    return None;
                }
                value = value * 10 + u64::from(b - b'0');
                if let Some(d) = decimals.as_mut() {
                    *d += 1;
                }
            }
            b'.' if decimals.is_none() => decimals = Some(0),
            _ => return None, // a sign or an exponent
        }
    }
    if digits == 0 {
        return None; // "" or "."
    }
    let power = POWERS.get(decimals.unwrap_or(0))?;
    #[allow(clippy::cast_precision_loss)] // below 10^15: exact
    Some(value as f64 / power)
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn shortest_takes_the_even_digit_between_two_equally_near_forms() {
        assert_eq!(shortest(1_916.25 + 0.031_25), 1_916.281_2);
        assert_eq!(shortest(f32::from_bits(3_388_909_650)), -2_086_154.2);
        assert_eq!(shortest(1.25), 1.25);
        assert_eq!(shortest(0.1), 0.1);
        // The fast path's edges: what it leaves to the parser, and the longest it takes.
        assert_eq!(plain_decimal("-1.5"), None);
        assert_eq!(plain_decimal("."), None);
        assert_eq!(plain_decimal(""), None);
        assert_eq!(plain_decimal("1e-7"), None);
        assert_eq!(plain_decimal("1234567890123456"), None);
        assert_eq!(plain_decimal("0.00000000000001"), Some(1e-14));
        assert_eq!(
            plain_decimal("123456789012345"),
            Some(123_456_789_012_345.0)
        );
    }

    proptest::proptest! {
        /// The fast path gives what the general parser gives, for the text of any f32
        /// and for plain decimals of up to 15 digits.
        #[test]
        fn plain_decimals_parse_as_the_parser_does(
            bits in proptest::prelude::any::<u32>(),
            digits in "[0-9]{1,15}",
            point in 0..16usize,
        ) {
            let f = f32::from_bits(bits);
            if f.is_finite() {
                let mut buffer = zmij::Buffer::new();
                let text = buffer.format_finite(f);
                if let Some(fast) = plain_decimal(text) {
                    proptest::prop_assert_eq!(fast.to_bits(), text.parse::<f64>().unwrap().to_bits(), "{}", text);
                }
            }
            let at = point.min(digits.len());
            let text = format!("{}.{}", &digits[..at], &digits[at..]);
            let fast = plain_decimal(&text);
            proptest::prop_assert_eq!(fast.map(f64::to_bits), Some(text.parse::<f64>().unwrap().to_bits()), "{}", text);
        }

        #[test]
        fn shortest_is_a_shortest_form(bits in proptest::prelude::any::<u32>()) {
            let f = f32::from_bits(bits);
            let got = shortest(f);
            if !f.is_finite() {
                proptest::prop_assert!(got == f64::from(f) || (got.is_nan() && f.is_nan()));
                return Ok(());
            }
            // The same f32, in as few significant digits as `Display` gives.
            #[allow(clippy::cast_possible_truncation)]
            let back = got as f32;
            proptest::prop_assert_eq!(back.to_bits(), f.to_bits());
            let digits = |x: f64| {
                let e = format!("{x:e}");
                e.split('e').next().map_or(0, |m| m.bytes().filter(u8::is_ascii_digit).count())
            };
            let display = f.to_string().parse::<f64>().unwrap_or(f64::from(f));
            proptest::prop_assert_eq!(digits(got), digits(display), "{} {}", got, display);
        }
    }

    #[test]
    fn members_picks_named_members_in_order() {
        let src = r#"{"body":"long \"text\"","t\u0069tle":"T","year":1984,"n":[1,{"a":null}],"year":1985}"#;
        let doc = members(src, &["n", "title", "absent", "year"]).unwrap();
        assert_eq!(
            serde_json::Value::Object(doc),
            json!({"n": [1, {"a": null}], "title": "T", "year": 1985})
        );
        assert_eq!(
            serde_json::to_string(&members(src, &["year", "n"]).unwrap()).unwrap(),
            r#"{"year":1985,"n":[1,{"a":null}]}"#
        );
        assert!(members(src, &[]).unwrap().is_empty());
        assert!(members(r#"{"a":1"#, &["a"]).is_err());
        assert!(members(r#"[1]"#, &["a"]).is_err());
    }

    #[test]
    fn raw_members_copy_the_values_text() {
        let src = r#"{"body":"long \"text\"","t\u0069tle":"T\u00e9","year":1984,"n":[1,{"a":null}],"year":1985}"#;
        let stored = raw_members(src, &["n", "title", "absent", "year"]).unwrap();
        let got: Vec<(&str, &str)> = stored.iter().map(|(n, v)| (n, v.get())).collect();
        assert_eq!(
            got,
            [
                ("n", r#"[1,{"a":null}]"#),
                ("title", r#""T\u00e9""#),
                ("year", "1985")
            ]
        );
        assert_eq!(
            serde_json::Value::Object(stored.to_document()),
            json!({"n": [1, {"a": null}], "title": "Té", "year": 1985})
        );
        assert!(raw_members(r#"{"a":1"#, &["a"]).is_err());
    }
}
