//! Hostile files and text (issue 26): planted links and FIFOs in the state dir, terminal
//! escapes in titles and paths, totals that would wrap, a `dcp.jsonc` or `opencode.db` that is
//! not a plain file, and big legacy state files. One regression test per bug, named after it.

use std::path::Path;

use crate::support::{dcp, Sandbox, DB_SESSION};

mod files;
mod links;
mod text;
mod totals;

/// Makes a FIFO at `path`.
pub fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", path.display());
}

/// The names in `dir`, sorted.
pub fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

/// Sweeps the recorded session and asserts it succeeded.
pub fn sweep(s: &Sandbox) -> String {
    let out = dcp(s, &["sweep", "--session", DB_SESSION, "2"]);
    let err = crate::support::stderr(&out);
    assert!(out.status.success(), "{err}");
    err
}
