//! The all-time report's cache file: what each state file added, remembered across processes.
//!
//! A plain text file, `all-time-<hash of the dir>.tsv`, that names its dir and ends with a
//! count line, one line per state file (name, size, modification time, counts, figures). One
//! that does not parse, names another dir, or lacks its last line is ignored (and rewritten).

use rustc_hash::FxHashMap as HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::remembered::{Remembered, Summary};
use crate::state::persist::{is_state_name as is_state_file, MAX_COUNT};
use crate::stats::Figures;

const CACHE_HEADER: &str = "dcp all-time cache 3";

/// The cache file for `dir` under `cache_dir`, named by a hash of the dir's path (FNV-1a,
/// stable across builds). `None` for a path that is not UTF-8 or holds a tab or newline,
/// which the cache's lines could not name.
pub(super) fn cache_path(cache_dir: &Path, dir: &Path) -> Option<PathBuf> {
    let text = dir.to_str().filter(|t| !t.contains(['\t', '\n', '\r']))?;
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    Some(cache_dir.join(format!("all-time-{hash:016x}.tsv")))
}

/// Reads the cache of `dir`, or `None` when it is missing or not whole.
pub(super) fn read_cache(cache: &Path, dir: &Path) -> Option<HashMap<String, Remembered>> {
    let text = std::fs::read_to_string(cache).ok()?;
    let parsed = parse_cache(&text, dir);
    if parsed.is_none() {
        tracing::debug!("ignoring the all-time cache {}: not a whole cache of {}", cache.display(), dir.display());
    }
    parsed
}

fn parse_cache(text: &str, dir: &Path) -> Option<HashMap<String, Remembered>> {
    let mut lines = text.lines();
    let header = lines.next()?.split_once('\t')?;
    if header != (CACHE_HEADER, dir.to_str()?) {
        return None;
    }
    let lines_in = text.bytes().filter(|b| *b == b'\n').count();
    let mut files = HashMap::with_capacity_and_hasher(lines_in, Default::default());
    for line in lines {
        let mut fields = line.split('\t');
        let name = fields.next()?;
        if name == "end" {
            let count: usize = fields.next()?.parse().ok()?;
            return (count == files.len() && fields.next().is_none()).then_some(files);
        }
        let mut number = || fields.next()?.parse::<u64>().ok();
        let (len, secs, nanos, tokens, tools) = (number()?, number()?, number()?, number()?, number()?);
        let more = [number()?, number()?, number()?, number()?, number()?, number()?, number()?, number()?];
        // A count no state file may hold makes the whole cache suspect.
        if fields.next().is_some() || nanos >= 1_000_000_000 || !is_state_file(name) || tokens.max(tools) > MAX_COUNT {
            return None;
        }
        let modified = SystemTime::UNIX_EPOCH.checked_add(Duration::new(secs, nanos as u32))?;
        let summary = Summary::Counts { tokens, tools, figures: figures(&more) };
        files.insert(name.to_string(), Remembered { len, modified: Some(modified), summary });
    }
    // No count line: the file was cut short.
    None
}

/// Writes the cache of `dir`, best effort: a cache that cannot be written only makes the next
/// process's first report slower.
pub(super) fn write_cache(cache: &Path, dir: &Path, files: &HashMap<String, Remembered>) {
    use std::fmt::Write;
    let Some(dir_text) = dir.to_str() else { return };
    let mut text = format!("{CACHE_HEADER}\t{dir_text}\n");
    let mut count = 0;
    for (name, file) in files {
        let Summary::Counts { tokens, tools, figures } = &file.summary else { continue };
        let Some(since) = file.modified.and_then(|m| m.duration_since(SystemTime::UNIX_EPOCH).ok()) else { continue };
        let _ = write!(text, "{name}\t{}\t{}\t{}\t{tokens}\t{tools}", file.len, since.as_secs(), since.subsec_nanos());
        for column in columns(figures) {
            let _ = write!(text, "\t{column}");
        }
        text.push('\n');
        count += 1;
    }
    let _ = writeln!(text, "end\t{count}");
    let written = (|| -> std::io::Result<()> {
        if let Some(parent) = cache.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let tmp = cache.with_extension(format!("tmp-{}", std::process::id()));
        std::fs::write(&tmp, &text)?;
        std::fs::rename(&tmp, cache).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
    })();
    if let Err(e) = written {
        tracing::debug!("cannot write the all-time cache {}: {e}", cache.display());
    }
}

/// The figures a summary keeps, from their columns in the cache (floats as their bits).
pub(super) fn figures(columns: &[u64; COLUMNS]) -> Figures {
    let [in_force_tokens, waiting_tokens, requests, kept_out, without, saved, refetches, restores] = *columns;
    let kept_out_tokens = kept_out as i64;
    let mut f = Figures {
        in_force_tokens,
        waiting_tokens,
        requests,
        kept_out_tokens,
        refetches,
        restores,
        ..Figures::default()
    };
    f.add(&Figures { cost_without: f64::from_bits(without), cost_saved: f64::from_bits(saved), ..Figures::default() });
    f
}

/// How many figures a cache line holds.
pub(super) const COLUMNS: usize = 8;

/// The columns of [`figures`].
fn columns(f: &Figures) -> [u64; COLUMNS] {
    let (kept_out, without, saved) = (f.kept_out_tokens as u64, f.cost_without.to_bits(), f.cost_saved.to_bits());
    [f.in_force_tokens, f.waiting_tokens, f.requests, kept_out, without, saved, f.refetches, f.restores]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_round_trips_and_refuses_what_is_not_whole() {
        let dir = Path::new("/data/storage/plugin/dcp");
        let modified = SystemTime::UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789);
        let mut files = HashMap::default();
        let f = Figures { in_force_tokens: 5, kept_out_tokens: -3, cost_saved: -1.5, ..Figures::default() };
        let counts = Summary::Counts { tokens: 907, tools: 2, figures: figures(&columns(&f)) };
        files.insert("ses_a.json".to_string(), Remembered { len: 10, modified: Some(modified), summary: counts });
        let corrupt = Summary::Corrupt("bad".into());
        files.insert("ses_b.json".to_string(), Remembered { len: 3, modified: Some(modified), summary: corrupt });
        let tmp = tempfile::tempdir().unwrap();
        let cache = cache_path(tmp.path(), dir).unwrap();
        write_cache(&cache, dir, &files);
        let back = read_cache(&cache, dir).unwrap();
        // Corrupt files are not cached: they are read and reported again.
        files.remove("ses_b.json");
        assert_eq!(back, files);
        let text = std::fs::read_to_string(&cache).unwrap();
        // Another dir's cache, a cut file, a bad number, a bad name: all ignored.
        assert!(parse_cache(&text, Path::new("/other")).is_none());
        assert!(parse_cache(&text[..text.len() - 8], dir).is_none());
        assert!(parse_cache(&text.replace("\t907\t", "\t9x7\t"), dir).is_none());
        assert!(parse_cache(&text.replace("ses_a.json", "../a.json"), dir).is_none());
        assert!(parse_cache(&text.replace("end\t1", "end\t2"), dir).is_none());
        assert_ne!(cache_path(tmp.path(), dir), cache_path(tmp.path(), Path::new("/data/storage/plugin/dcp2")));
        assert_eq!(cache_path(tmp.path(), Path::new("/a\tb")), None);
    }
}
