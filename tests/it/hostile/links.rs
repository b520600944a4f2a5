//! Saves never follow links: not at the temp file, not at the lock, not at the state file.

use std::os::unix::fs::symlink;

use super::{mkfifo, names, sweep};
use crate::support::{Sandbox, DB_SESSION};

#[test]
fn a_planted_temp_file_symlink_does_not_make_a_save_overwrite_its_target() {
    let s = Sandbox::new();
    let victim = s.dir.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    symlink(&victim, s.state_dir().join(format!(".{DB_SESSION}.json.tmp"))).unwrap();
    sweep(&s);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious", "the save wrote through the link");
    let state = s.state_dir().join(format!("{DB_SESSION}.json"));
    let meta = std::fs::symlink_metadata(&state).unwrap();
    assert!(meta.file_type().is_file(), "the state file is not a plain file: {meta:?}");
    assert!(!names(&s.state_dir()).iter().any(|n| n.ends_with(".tmp")), "{:?}", names(&s.state_dir()));
}

#[test]
fn a_state_file_that_is_a_symlink_is_set_aside_and_told_not_followed() {
    let s = Sandbox::new();
    let state = s.state_dir().join(format!("{DB_SESSION}.json"));
    let victim = s.dir.path().join("victim.json");
    std::fs::rename(&state, &victim).unwrap();
    let before = std::fs::read(&victim).unwrap();
    symlink(&victim, &state).unwrap();
    let err = sweep(&s);
    assert!(err.contains("symbolic link") && err.contains("set the corrupt state file aside"), "{err}");
    assert_eq!(std::fs::read(&victim).unwrap(), before, "the link's target was changed");
    assert!(std::fs::symlink_metadata(&state).unwrap().file_type().is_file());
    let aside: Vec<String> = names(&s.state_dir()).into_iter().filter(|n| n.contains(".corrupt-")).collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    let link = s.state_dir().join(&aside[0]);
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link itself is set aside");
}

#[test]
fn a_lock_file_that_is_a_dangling_symlink_creates_nothing_at_its_target() {
    let s = Sandbox::new();
    let victim = s.dir.path().join("created-by-dcp");
    symlink(&victim, s.state_dir().join(format!(".{DB_SESSION}.lock"))).unwrap();
    sweep(&s);
    assert!(std::fs::symlink_metadata(&victim).is_err(), "the lock followed the link and created its target");
    let lock = std::fs::symlink_metadata(s.state_dir().join(format!(".{DB_SESSION}.lock"))).unwrap();
    assert!(lock.file_type().is_file(), "{lock:?}");
}

#[test]
fn a_lock_file_that_is_a_fifo_does_not_hang_a_save() {
    let s = Sandbox::new();
    mkfifo(&s.state_dir().join(format!(".{DB_SESSION}.lock")));
    // `dcp` gives up within 20 s; opening a FIFO for writing with no reader blocks forever.
    sweep(&s);
    let lock = std::fs::symlink_metadata(s.state_dir().join(format!(".{DB_SESSION}.lock"))).unwrap();
    assert!(lock.file_type().is_file(), "{lock:?}");
}
