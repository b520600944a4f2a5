//! Where a long session's memory goes in `dcp serve`, counted allocation by allocation.
//!
//! `cargo bench --bench mirror -- 20000` generates the bench's session of that many messages
//! (`dcp-testkit`, seed 1), sends it as one `transform` line to a `dcp::sidecar::Server` in
//! this process, read as a stream as `dcp serve` reads it, counts ahead as an idle sidecar
//! does, then deletes the session. A counting global allocator keeps the live heap as glibc
//! holds it (each allocation its size plus 8 bytes, rounded up to 16, at least 32), and
//! `mallinfo2` says what glibc has in use and free; between the steps the program prints
//! both (less the line, which a real sidecar never holds whole), then
//! what the mirror's messages take by kind of part, from a walk of their values that applies
//! the same rule to each allocation a `Node` makes. BENCHMARKS.md (issue 17, part D) has a run.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::BufReader;
use std::sync::atomic::{AtomicUsize, Ordering};

use dcp::session::{Kind, Message, Node};
use dcp::sidecar::stream::{read_rest, Streamed};
use serde_json::json;

/// Live bytes as glibc holds them, and live allocations.
static LIVE: AtomicUsize = AtomicUsize::new(0);
static COUNT: AtomicUsize = AtomicUsize::new(0);
/// The most `LIVE` was since the last report.
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grow(bytes: usize) {
    let live = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

/// What glibc takes for an allocation of `size` bytes.
fn chunk(size: usize) -> usize {
    ((size + 8 + 15) & !15).max(32)
}

struct Counting;

// SAFETY: every call is passed to the system allocator unchanged; the counters only add up.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout is passed on as it is.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grow(chunk(layout.size()));
            COUNT.fetch_add(1, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        // SAFETY: `p` was allocated by `alloc` with this layout.
        unsafe { System.dealloc(p, layout) };
        LIVE.fetch_sub(chunk(layout.size()), Ordering::Relaxed);
        COUNT.fetch_sub(1, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, size: usize) -> *mut u8 {
        // SAFETY: as for `alloc` and `dealloc`.
        let q = unsafe { System.realloc(p, layout, size) };
        if !q.is_null() {
            LIVE.fetch_sub(chunk(layout.size()), Ordering::Relaxed);
            grow(chunk(size));
        }
        q
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const MB: f64 = 1e6;

/// glibc's bytes in use, mapped blocks included, if this is glibc.
fn glibc() -> f64 {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallinfo2 only reads glibc's counters.
    let used = unsafe { libc::mallinfo2() }.uordblks as f64 + unsafe { libc::mallinfo2() }.hblkhd as f64;
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let used = f64::NAN;
    used
}

/// Prints the live heap less `line` bytes (the request held to be sent), its peak since the
/// last report, and what glibc says.
fn report(what: &str, line: usize) {
    let live = LIVE.load(Ordering::Relaxed).saturating_sub(line) as f64 / MB;
    let peak = PEAK.swap(0, Ordering::Relaxed).saturating_sub(line) as f64 / MB;
    let count = COUNT.load(Ordering::Relaxed);
    let used = (glibc() - line as f64) / MB;
    println!("| {what} | {live:.1} | {peak:.1} | {count} | {used:.1} |");
}

/// The heap a node takes, as glibc holds it, and its allocations.
fn heap(node: &Node) -> (usize, usize) {
    let string = |s: &str| if s.len() > 22 { (chunk(s.len()), 1) } else { (0, 0) };
    let add = |a: (usize, usize), b: (usize, usize)| (a.0 + b.0, a.1 + b.1);
    match node.kind() {
        Kind::String(s) => string(s),
        Kind::Array([]) => (0, 0),
        Kind::Array(items) => items.iter().map(heap).fold((chunk(24 * items.len()), 1), add),
        Kind::Object(map) if map.is_empty() => (0, 0),
        Kind::Object(map) => map.iter().map(|(k, v)| add(string(k), heap(v))).fold((chunk(48 * map.len()), 1), add),
        _ => (0, 0),
    }
}

/// What the mirror holds of a part: a step, a patch or a snapshot only as its id.
fn held(part: &Node) -> Node {
    let mut part = part.clone();
    dcp::session::slim::make_opaque(&mut part);
    part
}

/// What the mirror will hold of the wire messages `messages` (each `{info, parts}`), by kind
/// of part: bytes, allocations, how many; as a table.
fn breakdown(messages: &[Node]) -> String {
    let mut rows: Vec<(&str, usize, usize, usize)> = Vec::new();
    let mut add = |what: &'static str, (bytes, allocations): (usize, usize)| match rows.iter_mut().find(|r| r.0 == what)
    {
        Some(r) => (r.1, r.2, r.3) = (r.1 + bytes, r.2 + allocations, r.3 + 1),
        None => rows.push((what, bytes, allocations, 1)),
    };
    add("the list of messages", (chunk(std::mem::size_of::<Message>() * messages.len()), 1));
    for m in messages {
        add("infos", m.get("info").map_or((0, 0), heap));
        let parts = m["parts"].as_array().unwrap_or_default();
        if !parts.is_empty() {
            add("lists of parts", (chunk(24 * parts.len()), 1));
        }
        for part in parts.iter().map(held) {
            let kind = match part.get("type").and_then(Node::as_str) {
                Some("tool") => "tool parts",
                Some("text" | "reasoning") => "text and reasoning parts",
                _ if part.is_string() => "step, patch and snapshot parts (their ids)",
                _ => "other parts",
            };
            add(kind, heap(&part));
        }
    }
    let total: usize = rows.iter().map(|r| r.1).sum();
    let mut out = String::from("| what | MB | allocations | how many | bytes each |\n|---|---:|---:|---:|---:|\n");
    for (what, bytes, allocations, n) in rows {
        out.push_str(&format!("| {what} | {:.1} | {allocations} | {n} | {} |\n", bytes as f64 / MB, bytes / n.max(1)));
    }
    out.push_str(&format!("| the mirror's messages | {:.1} | | | |\n", total as f64 / MB));
    out
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let size: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(20_000);
    let dir = tempfile::tempdir()?;
    let home = dir.path().join("home");
    let env = dcp::host::paths::Env {
        home: Some(home.clone()),
        xdg_config_home: Some(home.join(".config")),
        ..Default::default()
    };
    let options = dcp::sidecar::ServeOptions { data_dir: dir.path().join("data"), env, project: None };
    let mut server = dcp::sidecar::Server::new(options, None)?;
    let (sid, line) = {
        let session = dcp_testkit::gen::session(&dcp_testkit::gen::SessionSpec { messages: size, steps: 0, seed: 1 });
        let params = json!({"sessionID": session.session_id, "messages": session.messages});
        (
            session.session_id,
            serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": "transform", "params": params}))?,
        )
    };
    server.handle_line(
        &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocol": 2}}).to_string(),
    );
    println!("{size} messages, a line of {:.1} MB\n", line.len() as f64 / MB);
    let held = chunk(line.capacity());
    println!("| after | live heap, MB | its peak since the row before, MB | allocations | glibc in use, MB |");
    println!("|---|---:|---:|---:|---:|");
    PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
    report("initialize", held);
    let streamed = read_rest(Vec::new(), &mut BufReader::new(&line[..]), usize::MAX)?;
    let Streamed::Request(request) = streamed else { return Err("the line is no request".into()) };
    let request = (*request).map_err(|(_, e)| e.message)?;
    report("the line read as a stream, its messages slimmed", held);
    drop(line);
    let table = breakdown(request.messages.as_deref().unwrap_or_default());
    let answer = server.handle_decoded(Ok(request)).unwrap_or_default();
    server.precount(|| true);
    report("the first transform answered, counted ahead", 0);
    drop(answer);
    let deleted = json!({"type": "session.deleted", "properties": {"info": {"id": sid}}});
    server.handle_line(&json!({"jsonrpc": "2.0", "method": "event", "params": deleted}).to_string());
    report("the session deleted (its state and token cache stay in the store)", 0);
    println!("\nWhat the mirror holds of the messages, walked:\n\n{table}");
    Ok(())
}
