//! The file system side of state files: atomic writes, the per-session lock, the stamp that
//! tells one version of a file from another, and setting a corrupt file aside.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::cause::Cause;
use super::paths::{file_dir, validate_session_id, StateError};

/// Writes `bytes` to `path` atomically: a temp file in the same directory, fsync, rename,
/// then fsync of the directory so the rename itself is durable.
///
/// The temp file is `.<name>.tmp`, one per state file: callers hold the session's lock (see
/// [`lock`]), so no two writers share it. Whatever is at that name (a temp file a killed
/// writer left, or a link someone planted) is removed first, never followed, and the temp
/// file is created new and exclusive without following links: a save writes only a file it
/// has just made.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp"));
    remove_entry(&tmp)?;
    let mut file = create_new(&tmp)?;
    let result = (|| {
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&tmp, path)?;
        if let Ok(d) = fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Removes whatever is at `path` (a file, a link, a FIFO) without following it; nothing there
/// is fine. A directory is left alone, and the exclusive create after it fails.
fn remove_entry(path: &Path) -> std::io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => match fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        },
        Err(_) => Ok(()),
    }
}

/// Opens `path` for writing, made new: fails if anything is there, a link included.
fn create_new(path: &Path) -> std::io::Result<fs::File> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    no_follow(&mut options);
    options.open(path)
}

/// Opens `path` for reading without following a link or blocking on a FIFO.
pub(super) fn open_read(path: &Path) -> std::io::Result<fs::File> {
    let mut options = fs::OpenOptions::new();
    options.read(true);
    no_follow(&mut options);
    options.open(path)
}

/// Adds `O_NOFOLLOW` (and `O_NONBLOCK`, so that a FIFO never blocks the open) where there is one.
fn no_follow(options: &mut fs::OpenOptions) {
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(options, libc::O_NOFOLLOW | libc::O_NONBLOCK);
}

/// Which version of a state file is on disk. Every dcp save renames a new file into place,
/// so a save by any process changes the inode, and an in-place rewrite (the published DCP
/// plugin's) changes the size or the modification time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    len: u64,
    modified: Option<std::time::SystemTime>,
    inode: u64,
}

/// The [`Stamp`] of the file at `path`, or `None` if there is none.
pub fn stamp(path: &Path) -> Option<Stamp> {
    let meta = fs::metadata(path).ok()?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&meta);
    #[cfg(not(unix))]
    let inode = 0;
    Some(Stamp { len: meta.len(), modified: meta.modified().ok(), inode })
}

/// Takes the advisory lock of session `id`'s state file, waiting for it: `.<id>.lock` beside
/// the file (in `dir`, or its folder there, [`file_dir`]). Every dcp process holds it while it reads, merges and writes the file, so two
/// processes never interleave a read-merge-write. The lock goes with the returned file, and
/// with the process if it dies.
pub fn lock(dir: &Path, id: &str) -> Result<fs::File, StateError> {
    validate_session_id(id)?;
    let dir = &file_dir(dir, id);
    fs::create_dir_all(dir)
        .map_err(|e| StateError::CreateDir { path: dir.to_path_buf(), source: Cause::new(dir, e) })?;
    let path = dir.join(format!(".{id}.lock"));
    let open = || {
        let file = open_lock(&path)?;
        file.lock()?;
        Ok(file)
    };
    open().map_err(|e| StateError::Lock { source: Cause::new(&path, e), path })
}

/// Opens the lock file at `path`, creating it, without following a link. The lock file is
/// never replaced while it is a plain file, since other processes may hold it; anything else
/// at its name (a link, a FIFO, a device) is not dcp's, and is removed and made afresh.
fn open_lock(path: &Path) -> std::io::Result<fs::File> {
    let mut options = fs::OpenOptions::new();
    options.create(true).truncate(false).write(true);
    no_follow(&mut options);
    if let Ok(file) = options.open(path) {
        if file.metadata()?.is_file() {
            return Ok(file);
        }
    }
    remove_entry(path)?;
    let file = create_new(path).or_else(|e| match e.kind() {
        // Another process made it between the removal and here.
        std::io::ErrorKind::AlreadyExists => options.open(path),
        _ => Err(e),
    })?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(file)
}

/// Renames a corrupt state file out of the way: `<name>.corrupt-<UTC time>`.
pub fn set_aside(path: &Path) -> Result<PathBuf, StateError> {
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S%.3fZ");
    let mut target = path.as_os_str().to_owned();
    target.push(format!(".corrupt-{stamp}"));
    let target = PathBuf::from(target);
    fs::rename(path, &target)
        .map_err(|e| StateError::SetAside { path: path.to_path_buf(), source: Cause::new(path, e) })?;
    Ok(target)
}
