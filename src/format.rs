//! Number formatting for people: token counts like DCP (`~15.4K`), sizes with humansize.

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
}
