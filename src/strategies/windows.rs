//! Text compared as a model copies it: normalised, and cut into 64-character windows.
//!
//! A step that quotes an earlier output rarely copies it byte for byte: an edit's `oldString`
//! comes from a numbered file view without its line numbers, and the model rewraps
//! whitespace. [`normalise`] removes the line-number prefixes of file views (`12\t` as `cat
//! -n` prints them, `12→` as Claude Code's reader does, `00012| ` as OpenCode's `read` does)
//! and collapses every run of whitespace to one space. [`windows`] then hashes every
//! [`WINDOW`]-character substring of a normalised text with a rolling polynomial hash modulo
//! the Mersenne prime 2^61 - 1, so that "does this quote share 64 characters with that
//! output" is a set lookup per window instead of a substring search per pair.

/// How many characters a quote must share with a hidden text to count.
pub const WINDOW: usize = 64;

const MODULUS: u64 = (1 << 61) - 1;
const BASE: u64 = 0x1f3d_5b79_a2c4_e681 % MODULUS;

fn mul(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    let folded = (p as u64 & MODULUS) + (p >> 61) as u64;
    if folded >= MODULUS {
        folded - MODULUS
    } else {
        folded
    }
}

fn add(a: u64, b: u64) -> u64 {
    let s = a + b;
    if s >= MODULUS {
        s - MODULUS
    } else {
        s
    }
}

/// The length of a file view's line-number prefix at the start of `line`, if it has one:
/// optional spaces, digits, then a tab, `→`, or `| `.
fn prefix_len(line: &str) -> usize {
    let trimmed = line.trim_start_matches(' ');
    let digits = trimmed.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return 0;
    }
    let rest = &trimmed[digits..];
    let sep = if rest.starts_with('\t') {
        1
    } else if rest.starts_with('→') {
        '→'.len_utf8()
    } else if rest.starts_with("| ") {
        2
    } else {
        return 0;
    };
    line.len() - rest.len() + sep
}

/// `text` without line-number prefixes and with each run of whitespace made one space.
pub fn normalise(text: &str) -> Vec<char> {
    let mut out = Vec::with_capacity(text.len());
    let mut space = false;
    for (n, line) in text.split('\n').enumerate() {
        if n > 0 {
            space = true;
        }
        for c in line[prefix_len(line)..].chars() {
            if c.is_whitespace() {
                space = true;
                continue;
            }
            if space && !out.is_empty() {
                out.push(' ');
            }
            space = false;
            out.push(c);
        }
    }
    out
}

/// Calls `each` with the hash of every [`WINDOW`]-character window of `chars`, in order.
pub fn windows(chars: &[char], mut each: impl FnMut(u64)) {
    if chars.len() < WINDOW {
        return;
    }
    // BASE^(WINDOW - 1): the weight of the character that leaves the window.
    let top = (1..WINDOW).fold(1, |p, _| mul(p, BASE));
    let mut h = chars[..WINDOW].iter().fold(0, |h, &c| add(mul(h, BASE), u64::from(c)));
    each(h);
    for i in WINDOW..chars.len() {
        let out = mul(u64::from(chars[i - WINDOW]), top);
        h = add(mul(add(h, MODULUS - out), BASE), u64::from(chars[i]));
        each(h);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hashes(text: &str) -> Vec<u64> {
        let mut out = Vec::new();
        windows(&normalise(text), |h| out.push(h));
        out
    }

    #[test]
    fn line_number_prefixes_go_and_whitespace_collapses() {
        let s = |v: Vec<char>| v.into_iter().collect::<String>();
        assert_eq!(s(normalise("00012| fn main() {\n00013|     run();\n")), "fn main() { run();");
        assert_eq!(s(normalise("    12→fn main() {\n    13→\trun();")), "fn main() { run();");
        assert_eq!(s(normalise("12\tfn main() {\n13\t    run();")), "fn main() { run();");
        assert_eq!(s(normalise("fn  main() {\r\n    run();")), "fn main() { run();");
        // A number that is not a prefix stays.
        assert_eq!(s(normalise("12 apples\n3|x")), "12 apples 3|x");
    }

    #[test]
    fn a_rolling_hash_equals_the_hash_of_the_window_alone() {
        let text: String = (0..200).map(|i| char::from(b'a' + (i * 7 % 26) as u8)).collect();
        let all = hashes(&text);
        assert_eq!(all.len(), 200 - WINDOW + 1);
        for (i, h) in all.iter().enumerate() {
            assert_eq!(hashes(&text[i..i + WINDOW]), vec![*h], "window {i}");
        }
        assert!(hashes(&text[..WINDOW - 1]).is_empty());
    }
}
