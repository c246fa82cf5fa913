//! Queries: the request body, the words a query text is searched as, the terms each word
//! expands to, and why a document matched.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, OnceLock},
};

use serde_json::{Map, Value, value::RawValue};

use super::{
    document::for_each_text,
    tokenize::{MAX_TOKEN_BYTES, for_each_token, next_word},
    typo::{MatchKind, classify, expansion_order, typo_budget},
};
use crate::{Error, Result, ports::data::Document, ports::search::SearchConfig};

/// Matches answered when the query gives no `limit`.
pub const DEFAULT_LIMIT: usize = 100;
/// Largest `limit` a query may ask for.
pub const MAX_LIMIT: usize = 1000;
/// Longest query text, in bytes.
pub const MAX_QUERY_BYTES: usize = 1024;
/// Most distinct words in a query.
pub const MAX_QUERY_WORDS: usize = 32;
/// Most index terms one query word expands to (the best ones, see
/// [`super::typo::expansion_order`]).
pub const MAX_EXPANSIONS: usize = 50;

/// A query (`POST /search/<i>/_query`), validated against the instance's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchQuery {
    /// The text to search for; it has at least one word ([`QueryPlan::new`] finds one).
    pub query: String,
    /// The configured fields searched, in configured order (all of them unless the query
    /// named some).
    pub fields: Vec<String>,
    /// Keep documents whose top-level fields equal these values (AND-ed); empty for none.
    pub filter: Map<String, Value>,
    /// At most this many matches.
    pub limit: usize,
}

impl SearchQuery {
    /// Read `{query, fields?, filter?, limit?}`. Other members (MiniSearch options such as
    /// `prefix` or `fuzzy`) are ignored: matching rules are fixed.
    pub fn from_json(body: &Value, config: &SearchConfig) -> Result<Self> {
        let Value::Object(body) = body else {
            return Err(Error::invalid(
                "the query must be a JSON object such as {\"query\": \"ghostbusters\"}",
            ));
        };
        let query = match body.get("query") {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            Some(Value::String(_)) | None | Some(Value::Null) => {
                return Err(Error::invalid(
                    "\"query\" is required: the text to search for, such as \
                     {\"query\": \"ghostbusters\"}",
                ));
            }
            Some(_) => return Err(Error::invalid("\"query\" must be a string")),
        };
        if query.len() > MAX_QUERY_BYTES {
            return Err(Error::invalid(format!(
                "\"query\" is {} bytes long; at most {MAX_QUERY_BYTES} are allowed",
                query.len()
            )));
        }
        let words = QueryPlan::new(&query).words.len();
        if words == 0 {
            return Err(Error::invalid(format!(
                "\"query\" {} has no words to search for: a word is a run of letters or \
                 digits (of at most {MAX_TOKEN_BYTES} bytes), such as {{\"query\": \"ghostbusters\"}}",
                shown(&query)
            )));
        }
        if words > MAX_QUERY_WORDS {
            return Err(Error::invalid(format!(
                "\"query\" has {words} distinct words; at most {MAX_QUERY_WORDS} are allowed"
            )));
        }
        let fields = match body.get("fields") {
            None | Some(Value::Null) => config.fields.clone(),
            Some(v) => searched_fields(v, config)?,
        };
        let filter = match body.get("filter") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => {
                return Err(Error::invalid(
                    "\"filter\" must be an object of field names and the values they must \
                     equal, such as {\"type\": \"movie\"}",
                ));
            }
        };
        let limit = match body.get("limit") {
            None | Some(Value::Null) => DEFAULT_LIMIT,
            Some(v) => v
                .as_u64()
                .filter(|n| (1..=MAX_LIMIT as u64).contains(n))
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "\"limit\" must be an integer from 1 to {MAX_LIMIT}, not {v}"
                    ))
                })?,
        };
        Ok(Self {
            query,
            fields,
            filter,
            limit,
        })
    }
}

fn searched_fields(v: &Value, config: &SearchConfig) -> Result<Vec<String>> {
    let bad = || {
        Error::invalid(format!(
            "\"fields\" must be a non-empty array of configured fields to search: {}",
            list(&config.fields)
        ))
    };
    let items = v.as_array().filter(|a| !a.is_empty()).ok_or_else(bad)?;
    let mut wanted = HashSet::new();
    for item in items {
        let name = item.as_str().ok_or_else(bad)?;
        if !config.fields.iter().any(|f| f == name) {
            return Err(Error::invalid(format!(
                "\"fields\" names \"{name}\", which is not searched in this instance; \
                 the configured fields are {}",
                list(&config.fields)
            )));
        }
        wanted.insert(name);
    }
    Ok(config
        .fields
        .iter()
        .filter(|f| wanted.contains(f.as_str()))
        .cloned()
        .collect())
}

/// `text` as a JSON string for a message, cut after 64 bytes.
fn shown(text: &str) -> String {
    if text.len() <= 64 {
        return Value::String(text.to_owned()).to_string();
    }
    let cut = &text[..text.floor_char_boundary(64)];
    format!("{}…", Value::String(cut.to_owned()))
}

fn list(fields: &[String]) -> String {
    fields
        .iter()
        .map(|f| format!("\"{f}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One word of a query, normalized, with how it may match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryWord {
    /// The normalized word.
    pub text: String,
    /// Typos allowed ([`typo_budget`] of its length).
    pub budget: u8,
    /// Whether completions match (the last word, unless the query ends with a separator).
    pub prefix: bool,
}

impl QueryWord {
    /// How `term` (a normalized index term) matches this word.
    pub fn classify(&self, term: &str) -> Option<MatchKind> {
        classify(&self.text, self.budget, self.prefix, term)
    }
}

/// The words a query text is searched as: its distinct normalized words in order. Words
/// are OR-ed; the last one also matches as a prefix unless the text ends with a space or
/// punctuation ("star wa" completes "wa", "star wa " does not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryPlan {
    /// The words, first occurrence order.
    pub words: Vec<QueryWord>,
}

impl QueryPlan {
    /// The plan for query text `query`.
    pub fn new(query: &str) -> Self {
        let mut texts: Vec<String> = Vec::new();
        for_each_token(query, |t| texts.push(t.to_owned()));
        let ends_in_word = {
            let mut last_end = None;
            let mut at = 0;
            while let Some(r) = next_word(query, at) {
                at = r.end;
                last_end = Some(r.end);
            }
            last_end == Some(query.len())
        };
        let last = texts.last().cloned();
        let mut words: Vec<QueryWord> = Vec::new();
        for text in texts {
            if words.iter().any(|w| w.text == text) {
                continue;
            }
            words.push(QueryWord {
                budget: typo_budget(text.chars().count()),
                prefix: false,
                text,
            });
        }
        if ends_in_word
            && let Some(last) = last
            && let Some(w) = words.iter_mut().find(|w| w.text == last)
        {
            w.prefix = true;
        }
        Self { words }
    }
}

/// An index term a query word expands to.
#[derive(Debug, Clone, PartialEq)]
pub struct Expansion {
    /// The normalized term as indexed.
    pub term: String,
    /// How it matches the word.
    pub kind: MatchKind,
    /// Documents containing it (in any searched field), as the engine counts them.
    pub doc_freq: u64,
}

/// Keep the best [`MAX_EXPANSIONS`] candidates of one word, best first (see
/// [`expansion_order`]).
pub fn select_expansions(mut candidates: Vec<Expansion>) -> Vec<Expansion> {
    candidates.sort_by(|a, b| {
        expansion_order((a.kind, a.doc_freq, &a.term), (b.kind, b.doc_freq, &b.term))
    });
    candidates.truncate(MAX_EXPANSIONS);
    candidates
}

/// Why a document matched a query: what MiniSearch reports with a match, plus the two
/// ranking keys that come before the engine's relevance score.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Explained {
    /// Query words the document matches (first ranking key, higher first).
    pub words: usize,
    /// Sum over matched words of the best [`MatchKind::tier`] (second key, higher first).
    pub tiers: u32,
    /// Document terms that matched, in query-word order.
    pub terms: Vec<String>,
    /// Query words that matched, in query order.
    pub query_terms: Vec<String>,
    /// Each matched document term → the searched fields it occurs in (configured order).
    pub matched: Map<String, Value>,
    /// `terms`, `query_terms` and `matched` as JSON text, written by the first match that
    /// is serialized: most matches of an answer share one explanation.
    pub wire: WireCache,
}

impl Explained {
    /// `terms`, `query_terms` and `matched` as JSON text, written once. Set the members
    /// before the first call: later changes are not seen.
    fn wire(&self) -> Option<&[Box<RawValue>; 3]> {
        self.wire
            .0
            .get_or_init(|| {
                Some([
                    serde_json::value::to_raw_value(&self.terms).ok()?,
                    serde_json::value::to_raw_value(&self.query_terms).ok()?,
                    serde_json::value::to_raw_value(&self.matched).ok()?,
                ])
            })
            .as_ref()
    }
}

/// The JSON text of an [`Explained`]'s members, once written ([`Explained::wire`]). It is
/// derived from the other members, so it takes no part in comparisons.
#[derive(Clone, Default)]
pub struct WireCache(OnceLock<Option<[Box<RawValue>; 3]>>);

impl PartialEq for WireCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for WireCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WireCache")
    }
}

/// Explain how `doc` matches `plan`, whose words expand to `expansions` (one list per word,
/// in the plan's order), searching `fields`. To explain many documents of one query, build
/// an [`Explainer`] once.
pub fn explain(
    plan: &QueryPlan,
    expansions: &[Vec<Expansion>],
    doc: &Document,
    fields: &[String],
) -> Explained {
    Explainer::new(plan, expansions, fields).explain(doc)
}

/// Explains documents against one query: [`explain`] with the expansions indexed by term,
/// so that a document's words are each looked up once instead of every expansion being
/// looked for in every field (an answer explains up to [`MAX_LIMIT`] documents).
#[derive(Debug)]
pub struct Explainer<'a> {
    plan: &'a QueryPlan,
    /// Per word, its expansions.
    expansions: Vec<&'a [Expansion]>,
    fields: &'a [String],
    /// Expansion term → its positions, numbered across words in plan order (a term may
    /// expand more than one word). Built by the first [`Explainer::explain`]: an engine
    /// that explains from its index ([`Explainer::explain_found`]) never needs it.
    positions: OnceLock<HashMap<&'a str, Vec<usize>>>,
    /// How many expansions there are in all.
    count: usize,
}

impl<'a> Explainer<'a> {
    /// An explainer for `plan`, whose words expand to `expansions` (per word, a list of
    /// expansions: vectors, or slices borrowed from a cache), searching `fields`.
    pub fn new<E: AsRef<[Expansion]>>(
        plan: &'a QueryPlan,
        expansions: &'a [E],
        fields: &'a [String],
    ) -> Self {
        let expansions: Vec<&'a [Expansion]> = expansions
            .iter()
            .take(plan.words.len())
            .map(AsRef::as_ref)
            .collect();
        Self {
            plan,
            count: expansions.iter().map(|e| e.len()).sum(),
            expansions,
            fields,
            positions: OnceLock::new(),
        }
    }

    /// Expansion term → its positions.
    fn positions(&self) -> &HashMap<&'a str, Vec<usize>> {
        self.positions.get_or_init(|| {
            let mut positions: HashMap<&str, Vec<usize>> = HashMap::new();
            for (at, e) in self.expansions.iter().copied().flatten().enumerate() {
                positions.entry(e.term.as_str()).or_default().push(at);
            }
            positions
        })
    }

    /// How many expansions there are in all; [`Explainer::explain_found`] numbers them
    /// across the words, in plan order.
    pub fn expansions(&self) -> usize {
        self.count
    }

    /// Why `doc` matches: its words, searched field by field, against the expansions.
    pub fn explain(&self, doc: &Document) -> Explained {
        let width = self.fields.len();
        let mut found = vec![false; self.count * width];
        let positions = self.positions();
        for (f, field) in self.fields.iter().enumerate() {
            if let Some(v) = doc.get(field) {
                for_each_text(v, &mut |text| {
                    for_each_token(text, |t| {
                        for &at in positions.get(t).map_or(&[][..], Vec::as_slice) {
                            found[at * width + f] = true;
                        }
                    })
                });
            }
        }
        self.explain_found(&found)
    }

    /// Why a document matches, from where the expansions occur in it: `found[e × F + f]`
    /// (F searched fields) says whether the document's searched field `f` holds expansion
    /// `e`, numbered across the words in plan order. An engine that knows this from its
    /// index need not read the document's words again.
    pub fn explain_found(&self, found: &[bool]) -> Explained {
        let width = self.fields.len();
        let mut out = Explained::default();
        let mut at = 0;
        for (word, expansions) in self.plan.words.iter().zip(&self.expansions) {
            let mut best: Option<u32> = None;
            for e in expansions.iter() {
                let in_fields = found.get(at * width..(at + 1) * width).unwrap_or_default();
                at += 1;
                if !in_fields.contains(&true) {
                    continue;
                }
                best = best.max(Some(e.kind.tier()));
                if !out.matched.contains_key(&e.term) {
                    let names = self
                        .fields
                        .iter()
                        .zip(in_fields)
                        .filter(|(_, found)| **found)
                        .map(|(f, _)| Value::String(f.clone()))
                        .collect();
                    out.terms.push(e.term.clone());
                    out.matched.insert(e.term.clone(), Value::Array(names));
                }
            }
            if let Some(tier) = best {
                out.words += 1;
                out.tiers += tier;
                out.query_terms.push(word.text.clone());
            }
        }
        out
    }
}

/// One match, shaped as MiniSearch shapes it: `{id, score, terms, queryTerms, match,
/// ...storeFields}`.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchMatch {
    /// The document's key.
    pub id: String,
    /// Relevance; higher is better. Comparable only within one answer.
    pub score: f64,
    /// Why it matched; shared by the matches of an answer that match alike (most do: a
    /// one-word query's matches usually hold the same term in the same fields).
    pub explained: Arc<Explained>,
    /// The configured stored fields the document has, in configured order.
    pub stored: StoredFields,
}

/// A match's stored fields: each configured stored field its document has, in configured
/// order, as the JSON text of its value. An engine that keeps documents as JSON text
/// copies the values' text out of it, and the answer copies it in: no value is parsed
/// into a tree and written out again. Shared, not copied, by clones: an engine can pick a
/// document's fields once and answer them in every match of it.
#[derive(Debug, Clone)]
pub struct StoredFields {
    fields: Arc<[(String, Box<RawValue>)]>,
    /// Whether a field is named as a built-in member of a match (`id`, `score`, …), whose
    /// place it takes: rare, and without one a match is written without looking.
    shadows: bool,
}

/// The members every match has, before its stored fields.
const BUILT_IN: [&str; 5] = ["id", "score", "terms", "queryTerms", "match"];

impl Default for StoredFields {
    fn default() -> Self {
        Self {
            fields: Arc::from(Vec::new()),
            shadows: false,
        }
    }
}

impl FromIterator<(String, Box<RawValue>)> for StoredFields {
    /// Fields `(name, JSON text of the value)`, in order.
    fn from_iter<I: IntoIterator<Item = (String, Box<RawValue>)>>(fields: I) -> Self {
        let fields: Vec<_> = fields.into_iter().collect();
        Self {
            shadows: fields.iter().any(|(n, _)| BUILT_IN.contains(&n.as_str())),
            fields: fields.into(),
        }
    }
}

impl StoredFields {
    /// The fields named by `names` that `doc` has, in that order.
    pub fn of_document(doc: &Document, names: &[String]) -> Self {
        names
            .iter()
            .filter_map(|n| {
                let raw = serde_json::value::to_raw_value(doc.get(n)?).ok()?;
                Some((n.clone(), raw))
            })
            .collect()
    }

    /// The bytes of the names and values' text, for a cache's accounting.
    pub fn text_bytes(&self) -> usize {
        self.fields
            .iter()
            .map(|(n, v)| n.len() + v.get().len())
            .sum()
    }

    /// The JSON text of field `name`'s value.
    pub fn get(&self, name: &str) -> Option<&RawValue> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| &**v)
    }

    /// The fields and their values' JSON text, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &RawValue)> {
        self.fields.iter().map(|(n, v)| (n.as_str(), &**v))
    }

    /// The fields as a document (values parsed).
    pub fn to_document(&self) -> Document {
        self.iter()
            .map(|(n, v)| {
                let value = serde_json::from_str(v.get()).unwrap_or(Value::Null);
                (n.to_owned(), value)
            })
            .collect()
    }

    /// How many fields there are.
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }
}

impl PartialEq for StoredFields {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len()
            && self
                .iter()
                .zip(other.iter())
                .all(|((a, x), (b, y))| a == b && x.get() == y.get())
    }
}

impl SearchMatch {
    /// A match of the document `doc` under `key`, keeping the fields `config` stores.
    pub fn new(
        key: String,
        score: f64,
        explained: Explained,
        doc: &Document,
        config: &SearchConfig,
    ) -> Self {
        let stored = StoredFields::of_document(doc, &config.store_fields);
        Self {
            id: key,
            score,
            explained: Arc::new(explained),
            stored,
        }
    }

    /// The wire shape. Stored fields come last and, as in MiniSearch, replace a built-in
    /// member of the same name (a stored field called `id` is answered as `id`).
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("id".into(), Value::String(self.id.clone()));
        m.insert(
            "score".into(),
            serde_json::Number::from_f64(self.score).map_or(Value::Null, Value::Number),
        );
        let strings = |v: &[String]| Value::Array(v.iter().cloned().map(Value::String).collect());
        m.insert("terms".into(), strings(&self.explained.terms));
        m.insert("queryTerms".into(), strings(&self.explained.query_terms));
        m.insert(
            "match".into(),
            Value::Object(self.explained.matched.clone()),
        );
        m.extend(self.stored.to_document());
        Value::Object(m)
    }
}

impl SearchMatch {
    /// Append the match's JSON to `out`: the text `serde_json` writes for
    /// [`SearchMatch::to_json`] (a property test holds the two to the same bytes), written
    /// without building a value or going through serde. The built-in members' names need
    /// no escaping, the explanation and the stored values are JSON text already, and an
    /// answer at the default limit spent a third of its time building values and a sixth
    /// going through the serializer.
    pub fn write_json(&self, out: &mut String) {
        let stored = &self.stored;
        let shadowing = |name: &str| stored.shadows.then(|| stored.get(name)).flatten();
        out.push_str("{\"id\":");
        match shadowing("id") {
            Some(v) => out.push_str(v.get()),
            None => push_json_str(out, &self.id),
        }
        out.push_str(",\"score\":");
        match shadowing("score") {
            Some(v) => out.push_str(v.get()),
            // As serde_json writes an f64, not-finite as null.
            None if self.score.is_finite() => {
                out.push_str(zmij::Buffer::new().format_finite(self.score));
            }
            None => out.push_str("null"),
        }
        let explained = &self.explained;
        let wire = explained.wire();
        for (at, name) in ["terms", "queryTerms", "match"].into_iter().enumerate() {
            out.push_str(",\"");
            out.push_str(name);
            out.push_str("\":");
            if let Some(v) = shadowing(name) {
                out.push_str(v.get());
            } else if let Some(raw) = wire.and_then(|w| w.get(at)) {
                out.push_str(raw.get());
            } else {
                let text = match at {
                    0 => serde_json::to_string(&explained.terms),
                    1 => serde_json::to_string(&explained.query_terms),
                    _ => serde_json::to_string(&explained.matched),
                };
                out.push_str(text.as_deref().unwrap_or("null"));
            }
        }
        for (name, value) in stored.iter() {
            if !stored.shadows || !BUILT_IN.contains(&name) {
                out.push(',');
                push_json_str(out, name);
                out.push(':');
                out.push_str(value.get());
            }
        }
        out.push('}');
    }
}

/// The body of a query's answer, `{"ok":true,"matches":[…]}`, each match as
/// [`SearchMatch::write_json`] writes it, into a string sized for it up front (growing it
/// by doubling copied a 15 KB answer several times).
pub fn answer_json(matches: &[SearchMatch]) -> String {
    let guess: usize = matches
        .iter()
        .map(|m| 192 + m.id.len() + m.stored.text_bytes())
        .sum();
    let mut out = String::with_capacity(32 + guess);
    out.push_str("{\"ok\":true,\"matches\":[");
    for (i, m) in matches.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        m.write_json(&mut out);
    }
    out.push_str("]}");
    out
}

/// `s` as a JSON string, escaped as `serde_json` escapes it (only `"`, `\\` and control
/// characters), which it is asked to do only for the rare text that needs it.
fn push_json_str(out: &mut String, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push('"');
        out.push_str(s);
        out.push('"');
    } else if let Ok(text) = serde_json::to_string(s) {
        out.push_str(&text);
    }
}

/// Order matches best first: more query words matched, then better match tiers, then the
/// engine's score; ties keep their order. Every adapter sorts its final answer with this.
pub fn rank(matches: &mut [SearchMatch]) {
    matches.sort_by(|a, b| {
        b.explained
            .words
            .cmp(&a.explained.words)
            .then(b.explained.tiers.cmp(&a.explained.tiers))
            .then(b.score.total_cmp(&a.score))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config() -> SearchConfig {
        SearchConfig {
            fields: vec!["title".into(), "body".into()],
            store_fields: vec!["title".into(), "year".into()],
        }
    }

    fn parse(v: Value) -> Result<SearchQuery> {
        SearchQuery::from_json(&v, &config())
    }

    #[test]
    fn defaults() {
        let q = parse(json!({"query": "ghost"})).unwrap();
        assert_eq!(q.fields, ["title", "body"]);
        assert!(q.filter.is_empty());
        assert_eq!(q.limit, DEFAULT_LIMIT);
        let q = parse(json!({"query": "x", "fields": ["body", "title", "body"],
                             "filter": {"type": "movie"}, "limit": 5, "fuzzy": 0.2}))
        .unwrap();
        assert_eq!(q.fields, ["title", "body"]);
        assert_eq!(q.filter, *json!({"type": "movie"}).as_object().unwrap());
        assert_eq!(q.limit, 5);
    }

    #[test]
    fn invalid_queries_say_why() {
        let long = "a ".repeat(600);
        let many: String = (0..33).map(|i| format!("w{i} ")).collect();
        let cases = [
            (json!([]), "must be a JSON object"),
            (json!({}), "\"query\" is required"),
            (json!({"query": ""}), "\"query\" is required"),
            (
                json!({"query": "  "}),
                "\"query\" \"  \" has no words to search for: a word is a run of letters or \
                 digits (of at most 128 bytes), such as {\"query\": \"ghostbusters\"}",
            ),
            (
                json!({"query": "?!"}),
                "\"query\" \"?!\" has no words to search for",
            ),
            (
                json!({"query": "\t— … 🎬"}),
                "\"query\" \"\\t— … 🎬\" has no words",
            ),
            (
                json!({"query": "x".repeat(129)}),
                "\"query\" \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"… has no words",
            ),
            (json!({"query": 5}), "\"query\" must be a string"),
            (json!({"query": long}), "at most 1024"),
            (json!({"query": many}), "33 distinct words"),
            (json!({"query": "x", "fields": []}), "non-empty array"),
            (json!({"query": "x", "fields": "title"}), "non-empty array"),
            (
                json!({"query": "x", "fields": ["year"]}),
                "\"fields\" names \"year\", which is not searched in this instance; \
                 the configured fields are \"title\", \"body\"",
            ),
            (
                json!({"query": "x", "filter": [1]}),
                "\"filter\" must be an object",
            ),
            (
                json!({"query": "x", "limit": 0}),
                "\"limit\" must be an integer from 1 to 1000, not 0",
            ),
            (json!({"query": "x", "limit": 1001}), "not 1001"),
            (json!({"query": "x", "limit": "5"}), "not \"5\""),
        ];
        for (body, expected) in cases {
            match parse(body.clone()) {
                Err(Error::Invalid(msg)) => assert!(msg.contains(expected), "{body}: {msg}"),
                other => panic!("{body}: {other:?}"),
            }
        }
    }

    #[test]
    fn plans_dedupe_words_and_prefix_the_last() {
        let p = QueryPlan::new("The Ghost of the GHOST  busters");
        let words: Vec<_> = p
            .words
            .iter()
            .map(|w| (w.text.as_str(), w.budget, w.prefix))
            .collect();
        assert_eq!(
            words,
            [
                ("the", 0, false),
                ("ghost", 1, false),
                ("of", 0, false),
                ("busters", 1, true)
            ]
        );
        assert!(!QueryPlan::new("star wa ").words[1].prefix);
        assert!(!QueryPlan::new("star wa!").words[1].prefix);
        assert!(QueryPlan::new("star wa").words[1].prefix);
        // A repeated last word is still the word being typed.
        assert!(QueryPlan::new("wars star wars").words[0].prefix);
    }

    #[test]
    fn expansions_are_capped_best_first() {
        let mut c: Vec<Expansion> = (0..80)
            .map(|i| Expansion {
                term: format!("ghost{i}"),
                kind: MatchKind::Prefix,
                doc_freq: i,
            })
            .collect();
        c.push(Expansion {
            term: "ghost".into(),
            kind: MatchKind::Exact,
            doc_freq: 1,
        });
        let s = select_expansions(c);
        assert_eq!(s.len(), MAX_EXPANSIONS);
        assert_eq!(s[0].term, "ghost");
        assert_eq!(s[1].term, "ghost79");
    }

    #[test]
    fn explain_and_shape_a_match() {
        let plan = QueryPlan::new("ghots night");
        let e = |term: &str, kind| Expansion {
            term: term.into(),
            kind,
            doc_freq: 1,
        };
        let expansions = vec![
            vec![
                e("ghosts", MatchKind::Fuzzy(1)),
                e("ghost", MatchKind::Fuzzy(1)),
            ],
            vec![
                e("night", MatchKind::Exact),
                e("nightmare", MatchKind::Prefix),
            ],
        ];
        let doc = json!({"title": "Ghost Nightmare", "body": ["a ghost", 3],
                         "year": 1990, "id": "stored id"})
        .as_object()
        .unwrap()
        .clone();
        let x = explain(&plan, &expansions, &doc, &config().fields);
        assert_eq!(x.words, 2);
        assert_eq!(x.tiers, 3 + 4);
        assert_eq!(x.terms, ["ghost", "nightmare"]);
        assert_eq!(x.query_terms, ["ghots", "night"]);
        let mut cfg = config();
        cfg.store_fields.push("id".into());
        cfg.store_fields.push("absent".into());
        let m = SearchMatch::new("k1".into(), 2.5, x, &doc, &cfg);
        assert_eq!(
            serde_json::to_string(&m.to_json()).unwrap(),
            r#"{"id":"stored id","score":2.5,"terms":["ghost","nightmare"],"queryTerms":["ghots","night"],"match":{"ghost":["title","body"],"nightmare":["title"]},"title":"Ghost Nightmare","year":1990}"#
        );
        let mut written = String::new();
        m.write_json(&mut written);
        assert_eq!(written, serde_json::to_string(&m.to_json()).unwrap());
    }

    #[test]
    fn serializing_a_match_writes_its_json_shape() {
        let doc = json!({"title": "t", "match": "stored match", "score": [1], "year": 1})
            .as_object()
            .unwrap()
            .clone();
        let cfg = SearchConfig {
            fields: vec!["title".into()],
            store_fields: vec!["year".into(), "score".into(), "match".into(), "none".into()],
        };
        let explained = explain(&QueryPlan::new("t"), &[vec![]], &doc, &cfg.fields);
        for score in [1.5, 1e-7, 123_456_789.0, f64::NAN, f64::INFINITY] {
            let m = SearchMatch::new("k\"ey".into(), score, explained.clone(), &doc, &cfg);
            let mut written = String::new();
            m.write_json(&mut written);
            assert_eq!(
                written,
                serde_json::to_string(&m.to_json()).unwrap(),
                "{score}"
            );
        }
    }

    /// The definition [`Explainer`] implements faster: every expansion looked for in every
    /// field's words.
    fn explain_by_definition(
        plan: &QueryPlan,
        expansions: &[Vec<Expansion>],
        doc: &Document,
        fields: &[String],
    ) -> Explained {
        let field_terms: Vec<HashSet<String>> = fields
            .iter()
            .map(|f| {
                let mut set = HashSet::new();
                if let Some(v) = doc.get(f) {
                    for_each_text(v, &mut |text| {
                        for_each_token(text, |t| {
                            set.insert(t.to_owned());
                        })
                    });
                }
                set
            })
            .collect();
        let mut out = Explained::default();
        for (word, expansions) in plan.words.iter().zip(expansions) {
            let mut best: Option<u32> = None;
            for e in expansions {
                let in_fields: Vec<Value> = fields
                    .iter()
                    .zip(&field_terms)
                    .filter(|(_, terms)| terms.contains(&e.term))
                    .map(|(f, _)| Value::String(f.clone()))
                    .collect();
                if in_fields.is_empty() {
                    continue;
                }
                best = best.max(Some(e.kind.tier()));
                if !out.matched.contains_key(&e.term) {
                    out.terms.push(e.term.clone());
                    out.matched.insert(e.term.clone(), Value::Array(in_fields));
                }
            }
            if let Some(tier) = best {
                out.words += 1;
                out.tiers += tier;
                out.query_terms.push(word.text.clone());
            }
        }
        out
    }

    proptest::proptest! {
        /// Small alphabets, so that words, expansions and document words collide often.
        #[test]
        fn the_explainer_explains_by_definition(
            query in "[abc ]{1,12}",
            expansions in proptest::collection::vec(
                proptest::collection::vec(("[abc]{1,3}", 0u8..4), 0..5), 0..4),
            title in "[abc ,]{0,16}",
            body in proptest::collection::vec("[abc. ]{0,10}", 0..3),
        ) {
            let plan = QueryPlan::new(&query);
            let kinds = [MatchKind::Exact, MatchKind::Prefix, MatchKind::Fuzzy(1), MatchKind::FuzzyPrefix(2)];
            let expansions: Vec<Vec<Expansion>> = expansions
                .into_iter()
                .map(|word| word.into_iter().map(|(term, kind)| Expansion {
                    term,
                    kind: kinds[usize::from(kind)],
                    doc_freq: 1,
                }).collect())
                .collect();
            let doc = json!({"title": title, "body": body}).as_object().unwrap().clone();
            for fields in [config().fields, vec!["body".to_owned()]] {
                proptest::prop_assert_eq!(
                    explain(&plan, &expansions, &doc, &fields),
                    explain_by_definition(&plan, &expansions, &doc, &fields)
                );
            }
        }
    }

    #[test]
    fn rank_orders_words_then_tiers_then_score() {
        let m = |id: &str, words, tiers, score| SearchMatch {
            id: id.into(),
            score,
            explained: Arc::new(Explained {
                words,
                tiers,
                ..Explained::default()
            }),
            stored: StoredFields::default(),
        };
        let mut v = vec![
            m("a", 1, 3, 9.0),
            m("b", 2, 2, 1.0),
            m("c", 2, 3, 0.5),
            m("d", 2, 3, 0.7),
        ];
        rank(&mut v);
        let ids: Vec<_> = v.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["d", "c", "b", "a"]);
    }

    /// A JSON value for a stored field or an explanation: text that needs escaping,
    /// numbers, nesting.
    fn value_strategy() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        prop_oneof![
            any::<String>().prop_map(Value::from),
            "[a\"\\\n\u{1}é/]{0,6}".prop_map(Value::from),
            any::<f64>().prop_map(|f| json!(f)),
            any::<i64>().prop_map(Value::from),
            proptest::collection::vec("[a-z\"]{0,3}", 0..3).prop_map(|v| json!(v)),
            Just(json!({"a": [1, {"b": null}], "c\"": true})),
        ]
    }

    fn match_strategy() -> impl proptest::strategy::Strategy<Value = SearchMatch> {
        use proptest::prelude::*;
        let name = prop_oneof![
            proptest::sample::select(BUILT_IN.to_vec()).prop_map(str::to_owned),
            "[a-z]{1,6}",
            any::<String>(),
        ];
        let score = prop_oneof![
            any::<f64>(),
            Just(f64::NAN),
            Just(f64::INFINITY),
            (0.0..5_000.0f32).prop_map(f64::from),
        ];
        (
            prop_oneof![any::<String>(), "[a-z0-9\"\\\t-]{0,8}"],
            score,
            proptest::collection::vec(any::<String>(), 0..3),
            proptest::collection::vec("[a-z]{1,4}", 0..3),
            proptest::collection::btree_map("[a-z\"]{1,4}", value_strategy(), 0..3),
            proptest::collection::btree_map(name, value_strategy(), 0..4),
            any::<bool>(),
        )
            .prop_map(|(id, score, terms, query_terms, matched, stored, wired)| {
                let explained = Explained {
                    words: terms.len(),
                    tiers: 0,
                    terms,
                    query_terms,
                    matched: matched.into_iter().collect(),
                    wire: WireCache::default(),
                };
                if wired {
                    explained.wire(); // as a match sharing it would have left it
                }
                SearchMatch {
                    id,
                    score,
                    explained: Arc::new(explained),
                    stored: stored
                        .into_iter()
                        .map(|(n, v)| (n, serde_json::value::to_raw_value(&v).unwrap()))
                        .collect(),
                }
            })
    }

    proptest::proptest! {
        /// The hand-written answer is the text serde_json writes for the matches' wire
        /// shape ([`SearchMatch::to_json`]), byte for byte: escapes, scores (not finite as
        /// null), stored fields in place of the built-in members they shadow.
        #[test]
        fn written_answers_are_serde_jsons(
            matches in proptest::collection::vec(match_strategy(), 0..4),
        ) {
            let wire: Vec<Value> = matches.iter().map(SearchMatch::to_json).collect();
            let expected = serde_json::to_string(&json!({"ok": true, "matches": wire})).unwrap();
            proptest::prop_assert_eq!(answer_json(&matches), expected);
        }
    }
}
