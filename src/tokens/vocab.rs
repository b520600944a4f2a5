//! The o200k vocabulary as three flat tables compiled into the binary (built by `build.rs` from
//! `data/o200k_base.tiktoken.gz`): the tokens' bytes in rank order, where each starts, and a
//! hash table from bytes to rank. They are read in place, never copied or parsed, so nothing
//! loads at start-up; they are file-backed pages of the executable, which the kernel reads
//! in when a lookup first touches them and may drop again under memory pressure. All three
//! take 4.2 MB, of which a process touches what its text needs.

#[allow(dead_code)]
mod hash {
    include!("hash.rs");
}

/// Every token's bytes, in rank order.
static BYTES: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/o200k_bytes.bin"));
/// Where token `r` starts in `BYTES`: a little-endian u32 per rank, then the end of the last.
static STARTS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/o200k_starts.bin"));
/// 2^19 little-endian u32 slots: `rank << 8 | length`, or `EMPTY`.
static TABLE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/o200k_table.bin"));

const EMPTY: u32 = u32::MAX;
const MASK: usize = (1 << hash::TABLE_BITS) - 1;

/// The longest token's length: no longer run of bytes can have a rank.
pub const MAX_TOKEN_LEN: usize = 128;

/// A token's rank, its position in the vocabulary: the lower, the earlier it merges.
pub type Rank = u32;

fn u32_at(table: &[u8], i: usize) -> u32 {
    let at = i * 4;
    u32::from_le_bytes([table[at], table[at + 1], table[at + 2], table[at + 3]])
}

/// The number of tokens in the vocabulary.
#[cfg(test)]
pub fn len() -> usize {
    STARTS.len() / 4 - 1
}

/// The bytes of the token of rank `rank`.
pub fn token(rank: Rank) -> &'static [u8] {
    let r = rank as usize;
    &BYTES[u32_at(STARTS, r) as usize..u32_at(STARTS, r + 1) as usize]
}

/// The rank of the token whose bytes are `bytes`, if there is one.
pub fn rank(bytes: &[u8]) -> Option<Rank> {
    if bytes.is_empty() || bytes.len() > MAX_TOKEN_LEN {
        return None;
    }
    let mut slot = hash::home_slot(bytes);
    loop {
        let entry = u32_at(TABLE, slot);
        if entry == EMPTY {
            return None;
        }
        // The length in the slot spares reading the token's bytes for most other tokens.
        if (entry & 0xff) as usize == bytes.len() && token(entry >> 8) == bytes {
            return Some(entry >> 8);
        }
        slot = (slot + 1) & MASK;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every token: its bytes and rank are bpe-openai's (that it counts as one token in both
    /// tokenizers is `merge`'s test `every_token_merges_to_one_token`).
    #[test]
    fn the_tables_hold_bpe_openai_s_vocabulary() {
        let bpe = &bpe_openai::o200k_base().bpe;
        assert_eq!(len(), bpe.num_tokens());
        assert_eq!(len(), 199_998);
        let (mut longest, mut long) = (0, 0);
        for r in 0..len() as Rank {
            let bytes = bpe.token_bytes(r);
            assert_eq!(token(r), bytes, "rank {r}");
            assert_eq!(rank(bytes), Some(r), "rank {r}");
            long += usize::from(bytes.len() >= 64);
            longest = longest.max(bytes.len());
        }
        assert_eq!(longest, MAX_TOKEN_LEN);
        assert_eq!(long, 93);
        assert_eq!(TABLE.len(), 4 << hash::TABLE_BITS);
    }

    #[test]
    fn bytes_that_are_no_token_have_no_rank() {
        assert_eq!(rank(b""), None);
        assert_eq!(rank(&[b'a'; MAX_TOKEN_LEN + 1]), None);
        assert_eq!(rank(b"zqxjkvbw zqxjkvbw"), None);
        // Every single byte is a token.
        for b in 0..=255u8 {
            assert!(rank(&[b]).is_some(), "byte {b}");
        }
    }
}
