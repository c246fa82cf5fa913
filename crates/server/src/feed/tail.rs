//! The recent end of each followed log, shared by the streams that follow it.
//!
//! A commit wakes every stream following its instance at once. Were each stream to read
//! the log itself, one write followed by 100 streams would cost 100 reads of the same
//! entry, and at a thousand writes a second those reads, not the writes, would decide how
//! late every stream is. Instead the streams at the log's end take turns on one
//! [`SharedTail`]: the first to arrive reads the store, the others wait for that read and
//! then find its entries in memory.
//!
//! Serving entries from memory is exact because an entry never changes once it is
//! numbered, and entries are numbered without gaps in commit order
//! ([`quintet_core::ports::changes`]). What needs care is the claim "nothing follows the
//! end held here": a stream at that end may skip the store only if the read that found
//! the end began after the wake-up the stream has seen. Wake-ups count up per instance,
//! and every commit bumps the count after it is visible to readers, so a read that began
//! at count `g` saw every commit whose wake-up made the count reach `g`; a later commit
//! bumps the count again and wakes the stream anyway.

use std::{any::Any, collections::VecDeque, future::Future};

use quintet_core::{
    Result,
    ports::changes::{ChangesPage, Numbered},
};
use tokio::sync::Mutex;

/// Most entries a tail keeps in memory.
pub const KEPT: usize = 4096;

/// Fewest entries one read of the store at the log's end asks for, so that streams
/// arriving later, a few entries behind, are served from memory too.
const FETCH: usize = 500;

/// A followed log's end in memory, shared by its streams; of entries of any type (each log
/// its own: instance ids are unique across services).
#[derive(Default)]
pub struct SharedTail(Mutex<Option<Box<dyn Any + Send>>>);

impl std::fmt::Debug for SharedTail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedTail")
    }
}

/// What is known of a log's end.
struct Tail<E> {
    /// The entries numbered `end - entries.len() + 1 ..= end`.
    entries: VecDeque<E>,
    /// The last entry the latest read at the end found (or the position it read after,
    /// when it found nothing).
    end: u64,
    /// The wake-up count read before that read began.
    generation: u64,
    /// Whether that read reached the log's end (answered fewer entries than it asked for).
    complete: bool,
}

impl<E: Clone> Tail<E> {
    /// The number of the entry before the first one held.
    fn before_first(&self) -> u64 {
        self.end - self.entries.len() as u64
    }

    fn push(&mut self, entries: &[E], end: u64, generation: u64, complete: bool) {
        self.entries.extend(entries.iter().cloned());
        let extra = self.entries.len().saturating_sub(KEPT);
        self.entries.drain(..extra);
        self.end = end;
        self.generation = generation;
        self.complete = complete;
    }
}

impl SharedTail {
    /// At most `want` entries after `at`, for a stream that has seen wake-up count `seen`
    /// (`now` reads the current count): from memory when the entries are held there (or
    /// when nothing can follow `at`), otherwise from `fetch(after, n)`, which reads the
    /// store. Streams at the log's end read the store one at a time, and each read extends
    /// the tail; a stream elsewhere in the log reads the store on its own.
    pub async fn read<E, F, Fut>(
        &self,
        at: u64,
        want: usize,
        seen: u64,
        now: impl Fn() -> u64,
        fetch: F,
    ) -> Result<Vec<E>>
    where
        E: Numbered + Clone + Send + 'static,
        F: FnOnce(u64, usize) -> Fut,
        Fut: Future<Output = Result<ChangesPage<E>>>,
    {
        let mut held = self.0.lock().await;
        let mut tail = held.as_mut().and_then(|b| b.downcast_mut::<Tail<E>>());
        if let Some(t) = tail.as_deref_mut() {
            let first = t.before_first();
            if at >= first && at < t.end {
                let skip = usize::try_from(at - first).unwrap_or(usize::MAX);
                return Ok(t.entries.iter().skip(skip).take(want).cloned().collect());
            }
            if at == t.end && t.complete && t.generation >= seen {
                return Ok(Vec::new());
            }
            if at != t.end {
                drop(held);
                return Ok(fetch(at, want).await?.changes);
            }
        }
        // At the end (or nothing is known yet): one read for every stream waiting here.
        let generation = now();
        let asked = want.clamp(FETCH, KEPT);
        let page = fetch(at, asked).await?;
        let complete = page.changes.len() < asked;
        match tail {
            Some(t) => t.push(&page.changes, page.last_seq, generation, complete),
            None => {
                let mut t = Tail {
                    entries: VecDeque::new(),
                    end: page.last_seq,
                    generation,
                    complete,
                };
                t.push(&page.changes, page.last_seq, generation, complete);
                *held = Some(Box::new(t));
            }
        }
        let mut changes = page.changes;
        changes.truncate(want);
        Ok(changes)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

    use proptest::prelude::*;
    use quintet_core::ports::changes::Change;

    use super::*;

    /// A log of `head` entries whose reads are counted.
    struct Log {
        head: AtomicU64,
        reads: AtomicUsize,
    }

    impl Log {
        fn new(head: u64) -> Self {
            Self {
                head: AtomicU64::new(head),
                reads: AtomicUsize::new(0),
            }
        }

        async fn fetch(&self, at: u64, n: usize) -> Result<ChangesPage<Change>> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            let head = self.head.load(Ordering::SeqCst);
            let changes = (at + 1..=head)
                .take(n)
                .map(|seq| Change {
                    seq,
                    id: format!("d{seq}"),
                    deleted: false,
                })
                .collect();
            Ok(ChangesPage::after(at, changes))
        }
    }

    fn seqs(c: &[Change]) -> Vec<u64> {
        c.iter().map(|c| c.seq).collect()
    }

    #[tokio::test]
    async fn streams_at_the_end_share_one_read() {
        let log = Log::new(3);
        let tail = SharedTail::default();
        let generation = AtomicU64::new(1);
        let now = || generation.load(Ordering::SeqCst);
        for _ in 0..100 {
            let got = tail
                .read(0, 10, 1, now, |a, n| log.fetch(a, n))
                .await
                .unwrap();
            assert_eq!(seqs(&got), [1, 2, 3]);
        }
        assert_eq!(log.reads.load(Ordering::SeqCst), 1);
        // At the end, with no later wake-up: nothing, and no read.
        let got = tail
            .read(3, 10, 1, now, |a, n| log.fetch(a, n))
            .await
            .unwrap();
        assert!(got.is_empty());
        assert_eq!(log.reads.load(Ordering::SeqCst), 1);
        // A commit, then its wake-up: the first stream reads, the rest share.
        log.head.store(5, Ordering::SeqCst);
        generation.store(2, Ordering::SeqCst);
        for _ in 0..100 {
            let got = tail
                .read(3, 10, 2, now, |a, n| log.fetch(a, n))
                .await
                .unwrap();
            assert_eq!(seqs(&got), [4, 5]);
        }
        assert_eq!(log.reads.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_wake_up_newer_than_the_tail_reads_the_store() {
        let log = Log::new(2);
        let tail = SharedTail::default();
        let now = || 7;
        tail.read(0, 10, 7, now, |a, n| log.fetch(a, n))
            .await
            .unwrap();
        // The commit is visible, and the stream saw its wake-up (8) before the tail did.
        log.head.store(3, Ordering::SeqCst);
        let got = tail
            .read(2, 10, 8, || 8, |a, n| log.fetch(a, n))
            .await
            .unwrap();
        assert_eq!(seqs(&got), [3]);
    }

    #[tokio::test]
    async fn a_full_read_is_not_taken_for_the_end() {
        let log = Log::new(FETCH as u64 * 2);
        let tail = SharedTail::default();
        let got = tail
            .read(0, 1, 1, || 1, |a, n| log.fetch(a, n))
            .await
            .unwrap();
        assert_eq!(seqs(&got), [1]);
        let mut at = 1;
        while at < FETCH as u64 * 2 {
            let got = tail
                .read(at, 10_000, 1, || 1, |a, n| log.fetch(a, n))
                .await
                .unwrap();
            assert!(!got.is_empty(), "entries after {at} exist");
            at = got.last().unwrap().seq;
        }
        assert_eq!(at, FETCH as u64 * 2);
    }

    #[tokio::test]
    async fn streams_behind_the_tail_read_on_their_own() {
        let log = Log::new(KEPT as u64 + 100);
        let tail = SharedTail::default();
        let mut at = 0;
        while at < KEPT as u64 + 100 {
            at = tail
                .read(at, KEPT, 1, || 1, |a, n| log.fetch(a, n))
                .await
                .unwrap()
                .last()
                .unwrap()
                .seq;
        }
        let reads = log.reads.load(Ordering::SeqCst);
        // Entry 1 fell out of the tail: read from the store.
        let got = tail
            .read(0, 3, 1, || 1, |a, n| log.fetch(a, n))
            .await
            .unwrap();
        assert_eq!(seqs(&got), [1, 2, 3]);
        assert_eq!(log.reads.load(Ordering::SeqCst), reads + 1);
    }

    proptest! {
        /// Streams reading at random positions and page sizes, while the log grows and
        /// wakes them, read the entries after their position, in order, and something
        /// whenever something follows it.
        #[test]
        fn every_stream_reads_the_log_as_the_store_holds_it(
            steps in proptest::collection::vec((0usize..4, 1usize..700, 0u64..40), 1..200)
        ) {
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            rt.block_on(async {
                let log = Log::new(0);
                let tail = SharedTail::default();
                let generation = AtomicU64::new(0);
                let mut streams = [0u64; 4];
                for (who, want, grow) in steps {
                    if grow > 0 {
                        log.head.fetch_add(grow, Ordering::SeqCst);
                        generation.fetch_add(1, Ordering::SeqCst);
                    }
                    let at = streams[who];
                    // A stream marks the wake-up count seen before reading.
                    let seen = generation.load(Ordering::SeqCst);
                    let got = tail
                        .read(at, want, seen, || generation.load(Ordering::SeqCst), |a, n| log.fetch(a, n))
                        .await
                        .unwrap();
                    let head = log.head.load(Ordering::SeqCst);
                    let after: Vec<u64> = (at + 1..=head).take(want).collect();
                    prop_assert!(got.len() <= after.len());
                    prop_assert!(!got.is_empty() || after.is_empty());
                    prop_assert_eq!(seqs(&got), after[..got.len()].to_vec());
                    streams[who] = got.last().map_or(at, |c| c.seq);
                }
                Ok(())
            })?;
        }
    }
}
