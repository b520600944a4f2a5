//! The unit a rewrite is priced in: the tokenizer's, as the provider bills it.
//!
//! A rewrite's tail and what it removes are weighed against each other and against the loss
//! bound. Counted in characters / 4 (the mirror's unit) a tail of code runs up to half its
//! tokens, and late bets on it did not pay back (docs/results/sheets.md). The sidecar's meter
//! holds each message's tokenizer count as the last request sent it, and a prune's record its
//! tokenizer count of what it removes: [`Tokenized`] prices a tail from the first, and the
//! caller takes the saving from the second, so that both are in the same unit. The messages
//! new since the last request, which the meter has not counted yet, are priced at the ratio
//! of tokens to characters / 4 of what it has.

/// A request's history sized both ways: the tokenizer's count of the messages the last
/// request sent (as sent, and as the host sent them before dcp's edits), and the mirror's
/// characters / 4 of every message of this one.
#[derive(Debug, Clone, PartialEq)]
pub struct Tokenized {
    /// Sums before each known message, and of them all at the end: as sent, as the host
    /// sent them, and in characters / 4.
    sent: Vec<u64>,
    whole: Vec<u64>,
    approx: Vec<u64>,
}

/// A tail's known part shorter than this, in characters / 4, says too little of its own
/// ratio: the whole history's is taken.
const MIN_KNOWN: u64 = 2_000;

/// The ratio of tokens to characters / 4 stays within these: a history of a few messages
/// (or an odd one) says little, and a wrong count should not price a rewrite at a tenth of
/// its cost or ten times it.
const RATIO: (f64, f64) = (0.5, 4.0);

impl Tokenized {
    /// `sent` and `whole`: the tokenizer's count of each of the leading messages the last
    /// request sent unchanged, as sent and as the host sent them; `approx`: characters / 4 of
    /// every message of this request. Fewer counts than messages leave the rest to the ratio.
    pub fn new(sent: &[u64], whole: &[u64], approx: &[u64]) -> Tokenized {
        let known = sent.len().min(whole.len()).min(approx.len());
        let sums = |sizes: &[u64]| {
            let mut out = Vec::with_capacity(sizes.len() + 1);
            out.push(0);
            sizes.iter().for_each(|s| out.push(out.last().copied().unwrap_or(0) + s));
            out
        };
        Tokenized { sent: sums(&sent[..known]), whole: sums(&whole[..known]), approx: sums(approx) }
    }

    /// The tokens a rewrite from message `from` re-bills: what the last request sent of the
    /// known messages from there on, and the rest at the ratio ([`Tokenized::ratio`]).
    pub fn tail(&self, from: usize) -> u64 {
        let (known, n) = (self.sent.len() - 1, self.approx.len() - 1);
        let (start, rest) = (from.min(known), from.clamp(known, n));
        let counted = self.sent[known] - self.sent[start];
        let unknown = self.approx[n] - self.approx[rest];
        counted + (self.ratio(from) * unknown as f64).round() as u64
    }

    /// Tokens per character / 4 of the known messages from `from` on, or of all of them when
    /// those are too few to say ([`MIN_KNOWN`]); 1 when nothing is known.
    pub fn ratio(&self, from: usize) -> f64 {
        let known = self.sent.len() - 1;
        let start = from.min(known);
        let (approx, whole) = (self.approx[known] - self.approx[start], self.whole[known] - self.whole[start]);
        let (approx, whole) =
            if approx >= MIN_KNOWN { (approx, whole) } else { (self.approx[known], self.whole[known]) };
        if approx == 0 || whole == 0 {
            return 1.0;
        }
        (whole as f64 / approx as f64).clamp(RATIO.0, RATIO.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_of_code_is_priced_at_its_tokens_not_its_characters() {
        // Three messages the last request sent (1,000, 3,000 and 4,000 tokens; 2,000 of the
        // last were pruned, so 2,000 went), sized by characters / 4 at half that.
        let t = Tokenized::new(&[1_000, 3_000, 2_000], &[1_000, 3_000, 4_000], &[500, 1_500, 2_000]);
        assert_eq!(t.tail(1), 5_000, "as sent: what the prunes in force took is not re-billed");
        assert_eq!(t.tail(0), 6_000);
        assert_eq!(t.tail(3), 0, "past the end");
    }

    #[test]
    fn messages_not_counted_yet_are_priced_at_the_known_ratio() {
        // Two counted messages at twice their characters / 4, then one new one of 1,000.
        let t = Tokenized::new(&[3_000, 5_000], &[3_000, 5_000], &[1_500, 2_500, 1_000]);
        assert_eq!(t.ratio(2), 2.0, "the whole history's ratio, nothing of the tail being known");
        assert_eq!(t.tail(2), 2_000);
        assert_eq!(t.tail(0), 10_000);
    }

    #[test]
    fn without_counts_a_tail_stays_in_characters() {
        let t = Tokenized::new(&[], &[], &[1_000, 2_000]);
        assert_eq!((t.tail(0), t.tail(1)), (3_000, 2_000));
        // Counts of more messages than the request has (a history cut short) are left out.
        let cut = Tokenized::new(&[9_000, 9_000, 9_000], &[9_000, 9_000, 9_000], &[1_000]);
        assert_eq!(cut.tail(0), 9_000);
    }

    #[test]
    fn an_odd_ratio_is_bounded() {
        let t = Tokenized::new(&[100_000], &[100_000], &[2_000, 1_000]);
        assert_eq!(t.ratio(1), 4.0);
        assert_eq!(t.tail(1), 4_000);
    }
}
