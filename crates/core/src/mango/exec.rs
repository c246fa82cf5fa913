//! Answering a query from candidates: every adapter feeds the documents its plan walks to a
//! [`Collector`], which re-checks the selector, sorts, skips, limits and projects, so every
//! adapter answers alike.

use std::{cmp::Ordering, collections::BinaryHeap};

use serde_json::Value;

use super::{
    keycode,
    plan::Plan,
    query::{FindQuery, SortDir},
};
use crate::{Error, Result};

/// Execution statistics of a query, as CouchDB reports them.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutionStats {
    /// Documents read and checked against the selector.
    pub docs_examined: u64,
    /// Documents returned.
    pub results_returned: u64,
    /// Wall time spent answering, milliseconds.
    pub execution_time_ms: f64,
    /// The index used, `None` for a scan of every document.
    pub index: Option<String>,
}

/// The answer to a [`FindQuery`].
#[derive(Debug, Clone, PartialEq)]
pub struct FindOutcome {
    /// The matching documents, sorted, skipped, limited and projected.
    pub docs: Vec<Value>,
    /// A CouchDB-style warning, e.g. when no index was usable.
    pub warning: Option<String>,
    /// Present when the query asked for statistics.
    pub stats: Option<ExecutionStats>,
}

struct Ranked {
    key: Vec<u8>,
    doc: Value,
}

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl Eq for Ranked {}
impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key.cmp(&other.key)
    }
}

/// Gathers the answer from candidate documents offered in the plan's walk order.
pub struct Collector<'q> {
    q: &'q FindQuery,
    ordered: bool,
    want: usize,
    matched: usize,
    docs: Vec<Value>,
    heap: BinaryHeap<Ranked>,
    examined: u64,
}

impl<'q> Collector<'q> {
    /// A collector for `q`; `ordered` says candidates arrive in the answer's order (see
    /// [`Plan::ordered`]).
    pub fn new(q: &'q FindQuery, ordered: bool) -> Self {
        Self {
            q,
            ordered,
            want: q.skip.saturating_add(q.limit),
            matched: 0,
            docs: Vec::new(),
            heap: BinaryHeap::new(),
            examined: 0,
        }
    }

    /// Whether more candidates can change the answer.
    pub fn wants_more(&self) -> bool {
        self.q.limit > 0 && !(self.ordered && self.matched >= self.want)
    }

    /// Offer a candidate; returns [`Collector::wants_more`].
    pub fn offer(&mut self, doc: Value) -> bool {
        if !self.wants_more() {
            return false;
        }
        self.examined += 1;
        if !self.q.selector.matches(&doc) {
            return true;
        }
        self.matched += 1;
        if self.ordered {
            if self.matched > self.q.skip {
                self.docs.push(self.q.project(doc));
            }
        } else {
            let key = sort_key(self.q, &doc);
            self.heap.push(Ranked { key, doc });
            if self.heap.len() > self.want {
                self.heap.pop();
            }
        }
        self.wants_more()
    }

    /// Offer a candidate as stored JSON text.
    pub fn offer_json(&mut self, text: &str) -> Result<bool> {
        if !self.wants_more() {
            return Ok(false);
        }
        let doc: Value = serde_json::from_str(text)
            .map_err(|e| Error::internal(format!("a stored document is not JSON: {e}")))?;
        Ok(self.offer(doc))
    }

    /// Documents checked against the selector so far.
    pub fn examined(&self) -> u64 {
        self.examined
    }

    /// The answer, with the plan's warning and, when asked, statistics.
    pub fn finish(self, plan: &Plan, index: Option<String>, elapsed_ms: f64) -> FindOutcome {
        let q = self.q;
        let docs: Vec<Value> = if self.ordered {
            self.docs
        } else {
            self.heap
                .into_sorted_vec()
                .into_iter()
                .skip(q.skip)
                .map(|r| q.project(r.doc))
                .collect()
        };
        let stats = q.execution_stats.then_some(ExecutionStats {
            docs_examined: self.examined,
            results_returned: docs.len() as u64,
            execution_time_ms: elapsed_ms,
            index,
        });
        FindOutcome {
            docs,
            warning: plan.warning.clone(),
            stats,
        }
    }
}

/// The bytes that order `doc` in the answer: each sort key's encoding (inverted when
/// descending), then `_id` in the direction of the first key.
fn sort_key(q: &FindQuery, doc: &Value) -> Vec<u8> {
    let mut key = Vec::with_capacity(32);
    for (path, dir) in &q.sort {
        let start = key.len();
        keycode::encode_opt_into(path.get(doc), &mut key);
        if *dir == SortDir::Desc {
            keycode::invert_from(&mut key, start);
        }
    }
    let start = key.len();
    keycode::encode_opt_into(doc.get("_id"), &mut key);
    if q.sort.first().is_some_and(|(_, d)| *d == SortDir::Desc) {
        keycode::invert_from(&mut key, start);
    }
    key
}
