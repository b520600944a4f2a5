// The hash that places a token's bytes in the vocabulary's table. `build.rs` includes this file
// to lay the table out and `vocab.rs` uses it to look ranks up, so the two always agree. (No
// inner doc comment: `include!` does not allow one.)

/// The number of bits of a slot index: 2^19 slots for 199,998 tokens, a load of 0.38.
pub const TABLE_BITS: u32 = 19;

/// A multiply-rotate hash of `bytes` (FxHash's step over 8-byte words), folded with the length.
/// The slot is its top `TABLE_BITS` bits, which the last multiplication mixes best.
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    const K: u64 = 0xf135_7aea_2e62_a9c5;
    let mut h = bytes.len() as u64;
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        h = (h.rotate_left(26) ^ u64::from_le_bytes(w)).wrapping_mul(K);
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        h = (h.rotate_left(26) ^ u64::from_le_bytes(w)).wrapping_mul(K);
    }
    h
}

/// The first slot to probe for `bytes`.
pub fn home_slot(bytes: &[u8]) -> usize {
    (hash_bytes(bytes) >> (64 - TABLE_BITS)) as usize
}
