//! Deterministic synthetic OpenCode sessions and dcp state files, for benchmarks and tests.
//!
//! Measuring dcp on a 20,000-message session needs such a session, and recording one from a
//! real OpenCode run is neither practical nor reproducible. This module builds one instead, in
//! the exact shape the `experimental.chat.messages.transform` hook receives (`{info, parts}`
//! messages, copied field for field from what OpenCode 1.18 stores; see `fixtures/data/` and
//! `shared/opencode-reference/`), with the mix that gives pruning work to do: files read again
//! and again, failed calls, writes read back, bash runs, and tool outputs from 200 B to 50 KB
//! that look like code and logs, so the tokenizer does real work. It also writes state files in
//! dcp's own layout, for the all-time stats. Everything comes from a small splitmix64 generator
//! and integer arithmetic only, so the same seed gives byte-identical output on every machine.

use std::io::Write;
use std::path::Path;

use serde::Serialize;
use serde_json::{json, Value};

use crate::session::Message;
use crate::state::{persist, Action, PruneRecord, SessionState, Strategy};

/// splitmix64: tiny, fast, and good enough for synthetic data. Not for anything secret.
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n`, or 0 when `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A number in `lo..=hi` (`lo` when `hi < lo`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }

    /// True `percent` times out of 100.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// One of `items`, uniformly; `None` only for an empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        items.get(self.below(items.len() as u64) as usize)
    }

    /// The index chosen by `weights` (any scale); 0 for empty or all-zero weights.
    pub fn weighted(&mut self, weights: &[u64]) -> usize {
        let total: u64 = weights.iter().sum();
        let mut roll = self.below(total);
        for (i, w) in weights.iter().enumerate() {
            if roll < *w {
                return i;
            }
            roll -= w;
        }
        0
    }

    /// A word of `WORDS`-like lists, never failing: the lists below are never empty.
    fn word(&mut self, items: &[&'static str]) -> &'static str {
        self.pick(items).copied().unwrap_or("x")
    }
}

/// Smallest and largest tool output the generator aims for, in bytes.
pub const MIN_OUTPUT: usize = 200;
pub const MAX_OUTPUT: usize = 50_000;

/// Output sizes: most small, some large. Eight octaves from 200 B to 49 KB, weighted per mille
/// (median about 1 KB, mean about 3.7 KB, 2.5% above 25 KB).
const SIZE_OCTAVES: [(u64, u64); 8] = [
    (200, 400),
    (400, 800),
    (800, 1_600),
    (1_600, 3_200),
    (3_200, 6_400),
    (6_400, 12_800),
    (12_800, 25_600),
    (25_600, 49_000),
];
const SIZE_WEIGHTS: [u64; 8] = [240, 220, 170, 130, 100, 70, 45, 25];

fn skewed_size(rng: &mut Rng) -> usize {
    let (lo, hi) = SIZE_OCTAVES[rng.weighted(&SIZE_WEIGHTS)];
    rng.range(lo, hi - 1) as usize
}

#[rustfmt::skip]
const NOUNS: &[&str] = &[
    "config", "parser", "session", "message", "token", "buffer", "handle", "request", "response", "state", "cache",
    "index", "value", "error", "result", "path", "file", "entry", "record", "stream", "writer", "reader", "queue",
    "worker", "client", "server", "budget", "window", "prefix", "offset", "limit", "count", "total", "batch", "chunk",
    "frame", "header", "payload", "schema", "field", "column", "row", "table", "query", "filter", "policy",
    "strategy", "history", "mirror", "manager", "context", "report", "layout", "journal", "snapshot", "digest",
    "ledger", "account", "invoice", "order", "cart", "price", "amount", "currency", "user", "profile", "token_map",
    "route", "handler", "middleware", "router", "socket", "channel", "sender", "receiver", "timer", "deadline",
    "retry", "backoff", "span", "trace", "metric", "counter", "gauge", "sample", "bucket", "shard", "replica",
    "leader", "follower", "term", "vote", "lease", "lock", "guard", "mutex", "pool", "connection", "cursor", "page",
    "node", "edge", "graph", "tree", "leaf", "branch", "commit", "diff", "patch", "hunk", "blob", "manifest",
    "package", "module", "target", "profile", "fixture", "scenario", "option", "flag", "argument", "command",
];

#[rustfmt::skip]
const VERBS: &[&str] = &[
    "load", "save", "parse", "render", "encode", "decode", "merge", "split", "apply", "open", "close", "flush",
    "sync", "spawn", "join", "retry", "build", "fetch", "store", "update", "insert", "remove", "resolve", "validate",
    "normalize", "collect", "compute", "estimate", "prune", "rewrite", "refresh", "restore", "checkpoint", "replay",
    "compact", "schedule", "dispatch", "handle", "emit", "format", "scan", "read", "write", "count", "sort", "dedupe",
];

#[rustfmt::skip]
const PROSE: &[&str] = &[
    "the", "a", "this", "that", "it", "we", "should", "must", "can", "never", "always", "when", "before", "after",
    "because", "unless", "until", "while", "each", "every", "first", "last", "next", "previous", "same", "other",
    "new", "old", "empty", "missing", "stale", "valid", "invalid", "pending", "finished", "slow", "fast", "small",
    "large", "request", "session", "file", "test", "value", "error", "result", "cache", "output", "input", "line",
    "function", "module", "call", "path", "state", "config", "record", "query", "row", "is", "are", "was", "returns",
    "reads", "writes", "keeps", "drops", "checks", "counts", "fails", "passes", "handles", "ignores", "retries",
    "into", "from", "with", "without", "over", "under", "on", "off", "in", "out", "and", "or", "but", "not", "only",
    "then", "so", "once", "twice", "again", "still", "already", "instead", "per", "by", "for", "of", "to", "at",
];

/// The main language of a generated project.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lang {
    Rust,
    TypeScript,
    Python,
    Markdown,
}

impl Lang {
    fn ext(self) -> &'static str {
        match self {
            Lang::Rust => "rs",
            Lang::TypeScript => "ts",
            Lang::Python => "py",
            Lang::Markdown => "md",
        }
    }
}

/// Code line templates: `$n` a snake_case name, `$C` a CamelCase name, `$v` a verb, `$N` an
/// UPPER_CASE name, `$d` a number, `$s` a sentence, `$S` a capitalised sentence, `$l` a
/// letter. `+` at the start opens a block, `-` closes one.
const RUST_TOP: &[&str] = &[
    "use crate::$n::{$C, $C};",
    "use std::collections::HashMap;",
    "+pub fn $v_$n($n: &$C, $n: usize) -> Result<$C> {",
    "+impl $C {",
    "#[derive(Debug, Clone, PartialEq)]",
    "+pub struct $C {",
    "/// $S.",
    "const $N_$N: usize = $d;",
    "",
    "+fn $v($n: &mut Vec<$C>) {",
];
const RUST_BODY: &[&str] = &[
    "let $n = $n.$v_$n($n, $d)?;",
    "+if $n.$v() > $d {",
    "+for $n in $n.iter().filter(|$l| $l.$n != 0) {",
    "+match $n.$v() {",
    "return Err(anyhow!(\"$s\"));",
    "tracing::debug!($n = $n.len(), \"$s\");",
    "$n.insert($n.clone(), $d);",
    "// $S.",
    "let mut $n = $C::with_capacity($d);",
    "$n.$v(&$n)?;",
    "-}",
    "-}",
    "Ok($C::$v($n))",
    "pub $n: Option<$C>,",
];
const TS_TOP: &[&str] = &[
    "import { $C, $v$C } from \"./$n\";",
    "+export function $v$C($n: $C, $n: number): $C {",
    "+export class $C {",
    "/** $S. */",
    "const $N_$N = $d;",
    "",
    "+export interface $C {",
    "+export async function $v$C($n: string): Promise<$C> {",
];
const TS_BODY: &[&str] = &[
    "const $n = $n.$v$C($n, $d);",
    "+if ($n.length > $d) {",
    "+for (const $n of $n) {",
    "throw new Error(\"$s\");",
    "this.$n.set($n.id, $n);",
    "return $n;",
    "-}",
    "-}",
    "// $S.",
    "await this.$n.$v({ $n, $n: $d });",
    "$n: $C | undefined;",
    "logger.debug(`$s ${$n}`);",
];
const PY_TOP: &[&str] = &[
    "import $n",
    "from $n.$n import $C, $n",
    "+def $v_$n($n, $n=$d):",
    "+class $C($C):",
    "# $S.",
    "$N_$N = $d",
    "",
    "+async def $v_$n(self, $n):",
];
const PY_BODY: &[&str] = &[
    "$n = $n.$v_$n($n, $d)",
    "+if $n > $d:",
    "+for $n in $n:",
    "raise ValueError(\"$s\")",
    "return $n",
    "logger.debug(\"$s %s\", $n)",
    "# $S.",
    "self.$n[$n] = $d",
    "-pass",
    "-return None",
    "$n = [$l for $l in $n if $l.$n]",
];
const MD_LINES: &[&str] = &["# $C $n", "## $C", "- $S.", "- `$n`: $s.", "$S. $S.", "", "1. $S.", "> $S."];

/// Lines of log and tool output for bash commands.
const BUILD_LOG: &[&str] = &[
    "   Compiling $n v0.$d.$d",
    "warning: unused variable: `$n`",
    "  --> src/$n.rs:$d:$d",
    "   |",
    "$d |     let $n = $n.$v();",
    "   = note: `#[warn(unused_variables)]` on by default",
    "error[E0308]: mismatched types: expected `$C`, found `$C`",
    "    Finished `dev` profile [unoptimized + debuginfo] target(s) in $d.$ds",
];
const TEST_LOG: &[&str] = &[
    "test $n::tests::$v_$n ... ok",
    "test $n::tests::$v_$n_$n ... ok",
    "test $n::$v_$n ... FAILED",
    "running $d tests",
    "test result: ok. $d passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.$ds",
    "---- $n::tests::$v_$n stdout ----",
    "thread '$n::tests::$v' panicked at src/$n.rs:$d:$d:",
    "assertion `left == right` failed: $s",
];
const APP_LOG: &[&str] = &[
    "2026-09-21T10:$d:$dZ  INFO $n::$n: $s",
    "2026-09-21T10:$d:$dZ DEBUG $n::$v: $n=$d $n=$d",
    "2026-09-21T10:$d:$dZ  WARN $n: $s ($n $d)",
    "2026-09-21T10:$d:$dZ ERROR $n::$n: $s: $C($d)",
];
const GIT_LOG: &[&str] = &[
    " M src/$n.rs",
    "?? src/$n_$n.rs",
    " M tests/$n.rs",
    "$d files changed, $d insertions(+), $d deletions(-)",
    " src/$n/$n.rs | $d ++++---",
];
const LS_LOG: &[&str] = &[
    "-rw-r--r--  1 dev dev  $d Sep 21 10:$d $n.rs",
    "drwxr-xr-x  $d dev dev  4096 Sep 21 10:$d $n",
    "-rw-r--r--  1 dev dev  $d Sep 20 18:$d $n_$n.ts",
];

fn capitalise(word: &str) -> String {
    let mut chars = word.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn camel(rng: &mut Rng) -> String {
    let mut out = String::new();
    for part in rng.word(NOUNS).split('_') {
        out.push_str(&capitalise(part));
    }
    if rng.percent(40) {
        out.push_str(&capitalise(rng.word(NOUNS).split('_').next().unwrap_or("x")));
    }
    out
}

fn sentence(rng: &mut Rng, words: u64) -> String {
    let mut out = String::new();
    for i in 0..words {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(rng.word(PROSE));
    }
    out
}

/// Expands the `$` placeholders of `template` (see [`RUST_TOP`]).
fn expand(rng: &mut Rng, template: &str, out: &mut String) {
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        match chars.peek().copied() {
            Some('n') => {
                chars.next();
                out.push_str(rng.word(NOUNS));
            }
            Some('C') => {
                chars.next();
                out.push_str(&camel(rng));
            }
            Some('v') => {
                chars.next();
                out.push_str(rng.word(VERBS));
            }
            Some('N') => {
                chars.next();
                out.push_str(&rng.word(NOUNS).to_ascii_uppercase());
            }
            Some('d') => {
                chars.next();
                let n = match rng.below(3) {
                    0 => rng.below(10),
                    1 => rng.below(100),
                    _ => rng.below(10_000),
                };
                out.push_str(&n.to_string());
            }
            Some('s') => {
                chars.next();
                let n = rng.range(4, 12);
                out.push_str(&sentence(rng, n));
            }
            Some('S') => {
                chars.next();
                let n = rng.range(5, 16);
                out.push_str(&capitalise(&sentence(rng, n)));
            }
            Some('l') => {
                chars.next();
                out.push(char::from(b'a' + rng.below(26) as u8));
            }
            _ => out.push('$'),
        }
    }
}

/// Source text of `lang`, at least `size` bytes, in whole lines.
fn source_text(rng: &mut Rng, lang: Lang, size: usize) -> String {
    let (top, body) = match lang {
        Lang::Rust => (RUST_TOP, RUST_BODY),
        Lang::TypeScript => (TS_TOP, TS_BODY),
        Lang::Python => (PY_TOP, PY_BODY),
        Lang::Markdown => (MD_LINES, MD_LINES),
    };
    let indent = "    ";
    let mut out = String::with_capacity(size + 128);
    let mut depth: usize = 0;
    let mut line = String::new();
    while out.len() < size {
        let template = if depth == 0 { rng.word(top) } else { rng.word(body) };
        line.clear();
        let (opens, closes, text) = match template.as_bytes().first() {
            Some(b'+') => (true, false, &template[1..]),
            Some(b'-') => (false, true, &template[1..]),
            _ => (false, false, template),
        };
        if closes {
            depth = depth.saturating_sub(1);
        }
        if lang != Lang::Markdown {
            for _ in 0..depth {
                line.push_str(indent);
            }
        }
        expand(rng, text, &mut line);
        out.push_str(&line);
        out.push('\n');
        if opens && depth < 4 {
            depth += 1;
        }
        // Blocks do not run forever: close one now and then.
        if depth > 0 && !opens && rng.percent(12) {
            depth -= 1;
            if lang == Lang::Rust || lang == Lang::TypeScript {
                out.push_str(&indent.repeat(depth));
                out.push_str("}\n");
            }
        }
    }
    out
}

/// Log text from `templates`, at least `size` bytes, in whole lines.
fn log_text(rng: &mut Rng, templates: &[&'static str], size: usize) -> String {
    let mut out = String::with_capacity(size + 128);
    while out.len() < size {
        let t = rng.word(templates);
        expand(rng, t, &mut out);
        out.push('\n');
    }
    out
}

const BASE62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

fn base62(rng: &mut Rng, len: usize) -> String {
    (0..len).map(|_| char::from(BASE62[rng.below(62) as usize])).collect()
}

fn hex(rng: &mut Rng, len: usize) -> String {
    (0..len).map(|_| char::from(b"0123456789abcdef"[rng.below(16) as usize])).collect()
}

/// One file of the generated project, with its current content once known.
#[derive(Debug, Clone)]
struct File {
    abs: String,
    rel: String,
    lang: Lang,
    size: usize,
    seed: u64,
    content: Option<String>,
}

/// What to generate with [`session`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionSpec {
    /// Messages of the history.
    pub messages: usize,
    /// Steps to append after it, one assistant message each.
    pub steps: usize,
    pub seed: u64,
}

impl Default for SessionSpec {
    fn default() -> Self {
        SessionSpec { messages: 200, steps: 50, seed: 1 }
    }
}

/// A generated session: the history as the transform hook receives it, and the steps that
/// follow it. Serialises as `{"sessionID", "messages", "steps"}`.
#[derive(Debug, Clone, Serialize)]
pub struct GeneratedSession {
    #[serde(rename = "sessionID")]
    pub session_id: String,
    pub messages: Vec<Message>,
    /// Each step is the messages it appends (one assistant message).
    pub steps: Vec<Vec<Message>>,
}

impl GeneratedSession {
    /// Writes the session as compact JSON.
    pub fn write_to(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let mut out = std::io::BufWriter::with_capacity(1 << 20, out);
        serde_json::to_writer(&mut out, self)?;
        out.write_all(b"\n")?;
        out.flush()
    }

    /// Every tool output of the history and the steps.
    pub fn tool_outputs(&self) -> impl Iterator<Item = &str> {
        self.messages
            .iter()
            .chain(self.steps.iter().flatten())
            .flat_map(|m| m.parts.iter())
            .filter_map(|p| p.pointer("/state/output").and_then(Value::as_str))
    }
}

/// Generates a session. The same spec always gives the same session.
pub fn session(spec: &SessionSpec) -> GeneratedSession {
    let mut g = Generator::new(spec.seed);
    let mut messages = Vec::with_capacity(spec.messages);
    while messages.len() < spec.messages {
        messages.push(g.user());
        // A turn is 10 to 30 messages, the user's prompt included, and ends with the
        // assistant's answer unless the history ends first.
        let turn = g.rng.range(10, 30) as usize;
        for _ in 0..turn - 2 {
            if messages.len() >= spec.messages {
                break;
            }
            let calls = [1, 1, 1, 1, 1, 1, 2, 2, 2, 3];
            let n = *g.rng.pick(&calls).unwrap_or(&1);
            messages.push(g.assistant_tools(n, true, false));
        }
        if messages.len() < spec.messages {
            messages.push(g.assistant_answer());
        }
    }
    let steps = (0..spec.steps)
        .map(|_| {
            let n = g.rng.range(1, 2) as usize;
            let dup = g.rng.percent(40);
            vec![g.assistant_tools(n, false, dup)]
        })
        .collect();
    GeneratedSession { session_id: g.session_id.clone(), messages, steps }
}

/// Writes a generated session to `path`.
pub fn write_session(session: &GeneratedSession, path: &Path) -> std::io::Result<()> {
    let mut file = std::fs::File::create(path)?;
    session.write_to(&mut file)
}

const MODELS: &[(&str, &str)] =
    &[("claude-sonnet-4-5", "anthropic"), ("gpt-5.1-codex", "openai"), ("kimi-k2-thinking", "openrouter")];

/// The running state of one session being generated.
struct Generator {
    rng: Rng,
    session_id: String,
    root: String,
    lang: Lang,
    files: Vec<File>,
    model: (&'static str, &'static str),
    clock: i64,
    counter: u64,
    parent: String,
    snapshot: String,
    context_bytes: u64,
    /// Files read so far, for repeated reads.
    read: Vec<usize>,
    /// Files written and not read back yet.
    written: Vec<usize>,
    /// Grep and glob inputs used so far, for repeated searches.
    greps: Vec<Value>,
    globs: Vec<Value>,
    bash_commands: Vec<String>,
}

impl Generator {
    fn new(seed: u64) -> Generator {
        let mut rng = Rng::new(seed ^ 0x6463_705f_6765_6e00);
        let clock = 1_790_000_000_000 + rng.below(50_000_000_000) as i64;
        let lang = [Lang::Rust, Lang::TypeScript, Lang::Python][rng.below(3) as usize];
        let project = format!("{}-{}", rng.word(NOUNS).replace('_', "-"), rng.word(NOUNS).replace('_', "-"));
        let root = format!("/home/dev/work/{project}");
        let model = *rng.pick(MODELS).unwrap_or(&MODELS[0]);
        let mut g = Generator {
            session_id: String::new(),
            root,
            lang,
            files: Vec::new(),
            model,
            clock,
            counter: 0,
            parent: String::new(),
            snapshot: String::new(),
            context_bytes: 0,
            read: Vec::new(),
            written: Vec::new(),
            greps: Vec::new(),
            globs: Vec::new(),
            bash_commands: Vec::new(),
            rng,
        };
        // Session ids count down, so the newest session sorts first.
        let stamp = !((clock as u64) << 12) & 0xFFFF_FFFF_FFFF;
        g.session_id = format!("ses_{stamp:012x}{}", base62(&mut g.rng, 14));
        g.snapshot = hex(&mut g.rng, 40);
        let count = g.rng.range(40, 90);
        let dirs = ["src", "src", "src", "tests", "docs", "scripts"];
        for _ in 0..count {
            let dir = *g.rng.pick(&dirs).unwrap_or(&"src");
            let file_lang = if dir == "docs" { Lang::Markdown } else { lang };
            let sub = if dir == "src" && g.rng.percent(50) { format!("/{}", g.rng.word(NOUNS)) } else { String::new() };
            let name = if g.rng.percent(50) {
                g.rng.word(NOUNS).to_string()
            } else {
                format!("{}_{}", g.rng.word(VERBS), g.rng.word(NOUNS))
            };
            let rel = format!("{dir}{sub}/{name}.{}", file_lang.ext());
            if g.files.iter().any(|f| f.rel == rel) {
                continue;
            }
            // Line numbers and the wrapper make a read's output about 12% larger than the file.
            let size = (skewed_size(&mut g.rng) * 22 / 25).max(150);
            let seed = g.rng.next_u64();
            g.files.push(File { abs: format!("{}/{rel}", g.root), rel, lang: file_lang, size, seed, content: None });
        }
        g
    }

    /// An id in OpenCode's ascending form: `prefix_` + 48-bit clock and counter in hex + 14
    /// base62 characters.
    fn id(&mut self, prefix: &str) -> String {
        self.counter += 1;
        let stamp = (((self.clock as u64) << 12) + (self.counter & 0xFFF)) & 0xFFFF_FFFF_FFFF;
        format!("{prefix}_{stamp:012x}{}", base62(&mut self.rng, 14))
    }

    fn tick(&mut self, lo: u64, hi: u64) -> i64 {
        self.clock += self.rng.range(lo, hi) as i64;
        self.clock
    }

    fn part(&mut self, message_id: &str, body: Value) -> Value {
        let mut part = json!({"id": self.id("prt"), "sessionID": self.session_id, "messageID": message_id});
        if let (Some(obj), Value::Object(fields)) = (part.as_object_mut(), body) {
            obj.extend(fields);
        }
        part
    }

    fn user(&mut self) -> Message {
        let created = self.tick(20_000, 600_000);
        let id = self.id("msg");
        self.parent = id.clone();
        let file = self.rng.below(self.files.len() as u64) as usize;
        let rel = self.files.get(file).map(|f| f.rel.clone()).unwrap_or_default();
        let n = self.rng.range(8, 40);
        let text = format!("{} in {rel}: {}.", capitalise(&sentence(&mut self.rng, 6)), sentence(&mut self.rng, n));
        let (model, provider) = self.model;
        let info = json!({
            "id": id, "sessionID": self.session_id, "role": "user", "time": {"created": created},
            "agent": "build", "model": {"providerID": provider, "modelID": model}, "summary": {"diffs": []},
        });
        let part = self.part(&id, json!({"type": "text", "text": text}));
        self.context_bytes += text.len() as u64;
        Message { info, parts: vec![part] }
    }

    fn assistant_info(&mut self, id: &str, created: i64, finish: &str, output_tokens: u64) -> (Value, Value) {
        // What the model was sent: the system prompt and the history so far, up to a
        // 200K-token window (a real session would have been compacted before).
        let input = (9_000 + self.context_bytes / 4).min(190_000);
        let cached = input.saturating_sub(self.rng.range(200, 4_000));
        let tokens = json!({
            "total": input + output_tokens, "input": input - cached, "output": output_tokens, "reasoning": 0,
            "cache": {"write": 0, "read": cached},
        });
        let (model, provider) = self.model;
        let info = json!({
            "id": id, "sessionID": self.session_id, "parentID": self.parent, "role": "assistant",
            "mode": "build", "agent": "build", "path": {"cwd": self.root, "root": self.root}, "cost": 0,
            "tokens": tokens, "modelID": model, "providerID": provider,
            "time": {"created": created, "completed": self.clock}, "finish": finish,
        });
        (info, tokens)
    }

    /// An assistant step: `calls` tool calls (errored ones only when `errors`), and a repeated
    /// read first when `dup_read`.
    fn assistant_tools(&mut self, calls: usize, errors: bool, dup_read: bool) -> Message {
        let created = self.tick(500, 20_000);
        let id = self.id("msg");
        let mut parts = vec![self.part(&id, json!({"type": "step-start", "snapshot": self.snapshot}))];
        if self.rng.percent(20) {
            let start = self.tick(100, 2_000);
            let n = self.rng.range(10, 60);
            let text = capitalise(&sentence(&mut self.rng, n));
            let end = self.tick(100, 3_000);
            parts
                .push(self.part(&id, json!({"type": "reasoning", "text": text, "time": {"start": start, "end": end}})));
        } else if self.rng.percent(15) {
            let start = self.tick(100, 2_000);
            let n = self.rng.range(6, 25);
            let text = format!("{}.", capitalise(&sentence(&mut self.rng, n)));
            parts.push(self.part(&id, json!({"type": "text", "text": text, "time": {"start": start, "end": start}})));
        }
        let mut changed = Vec::new();
        for i in 0..calls {
            let body = if i == 0 && dup_read && !self.read.is_empty() {
                let file = self.read[self.rng.below(self.read.len() as u64) as usize];
                self.read_call(file)
            } else {
                self.tool_call(errors, &mut changed)
            };
            let part = self.part(&id, body);
            self.context_bytes += part.pointer("/state/output").and_then(Value::as_str).map_or(0, str::len) as u64;
            parts.push(part);
        }
        let output_tokens = self.rng.range(12, 400);
        self.tick(200, 3_000);
        let (info, tokens) = self.assistant_info(&id, created, "tool-calls", output_tokens);
        let finish = json!({
            "type": "step-finish", "reason": "tool-calls", "snapshot": self.snapshot, "tokens": tokens, "cost": 0,
        });
        parts.push(self.part(&id, finish));
        if !changed.is_empty() {
            self.snapshot = hex(&mut self.rng, 40);
            parts.push(self.part(&id, json!({"type": "patch", "hash": self.snapshot, "files": changed})));
        }
        Message { info, parts }
    }

    /// The assistant's answer that ends a turn.
    fn assistant_answer(&mut self) -> Message {
        let created = self.tick(500, 10_000);
        let id = self.id("msg");
        let mut parts = vec![self.part(&id, json!({"type": "step-start", "snapshot": self.snapshot}))];
        let start = self.tick(200, 2_000);
        let mut text = String::new();
        for _ in 0..self.rng.range(1, 5) {
            let n = self.rng.range(8, 30);
            text.push_str(&capitalise(&sentence(&mut self.rng, n)));
            text.push_str(". ");
        }
        let text = text.trim_end().to_string();
        let end = self.tick(200, 5_000);
        self.context_bytes += text.len() as u64;
        parts.push(self.part(&id, json!({"type": "text", "text": text, "time": {"start": start, "end": end}})));
        let output_tokens = (text.len() / 4) as u64 + 5;
        let (info, tokens) = self.assistant_info(&id, created, "stop", output_tokens);
        let finish =
            json!({"type": "step-finish", "reason": "stop", "snapshot": self.snapshot, "tokens": tokens, "cost": 0});
        parts.push(self.part(&id, finish));
        Message { info, parts }
    }

    /// A tool part's body (everything but the ids), chosen by the mix described above.
    fn tool_call(&mut self, errors: bool, changed: &mut Vec<String>) -> Value {
        if !self.written.is_empty() && self.rng.percent(50) {
            let file = self.written.remove(0);
            return self.read_call(file);
        }
        if errors && self.rng.percent(4) {
            return self.errored_call();
        }
        match self.rng.weighted(&[40, 12, 6, 17, 13, 7, 3]) {
            0 => {
                // Most reads go back to a file already read: the duplicates dedup prunes.
                let file = if !self.read.is_empty() && self.rng.percent(55) {
                    self.read[self.rng.below(self.read.len() as u64) as usize]
                } else {
                    self.rng.below(self.files.len() as u64) as usize
                };
                self.read_call(file)
            }
            1 => self.grep_call(),
            2 => self.glob_call(),
            3 => self.bash_call(),
            4 => self.edit_call(changed),
            5 => self.write_call(changed),
            _ => self.todo_call(),
        }
    }

    fn times(&mut self) -> Value {
        let start = self.tick(5, 200);
        let end = self.tick(20, 1_500);
        json!({"start": start, "end": end})
    }

    fn call_id(&mut self) -> String {
        format!("call_{}", base62(&mut self.rng, 24))
    }

    fn content(&mut self, file: usize) -> String {
        let Some(f) = self.files.get_mut(file) else {
            return String::new();
        };
        if f.content.is_none() {
            let mut rng = Rng::new(f.seed);
            f.content = Some(source_text(&mut rng, f.lang, f.size));
        }
        f.content.clone().unwrap_or_default()
    }

    fn read_call(&mut self, file: usize) -> Value {
        let content = self.content(file);
        let Some(f) = self.files.get(file) else {
            return json!({});
        };
        let (abs, rel) = (f.abs.clone(), f.rel.clone());
        let lines: Vec<&str> = content.lines().collect();
        let mut output = format!("<path>{abs}</path>\n<type>file</type>\n<content>\n");
        // Like OpenCode's read tool, stop at a byte budget; edits can grow a file past it.
        let mut shown = 0;
        for (i, line) in lines.iter().enumerate() {
            let numbered = format!("{}: {line}\n", i + 1);
            if output.len() + numbered.len() + 120 > MAX_OUTPUT {
                break;
            }
            output.push_str(&numbered);
            shown = i + 1;
        }
        let truncated = shown < lines.len();
        if truncated {
            output.push_str(&format!(
                "\n(Output capped at 50 KB. Showing lines 1-{shown}. Use offset={} to continue.)\n</content>",
                shown + 1
            ));
        } else {
            output.push_str(&format!("\n(End of file - total {} lines)\n</content>", lines.len()));
        }
        let text = content.trim_end_matches('\n').to_string();
        let preview = lines.iter().take(20).copied().collect::<Vec<_>>().join("\n");
        let metadata = json!({
            "preview": preview, "truncated": truncated, "loaded": [],
            "display": {"type": "file", "path": abs, "text": text, "lineStart": 1, "lineEnd": lines.len(),
                        "totalLines": lines.len(), "truncated": false},
        });
        if !self.read.contains(&file) {
            self.read.push(file);
        }
        let call = self.call_id();
        let time = self.times();
        json!({"type": "tool", "tool": "read", "callID": call, "state": {
            "status": "completed", "input": {"filePath": abs}, "output": output, "metadata": metadata,
            "title": rel, "time": time,
        }})
    }

    fn grep_call(&mut self) -> Value {
        let input = if !self.greps.is_empty() && self.rng.percent(35) {
            self.greps[self.rng.below(self.greps.len() as u64) as usize].clone()
        } else {
            let pattern = match self.rng.below(3) {
                0 => format!("fn {}", self.rng.word(VERBS)),
                1 => camel(&mut self.rng),
                _ => format!("{}_{}", self.rng.word(VERBS), self.rng.word(NOUNS)),
            };
            let mut input = json!({"pattern": pattern, "path": format!("{}/src", self.root)});
            if self.rng.percent(40) {
                input["include"] = json!(format!("*.{}", self.lang.ext()));
            }
            self.greps.push(input.clone());
            input
        };
        let target = skewed_size(&mut self.rng).min(20_000);
        let mut body = String::new();
        let mut matches = 0;
        while body.len() < target {
            let f = self.rng.below(self.files.len() as u64) as usize;
            let (abs, lang) = match self.files.get(f) {
                Some(f) => (f.abs.clone(), f.lang),
                None => break,
            };
            body.push_str(&format!("{abs}:\n"));
            for _ in 0..self.rng.range(1, 6) {
                let line = source_text(&mut self.rng, lang, 1);
                body.push_str(&format!("  Line {}: {}\n\n", self.rng.range(1, 900), line.trim_end()));
                matches += 1;
            }
        }
        let output = format!("Found {matches} matches\n{body}");
        let title = input["pattern"].clone();
        let call = self.call_id();
        let time = self.times();
        json!({"type": "tool", "tool": "grep", "callID": call, "state": {
            "status": "completed", "input": input, "output": output,
            "metadata": {"matches": matches, "truncated": false}, "title": title, "time": time,
        }})
    }

    fn glob_call(&mut self) -> Value {
        let input = if !self.globs.is_empty() && self.rng.percent(50) {
            self.globs[self.rng.below(self.globs.len() as u64) as usize].clone()
        } else {
            let pattern = match self.rng.below(3) {
                0 => format!("**/*.{}", self.lang.ext()),
                1 => format!("src/**/*{}*", self.rng.word(NOUNS)),
                _ => format!("{}/**/*", self.rng.word(&["src", "tests", "docs", "scripts"])),
            };
            let input = json!({"pattern": pattern});
            self.globs.push(input.clone());
            input
        };
        let target = skewed_size(&mut self.rng).min(16_000);
        let mut paths = Vec::new();
        let mut len = 0;
        while len <= target {
            let path = if self.rng.percent(60) {
                let f = self.rng.below(self.files.len() as u64) as usize;
                self.files.get(f).map(|f| f.abs.clone()).unwrap_or_default()
            } else {
                format!(
                    "{}/src/{}/{}_{}.{}",
                    self.root,
                    self.rng.word(NOUNS),
                    self.rng.word(VERBS),
                    self.rng.word(NOUNS),
                    self.lang.ext()
                )
            };
            len += path.len() + 1;
            paths.push(path);
        }
        let count = paths.len();
        let call = self.call_id();
        let time = self.times();
        json!({"type": "tool", "tool": "glob", "callID": call, "state": {
            "status": "completed", "input": input, "output": paths.join("\n"),
            "metadata": {"count": count, "truncated": false}, "title": "", "time": time,
        }})
    }

    fn bash_call(&mut self) -> Value {
        let command = if !self.bash_commands.is_empty() && self.rng.percent(40) {
            self.bash_commands[self.rng.below(self.bash_commands.len() as u64) as usize].clone()
        } else {
            let noun = self.rng.word(NOUNS);
            let command = match (self.lang, self.rng.below(6)) {
                (_, 0) => "git status --short".to_string(),
                (_, 1) => "git diff --stat".to_string(),
                (_, 2) => "ls -la src".to_string(),
                (Lang::Rust, 3) => "cargo build".to_string(),
                (Lang::Rust, _) => format!("cargo test {noun}"),
                (Lang::TypeScript, 3) => "npx tsc --noEmit".to_string(),
                (Lang::TypeScript, _) => format!("npm test -- {noun}"),
                (_, 3) => "python3 -m mypy src".to_string(),
                (_, _) => format!("python3 -m pytest -q -k {noun}"),
            };
            self.bash_commands.push(command.clone());
            command
        };
        let templates: &[&'static str] = if command.starts_with("git") {
            GIT_LOG
        } else if command.starts_with("ls") {
            LS_LOG
        } else if command.contains("test") {
            if self.rng.percent(30) {
                APP_LOG
            } else {
                TEST_LOG
            }
        } else {
            BUILD_LOG
        };
        let target = skewed_size(&mut self.rng);
        let output = log_text(&mut self.rng, templates, target);
        // OpenCode keeps a copy of the output in the metadata, cut at 30,000 characters.
        let mut kept = output.clone();
        if crate::format::cut(&mut kept, 30_000) {
            kept.push_str("\n\n...");
        }
        let exit = if self.rng.percent(12) { 1 } else { 0 };
        let n = self.rng.range(3, 7);
        let description = capitalise(&sentence(&mut self.rng, n));
        let call = self.call_id();
        let time = self.times();
        json!({"type": "tool", "tool": "bash", "callID": call, "state": {
            "status": "completed", "input": {"command": command, "description": description}, "output": output,
            "metadata": {"output": kept, "exit": exit, "truncated": false}, "title": command, "time": time,
        }})
    }

    fn edit_call(&mut self, changed: &mut Vec<String>) -> Value {
        let file = self.rng.below(self.files.len() as u64) as usize;
        let content = self.content(file);
        let lines: Vec<&str> = content.lines().filter(|l| l.trim().len() > 8).collect();
        let old = self.rng.pick(&lines).map(|l| l.to_string()).unwrap_or_else(|| content.clone());
        let mut new = old.clone();
        new.push_str(&format!(" // {}", sentence(&mut self.rng, 4)));
        let updated = content.replacen(&old, &new, 1);
        let Some(f) = self.files.get_mut(file) else {
            return json!({});
        };
        f.content = Some(updated);
        let (abs, rel) = (f.abs.clone(), f.rel.clone());
        let patch =
            format!("Index: {abs}\n{}\n--- {abs}\n+++ {abs}\n@@ -1,1 +1,1 @@\n-{old}\n+{new}\n", "=".repeat(67));
        changed.push(abs.clone());
        let call = self.call_id();
        let time = self.times();
        json!({"type": "tool", "tool": "edit", "callID": call, "state": {
            "status": "completed", "input": {"filePath": abs, "oldString": old, "newString": new},
            "output": "Edit applied successfully.",
            "metadata": {
                "diagnostics": {}, "diff": patch,
                "filediff": {"file": abs, "patch": patch, "additions": 1, "deletions": 1}, "truncated": false,
            },
            "title": rel, "time": time,
        }})
    }

    fn write_call(&mut self, changed: &mut Vec<String>) -> Value {
        let file = self.rng.below(self.files.len() as u64) as usize;
        let Some(lang) = self.files.get(file).map(|f| f.lang) else {
            return json!({});
        };
        let size = (skewed_size(&mut self.rng) / 2).max(MIN_OUTPUT);
        let content = source_text(&mut self.rng, lang, size);
        let exists = self.files[file].content.is_some();
        self.files[file].content = Some(content.clone());
        let (abs, rel) = (self.files[file].abs.clone(), self.files[file].rel.clone());
        // Most writes are read back later: supersede-writes then drops their content.
        if self.rng.percent(60) && !self.written.contains(&file) {
            self.written.push(file);
        }
        changed.push(abs.clone());
        let call = self.call_id();
        let time = self.times();
        json!({"type": "tool", "tool": "write", "callID": call, "state": {
            "status": "completed", "input": {"filePath": abs, "content": content}, "output": "Wrote file successfully.",
            "metadata": {"diagnostics": {}, "filepath": abs, "exists": exists, "truncated": false},
            "title": rel, "time": time,
        }})
    }

    fn todo_call(&mut self) -> Value {
        let statuses = ["completed", "in_progress", "pending", "pending"];
        let todos: Vec<Value> = (0..self.rng.range(2, 6))
            .map(|i| {
                let n = self.rng.range(4, 10);
                let status = *self.rng.pick(&statuses).unwrap_or(&"pending");
                let content = capitalise(&sentence(&mut self.rng, n));
                json!({"content": content, "status": status, "priority": "medium", "id": (i + 1).to_string()})
            })
            .collect();
        let open = todos.iter().filter(|t| t["status"] != "completed").count();
        let output = serde_json::to_string_pretty(&todos).unwrap_or_default();
        let call = self.call_id();
        let time = self.times();
        json!({"type": "tool", "tool": "todowrite", "callID": call, "state": {
            "status": "completed", "input": {"todos": todos}, "output": output,
            "metadata": {"todos": todos}, "title": format!("{open} todos"), "time": time,
        }})
    }

    fn errored_call(&mut self) -> Value {
        let call = self.call_id();
        if self.rng.percent(60) {
            let missing =
                format!("{}/src/{}_{}.{}", self.root, self.rng.word(VERBS), self.rng.word(NOUNS), self.lang.ext());
            let time = self.times();
            return json!({"type": "tool", "tool": "read", "callID": call, "state": {
                "status": "error", "input": {"filePath": missing}, "error": format!("File not found: {missing}"),
                "time": time,
            }});
        }
        let file = self.rng.below(self.files.len() as u64) as usize;
        let abs = self.files.get(file).map(|f| f.abs.clone()).unwrap_or_default();
        let mut old = String::new();
        expand(&mut self.rng, "let $n = $n.$v_$n($n, $d)?;", &mut old);
        let mut new = String::new();
        expand(&mut self.rng, "let $n = $n.$v_$n(&$n, $d)?;", &mut new);
        let time = self.times();
        json!({"type": "tool", "tool": "edit", "callID": call, "state": {
            "status": "error", "input": {"filePath": abs, "oldString": old, "newString": new},
            "error": "oldString not found in content", "time": time,
        }})
    }
}

/// What [`write_states`] wrote, summed independently of dcp's own stats code so a test can
/// check one against the other.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StatesSummary {
    pub files: u64,
    pub tokens_saved: u64,
    pub tools_pruned: u64,
    /// Files with savings above 0.
    pub sessions: u64,
    pub bytes: u64,
}

const TOOLS: &[&str] = &["read", "read", "read", "bash", "grep", "glob", "webfetch", "write"];

/// One generated session state: a few to a few hundred prune records, sometimes across a
/// compaction (which clears the prune list but keeps the stats). Returns the state and the
/// tokens and tools it records.
fn state(rng: &mut Rng, index: usize) -> (SessionState, u64, u64) {
    let mut state = SessionState::default();
    let n = rng.range(4, 14);
    state.session_name = Some(capitalise(&sentence(rng, n)));
    // About one session in twenty pruned nothing.
    let records = if rng.percent(5) {
        0
    } else {
        match rng.weighted(&[35, 30, 22, 13]) {
            0 => rng.range(1, 4),
            1 => rng.range(5, 16),
            2 => rng.range(17, 64),
            _ => rng.range(65, 300),
        }
    };
    let compaction_at = if records > 4 && rng.percent(15) { Some(rng.range(1, records - 1)) } else { None };
    let (mut tokens, mut tools) = (0, 0);
    for i in 0..records {
        if Some(i) == compaction_at {
            state.clear_after_compaction(1_790_000_000_000 + index as i64 * 1_000);
        }
        let strategy = match rng.weighted(&[45, 8, 10, 20, 7, 10]) {
            0 => Strategy::Deduplication,
            1 => Strategy::SupersedeWrites,
            2 => Strategy::PurgeErrors,
            3 => Strategy::Discard,
            4 => Strategy::Extract,
            _ => Strategy::Sweep,
        };
        let action = match strategy {
            Strategy::SupersedeWrites => Action::WriteContent,
            Strategy::PurgeErrors => Action::ErrorInputs,
            Strategy::Extract => {
                let n = rng.range(8, 30);
                Action::Distill { distillation: capitalise(&sentence(rng, n)) }
            }
            _ => Action::Output,
        };
        let record_tokens = (skewed_size(rng) / 4) as u64;
        let tool = if strategy == Strategy::SupersedeWrites { "write" } else { rng.word(TOOLS) };
        let call = format!("call_{}", base62(rng, 24));
        state.id_for(&call);
        let record =
            PruneRecord { strategy, action, tokens: record_tokens, tool: tool.to_string(), applied: !rng.percent(10) };
        if state.record(&call, record) {
            tokens += record_tokens;
            tools += 1;
        }
    }
    state.fold_counter();
    (state, tokens, tools)
}

/// Writes `count` state files into `dir` (created if missing), in the layout dcp writes, and
/// sums what they record. `dcp stats --data-dir D` reads `D/storage/plugin/dcp/`, so pass that
/// as `dir` to see them there.
pub fn write_states(count: usize, seed: u64, dir: &Path) -> std::io::Result<StatesSummary> {
    std::fs::create_dir_all(dir)?;
    let mut rng = Rng::new(seed ^ 0x6463_705f_7374_6174);
    let base = 1_790_000_000_000_i64 + rng.below(50_000_000_000) as i64;
    let mut summary = StatesSummary::default();
    for i in 0..count {
        let (state, tokens, tools) = state(&mut rng, i);
        let time = base + i as i64 * 61_000;
        // The counter in the id keeps every file name distinct.
        let stamp = !(((time as u64) << 12) + i as u64) & 0xFFFF_FFFF_FFFF;
        let id = format!("ses_{stamp:012x}{}", base62(&mut rng, 14));
        let updated = chrono::DateTime::from_timestamp_millis(time)
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
            .unwrap_or_default();
        let bytes = persist::render(&state, &updated);
        std::fs::write(dir.join(format!("{id}.json")), &bytes)?;
        summary.files += 1;
        summary.bytes += bytes.len() as u64;
        summary.tokens_saved += tokens;
        summary.tools_pruned += tools;
        if tokens > 0 {
            summary.sessions += 1;
        }
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_is_stable_across_versions_of_the_code_that_uses_it() {
        // Pinned values: a change here changes every generated session and benchmark input.
        let mut rng = Rng::new(0);
        assert_eq!(rng.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(rng.below(0), 0);
        assert!((0..1_000).all(|_| rng.range(3, 5) >= 3));
    }

    #[test]
    fn sizes_stay_within_the_octaves() {
        let mut rng = Rng::new(7);
        let sizes: Vec<usize> = (0..10_000).map(|_| skewed_size(&mut rng)).collect();
        assert!(sizes.iter().all(|s| (MIN_OUTPUT..MAX_OUTPUT).contains(s)));
        let small = sizes.iter().filter(|s| **s < 1_600).count();
        assert!(small > 5_000, "{small}");
    }
}
