//! Test tooling for dcp, kept out of the shipped binary.
//!
//! [`gen`] makes deterministic synthetic sessions and state files for the benchmarks and
//! tests; [`save_loop`] saves one session's state again and again, for the crash and
//! concurrency tests to kill and race; [`import`] turns other harnesses' recorded sessions
//! into OpenCode databases (the real-session corpus, `bench/real/`); [`cli`] is the
//! `dcp-testkit` command over them
//! (`cargo run -p dcp-testkit -- gen session …`). The tests and benches use this crate as a
//! dev-dependency.

pub mod cli;
pub mod gen;
pub mod import;

use std::path::Path;

use dcp::host::paths;
use dcp::state::store::SessionStore;
use dcp::state::{Action, PruneRecord, Strategy};
use dcp::tokens::EstimatorChoice;

/// Saves session `id` of the data dir `data_dir` `count` times, adding prune `<prefix><i>`
/// worth `i` tokens before each save, `i` going on from the prunes already saved, so every
/// version on disk says which save wrote it.
pub fn save_loop(data_dir: &Path, id: &str, count: u64, prefix: &str) -> anyhow::Result<()> {
    let mut store = SessionStore::new(&paths::state_dir(data_dir), EstimatorChoice::Auto);
    let slot = store.slot(id)?;
    let first: u64 = (1..).find(|i| !slot.state().pruned.contains_key(&format!("{prefix}{i}"))).unwrap_or(1);
    for i in first..first.saturating_add(count) {
        let slot = store.slot(id)?;
        let record = PruneRecord {
            strategy: Strategy::Sweep,
            action: Action::Output,
            tokens: i,
            tool: String::new(),
            applied: true,
        };
        slot.record(&format!("{prefix}{i}"), record);
        store.save_now(id)?;
    }
    Ok(())
}
