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
/// merges `(rank, start, end)`, the lowest rank and then the leftmost start on top. A candidate
/// is stale once its left part was merged into another or its right neighbour grew; it is
/// skipped then, since the merge that made it stale pushed the candidates that replace it.
fn count_long(piece: &[u8]) -> usize {
    let n = piece.len();
    // `next[i]`: the start of the part after the part starting at `i` (n for the last);
    // `prev[i]`: the start of the part before it. `alive[i]`: a part starts at `i`.
    let mut next: Vec<u32> = (1..=n as u32).collect();
    let mut prev: Vec<u32> = (0..n as u32).map(|i| i.wrapping_sub(1)).collect();
    let mut alive = vec![true; n];
    let mut heap: BinaryHeap<Reverse<(Rank, u32, u32)>> = BinaryHeap::with_capacity(n);
    let candidate = |start: u32, end: u32| {
        let rank = rank_of(&piece[start as usize..end as usize]);
        (rank != NONE).then_some(Reverse((rank, start, end)))
    };
    for i in 0..n - 1 {
        heap.extend(candidate(i as u32, i as u32 + 2));
    }
    let mut parts = n;
    while let Some(Reverse((_, start, end))) = heap.pop() {
        let s = start as usize;
        if !alive[s] {
            continue;
        }
        let right = next[s];
        if right as usize >= n || next[right as usize] != end {
            continue;
        }
        // Merge the part at `start` with the one at `right`.
        alive[right as usize] = false;
        next[s] = end;
        if (end as usize) < n {
            prev[end as usize] = start;
        }
        parts -= 1;
        let p = prev[s];
        if p != u32::MAX {
            heap.extend(candidate(p, end));
        }
        if (end as usize) < n {
            heap.extend(candidate(start, next[end as usize]));
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
        // One megabyte of one letter: the quadratic merge would take hours.
        let piece = vec![b'a'; 1 << 20];
        let n = count(&piece, &mut Vec::new());
        assert!(n > 1 << 20 >> 7 && n < 1 << 20, "{n}");
    }
}
