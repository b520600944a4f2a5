//! OpenCode-shaped ids, deterministic per session.
//!
//! OpenCode's ids are `prefix_` + 12 hex digits of a 48-bit clock (milliseconds × 4096 plus a
//! counter; bit-inverted for sessions, so newer sessions sort first) + 14 base62 characters.
//! The random part here comes from a seeded generator, so importing the same source twice
//! writes byte-identical databases.

const B62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Which way an id's clock sorts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    Ascending,
    Descending,
}

/// A seeded id generator.
#[derive(Debug)]
pub struct Ids {
    state: u64,
    last_ms: i64,
    counter: i64,
}

impl Ids {
    pub fn new(seed: &str) -> Self {
        Ids { state: fnv1a(seed.as_bytes()), last_ms: i64::MIN, counter: 0 }
    }

    /// A new id with `prefix` at clock `ms`.
    pub fn make(&mut self, prefix: &str, ms: i64, order: Order) -> String {
        if ms != self.last_ms {
            self.last_ms = ms;
            self.counter = 0;
        }
        self.counter += 1;
        let mut now = ms.wrapping_mul(0x1000).wrapping_add(self.counter);
        if order == Order::Descending {
            now = !now;
        }
        let mut id = format!("{prefix}_{:012x}", now & 0xFFFF_FFFF_FFFF);
        for _ in 0..14 {
            self.state = splitmix(self.state);
            id.push(B62[(self.state % 62) as usize] as char);
        }
        id
    }
}

/// FNV-1a: a stable 64-bit hash of `bytes`.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3))
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
