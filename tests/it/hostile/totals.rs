//! Stored totals cannot wrap: a count past the sane bound is corruption, set aside and told;
//! sums saturate; a forged all-time cache is not believed.

use dcp::state::persist;
use serde_json::{json, Value};

use super::{names, sweep};
use crate::support::{dcp, Sandbox, DB_SESSION};

/// Rewrites the recorded session's state file with `edit` applied to its JSON.
fn forge(s: &Sandbox, edit: impl FnOnce(&mut Value)) {
    let file = s.state_dir().join(format!("{DB_SESSION}.json"));
    let mut value: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    edit(&mut value);
    std::fs::write(&file, serde_json::to_vec(&value).unwrap()).unwrap();
}

/// Sweeps the forged file, and checks it was set aside and told, and the new file's totals
/// are this sweep's alone.
fn assert_set_aside_and_fresh(s: &Sandbox, key: &str) {
    let err = sweep(s);
    assert!(err.contains(key) && err.contains("too large"), "{err}");
    assert!(err.contains("set the corrupt state file aside"), "{err}");
    assert_eq!(names(&s.state_dir()).iter().filter(|n| n.contains(".corrupt-")).count(), 1);
    let file = s.state_dir().join(format!("{DB_SESSION}.json"));
    let state = persist::parse(&std::fs::read(&file).unwrap()).unwrap();
    let tokens: u64 = state.pruned.values().map(|r| r.tokens).sum();
    assert_eq!(state.stats.tokens(), tokens, "the total is not this sweep's");
    assert_eq!(state.stats.tools(), state.pruned.len() as u64);
}

#[test]
fn a_state_file_holding_1e30_tokens_is_set_aside_not_wrapped_by_a_prune() {
    let s = Sandbox::new();
    forge(&s, |v| v["stats"]["totalPruneTokens"] = json!(1e30));
    assert_set_aside_and_fresh(&s, "stats.totalPruneTokens");
}

#[test]
fn a_state_file_holding_u64_max_tools_is_set_aside_not_wrapped_to_two() {
    let s = Sandbox::new();
    forge(&s, |v| v["dcp"]["byStrategy"]["sweep"] = json!({"tokens": 1, "tools": u64::MAX}));
    assert_set_aside_and_fresh(&s, "dcp.byStrategy.sweep.tools");
}

#[test]
fn a_forged_all_time_cache_does_not_show_wrapped_or_impossible_totals() {
    let s = Sandbox::new();
    let honest = dcp(&s, &["stats", "--json"]);
    let honest: Value = serde_json::from_slice(&honest.stdout).unwrap();
    let cache_dir = s.dir.path().join("home/.cache/dcp");
    let cache = cache_dir.join(&names(&cache_dir)[0]);
    let text = std::fs::read_to_string(&cache).unwrap();
    // Every line keeps the size and time its file has, so the forged counts are believed
    // unless they are checked.
    let forged: Vec<String> = text
        .lines()
        .map(|line| {
            let mut fields: Vec<&str> = line.split('\t').collect();
            if fields.len() == 6 {
                fields[4] = "9223372036854775807";
                fields[5] = "18446744073709551614";
            }
            fields.join("\t")
        })
        .collect();
    std::fs::write(&cache, forged.join("\n") + "\n").unwrap();
    let out = dcp(&s, &["stats", "--json"]);
    let now: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(now["all_time"]["tokens_saved"], honest["all_time"]["tokens_saved"], "{now}");
    assert_eq!(now["all_time"]["tools_pruned"], honest["all_time"]["tools_pruned"], "{now}");
    let text = String::from_utf8_lossy(&dcp(&s, &["stats"]).stdout).into_owned();
    assert!(!text.contains("18,446,744"), "{text}");
}
