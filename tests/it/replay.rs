//! `dcp replay`: it drives the sidecar's own engine, so what it counts is what `dcp serve`
//! would have made the model see.

use dcp::host::paths::Env;
use dcp::host::DataDir;
use dcp::replay::steps::{AgentTools, Timeline};
use dcp::replay::{self, Mode, Options, Session};
use serde_json::{json, Value};

use crate::sidecar::{apply, Sidecar, IMMEDIATE};
use crate::support::{Sandbox, DB_SESSION};

fn options(config_text: &str) -> Options {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("dcp.jsonc"), config_text).unwrap();
    let locations = dcp::config::Locations { global: Some(dir.path().to_path_buf()), config_dir: None, project: None };
    Options {
        modes: Vec::new(),
        ttl: replay::cost::Ttl::Seconds(300),
        context_limit: Some(200_000),
        overhead: replay::OPENCODE_OVERHEAD,
        config: dcp::config::load(&locations).unwrap().config,
    }
}

/// What `dcp serve` makes of each request of the session: the full history as it stood at
/// the request (no `base`, no `have`), with the answer's edits applied and its messages
/// appended, and the agent's discard/extract calls made after it.
fn served(sandbox: &Sandbox, config: &str, messages: &[dcp::session::Message]) -> Vec<Vec<Value>> {
    let mut sidecar = Sidecar::spawn(sandbox, config);
    let timeline = Timeline::new(messages, AgentTools::Offered);
    let mut out = Vec::new();
    for r in timeline.requests() {
        let mut history: Vec<Value> =
            timeline.range(r).map(|i| serde_json::to_value(&*timeline.message_at(i, r.time)).unwrap()).collect();
        let params = json!({"sessionID": DB_SESSION, "parentID": null, "now": r.time,
                            "contextLimit": 200_000, "messages": history.clone()});
        let result = sidecar.result("transform", params);
        apply(&mut history, &result);
        history.extend(result["append"].as_array().unwrap().iter().cloned());
        out.push(history);
        for call in &r.agent_calls {
            sidecar.result("tool", json!({"sessionID": DB_SESSION, "name": call.tool, "args": call.args}));
        }
    }
    sidecar.shutdown();
    out
}

#[test]
fn replay_and_serve_make_byte_identical_rewrites() {
    let s = Sandbox::new();
    // The fixtures hold a state file for this session; both start without one.
    std::fs::remove_dir_all(s.state_dir()).unwrap();
    let loaded = DataDir::new(&s.data(), &Env::default()).load(DB_SESSION).unwrap();
    let session = Session { id: DB_SESSION, parent_id: None, messages: &loaded.messages };
    let replayed = replay::requests(&session, Mode::Dcp, &options(IMMEDIATE)).unwrap();
    let served = served(&s, IMMEDIATE, &loaded.messages);
    assert_eq!(replayed.len(), served.len());
    let mut rewritten = 0;
    for (i, (a, b)) in replayed.iter().zip(&served).enumerate() {
        let a = serde_json::to_string(a).unwrap();
        let b = serde_json::to_string(b).unwrap();
        assert!(a == b, "request {i} differs");
        rewritten += usize::from(a.contains(dcp::strategies::OUTPUT_PLACEHOLDER));
    }
    // The comparison covers requests that were rewritten, not only untouched ones.
    assert!(rewritten > 5, "{rewritten}");
}
