//! The search benchmark's corpus, synthetic and deterministic: a vocabulary of
//! pronounceable words drawn with a skewed (Zipf-like) frequency, each document a 2–4 word
//! title and an 8–14 word sentence (about 100 bytes of text), and one-typo queries over
//! it. Shared by the search scenarios and the `search_queries` example, so both measure
//! the same documents and queries.

use serde_json::{Value, json};

/// Documents in the corpus.
pub const DOCS: usize = 100_000;

/// A small deterministic generator (xorshift64*).
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// An index below `n`, small ones far more often (roughly Zipf).
    fn skewed(&mut self, n: usize) -> usize {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ((n as f64) * u.powi(3)) as usize % n
    }
}

/// The vocabulary: distinct words of 2–4 syllables.
fn vocabulary(rng: &mut Rng, size: usize) -> Vec<String> {
    const ONSETS: [&str; 16] = [
        "b", "c", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "br", "st",
    ];
    const VOWELS: [&str; 6] = ["a", "e", "i", "o", "u", "ai"];
    let mut seen = std::collections::HashSet::new();
    let mut words = Vec::with_capacity(size);
    while words.len() < size {
        let syllables = 2 + rng.below(3);
        let mut w = String::new();
        for _ in 0..syllables {
            w.push_str(ONSETS[rng.below(ONSETS.len())]);
            w.push_str(VOWELS[rng.below(VOWELS.len())]);
        }
        if rng.below(3) == 0 {
            w.push_str(["n", "r", "s", "l"][rng.below(4)]);
        }
        if seen.insert(w.clone()) {
            words.push(w);
        }
    }
    words
}

/// The corpus and a set of one-typo queries over it.
pub struct Corpus {
    /// The documents, each `{_id, title, body}`.
    pub docs: Vec<Value>,
    /// The queries, each one word with one typo, half of them after a correct word.
    pub queries: Vec<String>,
}

/// The corpus of [`DOCS`] documents, the same at every call (a fixed seed).
pub fn corpus() -> Corpus {
    corpus_of(DOCS)
}

/// A corpus of `docs` documents from the same vocabulary, with the same queries as
/// [`corpus`] (the first [`DOCS`] documents are [`corpus`]'s when `docs` is at least that).
pub fn corpus_of(docs: usize) -> Corpus {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let vocab = vocabulary(&mut rng, 20_000);
    let phrase = |rng: &mut Rng, lo: usize, hi: usize| -> String {
        let n = lo + rng.below(hi - lo + 1);
        (0..n)
            .map(|_| vocab[rng.skewed(vocab.len())].as_str())
            .collect::<Vec<_>>()
            .join(" ")
    };
    let doc = |rng: &mut Rng, i: usize| {
        let title = phrase(rng, 2, 4);
        let body = format!("{}.", phrase(rng, 8, 14));
        json!({"_id": format!("d{i}"), "title": title, "body": body})
    };
    let mut all: Vec<Value> = (0..DOCS).map(|i| doc(&mut rng, i)).collect();
    // The queries are drawn after the first DOCS documents, as they were before larger
    // corpora existed, and the documents beyond those from a copy of the generator.
    let mut more = rng.clone();
    more.0 ^= 0x5DEE_CE66_D1CE_4E5B;
    all.extend((DOCS..docs).map(|i| doc(&mut more, i)));
    all.truncate(docs);
    let docs = all;
    // Queries: a word from the commoner part of the vocabulary with one edit (swap,
    // substitution or deletion), half of them after a correctly spelled word.
    let queries = (0..2_000)
        .map(|_| {
            // Six letters or more, so that even after a deletion the word keeps its one-typo
            // budget (five letters).
            let word = loop {
                let w = &vocab[rng.skewed(2_000)];
                if w.chars().count() >= 6 {
                    break w.clone();
                }
            };
            let mut chars: Vec<char> = word.chars().collect();
            let at = 1 + rng.below(chars.len() - 2);
            match rng.below(3) {
                0 if chars[at] != chars[at + 1] => chars.swap(at, at + 1),
                0 | 1 => chars[at] = if chars[at] == 'e' { 'a' } else { 'e' },
                _ => {
                    chars.remove(at);
                }
            }
            let typo: String = chars.into_iter().collect();
            if rng.below(2) == 0 {
                format!("{} {typo}", vocab[rng.skewed(vocab.len())])
            } else {
                typo
            }
        })
        .collect();
    Corpus { docs, queries }
}
