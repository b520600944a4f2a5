//! The o200k_base tokenizer, as far as counting needs it: text splits into pieces by o200k's
//! pre-tokenizer pattern, and each piece merges by rank (`merge.rs`) over the vocabulary
//! (`vocab.rs`). It counts exactly what `bpe-openai` 0.3 counts for every text (the tests in
//! `tests/it/tokens.rs` compare the two), without its 52 MB of tables.
//!
//! The pattern is tiktoken's, with its one look-ahead `\s+(?!\S)` written as `\s+\s` and the
//! last character dropped from such a match, as `bpe-openai` does: `regex-automata` has no
//! look-around, and the three patterns with leftmost-first priority give the same splits.

use regex_automata::meta::Regex;
use regex_automata::{Anchored, Input};

/// The splitter: tiktoken's o200k pattern, its look-ahead as a pattern of its own.
pub struct Tokenizer {
    pattern: Regex,
}

/// Pattern ids whose last character is a look-ahead, to be left out of the piece.
const LOOKAHEAD_PATTERN: usize = 1;

impl Tokenizer {
    /// Compiles the pre-tokenizer's pattern (a few milliseconds; the vocabulary needs no loading).
    pub fn new() -> Result<Self, Box<regex_automata::meta::BuildError>> {
        let words = [
            r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
            r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
            r"\p{N}{1,3}",
            r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
            r"\s*[\r\n]+",
            r"\s+$",
        ]
        .join("|");
        let pattern = Regex::new_many(&[words.as_str(), r"\s+\s", r"\s+"]).map_err(Box::new)?;
        Ok(Tokenizer { pattern })
    }

    /// The number of o200k tokens in `text`.
    pub fn count(&self, text: &str) -> usize {
        let mut scratch = Vec::new();
        self.pieces(text).map(|piece| super::merge::count(piece.as_bytes(), &mut scratch)).sum()
    }

    /// The pieces the pre-tokenizer splits `text` into.
    pub fn pieces<'t>(&'t self, text: &'t str) -> impl Iterator<Item = &'t str> + 't {
        let mut at = 0;
        std::iter::from_fn(move || {
            let rest = &text[at..];
            let found = self.pattern.find(Input::new(rest).anchored(Anchored::Yes))?;
            let mut end = found.end();
            if found.pattern().as_usize() == LOOKAHEAD_PATTERN {
                // `\s+\s` matched at least two characters; the last one only looked ahead.
                end -= rest[..end].chars().next_back().map_or(0, char::len_utf8);
            }
            if end == 0 {
                return None;
            }
            let piece = &rest[..end];
            at += end;
            Some(piece)
        })
    }
}
