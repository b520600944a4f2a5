//! Notices which files of a directory changed between two all-time reports, so that a
//! long-lived process (the sidecar's `/dcp stats`) re-reads those files only, instead of
//! statting every state file again.
//!
//! Linux has inotify: the watch is set up before the directory is scanned, so a change made
//! during the scan shows up at the next report. When the kernel dropped events (its queue
//! overflowed) or the directory itself went away, the answer is [`Changes::Unknown`] and the
//! caller scans in full. Elsewhere there is no watch, and every report scans.

use std::path::Path;

/// What changed in the directory since the watch was set up or last asked.
#[derive(Debug, PartialEq, Eq)]
pub enum Changes {
    /// The names of the entries that were written, created, renamed or removed (possibly
    /// repeated, possibly none).
    Names(Vec<String>),
    /// Events were lost, or the directory was removed or moved: scan it in full.
    Unknown,
}

/// A watch on a directory's entries: inotify's on Linux; elsewhere none is ever set up.
pub struct Watch {
    #[cfg(target_os = "linux")]
    inotify: inotify::Inotify,
}

#[cfg(target_os = "linux")]
impl Watch {
    /// Starts watching `dir`, or `None` when the system will not (no inotify instances left,
    /// or `dir` is not a directory).
    pub fn new(dir: &Path) -> Option<Watch> {
        use inotify::{Inotify, WatchMask};
        let inotify = Inotify::init().ok()?;
        let mask = WatchMask::MODIFY
            | WatchMask::CLOSE_WRITE
            | WatchMask::ATTRIB
            | WatchMask::CREATE
            | WatchMask::DELETE
            | WatchMask::MOVED_FROM
            | WatchMask::MOVED_TO
            | WatchMask::DELETE_SELF
            | WatchMask::MOVE_SELF
            | WatchMask::ONLYDIR;
        inotify.watches().add(dir, mask).ok()?;
        Some(Watch { inotify })
    }

    /// Drains the events queued since the last call. Never blocks.
    pub fn changes(&mut self) -> Changes {
        use inotify::EventMask;
        let lost = EventMask::Q_OVERFLOW | EventMask::IGNORED | EventMask::DELETE_SELF | EventMask::MOVE_SELF;
        let mut buffer = [0u8; 16 * 1024];
        let mut names = Vec::new();
        loop {
            let events = match self.inotify.read_events(&mut buffer) {
                Ok(events) => events,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Changes::Names(names),
                Err(_) => return Changes::Unknown,
            };
            for event in events {
                if event.mask.intersects(lost) {
                    return Changes::Unknown;
                }
                if let Some(name) = event.name.and_then(|n| n.to_str()) {
                    names.push(name.to_string());
                }
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
impl Watch {
    pub fn new(_dir: &Path) -> Option<Watch> {
        None
    }

    pub fn changes(&mut self) -> Changes {
        Changes::Unknown
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_watch_names_what_changed_and_gives_up_when_the_dir_goes() {
        let dir = tempfile::tempdir().unwrap();
        let mut watch = Watch::new(dir.path()).unwrap();
        assert_eq!(watch.changes(), Changes::Names(vec![]));
        std::fs::write(dir.path().join("a.json"), "{}").unwrap();
        std::fs::write(dir.path().join(".b.json.tmp"), "{}").unwrap();
        std::fs::rename(dir.path().join(".b.json.tmp"), dir.path().join("b.json")).unwrap();
        let Changes::Names(mut names) = watch.changes() else { panic!("events were lost") };
        names.sort();
        names.dedup();
        assert_eq!(names, [".b.json.tmp", "a.json", "b.json"]);
        assert_eq!(watch.changes(), Changes::Names(vec![]));
        let path = dir.path().to_path_buf();
        drop(dir);
        assert!(!path.exists());
        assert_eq!(watch.changes(), Changes::Unknown);
    }
}
