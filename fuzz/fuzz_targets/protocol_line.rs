//! Protocol lines: every line (split on `\n`, decoded as `dcp serve` decodes it) goes through
//! `protocol::decode` and then through an in-memory sidecar `Server`, which must answer every
//! request with one JSON-RPC response and never panic. Each input gets a fresh server and a
//! fresh data dir, so a crash reproduces from its input alone.

#![no_main]

use std::path::PathBuf;

use dcp::host::paths::Env;
use dcp::sidecar::{protocol, Options, Server};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// Where the per-input data dirs go: tmpfs when there is one, so fsyncs cost nothing.
fn scratch() -> PathBuf {
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir() {
        return shm;
    }
    std::env::temp_dir()
}

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir_in(scratch()).expect("a temp dir");
    let home = dir.path().join("home");
    let env = Env { home: Some(home.clone()), xdg_config_home: Some(home.join(".config")), ..Env::default() };
    let options = Options { data_dir: dir.path().join("data"), env, project: None };
    let mut server = Server::new(options, None).expect("a server without config files");
    for raw in data.split(|b| *b == b'\n') {
        // The sidecar answers a line that is not UTF-8 with a parse error before decoding.
        let Ok(line) = std::str::from_utf8(raw) else {
            continue;
        };
        let decoded = protocol::decode(line);
        let Some(response) = server.handle_line(line) else {
            continue;
        };
        let value: Value = serde_json::from_str(&response).expect("a response is JSON");
        assert_eq!(value["jsonrpc"], "2.0", "{response}");
        assert!(value.get("result").is_some() != value.get("error").is_some(), "{response}");
        if let Ok(request) = decoded {
            assert!(request.id.is_some(), "a notification was answered: {response}");
        }
        if server.shutting_down() {
            break;
        }
    }
});
