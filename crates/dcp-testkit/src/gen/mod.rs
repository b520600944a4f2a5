//! Deterministic synthetic OpenCode sessions and dcp state files, for benchmarks and tests.
//!
//! Measuring dcp on a 20,000-message session needs such a session, and recording one from a
//! real OpenCode run is neither practical nor reproducible. This module builds one instead, in
//! the exact shape the `experimental.chat.messages.transform` hook receives (`{info, parts}`
//! messages, copied field for field from what OpenCode 1.18 stores; see `fixtures/data/` and
//! `shared/opencode-reference/`), with the mix that gives pruning work to do: files read again
//! and again, failed calls, writes read back, bash runs, and tool outputs from 200 B to 50 KB
//! that look like code and logs, so the tokenizer does real work. It also writes state files in
//! dcp's own layout, for the all-time stats. Everything comes from a small splitmix64 generator
//! and integer arithmetic only, so the same seed gives byte-identical output on every machine.

//!
//! The parts: [`text`] (word lists and templates that make code, logs and prose), `session`
//! and `calls` (the generator of one session and its tool calls), and [`states`] (state
//! files for the all-time stats).

mod calls;
mod session;
pub mod states;
pub mod text;

pub use session::{session, unfinished, write_session, GeneratedSession, SessionSpec};
pub use states::{write_states, StatesSummary};

/// splitmix64: tiny, fast, and good enough for synthetic data. Not for anything secret.
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n`, or 0 when `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A number in `lo..=hi` (`lo` when `hi < lo`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }

    /// True `percent` times out of 100.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// One of `items`, uniformly; `None` only for an empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        items.get(self.below(items.len() as u64) as usize)
    }

    /// The index chosen by `weights` (any scale); 0 for empty or all-zero weights.
    pub fn weighted(&mut self, weights: &[u64]) -> usize {
        let total: u64 = weights.iter().sum();
        let mut roll = self.below(total);
        for (i, w) in weights.iter().enumerate() {
            if roll < *w {
                return i;
            }
            roll -= w;
        }
        0
    }

    /// A word of `WORDS`-like lists, never failing: the lists below are never empty.
    pub(crate) fn word(&mut self, items: &[&'static str]) -> &'static str {
        self.pick(items).copied().unwrap_or("x")
    }
}

/// Smallest and largest tool output the generator aims for, in bytes.
pub const MIN_OUTPUT: usize = 200;
pub const MAX_OUTPUT: usize = 50_000;

/// Output sizes: most small, some large. Eight octaves from 200 B to 49 KB, weighted per mille
/// (median about 1 KB, mean about 3.7 KB, 2.5% above 25 KB).
const SIZE_OCTAVES: [(u64, u64); 8] = [
    (200, 400),
    (400, 800),
    (800, 1_600),
    (1_600, 3_200),
    (3_200, 6_400),
    (6_400, 12_800),
    (12_800, 25_600),
    (25_600, 49_000),
];
const SIZE_WEIGHTS: [u64; 8] = [240, 220, 170, 130, 100, 70, 45, 25];

pub(crate) fn skewed_size(rng: &mut Rng) -> usize {
    let (lo, hi) = SIZE_OCTAVES[rng.weighted(&SIZE_WEIGHTS)];
    rng.range(lo, hi - 1) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_is_stable_across_versions_of_the_code_that_uses_it() {
        // Pinned values: a change here changes every generated session and benchmark input.
        let mut rng = Rng::new(0);
        assert_eq!(rng.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(rng.below(0), 0);
        assert!((0..1_000).all(|_| rng.range(3, 5) >= 3));
    }

    #[test]
    fn sizes_stay_within_the_octaves() {
        let mut rng = Rng::new(7);
        let sizes: Vec<usize> = (0..10_000).map(|_| skewed_size(&mut rng)).collect();
        assert!(sizes.iter().all(|s| (MIN_OUTPUT..MAX_OUTPUT).contains(s)));
        let small = sizes.iter().filter(|s| **s < 1_600).count();
        assert!(small > 5_000, "{small}");
    }
}
