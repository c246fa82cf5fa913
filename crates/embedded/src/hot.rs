//! Recently read entries (documents, small objects), held in memory so that reading a
//! popular one again touches no SQLite page: a read transaction in WAL mode (locks of the
//! shared index, the B-tree walk, the statement reset) was the largest part of
//! `GET /data/<d>/<id>` and of downloading a small object.
//!
//! Bounded by bytes, oldest fill evicted first. Only reads fill it; writes empty the
//! entries they changed once their batch committed (see
//! [`crate::sqlite::SqliteDb::write_then`]), before they are acknowledged.
//!
//! **Why a read never leaves an old version behind.** A reader notes its instance's epoch
//! before it reads SQLite and fills only if no write of that instance was acknowledged
//! since (every invalidation bumps the instance's epoch; writes to other instances do not
//! hold back its fills). A reader that read the old rows before a commit therefore either
//! fills before that write's invalidation, which then removes the entry, or finds the
//! epoch moved and does not fill. Between a commit and its invalidation a reader may still
//! get the old version, which is fine: the write is not acknowledged yet.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Mutex, MutexGuard},
};

use quintet_core::InstanceId;

/// Entries larger than this are not held: they are rarely the hot ones, and each would
/// push out many small ones.
pub const HOT_ENTRY_MAX_BYTES: usize = 64 << 10;

/// Per-entry bookkeeping beyond the key and the value, roughly.
const ENTRY_OVERHEAD: usize = 64;

/// A value the cache can hold: cheap to clone, and of a known size.
pub trait Held: Clone {
    /// Bytes the value occupies, roughly.
    fn held_bytes(&self) -> usize;
}

type Key = (InstanceId, Box<str>);

#[derive(Debug)]
struct State<V> {
    /// Per instance, so a lookup borrows the key instead of building one.
    entries: HashMap<InstanceId, HashMap<Box<str>, V>>,
    /// Keys in fill order; may hold keys since removed (skipped when evicting).
    order: VecDeque<Key>,
    bytes: usize,
    /// Per instance, the value of `clock` at its last invalidation (absent: none yet).
    epochs: HashMap<InstanceId, u64>,
    /// Counts invalidations of every instance, so that an epoch is never given twice.
    clock: u64,
    /// Counts sweeps, which forget instances wholesale.
    sweeps: u64,
}

impl<V> Default for State<V> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            order: VecDeque::new(),
            bytes: 0,
            epochs: HashMap::new(),
            clock: 0,
            sweeps: 0,
        }
    }
}

impl<V> State<V> {
    fn miss(&self, instance: InstanceId) -> Miss {
        Miss {
            epoch: self.epochs.get(&instance).copied().unwrap_or(0),
            sweeps: self.sweeps,
        }
    }

    /// A write of `instance` was committed: reads of it that began before do not fill.
    fn bump(&mut self, instance: InstanceId) {
        self.clock += 1;
        self.epochs.insert(instance, self.clock);
    }
}

impl<V: Held> State<V> {
    fn remove(&mut self, instance: InstanceId, key: &str) {
        let Some(entries) = self.entries.get_mut(&instance) else {
            return;
        };
        if let Some(gone) = entries.remove(key) {
            self.bytes -= cost(key, &gone);
        }
        if entries.is_empty() {
            self.entries.remove(&instance);
        }
    }
}

/// The cache: see the module documentation.
#[derive(Debug)]
pub struct HotCache<V> {
    state: Mutex<State<V>>,
    budget: usize,
}

/// A cache miss: the epoch to hand back to [`HotCache::fill`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Miss {
    epoch: u64,
    sweeps: u64,
}

fn cost<V: Held>(key: &str, value: &V) -> usize {
    key.len() + value.held_bytes() + ENTRY_OVERHEAD
}

impl<V: Held> HotCache<V> {
    /// A cache holding at most `budget` bytes.
    pub fn new(budget: usize) -> Self {
        Self {
            state: Mutex::new(State::default()),
            budget,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<V>> {
        // Every change leaves the state consistent, so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The held value, or the epoch a fill after reading SQLite must present.
    pub fn get(&self, instance: InstanceId, key: &str) -> Result<V, Miss> {
        let state = self.lock();
        match state.entries.get(&instance).and_then(|e| e.get(key)) {
            Some(value) => Ok(value.clone()),
            None => Err(state.miss(instance)),
        }
    }

    /// Hold `value`, read from SQLite after `miss`, unless a write was acknowledged since.
    pub fn fill(&self, instance: InstanceId, key: &str, value: &V, miss: Miss) {
        let size = cost(key, value);
        if value.held_bytes() > HOT_ENTRY_MAX_BYTES || size > self.budget {
            return;
        }
        let mut state = self.lock();
        if state.miss(instance) != miss {
            return;
        }
        let old = state
            .entries
            .entry(instance)
            .or_default()
            .insert(Box::from(key), value.clone());
        if let Some(old) = old {
            state.bytes -= cost(key, &old);
        }
        state.bytes += size;
        state.order.push_back((instance, Box::from(key)));
        while state.bytes > self.budget {
            let Some((inst, oldest)) = state.order.pop_front() else {
                break;
            };
            state.remove(inst, &oldest);
        }
        // Keys removed by writes linger in the order; drop them before they outnumber
        // the held ones.
        let held: usize = state.entries.values().map(HashMap::len).sum();
        if state.order.len() > 2 * held + 1024 {
            let State { entries, order, .. } = &mut *state;
            order.retain(|(i, k)| entries.get(i).is_some_and(|e| e.contains_key(k)));
        }
    }

    /// Forget the entries `keys` of `instance` (a write changed them).
    pub fn invalidate<'a>(&self, instance: InstanceId, keys: impl IntoIterator<Item = &'a str>) {
        let mut state = self.lock();
        state.bump(instance);
        for key in keys {
            state.remove(instance, key);
        }
    }

    /// Forget every entry of `instance` (it was dropped).
    pub fn forget_instance(&self, instance: InstanceId) {
        let mut state = self.lock();
        state.bump(instance);
        if let Some(entries) = state.entries.remove(&instance) {
            let freed: usize = entries.iter().map(|(k, v)| cost(k, v)).sum();
            state.bytes -= freed;
        }
    }

    /// Forget every entry of every instance `live` says no to (their tables were swept).
    pub fn retain_instances(&self, live: impl Fn(InstanceId) -> bool) {
        let mut state = self.lock();
        // Every read begun before misses its fill now, so the epochs of the instances
        // swept can go too.
        state.sweeps += 1;
        state.epochs.retain(|instance, _| live(*instance));
        let State { entries, bytes, .. } = &mut *state;
        entries.retain(|instance, held| {
            let keep = live(*instance);
            if !keep {
                *bytes -= held.iter().map(|(k, v)| cost(k, v)).sum::<usize>();
            }
            keep
        });
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }
}

#[cfg(test)]
mod tests {
    use quintet_core::ports::data::RawJson;
    use serde_json::value::RawValue;

    use super::*;

    type HotDocs = HotCache<RawJson>;

    fn doc(text: &str) -> RawJson {
        RawValue::from_string(text.to_owned()).unwrap()
    }

    const A: InstanceId = InstanceId(1);
    const B: InstanceId = InstanceId(2);

    #[test]
    fn a_fill_is_read_back_until_a_write_invalidates_it() {
        let hot = HotDocs::new(1 << 20);
        let miss = hot.get(A, "x").unwrap_err();
        hot.fill(A, "x", &doc(r#"{"_id":"x","v":1}"#), miss);
        assert_eq!(hot.get(A, "x").unwrap().get(), r#"{"_id":"x","v":1}"#);
        assert!(hot.get(B, "x").is_err(), "instances are apart");
        hot.invalidate(A, ["x"]);
        assert!(hot.get(A, "x").is_err());
        assert_eq!(hot.bytes(), 0);
    }

    #[test]
    fn a_read_overtaken_by_a_write_does_not_fill() {
        let hot = HotDocs::new(1 << 20);
        // The reader notes the epoch, reads the old rows; meanwhile a write of another
        // document, or of this one, is acknowledged.
        let miss = hot.get(A, "x").unwrap_err();
        hot.invalidate(A, ["y"]);
        hot.fill(A, "x", &doc(r#"{"_id":"x","v":"old"}"#), miss);
        assert!(hot.get(A, "x").is_err());
    }

    #[test]
    fn the_budget_evicts_the_oldest_fills() {
        let d = doc(&format!(r#"{{"_id":"k","p":"{}"}}"#, "x".repeat(100)));
        let per = cost("k0", &d);
        let hot = HotDocs::new(per * 3);
        for k in ["k0", "k1", "k2", "k3"] {
            let miss = hot.get(A, k).unwrap_err();
            hot.fill(A, k, &d, miss);
        }
        assert!(hot.get(A, "k0").is_err(), "the oldest went");
        for k in ["k1", "k2", "k3"] {
            assert!(hot.get(A, k).is_ok(), "{k}");
        }
        assert_eq!(hot.bytes(), per * 3);
    }

    #[test]
    fn entries_over_the_size_limit_are_not_held() {
        let hot = HotDocs::new(1 << 20);
        // `{"p":"…"}` is 8 bytes around the padding.
        for (key, size, held) in [
            ("limit", HOT_ENTRY_MAX_BYTES, true),
            ("big", HOT_ENTRY_MAX_BYTES + 1, false),
        ] {
            let d = doc(&format!(r#"{{"p":"{}"}}"#, "x".repeat(size - 8)));
            assert_eq!(d.held_bytes(), size);
            let miss = hot.get(A, key).unwrap_err();
            hot.fill(A, key, &d, miss);
            assert_eq!(hot.get(A, key).is_ok(), held, "{key}");
        }
    }

    #[test]
    fn dropping_or_sweeping_an_instance_forgets_its_documents_only() {
        for forget in [(|h: &HotDocs| h.forget_instance(A)) as fn(&HotDocs), |h| {
            h.retain_instances(|i| i == B)
        }] {
            let hot = HotDocs::new(1 << 20);
            for inst in [A, B] {
                let miss = hot.get(inst, "x").unwrap_err();
                hot.fill(inst, "x", &doc("{}"), miss);
            }
            forget(&hot);
            assert!(hot.get(A, "x").is_err());
            assert!(hot.get(B, "x").is_ok());
            assert_eq!(hot.bytes(), cost("x", &doc("{}")));
        }
    }

    #[test]
    fn only_a_write_of_the_same_instance_holds_back_a_fill() {
        let hot = HotDocs::new(1 << 20);
        let miss = hot.get(A, "x").unwrap_err();
        hot.invalidate(B, ["x"]);
        hot.fill(A, "x", &doc("{}"), miss);
        assert!(hot.get(A, "x").is_ok(), "a write of B does not concern A");
        for interrupt in [
            (|h: &HotDocs| h.invalidate(A, ["other"])) as fn(&HotDocs),
            |h| h.forget_instance(A),
            |h| h.retain_instances(|i| [A, B].contains(&i)),
        ] {
            let miss = hot.get(A, "y").unwrap_err();
            interrupt(&hot);
            hot.fill(A, "y", &doc("{}"), miss);
            assert!(
                hot.get(A, "y").is_err(),
                "a read that overlapped is not held"
            );
        }
    }
}
