//! The recorded tokens of the prunes in force by the message of their call, summed over any
//! first messages in a time that grows with the log of the history's length (a Fenwick
//! tree): the savings ask on every request what the prunes remove from the whole history,
//! from the part in front of the first rewritten message, and outside the compressed ranges,
//! and adding up every prune in force for each would cost the session's prunes per request.

use crate::strategies::compress::Span;

/// Tokens by message. Node `n` (from 1) holds the sum of the messages `n - lowbit(n)` to
/// `n - 1`; the node count is a power of two, so the last node holds them all.
#[derive(Debug, Default)]
pub(super) struct Sums {
    tree: Vec<u64>,
}

impl Sums {
    /// Adds `tokens` to message `message`.
    pub fn add(&mut self, message: usize, tokens: u64) {
        self.grow(message + 1);
        let mut n = message + 1;
        while n <= self.tree.len() {
            self.tree[n - 1] += tokens;
            n += lowbit(n);
        }
    }

    /// Takes `tokens` added to message `message` off again.
    pub fn remove(&mut self, message: usize, tokens: u64) {
        let mut n = message + 1;
        while n <= self.tree.len() {
            self.tree[n - 1] -= tokens;
            n += lowbit(n);
        }
    }

    /// The tokens of the first `upto` messages.
    pub fn before(&self, upto: usize) -> u64 {
        let mut n = upto.min(self.tree.len());
        let mut sum = 0;
        while n > 0 {
            sum += self.tree[n - 1];
            n -= lowbit(n);
        }
        sum
    }

    /// The tokens of the first `upto` messages outside `ranges` (in history order, as
    /// [`crate::strategies::compress::spans`] gives them; they may overlap).
    pub fn before_outside(&self, upto: usize, ranges: &[Span]) -> u64 {
        let mut sum = self.before(upto);
        // Messages before `covered` are taken off already.
        let mut covered = 0;
        for span in ranges {
            let (from, to) = (span.from.max(covered).min(upto), (span.to + 1).min(upto));
            if from < to {
                sum -= self.before(to) - self.before(from);
            }
            covered = covered.max(span.to + 1);
        }
        sum
    }

    /// Makes room for `messages` messages: the node count doubles until it is enough. The
    /// new nodes cover only messages without tokens, but for the last, which covers all.
    fn grow(&mut self, messages: usize) {
        if self.tree.is_empty() && messages > 0 {
            self.tree.push(0);
        }
        while self.tree.len() < messages {
            let total = self.tree[self.tree.len() - 1];
            self.tree.resize(2 * self.tree.len(), 0);
            let last = self.tree.len() - 1;
            self.tree[last] = total;
        }
    }
}

/// The lowest set bit of `n`.
fn lowbit(n: usize) -> usize {
    n & n.wrapping_neg()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (xorshift), so the test needs no crate.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }
    }

    /// What the sums stand in for: every message's tokens walked.
    fn walked(tokens: &[u64], upto: usize, ranges: &[Span]) -> u64 {
        let outside = |m: usize| !ranges.iter().any(|s| s.from <= m && m <= s.to);
        tokens.iter().enumerate().filter(|(m, _)| *m < upto && outside(*m)).map(|(_, t)| t).sum()
    }

    #[test]
    fn sums_equal_a_walk_over_every_message_as_prunes_come_move_and_ranges_overlap() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let (mut sums, mut tokens) = (Sums::default(), Vec::<u64>::new());
        let mut checked_inside = 0;
        for step in 0..3000 {
            // The history grows, and a prune lands anywhere in it or moves off a message.
            let len = 1 + step / 3;
            let at = rng.below(len);
            if tokens.len() <= at {
                tokens.resize(at + 1, 0);
            }
            if rng.below(4) == 0 && tokens[at] > 0 {
                let off = 1 + rng.below(tokens[at] as usize) as u64;
                sums.remove(at, off);
                tokens[at] -= off;
            } else {
                let t = rng.below(5000) as u64;
                sums.add(at, t);
                tokens[at] += t;
            }
            let mut ranges: Vec<Span> = (0..rng.below(4))
                .map(|block| {
                    let from = rng.below(len);
                    Span { block: block as u32, from, to: from + rng.below(len - from) }
                })
                .collect();
            ranges.sort_unstable_by_key(|s| s.from);
            for upto in [0, rng.below(len + 1), len, len + 7] {
                let want = walked(&tokens, upto, &ranges);
                assert_eq!(sums.before_outside(upto, &ranges), want, "step {step}, upto {upto}, {ranges:?}");
                checked_inside += usize::from(!ranges.is_empty() && want < walked(&tokens, upto, &[]));
            }
        }
        assert!(checked_inside > 1000, "the ranges took tokens out of few sums: {checked_inside}");
    }
}
