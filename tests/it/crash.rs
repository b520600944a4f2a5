//! Crash safety: a process SIGKILLed at random moments while it saves state never leaves a
//! torn file. `DCP_KILLS` sets how many kills (default 1,000).

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use dcp::state::persist;

use crate::support::{save_loop, SAVE_LOOP_READY};

#[test]
fn state_files_survive_sigkill_at_random_moments() {
    let kills: u64 = std::env::var("DCP_KILLS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let state_dir = data.join("storage/plugin/dcp");
    let file = state_dir.join("ses_crash.json");
    // A small deterministic generator for the kill delays: no dependency needed.
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut previous = 0u64;
    let mut survived = 0u64;
    for _ in 0..kills {
        let mut child =
            save_loop(&data, "ses_crash", "c", None).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
        // The kill lands in the save loop, not in the process's start-up.
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while stdout.read_line(&mut line).unwrap() > 0 && line.trim_end() != SAVE_LOOP_READY {
            line.clear();
        }
        std::thread::sleep(Duration::from_micros(next() % 8_000));
        child.kill().unwrap();
        child.wait().unwrap();
        survived += 1;
        let Ok(bytes) = std::fs::read(&file) else {
            assert_eq!(previous, 0, "the state file vanished after a kill");
            continue;
        };
        let state = persist::parse(&bytes).unwrap_or_else(|e| panic!("torn state file after kill {survived}: {e}"));
        // Each save adds one prune worth its number, so a whole file is a triangle number.
        let n = state.pruned.len() as u64;
        assert_eq!(state.stats.tokens(), n * (n + 1) / 2, "a file mixing two saves");
        assert!(n >= previous, "a kill lost an earlier save: {n} < {previous}");
        previous = n;
    }
    // A kill between creating the temp file and renaming it leaves `.ses_crash.json.tmp`:
    // one at most, since every save of the session uses the same name under its lock, and
    // the next save takes it over.
    let temps = || {
        std::fs::read_dir(&state_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp"))
            .count()
    };
    assert!(temps() <= 1);
    let status = save_loop(&data, "ses_crash", "c", Some(1)).stdout(Stdio::null()).status().unwrap();
    assert!(status.success());
    assert_eq!(temps(), 0, "a save left its temp file behind");
    eprintln!("{survived} kills survived; the last file held {previous} saves");
}
