//! quintet's word rules ([`quintet_core::search::tokenize`]) as a tantivy tokenizer, so the
//! index holds exactly the words a query is split into.

use quintet_core::search::tokenize::for_each_token;
use tantivy::tokenizer::{Token, TokenStream, Tokenizer};

/// The name the tokenizer is registered under in every index.
pub(super) const NAME: &str = "quintet";

/// Splits and normalizes text with quintet's rules.
#[derive(Debug, Clone, Default)]
pub(super) struct WordTokenizer {
    tokens: Vec<Token>,
}

impl Tokenizer for WordTokenizer {
    type TokenStream<'a> = WordStream<'a>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> WordStream<'a> {
        // Offsets are not used (no highlighting, no phrase queries): every token of a value
        // spans the value, and positions count tokens. Token buffers are reused.
        let mut count = 0;
        for_each_token(text, |word| {
            if self.tokens.len() == count {
                self.tokens.push(Token::default());
            }
            if let Some(t) = self.tokens.get_mut(count) {
                t.text.clear();
                t.text.push_str(word);
                t.position = count;
                t.offset_from = 0;
                t.offset_to = text.len();
            }
            count += 1;
        });
        let used = count.min(self.tokens.len());
        WordStream {
            tokens: &mut self.tokens[..used],
            next: 0,
            none: Token::default(),
        }
    }
}

/// The tokens of one text.
#[derive(Debug)]
pub(super) struct WordStream<'a> {
    tokens: &'a mut [Token],
    /// How many tokens were handed out; the current one is `next - 1`.
    next: usize,
    /// Answered by `token()` before the first `advance()` (tantivy never asks then).
    none: Token,
}

impl TokenStream for WordStream<'_> {
    fn advance(&mut self) -> bool {
        if self.next < self.tokens.len() {
            self.next += 1;
            true
        } else {
            false
        }
    }

    fn token(&self) -> &Token {
        self.next
            .checked_sub(1)
            .and_then(|i| self.tokens.get(i))
            .unwrap_or(&self.none)
    }

    fn token_mut(&mut self) -> &mut Token {
        match self.next.checked_sub(1) {
            Some(i) if i < self.tokens.len() => &mut self.tokens[i],
            _ => &mut self.none,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_quintet_words_and_reuses_buffers() {
        let mut t = WordTokenizer::default();
        let mut words = Vec::new();
        let mut s = t.token_stream("Crème brûlée, again");
        while let Some(tok) = s.next() {
            words.push((tok.text.clone(), tok.position));
        }
        assert_eq!(
            words,
            [
                ("creme".into(), 0),
                ("brulee".into(), 1),
                ("again".into(), 2)
            ]
        );
        let mut s = t.token_stream("one");
        assert_eq!(s.next().map(|t| t.text.clone()), Some("one".to_owned()));
        assert!(s.next().is_none());
        let mut s = t.token_stream("...");
        assert!(!s.advance());
        assert_eq!(s.token().text, "");
    }
}
