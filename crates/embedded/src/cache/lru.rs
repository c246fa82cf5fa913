//! An exact least-recently-used order over cache entries of every instance: a doubly
//! linked list threaded through a slab, so a use is an O(1) unlink and relink with no
//! allocation.

use quintet_core::InstanceId;

use super::index_key::IndexKey;

/// Index of a node in the slab; [`NIL`] ends the list.
pub(crate) type Slot = u32;

/// No node.
pub(crate) const NIL: Slot = u32::MAX;

#[derive(Debug)]
struct Node {
    /// Towards the most recently used end.
    newer: Slot,
    /// Towards the least recently used end.
    older: Slot,
    /// The entry, `None` while the node is free.
    entry: Option<(InstanceId, IndexKey)>,
}

/// The recency order; the front is the most recently used entry.
#[derive(Debug, Default)]
pub(crate) struct Lru {
    nodes: Vec<Node>,
    free: Vec<Slot>,
    newest: Option<Slot>,
    oldest: Option<Slot>,
}

impl Lru {
    /// Add an entry as the most recently used; returns its slot.
    pub(crate) fn push(&mut self, inst: InstanceId, key: IndexKey) -> Slot {
        let node = Node {
            newer: NIL,
            older: NIL,
            entry: Some((inst, key)),
        };
        let slot = match self.free.pop() {
            Some(slot) => {
                self.nodes[slot as usize] = node;
                slot
            }
            None => {
                // More than four billion entries would need a wider slot type.
                let slot = Slot::try_from(self.nodes.len()).unwrap_or(NIL - 1);
                self.nodes.push(node);
                slot
            }
        };
        self.link_newest(slot);
        slot
    }

    /// Mark the entry in `slot` as just used.
    pub(crate) fn touch(&mut self, slot: Slot) {
        if self.newest == Some(slot) || !self.is_live(slot) {
            return;
        }
        self.unlink(slot);
        self.link_newest(slot);
    }

    /// Forget the entry in `slot`.
    pub(crate) fn remove(&mut self, slot: Slot) {
        if !self.is_live(slot) {
            return;
        }
        self.unlink(slot);
        self.nodes[slot as usize].entry = None;
        self.free.push(slot);
    }

    /// Entries from the least recently used on.
    pub(crate) fn oldest_first(&self) -> impl Iterator<Item = (InstanceId, &IndexKey)> + '_ {
        let mut at = self.oldest;
        std::iter::from_fn(move || {
            let slot = at?;
            let node = &self.nodes[slot as usize];
            at = (node.newer != NIL).then_some(node.newer);
            node.entry.as_ref().map(|(i, k)| (*i, k))
        })
    }

    fn is_live(&self, slot: Slot) -> bool {
        self.nodes
            .get(slot as usize)
            .is_some_and(|n| n.entry.is_some())
    }

    fn unlink(&mut self, slot: Slot) {
        let (newer, older) = {
            let n = &self.nodes[slot as usize];
            (n.newer, n.older)
        };
        if newer == NIL {
            self.newest = (older != NIL).then_some(older);
        } else {
            self.nodes[newer as usize].older = older;
        }
        if older == NIL {
            self.oldest = (newer != NIL).then_some(newer);
        } else {
            self.nodes[older as usize].newer = newer;
        }
        let n = &mut self.nodes[slot as usize];
        n.newer = NIL;
        n.older = NIL;
    }

    fn link_newest(&mut self, slot: Slot) {
        match self.newest {
            Some(front) => {
                self.nodes[front as usize].newer = slot;
                self.nodes[slot as usize].older = front;
            }
            None => self.oldest = Some(slot),
        }
        self.newest = Some(slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn order(lru: &Lru) -> Vec<String> {
        lru.oldest_first()
            .map(|(_, k)| k.as_str().to_owned())
            .collect()
    }

    #[test]
    fn touch_moves_to_the_front_and_remove_unlinks() {
        let mut lru = Lru::default();
        let a = lru.push(InstanceId(1), IndexKey::new("a"));
        let b = lru.push(InstanceId(1), IndexKey::new("b"));
        let c = lru.push(InstanceId(2), IndexKey::new("c"));
        assert_eq!(order(&lru), ["a", "b", "c"]);
        lru.touch(a);
        assert_eq!(order(&lru), ["b", "c", "a"]);
        lru.remove(c);
        assert_eq!(order(&lru), ["b", "a"]);
        lru.remove(c); // twice is harmless
        let d = lru.push(InstanceId(3), IndexKey::new("d"));
        assert_eq!(d, c, "free slots are reused");
        assert_eq!(order(&lru), ["b", "a", "d"]);
        lru.remove(b);
        lru.remove(a);
        lru.remove(d);
        assert_eq!(order(&lru), Vec::<String>::new());
        lru.touch(a); // a free slot is ignored
        assert_eq!(order(&lru), Vec::<String>::new());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push(u8),
        Touch(u8),
        Remove(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..12).prop_map(Op::Push),
            (0u8..12).prop_map(Op::Touch),
            (0u8..12).prop_map(Op::Remove),
        ]
    }

    proptest! {
        /// Against a model: a vector ordered from least to most recently used.
        #[test]
        fn agrees_with_a_vector(ops in prop::collection::vec(op(), 0..80)) {
            let mut lru = Lru::default();
            let mut slots = std::collections::HashMap::new();
            let mut model: Vec<u8> = Vec::new();
            for op in ops {
                match op {
                    Op::Push(k) if !slots.contains_key(&k) => {
                        slots.insert(k, lru.push(InstanceId(0), IndexKey::new(&k.to_string())));
                        model.push(k);
                    }
                    Op::Push(_) => {}
                    Op::Touch(k) => if let Some(&s) = slots.get(&k) {
                        lru.touch(s);
                        model.retain(|x| *x != k);
                        model.push(k);
                    },
                    Op::Remove(k) => if let Some(s) = slots.remove(&k) {
                        lru.remove(s);
                        model.retain(|x| *x != k);
                    },
                }
                let expected: Vec<String> = model.iter().map(u8::to_string).collect();
                prop_assert_eq!(order(&lru), expected);
            }
        }
    }
}
