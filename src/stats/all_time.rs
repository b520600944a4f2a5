//! The all-time report: the savings of every state file in a directory, fast over thousands.
//!
//! Three things keep it fast, each a fallback for the next:
//! - A file dcp wrote is read from its head (`stats` comes first, with `totalPrunedTools`),
//!   in one read, once its last byte shows it whole. Other files are loaded in full.
//! - Each file's summary is remembered by name, size and modification time: for as long as
//!   the caller keeps its [`AllTimeCache`] (the sidecar keeps one for its life), and across
//!   processes in a cache file under dcp's cache dir. A report with a cache then
//!   stats every file but reads only those that changed. The stats run on two threads.
//! - An [`AllTimeCache`] kept from one report to the next watches the directory (see
//!   [`super::watch`]), so a repeated report re-reads only the files named in the events since
//!   the last one, and stats nothing else.
//!
//! The cache file across processes is [`disk_cache`]'s; what both remember of a file is
//! [`remembered`]'s. Corrupt state files are never cached:
//! they are reported afresh.

use rustc_hash::FxHashMap as HashMap;
use std::fs::{DirEntry, Metadata};
use std::path::{Path, PathBuf};

mod disk_cache;
mod remembered;

use self::disk_cache::{cache_path, figures, read_cache, write_cache};
use self::remembered::{Remembered, Summary};
use super::watch::{Changes, Watch};
use super::{tools_of, AllTime, CorruptFile, Figures};
use crate::state::persist::{self, is_state_name as is_state_file, proxied_entries, LoadOutcome, MAX_COUNT};

/// What this process knows of one state dir.
#[derive(Default)]
struct Known {
    files: HashMap<String, Remembered>,
    watch: Option<Watch>,
    /// The cache file was read (or there was none): it is read once per process.
    cache_read: bool,
}

/// What the all-time reports made with it know of each state dir: every file's summary and
/// the dir's watch. A report made with the same cache again reads only what changed; a new
/// cache starts from the cache file, if there is one.
#[derive(Default)]
pub struct AllTimeCache {
    dirs: std::collections::HashMap<PathBuf, Known>,
}

impl AllTimeCache {
    /// Sums every state file of `dir`. `cache_dir` is where dcp keeps its caches (see
    /// [`crate::host::paths::Env::cache_dir`]); without one, nothing is remembered across
    /// processes.
    pub fn all_time(&mut self, dir: &Path, cache_dir: Option<&Path>) -> std::io::Result<AllTime> {
        all_time(self.dirs.entry(dir.to_path_buf()).or_default(), dir, cache_dir)
    }
}

/// [`AllTimeCache::all_time`], with what is known of `dir`.
fn all_time(known: &mut Known, dir: &Path, cache_dir: Option<&Path>) -> std::io::Result<AllTime> {
    let cache = cache_dir.and_then(|c| cache_path(c, dir));
    let changes = known.watch.as_mut().map_or(Changes::Unknown, Watch::changes);
    let changed = match changes {
        // The cache is written after full scans only: rewriting it for every change a watch
        // reports would cost more than the report (10,000 lines), and a stale entry only makes
        // another process read that file again.
        Changes::Names(names) => {
            refresh(dir, &mut known.files, names);
            refresh_proxied(dir, &mut known.files);
            false
        }
        Changes::Unknown => {
            if !known.cache_read {
                known.cache_read = true;
                if let Some(files) = cache.as_deref().and_then(|c| read_cache(c, dir)) {
                    known.files = files;
                }
            }
            // The watch goes first, so that a change made during the scan is seen next time.
            known.watch = Watch::new(dir);
            match scan(dir, &mut known.files) {
                Ok(changed) => changed,
                Err(e) => {
                    known.watch = None;
                    if e.kind() == std::io::ErrorKind::NotFound {
                        known.files.clear();
                        return Ok(AllTime::default());
                    }
                    // The caller names what it was doing; the error names the path and the cause.
                    return Err(std::io::Error::new(e.kind(), persist::in_words(dir, &e)));
                }
            }
        }
    };
    if changed {
        if let Some(cache) = &cache {
            write_cache(cache, dir, &known.files);
        }
    }
    Ok(report(dir, &known.files))
}

/// Brings the proxied conversations' files in `files` up to date (the watch sees the state
/// dir only, not their folders).
fn refresh_proxied(dir: &Path, files: &mut HashMap<String, Remembered>) {
    let entries = proxied_entries(dir);
    files.retain(|name, _| !name.contains('/') || entries.iter().any(|(n, _)| n == name));
    for (name, entry) in entries {
        let meta = entry.metadata().ok();
        if !files.get(&name).is_some_and(|known| meta.as_ref().is_some_and(|m| known.matches(m))) {
            files.insert(name, remember(&entry.path(), meta));
        }
    }
}

/// Re-reads the files named by a watch's events.
fn refresh(dir: &Path, files: &mut HashMap<String, Remembered>, mut names: Vec<String>) {
    names.sort_unstable();
    names.dedup();
    for name in names.into_iter().filter(|n| is_state_file(n)) {
        let path = dir.join(&name);
        // An event means the file was written: it is read again even if its size and time
        // look the same.
        match std::fs::symlink_metadata(&path) {
            Ok(meta) => {
                files.insert(name, remember(&path, Some(meta)));
            }
            Err(_) => {
                files.remove(&name);
            }
        }
    }
}

/// Lists `dir` and brings `files` up to date with it: entries are statted (on two threads
/// when there are many), and read only when their size or time changed. Returns whether
/// anything changed.
fn scan(dir: &Path, files: &mut HashMap<String, Remembered>) -> std::io::Result<bool> {
    let mut entries: Vec<(String, DirEntry)> = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if let Ok(name) = entry.file_name().into_string() {
            if is_state_file(&name) {
                entries.push((name, entry));
            }
        }
    }
    entries.extend(proxied_entries(dir));
    let old: &HashMap<String, Remembered> = files;
    let look = |chunk: &[(String, DirEntry)]| -> Vec<Option<Remembered>> {
        chunk
            .iter()
            .map(|(name, entry)| {
                // The entry's own metadata: a stat relative to the open dir, not a walk of
                // the path.
                let Some(known) = old.get(name) else {
                    return Some(remember(&entry.path(), None));
                };
                match entry.metadata() {
                    Ok(meta) if known.matches(&meta) => None,
                    meta => Some(remember(&entry.path(), meta.ok())),
                }
            })
            .collect()
    };
    const PER_THREAD: usize = 512;
    let looked: Vec<Option<Remembered>> = if entries.len() < 2 * PER_THREAD {
        look(&entries)
    } else {
        let (a, b) = entries.split_at(entries.len() / 2);
        std::thread::scope(|s| {
            let second = s.spawn(|| look(b));
            let mut first = look(a);
            // A panic in the other thread is a bug, not bad input: it goes on as one.
            first.extend(second.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
            first
        })
    };
    let mut changed = entries.len() != files.len();
    let mut next = HashMap::with_capacity_and_hasher(entries.len(), Default::default());
    for ((name, _), fresh) in entries.into_iter().zip(looked) {
        let entry = match fresh {
            Some(fresh) => {
                changed = true;
                fresh
            }
            None => match files.remove(&name) {
                Some(kept) => kept,
                None => continue,
            },
        };
        next.insert(name, entry);
    }
    *files = next;
    Ok(changed)
}

/// Reads what the file at `path` adds to the report, with the size and time it was read at.
/// `meta` is its metadata if it was statted already: a file that was not is opened first and
/// its metadata read from the open file, which saves a lookup of the path.
fn remember(path: &Path, meta: Option<Metadata>) -> Remembered {
    let missing = Remembered { len: 0, modified: None, summary: Summary::Missing };
    let (meta, summary) = match meta {
        // Only a plain file is opened here: a FIFO would block. Anything else is left to the
        // loader, which says what is wrong with it.
        Some(meta) if !meta.is_file() => (meta, None),
        Some(meta) => {
            let summary = std::fs::File::open(path).ok().and_then(|f| read_head(&f, meta.len()));
            (meta, summary)
        }
        None => {
            let file = open_nonblocking(path);
            let Ok(meta) = file.as_ref().map_or_else(|_| std::fs::symlink_metadata(path), std::fs::File::metadata)
            else {
                return missing;
            };
            let summary = file.ok().filter(|_| meta.is_file()).and_then(|f| read_head(&f, meta.len()));
            (meta, summary)
        }
    };
    let summary = summary.unwrap_or_else(|| match persist::load_path(path) {
        LoadOutcome::Loaded(state) => {
            Summary::Counts { tokens: state.stats.tokens(), tools: tools_of(&state), figures: Figures::of(&state) }
        }
        LoadOutcome::Corrupt { reason, .. } => Summary::Corrupt(reason),
        LoadOutcome::Missing => Summary::Missing,
    });
    Remembered { len: meta.len(), modified: meta.modified().ok(), summary }
}

/// The summary of a whole file dcp wrote, from its head, in one read for files up to 16 KB
/// (and one more for the tail of larger ones). `None` when the file is not one.
fn read_head(mut file: &std::fs::File, len: u64) -> Option<Summary> {
    use std::io::Read;
    const ONE_READ: u64 = 4 * 1024;
    const TAIL: u64 = 64;
    let mut buf = vec![0u8; len.min(ONE_READ) as usize];
    file.read_exact(&mut buf).ok()?;
    let whole = if len <= ONE_READ {
        ends_whole(&buf)
    } else {
        let mut tail = [0u8; TAIL as usize];
        read_at(file, &mut tail, len - TAIL) && ends_whole(&tail)
    };
    // A torn or truncated file is loaded in full, and reported.
    whole.then(|| summary_from_head(&buf)).flatten()
}

/// Opens `path` for reading without blocking on a FIFO (or a device) that has no writer.
fn open_nonblocking(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NONBLOCK);
    options.open(path)
}

#[cfg(unix)]
fn read_at(file: &std::fs::File, buf: &mut [u8], at: u64) -> bool {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, at).is_ok()
}

/// Elsewhere large files are loaded in full.
#[cfg(not(unix))]
fn read_at(_file: &std::fs::File, _buf: &mut [u8], _at: u64) -> bool {
    false
}

/// Whether `bytes` end with the closing brace of a JSON object, as a whole state file does.
fn ends_whole(bytes: &[u8]) -> bool {
    bytes.iter().rev().find(|b| !b.is_ascii_whitespace()) == Some(&b'}')
}

/// The summary at the head of a file dcp wrote: `stats` comes first and carries
/// `totalPrunedTools`, so the report need not parse the whole file. `None` for other files.
fn summary_from_head(head: &[u8]) -> Option<Summary> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Head {
        #[serde(default)]
        prune_token_counter: u64,
        total_prune_tokens: u64,
        total_pruned_tools: u64,
        // dcp's savings keys (see `crate::state::savings`).
        #[serde(default)]
        in_force_tokens: u64,
        #[serde(default)]
        waiting_tokens: u64,
        #[serde(default)]
        requests: u64,
        #[serde(default)]
        kept_out_tokens: i64,
        #[serde(default)]
        cost_without: f64,
        #[serde(default)]
        cost_saved: f64,
        // The misses seen live (see `crate::state::misses`).
        #[serde(default)]
        refetches: u64,
        #[serde(default)]
        restores: u64,
    }
    // `stats` comes first: its 4 KB are enough, and they may end inside a character.
    let head = &head[..head.len().min(4096)];
    let text = match std::str::from_utf8(head) {
        Ok(text) => text,
        Err(e) => std::str::from_utf8(&head[..e.valid_up_to()]).ok()?,
    };
    let rest = text.trim_start().strip_prefix('{')?.trim_start().strip_prefix("\"stats\"")?;
    let rest = rest.trim_start().strip_prefix(':')?;
    // `stats` is flat: its object ends at the first `}`.
    let end = rest.find('}')?;
    let head: Head = serde_json::from_str(&rest[..=end]).ok()?;
    // A count past the bound is corruption: the loader names the key.
    if [head.total_prune_tokens, head.prune_token_counter, head.total_pruned_tools].iter().any(|n| *n > MAX_COUNT) {
        return None;
    }
    let figures = figures(&[
        head.in_force_tokens,
        head.waiting_tokens,
        head.requests,
        head.kept_out_tokens as u64,
        head.cost_without.to_bits(),
        head.cost_saved.to_bits(),
        head.refetches.min(MAX_COUNT),
        head.restores.min(MAX_COUNT),
    ]);
    Some(Summary::Counts {
        tokens: head.total_prune_tokens + head.prune_token_counter,
        tools: head.total_pruned_tools,
        figures,
    })
}

/// The report over the files known now, with corrupt files in name order.
fn report(dir: &Path, files: &HashMap<String, Remembered>) -> AllTime {
    let mut report = AllTime::default();
    let mut corrupt: Vec<(&String, &String)> = Vec::new();
    for (name, file) in files {
        if let Some((client, _)) = name.strip_prefix("proxy/").and_then(|rest| rest.split_once('/')) {
            *report.proxied.entry(client.to_string()).or_default() += 1;
        }
        report.files += 1;
        report.bytes += file.len;
        match &file.summary {
            Summary::Counts { tokens, tools, figures } => {
                report.figures.add(figures);
                report.pruned_tokens = report.pruned_tokens.saturating_add(*tokens);
                report.tools_pruned = report.tools_pruned.saturating_add(*tools);
                report.sessions += u64::from(*tokens > 0);
            }
            Summary::Corrupt(reason) => corrupt.push((name, reason)),
            Summary::Missing => {}
        }
    }
    corrupt.sort();
    report.corrupt = corrupt
        .into_iter()
        .map(|(name, reason)| CorruptFile { file: dir.join(name), reason: reason.clone() })
        .collect();
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_cut_inside_a_character_still_gives_its_stats() {
        let mut text = r#"{"stats":{"pruneTokenCounter":0,"totalPruneTokens":5,"totalPrunedTools":1},"x":"é"}"#
            .as_bytes()
            .to_vec();
        text.truncate(text.len() - 3);
        let figures = Figures::default();
        assert_eq!(summary_from_head(&text), Some(Summary::Counts { tokens: 5, tools: 1, figures }));
    }
}
