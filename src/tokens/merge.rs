//! Byte-pair merging by rank, tiktoken's algorithm: a piece of text starts as single bytes,
//! and the adjacent pair whose concatenation is the lowest-ranked token merges first (the
//! leftmost of equal ranks), until no adjacent pair is a token. Only the number of tokens is
//! needed, so the parts are never turned into ranks of their own.
//!
//! Short pieces (nearly all of them) merge in a vector, scanning for the lowest rank after
//! each merge: quadratic, but fastest for a few dozen bytes. Long pieces (one repeated
//! character, a run of base64 letters) use a heap and a linked list, O(n log n), so a 1 MB
//! run costs a fraction of a second instead of hours. Both give the same counts
//! (`tests::both_merges_agree`).

use super::vocab::{self, Rank, MAX_TOKEN_LEN};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Pieces from this length on merge with the heap.
const LONG_PIECE: usize = 64;

const NONE: Rank = Rank::MAX;

/// The number of tokens `piece` encodes to. `scratch` is reused between calls.
pub fn count(piece: &[u8], scratch: &mut Vec<(u32, Rank)>) -> usize {
    if piece.len() <= 1 {
        return piece.len();
    }
    if vocab::rank(piece).is_some() {
        return 1;
    }
    if piece.len() < LONG_PIECE {
        count_short(piece, scratch)
    } else {
        count_long(piece)
    }
}

fn rank_of(bytes: &[u8]) -> Rank {
    if bytes.len() > MAX_TOKEN_LEN {
        return NONE;
    }
    vocab::rank(bytes).unwrap_or(NONE)
}

/// The vector merge. `parts[i]` is the start of part `i` and the rank of part `i` merged with
/// part `i + 1`; a last entry marks the end of the piece.
fn count_short(piece: &[u8], parts: &mut Vec<(u32, Rank)>) -> usize {
    parts.clear();
    parts.extend((0..piece.len() - 1).map(|i| (i as u32, rank_of(&piece[i..i + 2]))));
    parts.push((piece.len() as u32 - 1, NONE));
    parts.push((piece.len() as u32, NONE));
    // The rank of parts `i` and `i + 1` merged: the bytes from part `i`'s start to part `i + 2`'s.
    let pair_rank = |parts: &[(u32, Rank)], i: usize| match parts.get(i + 2) {
        Some(&(end, _)) => rank_of(&piece[parts[i].0 as usize..end as usize]),
        None => NONE,
    };
    loop {
        let mut best = (NONE, 0);
        for (i, &(_, rank)) in parts[..parts.len() - 1].iter().enumerate() {
            if rank < best.0 {
                best = (rank, i);
            }
        }
        let (rank, i) = best;
        if rank == NONE {
            return parts.len() - 1;
        }
        parts.remove(i + 1);
        parts[i].1 = pair_rank(parts, i);
        if i > 0 {
            parts[i - 1].1 = pair_rank(parts, i - 1);
        }
    }
}

/// The heap merge. Parts are a linked list over their start offsets; the heap holds candidate
/// merges as `rank << 32 | start`, the lowest rank and then the leftmost start on top.
/// `pair[start]` is the rank of the part at `start` merged with the next one (`NONE` if that
/// is no token, or if no part starts there any more): a candidate whose rank is not its
/// start's current one is stale and skipped. (Both parts only grow, so a start's pair never
/// has the same bytes twice, and ranks are unique per bytes.)
pub(super) fn count_long(piece: &[u8]) -> usize {
    let n = piece.len();
    // `next[i]`: the start of the part after the part starting at `i` (n for the last);
    // `prev[i]`: the start of the part before it (`u32::MAX` for the first).
    let mut next: Vec<u32> = (1..=n as u32).collect();
    let mut prev: Vec<u32> = (0..n as u32).map(|i| i.wrapping_sub(1)).collect();
    let mut pair: Vec<Rank> = (0..n).map(|i| if i + 2 <= n { rank_of(&piece[i..i + 2]) } else { NONE }).collect();
    let key = |rank: Rank, start: u32| Reverse(u64::from(rank) << 32 | u64::from(start));
    let mut heap: BinaryHeap<Reverse<u64>> =
        pair.iter().enumerate().filter(|(_, &r)| r != NONE).map(|(i, &r)| key(r, i as u32)).collect();
    let mut parts = n;
    while let Some(Reverse(top)) = heap.pop() {
        let (rank, start) = ((top >> 32) as Rank, top as u32 as usize);
        if pair[start] != rank {
            continue;
        }
        // Merge the part at `start` with the next one, which ends at `end`.
        let right = next[start] as usize;
        let end = next[right];
        pair[right] = NONE;
        next[start] = end;
        if (end as usize) < n {
            prev[end as usize] = start as u32;
        }
        parts -= 1;
        pair[start] = match next.get(end as usize) {
            Some(&after) => rank_of(&piece[start..after as usize]),
            None => NONE,
        };
        if pair[start] != NONE {
            heap.push(key(pair[start], start as u32));
        }
        let p = prev[start];
        if p != u32::MAX {
            pair[p as usize] = rank_of(&piece[p as usize..end as usize]);
            if pair[p as usize] != NONE {
                heap.push(key(pair[p as usize], p));
            }
        }
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (xorshift), so failures reproduce.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    /// Every token counts as one token in both tokenizers. The merges must reach it too, not
    /// only the lookup [`count`] starts with: the heap merge (run here on every token of two
    /// bytes or more, among them the 93 of 64 bytes or more that [`count`] gives it) relies on
    /// ranks being unique per bytes.
    #[test]
    fn every_token_merges_to_one_token() {
        let bpe = &bpe_openai::o200k_base().bpe;
        let mut scratch = Vec::new();
        for r in 0..vocab::len() as Rank {
            let bytes = bpe.token_bytes(r);
            assert_eq!(count(bytes, &mut scratch), 1, "rank {r}");
            assert_eq!(bpe.count(bytes), 1, "rank {r}: bpe-openai");
            if bytes.len() >= 2 {
                assert_eq!(count_long(bytes), 1, "rank {r}: the heap merge");
            }
        }
    }

    #[test]
    fn both_merges_agree() {
        let alphabets: [&[u8]; 4] = [b"ab", b"abc ", b"etaoinshrdlu", b"0123456789+/=ABCDEFabcdef"];
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut scratch = Vec::new();
        for round in 0..2_000 {
            let alphabet = alphabets[round % alphabets.len()];
            let len = 2 + (rng.next() % 300) as usize;
            let piece: Vec<u8> = (0..len).map(|_| alphabet[(rng.next() % alphabet.len() as u64) as usize]).collect();
            assert_eq!(count_short(&piece, &mut scratch), count_long(&piece), "{:?}", String::from_utf8_lossy(&piece));
        }
        for len in 2..200 {
            let piece = vec![b'a'; len];
            assert_eq!(count_short(&piece, &mut scratch), count_long(&piece), "{len} a's");
        }
    }

    #[test]
    fn a_long_run_of_one_character_merges_in_n_log_n() {
        // One megabyte of one letter: the quadratic merge would take hours. (How its time
        // grows is the tokenizer bench's row; here, the count.)
        let piece = vec![b'a'; 1 << 20];
        let n = count(&piece, &mut Vec::new());
        // Tokens of eight a's, as bpe-openai counts it too.
        assert_eq!(n, (1 << 20) / 8);
        assert_eq!(n, bpe_openai::o200k_base().bpe.count(&piece));
    }
}
