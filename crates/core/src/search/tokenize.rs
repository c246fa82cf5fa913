//! Splitting text into words and normalizing them: the one definition every search adapter
//! indexes and queries with, so that engines agree on what a word is.
//!
//! - A **word** is a maximal run of letters, combining marks and digits (Unicode general
//!   categories `L*`, `M*`, `N*`). Everything else separates words: whitespace, punctuation
//!   (`'`, `-`, `_`, `.`…) and symbols (`+`, `$`, `©`, emoji…).
//! - A word is **normalized** by compatibility decomposition (NFKD: `ﬁ` → `fi`, full-width
//!   letters → ASCII), lowercasing, dropping diacritics (the combining diacritical mark
//!   blocks: `é` → `e`), folding letters that have no decomposition (`ß` → `ss`, `æ` → `ae`,
//!   `ø` → `o`, `ł` → `l`…) and recomposing (NFC), which keeps Hangul and kana intact.
//! - Words longer than [`MAX_TOKEN_BYTES`] after normalization are dropped: they are hashes,
//!   encoded blobs or run-together text, not words anyone types.
//!
//! ```
//! use quintet_core::search::tokenize::tokens;
//! assert_eq!(tokens("Crème Brûlée, s'il-vous-plaît!"), ["creme", "brulee", "s", "il", "vous", "plait"]);
//! assert_eq!(tokens("STRASSE Straße"), ["strasse", "strasse"]);
//! ```

use std::ops::Range;

use icu_normalizer::{ComposingNormalizerBorrowed, DecomposingNormalizerBorrowed};
use icu_properties::{
    CodePointMapData,
    props::{GeneralCategory, GeneralCategoryGroup},
};

/// Longest normalized word kept, in bytes.
pub const MAX_TOKEN_BYTES: usize = 128;

/// Whether `c` belongs to a word (letter, mark or number).
fn is_word_char(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_alphanumeric();
    }
    let gc = CodePointMapData::<GeneralCategory>::new().get(c);
    GeneralCategoryGroup::Letter.contains(gc)
        || GeneralCategoryGroup::Mark.contains(gc)
        || GeneralCategoryGroup::Number.contains(gc)
}

/// The byte range of the next word of `text` at or after byte `from` (a char boundary).
pub fn next_word(text: &str, from: usize) -> Option<Range<usize>> {
    let rest = text.get(from..)?;
    let mut chars = rest.char_indices();
    let start = loop {
        let (i, c) = chars.next()?;
        if is_word_char(c) {
            break from + i;
        }
    };
    let end = chars
        .find(|(_, c)| !is_word_char(*c))
        .map_or(text.len(), |(i, _)| from + i);
    Some(start..end)
}

/// Whether `c` is a diacritic: a combining mark of the diacritical-mark blocks.
fn is_diacritic(c: char) -> bool {
    matches!(c as u32,
        0x0300..=0x036F | 0x1AB0..=0x1AFF | 0x1DC0..=0x1DFF | 0x20D0..=0x20FF | 0xFE20..=0xFE2F)
}

/// Lowercase letters without a decomposition, folded to their base letters.
fn fold_letter(c: char) -> Option<&'static str> {
    Some(match c {
        'ß' => "ss",
        'æ' => "ae",
        'œ' => "oe",
        'ø' => "o",
        'ł' => "l",
        'đ' | 'ð' => "d",
        'þ' => "th",
        'ı' => "i",
        'ħ' => "h",
        'ŧ' => "t",
        _ => return None,
    })
}

/// Normalize `word` (as found by [`next_word`]) into `out`, replacing its contents.
///
/// Compatibility decomposition can produce characters that separate words (`½` becomes
/// `1⁄2`), so the result may hold more than one word; [`for_each_token`] splits it again.
pub fn normalize_into(word: &str, out: &mut String) {
    out.clear();
    if word.is_ascii() {
        out.extend(word.bytes().map(|b| char::from(b.to_ascii_lowercase())));
        return;
    }
    let mut folded = String::with_capacity(word.len());
    let nfkd = DecomposingNormalizerBorrowed::new_nfkd();
    for c in nfkd.normalize_iter(word.chars()) {
        for lower in c.to_lowercase() {
            if is_diacritic(lower) {
                continue;
            }
            match fold_letter(lower) {
                Some(s) => folded.push_str(s),
                None => folded.push(lower),
            }
        }
    }
    out.push_str(&ComposingNormalizerBorrowed::new_nfc().normalize(&folded));
}

/// Every normalized word of `text`, in order, repeats included.
pub fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for_each_token(text, |t| out.push(t.to_owned()));
    out
}

/// Call `f` with every normalized word of `text`, in order.
pub fn for_each_token(text: &str, f: impl FnMut(&str)) {
    if text.is_ascii() {
        ascii_tokens(text.as_bytes(), f);
    } else {
        any_tokens(text, f);
    }
}

/// [`for_each_token`] for ASCII text, byte by byte: its words are the runs of letters and
/// digits, lowercased. Most documents are ASCII, and indexing spent a tenth of its time
/// splitting them character by character.
fn ascii_tokens(text: &[u8], mut f: impl FnMut(&str)) {
    let mut buf = String::new();
    let mut at = 0;
    while at < text.len() {
        let Some(start) = text[at..]
            .iter()
            .position(u8::is_ascii_alphanumeric)
            .map(|i| at + i)
        else {
            return;
        };
        let end = text[start..]
            .iter()
            .position(|b| !b.is_ascii_alphanumeric())
            .map_or(text.len(), |i| start + i);
        at = end;
        if end - start <= MAX_TOKEN_BYTES {
            buf.clear();
            buf.extend(
                text[start..end]
                    .iter()
                    .map(|b| char::from(b.to_ascii_lowercase())),
            );
            f(&buf);
        }
    }
}

/// [`for_each_token`] for any text.
fn any_tokens(text: &str, mut f: impl FnMut(&str)) {
    let mut buf = String::new();
    let mut at = 0;
    while let Some(range) = next_word(text, at) {
        at = range.end;
        let word = &text[range];
        normalize_into(word, &mut buf);
        if word.is_ascii() {
            // ASCII words are letters and digits only, and stay one word.
            if buf.len() <= MAX_TOKEN_BYTES {
                f(&buf);
            }
            continue;
        }
        let mut inner = 0;
        while let Some(part) = next_word(&buf, inner) {
            inner = part.end;
            if part.len() <= MAX_TOKEN_BYTES {
                f(&buf[part]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn splits_on_whitespace_punctuation_and_symbols() {
        let cases: &[(&str, &[&str])] = &[
            ("Ghostbusters", &["ghostbusters"]),
            ("  the  Matrix\n\tReloaded ", &["the", "matrix", "reloaded"]),
            ("don't stop-believing", &["don", "t", "stop", "believing"]),
            ("snake_case.and/paths", &["snake", "case", "and", "paths"]),
            ("c++ & $100 = 1+1", &["c", "100", "1", "1"]),
            ("«Bonjour» — ¿Qué tal?", &["bonjour", "que", "tal"]),
            ("emoji 🎬 between", &["emoji", "between"]),
            (
                "no\u{00A0}break\u{3000}ideographic",
                &["no", "break", "ideographic"],
            ),
            ("2001: A Space Odyssey", &["2001", "a", "space", "odyssey"]),
            ("", &[]),
            ("?!…", &[]),
        ];
        for (text, expected) in cases {
            assert_eq!(tokens(text), *expected, "{text:?}");
        }
    }

    #[test]
    fn folds_case_diacritics_and_compatibility_forms() {
        let cases: &[(&str, &str)] = &[
            ("Amélie", "amelie"),
            ("NAÏVE", "naive"),
            ("Ærøskøbing", "aeroskobing"),
            ("Łódź", "lodz"),
            ("Straße", "strasse"),
            ("ﬁlm", "film"),
            ("ＡＢＣ", "abc"),
            ("İstanbul", "istanbul"),
            ("Ελληνικά", "ελληνικα"),
            ("Москва", "москва"),
            ("한국어", "한국어"),
            ("がっこう", "がっこう"),
            // Decomposed input folds like composed input.
            ("Ame\u{0301}lie", "amelie"),
        ];
        for (text, expected) in cases {
            assert_eq!(tokens(text), [*expected], "{text:?}");
        }
    }

    #[test]
    fn overlong_words_are_dropped() {
        let long = "x".repeat(MAX_TOKEN_BYTES + 1);
        let fits = "y".repeat(MAX_TOKEN_BYTES);
        assert_eq!(
            tokens(&format!("a {long} b {fits}")),
            ["a", "b", fits.as_str()]
        );
    }

    #[test]
    fn next_word_reports_byte_ranges() {
        let text = "¡Hola, señor!";
        let mut at = 0;
        let mut words = Vec::new();
        while let Some(r) = next_word(text, at) {
            at = r.end;
            words.push(&text[r]);
        }
        assert_eq!(words, ["Hola", "señor"]);
        assert_eq!(next_word(text, text.len()), None);
    }

    proptest! {
        #[test]
        fn tokens_are_normalized_fixed_points(text in "\\PC{0,40}") {
            for t in tokens(&text) {
                prop_assert!(!t.is_empty() && t.len() <= MAX_TOKEN_BYTES);
                // A token is one word, and normalizing it again changes nothing.
                prop_assert_eq!(tokens(&t), vec![t.clone()]);
            }
        }

        #[test]
        fn ascii_text_splits_as_any_text(text in "[a-zA-Z0-9 ,.!_$-]{0,300}") {
            let mut fast = Vec::new();
            ascii_tokens(text.as_bytes(), |t| fast.push(t.to_owned()));
            let mut slow = Vec::new();
            any_tokens(&text, |t| slow.push(t.to_owned()));
            prop_assert_eq!(fast, slow);
        }

        #[test]
        fn case_never_changes_ascii_tokens(text in "[a-zA-Z0-9 ,.!-]{0,40}") {
            prop_assert_eq!(tokens(&text), tokens(&text.to_uppercase()));
        }
    }
}
