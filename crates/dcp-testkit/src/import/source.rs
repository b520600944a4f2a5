//! Reading a source log: gzip or plain, JSON lines, and errors that name the file and line.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// An input the importer cannot use: which file, which line (when one), and what is wrong.
#[derive(Debug)]
pub struct ImportError {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub what: String,
}

impl ImportError {
    pub fn new(file: &Path, line: Option<usize>, what: impl Into<String>) -> Self {
        ImportError { file: file.to_path_buf(), line, what: what.into() }
    }
}

impl fmt::Display for ImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The message is shown on a terminal: control characters are escaped.
        let what: String = self.what.chars().flat_map(char::escape_default).collect();
        let what = if self.what.chars().any(char::is_control) { what } else { self.what.clone() };
        match self.line {
            Some(n) => write!(f, "{}:{n}: {what}", self.file.display()),
            None => write!(f, "{}: {what}", self.file.display()),
        }
    }
}

impl std::error::Error for ImportError {}

/// The text of `path`, decompressed when it ends in `.gz`.
pub fn read_text(path: &Path) -> Result<String, ImportError> {
    let bytes = std::fs::read(path).map_err(|e| ImportError::new(path, None, format!("cannot read: {e}")))?;
    let bytes = if path.extension().is_some_and(|e| e == "gz") {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(bytes.as_slice())
            .read_to_end(&mut out)
            .map_err(|e| ImportError::new(path, None, format!("not a gzip file: {e}")))?;
        out
    } else {
        bytes
    };
    String::from_utf8(bytes).map_err(|e| ImportError::new(path, None, format!("not UTF-8 text: {e}")))
}

/// One parsed record of a JSON-lines log and its line number (from 1).
pub struct Record {
    pub line: usize,
    pub value: Value,
}

/// The JSON records of a JSON-lines log. Blank lines are skipped; any other line must be a
/// JSON object, or the error names the file and line.
pub fn json_lines(text: &str, file: &Path) -> Result<Vec<Record>, ImportError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(line) {
            Ok(value @ Value::Object(_)) => out.push(Record { line: i + 1, value }),
            Ok(_) => return Err(ImportError::new(file, Some(i + 1), "not a JSON object")),
            Err(e) => return Err(ImportError::new(file, Some(i + 1), format!("not JSON ({e})"))),
        }
    }
    Ok(out)
}

/// Milliseconds since the Unix epoch of an RFC 3339 timestamp.
pub fn parse_time(s: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(s).ok().map(|t| t.timestamp_millis())
}

/// The string at `key` of `v`, or "".
pub fn str_at<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}
