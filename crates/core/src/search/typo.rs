//! Typo tolerance: how many edits a query word may have, and how an indexed term matches a
//! query word (exactly, as a completion of it, or with typos).
//!
//! The budget depends on the length of the query word in characters, as in Meilisearch:
//!
//! | query word | edits allowed |
//! |---|---|
//! | 1–4 characters | 0 |
//! | 5–8 characters | 1 |
//! | 9 or more | 2 |
//!
//! An edit is an insertion, a deletion, a substitution or a swap of two adjacent characters
//! (optimal string alignment distance). Typos spare the first letter, as in Meilisearch's
//! word derivations: it is rarely mistyped, and requiring it lets engines look up typos in
//! one branch of their dictionary. The last word of a query is also matched as a prefix:
//! "ghost" finds "ghostbusters", and "ghots" (one swap) finds it too.

/// Query words of at least this many characters may have one typo.
pub const ONE_TYPO_FROM: usize = 5;
/// Query words of at least this many characters may have two typos.
pub const TWO_TYPOS_FROM: usize = 9;

/// Edits allowed for a query word of `chars` characters.
///
/// ```
/// use quintet_core::search::typo::typo_budget;
/// assert_eq!([4, 5, 8, 9].map(typo_budget), [0, 1, 1, 2]);
/// ```
pub fn typo_budget(chars: usize) -> u8 {
    if chars >= TWO_TYPOS_FROM {
        2
    } else if chars >= ONE_TYPO_FROM {
        1
    } else {
        0
    }
}

/// How an indexed term matches a query word. Better kinds sort first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MatchKind {
    /// The term is the word.
    Exact,
    /// The term starts with the word (last query word only).
    Prefix,
    /// The term is the word with this many edits (1 or 2).
    Fuzzy(u8),
    /// The term starts with the word after this many edits (last query word only).
    FuzzyPrefix(u8),
}

impl MatchKind {
    /// Edits between the word and the term (or the matched start of the term).
    pub fn edits(self) -> u8 {
        match self {
            Self::Exact | Self::Prefix => 0,
            Self::Fuzzy(d) | Self::FuzzyPrefix(d) => d,
        }
    }

    /// Rank of this kind, for ranking documents: exact 5 > prefix 4 > one typo 3 > one typo
    /// in a completion 2 > two typos 1 > two typos in a completion 0. A document ranks above
    /// another that matches the same number of query words when the sum of its words' best
    /// tiers is higher.
    pub fn tier(self) -> u32 {
        match self {
            Self::Exact => 5,
            Self::Prefix => 4,
            Self::Fuzzy(1) => 3,
            Self::FuzzyPrefix(1) => 2,
            Self::Fuzzy(_) => 1,
            Self::FuzzyPrefix(_) => 0,
        }
    }

    /// The highest [`MatchKind::tier`].
    pub const BEST_TIER: u32 = 5;

    /// Order of preference when choosing which terms a word expands to.
    fn preference(self) -> u8 {
        match self {
            Self::Exact => 0,
            Self::Prefix => 1,
            Self::Fuzzy(d) => 2 * d,
            Self::FuzzyPrefix(d) => 2 * d + 1,
        }
    }

    /// The weight multiplying the term's BM25 score: 1 for exact matches, less for
    /// completions (the longer the completion, the less) and less again for typos. At most
    /// 1, so engines can bound a query's BM25 contribution.
    pub fn weight(self, word_chars: usize, term_chars: usize) -> f32 {
        let q = word_chars.max(1) as f32;
        let extra = term_chars.saturating_sub(word_chars) as f32;
        match self {
            Self::Exact => 1.0,
            Self::Prefix => 0.6 * q / (q + 0.3 * extra),
            Self::Fuzzy(d) => 0.45 * q / (q + f32::from(d)),
            Self::FuzzyPrefix(d) => 0.45 * q / (q + f32::from(d) + 0.3 * extra),
        }
    }
}

/// Compare two candidate matches of the same word: better kinds first, then terms more
/// documents contain, then shorter terms, then alphabetical. Used to choose the terms a word
/// expands to.
pub fn expansion_order(a: (MatchKind, u64, &str), b: (MatchKind, u64, &str)) -> std::cmp::Ordering {
    a.0.preference()
        .cmp(&b.0.preference())
        .then(b.1.cmp(&a.1))
        .then(a.2.chars().count().cmp(&b.2.chars().count()))
        .then(a.2.cmp(b.2))
}

/// How `term` matches the query word `word` (both normalized), with `budget` edits allowed
/// and prefix matching when `prefix` is set; `None` when it does not match. A match with
/// typos starts with the word's first letter.
///
/// ```
/// use quintet_core::search::typo::{classify, MatchKind};
/// assert_eq!(classify("ghost", 1, true, "ghostbusters"), Some(MatchKind::Prefix));
/// assert_eq!(classify("ghots", 1, true, "ghostbusters"), Some(MatchKind::FuzzyPrefix(1)));
/// assert_eq!(classify("matirx", 1, false, "matrix"), Some(MatchKind::Fuzzy(1)));
/// assert_eq!(classify("cat", 0, false, "cut"), None);
/// assert_eq!(classify("hgost", 1, false, "ghost"), None); // the first letter is spared
/// ```
pub fn classify(word: &str, budget: u8, prefix: bool, term: &str) -> Option<MatchKind> {
    if term == word {
        return Some(MatchKind::Exact);
    }
    if prefix && term.starts_with(word) {
        return Some(MatchKind::Prefix);
    }
    if budget == 0 || word.chars().next() != term.chars().next() {
        return None;
    }
    let w: Vec<char> = word.chars().collect();
    let t: Vec<char> = term.chars().collect();
    if let Some(d) = edit_distance(&w, &t, budget) {
        return Some(MatchKind::Fuzzy(d));
    }
    if prefix {
        return prefix_edit_distance(&w, &t, budget).map(MatchKind::FuzzyPrefix);
    }
    None
}

/// The full table of optimal-string-alignment distances from `a` to every prefix of `b`:
/// row `i`, column `j` is the distance between `a[..i]` and `b[..j]`.
fn osa_last_row(a: &[char], b: &[char]) -> Vec<usize> {
    let width = b.len() + 1;
    let mut prev2: Vec<usize> = vec![0; width];
    let mut prev: Vec<usize> = (0..width).collect();
    let mut cur: Vec<usize> = vec![0; width];
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..width {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(prev2[j - 2] + 1);
            }
            cur[j] = d;
        }
        std::mem::swap(&mut prev2, &mut prev);
        std::mem::swap(&mut prev, &mut cur);
    }
    prev
}

/// Edits (insertions, deletions, substitutions, adjacent swaps) between `a` and `b`, when at
/// most `max`.
pub fn edit_distance(a: &[char], b: &[char], max: u8) -> Option<u8> {
    if a.len().abs_diff(b.len()) > usize::from(max) {
        return None;
    }
    let d = *osa_last_row(a, b).last()?;
    u8::try_from(d).ok().filter(|d| *d <= max)
}

/// The fewest edits between `a` and any prefix of `b`, when at most `max`.
pub fn prefix_edit_distance(a: &[char], b: &[char], max: u8) -> Option<u8> {
    let d = osa_last_row(a, b).into_iter().min()?;
    u8::try_from(d).ok().filter(|d| *d <= max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn chars(s: &str) -> Vec<char> {
        s.chars().collect()
    }

    #[test]
    fn distances() {
        let cases = [
            ("kitten", "sitting", 3),
            ("matrix", "matirx", 1),
            ("ghost", "ghots", 1),
            ("abc", "abc", 0),
            ("", "abc", 3),
            ("amelie", "amelei", 1),
            ("ca", "abc", 3),
        ];
        for (a, b, d) in cases {
            assert_eq!(edit_distance(&chars(a), &chars(b), 3), Some(d), "{a} {b}");
            assert_eq!(edit_distance(&chars(b), &chars(a), 3), Some(d), "{b} {a}");
        }
        assert_eq!(edit_distance(&chars("kitten"), &chars("sitting"), 2), None);
        assert_eq!(
            prefix_edit_distance(&chars("ghots"), &chars("ghostbusters"), 2),
            Some(1)
        );
        assert_eq!(
            prefix_edit_distance(&chars("star"), &chars("stardust"), 0),
            Some(0)
        );
    }

    #[test]
    fn classify_follows_the_budget_by_length() {
        // (word, prefix, term, expected)
        let cases = [
            ("wars", false, "ward", None), // 4 letters: exact only
            ("wars", true, "warsaw", Some(MatchKind::Prefix)), // but completions count
            ("matrx", false, "matrix", Some(MatchKind::Fuzzy(1))),
            ("mtrx", false, "matrix", None), // 4 letters, 2 edits
            ("matirx", false, "matrix", Some(MatchKind::Fuzzy(1))),
            ("mtarix", false, "matrix", Some(MatchKind::Fuzzy(1))),
            ("maatrixx", false, "matrix", None), // 8 letters, 2 edits
            ("terminatr", false, "terminator", Some(MatchKind::Fuzzy(1))),
            ("trminatr", false, "terminator", None), // 8 letters, 2 edits
            ("termnatorr", false, "terminator", Some(MatchKind::Fuzzy(2))),
            (
                "ghots",
                true,
                "ghostbusters",
                Some(MatchKind::FuzzyPrefix(1)),
            ),
            ("ghots", false, "ghostbusters", None),
            ("godfather", false, "godfather", Some(MatchKind::Exact)),
            ("hgost", false, "ghost", None), // a typo on the first letter
            ("xmatrix", false, "matrix", None),
            ("atrix", false, "matrix", None),
        ];
        for (word, prefix, term, expected) in cases {
            let budget = typo_budget(word.chars().count());
            assert_eq!(
                classify(word, budget, prefix, term),
                expected,
                "{word} → {term}"
            );
        }
    }

    #[test]
    fn tiers_and_weights_order_exact_prefix_fuzzy() {
        let kinds = [
            MatchKind::Exact,
            MatchKind::Prefix,
            MatchKind::Fuzzy(1),
            MatchKind::Fuzzy(2),
        ];
        for pair in kinds.windows(2) {
            assert!(pair[0].tier() > pair[1].tier(), "{pair:?}");
            assert!(pair[0].weight(5, 6) > pair[1].weight(5, 6), "{pair:?}");
        }
        assert!(MatchKind::Fuzzy(1).tier() > MatchKind::FuzzyPrefix(1).tier());
        assert!(MatchKind::FuzzyPrefix(1).tier() > MatchKind::Fuzzy(2).tier());
        assert_eq!(MatchKind::Exact.tier(), MatchKind::BEST_TIER);
        for k in kinds {
            for (q, t) in [(1, 1), (1, 30), (9, 9), (5, 4)] {
                let w = k.weight(q, t);
                assert!(w > 0.0 && w <= 1.0, "{k:?} {q} {t}: {w}");
            }
        }
    }

    #[test]
    fn expansions_prefer_better_kinds_then_frequent_terms() {
        let mut c = [
            (MatchKind::Fuzzy(1), 900, "ghast"),
            (MatchKind::Prefix, 2, "ghostbusters"),
            (MatchKind::Prefix, 40, "ghostly"),
            (MatchKind::Exact, 1, "ghost"),
        ];
        c.sort_by(|a, b| expansion_order(*a, *b));
        let terms: Vec<_> = c.iter().map(|x| x.2).collect();
        assert_eq!(terms, ["ghost", "ghostly", "ghostbusters", "ghast"]);
    }

    proptest! {
        #[test]
        fn distance_is_a_symmetric_bound(a in "[abc]{0,7}", b in "[abc]{0,7}") {
            let (ca, cb) = (chars(&a), chars(&b));
            let d = edit_distance(&ca, &cb, 20);
            prop_assert_eq!(d, edit_distance(&cb, &ca, 20));
            let d = d.unwrap();
            prop_assert_eq!(d == 0, a == b);
            prop_assert!(usize::from(d) <= ca.len().max(cb.len()));
            // The prefix distance never exceeds the full distance.
            prop_assert!(prefix_edit_distance(&ca, &cb, 20).unwrap() <= d);
        }

        #[test]
        fn classify_agrees_with_the_distances(w in "[abcd]{1,10}", t in "[abcd]{1,12}", prefix: bool) {
            let budget = typo_budget(w.chars().count());
            let got = classify(&w, budget, prefix, &t);
            let (cw, ct) = (chars(&w), chars(&t));
            match got {
                Some(MatchKind::Exact) => prop_assert_eq!(&w, &t),
                Some(MatchKind::Prefix) => prop_assert!(prefix && t.starts_with(&w)),
                Some(MatchKind::Fuzzy(d)) => {
                    prop_assert_eq!(cw[0], ct[0]);
                    prop_assert_eq!(edit_distance(&cw, &ct, budget), Some(d));
                }
                Some(MatchKind::FuzzyPrefix(d)) => {
                    prop_assert!(prefix);
                    prop_assert_eq!(cw[0], ct[0]);
                    prop_assert_eq!(prefix_edit_distance(&cw, &ct, budget), Some(d));
                }
                None => {
                    prop_assert!(w != t);
                    prop_assert!(!prefix || !t.starts_with(&w));
                    if cw[0] == ct[0] {
                        prop_assert!(edit_distance(&cw, &ct, budget).is_none());
                        prop_assert!(!prefix || prefix_edit_distance(&cw, &ct, budget).is_none());
                    }
                }
            }
        }
    }
}
