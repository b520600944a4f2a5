//! The o200k_base tokenizer, as far as counting needs it: text splits into pieces by o200k's
//! pre-tokenizer pattern, and each piece merges by rank (`merge.rs`) over the vocabulary
//! (`vocab.rs`). It counts exactly what `bpe-openai` 0.3 counts for every text (the tests in
//! `tests/it/tokens.rs` compare the two), without its 52 MB of tables.
//!
//! The pattern is tiktoken's, with its one look-ahead `\s+(?!\S)` written as `\s+\s` and the
//! last character dropped from such a match, as `bpe-openai` does: `regex-automata` has no
//! look-around, and the three patterns with leftmost-first priority give the same splits.
//!
//! Most pieces are words, numbers and runs of punctuation that come back again and again, so
//! the count of each short piece is kept in a per-thread cache (`PieceCache`): a repeated
//! piece costs one lookup in a small table instead of a search of the vocabulary for each of
//! its pairs. A piece's count depends on its bytes alone, so the cache changes no count
//! (`tests::a_warm_cache_counts_what_merging_counts`).
//!
//! The pattern's search state is kept in the same per-thread cache: a regex shared between
//! threads lends its own only to the thread that built it, and every other thread (the
//! sidecar's reader, which counts a first request's parts as they arrive) took a lock for it
//! at each piece.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use regex_automata::meta::{Cache, Regex};
use regex_automata::{Anchored, Input};
use rustc_hash::FxHashMap;

/// The splitter: tiktoken's o200k pattern, its look-ahead as a pattern of its own.
pub struct Tokenizer {
    pattern: Regex,
    /// Which tokenizer a thread's kept search state belongs to (`PieceCache::search`).
    id: u64,
}

/// The next [`Tokenizer::id`].
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

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
        Ok(Tokenizer { pattern, id: NEXT_ID.fetch_add(1, Ordering::Relaxed) })
    }

    /// The number of o200k tokens in `text`.
    pub fn count(&self, text: &str) -> usize {
        PIECES.with(|cache| {
            let cache = &mut *cache.borrow_mut();
            let mut search = match cache.search.take() {
                Some((id, search)) if id == self.id => search,
                _ => self.pattern.create_cache(),
            };
            let n = split(&self.pattern, &mut search, text).map(|piece| cache.count(piece.as_bytes())).sum();
            cache.search = Some((self.id, search));
            n
        })
    }

    /// [`Tokenizer::count`] without the piece cache: every piece merged.
    #[cfg(test)]
    fn count_uncached(&self, text: &str) -> usize {
        let mut scratch = Vec::new();
        self.pieces(text).map(|piece| super::merge::count(piece.as_bytes(), &mut scratch)).sum()
    }

    /// The pieces the pre-tokenizer splits `text` into, searched for with the regex's own
    /// shared state: [`Tokenizer::count`] keeps its own per thread, and the tests check that
    /// the two split alike.
    #[cfg(test)]
    fn pieces<'t>(&'t self, text: &'t str) -> impl Iterator<Item = &'t str> + 't {
        let mut at = 0;
        std::iter::from_fn(move || {
            let rest = &text[at..];
            let found = self.pattern.find(Input::new(rest).anchored(Anchored::Yes))?;
            let end = piece_end(rest, &found)?;
            at += end;
            Some(&rest[..end])
        })
    }
}

/// The pieces of `text`, searched for with `search`, the state `pattern` keeps between
/// searches.
fn split<'a>(pattern: &'a Regex, search: &'a mut Cache, text: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    let mut at = 0;
    std::iter::from_fn(move || next_piece(pattern, search, text, &mut at))
}

/// The piece of `text` at `at`, which moves past it; `None` at the end.
fn next_piece<'t>(pattern: &Regex, search: &mut Cache, text: &'t str, at: &mut usize) -> Option<&'t str> {
    let rest = &text[*at..];
    let found = pattern.search_with(search, &Input::new(rest).anchored(Anchored::Yes))?;
    let end = piece_end(rest, &found)?;
    *at += end;
    Some(&rest[..end])
}

/// Where the piece `found` at the start of `rest` ends; `None` for an empty one (the end).
fn piece_end(rest: &str, found: &regex_automata::Match) -> Option<usize> {
    let mut end = found.end();
    if found.pattern().as_usize() == LOOKAHEAD_PATTERN {
        // `\s+\s` matched at least two characters; the last one only looked ahead.
        end -= rest[..end].chars().next_back().map_or(0, char::len_utf8);
    }
    (end != 0).then_some(end)
}

thread_local! {
    static PIECES: RefCell<PieceCache> = RefCell::new(PieceCache::default());
}

/// The counts of the short pieces a thread merged lately, by their bytes packed in a `u128`:
/// up to `SHORT_PIECE` bytes, zero-padded, with the length in the last byte (so no two pieces
/// share a key). It holds at most `CACHED_PIECES` counts and starts again empty when full,
/// which bounds its memory (about 1 MB) whatever the text. It also keeps the search state of
/// the last tokenizer the thread counted with, by the tokenizer's id.
#[derive(Default)]
struct PieceCache {
    counts: FxHashMap<u128, u32>,
    scratch: Vec<(u32, super::vocab::Rank)>,
    search: Option<(u64, Cache)>,
}

/// The longest piece the cache keeps.
const SHORT_PIECE: usize = 15;
/// How many counts the cache holds at most.
const CACHED_PIECES: usize = 1 << 14;

impl PieceCache {
    /// The number of tokens `piece` merges to, from the cache when it is there.
    fn count(&mut self, piece: &[u8]) -> usize {
        if piece.len() <= 1 || piece.len() > SHORT_PIECE {
            return super::merge::count(piece, &mut self.scratch);
        }
        let mut packed = [0u8; 16];
        packed[..piece.len()].copy_from_slice(piece);
        packed[15] = piece.len() as u8;
        let key = u128::from_le_bytes(packed);
        if let Some(&n) = self.counts.get(&key) {
            return n as usize;
        }
        let n = super::merge::count(piece, &mut self.scratch);
        if self.counts.len() >= CACHED_PIECES {
            self.counts.clear();
        }
        self.counts.insert(key, n as u32);
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Texts whose pieces repeat (so the cache answers most of them), with pieces of every
    /// length around `SHORT_PIECE`, bytes that pad a short key (NUL) and more pieces than the
    /// cache holds (so it starts again while counting).
    fn texts() -> Vec<String> {
        let mut texts = vec![
            "Hello, world! Hello, world!\n".repeat(50),
            "\u{0}\u{0}a \u{0}a\u{0} a\u{0}\u{0}".repeat(20),
            "fn main() { println!(\"{}\", x); }\n    let y = vec![1, 2, 3];\n".repeat(40),
        ];
        for len in 1..=SHORT_PIECE + 3 {
            texts.push(format!("{} {} {}", "ab".repeat(len), "é".repeat(len), "=".repeat(len)));
        }
        texts.push((0..CACHED_PIECES + 5_000).map(|i| format!("w{i:x}q ")).collect());
        texts
    }

    #[test]
    fn a_warm_cache_counts_what_merging_counts() {
        let tokenizer = Tokenizer::new().expect("the pattern compiles");
        for round in 0..2 {
            for text in texts() {
                assert_eq!(
                    tokenizer.count(&text),
                    tokenizer.count_uncached(&text),
                    "round {round}: {:?}",
                    text.chars().take(40).collect::<String>()
                );
            }
        }
        PIECES.with(|cache| assert!(cache.borrow().counts.len() <= CACHED_PIECES));
    }

    /// Each thread keeps one tokenizer's search state: two tokenizers used in turn, and a
    /// thread other than the one that built them, must split as the regex's shared state does.
    #[test]
    fn a_thread_s_kept_search_state_splits_as_the_shared_one_does() {
        let tokenizers = [Tokenizer::new().expect("compiles"), Tokenizer::new().expect("compiles")];
        let texts = texts();
        std::thread::scope(|scope| {
            for _ in 0..2 {
                scope.spawn(|| {
                    for (i, text) in texts.iter().enumerate() {
                        let tokenizer = &tokenizers[i % 2];
                        let mut search = tokenizer.pattern.create_cache();
                        let kept: Vec<&str> = split(&tokenizer.pattern, &mut search, text).collect();
                        assert_eq!(kept, tokenizer.pieces(text).collect::<Vec<_>>());
                        assert_eq!(tokenizer.count(text), tokenizer.count_uncached(text));
                    }
                });
            }
        });
    }
}
