//! Why a file operation on the state dir or a state file failed, in words that name the path
//! to fix: "X is not a directory" rather than "File exists (os error 17)", "permission denied
//! on X", "the disk is full". The system's error is kept beside the words for callers that
//! need its kind.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// The cause of a failed operation on a path: the words a person reads, and the system's error.
#[derive(Debug)]
pub struct Cause {
    words: String,
    io: std::io::Error,
}

impl Cause {
    /// The cause of `io`, which an operation on `path` (a dir, or a file to make in one) met.
    pub fn new(path: &Path, io: std::io::Error) -> Cause {
        Cause { words: in_words(path, &io), io }
    }

    /// The system's error.
    pub fn io(&self) -> &std::io::Error {
        &self.io
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.words)
    }
}

impl std::error::Error for Cause {}

/// What went wrong with `path`, naming the path a person has to change. An error the words do
/// not cover is told as the system tells it.
pub fn in_words(path: &Path, io: &std::io::Error) -> String {
    match io.kind() {
        // A plain file (or a FIFO, or a link to one) where a directory of the path should be:
        // `mkdir` says "File exists" of the last one, and "Not a directory" of those above it.
        ErrorKind::AlreadyExists | ErrorKind::NotADirectory => match not_a_dir(path) {
            Some(blocker) => format!("{} is not a directory", blocker.display()),
            None => io.to_string(),
        },
        ErrorKind::PermissionDenied => format!("permission denied on {}", existing(path).display()),
        ErrorKind::StorageFull => "the disk is full".to_string(),
        ErrorKind::QuotaExceeded => "the disk quota is used up".to_string(),
        ErrorKind::ReadOnlyFilesystem => format!("{} is on a read-only file system", existing(path).display()),
        ErrorKind::IsADirectory => format!("{} is a directory", path.display()),
        _ => io.to_string(),
    }
}

/// The deepest of `path` and its ancestors that is there, when it is not a directory (nor a
/// link to one): what stands where a directory should be.
pub fn not_a_dir(path: &Path) -> Option<PathBuf> {
    let there = path.ancestors().find(|a| std::fs::symlink_metadata(a).is_ok())?;
    let is_dir = std::fs::metadata(there).is_ok_and(|m| m.is_dir());
    (!is_dir).then(|| there.to_path_buf())
}

/// The deepest of `path` and its ancestors that is there: the one whose permissions refused.
fn existing(path: &Path) -> &Path {
    path.ancestors().find(|a| std::fs::symlink_metadata(a).is_ok()).unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_where_the_state_dir_or_a_dir_above_it_should_be_is_named_as_not_a_directory() {
        let root = tempfile::tempdir().unwrap();
        let plugin = root.path().join("storage/plugin");
        std::fs::create_dir_all(&plugin).unwrap();
        let dcp = plugin.join("dcp");
        std::fs::write(&dcp, "x").unwrap();
        let exists = std::fs::create_dir_all(&dcp).unwrap_err();
        assert_eq!(in_words(&dcp, &exists), format!("{} is not a directory", dcp.display()));
        let below = dcp.join("proxy/codex");
        let not_dir = std::fs::create_dir_all(&below).unwrap_err();
        assert_eq!(in_words(&below, &not_dir), format!("{} is not a directory", dcp.display()));
    }

    #[test]
    fn a_full_disk_and_a_refused_permission_are_told_in_words() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("dcp");
        let full = std::io::Error::from(ErrorKind::StorageFull);
        assert_eq!(in_words(&dir, &full), "the disk is full");
        let denied = std::io::Error::from(ErrorKind::PermissionDenied);
        assert_eq!(in_words(&dir, &denied), format!("permission denied on {}", root.path().display()));
        let other = std::io::Error::other("something else");
        assert_eq!(in_words(&dir, &other), "something else");
    }
}
