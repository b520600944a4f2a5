//! Formatting for people: token counts like DCP (`~15.4K`), sizes with humansize, and text
//! made safe for a terminal.
//!
//! Text from the history, from files and from error messages can hold anything: ESC and CSI
//! sequences, OSC 52 (clipboard writes), C1 controls, carriage returns that fake lines, bidi
//! overrides that reorder what is shown. [`terminal`] is the one place that escapes them, and
//! every surface that prints to a terminal (the CLI, errors, `/dcp` answers, notices) passes
//! such text through it. JSON output is never escaped: serde_json already encodes controls,
//! and its values must stay exact.

/// A token count as DCP shows it: `~850`, `~15.4K`, `~1.2M`.
pub fn tokens(n: u64) -> String {
    format!("~{}", compact(n))
}

/// A token count in a table, where every row has the same precision: `~850`, `~15,420`.
pub fn approx(n: u64) -> String {
    format!("~{}", thousands(n))
}

/// `1 tool`, `2 tools`: a count with its noun, plural unless it is one.
pub fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// `850`, `15.4K`, `1.2M`: one decimal, trailing `.0` dropped.
pub fn compact(n: u64) -> String {
    let unit = match n {
        0..=999 => return n.to_string(),
        1_000..=999_949 => 1_000,
        _ => 1_000_000,
    };
    // Tenths of the unit, rounded half up, in integers so that 1.25 shows as 1.3.
    let tenths = (n * 10 + unit / 2) / unit;
    let suffix = if unit == 1_000 { "K" } else { "M" };
    match tenths % 10 {
        0 => format!("{}{suffix}", tenths / 10),
        d => format!("{}.{d}{suffix}", tenths / 10),
    }
}

/// A whole number with thousands separators: `12,345`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Cuts `text` to at most `max` bytes, at a character boundary. Returns whether it was cut.
pub fn cut(text: &mut String, max: usize) -> bool {
    if text.len() <= max {
        return false;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    true
}

/// A JSON value as an error message can carry it: cut to 60 bytes at a character boundary.
pub fn excerpt(value: &serde_json::Value) -> String {
    let mut shown = value.to_string();
    if cut(&mut shown, 60) {
        shown.push('…');
    }
    shown
}

/// A byte size: `3.2 KiB`.
pub fn bytes(n: u64) -> String {
    humansize::format_size(n, humansize::BINARY)
}

/// What [`terminal`] does with line breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lines {
    /// A one-line field (a title, a path, a pattern): `\n` and `\t` are escaped too.
    One,
    /// Text of several lines (a message, a notice): `\n` and `\t` stay, everything else is escaped.
    Keep,
}

/// Longest title shown in text output, in bytes; JSON output carries the whole title.
pub const MAX_TITLE_BYTES: usize = 200;

/// `text` with every character a terminal would act on escaped visibly: C0 controls (ESC,
/// BEL, CR, ...), DEL, C1 controls, bidi embeddings, overrides, isolates and marks, and the
/// Unicode line and paragraph separators. They show as `\x1b`, `\r`, `\u{202e}`. Text with
/// none of them is returned as it is, without a copy.
pub fn terminal(text: &str, lines: Lines) -> std::borrow::Cow<'_, str> {
    let Some(first) = text.find(|c| needs_escape(c, lines)) else {
        return std::borrow::Cow::Borrowed(text);
    };
    let mut out = String::with_capacity(text.len() + 8);
    out.push_str(&text[..first]);
    for c in text[first..].chars() {
        if !needs_escape(c, lines) {
            out.push(c);
            continue;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A one-line field as text output shows it: cut to `max` bytes (with `…`), then escaped.
pub fn field(text: &str, max: usize) -> String {
    if text.len() <= max {
        return terminal(text, Lines::One).into_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut shown = terminal(&text[..end], Lines::One).into_owned();
    shown.push('…');
    shown
}

/// A session title as text output shows it: cut to [`MAX_TITLE_BYTES`], escaped.
pub fn title(text: &str) -> String {
    field(text, MAX_TITLE_BYTES)
}

/// A writer that escapes, as [`terminal`] does with [`Lines::Keep`], everything written
/// through it: the CLI's text output goes through one, so no print site can pass a control
/// character to the terminal. Bytes that are not UTF-8 show as `\xNN`; a character split
/// across two writes is held until its end comes.
pub struct TerminalWriter<W: std::io::Write> {
    inner: W,
    /// The start of a character whose end has not been written yet (at most 3 bytes).
    pending: Vec<u8>,
}

impl<W: std::io::Write> TerminalWriter<W> {
    pub fn new(inner: W) -> Self {
        TerminalWriter { inner, pending: Vec::new() }
    }
}

impl<W: std::io::Write> std::io::Write for TerminalWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.pending.extend_from_slice(buf);
        let mut rest: &[u8] = &std::mem::take(&mut self.pending);
        while !rest.is_empty() {
            match std::str::from_utf8(rest) {
                Ok(text) => {
                    self.inner.write_all(terminal(text, Lines::Keep).as_bytes())?;
                    rest = &[];
                }
                Err(e) => {
                    let (good, bad) = rest.split_at(e.valid_up_to());
                    // `good` ends at `valid_up_to`: it is UTF-8.
                    let text = std::str::from_utf8(good).unwrap_or_default();
                    self.inner.write_all(terminal(text, Lines::Keep).as_bytes())?;
                    let Some(len) = e.error_len() else {
                        // An incomplete character at the end: wait for the rest of it.
                        self.pending = bad.to_vec();
                        break;
                    };
                    for b in &bad[..len] {
                        write!(self.inner, "\\x{b:02x}")?;
                    }
                    rest = &bad[len..];
                }
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        for b in std::mem::take(&mut self.pending) {
            write!(self.inner, "\\x{b:02x}")?;
        }
        self.inner.flush()
    }
}

/// Whether a terminal would act on `c` rather than show it.
fn needs_escape(c: char, lines: Lines) -> bool {
    match c {
        '\n' | '\t' => lines == Lines::One,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => true,
        // Bidi: the Arabic letter mark, LRM and RLM, embeddings and overrides, isolates.
        '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => true,
        // Line and paragraph separators break a line in some terminals.
        '\u{2028}' | '\u{2029}' => true,
        _ => false,
    }
}

/// `text` on one line, keeping its end (where a path's file name is) when too long.
pub fn shorten(text: &str, max: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let n = flat.chars().count();
    if n <= max {
        return flat;
    }
    let tail: String = flat.chars().skip(n - (max - 1)).collect();
    format!("…{tail}")
}

/// Columns a TUI pane shows without wrapping a line: OpenCode's message area in a terminal of
/// 118 columns. Every line of the context report fits in it.
pub const PANE_WIDTH: usize = 96;

/// Which end of a long field [`fit`] keeps: a title's start, a path's end (its file name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    Start,
    End,
}

/// `text` on one line, escaped as [`terminal`] does, in at most `max` characters: cut with `…`
/// at the end it does not keep. The escapes count, for they take columns on the screen too.
pub fn fit(text: &str, max: usize, keep: Keep) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let shown = terminal(&flat, Lines::One);
    let n = shown.chars().count();
    if n <= max {
        return shown.into_owned();
    }
    let Some(room) = max.checked_sub(1) else {
        return String::new();
    };
    match keep {
        Keep::Start => format!("{}…", shown.chars().take(room).collect::<String>()),
        Keep::End => format!("…{}", shown.chars().skip(n - room).collect::<String>()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_counts_read_like_dcp() {
        assert_eq!(tokens(0), "~0");
        assert_eq!(tokens(999), "~999");
        assert_eq!(tokens(1000), "~1K");
        assert_eq!(tokens(15_420), "~15.4K");
        assert_eq!(tokens(154_200), "~154.2K");
        assert_eq!(tokens(999_960), "~1M");
        assert_eq!(tokens(1_250_000), "~1.3M");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(12), "12");
        assert_eq!(bytes(3277), "3.20 KiB");
        assert_eq!(approx(15_420), "~15,420");
        assert_eq!(count(1, "tool"), "1 tool");
        assert_eq!(count(0, "tool"), "0 tools");
        assert_eq!(count(3, "session"), "3 sessions");
    }

    #[test]
    fn terminal_escapes_controls_and_bidi_visibly_and_leaves_clean_text_alone() {
        let hostile = "a\u{1b}]52;c;aGk=\u{7}b\u{1b}[2Jc\rd\u{9b}e\u{7f}f\u{202e}g\nh\ti";
        assert_eq!(
            terminal(hostile, Lines::One),
            "a\\x1b]52;c;aGk=\\x07b\\x1b[2Jc\\rd\\u{9b}e\\x7ff\\u{202e}g\\nh\\ti"
        );
        assert_eq!(terminal("x\ny\tz\u{1b}", Lines::Keep), "x\ny\tz\\x1b");
        let clean = "Fix the café's ünïcode 🦀 title";
        assert!(matches!(terminal(clean, Lines::One), std::borrow::Cow::Borrowed(_)));
        assert_eq!(title(&"é".repeat(300)).len(), MAX_TITLE_BYTES + '…'.len_utf8());
    }

    #[test]
    fn fit_keeps_the_end_asked_for_and_counts_the_escapes_in_the_width() {
        assert_eq!(fit("/home/me/project/src/parser.py", 14, Keep::End), "…src/parser.py");
        assert_eq!(fit("A long   session\ntitle", 9, Keep::Start), "A long s…");
        assert_eq!(fit("ab\u{1b}[31m", 20, Keep::Start), "ab\\x1b[31m");
        assert_eq!(fit("\u{1b}\u{1b}\u{1b}", 6, Keep::End), "…b\\x1b");
        assert_eq!(fit("short", 0, Keep::End), "");
        assert_eq!(fit("héllo wörld", 11, Keep::End), "héllo wörld");
    }

    #[test]
    fn the_terminal_writer_escapes_across_writes_and_keeps_split_characters() {
        use std::io::Write as _;
        let mut out = TerminalWriter::new(Vec::new());
        let bytes = "ok é\u{1b}[2J\n".as_bytes();
        // `é` is split between two writes.
        out.write_all(&bytes[..4]).unwrap();
        out.write_all(&bytes[4..]).unwrap();
        out.write_all(&[b'x', 0xff, b'y', 0xc3]).unwrap();
        out.flush().unwrap();
        assert_eq!(String::from_utf8(out.inner).unwrap(), "ok é\\x1b[2J\nx\\xffy\\xc3");
    }
}
