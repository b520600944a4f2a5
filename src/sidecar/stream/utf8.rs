//! UTF-8 checked across the chunks of a line: where the first invalid byte is, as
//! `String::from_utf8` of the whole line would say.

/// The check so far.
#[derive(Default)]
pub(super) struct Utf8 {
    /// The start of a character the last chunk cut short (at most 3 bytes).
    pending: Vec<u8>,
    /// The line offset of `pending`, or of the next chunk.
    offset: usize,
    invalid: Option<usize>,
}

/// The length of the character that starts with `lead`, if it may start one.
fn width(lead: u8) -> Option<usize> {
    match lead {
        0xC2..=0xDF => Some(2),
        0xE0..=0xEF => Some(3),
        0xF0..=0xF4 => Some(4),
        _ => None,
    }
}

impl Utf8 {
    /// Checks the next bytes of the line.
    pub(super) fn feed(&mut self, mut chunk: &[u8]) {
        if self.invalid.is_some() {
            return;
        }
        if !self.pending.is_empty() {
            let Some(need) = width(self.pending[0]) else {
                self.invalid = Some(self.offset);
                return;
            };
            let take = (need - self.pending.len()).min(chunk.len());
            self.pending.extend_from_slice(&chunk[..take]);
            chunk = &chunk[take..];
            if self.pending.len() < need {
                return;
            }
            if std::str::from_utf8(&self.pending).is_err() {
                self.invalid = Some(self.offset);
                return;
            }
            self.offset += need;
            self.pending.clear();
        }
        match std::str::from_utf8(chunk) {
            Ok(_) => self.offset += chunk.len(),
            Err(e) if e.error_len().is_some() => self.invalid = Some(self.offset + e.valid_up_to()),
            Err(e) => {
                // A character cut short at the end: the next chunk may complete it.
                self.offset += e.valid_up_to();
                self.pending.extend_from_slice(&chunk[e.valid_up_to()..]);
            }
        }
    }

    /// The offset of the first invalid byte of the whole line, if there is one.
    pub(super) fn finish(&self) -> Option<usize> {
        self.invalid.or((!self.pending.is_empty()).then_some(self.offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_invalid_byte_is_found_wherever_the_chunks_cut() {
        let lines: [&[u8]; 5] =
            [b"plain", "h\u{e9}llo \u{1f600}!".as_bytes(), b"ab\xffcd", b"ok\xe2\x82", b"\xe2\x82x\xe2\x82\xac"];
        for line in lines {
            let whole = std::str::from_utf8(line).err().map(|e| e.valid_up_to());
            for size in 1..=line.len() {
                let mut check = Utf8::default();
                line.chunks(size).for_each(|c| check.feed(c));
                assert_eq!(check.finish(), whole, "{line:?} in chunks of {size}");
            }
        }
    }
}
