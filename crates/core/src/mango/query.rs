//! The wire shapes of `_query` and `_index` bodies, parsed into typed queries and index
//! definitions, and the projection of `fields`.

use serde_json::{Map, Value};

use super::{keycode, path::FieldPath, selector::Selector};
use crate::{Error, Result};

/// `limit` when a query gives none (CouchDB's default).
pub const DEFAULT_LIMIT: usize = 25;
/// Largest `limit` a query may ask for.
pub const MAX_LIMIT: usize = 100_000;
/// Most documents a query may skip: skipped documents are still read, so a large `skip`
/// costs as much as returning them (keyset paging on an indexed field does not).
pub const MAX_SKIP: usize = 100_000;
/// Most fields in one index.
pub const MAX_INDEX_FIELDS: usize = 16;
/// Longest index name, in bytes.
pub const MAX_INDEX_NAME_BYTES: usize = 128;

/// Sort direction of an index field or a query sort key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SortDir {
    /// Ascending in CouchDB collation.
    Asc,
    /// Descending in CouchDB collation.
    Desc,
}

impl SortDir {
    fn parse(v: &Value, what: &str) -> Result<Self> {
        match v.as_str() {
            Some(s) if s.eq_ignore_ascii_case("asc") => Ok(Self::Asc),
            Some(s) if s.eq_ignore_ascii_case("desc") => Ok(Self::Desc),
            _ => Err(Error::invalid(format!(
                "the direction of {what} must be \"asc\" or \"desc\" (any case), not {v}"
            ))),
        }
    }

    /// `"asc"` or `"desc"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Asc => "asc",
            Self::Desc => "desc",
        }
    }
}

/// A Mango query (`POST /data/<d>/_query`).
#[derive(Debug, Clone, PartialEq)]
pub struct FindQuery {
    /// Which documents.
    pub selector: Selector,
    /// Projection: these fields only, no implicit `_id`; `None` for whole documents.
    pub fields: Option<Vec<FieldPath>>,
    /// Sort keys, most significant first; ties are broken by `_id` in the direction of the
    /// first key.
    pub sort: Vec<(FieldPath, SortDir)>,
    /// At most this many documents.
    pub limit: usize,
    /// Skip this many matching documents first.
    pub skip: usize,
    /// Name of the index the client asks for.
    pub use_index: Option<String>,
    /// Whether to report execution statistics.
    pub execution_stats: bool,
}

impl Default for FindQuery {
    fn default() -> Self {
        Self {
            selector: Selector::all(),
            fields: None,
            sort: Vec::new(),
            limit: DEFAULT_LIMIT,
            skip: 0,
            use_index: None,
            execution_stats: false,
        }
    }
}

impl FindQuery {
    /// Parse a query body: `{selector?, fields?, sort?, limit?, skip?, use_index?,
    /// execution_stats?}`; other members (`bookmark`, `r`, …) are ignored.
    pub fn from_json(body: &Value) -> Result<Self> {
        let Value::Object(m) = body else {
            return Err(Error::invalid(format!(
                "a query must be a JSON object such as {{\"selector\": {{…}}}}, not {}",
                short(body)
            )));
        };
        let mut q = Self::default();
        if let Some(s) = present(m, "selector") {
            q.selector = Selector::parse(s)?;
        }
        if let Some(f) = present(m, "fields") {
            let Value::Array(items) = f else {
                return Err(Error::invalid(format!(
                    "\"fields\" must be an array of field names, not {}",
                    short(f)
                )));
            };
            let paths = items
                .iter()
                .map(|i| match i {
                    Value::String(s) => FieldPath::parse(s),
                    other => Err(Error::invalid(format!(
                        "\"fields\" must hold field names (strings), not {}",
                        short(other)
                    ))),
                })
                .collect::<Result<Vec<_>>>()?;
            q.fields = (!paths.is_empty()).then_some(paths);
        }
        if let Some(s) = present(m, "sort") {
            q.sort = parse_sort(s)?;
        }
        if let Some(l) = present(m, "limit") {
            q.limit = count(l, "limit")?;
            if q.limit > MAX_LIMIT {
                return Err(Error::invalid(format!(
                    "\"limit\" is {}, more than the maximum of {MAX_LIMIT}; page with \
                     \"skip\" or narrow the selector",
                    q.limit
                )));
            }
        }
        if let Some(s) = present(m, "skip") {
            q.skip = count(s, "skip")?;
            if q.skip > MAX_SKIP {
                return Err(Error::invalid(format!(
                    "\"skip\" is {}, more than the maximum of {MAX_SKIP}: every skipped \
                     document is still read; page with a range on an indexed field instead \
                     (e.g. {{\"selector\": {{\"year\": {{\"$gt\": <last year seen>}}}}}})",
                    q.skip
                )));
            }
        }
        if let Some(u) = present(m, "use_index") {
            q.use_index = Some(match u {
                Value::String(s) => s.clone(),
                // CouchDB's ["design doc", "name"] form: the name is what identifies ours.
                Value::Array(a) if !a.is_empty() && a.iter().all(Value::is_string) => a
                    .last()
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                other => {
                    return Err(Error::invalid(format!(
                        "\"use_index\" must be an index name, not {}",
                        short(other)
                    )));
                }
            });
        }
        if let Some(e) = present(m, "execution_stats") {
            q.execution_stats = e.as_bool().ok_or_else(|| {
                Error::invalid(format!(
                    "\"execution_stats\" must be true or false, not {}",
                    short(e)
                ))
            })?;
        }
        Ok(q)
    }

    /// The document as the query returns it: projected onto `fields` when given.
    pub fn project(&self, doc: Value) -> Value {
        let Some(fields) = &self.fields else {
            return doc;
        };
        let mut out = Map::new();
        for f in fields {
            if let Some(v) = f.get(&doc) {
                f.insert_into(&mut out, v.clone());
            }
        }
        Value::Object(out)
    }
}

fn present<'a>(m: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    m.get(key).filter(|v| !v.is_null())
}

/// A non-negative integer, also given as a numeric string (as hyper accepted).
fn count(v: &Value, what: &str) -> Result<usize> {
    let n = match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse::<u64>().ok(),
        _ => None,
    };
    n.and_then(|n| usize::try_from(n).ok()).ok_or_else(|| {
        Error::invalid(format!(
            "\"{what}\" must be a non-negative integer, not {}",
            short(v)
        ))
    })
}

fn parse_sort(v: &Value) -> Result<Vec<(FieldPath, SortDir)>> {
    let items: Vec<&Value> = match v {
        Value::Array(a) => a.iter().collect(),
        // A lone object or name is the same as a list of one.
        Value::Object(_) | Value::String(_) => vec![v],
        other => {
            return Err(Error::invalid(format!(
                "\"sort\" must be an array such as [{{\"year\": \"desc\"}}, \"title\"], not {}",
                short(other)
            )));
        }
    };
    items.into_iter().map(field_and_dir("sort")).collect()
}

fn field_and_dir(what: &'static str) -> impl Fn(&Value) -> Result<(FieldPath, SortDir)> {
    move |item| match item {
        Value::String(s) => Ok((FieldPath::parse(s)?, SortDir::Asc)),
        Value::Object(m) if m.len() == 1 => {
            let (k, d) = m.iter().next().ok_or_else(|| Error::invalid("empty"))?;
            Ok((
                FieldPath::parse(k)?,
                SortDir::parse(d, &format!("\"{k}\" in \"{what}\""))?,
            ))
        }
        other => Err(Error::invalid(format!(
            "each entry of \"{what}\" must be a field name or {{\"<field>\": \"asc\"|\"desc\"}}, \
             not {}",
            short(other)
        ))),
    }
}

/// An index definition (`POST /data/<d>/_index`).
#[derive(Debug, Clone, PartialEq)]
pub struct IndexDef {
    /// The index name (derived from the fields when the request gave none).
    pub name: String,
    /// Indexed fields with the direction given at creation. The index is walked in either
    /// direction, so the direction is recorded, not used.
    pub fields: Vec<(FieldPath, SortDir)>,
    /// Only documents matching this selector are indexed.
    pub partial_filter: Option<Selector>,
    partial_filter_json: Option<Value>,
}

impl IndexDef {
    /// Parse `{fields, name?, type?, partialFilter? | partial_filter_selector?}`; CouchDB's
    /// `{index: {fields, partial_filter_selector}, name, type}` is accepted too.
    pub fn from_json(body: &Value) -> Result<Self> {
        Self::parse(body, Names::Checked)
    }

    /// Read back a definition an engine stored (or an archive carries) as
    /// [`IndexDef::to_json`] wrote it. Its name may hold control characters, which
    /// [`IndexDef::from_json`] refuses: versions before 2026-11-29 derived names from the
    /// fields as they were, and an instance holding such an index must still load.
    pub fn from_stored_json(body: &Value) -> Result<Self> {
        Self::parse(body, Names::Stored)
    }

    fn parse(body: &Value, names: Names) -> Result<Self> {
        let Value::Object(top) = body else {
            return Err(Error::invalid(format!(
                "an index must be a JSON object such as {{\"fields\": [\"type\"]}}, not {}",
                short(body)
            )));
        };
        let inner = match present(top, "index") {
            Some(Value::Object(i)) => i,
            Some(other) => {
                return Err(Error::invalid(format!(
                    "\"index\" must be an object with \"fields\", not {}",
                    short(other)
                )));
            }
            None => top,
        };
        if let Some(t) = present(top, "type").or_else(|| present(inner, "type"))
            && !t.as_str().is_some_and(|t| t.eq_ignore_ascii_case("json"))
        {
            return Err(Error::invalid(format!(
                "the index type {} is not supported; use \"json\"",
                short(t)
            )));
        }
        let fields = match present(inner, "fields") {
            Some(Value::Array(f)) if !f.is_empty() => f
                .iter()
                .map(field_and_dir("fields"))
                .collect::<Result<Vec<_>>>()?,
            Some(other) => {
                return Err(Error::invalid(format!(
                    "\"fields\" must be a non-empty array of field names or \
                     {{\"<field>\": \"asc\"|\"desc\"}}, not {}",
                    short(other)
                )));
            }
            None => {
                return Err(Error::invalid(
                    "an index needs \"fields\", e.g. {\"fields\": [\"type\", \"year\"]}",
                ));
            }
        };
        if fields.len() > MAX_INDEX_FIELDS {
            return Err(Error::invalid(format!(
                "an index has at most {MAX_INDEX_FIELDS} fields, not {}",
                fields.len()
            )));
        }
        for (i, (f, _)) in fields.iter().enumerate() {
            if fields[..i].iter().any(|(g, _)| g == f) {
                return Err(Error::invalid(format!(
                    "the field \"{f}\" appears twice in the index"
                )));
            }
        }
        let partial_json = ["partialFilter", "partial_filter_selector"]
            .iter()
            .find_map(|k| present(inner, k).or_else(|| present(top, k)))
            .cloned();
        let partial_filter = partial_json.as_ref().map(Selector::parse).transpose()?;
        let name = match present(top, "name").or_else(|| present(inner, "name")) {
            Some(Value::String(n)) => valid_index_name(n, names)?.to_owned(),
            Some(other) => {
                return Err(Error::invalid(format!(
                    "the index \"name\" must be a string, not {}",
                    short(other)
                )));
            }
            None => default_name(&fields, partial_json.as_ref()),
        };
        Ok(Self {
            name,
            fields,
            partial_filter,
            partial_filter_json: partial_json,
        })
    }

    /// The canonical JSON form, which [`IndexDef::from_json`] reads back; two definitions
    /// are the same index when these are equal.
    pub fn to_json(&self) -> Value {
        let fields: Vec<Value> = self
            .fields
            .iter()
            .map(|(f, d)| {
                let mut m = Map::new();
                m.insert(f.to_string(), Value::String(d.as_str().to_owned()));
                Value::Object(m)
            })
            .collect();
        let mut m = Map::new();
        m.insert("name".into(), Value::String(self.name.clone()));
        m.insert("type".into(), Value::String("json".into()));
        m.insert("fields".into(), Value::Array(fields));
        if let Some(p) = &self.partial_filter_json {
            m.insert("partial_filter_selector".into(), p.clone());
        }
        Value::Object(m)
    }

    /// The index key of `doc`: the concatenated encodings of its indexed fields (missing
    /// fields included, as the lowest value); `None` when the partial filter excludes it.
    pub fn key_of(&self, doc: &Value) -> Option<Vec<u8>> {
        if let Some(p) = &self.partial_filter
            && !p.matches(doc)
        {
            return None;
        }
        let mut key = Vec::with_capacity(16 * self.fields.len());
        for (f, _) in &self.fields {
            keycode::encode_opt_into(f.get(doc), &mut key);
        }
        Some(key)
    }
}

/// Which index names [`IndexDef::parse`] takes.
#[derive(Clone, Copy, PartialEq)]
enum Names {
    /// A client's: without control characters.
    Checked,
    /// A stored definition's: control characters too ([`IndexDef::from_stored_json`]).
    Stored,
}

fn valid_index_name(n: &str, names: Names) -> Result<&str> {
    let control = names == Names::Checked && n.chars().any(char::is_control);
    if n.is_empty() || n.len() > MAX_INDEX_NAME_BYTES || control {
        return Err(Error::invalid(format!(
            "the index name {:?} is not valid: use 1 to {MAX_INDEX_NAME_BYTES} bytes without \
             control characters",
            n
        )));
    }
    Ok(n)
}

/// `idx-<field>-<field>…`, plus a short digest of the partial filter when there is one, so
/// two indexes on the same fields with different filters get different names. A name is a
/// valid one ([`valid_index_name`]): too long, it is cut and ends with a digest of the
/// whole; control characters in the fields' names become `_`, with the same digest, so that
/// two such indexes keep apart.
fn default_name(fields: &[(FieldPath, SortDir)], partial: Option<&Value>) -> String {
    use sha2::Digest;
    let mut name = String::from("idx");
    for (f, _) in fields {
        name.push('-');
        name.push_str(&f.to_string());
    }
    if let Some(p) = partial {
        let digest = sha2::Sha256::digest(p.to_string().as_bytes());
        name.push_str("-partial-");
        name.push_str(&hex::encode(&digest[..4]));
    }
    let control = name.chars().any(char::is_control);
    if control || name.len() > MAX_INDEX_NAME_BYTES {
        let digest = sha2::Sha256::digest(name.as_bytes());
        if control {
            name = name
                .chars()
                .map(|c| if c.is_control() { '_' } else { c })
                .collect();
        }
        name.truncate(name.floor_char_boundary(MAX_INDEX_NAME_BYTES - 9));
        name.push('-');
        name.push_str(&hex::encode(&digest[..4]));
    }
    name
}

fn short(v: &Value) -> String {
    let mut s = v.to_string();
    if s.len() > 64 {
        s.truncate(s.floor_char_boundary(64));
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn query_defaults_and_forms() {
        let q = FindQuery::from_json(&json!({})).unwrap();
        assert_eq!(q.limit, 25);
        assert_eq!(q.selector, Selector::all());
        let q = FindQuery::from_json(&json!({
            "selector": {"a": 1},
            "sort": [{"year": "DESC"}, "title", {"b.c": "Asc"}],
            "limit": "10", "skip": 2, "fields": ["a", "b.c"],
            "use_index": ["ddoc", "by-year"], "execution_stats": true,
        }))
        .unwrap();
        assert_eq!(q.limit, 10);
        assert_eq!(q.skip, 2);
        assert_eq!(q.use_index.as_deref(), Some("by-year"));
        let dirs: Vec<_> = q.sort.iter().map(|(f, d)| (f.to_string(), *d)).collect();
        assert_eq!(
            dirs,
            [
                ("year".to_owned(), SortDir::Desc),
                ("title".to_owned(), SortDir::Asc),
                ("b.c".to_owned(), SortDir::Asc)
            ]
        );
        assert!(q.execution_stats);
    }

    #[test]
    fn query_errors_name_the_member() {
        let err = |v: Value| FindQuery::from_json(&v).unwrap_err().to_string();
        assert_eq!(
            err(json!({"limit": -1})),
            "\"limit\" must be a non-negative integer, not -1"
        );
        assert_eq!(
            err(json!({"sort": [{"a": "up"}]})),
            "the direction of \"a\" in \"sort\" must be \"asc\" or \"desc\" (any case), not \"up\""
        );
        assert_eq!(
            err(json!({"fields": "a"})),
            "\"fields\" must be an array of field names, not \"a\""
        );
        assert_eq!(
            err(json!([])),
            "a query must be a JSON object such as {\"selector\": {…}}, not []"
        );
        assert!(FindQuery::from_json(&json!({"skip": MAX_SKIP})).is_ok());
        assert!(
            err(json!({"skip": MAX_SKIP + 1}))
                .starts_with("\"skip\" is 100001, more than the maximum of 100000"),
        );
    }

    #[test]
    fn projection_keeps_only_the_fields_without_implicit_id() {
        let q = FindQuery::from_json(&json!({"fields": ["a.b", "c", "zz"]})).unwrap();
        let doc = json!({"_id": "x", "a": {"b": 1, "d": 2}, "c": [1]});
        assert_eq!(q.project(doc), json!({"a": {"b": 1}, "c": [1]}));
    }

    #[test]
    fn derived_names_of_fields_with_control_characters_are_valid() {
        let d = IndexDef::from_json(&json!({"fields": ["a\u{1}b", "c"]})).unwrap();
        assert!(d.name.starts_with("idx-a_b-c-"), "{}", d.name);
        assert_eq!(d.name.len(), "idx-a_b-c-".len() + 8);
        assert_eq!(IndexDef::from_json(&d.to_json()).unwrap(), d);
        let e = IndexDef::from_json(&json!({"fields": ["a\u{2}b", "c"]})).unwrap();
        assert_ne!(d.name, e.name, "the digest keeps the two apart");

        // Stored by a version that derived the name from the fields as they were.
        let mut stored = d.to_json();
        stored["name"] = json!("idx-a\u{1}b-c");
        assert!(IndexDef::from_json(&stored).is_err());
        let read = IndexDef::from_stored_json(&stored).unwrap();
        assert_eq!(read.name, "idx-a\u{1}b-c");
        assert_eq!(read.fields, d.fields);
        stored["name"] = json!("");
        assert!(IndexDef::from_stored_json(&stored).is_err());
    }

    proptest::proptest! {
        /// What `to_json` writes, `from_json` reads back as it was: an export of any index
        /// a client could create can be imported.
        #[test]
        fn every_definition_reads_back(
            fields in proptest::collection::vec("[a-z0-9_\\x01-\\x1f\\u{7f}-\\u{9f}é]{1,10}", 1..4),
            partial: bool,
        ) {
            let mut body = json!({"fields": fields});
            if partial {
                body["partialFilter"] = json!({"x": 1});
            }
            if let Ok(d) = IndexDef::from_json(&body) {
                proptest::prop_assert_eq!(IndexDef::from_json(&d.to_json()).unwrap(), d);
            }
        }
    }

    #[test]
    fn index_definitions() {
        let d = IndexDef::from_json(&json!({
            "fields": ["type", {"year": "DESC"}], "type": "JSON"
        }))
        .unwrap();
        assert_eq!(d.name, "idx-type-year");
        assert_eq!(d.fields[1].1, SortDir::Desc);
        assert_eq!(IndexDef::from_json(&d.to_json()).unwrap(), d);

        let p = IndexDef::from_json(&json!({
            "fields": ["type"], "partialFilter": {"active": true}
        }))
        .unwrap();
        assert!(p.name.starts_with("idx-type-partial-"), "{}", p.name);
        assert_eq!(IndexDef::from_json(&p.to_json()).unwrap(), p);
        assert_eq!(p.key_of(&json!({"type": "a", "active": false})), None);
        assert!(p.key_of(&json!({"type": "a", "active": true})).is_some());

        let c = IndexDef::from_json(&json!({
            "index": {"fields": ["a"], "partial_filter_selector": {"b": 1}}, "name": "n"
        }))
        .unwrap();
        assert_eq!(c.name, "n");
        assert!(c.partial_filter.is_some());

        let err = |v: Value| IndexDef::from_json(&v).unwrap_err().to_string();
        assert_eq!(
            err(json!({"fields": []})),
            "\"fields\" must be a non-empty array of field names or {\"<field>\": \
             \"asc\"|\"desc\"}, not []"
        );
        assert_eq!(
            err(json!({"fields": ["a"], "type": "text"})),
            "the index type \"text\" is not supported; use \"json\""
        );
        assert_eq!(
            err(json!({"fields": ["a", "a"]})),
            "the field \"a\" appears twice in the index"
        );
        assert_eq!(
            err(json!({"name": "x"})),
            "an index needs \"fields\", e.g. {\"fields\": [\"type\", \"year\"]}"
        );
    }
}
