//! Mango selectors: parsing (with CouchDB's normalization) and matching.
//!
//! Parsing follows `mango_selector.erl`: implicit `$eq` and `$and`, field names pushed
//! through `$and`/`$or`/`$not`/`$nor` (`{"a": {"$or": [...]}}` is `{"$or": [{"a": ...}]}`),
//! nested objects as dotted paths (`{"a": {"b": 1}}` is `{"a.b": 1}`), and negations pushed
//! down to the conditions (`$not {$gt}` is `$lte`, De Morgan for `$and`/`$or`). A condition on
//! a field holds only when the field exists, except `$exists: false`; so after pushing,
//! `{"$not": {"a": {"$gt": 5}}}` needs `a` to exist, as in CouchDB.
//!
//! Empty lists follow CouchDB's matcher rather than logic: `$and: []`, `$or: []` and
//! `$nor: []` match every document, `$all: []` matches none. Since negation is pushed down
//! structurally (as CouchDB does), `$not` of an empty `$and` or `$or` matches everything too;
//! `$not: {}` has nothing to negate and is refused.

use regex::Regex;
use serde_json::{Map, Value};

use super::{
    collate::{JsonType, cmp, eq},
    path::FieldPath,
};
use crate::{Error, Result};

/// Longest `$regex` pattern accepted, in bytes.
pub const MAX_REGEX_BYTES: usize = 4096;
/// Most conditions and operators one selector may hold (values inside `$in`, `$eq` and the
/// like do not count): evaluation costs this much per document.
pub const MAX_SELECTOR_NODES: usize = 4096;
/// The compiled size all the `$regex`es of one selector may take together, in bytes; each
/// gets an equal share (at most 1 MiB), so a selector of thousands of patterns cannot take
/// gigabytes.
pub const REGEX_BUDGET_BYTES: usize = 8 << 20;
/// The largest share of [`REGEX_BUDGET_BYTES`] one `$regex` may take.
const REGEX_MAX_SHARE: usize = 1 << 20;

/// What is left to spend while parsing one selector.
struct Budget {
    nodes_left: usize,
    /// Compiled size (and lazy-DFA cache) allowed to each `$regex`.
    regex_share: usize,
}

impl Budget {
    fn for_selector(v: &Value) -> Self {
        let regexes = count_regexes(v).max(1);
        Self {
            nodes_left: MAX_SELECTOR_NODES,
            regex_share: (REGEX_BUDGET_BYTES / regexes).min(REGEX_MAX_SHARE),
        }
    }

    fn spend(&mut self) -> Result<()> {
        match self.nodes_left.checked_sub(1) {
            Some(left) => {
                self.nodes_left = left;
                Ok(())
            }
            None => Err(Error::invalid(format!(
                "the selector holds more than {MAX_SELECTOR_NODES} conditions; split the query \
                 or use $in for long lists of values"
            ))),
        }
    }
}

/// How many `$regex` operators `v` may hold (every `"$regex": "<string>"` member at any
/// depth: a literal value that looks like one only lowers each pattern's share).
fn count_regexes(v: &Value) -> usize {
    match v {
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| usize::from(k == "$regex" && v.is_string()) + count_regexes(v))
            .sum(),
        Value::Array(items) => items.iter().map(count_regexes).sum(),
        _ => 0,
    }
}

/// A normalized selector.
#[derive(Debug, Clone, PartialEq)]
pub enum Selector {
    /// Every sub-selector holds (`And(vec![])` matches everything).
    And(Vec<Selector>),
    /// At least one sub-selector holds; `Or(vec![])` matches everything, as CouchDB's
    /// `$or: []` does.
    Or(Vec<Selector>),
    /// The value at `path` exists and meets `cond` (or `cond` is `$exists: false` and it is
    /// missing).
    Field(FieldPath, Cond),
}

/// A condition on one value.
#[derive(Debug, Clone, PartialEq)]
pub enum Cond {
    /// Collates equal.
    Eq(Value),
    /// Collates unequal.
    Ne(Value),
    /// Collates lower.
    Lt(Value),
    /// Collates lower or equal.
    Lte(Value),
    /// Collates higher.
    Gt(Value),
    /// Collates higher or equal.
    Gte(Value),
    /// The field exists (`true`) or not (`false`).
    Exists(bool),
    /// The value has this type.
    Type(JsonType),
    /// Equals one of these; for an array, one of its elements does.
    In(Vec<Value>),
    /// Not `In`.
    Nin(Vec<Value>),
    /// An array of this length.
    Size(u64),
    /// An integer whose remainder by the divisor (sign of the dividend) is the remainder.
    Mod(i64, i64),
    /// A string matching the pattern somewhere.
    Regex(Pattern),
    /// A string beginning with this prefix.
    BeginsWith(String),
    /// An array containing all these values (or equal to the one array given); `All(vec![])`
    /// matches nothing, as CouchDB's `$all: []` does.
    All(Vec<Value>),
    /// An array with at least one element matching.
    ElemMatch(Box<Selector>),
    /// A non-empty array whose elements all match.
    AllMatch(Box<Selector>),
    /// An object with at least one key matching.
    KeyMapMatch(Box<Selector>),
    /// The inner condition does not hold (the field must still exist).
    Not(Box<Cond>),
}

/// A compiled `$regex` (linear time: the `regex` crate has no backtracking).
#[derive(Debug, Clone)]
pub struct Pattern(pub Regex);

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

impl Selector {
    /// The selector that matches every document.
    pub fn all() -> Self {
        Self::And(Vec::new())
    }

    /// Parse a selector object as sent by clients.
    pub fn parse(v: &Value) -> Result<Self> {
        let Value::Object(m) = v else {
            return Err(Error::invalid(format!(
                "a selector must be a JSON object, not {v}"
            )));
        };
        parse_object(
            m,
            &FieldPath::root(),
            Ctx::Top,
            &mut Budget::for_selector(v),
        )
    }

    /// Whether `doc` matches.
    pub fn matches(&self, doc: &Value) -> bool {
        match self {
            Self::And(items) => items.iter().all(|s| s.matches(doc)),
            Self::Or(items) => items.is_empty() || items.iter().any(|s| s.matches(doc)),
            Self::Field(path, cond) => match path.get(doc) {
                None => matches!(cond, Cond::Exists(false)),
                Some(v) => cond.matches(v),
            },
        }
    }

    /// The selector's top-level conjuncts (nested `$and`s flattened).
    pub fn conjuncts(&self) -> Vec<&Selector> {
        let mut out = Vec::new();
        fn walk<'a>(s: &'a Selector, out: &mut Vec<&'a Selector>) {
            match s {
                Selector::And(items) => items.iter().for_each(|i| walk(i, out)),
                other => out.push(other),
            }
        }
        walk(self, &mut out);
        out
    }

    /// Push a negation down by De Morgan, as CouchDB's normalizer does. This is structural,
    /// not logical, for empty lists: `And([])` becomes `Or([])`, which matches everything.
    fn negate(self) -> Self {
        match self {
            Self::And(items) => Self::Or(items.into_iter().map(Self::negate).collect()),
            Self::Or(items) => Self::And(items.into_iter().map(Self::negate).collect()),
            Self::Field(path, cond) => Self::Field(path, cond.negate()),
        }
    }
}

impl Cond {
    /// Whether the (existing) value `v` meets the condition.
    pub fn matches(&self, v: &Value) -> bool {
        match self {
            Self::Eq(a) => eq(v, a),
            Self::Ne(a) => !eq(v, a),
            Self::Lt(a) => cmp(v, a).is_lt(),
            Self::Lte(a) => cmp(v, a).is_le(),
            Self::Gt(a) => cmp(v, a).is_gt(),
            Self::Gte(a) => cmp(v, a).is_ge(),
            Self::Exists(should) => *should,
            Self::Type(t) => JsonType::of(v) == *t,
            Self::In(args) => in_args(v, args),
            Self::Nin(args) => !in_args(v, args),
            Self::Size(n) => v.as_array().is_some_and(|a| a.len() as u64 == *n),
            Self::Mod(d, r) => integer(v).is_some_and(|i| i % i128::from(*d) == i128::from(*r)),
            Self::Regex(p) => v.as_str().is_some_and(|s| p.0.is_match(s)),
            Self::BeginsWith(p) => v.as_str().is_some_and(|s| s.starts_with(p.as_str())),
            Self::All(args) if args.is_empty() => false,
            Self::All(args) => match v {
                Value::Array(items) => {
                    let has_all = args.iter().all(|a| items.iter().any(|i| eq(i, a)));
                    let is_the_one =
                        matches!(args.as_slice(), [one @ Value::Array(_)] if eq(one, v));
                    has_all || is_the_one
                }
                _ => false,
            },
            Self::ElemMatch(s) => v.as_array().is_some_and(|a| a.iter().any(|i| s.matches(i))),
            Self::AllMatch(s) => v
                .as_array()
                .is_some_and(|a| !a.is_empty() && a.iter().all(|i| s.matches(i))),
            Self::KeyMapMatch(s) => v
                .as_object()
                .is_some_and(|m| m.keys().any(|k| s.matches(&Value::String(k.clone())))),
            Self::Not(c) => !c.matches(v),
        }
    }

    fn negate(self) -> Self {
        match self {
            Self::Lt(a) => Self::Gte(a),
            Self::Lte(a) => Self::Gt(a),
            Self::Gt(a) => Self::Lte(a),
            Self::Gte(a) => Self::Lt(a),
            Self::Eq(a) => Self::Ne(a),
            Self::Ne(a) => Self::Eq(a),
            Self::In(a) => Self::Nin(a),
            Self::Nin(a) => Self::In(a),
            Self::Exists(b) => Self::Exists(!b),
            Self::Not(c) => *c,
            other => Self::Not(Box::new(other)),
        }
    }
}

fn in_args(v: &Value, args: &[Value]) -> bool {
    match v {
        Value::Array(items) => args.iter().any(|a| items.iter().any(|i| eq(i, a))),
        _ => args.iter().any(|a| eq(v, a)),
    }
}

fn integer(v: &Value) -> Option<i128> {
    let n = v.as_number()?;
    n.as_i64()
        .map(i128::from)
        .or_else(|| n.as_u64().map(i128::from))
}

/// Where a selector object sits: the top level needs field names for its conditions; the
/// argument of `$elemMatch` and friends may apply conditions to the element itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ctx {
    Top,
    Element,
}

fn parse_object(
    m: &Map<String, Value>,
    path: &FieldPath,
    ctx: Ctx,
    budget: &mut Budget,
) -> Result<Selector> {
    let mut parts = Vec::with_capacity(m.len());
    for (key, arg) in m {
        budget.spend()?;
        parts.push(parse_member(key, arg, path, ctx, budget)?);
    }
    Ok(if parts.len() == 1 {
        parts.pop().unwrap_or_else(Selector::all)
    } else {
        Selector::And(parts)
    })
}

fn parse_member(
    key: &str,
    arg: &Value,
    path: &FieldPath,
    ctx: Ctx,
    budget: &mut Budget,
) -> Result<Selector> {
    if let Some(op) = key.strip_prefix('$') {
        return match op {
            "and" | "or" | "nor" => {
                let items = parse_list(key, arg, path, ctx, budget)?;
                Ok(match op {
                    "and" => Selector::And(items),
                    "or" => Selector::Or(items),
                    _ => Selector::And(items.into_iter().map(Selector::negate).collect()),
                })
            }
            "not" => match arg {
                Value::Object(m) if m.is_empty() => {
                    Err(bad_arg(key, path, "a non-empty selector object", arg))
                }
                Value::Object(m) => Ok(parse_object(m, path, ctx, budget)?.negate()),
                other => Err(bad_arg(key, path, "a selector object", other)),
            },
            _ => {
                if path.is_root() && ctx == Ctx::Top {
                    return Err(Error::invalid(format!(
                        "the operator \"{key}\" is not applied to any field; write \
                         {{\"<field>\": {{\"{key}\": …}}}}"
                    )));
                }
                Ok(Selector::Field(
                    path.clone(),
                    parse_cond(key, arg, path, budget)?,
                ))
            }
        };
    }
    let mut sub = path.clone();
    sub.push_dotted(key)?;
    match arg {
        Value::Object(m) if !m.is_empty() => parse_object(m, &sub, ctx, budget),
        other => Ok(Selector::Field(sub, Cond::Eq(other.clone()))),
    }
}

fn parse_list(
    key: &str,
    arg: &Value,
    path: &FieldPath,
    ctx: Ctx,
    budget: &mut Budget,
) -> Result<Vec<Selector>> {
    let Value::Array(items) = arg else {
        return Err(bad_arg(key, path, "an array of selectors", arg));
    };
    items
        .iter()
        .map(|item| match item {
            Value::Object(m) => {
                budget.spend()?;
                parse_object(m, path, ctx, budget)
            }
            other => Err(bad_arg(key, path, "an array of selector objects", other)),
        })
        .collect()
}

fn sub_selector(
    key: &str,
    arg: &Value,
    path: &FieldPath,
    budget: &mut Budget,
) -> Result<Box<Selector>> {
    match arg {
        Value::Object(m) => Ok(Box::new(parse_object(
            m,
            &FieldPath::root(),
            Ctx::Element,
            budget,
        )?)),
        other => Err(bad_arg(key, path, "a selector object", other)),
    }
}

fn parse_cond(key: &str, arg: &Value, path: &FieldPath, budget: &mut Budget) -> Result<Cond> {
    let array = |what: &str| -> Result<Vec<Value>> {
        match arg {
            Value::Array(a) => Ok(a.clone()),
            other => Err(bad_arg(key, path, what, other)),
        }
    };
    Ok(match key {
        "$eq" => Cond::Eq(arg.clone()),
        "$ne" => Cond::Ne(arg.clone()),
        "$lt" => Cond::Lt(arg.clone()),
        "$lte" => Cond::Lte(arg.clone()),
        "$gt" => Cond::Gt(arg.clone()),
        "$gte" => Cond::Gte(arg.clone()),
        "$exists" => match arg {
            Value::Bool(b) => Cond::Exists(*b),
            other => return Err(bad_arg(key, path, "true or false", other)),
        },
        "$type" => match arg.as_str().and_then(JsonType::parse) {
            Some(t) => Cond::Type(t),
            None => {
                return Err(bad_arg(
                    key,
                    path,
                    "one of \"null\", \"boolean\", \"number\", \"string\", \"array\", \"object\"",
                    arg,
                ));
            }
        },
        "$in" => Cond::In(array("an array of values")?),
        "$nin" => Cond::Nin(array("an array of values")?),
        "$all" => Cond::All(array("an array of values")?),
        "$size" => match arg.as_u64() {
            Some(n) => Cond::Size(n),
            None => return Err(bad_arg(key, path, "a non-negative integer", arg)),
        },
        "$mod" => match arg.as_array().map(Vec::as_slice) {
            Some([d, r]) => match (d.as_i64(), r.as_i64()) {
                (Some(d), Some(r)) if d != 0 => Cond::Mod(d, r),
                _ => {
                    return Err(bad_arg(
                        key,
                        path,
                        "[divisor, remainder] with integers and a non-zero divisor",
                        arg,
                    ));
                }
            },
            _ => return Err(bad_arg(key, path, "[divisor, remainder]", arg)),
        },
        "$regex" => match arg {
            Value::String(p) => Cond::Regex(compile(p, path, budget.regex_share)?),
            other => return Err(bad_arg(key, path, "a regular expression string", other)),
        },
        "$beginsWith" => match arg {
            Value::String(p) => Cond::BeginsWith(p.clone()),
            other => return Err(bad_arg(key, path, "a string", other)),
        },
        "$elemMatch" => Cond::ElemMatch(sub_selector(key, arg, path, budget)?),
        "$allMatch" => Cond::AllMatch(sub_selector(key, arg, path, budget)?),
        "$keyMapMatch" => Cond::KeyMapMatch(sub_selector(key, arg, path, budget)?),
        "$text" | "$where" | "$geoWithin" | "$geoIntersects" | "$near" | "$nearSphere" => {
            return Err(Error::invalid(format!(
                "the operator \"{key}\" is not supported{}",
                at(path)
            )));
        }
        _ => {
            return Err(Error::invalid(format!(
                "unknown operator \"{key}\" in selector{}; see docs/data.md for the operators",
                at(path)
            )));
        }
    })
}

fn compile(pattern: &str, path: &FieldPath, share: usize) -> Result<Pattern> {
    if pattern.len() > MAX_REGEX_BYTES {
        return Err(Error::invalid(format!(
            "the $regex{} is longer than {MAX_REGEX_BYTES} bytes",
            at(path)
        )));
    }
    regex::RegexBuilder::new(pattern)
        .size_limit(share)
        .dfa_size_limit(share)
        .build()
        .map(Pattern)
        .map_err(|e| match e {
            regex::Error::CompiledTooBig(_) => Error::invalid(format!(
                "the $regex {pattern:?}{} compiles to more than its share ({share} bytes) of \
                 the {} MiB all the $regexes of one selector may take together; use fewer or \
                 simpler patterns",
                at(path),
                REGEX_BUDGET_BYTES >> 20
            )),
            other => {
                let detail = match other {
                    regex::Error::Syntax(s) => s.lines().last().unwrap_or_default().to_owned(),
                    other => other.to_string(),
                };
                Error::invalid(format!(
                    "the $regex {pattern:?}{} is not a valid regular expression: {detail}",
                    at(path)
                ))
            }
        })
}

fn at(path: &FieldPath) -> String {
    if path.is_root() {
        String::new()
    } else {
        format!(" at \"{path}\"")
    }
}

fn bad_arg(op: &str, path: &FieldPath, expected: &str, got: &Value) -> Error {
    let mut shown = got.to_string();
    if shown.len() > 64 {
        shown.truncate(shown.floor_char_boundary(64));
        shown.push('…');
    }
    Error::invalid(format!(
        "the argument of \"{op}\"{} must be {expected}, not {shown}",
        at(path)
    ))
}

#[cfg(test)]
#[path = "selector_test.rs"]
mod tests;
