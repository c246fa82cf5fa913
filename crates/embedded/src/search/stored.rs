//! Recently answered documents' stored key and text, held in memory so that answering a
//! popular document again reads nothing from tantivy's document store. Reading one there
//! costs about 7,000 instructions (a descent through six layers of the store's skip index,
//! a block copy, two strings), most of a query's time at the default limit of 100 matches.
//!
//! Entries are addressed by segment and document number. A segment's stored documents
//! never change (a changed document is written to a new segment and the old one is only
//! marked deleted, and queries skip deleted documents), so an entry is never stale and
//! writes invalidate nothing. Segment ids are unique across indexes, so one cache serves
//! every index of the adapter. Entries of segments that merges or dropped instances have
//! removed are not sought out: nothing reads them again, and they age out.
//!
//! Bounded by bytes, in two generations: a hit in the old generation moves the entry to
//! the young one, and when the young one holds half the budget the old one is dropped and
//! the young one becomes old. This keeps what is read again at the cost of one map
//! operation per entry, where a strict LRU order would cost a list update per hit.

use std::sync::{Arc, Mutex, PoisonError};

// Keys are the engine's own (segment, document): a fast hasher, not SipHash, whose
// hashing of the 20-byte address was most of a lookup.
use foldhash::HashMap;

use quintet_core::search::StoredFields;
use tantivy::{DocId, index::SegmentId};

/// Bytes the adapter's cache of stored documents may hold, as the data service's and the
/// storage service's caches of recently read documents and objects.
pub const STORED_CACHE_BYTES: usize = 32 << 20;

/// Per-entry bookkeeping beyond the key and the text, roughly.
const ENTRY_OVERHEAD: usize = 96;

/// A document's stored key and JSON text, and its stored fields picked out of the text.
pub(super) type Stored = Arc<StoredDoc>;

/// What the cache holds of a document.
#[derive(Debug)]
pub(super) struct StoredDoc {
    /// Its key.
    pub key: String,
    /// Its JSON text.
    pub src: String,
    /// The index's stored fields it has, as its matches answer them: picked once, when it
    /// is read from the store, and shared by every match of it after that (picking them
    /// out of the text each time was a tenth of a query at the default limit).
    pub fields: StoredFields,
}

/// Where a document is: its segment and its number there.
pub(super) type Address = (SegmentId, DocId);

/// Recently answered documents (see the module's documentation).
#[derive(Debug)]
pub(super) struct StoredCache {
    budget: usize,
    state: Mutex<Generations>,
}

#[derive(Debug, Default)]
struct Generations {
    young: HashMap<Address, Stored>,
    young_bytes: usize,
    old: HashMap<Address, Stored>,
    old_bytes: usize,
    /// Lookups answered, for tests to tell a document read from memory from one read again.
    #[cfg(test)]
    hits: u64,
}

fn bytes_of(stored: &Stored) -> usize {
    stored.key.len() + stored.src.len() + stored.fields.text_bytes() + ENTRY_OVERHEAD
}

impl StoredCache {
    /// A cache holding up to about `budget` bytes.
    pub fn new(budget: usize) -> Self {
        Self {
            budget,
            state: Mutex::default(),
        }
    }

    /// The held entries of `addresses`, in order (`None` where not held), under one lock.
    pub fn get_many(&self, addresses: &[Address]) -> Vec<Option<Stored>> {
        let mut g = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut promoted = Vec::new();
        let found: Vec<Option<Stored>> = addresses
            .iter()
            .map(|a| {
                if let Some(s) = g.young.get(a) {
                    return Some(Arc::clone(s));
                }
                let s = g.old.remove(a)?;
                g.old_bytes -= bytes_of(&s);
                promoted.push((*a, Arc::clone(&s)));
                Some(s)
            })
            .collect();
        for (a, s) in promoted {
            self.insert(&mut g, a, s);
        }
        #[cfg(test)]
        {
            g.hits += found.iter().filter(|f| f.is_some()).count() as u64;
        }
        found
    }

    /// Hold `entries`, under one lock.
    pub fn fill(&self, entries: impl IntoIterator<Item = (Address, Stored)>) {
        let mut g = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        for (a, s) in entries {
            self.insert(&mut g, a, s);
        }
    }

    fn insert(&self, g: &mut Generations, address: Address, stored: Stored) {
        let bytes = bytes_of(&stored);
        if bytes > self.budget / 2 {
            return;
        }
        if g.young_bytes + bytes > self.budget / 2 {
            g.old = std::mem::take(&mut g.young);
            g.old_bytes = std::mem::take(&mut g.young_bytes);
        }
        if let Some(previous) = g.young.insert(address, stored) {
            g.young_bytes -= bytes_of(&previous);
        }
        g.young_bytes += bytes;
    }

    /// Lookups answered so far.
    #[cfg(test)]
    pub fn hits(&self) -> u64 {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .hits
    }

    /// Bytes held, roughly.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        let g = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        g.young_bytes + g.old_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(doc: DocId, text: &str) -> (Address, Stored) {
        (
            (SEGMENT.with(|s| *s), doc),
            Arc::new(StoredDoc {
                key: format!("k{doc}"),
                src: text.to_owned(),
                fields: StoredFields::default(),
            }),
        )
    }

    thread_local! {
        static SEGMENT: SegmentId = SegmentId::generate_random();
    }

    fn held(cache: &StoredCache, docs: &[DocId]) -> Vec<bool> {
        let addresses: Vec<Address> = docs.iter().map(|d| (SEGMENT.with(|s| *s), *d)).collect();
        cache
            .get_many(&addresses)
            .iter()
            .map(Option::is_some)
            .collect()
    }

    #[test]
    fn entries_are_found_until_two_generations_have_filled() {
        // Room for two entries per generation (each 2 + 4 + 96 bytes).
        let cache = StoredCache::new(2 * 2 * 102);
        cache.fill([entry(0, "zero"), entry(1, "one!")]);
        assert_eq!(held(&cache, &[0, 1, 2]), [true, true, false]);
        assert_eq!(
            cache.get_many(&[entry(1, "").0])[0].as_ref().unwrap().src,
            "one!"
        );
        // A third entry starts a new young generation; 0 and 1 are old but still found.
        cache.fill([entry(2, "two!")]);
        assert_eq!(held(&cache, &[2]), [true]);
        // Reading 0 moves it to the young generation, which is then full (0 and 2).
        assert_eq!(held(&cache, &[0]), [true]);
        // The next entry drops the old generation (1) and keeps 0 and 2 as old.
        cache.fill([entry(3, "3333")]);
        assert_eq!(held(&cache, &[0, 1, 2, 3]), [true, false, true, true]);
        assert!(cache.bytes() <= 2 * 2 * 102);
    }

    #[test]
    fn entries_larger_than_a_generation_are_not_held() {
        let cache = StoredCache::new(400);
        cache.fill([entry(0, &"x".repeat(300))]);
        assert_eq!(held(&cache, &[0]), [false]);
        assert_eq!(cache.bytes(), 0);
    }
}
