//! The file system side of state files: atomic writes, the per-session lock, the stamp that
//! tells one version of a file from another, and setting a corrupt file aside.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::{validate_session_id, StateError};

/// Writes `bytes` to `path` atomically: a temp file in the same directory, fsync, rename,
/// then fsync of the directory so the rename itself is durable.
///
/// The temp file is `.<name>.tmp`, one per state file: callers hold the session's lock (see
/// [`lock`]), so no two writers share it, and a temp file a killed writer left behind is
/// simply overwritten by the next save instead of piling up.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp"));
    let result = (|| {
        let mut file = fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
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

/// Takes the advisory lock of session `id`'s state file, waiting for it: `.<id>.lock` in
/// `dir`. Every dcp process holds it while it reads, merges and writes the file, so two
/// processes never interleave a read-merge-write. The lock goes with the returned file, and
/// with the process if it dies.
pub fn lock(dir: &Path, id: &str) -> Result<fs::File, StateError> {
    validate_session_id(id)?;
    fs::create_dir_all(dir).map_err(|source| StateError::CreateDir { path: dir.to_path_buf(), source })?;
    let path = dir.join(format!(".{id}.lock"));
    let open = || {
        let file = fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path)?;
        file.lock()?;
        Ok(file)
    };
    open().map_err(|source| StateError::Lock { path: path.clone(), source })
}

/// Renames a corrupt state file out of the way: `<name>.corrupt-<UTC time>`.
pub fn set_aside(path: &Path) -> Result<PathBuf, StateError> {
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S%.3fZ");
    let mut target = path.as_os_str().to_owned();
    target.push(format!(".corrupt-{stamp}"));
    let target = PathBuf::from(target);
    fs::rename(path, &target).map_err(|source| StateError::SetAside { path: path.to_path_buf(), source })?;
    Ok(target)
}
