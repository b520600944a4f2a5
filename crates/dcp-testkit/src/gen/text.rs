//! The words and templates the generator writes with: code in three languages, build,
//! test, app, git and `ls` output, and prose. A template's `$x` placeholders are filled from
//! the word lists by [`expand`].

use super::Rng;

#[rustfmt::skip]
pub(crate) const NOUNS: &[&str] = &[
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
pub(crate) const VERBS: &[&str] = &[
    "load", "save", "parse", "render", "encode", "decode", "merge", "split", "apply", "open", "close", "flush",
    "sync", "spawn", "join", "retry", "build", "fetch", "store", "update", "insert", "remove", "resolve", "validate",
    "normalize", "collect", "compute", "estimate", "prune", "rewrite", "refresh", "restore", "checkpoint", "replay",
    "compact", "schedule", "dispatch", "handle", "emit", "format", "scan", "read", "write", "count", "sort", "dedupe",
];

#[rustfmt::skip]
pub(crate) const PROSE: &[&str] = &[
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
pub(crate) enum Lang {
    Rust,
    TypeScript,
    Python,
    Markdown,
}

impl Lang {
    pub(crate) fn ext(self) -> &'static str {
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
pub(crate) const RUST_TOP: &[&str] = &[
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
pub(crate) const RUST_BODY: &[&str] = &[
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
pub(crate) const TS_TOP: &[&str] = &[
    "import { $C, $v$C } from \"./$n\";",
    "+export function $v$C($n: $C, $n: number): $C {",
    "+export class $C {",
    "/** $S. */",
    "const $N_$N = $d;",
    "",
    "+export interface $C {",
    "+export async function $v$C($n: string): Promise<$C> {",
];
pub(crate) const TS_BODY: &[&str] = &[
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
pub(crate) const PY_TOP: &[&str] = &[
    "import $n",
    "from $n.$n import $C, $n",
    "+def $v_$n($n, $n=$d):",
    "+class $C($C):",
    "# $S.",
    "$N_$N = $d",
    "",
    "+async def $v_$n(self, $n):",
];
pub(crate) const PY_BODY: &[&str] = &[
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
pub(crate) const MD_LINES: &[&str] = &["# $C $n", "## $C", "- $S.", "- `$n`: $s.", "$S. $S.", "", "1. $S.", "> $S."];

/// Lines of log and tool output for bash commands.
pub(crate) const BUILD_LOG: &[&str] = &[
    "   Compiling $n v0.$d.$d",
    "warning: unused variable: `$n`",
    "  --> src/$n.rs:$d:$d",
    "   |",
    "$d |     let $n = $n.$v();",
    "   = note: `#[warn(unused_variables)]` on by default",
    "error[E0308]: mismatched types: expected `$C`, found `$C`",
    "    Finished `dev` profile [unoptimized + debuginfo] target(s) in $d.$ds",
];
pub(crate) const TEST_LOG: &[&str] = &[
    "test $n::tests::$v_$n ... ok",
    "test $n::tests::$v_$n_$n ... ok",
    "test $n::$v_$n ... FAILED",
    "running $d tests",
    "test result: ok. $d passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.$ds",
    "---- $n::tests::$v_$n stdout ----",
    "thread '$n::tests::$v' panicked at src/$n.rs:$d:$d:",
    "assertion `left == right` failed: $s",
];
pub(crate) const APP_LOG: &[&str] = &[
    "2026-09-21T10:$d:$dZ  INFO $n::$n: $s",
    "2026-09-21T10:$d:$dZ DEBUG $n::$v: $n=$d $n=$d",
    "2026-09-21T10:$d:$dZ  WARN $n: $s ($n $d)",
    "2026-09-21T10:$d:$dZ ERROR $n::$n: $s: $C($d)",
];
pub(crate) const GIT_LOG: &[&str] = &[
    " M src/$n.rs",
    "?? src/$n_$n.rs",
    " M tests/$n.rs",
    "$d files changed, $d insertions(+), $d deletions(-)",
    " src/$n/$n.rs | $d ++++---",
];
pub(crate) const LS_LOG: &[&str] = &[
    "-rw-r--r--  1 dev dev  $d Sep 21 10:$d $n.rs",
    "drwxr-xr-x  $d dev dev  4096 Sep 21 10:$d $n",
    "-rw-r--r--  1 dev dev  $d Sep 20 18:$d $n_$n.ts",
];

pub(crate) fn capitalise(word: &str) -> String {
    let mut chars = word.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

pub(crate) fn camel(rng: &mut Rng) -> String {
    let mut out = String::new();
    for part in rng.word(NOUNS).split('_') {
        out.push_str(&capitalise(part));
    }
    if rng.percent(40) {
        out.push_str(&capitalise(rng.word(NOUNS).split('_').next().unwrap_or("x")));
    }
    out
}

pub(crate) fn sentence(rng: &mut Rng, words: u64) -> String {
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
pub(crate) fn expand(rng: &mut Rng, template: &str, out: &mut String) {
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
pub(crate) fn source_text(rng: &mut Rng, lang: Lang, size: usize) -> String {
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
pub(crate) fn log_text(rng: &mut Rng, templates: &[&'static str], size: usize) -> String {
    let mut out = String::with_capacity(size + 128);
    while out.len() < size {
        let t = rng.word(templates);
        expand(rng, t, &mut out);
        out.push('\n');
    }
    out
}

pub(crate) const BASE62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

pub(crate) fn base62(rng: &mut Rng, len: usize) -> String {
    (0..len).map(|_| char::from(BASE62[rng.below(62) as usize])).collect()
}

pub(crate) fn hex(rng: &mut Rng, len: usize) -> String {
    (0..len).map(|_| char::from(b"0123456789abcdef"[rng.below(16) as usize])).collect()
}
