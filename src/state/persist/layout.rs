//! The layout of a state file on disk: indented, like DCP's own files, but with every array
//! below the top level (the prune lists, often millions of ids) written on one line. A legacy
//! file of 2 million ids is then rewritten no larger than it came (about `id + 3` bytes an id,
//! the quotes and a comma) instead of seven bytes of indentation an id larger, which could
//! push it past the size dcp reads.

use std::io::{self, Write};

use serde_json::ser::{Formatter, PrettyFormatter};

/// Writes `value` to `out` in the state file layout.
pub fn write(out: &mut Vec<u8>, value: &impl serde::Serialize) {
    let mut ser = serde_json::Serializer::with_formatter(out, Layout::default());
    value.serialize(&mut ser).expect("writing JSON to memory cannot fail");
}

/// [`PrettyFormatter`] down to the top-level object's members; flat inside any array below.
#[derive(Default)]
struct Layout {
    pretty: PrettyFormatter<'static>,
    /// Containers open.
    depth: usize,
    /// Containers open since the layout went flat (0: indented).
    flat: usize,
}

impl Layout {
    fn open<W: ?Sized + Write>(&mut self, w: &mut W, bracket: &[u8], array: bool) -> io::Result<()> {
        self.depth += 1;
        if self.flat > 0 || (array && self.depth > 2) {
            self.flat += 1;
            return w.write_all(bracket);
        }
        if array {
            self.pretty.begin_array(w)
        } else {
            self.pretty.begin_object(w)
        }
    }

    fn close<W: ?Sized + Write>(&mut self, w: &mut W, bracket: &[u8], array: bool) -> io::Result<()> {
        self.depth -= 1;
        if self.flat > 0 {
            self.flat -= 1;
            return w.write_all(bracket);
        }
        if array {
            self.pretty.end_array(w)
        } else {
            self.pretty.end_object(w)
        }
    }
}

impl Formatter for Layout {
    fn begin_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.open(w, b"[", true)
    }

    fn end_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.close(w, b"]", true)
    }

    fn begin_array_value<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        match self.flat {
            0 => self.pretty.begin_array_value(w, first),
            _ if first => Ok(()),
            _ => w.write_all(b","),
        }
    }

    fn end_array_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        match self.flat {
            0 => self.pretty.end_array_value(w),
            _ => Ok(()),
        }
    }

    fn begin_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.open(w, b"{", false)
    }

    fn end_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.close(w, b"}", false)
    }

    fn begin_object_key<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        match self.flat {
            0 => self.pretty.begin_object_key(w, first),
            _ if first => Ok(()),
            _ => w.write_all(b","),
        }
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        match self.flat {
            0 => self.pretty.begin_object_value(w),
            _ => w.write_all(b":"),
        }
    }

    fn end_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        match self.flat {
            0 => self.pretty.end_object_value(w),
            _ => Ok(()),
        }
    }
}
