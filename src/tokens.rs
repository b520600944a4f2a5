//! Token counting: an offline o200k BPE tokenizer, with a per-part cache.
//!
//! Savings are reported in tokens, so every pruned output is counted once with the o200k
//! byte-pair encoder (`o200k.rs`: tiktoken's vocabulary compiled into the binary as compact
//! tables, `vocab.rs`; nothing is downloaded). Counts are cached by part id and field, because
//! a completed tool part never changes. When the tokenizer cannot run, counting falls back to
//! characters / 4 and says so through [`Estimator`].

mod merge;
mod o200k;
mod vocab;

use rustc_hash::FxHashMap as HashMap;
use std::sync::OnceLock;

/// Which estimator produced the counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Estimator {
    #[serde(rename = "o200k_base")]
    O200k,
    #[serde(rename = "chars/4")]
    CharsDiv4,
}

impl Estimator {
    pub fn name(self) -> &'static str {
        match self {
            Estimator::O200k => "o200k_base",
            Estimator::CharsDiv4 => "chars/4",
        }
    }
}

/// Which estimator to use; `Auto` tries the BPE tokenizer first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EstimatorChoice {
    #[default]
    Auto,
    CharsDiv4,
}

static BPE_STATE: OnceLock<Option<o200k::Tokenizer>> = OnceLock::new();

fn bpe() -> Option<&'static o200k::Tokenizer> {
    BPE_STATE
        .get_or_init(|| {
            // Only the pre-tokenizer's pattern compiles; should it fail (or panic in the
            // dependency), counting degrades to chars/4 instead of taking dcp down.
            std::panic::catch_unwind(o200k::Tokenizer::new).ok().and_then(Result::ok)
        })
        .as_ref()
}

/// The estimator `Auto` will use, without waiting for the pre-tokenizer's pattern to compile
/// (a few milliseconds, on the thread [`preload`] starts; the tables are in the binary): the
/// tokenizer, unless it already failed to build.
pub fn expected_estimator() -> Estimator {
    match BPE_STATE.get() {
        Some(None) => Estimator::CharsDiv4,
        _ => Estimator::O200k,
    }
}

/// Starts compiling the pre-tokenizer on a background thread, so that the first count is fast.
pub fn preload() {
    std::thread::spawn(|| {
        let _ = bpe();
    });
}

/// The field of a part whose tokens were counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    Output,
    Input,
}

/// Counts tokens and remembers the count of each part's field.
#[derive(Debug, Default)]
pub struct TokenCounter {
    choice: EstimatorChoice,
    /// By part id: the output's count and the input's. Looked up by `&str`, so a hit
    /// allocates nothing.
    cache: HashMap<String, [Option<u64>; 2]>,
    /// By part id: the deduplication signature of a completed call, whose input never changes.
    signatures: HashMap<String, u64>,
    /// By a text's 128-bit digest: the count of a big text seen in some part, for another part
    /// that holds the same text (see [`TokenCounter::count_part_by_digest`]).
    by_digest: HashMap<u128, u64>,
}

impl TokenCounter {
    pub fn new(choice: EstimatorChoice) -> Self {
        TokenCounter {
            choice,
            cache: HashMap::default(),
            signatures: HashMap::default(),
            by_digest: HashMap::default(),
        }
    }

    /// The estimator this counter uses.
    pub fn estimator(&self) -> Estimator {
        match self.choice {
            EstimatorChoice::Auto if bpe().is_some() => Estimator::O200k,
            _ => Estimator::CharsDiv4,
        }
    }

    /// Tokens in `text`, uncached.
    pub fn count(&self, text: &str) -> u64 {
        match (self.choice, bpe()) {
            (EstimatorChoice::Auto, Some(bpe)) => bpe.count(text) as u64,
            _ => chars_div4(text),
        }
    }

    /// Tokens in `text`, the `field` of part `part_id`, counted once per part. Parts without
    /// an id are counted every time.
    pub fn count_part(&mut self, part_id: &str, field: Field, text: &str) -> u64 {
        self.count_part_with(part_id, field, || text)
    }

    /// [`TokenCounter::count_part`], reading the text only if the count is not cached.
    pub fn count_part_with<'t>(&mut self, part_id: &str, field: Field, text: impl FnOnce() -> &'t str) -> u64 {
        if part_id.is_empty() {
            return self.count(text());
        }
        let slot = field as usize;
        if let Some(n) = self.cache.get(part_id).and_then(|counts| counts[slot]) {
            return n;
        }
        let n = self.count(text());
        match self.cache.get_mut(part_id) {
            Some(counts) => counts[slot] = Some(n),
            None => {
                let mut counts = [None; 2];
                counts[slot] = Some(n);
                self.cache.insert(part_id.to_string(), counts);
            }
        }
        n
    }

    /// [`TokenCounter::count_part`] for a `text` whose digest is `digest`: a text counted
    /// before for another part (found by its digest) is not counted again. The caller's digest
    /// must identify the text (`session::slim`'s 128-bit one does, short of a collision, as
    /// its markers already assume).
    pub fn count_part_by_digest(&mut self, part_id: &str, field: Field, digest: u128, text: &str) -> u64 {
        let slot = field as usize;
        if let Some(n) = self.cache.get(part_id).and_then(|counts| counts[slot]) {
            return n;
        }
        let n = match self.by_digest.get(&digest) {
            Some(&n) => n,
            None => {
                let n = self.count(text);
                self.by_digest.insert(digest, n);
                n
            }
        };
        if !part_id.is_empty() {
            self.cache.entry(part_id.to_string()).or_insert([None; 2])[slot] = Some(n);
        }
        n
    }

    /// Counts the `field` of many parts at once, caching the counts, on two threads when
    /// there is enough text to be worth one: a first request decides hundreds of prunes
    /// together, and tokenizing their outputs one after the other is most of its time.
    /// `parts` are `(part id, text)`; parts without an id or already counted are skipped.
    pub fn count_parts(&mut self, field: Field, parts: &[(&str, &str)]) {
        const PARALLEL_BYTES: usize = 256 * 1024;
        let slot = field as usize;
        let todo: Vec<(&str, &str)> = parts
            .iter()
            .copied()
            .filter(|(id, _)| !id.is_empty() && self.cache.get(*id).is_none_or(|c| c[slot].is_none()))
            .collect();
        let bytes: usize = todo.iter().map(|(_, text)| text.len()).sum();
        let counts: Vec<u64> = if bytes < PARALLEL_BYTES {
            todo.iter().map(|(_, text)| self.count(text)).collect()
        } else {
            // Split where half the text is, so both threads have as much to do.
            let mut seen = 0;
            let half = todo
                .iter()
                .position(|(_, text)| {
                    seen += text.len();
                    seen >= bytes / 2
                })
                .map_or(todo.len(), |i| i + 1);
            let (a, b) = todo.split_at(half);
            let this = &*self;
            std::thread::scope(|s| {
                let second = s.spawn(|| b.iter().map(|(_, text)| this.count(text)).collect::<Vec<u64>>());
                let mut first: Vec<u64> = a.iter().map(|(_, text)| this.count(text)).collect();
                // A panic in the other thread is a bug, not bad input: it goes on as one.
                first.extend(second.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
                first
            })
        };
        for ((id, _), n) in todo.into_iter().zip(counts) {
            self.cache.entry(id.to_string()).or_insert([None; 2])[slot] = Some(n);
        }
    }

    /// The signature of part `part_id`, worked out by `make` the first time.
    pub fn signature(&mut self, part_id: &str, make: impl FnOnce() -> u64) -> u64 {
        if part_id.is_empty() {
            return make();
        }
        if let Some(s) = self.signatures.get(part_id) {
            return *s;
        }
        let s = make();
        self.signatures.insert(part_id.to_string(), s);
        s
    }

    /// Forgets every cached count (after a compaction, the parts are gone).
    pub fn clear(&mut self) {
        self.cache.clear();
        self.signatures.clear();
        self.by_digest.clear();
    }
}

/// The fallback estimate: one token per four characters, rounded up.
pub fn chars_div4(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bpe_counts_differ_from_the_char_estimate() {
        let counter = TokenCounter::new(EstimatorChoice::Auto);
        assert_eq!(counter.estimator(), Estimator::O200k);
        assert_eq!(counter.count("Hello, world!"), 4);
        let fallback = TokenCounter::new(EstimatorChoice::CharsDiv4);
        assert_eq!(fallback.estimator(), Estimator::CharsDiv4);
        assert_eq!(fallback.count("Hello, world!"), 4);
        assert_eq!(fallback.count("Hello, world! Hello"), 5);
    }

    #[test]
    fn counting_many_parts_at_once_gives_the_counts_one_at_a_time_gives() {
        let texts: Vec<String> =
            (0..40).map(|i| format!("fn f{i}() {{ println!(\"{}\"); }}\n", "x".repeat(i * 400))).collect();
        let ids: Vec<String> = (0..40).map(|i| format!("prt_{i}")).collect();
        let parts: Vec<(&str, &str)> = ids.iter().map(String::as_str).zip(texts.iter().map(String::as_str)).collect();
        for repeat in [1, 20] {
            // 20 copies of the text make it long enough for two threads.
            let long: Vec<String> = texts.iter().map(|t| t.repeat(repeat)).collect();
            let parts: Vec<(&str, &str)> =
                parts.iter().map(|(id, _)| *id).zip(long.iter().map(String::as_str)).collect();
            let mut bulk = TokenCounter::new(EstimatorChoice::Auto);
            bulk.count_parts(Field::Output, &parts);
            let mut single = TokenCounter::new(EstimatorChoice::Auto);
            for (id, text) in &parts {
                let n = single.count_part(id, Field::Output, text);
                // A cached count is what is used: a different text gives the bulk count back.
                assert_eq!(bulk.count_part(id, Field::Output, "different"), n, "{id}");
            }
        }
        // Parts without an id are not cached.
        let mut bulk = TokenCounter::new(EstimatorChoice::Auto);
        bulk.count_parts(Field::Output, &[("", "abc")]);
        assert!(bulk.cache.is_empty());
    }

    #[test]
    fn part_counts_are_cached_by_id_and_field() {
        let mut counter = TokenCounter::new(EstimatorChoice::CharsDiv4);
        assert_eq!(counter.count_part("prt_1", Field::Output, "abcdefgh"), 2);
        // The cache answers for the same part even if handed other text.
        assert_eq!(counter.count_part("prt_1", Field::Output, "abcdefghijkl"), 2);
        assert_eq!(counter.count_part("prt_1", Field::Input, "abcdefghijkl"), 3);
        counter.clear();
        assert_eq!(counter.count_part("prt_1", Field::Output, "abcdefghijkl"), 3);
    }
}
