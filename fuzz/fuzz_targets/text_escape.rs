//! Text escaping for the terminal: `format::terminal` on arbitrary text never panics, leaves
//! nothing a terminal would act on (C0 but the line breaks it keeps, DEL, C1, bidi controls,
//! line separators), returns clean text unchanged, and keeps every other character in order;
//! `format::field` cuts at a character boundary within its bound and escapes the same way.

#![no_main]

use dcp::format::{self, Lines};
use libfuzzer_sys::fuzz_target;

/// Whether a terminal would act on `c` in output escaped with `lines`.
fn acts(c: char, lines: Lines) -> bool {
    let kept = lines == Lines::Keep && (c == '\n' || c == '\t');
    (c.is_control() && !kept)
        || matches!(c, '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        || matches!(c, '\u{2028}' | '\u{2029}')
}

fuzz_target!(|text: &str| {
    for lines in [Lines::One, Lines::Keep] {
        let out = format::terminal(text, lines);
        if let Some(c) = out.chars().find(|c| acts(*c, lines)) {
            panic!("{c:?} passed through {lines:?}: {out:?}");
        }
        let clean = !text.chars().any(|c| acts(c, lines));
        assert_eq!(clean, out == text, "clean text was changed, or hostile text was not: {out:?}");
        // Every character the terminal shows as it is stays, in order.
        let mut rest = out.chars();
        for c in text.chars().filter(|c| !acts(*c, lines)) {
            assert!(rest.any(|o| o == c), "{c:?} was lost from {text:?}: {out:?}");
        }
    }
    let max = text.len() / 2;
    let field = format::field(text, max);
    assert!(!field.chars().any(|c| acts(c, Lines::One)), "{field:?}");
    let shown = field.strip_suffix('…').unwrap_or(&field);
    assert!(shown.len() <= format::terminal(text, Lines::One).len(), "{field:?}");
});
