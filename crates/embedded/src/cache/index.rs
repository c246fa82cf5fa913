//! The in-memory index of every cache entry: key, size, expiry and recency, and the value
//! itself — always in memory-only mode, for recently used entries in durable mode.
//!
//! Writes are planned here (is the key live? which entries must be evicted to make room?),
//! carried out on the store, then applied here. In durable mode only the log's writer
//! thread plans and applies, so a plan stays valid while its records are written; in
//! memory-only mode planning and applying happen under one lock. In durable mode every entry
//! also knows where its value lies in the log.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    ops::Bound,
};

use quintet_core::{
    Error, InstanceId, InstanceName, Result,
    cache::{CacheKey, CacheValue, Glob, Ttl, existing_key, missing_key},
    ports::cache::SetMode,
};

use super::{
    index_key::IndexKey,
    lru::{Lru, NIL, Slot},
};

/// What a write wants.
#[derive(Debug, Clone, Copy)]
pub(crate) enum PutOp {
    /// Add: a live entry is a conflict; expire after `ttl` (never when `None`).
    Add(Option<Ttl>),
    /// Set: `ttl` `None` keeps a live entry's expiry.
    Set(Option<Ttl>, SetMode),
}

/// An entry chosen for removal: expired, evicted to make room, or deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Victim {
    /// Its instance.
    pub inst: InstanceId,
    /// Its key.
    pub key: IndexKey,
}

/// How to carry out a write.
#[derive(Debug)]
pub(crate) struct PutPlan {
    /// The entry's expiry instant, `None` for never.
    pub expires_ms: Option<i64>,
    /// Entries to remove first to stay within the size bound.
    pub victims: Vec<Victim>,
}

/// Where a value lies in the cache log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    /// Offset of its first byte.
    pub offset: u64,
    /// Its length in bytes.
    pub len: u64,
}

/// Where a value is: in memory, or only in the log.
#[derive(Debug, Clone)]
pub(crate) enum Stored {
    /// Held in memory.
    Held(CacheValue),
    /// To be read from the log.
    Logged(Span),
}

/// A live entry as the log's compaction copies it.
#[derive(Debug)]
pub(crate) struct Logged {
    /// Its instance.
    pub inst: InstanceId,
    /// Its key.
    pub key: IndexKey,
    /// Its expiry instant.
    pub expires_ms: Option<i64>,
    /// Its value in the log.
    pub span: Span,
}

/// What a read found.
#[derive(Debug)]
pub(crate) enum Lookup {
    /// No live entry.
    Missing,
    /// A live entry.
    Live {
        /// The value, or where to read it.
        value: Stored,
        /// The entry's version, to hold a value read from disk only if still current.
        version: u64,
    },
}

/// Where values live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Values {
    /// Every value in memory (memory-only mode).
    All,
    /// Values on disk; the most recently used ones also in memory, up to this many bytes.
    Recent(u64),
}

#[derive(Debug)]
struct Meta {
    expires_ms: Option<i64>,
    size: u64,
    /// Place in the recency order (with a size bound).
    slot: Slot,
    value: Option<CacheValue>,
    /// Place in the order of values held in memory (durable mode, value held).
    hot: Slot,
    version: u64,
    /// Offset of the value in the log (durable mode).
    offset: u64,
}

impl Meta {
    fn live(&self, now: i64) -> bool {
        self.expires_ms.is_none_or(|e| now < e)
    }

    /// Where the value lies in the log (its size is the entry's less the key's).
    fn span(&self, key_len: usize) -> Span {
        Span {
            offset: self.offset,
            len: self.size.saturating_sub(key_len as u64),
        }
    }

    fn stored(&self, key_len: usize) -> Stored {
        match &self.value {
            Some(v) => Stored::Held(v.clone()),
            None => Stored::Logged(self.span(key_len)),
        }
    }
}

type Shelf = BTreeMap<IndexKey, Meta>;

/// A key a scan matched, with its value or where to read it.
/// A live entry a scan found: its key, where its value is, and its expiry.
pub(crate) type Match = (IndexKey, Stored, Option<i64>);

/// Values held in memory in durable mode, most recently used last.
#[derive(Debug, Default)]
struct Held {
    order: Lru,
    bytes: u64,
    budget: u64,
}

/// Every entry of every cache instance of the server.
#[derive(Debug)]
pub(crate) struct Index {
    shelves: HashMap<InstanceId, Shelf>,
    /// Instances dropped since start: late writes to them must not resurrect them.
    dropped: HashSet<InstanceId>,
    /// Recency of every entry, kept only when there is a size bound.
    recency: Option<Lru>,
    /// `None` when every value is held (memory-only mode).
    held: Option<Held>,
    /// Entries with an expiry, soonest first.
    expiring: BTreeSet<(i64, InstanceId, IndexKey)>,
    bytes: u64,
    entries: u64,
    max_bytes: Option<u64>,
    version: u64,
    /// End of what the log holds (durable mode): values at or beyond it are still only in
    /// memory and must not be let go.
    written: u64,
}

/// Bytes an entry counts for: its key plus its value's JSON text.
pub(crate) fn entry_size(key: &str, value_len: usize) -> u64 {
    (key.len() + value_len) as u64
}

/// Let go of the value `meta` holds, if any.
fn release(held: &mut Option<Held>, meta: &mut Meta) {
    if let (Some(h), Some(v)) = (held.as_mut(), meta.value.as_ref()) {
        h.order.remove(meta.hot);
        h.bytes -= v.len() as u64;
        meta.hot = NIL;
        meta.value = None;
    }
}

/// Hold `value` for the entry `(inst, key)` described by `meta`.
fn hold(
    held: &mut Option<Held>,
    meta: &mut Meta,
    inst: InstanceId,
    key: &IndexKey,
    value: Option<CacheValue>,
) {
    release(held, meta);
    match (held.as_mut(), value) {
        (None, value) => meta.value = value,
        (Some(h), Some(v)) => {
            meta.hot = h.order.push(inst, key.clone());
            h.bytes += v.len() as u64;
            meta.value = Some(v);
        }
        (Some(_), None) => {}
    }
}

impl Index {
    /// An empty index; `max_bytes` bounds the sum of entry sizes; `values` says where
    /// values live.
    pub(crate) fn new(max_bytes: Option<u64>, values: Values) -> Self {
        Self {
            shelves: HashMap::new(),
            dropped: HashSet::new(),
            recency: max_bytes.map(|_| Lru::default()),
            held: match values {
                Values::All => None,
                Values::Recent(budget) => Some(Held {
                    budget,
                    ..Held::default()
                }),
            },
            expiring: BTreeSet::new(),
            bytes: 0,
            entries: 0,
            max_bytes,
            version: 0,
            written: u64::MAX,
        }
    }

    /// The same settings, no entries; for rebuilding.
    pub(crate) fn emptied(&self) -> Self {
        let values = match &self.held {
            None => Values::All,
            Some(h) => Values::Recent(h.budget),
        };
        let mut fresh = Self::new(self.max_bytes, values);
        fresh.dropped = self.dropped.clone();
        fresh.version = self.version;
        fresh.written = self.written;
        fresh
    }

    /// Entries held (live or not yet reclaimed), their bytes, and the bytes of values held
    /// in memory.
    pub(crate) fn stats(&self) -> (u64, u64, u64) {
        let in_memory = match &self.held {
            Some(h) => h.bytes,
            None => self.bytes,
        };
        (self.entries, self.bytes, in_memory)
    }

    /// A new, empty instance.
    pub(crate) fn create_shelf(&mut self, inst: InstanceId) {
        self.dropped.remove(&inst);
        self.shelves.entry(inst).or_default();
    }

    /// Forget instance `inst` and everything in it.
    pub(crate) fn drop_shelf(&mut self, inst: InstanceId) {
        self.dropped.insert(inst);
        let Some(shelf) = self.shelves.remove(&inst) else {
            return;
        };
        for (key, mut meta) in shelf {
            self.forget(inst, &key, &mut meta);
        }
    }

    /// The instances with entries (or created since start).
    pub(crate) fn instances(&self) -> impl Iterator<Item = InstanceId> + '_ {
        self.shelves.keys().copied()
    }

    /// Drop every instance `live` says no to; returns how many.
    pub(crate) fn retain(&mut self, live: impl Fn(InstanceId) -> bool) -> usize {
        let orphans: Vec<InstanceId> = self
            .shelves
            .keys()
            .filter(|id| !live(**id))
            .copied()
            .collect();
        for id in &orphans {
            self.drop_shelf(*id);
        }
        orphans.len()
    }

    /// Record an entry read back from the log (its value stays there, at `offset`).
    pub(crate) fn load(
        &mut self,
        inst: InstanceId,
        key: &str,
        size: u64,
        expires: Option<i64>,
        offset: u64,
    ) {
        self.create_shelf(inst);
        self.upsert(inst, &IndexKey::new(key), size, expires, None, offset);
    }

    /// Forget which instances were dropped: after a start-up, the registry says which
    /// instances exist (and sweeps the others).
    pub(crate) fn forget_dropped(&mut self) {
        self.dropped.clear();
    }

    /// Every entry with where its value lies, for a compaction of the log.
    pub(crate) fn logged(&self) -> Vec<Logged> {
        let mut all = Vec::with_capacity(usize::try_from(self.entries).unwrap_or(0));
        for (inst, shelf) in &self.shelves {
            for (key, meta) in shelf {
                all.push(Logged {
                    inst: *inst,
                    key: key.clone(),
                    expires_ms: meta.expires_ms,
                    span: meta.span(key.as_bytes().len()),
                });
            }
        }
        all
    }

    /// Move every entry's value to `to(offset)`: the log was rewritten.
    pub(crate) fn relocate(&mut self, to: impl Fn(u64) -> u64) {
        for shelf in self.shelves.values_mut() {
            for meta in shelf.values_mut() {
                meta.offset = to(meta.offset);
            }
        }
    }

    /// The live entry under `key`, marking it used.
    pub(crate) fn lookup(&mut self, inst: InstanceId, key: &str, now: i64) -> Lookup {
        let Some(meta) = self.shelves.get(&inst).and_then(|s| s.get(key.as_bytes())) else {
            return Lookup::Missing;
        };
        if !meta.live(now) {
            return Lookup::Missing;
        }
        if let Some(lru) = &mut self.recency {
            lru.touch(meta.slot);
        }
        if let (Some(h), Some(_)) = (&mut self.held, &meta.value) {
            h.order.touch(meta.hot);
        }
        Lookup::Live {
            value: meta.stored(key.len()),
            version: meta.version,
        }
    }

    /// When the live entry `key` expires: `None` when there is none, `Some(None)` when it
    /// never does. Not a use: recency is left alone.
    pub(crate) fn expiry(&self, inst: InstanceId, key: &str, now: i64) -> Option<Option<i64>> {
        let meta = self.shelves.get(&inst)?.get(key.as_bytes())?;
        meta.live(now).then_some(meta.expires_ms)
    }

    /// Hold `value`, just read from disk, for the entry `key` if it was not written since
    /// `version` was looked up.
    pub(crate) fn hold_read(
        &mut self,
        inst: InstanceId,
        key: &str,
        version: u64,
        value: CacheValue,
    ) {
        let Some(held) = &self.held else {
            return;
        };
        if value.len() as u64 > held.budget {
            return;
        }
        let k = IndexKey::new(key);
        let Some(meta) = self
            .shelves
            .get_mut(&inst)
            .and_then(|s| s.get_mut(key.as_bytes()))
        else {
            return;
        };
        if meta.version != version || meta.value.is_some() {
            return;
        }
        hold(&mut self.held, meta, inst, &k, Some(value));
        self.shed();
    }

    /// Decide how to write `key` (of `size` bytes) at `now`, or refuse.
    pub(crate) fn plan_put(
        &self,
        inst: InstanceId,
        name: &InstanceName,
        key: &CacheKey,
        size: u64,
        now: i64,
        op: PutOp,
    ) -> Result<PutPlan> {
        if self.dropped.contains(&inst) {
            return Err(Error::not_found(format!(
                "cache instance \"{name}\" does not exist; create it with PUT to its path"
            )));
        }
        let shelf = self.shelves.get(&inst);
        let current = shelf.and_then(|s| s.get(key.as_str().as_bytes()));
        let live = current.filter(|m| m.live(now));
        let expires_ms = match op {
            PutOp::Add(_) if live.is_some() => return Err(existing_key(name, key)),
            PutOp::Set(_, SetMode::UpdateExisting) if live.is_none() => {
                return Err(missing_key(name, key));
            }
            PutOp::Add(ttl) => ttl.map(|t| t.expires_at(now)),
            PutOp::Set(Some(ttl), _) => Some(ttl.expires_at(now)),
            PutOp::Set(None, _) => live.and_then(|m| m.expires_ms),
        };
        let victims = match self.max_bytes {
            None => Vec::new(),
            Some(max) => {
                if size > max {
                    return Err(Error::TooLarge(format!(
                        "the entry takes {size} bytes (key plus value), more than the whole \
                         cache may hold ({max} bytes, set by --cache-max-bytes)"
                    )));
                }
                let after = self.bytes - current.map_or(0, |m| m.size) + size;
                let excess = after.saturating_sub(max);
                self.pick_victims(excess, now, Some((inst, key.as_str().as_bytes())))
            }
        };
        Ok(PutPlan {
            expires_ms,
            victims,
        })
    }

    /// Record a planned write whose value lies at `offset` in the log (0 when memory-only).
    /// `value` is held in memory; in durable mode [`Index::shed`] later lets the least
    /// recently used values go, once the log holds them.
    pub(crate) fn apply_put(
        &mut self,
        inst: InstanceId,
        key: &CacheKey,
        size: u64,
        plan: &PutPlan,
        value: CacheValue,
        offset: u64,
    ) {
        self.remove_victims(&plan.victims);
        self.upsert(
            inst,
            &IndexKey::new(key.as_str()),
            size,
            plan.expires_ms,
            Some(value),
            offset,
        );
    }

    /// Refuse a remove of a key without a live entry.
    pub(crate) fn plan_remove(
        &self,
        inst: InstanceId,
        name: &InstanceName,
        key: &CacheKey,
        now: i64,
    ) -> Result<()> {
        let live = self
            .shelves
            .get(&inst)
            .and_then(|s| s.get(key.as_str().as_bytes()))
            .is_some_and(|m| m.live(now));
        if live {
            Ok(())
        } else {
            Err(missing_key(name, key))
        }
    }

    /// Remove entries (expired, evicted or deleted).
    pub(crate) fn remove_victims(&mut self, victims: &[Victim]) {
        for v in victims {
            let removed = self
                .shelves
                .get_mut(&v.inst)
                .and_then(|s| s.remove(v.key.as_bytes()));
            if let Some(mut meta) = removed {
                self.forget(v.inst, &v.key, &mut meta);
            }
        }
    }

    /// Up to `limit` entries to reclaim: expired ones, soonest first, then the least
    /// recently used while the bound is exceeded (after a restart with a smaller bound).
    pub(crate) fn plan_reap(&self, now: i64, limit: usize) -> Vec<Victim> {
        let mut victims: Vec<Victim> = self
            .expiring
            .iter()
            .take_while(|(at, _, _)| *at <= now)
            .take(limit)
            .map(|(_, inst, key)| Victim {
                inst: *inst,
                key: key.clone(),
            })
            .collect();
        if let (Some(max), Some(lru)) = (self.max_bytes, &self.recency) {
            let freed: u64 = victims.iter().map(|v| self.size_of(v)).sum();
            let mut excess = self.bytes.saturating_sub(max).saturating_sub(freed);
            for (inst, key) in lru.oldest_first() {
                if excess == 0 || victims.len() >= limit {
                    break;
                }
                let v = Victim {
                    inst,
                    key: key.clone(),
                };
                if self.is_expired(&v, now) {
                    continue; // already chosen above, or will be on the next round
                }
                excess = excess.saturating_sub(self.size_of(&v));
                victims.push(v);
            }
        }
        victims
    }

    /// Live keys of `inst` matching `glob`, in key order, starting after `after`; looks at
    /// no more than `budget` keys (at least one). Returns the matches with their values
    /// when held in memory and, when the budget ran out first, the key to resume after.
    /// The bytes of the live entries of instance `inst` at `now`.
    /// The live entries of `inst` at `now`, and the bytes they count for.
    pub(crate) fn instance_usage(&self, inst: InstanceId, now: i64) -> (u64, u64) {
        self.shelves.get(&inst).map_or((0, 0), |shelf| {
            shelf
                .values()
                .filter(|m| m.live(now))
                .fold((0, 0), |(n, bytes), m| (n + 1, bytes + m.size))
        })
    }

    pub(crate) fn scan(
        &self,
        inst: InstanceId,
        glob: &Glob,
        now: i64,
        after: Option<&IndexKey>,
        budget: usize,
    ) -> (Vec<Match>, Option<IndexKey>) {
        let Some(shelf) = self.shelves.get(&inst) else {
            return (Vec::new(), None);
        };
        let prefix = glob.literal_prefix().as_bytes();
        let start: Bound<&[u8]> = match after {
            Some(k) if k.as_bytes() >= prefix => Bound::Excluded(k.as_bytes()),
            _ => Bound::Included(prefix),
        };
        let mut found = Vec::new();
        let mut last: Option<&IndexKey> = None;
        for (seen, (key, meta)) in shelf
            .range::<[u8], _>((start, Bound::Unbounded))
            .enumerate()
        {
            let bytes = key.as_bytes();
            if !(bytes.len() >= prefix.len()
                && quintet_core::cache::glob::same(&bytes[..prefix.len()], prefix))
            {
                break;
            }
            if seen == budget.max(1) {
                // Out of budget: resume after the last key looked at.
                return (found, last.cloned());
            }
            last = Some(key);
            if glob.matches_bytes(bytes) && meta.live(now) {
                found.push((key.clone(), meta.stored(bytes.len()), meta.expires_ms));
            }
            if glob.is_exact() {
                break; // the only possible match is the first key of the range
            }
        }
        (found, None)
    }

    fn meta(&self, v: &Victim) -> Option<&Meta> {
        self.shelves
            .get(&v.inst)
            .and_then(|s| s.get(v.key.as_bytes()))
    }

    fn size_of(&self, v: &Victim) -> u64 {
        self.meta(v).map_or(0, |m| m.size)
    }

    fn is_expired(&self, v: &Victim, now: i64) -> bool {
        self.meta(v).is_some_and(|m| !m.live(now))
    }

    /// Entries whose removal frees at least `excess` bytes, sparing `spare`: expired entries
    /// first, then the least recently used.
    fn pick_victims(
        &self,
        excess: u64,
        now: i64,
        spare: Option<(InstanceId, &[u8])>,
    ) -> Vec<Victim> {
        let mut victims = Vec::new();
        if excess == 0 {
            return victims;
        }
        let spared = |inst: InstanceId, key: &IndexKey| {
            spare.is_some_and(|(i, k)| i == inst && k == key.as_bytes())
        };
        let mut freed = 0;
        for (at, inst, key) in &self.expiring {
            if *at > now || freed >= excess {
                break;
            }
            if spared(*inst, key) {
                continue;
            }
            let v = Victim {
                inst: *inst,
                key: key.clone(),
            };
            freed += self.size_of(&v);
            victims.push(v);
        }
        if let Some(lru) = &self.recency {
            for (inst, key) in lru.oldest_first() {
                if freed >= excess {
                    break;
                }
                let v = Victim {
                    inst,
                    key: key.clone(),
                };
                if spared(inst, key) || self.is_expired(&v, now) {
                    continue;
                }
                freed += self.size_of(&v);
                victims.push(v);
            }
        }
        victims
    }

    fn upsert(
        &mut self,
        inst: InstanceId,
        key: &IndexKey,
        size: u64,
        expires_ms: Option<i64>,
        value: Option<CacheValue>,
        offset: u64,
    ) {
        self.version += 1;
        let version = self.version;
        let shelf = self.shelves.entry(inst).or_default();
        if let Some(meta) = shelf.get_mut(key.as_bytes()) {
            self.bytes = self.bytes - meta.size + size;
            if meta.expires_ms != expires_ms {
                if let Some(old) = meta.expires_ms {
                    self.expiring.remove(&(old, inst, key.clone()));
                }
                if let Some(new) = expires_ms {
                    self.expiring.insert((new, inst, key.clone()));
                }
            }
            meta.size = size;
            meta.expires_ms = expires_ms;
            meta.version = version;
            meta.offset = offset;
            hold(&mut self.held, meta, inst, key, value);
            if let Some(lru) = &mut self.recency {
                lru.touch(meta.slot);
            }
            return;
        }
        let slot = match &mut self.recency {
            Some(lru) => lru.push(inst, key.clone()),
            None => NIL,
        };
        if let Some(at) = expires_ms {
            self.expiring.insert((at, inst, key.clone()));
        }
        let mut meta = Meta {
            expires_ms,
            size,
            slot,
            value: None,
            hot: NIL,
            version,
            offset,
        };
        hold(&mut self.held, &mut meta, inst, key, value);
        shelf.insert(key.clone(), meta);
        self.bytes += size;
        self.entries += 1;
    }

    /// The log now holds everything before `end`.
    pub(crate) fn set_written(&mut self, end: u64) {
        self.written = end;
    }

    /// Let go of the least recently used values held in memory beyond the budget, but not
    /// of a value the log does not hold yet (newer ones are let go once it does).
    pub(crate) fn shed(&mut self) {
        loop {
            let Some(h) = &self.held else {
                return;
            };
            if h.bytes <= h.budget {
                return;
            }
            let Some((inst, key)) = h.order.oldest_first().next().map(|(i, k)| (i, k.clone()))
            else {
                return;
            };
            match self
                .shelves
                .get_mut(&inst)
                .and_then(|s| s.get_mut(key.as_bytes()))
            {
                Some(meta) if meta.offset < self.written => release(&mut self.held, meta),
                _ => return, // not written yet (or, cannot happen, held by no entry)
            }
        }
    }

    /// Account for an entry already taken off its shelf.
    fn forget(&mut self, inst: InstanceId, key: &IndexKey, meta: &mut Meta) {
        if let Some(at) = meta.expires_ms {
            self.expiring.remove(&(at, inst, key.clone()));
        }
        if let Some(lru) = &mut self.recency {
            lru.remove(meta.slot);
        }
        release(&mut self.held, meta);
        self.bytes -= meta.size;
        self.entries -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: InstanceId = InstanceId(1);
    const B: InstanceId = InstanceId(2);

    fn name() -> InstanceName {
        "c".parse().unwrap()
    }

    fn key(s: &str) -> CacheKey {
        s.parse().unwrap()
    }

    fn ttl(s: &str) -> Option<Ttl> {
        Some(s.parse().unwrap())
    }

    /// Plan and apply a write as the memory-only mode does.
    fn put(
        ix: &mut Index,
        inst: InstanceId,
        k: &str,
        size: u64,
        now: i64,
        op: PutOp,
    ) -> Result<Vec<String>> {
        let k = key(k);
        let plan = ix.plan_put(inst, &name(), &k, size, now, op)?;
        ix.apply_put(inst, &k, size, &plan, CacheValue::from_stored("{}"), 0);
        Ok(plan
            .victims
            .iter()
            .map(|v| v.key.as_str().to_owned())
            .collect())
    }

    fn live(ix: &mut Index, inst: InstanceId, k: &str, now: i64) -> bool {
        matches!(ix.lookup(inst, k, now), Lookup::Live { .. })
    }

    #[test]
    fn sizes_add_up_through_upserts_and_removals() {
        let mut ix = Index::new(None, Values::All);
        put(&mut ix, A, "a", 10, 0, PutOp::Add(None)).unwrap();
        put(&mut ix, A, "b", 20, 0, PutOp::Add(ttl("1s"))).unwrap();
        put(&mut ix, B, "a", 5, 0, PutOp::Add(None)).unwrap();
        assert_eq!((ix.stats().0, ix.stats().1), (3, 35));
        put(&mut ix, A, "a", 4, 0, PutOp::Set(None, SetMode::Upsert)).unwrap();
        assert_eq!((ix.stats().0, ix.stats().1), (3, 29));
        ix.remove_victims(&[Victim {
            inst: A,
            key: IndexKey::new("b"),
        }]);
        assert_eq!((ix.stats().0, ix.stats().1), (2, 9));
        assert!(ix.expiring.is_empty(), "the expiry entry went with it");
        ix.drop_shelf(B);
        assert_eq!((ix.stats().0, ix.stats().1), (1, 4));
    }

    #[test]
    fn a_full_cache_evicts_the_least_recently_used() {
        let mut ix = Index::new(Some(100), Values::All);
        for k in ["a", "b", "c", "d"] {
            assert!(
                put(&mut ix, A, k, 25, 0, PutOp::Add(None))
                    .unwrap()
                    .is_empty()
            );
        }
        assert!(live(&mut ix, A, "a", 0)); // a is now the most recently used
        let evicted = put(&mut ix, B, "e", 30, 0, PutOp::Add(None)).unwrap();
        assert_eq!(
            evicted,
            ["b", "c"],
            "oldest first, until the new entry fits"
        );
        assert_eq!((ix.stats().0, ix.stats().1), (3, 80));
        assert!(!live(&mut ix, A, "b", 0));
        // A write is a use too.
        put(&mut ix, A, "d", 25, 0, PutOp::Set(None, SetMode::Upsert)).unwrap();
        let evicted = put(&mut ix, B, "f", 50, 0, PutOp::Add(None)).unwrap();
        assert_eq!(evicted, ["a", "e"]);
    }

    #[test]
    fn eviction_takes_expired_entries_first_and_spares_the_written_key() {
        let mut ix = Index::new(Some(100), Values::All);
        put(&mut ix, A, "old", 40, 0, PutOp::Add(None)).unwrap();
        put(&mut ix, A, "brief", 40, 0, PutOp::Add(ttl("1s"))).unwrap();
        let evicted = put(&mut ix, A, "new", 40, 1_000, PutOp::Add(None)).unwrap();
        assert_eq!(
            evicted,
            ["brief"],
            "the expired entry goes before the older live one"
        );
        // Growing an entry evicts others, never itself.
        let evicted = put(
            &mut ix,
            A,
            "new",
            70,
            1_000,
            PutOp::Set(None, SetMode::Upsert),
        )
        .unwrap();
        assert_eq!(evicted, ["old"]);
        assert_eq!((ix.stats().0, ix.stats().1), (1, 70));
    }

    #[test]
    fn an_entry_larger_than_the_bound_is_refused_and_changes_nothing() {
        let mut ix = Index::new(Some(100), Values::All);
        put(&mut ix, A, "a", 50, 0, PutOp::Add(None)).unwrap();
        let e = put(&mut ix, A, "b", 101, 0, PutOp::Add(None)).unwrap_err();
        assert_eq!(
            e,
            Error::TooLarge(
                "the entry takes 101 bytes (key plus value), more than the whole cache may \
                 hold (100 bytes, set by --cache-max-bytes)"
                    .into()
            )
        );
        assert_eq!((ix.stats().0, ix.stats().1), (1, 50));
        assert!(put(&mut ix, A, "b", 100, 0, PutOp::Add(None)).is_ok());
        assert_eq!((ix.stats().0, ix.stats().1), (1, 100));
    }

    #[test]
    fn reap_takes_expired_entries_soonest_first_and_trims_to_the_bound() {
        let mut ix = Index::new(None, Values::All);
        put(&mut ix, A, "later", 1, 0, PutOp::Add(ttl("2s"))).unwrap();
        put(&mut ix, A, "sooner", 1, 0, PutOp::Add(ttl("1s"))).unwrap();
        put(&mut ix, B, "never", 1, 0, PutOp::Add(None)).unwrap();
        assert!(ix.plan_reap(999, 10).is_empty());
        let keys = |v: Vec<Victim>| {
            v.iter()
                .map(|v| v.key.as_str().to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(keys(ix.plan_reap(5_000, 10)), ["sooner", "later"]);
        assert_eq!(keys(ix.plan_reap(5_000, 1)), ["sooner"]);

        // A bound lowered since the entries were stored (a restart): trimmed, oldest first.
        let mut ix = Index::new(Some(10), Values::All);
        for k in ["a", "b", "c", "d"] {
            ix.load(A, k, 4, None, 0);
        }
        let victims = ix.plan_reap(0, 10);
        assert_eq!(keys(victims.clone()), ["a", "b"]);
        ix.remove_victims(&victims);
        assert_eq!((ix.stats().0, ix.stats().1), (2, 8));
        assert!(ix.plan_reap(0, 10).is_empty());
    }

    #[test]
    fn a_dropped_instance_refuses_writes_until_created_again() {
        let mut ix = Index::new(None, Values::All);
        ix.create_shelf(A);
        ix.drop_shelf(A);
        let e = put(&mut ix, A, "k", 1, 0, PutOp::Add(None)).unwrap_err();
        assert!(matches!(e, Error::NotFound(_)), "{e:?}");
        ix.create_shelf(A);
        assert!(put(&mut ix, A, "k", 1, 0, PutOp::Add(None)).is_ok());
        // An instance never seen (memory-only after a restart) takes writes.
        let k = key("k");
        assert!(ix.plan_put(B, &name(), &k, 1, 0, PutOp::Add(None)).is_ok());
        assert_eq!(ix.retain(|i| i == B), 1);
        assert_eq!((ix.stats().0, ix.stats().1), (0, 0));
    }

    /// Upsert `k` of instance `A` with an `n`-byte value at `offset` in the log, then shed
    /// as the writer does once the log holds the batch.
    fn write_at(ix: &mut Index, k: &str, n: usize, offset: u64) {
        let k = key(k);
        let plan = ix
            .plan_put(
                A,
                &name(),
                &k,
                n as u64,
                0,
                PutOp::Set(None, SetMode::Upsert),
            )
            .unwrap();
        let value = CacheValue::from_stored("x".repeat(n));
        ix.apply_put(A, &k, n as u64, &plan, value, offset);
        ix.shed();
    }

    #[test]
    fn a_value_the_log_does_not_hold_yet_is_never_let_go() {
        let mut ix = Index::new(None, Values::Recent(10));
        let write = write_at;
        ix.set_written(100);
        write(&mut ix, "a", 4, 0);
        write(&mut ix, "b", 8, 200); // beyond what the log holds
        assert_eq!(ix.stats().2, 8, "a was let go, b not");
        write(&mut ix, "c", 4, 300);
        assert_eq!(
            ix.stats().2,
            12,
            "over the budget rather than losing b or c"
        );
        ix.set_written(400);
        ix.shed();
        assert_eq!(ix.stats().2, 4, "b goes once written; c, the newest, stays");
    }

    #[test]
    fn recent_values_stay_in_memory_within_the_budget() {
        let mut ix = Index::new(None, Values::Recent(10));
        let v = |n: usize| CacheValue::from_stored("x".repeat(n));
        let write = |ix: &mut Index, k: &str, n: usize| write_at(ix, k, n, 0);
        let held = |ix: &mut Index, k: &str| match ix.lookup(A, k, 0) {
            Lookup::Live { value, .. } => matches!(value, Stored::Held(_)),
            Lookup::Missing => panic!("{k} missing"),
        };
        write(&mut ix, "a", 4);
        write(&mut ix, "b", 4);
        assert_eq!(ix.stats().2, 8);
        assert!(held(&mut ix, "a")); // b is now the least recently used value
        write(&mut ix, "c", 4);
        assert_eq!(ix.stats().2, 8, "b was let go, its entry stays");
        assert!(!held(&mut ix, "b"));
        assert!(held(&mut ix, "a") && held(&mut ix, "c"));
        assert_eq!(ix.stats().0, 3);

        // A value read from disk is held, unless the entry was written since the lookup.
        let Lookup::Live { version, .. } = ix.lookup(A, "b", 0) else {
            panic!()
        };
        ix.hold_read(A, "b", version, v(4));
        assert!(held(&mut ix, "b"));
        assert_eq!(ix.stats().2, 8);
        ix.load(A, "d", 4, None, 0);
        let Lookup::Live { version, .. } = ix.lookup(A, "d", 0) else {
            panic!()
        };
        write(&mut ix, "d", 5);
        ix.hold_read(A, "d", version, v(4));
        let Lookup::Live { value, .. } = ix.lookup(A, "d", 0) else {
            panic!()
        };
        assert!(
            matches!(value, Stored::Held(v) if v.len() == 5),
            "the stale read was not held"
        );

        // Too big for the budget: never held.
        write(&mut ix, "big", 11);
        assert!(!held(&mut ix, "big"));
        assert!(ix.stats().2 <= 10);
        ix.drop_shelf(A);
        assert_eq!(ix.stats(), (0, 0, 0));
    }

    #[test]
    fn scans_resume_across_chunks_and_stay_in_the_prefix_range() {
        let mut ix = Index::new(None, Values::All);
        for i in 0..50 {
            put(&mut ix, A, &format!("k{i:02}"), 1, 0, PutOp::Add(None)).unwrap();
        }
        put(&mut ix, A, "a", 1, 0, PutOp::Add(None)).unwrap();
        put(&mut ix, A, "z", 1, 0, PutOp::Add(None)).unwrap();
        for (pattern, expected) in [
            ("k*", 50),
            ("*", 52),
            ("*5", 5),
            ("k1*", 10),
            ("k10", 1),
            ("q*", 0),
        ] {
            let glob = Glob::new(pattern).unwrap();
            for budget in [1, 3, 7, 100] {
                let mut got = Vec::new();
                let mut after = None;
                loop {
                    let (chunk, resume) = ix.scan(A, &glob, 0, after.as_ref(), budget);
                    got.extend(chunk.into_iter().map(|(k, _, _)| k.as_str().to_owned()));
                    match resume {
                        Some(r) => after = Some(r),
                        None => break,
                    }
                }
                assert_eq!(got.len(), expected, "{pattern} budget {budget}");
                let mut sorted = got.clone();
                sorted.sort();
                sorted.dedup();
                assert_eq!(
                    got, sorted,
                    "{pattern} budget {budget}: sorted, no duplicates"
                );
                assert!(got.iter().all(|k| glob.matches(k)));
            }
        }
    }
}
