//! Which conversation a proxied request is when its client sends no id: conversations that
//! open alike (the same system prompt and first message) and number their calls alike
//! (`call_0`, `call_1`, as many OpenAI-compatible servers do) never share a state, across a
//! restart too, and each one's rewrites are those of its solo run.

use std::path::Path;

use serde_json::{json, Value};

use crate::proxy::{post_bytes, proxied_outputs, ProxyProcess, Recorder};
use crate::restore::is_pruned;

/// The opening every conversation here shares.
fn opening() -> Vec<Value> {
    vec![
        json!({"role": "system", "content": "You are a coding agent."}),
        json!({"role": "user", "content": "Fix the bug."}),
    ]
}

/// A step of a Chat conversation: call `call_<n>` of `tool` with `args`, and its result.
fn step(n: usize, tool: &str, args: Value, output: &str) -> [Value; 2] {
    let call = json!({"id": format!("call_{n}"), "type": "function",
        "function": {"name": tool, "arguments": args.to_string()}});
    [
        json!({"role": "assistant", "content": null, "tool_calls": [call]}),
        json!({"role": "tool", "tool_call_id": format!("call_{n}"), "content": output}),
    ]
}

fn request(messages: &[Value]) -> Value {
    json!({"model": "m", "stream": true, "messages": messages, "tools": [{"type": "function", "function": {"name": "read"}}]})
}

/// A proxy in front of `upstream` keeping its state under `dir`, with `config`.
fn proxy(dir: &Path, upstream: &Recorder, config: &str) -> ProxyProcess {
    std::fs::create_dir_all(dir.join("config/opencode")).unwrap();
    std::fs::write(dir.join("config/opencode/dcp.jsonc"), config).unwrap();
    let env =
        [("HOME", dir.join("home")), ("XDG_CONFIG_HOME", dir.join("config")), ("XDG_DATA_HOME", dir.join("data"))];
    ProxyProcess::start_logging(&format!("http://127.0.0.1:{}", upstream.port), env, &dir.join("stderr"))
}

/// Sends `messages` as a Chat request; returns each output the upstream received, by call id.
fn send(proxy: &ProxyProcess, upstream: &Recorder, messages: &[Value]) -> Vec<(String, String)> {
    let answer = post_bytes(proxy.port, "/v1/chat/completions", request(messages).to_string().as_bytes());
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    proxied_outputs(&upstream.last())
}

/// Output `id` of `outputs`, its first 60 characters when it is not `expected`.
fn output_of(outputs: &[(String, String)], id: &str, expected: &str) -> Result<(), String> {
    let output = &outputs.iter().find(|(call, _)| call == id).unwrap().1;
    (output == expected).then_some(()).ok_or_else(|| output.chars().take(60).collect())
}

/// Whether call `id`'s output was pruned (its placeholder names a restore handle); else its
/// first characters.
fn pruned_of(outputs: &[(String, String)], id: &str) -> Result<(), String> {
    let output = &outputs.iter().find(|(call, _)| call == id).unwrap().1;
    is_pruned(Some(output)).then_some(()).ok_or_else(|| output.chars().take(60).collect())
}

#[test]
fn conversations_that_share_only_their_opening_never_share_their_prunes_across_a_restart() {
    let upstream = Recorder::start();
    let dir = tempfile::tempdir().unwrap();
    let config = r#"{"rewrite": {"mode": "immediate"}}"#;
    let other = "fn other() {}\n".repeat(200);
    let main = "fn main() {}\n".repeat(200);
    let read = |path: &str| json!({"filePath": path});
    let x: Vec<Value> = [opening(), step(0, "read", read("/repo/other.rs"), &other).to_vec()].concat();
    let y1: Vec<Value> = [opening(), step(0, "read", read("/repo/main.rs"), &main).to_vec()].concat();
    let y2: Vec<Value> = [y1.clone(), step(1, "read", read("/repo/main.rs"), &main).to_vec()].concat();
    let proxy1 = proxy(dir.path(), &upstream, config);
    assert_eq!(output_of(&send(&proxy1, &upstream, &x), "call_0", &other), Ok(()));
    send(&proxy1, &upstream, &y1);
    let y_first = pruned_of(&send(&proxy1, &upstream, &y2), "call_0");
    assert_eq!(y_first, Ok(()), "Y's first read is deduplicated");
    let x2: Vec<Value> = [x.clone(), step(1, "read", read("/repo/lib.rs"), "fn lib() {}").to_vec()].concat();
    let outputs = send(&proxy1, &upstream, &x2);
    assert_eq!(output_of(&outputs, "call_0", &other), Ok(()), "Y's prune of its call_0 reached X's call_0");
    assert!(proxy1.stop());
    let proxy2 = proxy(dir.path(), &upstream, config);
    let x3: Vec<Value> = [x2, step(2, "read", read("/repo/mod.rs"), "mod a;").to_vec()].concat();
    assert_eq!(output_of(&send(&proxy2, &upstream, &x3), "call_0", &other), Ok(()), "after a restart");
    let y3: Vec<Value> = [y2, step(2, "read", read("/repo/a.rs"), "a").to_vec()].concat();
    let outputs = send(&proxy2, &upstream, &y3);
    let y_first = pruned_of(&outputs, "call_0");
    assert_eq!(y_first, Ok(()), "Y finds its own state again after a restart");
    assert_eq!(output_of(&outputs, "call_1", &main), Ok(()));
    assert!(proxy2.stop());
}

/// Conversation `name`'s requests: 20 steps of reads and commands on files of its own, with
/// a turn answered and a second prompt halfway; every call numbered from `call_0`.
fn conversation(name: &str) -> Vec<Vec<Value>> {
    let mut messages = opening();
    let mut requests = Vec::new();
    for n in 0..20 {
        let output = format!("{name} {n}: a line of output\n").repeat(150 + 40 * (n % 5));
        let (tool, args) = match n % 3 {
            2 => ("bash", json!({"command": format!("make test-{name}")})),
            _ => ("read", json!({"filePath": format!("/{name}/f{}.rs", n % 4)})),
        };
        messages.extend(step(n, tool, args, &output));
        if n == 9 {
            messages.push(json!({"role": "assistant", "content": "Found it."}));
            messages.push(json!({"role": "user", "content": "Now fix it."}));
        }
        requests.push(messages.clone());
    }
    requests
}

/// The conversation a Chat body is of, by the files its calls name, and how many messages
/// it has.
fn whose(body: &Value) -> (String, usize) {
    let messages = body["messages"].as_array().unwrap();
    let call = messages.iter().find_map(|m| m["tool_calls"][0]["function"]["arguments"].as_str()).unwrap_or("");
    let name = ["x", "y", "z"].iter().find(|n| call.contains(&format!("/{n}/")) || call.contains(&format!("test-{n}")));
    (name.unwrap().to_string(), messages.len())
}

/// The bodies the upstream received, by conversation and length.
fn received(upstream: &Recorder) -> std::collections::BTreeMap<(String, usize), Vec<u8>> {
    let bodies = upstream.bodies().into_iter();
    bodies.map(|b| (whose(&serde_json::from_slice(&b).unwrap()), b)).collect()
}

#[test]
fn three_conversations_that_open_alike_run_together_each_rewrite_as_they_do_alone() {
    let names = ["x", "y", "z"];
    let mut solo = std::collections::BTreeMap::new();
    for name in names {
        let upstream = Recorder::start();
        let dir = tempfile::tempdir().unwrap();
        let proxy = proxy(dir.path(), &upstream, "{}");
        for messages in conversation(name) {
            send(&proxy, &upstream, &messages);
        }
        assert!(proxy.stop());
        solo.extend(received(&upstream));
    }
    let rewritten = solo.iter().filter(|((name, _), body)| {
        let sent = request(
            &conversation(name)
                .into_iter()
                .find(|m| m.len() == whose(&serde_json::from_slice(body).unwrap()).1)
                .unwrap(),
        );
        serde_json::from_slice::<Value>(body).unwrap() != sent
    });
    assert!(rewritten.count() >= 10, "the conversations are rewritten often enough to tell");
    let upstream = Recorder::start();
    let dir = tempfile::tempdir().unwrap();
    let proxy = std::sync::Arc::new(proxy(dir.path(), &upstream, "{}"));
    let threads: Vec<_> =
        names
            .iter()
            .map(|name| {
                let (proxy, requests) = (proxy.clone(), conversation(name));
                std::thread::spawn(move || {
                    for messages in requests {
                        let body = request(&messages).to_string();
                        assert!(
                            post_bytes(proxy.port, "/v1/chat/completions", body.as_bytes()).starts_with("HTTP/1.1 200")
                        );
                    }
                })
            })
            .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let together = received(&upstream);
    assert_eq!(together.len(), 60);
    let differ: Vec<&(String, usize)> = solo.keys().filter(|k| together.get(*k) != solo.get(*k)).collect();
    assert!(differ.is_empty(), "{} of 60 requests were rewritten otherwise than alone: {differ:?}", differ.len());
}
