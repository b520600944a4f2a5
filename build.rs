//! Builds the o200k tables from `data/o200k_base.tiktoken.gz` (tiktoken's vocabulary; see
//! data/README.md) into `OUT_DIR`, where `src/tokens/vocab.rs` includes them:
//! - `o200k_bytes.bin`: every token's bytes, in rank order, one after the other;
//! - `o200k_starts.bin`: where each token starts in it, a little-endian u32 per rank, plus the end;
//! - `o200k_table.bin`: an open-addressing hash table of 2^19 little-endian u32 slots, each
//!   `rank << 8 | length` or `u32::MAX` when empty, probed linearly from `hash::home_slot`.

use std::io::Read;
use std::path::Path;

#[allow(dead_code)]
mod hash {
    include!("src/tokens/hash.rs");
}

const VOCABULARY: &str = "data/o200k_base.tiktoken.gz";

fn main() {
    println!("cargo::rerun-if-changed={VOCABULARY}");
    println!("cargo::rerun-if-changed=src/tokens/hash.rs");
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR for build scripts");
    let tokens = read_vocabulary(Path::new(VOCABULARY));
    let mut bytes = Vec::new();
    let mut starts = Vec::new();
    for token in &tokens {
        starts.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        bytes.extend_from_slice(token);
    }
    starts.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    let out = Path::new(&out);
    write(&out.join("o200k_bytes.bin"), &bytes);
    write(&out.join("o200k_starts.bin"), &starts);
    write(&out.join("o200k_table.bin"), &table(&tokens));
}

/// The tokens in rank order, checking that line `i` holds rank `i`.
fn read_vocabulary(path: &Path) -> Vec<Vec<u8>> {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    let mut text = String::new();
    flate2::read::GzDecoder::new(file)
        .read_to_string(&mut text)
        .unwrap_or_else(|e| panic!("cannot decompress {}: {e}", path.display()));
    let mut tokens = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let (b64, rank) =
            line.split_once(' ').unwrap_or_else(|| panic!("{}: line {} has no rank", path.display(), i + 1));
        assert_eq!(rank.parse::<usize>().ok(), Some(i), "{}: line {} is not rank {i}", path.display(), i + 1);
        let token = base64(b64).unwrap_or_else(|| panic!("{}: line {} is not base64", path.display(), i + 1));
        assert!(
            (1..=255).contains(&token.len()),
            "{}: line {}: a token of {} bytes",
            path.display(),
            i + 1,
            token.len()
        );
        tokens.push(token);
    }
    tokens
}

/// The table of slots: `rank << 8 | length`, placed by linear probing.
fn table(tokens: &[Vec<u8>]) -> Vec<u8> {
    let size = 1usize << hash::TABLE_BITS;
    assert!(tokens.len() < size / 2, "the table would be over half full");
    let mut slots = vec![u32::MAX; size];
    for (rank, token) in tokens.iter().enumerate() {
        let mut slot = hash::home_slot(token);
        while slots[slot] != u32::MAX {
            slot = (slot + 1) & (size - 1);
        }
        slots[slot] = (rank as u32) << 8 | token.len() as u32;
    }
    slots.iter().flat_map(|s| s.to_le_bytes()).collect()
}

/// Standard base64 with padding.
fn base64(text: &str) -> Option<Vec<u8>> {
    fn value(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let text = text.as_bytes();
    if text.len() % 4 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    for quad in text.chunks(4) {
        let pad = quad.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 {
            return None;
        }
        let mut n = 0;
        for &c in &quad[..4 - pad] {
            n = n << 6 | value(c)?;
        }
        n <<= 6 * pad as u32;
        out.extend_from_slice(&n.to_be_bytes()[1..4 - pad]);
    }
    Some(out)
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}
