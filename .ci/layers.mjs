#!/usr/bin/env node
// The layering check of issue 27: reads every `crate::` path in src/ (`use crate::…`, groups
// `crate::{a, b::c}` and paths in code; comments and strings are skipped), maps each file to its
// top-level module, and fails on an import against the order of layers that src/lib.rs states
// (the paragraph that starts `Layers, lowest first`: names in backticks, layers split by `→`)
// and on any cycle between top-level modules. A module may import from its own layer (without a
// cycle) and from the layers before it. Inside one top-level module it reads the paths between
// its files (`super::x`, `self::x`, `crate::sidecar::x`; inline `mod tests` blocks resolved) and
// fails on a cycle between files: two files that import each other are one concept split in
// two, or hold a type in the wrong one. A parent's own use of a child's items is an edge like
// any other, so a loop through a parent module (a child uses the parent's type, which holds or
// calls another child, which uses the first) is caught; a parent's re-export of a child's item
// (`pub use self::x::Y`, its interface) is not an edge. Before it reads src/ it checks itself on
// planted files (an upward import, a cycle between files, a loop through a parent) and fails if
// it misses one.
// Prints each breach as `path:line: what` and exits 1 if there is one. The known exceptions
// below (upward imports, loops between files) are the ones not yet removed (none now); a new
// one fails. A visibility (`pub(in crate::x)`) is no import. Run it from anywhere:
// `node .ci/layers.mjs`. `.ci/run` runs it.
import { readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { code, rustFiles } from "./rust-source.mjs";

const root = join(fileURLToPath(import.meta.url), "..", "..");
const src = join(root, "src");

// Upward imports still in the code, `from -> to`, each with why it is there. Keep it short: fix
// one and remove its line (a line that no longer matches anything fails too).
const KNOWN = new Map([
]);

// Loops between the files of one module still in the code, each as `{ files, why }`: a loop
// among these files passes, a loop through any other file fails, and an entry no loop uses
// fails. None is left (issue 39 moved each type the children of a parent shared into a file
// of its own); keep it so.
const TANGLES = [];

// The layers, lowest first, as src/lib.rs states them.
function layers(libText) {
  const lines = libText.split("\n");
  const start = lines.findIndex((l) => /^\/\/! Layers, lowest first/.test(l));
  if (start < 0) throw new Error("src/lib.rs: no `//! Layers, lowest first` paragraph");
  let text = "";
  for (let i = start; i < lines.length && /^\/\/!\s*\S/.test(lines[i]); i++) text += lines[i].slice(3) + " ";
  const rank = new Map();
  text.slice(text.indexOf(":") + 1).split("→").forEach((layer, i) => {
    for (const m of layer.matchAll(/`([a-z_]+)`/g)) rank.set(m[1], i);
  });
  return rank;
}


// The top-level modules a `crate::` path at `at` names: one, or a group's first segments.
function targets(text, at) {
  if (text[at] !== "{") return [text.slice(at).match(/^\w+/)[0]];
  const names = [];
  let depth = 0;
  let item = "";
  for (let j = at; j < text.length; j++) {
    const ch = text[j];
    if (ch === "{") depth++;
    else if (ch === "}") depth--;
    else if (depth === 1 && ch === ",") (names.push(item), (item = ""));
    else if (depth === 1) item += ch;
    if (depth === 0) break;
  }
  names.push(item);
  return names.map((s) => s.trim().split(/::|\s/)[0]).filter((s) => s && s !== "self" && s !== "*");
}

// The paths a `prefix::` path at `at` names, as lists of segments: one, or one per item of a
// group (nested groups expanded; `self` in a group is the group's own path).
function paths(text, at) {
  const out = [];
  const walk = (i, base) => {
    const head = text.slice(i).match(/^(\w+)(\s*::\s*)?/);
    if (!head) {
      if (text[i] !== "{") return;
      let depth = 0;
      let item = i + 1;
      for (let j = i; j < text.length; j++) {
        const ch = text[j];
        if (ch === "{") depth++;
        else if (ch === "}") depth--;
        if ((depth === 1 && ch === ",") || depth === 0) {
          const part = text.slice(item, j).trim();
          if (part === "self") out.push(base);
          else if (part && part !== "*") walk(item + text.slice(item, j).search(/\S/), base);
          item = j + 1;
        }
        if (depth === 0) return;
      }
      return;
    }
    const path = base.concat(head[1]);
    if (head[2]) walk(i + head[0].length, path);
    else out.push(path);
  };
  walk(at, []);
  return out;
}

// The module path of each file (`sidecar/stream/scanner.rs` is sidecar::stream::scanner), and
// back: which file a module path is in (the longest prefix that is a file).
function modulePath(rel) {
  const parts = rel.replace(/\.rs$/, "").split("/");
  if (parts[parts.length - 1] === "mod") parts.pop();
  return parts;
}

// Whether the path at `at` is what a `pub use` statement re-exports (`pub use self::x::Y;`,
// `pub(crate) use super::{a, b};`): the statement's words before the path, back to the end
// of the previous item.
function reexport(text, at) {
  const before = text.slice(0, at);
  const start = Math.max(before.lastIndexOf(";"), before.lastIndexOf("}"), before.lastIndexOf("{")) + 1;
  return /^\s*(#\[[^\]]*\]\s*)*pub(\s*\([^)]*\))?\s+use\s+(::)?$/.test(before.slice(start));
}

// The inline `mod name { … }` blocks of a text: [name, from, to].
function inlineMods(text) {
  const mods = [];
  for (const m of text.matchAll(/\bmod\s+(\w+)\s*\{/g)) {
    let depth = 0;
    for (let j = m.index + m[0].length - 1; j < text.length; j++) {
      if (text[j] === "{") depth++;
      else if (text[j] === "}" && --depth === 0) {
        mods.push([m[1], m.index, j]);
        break;
      }
    }
  }
  return mods;
}

// Checks `files` (path under src/ → text): imports against `rank`'s order, cycles between
// top-level modules, and cycles between the files of one top-level module.
function check(files, rank, known, tangles = []) {
  const problems = [];
  const usedTangles = new Set();
  const edges = new Map();
  const used = new Set();
  const fileOf = new Map();
  for (const rel of files.keys()) fileOf.set(modulePath(rel).join("::"), rel);
  const resolve = (segments) => {
    for (let n = segments.length; n > 0; n--) {
      const rel = fileOf.get(segments.slice(0, n).join("::"));
      if (rel) return rel;
    }
    return null;
  };
  const fileEdges = new Map();
  for (const [rel, raw] of files) {
    const from = rel.split("/")[0].replace(/\.rs$/, "");
    if (from === "lib" || from === "main") continue;
    if (!rank.has(from)) problems.push(`src/${rel}: module \`${from}\` is in no layer of src/lib.rs's order`);
    // A visibility (`pub(in crate::x)`) names a module but imports nothing from it.
    const text = code(raw).replace(/\bpub\s*\(\s*in\s[^)]*\)/g, (v) => v.replace(/[^\n]/g, " "));
    const lineAt = (at) => text.slice(0, at).split("\n").length;
    for (const m of text.matchAll(/\bcrate::(?=[\w{])/g)) {
      const at = m.index + m[0].length;
      const line = lineAt(at);
      for (const to of targets(text, at)) {
        if (to === from || !rank.has(to)) continue; // Items of lib.rs itself (error_chain) sit below every layer.
        const where = `src/${rel}:${line}`;
        if (!edges.has(from)) edges.set(from, new Map());
        if (!edges.get(from).has(to)) edges.get(from).set(to, where);
        if (rank.get(to) <= rank.get(from)) continue;
        const key = `${from} -> ${to}`;
        if (known.has(key)) used.add(key);
        else problems.push(`${where}: \`${from}\` imports \`${to}\`, a later layer (src/lib.rs's order)`);
      }
    }
    // Edges between the files of this top-level module.
    const own = modulePath(rel);
    const mods = inlineMods(text);
    const here = (at) => own.concat(mods.filter(([, a, b]) => a < at && at < b).map(([name]) => name));
    for (const m of text.matchAll(/\b(crate|super|self)((?:\s*::\s*super)*)\s*::\s*(?=[\w{])/g)) {
      const at = m.index + m[0].length;
      let base;
      if (m[1] === "crate") base = [];
      else {
        base = here(m.index);
        const ups = (m[1] === "super" ? 1 : 0) + (m[2].match(/super/g) || []).length;
        base = base.slice(0, base.length - ups);
      }
      for (const path of paths(text, at)) {
        const full = base.concat(path);
        if (full[0] !== from) continue;
        const to = resolve(full);
        // The file itself is no edge, nor a parent's re-export of its child (`pub use
        // self::x::Y`, its interface); a parent's own use of a child's items is one.
        if (!to || to === rel) continue;
        if (modulePath(to).join("::").startsWith(own.join("::") + "::") && reexport(text, m.index)) continue;
        if (!fileEdges.has(rel)) fileEdges.set(rel, new Map());
        if (!fileEdges.get(rel).has(to)) fileEdges.get(rel).set(to, `src/${rel}:${lineAt(at)}`);
      }
    }
  }
  for (const key of known.keys()) if (!used.has(key)) problems.push(`.ci/layers.mjs: known exception \`${key}\` no longer occurs: remove it`);
  for (const [what, graph] of [["modules", edges], ["files", fileEdges]]) {
    // Cycles (inside one layer, or through a known exception; or between a module's files).
    const state = new Map();
    const stack = [];
    const visit = (m) => {
      state.set(m, "open");
      stack.push(m);
      for (const [to, where] of graph.get(m) || []) {
        if (state.get(to) === "open") {
          const loop = stack.slice(stack.indexOf(to));
          const tangle = what === "files" && tangles.find((t) => loop.every((f) => t.files.includes(f)));
          if (tangle) {
            usedTangles.add(tangle);
            continue;
          }
          problems.push(`${where}: an import cycle between ${what}: ${loop.concat(to).join(" -> ")}`);
        } else if (!state.has(to)) visit(to);
      }
      stack.pop();
      state.set(m, "done");
    };
    for (const m of [...graph.keys()].sort()) if (!state.has(m)) visit(m);
  }
  for (const t of tangles) {
    if (!usedTangles.has(t)) problems.push(`.ci/layers.mjs: known loop of ${t.files.join(", ")} no longer occurs: remove it`);
  }
  return problems;
}

// The check on planted files: each breach must be found, and a clean set must pass.
function selfCheck() {
  const rank = layers("//! Layers, lowest first: `low` → `mid` → `top`.\n");
  const clean = new Map([
    ["low.rs", ""],
    ["mid/mod.rs", "mod a;\nmod b;\npub use self::a::A;\nuse crate::low;\npub struct M;\n"],
    ["mid/a.rs", "use super::b::B;\nuse super::M;\npub struct A;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n"],
    // A visibility names a module, and imports nothing from it: b -> a would close a loop.
    ["mid/b.rs", "use crate::mid::M;\npub struct B;\npub(in crate::mid::a) struct C;\n"],
    ["top.rs", "use crate::mid::{a::A, M};\n"],
  ]);
  const planted = [
    ["an upward import", "low.rs", "use crate::mid::M;\n", /`low` imports `mid`/],
    ["a cycle between files", "mid/b.rs", "use crate::mid::{a::A, M};\n", /cycle between files: mid\/(a|b)\.rs -> /],
    ["a cycle through super", "mid/b.rs", "fn f() { super::a::A; }\n", /cycle between files/],
    // The parent's own use of a child's item closes a loop b -> mod -> a -> b (issue 39).
    ["a cycle through a parent module", "mid/mod.rs", "mod a;\nmod b;\nuse self::a::A;\npub struct M;\n", /cycle between files: .*mid\/mod\.rs/],
  ];
  const failures = [];
  const found = check(clean, rank, new Map());
  if (found.length) failures.push(`the clean planted files fail: ${found.join("; ")}`);
  for (const [what, file, text, expect] of planted) {
    const files = new Map(clean);
    files.set(file, text);
    if (!check(files, rank, new Map()).some((p) => expect.test(p))) failures.push(`${what} in ${file} is not found`);
  }
  return failures;
}

const selfFailures = selfCheck();
if (selfFailures.length) {
  for (const f of selfFailures) console.log(`.ci/layers.mjs self-check: ${f}`);
  process.exit(1);
}
const rank = layers(readFileSync(join(src, "lib.rs"), "utf8"));
const files = new Map();
for (const file of rustFiles(src)) files.set(relative(src, file), readFileSync(file, "utf8"));
const problems = check(files, rank, KNOWN, TANGLES);
for (const p of problems) console.log(p);
if (problems.length) {
  console.log(`layers: ${problems.length} problem(s)`);
  process.exit(1);
}
console.log(
  `layers: ${rank.size} modules in ${new Set(rank.values()).size} layers, no upward import, no cycle between modules or between the files of one`,
);
