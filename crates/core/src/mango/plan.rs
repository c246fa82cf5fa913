//! The query planner: which index to walk, over which key ranges, in which direction.
//!
//! An index holds one entry per document (partial indexes: per matching document) keyed by
//! the concatenated [`keycode`] encodings of its fields, missing fields as
//! the lowest value, and then the document id. The planner turns the selector's top-level
//! conditions on the index's leading fields into byte ranges `[lo, hi)` over those keys:
//! `$eq` a point, `$gt`/`$gte`/`$lt`/`$lte` a range, `$in` points (plus every array value,
//! since `$in` also matches arrays holding an element), `$beginsWith` a prefix range, type
//! conditions the range of their type, anything else "exists". While every range of the
//! fields so far is a single value, the next field narrows further (`{type: "a", year:
//! {$gt: 2000}}` on `[type, year]` is one range). Candidates are re-checked by the
//! selector, so a range only has to hold every match, never only matches.
//!
//! The walk serves the sort when the sort keys are the index fields after those fixed to a
//! single value, all in one direction; then the answer can stop after `skip + limit`
//! matches. Otherwise candidates are sorted in memory.

use serde_json::Value;

use super::{
    keycode::{self, TAG_ARRAY, TAG_MISSING, TAG_NULL, TAG_NUMBER, TAG_OBJECT, TAG_STRING},
    path::FieldPath,
    query::{FindQuery, IndexDef, SortDir},
    selector::{Cond, Selector},
};
use crate::mango::collate::JsonType;

/// Most ranges one plan may walk (the product of `$in` lists over compound fields).
const MAX_RANGES: usize = 1024;

/// The CouchDB warning when a query scans every document.
pub const NO_INDEX_WARNING: &str =
    "no matching index found, create an index to optimize query time";

/// A half-open range of index keys: `lo <= key < hi` (`hi: None` is unbounded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRange {
    /// Lowest key, inclusive.
    pub lo: Vec<u8>,
    /// First key past the range, or `None` for no upper bound.
    pub hi: Option<Vec<u8>>,
    point: bool,
}

impl KeyRange {
    /// Every key.
    pub fn all() -> Self {
        Self {
            lo: Vec::new(),
            hi: None,
            point: false,
        }
    }

    /// Whether `key` is in the range.
    pub fn contains(&self, key: &[u8]) -> bool {
        key >= self.lo.as_slice() && self.hi.as_deref().is_none_or(|h| key < h)
    }

    fn point(v: &Value) -> Self {
        let lo = keycode::encode(v);
        Self {
            hi: keycode::prefix_successor(&lo),
            lo,
            point: true,
        }
    }

    fn from_to(lo: Vec<u8>, hi: Option<Vec<u8>>) -> Self {
        Self {
            lo,
            hi,
            point: false,
        }
    }

    fn tags(from: u8, to_excl: u8) -> Self {
        Self::from_to(vec![from], Some(vec![to_excl]))
    }

    fn exists() -> Self {
        Self::from_to(vec![TAG_NULL], None)
    }

    fn is_empty(&self) -> bool {
        self.hi.as_ref().is_some_and(|h| *h <= self.lo)
    }

    fn intersect(&self, other: &Self) -> Option<Self> {
        let lo = self.lo.clone().max(other.lo.clone());
        let hi = match (&self.hi, &other.hi) {
            (Some(a), Some(b)) => Some(a.clone().min(b.clone())),
            (Some(a), None) | (None, Some(a)) => Some(a.clone()),
            (None, None) => None,
        };
        let r = Self::from_to(lo, hi);
        if r.is_empty() {
            return None;
        }
        let same = |x: &Self| x.point && x.lo == r.lo && x.hi == r.hi;
        let point = same(self) || same(other);
        Some(Self { point, ..r })
    }
}

/// How to answer a query.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Position of the index to walk in the list given to [`plan`]; `None` to scan every
    /// document in `_id` order.
    pub index: Option<usize>,
    /// The ranges to walk, ascending and disjoint (one unbounded range for a full walk).
    pub ranges: Vec<KeyRange>,
    /// Walk the ranges from high keys to low ones.
    pub descending: bool,
    /// Candidates arrive in the answer's order: stop after `skip + limit` matches.
    pub ordered: bool,
    /// A warning for the answer (no usable index, unknown `use_index`).
    pub warning: Option<String>,
}

/// Choose how to answer `q` given the instance's `indexes`.
pub fn plan(q: &FindQuery, indexes: &[IndexDef]) -> Plan {
    let conjuncts = q.selector.conjuncts();
    let mut warning = None;
    let named = q.use_index.as_deref().and_then(|n| {
        let found = indexes.iter().position(|i| i.name == n);
        if found.is_none() {
            warning = Some(format!(
                "use_index \"{n}\" is not an index of this instance; it was ignored"
            ));
        }
        found
    });
    let mut best: Option<(usize, Candidate, Rank)> = None;
    for (i, def) in indexes.iter().enumerate() {
        let eligible = named == Some(i) || partial_is_implied(def, &conjuncts);
        if !eligible {
            continue;
        }
        let c = candidate(def, &conjuncts, &q.sort);
        let rank = (c.used, c.serves_sort, std::cmp::Reverse(def.fields.len()));
        if named == Some(i) {
            best = Some((i, c, rank));
            break;
        }
        if c.used == 0 && !c.serves_sort {
            continue;
        }
        if best.as_ref().is_none_or(|(_, _, b)| rank > *b) {
            best = Some((i, c, rank));
        }
    }
    match best {
        Some((i, c, _)) => Plan {
            index: Some(i),
            ranges: c.ranges,
            descending: c.serves_sort && q.sort.first().is_some_and(|(_, d)| *d == SortDir::Desc),
            ordered: q.sort.is_empty() || c.serves_sort,
            warning,
        },
        None => Plan {
            index: None,
            ranges: vec![KeyRange::all()],
            descending: false,
            ordered: q.sort.is_empty(),
            warning: warning.or_else(|| Some(NO_INDEX_WARNING.to_owned())),
        },
    }
}

/// Fields narrowed, whether the walk serves the sort, fewer fields first.
type Rank = (usize, bool, std::cmp::Reverse<usize>);

#[derive(Debug)]
struct Candidate {
    ranges: Vec<KeyRange>,
    used: usize,
    serves_sort: bool,
}

fn candidate(def: &IndexDef, conjuncts: &[&Selector], sort: &[(FieldPath, SortDir)]) -> Candidate {
    let mut ranges = vec![KeyRange {
        lo: Vec::new(),
        hi: None,
        point: true,
    }];
    let mut used = 0;
    let mut fixed = 0;
    for (field, _) in &def.fields {
        let Some(set) = field_ranges(field, conjuncts) else {
            break;
        };
        if ranges.len() * set.len() > MAX_RANGES {
            break;
        }
        let mut next = Vec::with_capacity(ranges.len() * set.len());
        for r in &ranges {
            for s in &set {
                let mut lo = r.lo.clone();
                lo.extend_from_slice(&s.lo);
                let hi = match &s.hi {
                    Some(h) => {
                        let mut hi = r.lo.clone();
                        hi.extend_from_slice(h);
                        Some(hi)
                    }
                    None => keycode::prefix_successor(&r.lo),
                };
                next.push(KeyRange {
                    lo,
                    hi,
                    point: s.point,
                });
            }
        }
        ranges = next;
        used += 1;
        if fixed + 1 == used && ranges.len() == 1 && ranges[0].point {
            fixed += 1;
        }
        if !ranges.iter().all(|r| r.point) {
            break;
        }
    }
    if used == 0 {
        ranges = vec![KeyRange::all()];
    }
    let same_dir = sort
        .iter()
        .all(|(_, d)| Some(d) == sort.first().map(|(_, d)| d));
    let serves_sort = !sort.is_empty()
        && same_dir
        && (0..=fixed).any(|j| {
            def.fields.len() - j == sort.len()
                && def.fields[j..]
                    .iter()
                    .zip(sort)
                    .all(|((f, _), (s, _))| f == s)
        });
    Candidate {
        ranges,
        used,
        serves_sort,
    }
}

/// A partial index may answer only when its filter is implied: every conjunct of the filter
/// is a conjunct of the selector. (Naming it in `use_index` also allows it: the client
/// vouches for the filter, as in CouchDB.)
fn partial_is_implied(def: &IndexDef, conjuncts: &[&Selector]) -> bool {
    match &def.partial_filter {
        None => true,
        Some(p) => p.conjuncts().iter().all(|c| conjuncts.contains(c)),
    }
}

/// The ranges (in the encoding of one field's value) that hold every value meeting all
/// top-level conditions on `field`; `None` when there are none.
fn field_ranges(field: &FieldPath, conjuncts: &[&Selector]) -> Option<Vec<KeyRange>> {
    let mut acc: Option<Vec<KeyRange>> = None;
    for c in conjuncts {
        let Selector::Field(path, cond) = c else {
            continue;
        };
        if path != field {
            continue;
        }
        let set = cond_ranges(cond);
        acc = Some(match acc {
            None => set,
            Some(prev) => intersect(&prev, &set),
        });
    }
    acc
}

fn intersect(a: &[KeyRange], b: &[KeyRange]) -> Vec<KeyRange> {
    let mut out: Vec<KeyRange> = a
        .iter()
        .flat_map(|x| b.iter().filter_map(move |y| x.intersect(y)))
        .collect();
    out.sort_by(|x, y| x.lo.cmp(&y.lo));
    out
}

/// Sort by `lo` and merge overlapping ranges.
fn normalize(mut set: Vec<KeyRange>) -> Vec<KeyRange> {
    set.sort_by(|x, y| x.lo.cmp(&y.lo));
    let mut out: Vec<KeyRange> = Vec::with_capacity(set.len());
    for r in set {
        if let Some(last) = out.last_mut() {
            let overlaps = last.hi.as_ref().is_none_or(|h| r.lo < *h);
            if overlaps {
                if last.lo == r.lo && last.hi == r.hi {
                    continue; // the same value twice
                }
                last.hi = match (&last.hi, &r.hi) {
                    (Some(a), Some(b)) => Some(a.clone().max(b.clone())),
                    _ => None,
                };
                last.point = false;
                continue;
            }
        }
        out.push(r);
    }
    out
}

fn type_range(t: JsonType) -> KeyRange {
    let (from, to) = match t {
        JsonType::Null => (TAG_NULL, TAG_NULL + 1),
        JsonType::Boolean => (TAG_NULL + 1, TAG_NUMBER),
        JsonType::Number => (TAG_NUMBER, TAG_STRING),
        JsonType::String => (TAG_STRING, TAG_ARRAY),
        JsonType::Array => (TAG_ARRAY, TAG_OBJECT),
        JsonType::Object => (TAG_OBJECT, TAG_OBJECT + 1),
    };
    KeyRange::tags(from, to)
}

fn cond_ranges(cond: &Cond) -> Vec<KeyRange> {
    let succ = |v: &Value| keycode::prefix_successor(&keycode::encode(v));
    match cond {
        Cond::Eq(v) => vec![KeyRange::point(v)],
        Cond::Gt(v) => match succ(v) {
            Some(lo) => vec![KeyRange::from_to(lo, None)],
            None => Vec::new(),
        },
        Cond::Gte(v) => vec![KeyRange::from_to(keycode::encode(v), None)],
        Cond::Lt(v) => non_empty(KeyRange::from_to(vec![TAG_NULL], Some(keycode::encode(v)))),
        Cond::Lte(v) => non_empty(KeyRange::from_to(vec![TAG_NULL], succ(v))),
        Cond::In(values) => {
            let mut set: Vec<KeyRange> = values.iter().map(KeyRange::point).collect();
            set.push(type_range(JsonType::Array));
            normalize(set)
        }
        Cond::Exists(false) => vec![KeyRange::tags(TAG_MISSING, TAG_NULL)],
        Cond::Exists(true) | Cond::Ne(_) | Cond::Nin(_) | Cond::Not(_) => {
            vec![KeyRange::exists()]
        }
        Cond::Type(t) => vec![type_range(*t)],
        Cond::Size(_) | Cond::All(_) | Cond::ElemMatch(_) | Cond::AllMatch(_) => {
            vec![type_range(JsonType::Array)]
        }
        Cond::KeyMapMatch(_) => vec![type_range(JsonType::Object)],
        Cond::Regex(_) => vec![type_range(JsonType::String)],
        Cond::Mod(..) => vec![type_range(JsonType::Number)],
        Cond::BeginsWith(p) => {
            let mut lo = Vec::new();
            keycode::string_prefix_into(p, &mut lo);
            let hi = keycode::prefix_successor(&lo);
            vec![KeyRange::from_to(lo, hi)]
        }
    }
}

fn non_empty(r: KeyRange) -> Vec<KeyRange> {
    if r.is_empty() { Vec::new() } else { vec![r] }
}

#[cfg(test)]
#[path = "plan_test.rs"]
mod tests;
