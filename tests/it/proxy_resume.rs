//! The proxy's fast path against its reference: a conversation whose bodies are read only
//! past the bytes they share with the last one, and written upstream as pieces of the
//! client's buffer, sends the upstream the same bytes as one whose every body is read whole.

use bytes::Bytes;
use dcp::host::paths::Env;
use dcp::proxy::conversation::{Conversations, Reading};
use dcp::proxy::convert::Api;
use dcp::proxy::{forward, Engine, Shared};

use crate::proxy::as_chat;
use crate::support::Sandbox;

/// A proxy's shared state, in-process, reading bodies as `reading` says, with `config`.
fn shared(sandbox: &Sandbox, config: &str, reading: Reading) -> Shared {
    shared_with(sandbox, config, Conversations::reading(reading), "http://127.0.0.1:9")
}

/// A proxy's shared state, in-process, with `config`, `conversations` and `upstream`.
pub fn shared_with(sandbox: &Sandbox, config: &str, conversations: Conversations, upstream: &str) -> Shared {
    let home = sandbox.dir.path().join("home");
    std::fs::create_dir_all(home.join(".config/opencode")).unwrap();
    std::fs::write(home.join(".config/opencode/dcp.jsonc"), config).unwrap();
    let env = Env { home: Some(home.clone()), xdg_config_home: Some(home.join(".config")), ..Env::default() };
    let options = dcp::sidecar::ServeOptions { data_dir: sandbox.data(), env, project: None };
    let upstreams = forward::Upstreams::new(Some(upstream), &Default::default()).unwrap();
    Shared {
        engine: Engine::start(dcp::proxy::server(&options, None).unwrap()),
        conversations,
        upstreams,
        client: forward::client(None).unwrap(),
        access: dcp::proxy::access::Access::Local,
        restore_key: String::new(),
    }
}

/// The body the upstream gets for `bytes`: the pruned pieces joined, or the client's bytes.
async fn sent(shared: &Shared, bytes: &Bytes) -> (Vec<u8>, bool) {
    let (parts, ()) = hyper::Request::post("/v1/chat/completions").body(()).unwrap().into_parts();
    match dcp::proxy::prune(shared, Api::Chat, &parts, bytes).await.unwrap() {
        Some(pieces) => (pieces.concat(), true),
        None => (bytes.to_vec(), false),
    }
}

fn same_bytes_both_ways(config: &str) -> usize {
    let session = dcp_testkit::gen::session(&dcp_testkit::gen::SessionSpec { messages: 200, steps: 40, seed: 3 });
    let (a, b) = (Sandbox::new(), Sandbox::new());
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (fast, whole) =
        runtime.block_on(async { (shared(&a, config, Reading::PastKnown), shared(&b, config, Reading::Whole)) });
    let value = |m: &_| serde_json::to_value(m).unwrap();
    let mut messages: Vec<serde_json::Value> = session.messages.iter().map(value).collect();
    let mut pruned = 0;
    for step in 0..=session.steps.len() {
        if step > 0 {
            messages.extend(session.steps[step - 1].iter().map(value));
        }
        let bytes = Bytes::from(serde_json::to_vec_pretty(&as_chat(&messages)).unwrap());
        let (got, want) = runtime.block_on(async { (sent(&fast, &bytes).await, sent(&whole, &bytes).await) });
        assert!(got == want, "step {step}: the body read past the last one went upstream otherwise ({config})");
        pruned += usize::from(got.1);
    }
    assert_eq!(fast.conversations.resumed(), session.steps.len(), "every body after the first was read past the last");
    assert_eq!(whole.conversations.resumed(), 0);
    for shared in [fast, whole] {
        let Shared { engine, .. } = shared;
        engine.stop();
    }
    pruned
}

#[test]
fn a_conversation_read_past_its_last_body_sends_upstream_the_bytes_a_whole_read_sends() {
    let pruned = same_bytes_both_ways(r#"{"rewrite": {"mode": "immediate"}}"#);
    assert!(pruned >= 20, "most requests were rewritten: {pruned}");
    same_bytes_both_ways("{}");
}
