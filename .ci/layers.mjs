#!/usr/bin/env node
// The layering check of issue 27: reads every `crate::` path in src/ (`use crate::…`, groups
// `crate::{a, b::c}` and paths in code; comments and strings are skipped), maps each file to its
// top-level module, and fails on an import against the order of layers that src/lib.rs states
// (the paragraph that starts `Layers, lowest first`: names in backticks, layers split by `→`)
// and on any cycle between top-level modules. A module may import from its own layer (without a
// cycle) and from the layers before it. Prints each breach as `path:line: what` and exits 1 if
// there is one. The known exceptions below are the upward imports not yet removed; a new one
// fails. Run it from anywhere: `node .ci/layers.mjs`. `.ci/run` runs it.
import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(fileURLToPath(import.meta.url), "..", "..");
const src = join(root, "src");

// Upward imports still in the code, `from -> to`, each with why it is there. Keep it short: fix
// one and remove its line (a line that no longer matches anything fails too).
const KNOWN = new Map([
]);

// The layers, lowest first, as src/lib.rs states them.
function layers() {
  const lines = readFileSync(join(src, "lib.rs"), "utf8").split("\n");
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

function* rustFiles(dir) {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, e.name);
    if (e.isDirectory()) yield* rustFiles(path);
    else if (path.endsWith(".rs")) yield path;
  }
}

// The text with comments, strings and char literals blanked (newlines kept, so lines still count).
function code(t) {
  let out = "";
  let i = 0;
  const skipTo = (j) => {
    out += t.slice(i, j).replace(/[^\n]/g, " ");
    i = j;
  };
  while (i < t.length) {
    const c = t[i];
    const n = t[i + 1];
    if (c === "/" && n === "/") {
      const j = t.indexOf("\n", i);
      skipTo(j < 0 ? t.length : j);
    } else if (c === "/" && n === "*") {
      let depth = 1;
      let j = i + 2;
      while (j < t.length && depth) {
        if (t[j] === "/" && t[j + 1] === "*") (depth++, (j += 2));
        else if (t[j] === "*" && t[j + 1] === "/") (depth--, (j += 2));
        else j++;
      }
      skipTo(j);
    } else if (c === "r" && /[#"]/.test(n) && !/\w/.test(t[i - 1] || "")) {
      let j = i + 1;
      let hashes = "";
      while (t[j] === "#") (hashes += "#"), j++;
      if (t[j] !== '"') {
        out += c;
        i++;
        continue;
      }
      const end = t.indexOf('"' + hashes, j + 1);
      skipTo(end < 0 ? t.length : end + 1 + hashes.length);
    } else if (c === '"') {
      let j = i + 1;
      while (j < t.length && t[j] !== '"') j += t[j] === "\\" ? 2 : 1;
      skipTo(j + 1);
    } else if (c === "'" && (n === "\\" || t[i + 2] === "'")) {
      const j = t.indexOf("'", i + 2);
      skipTo(j + 1);
    } else {
      out += c;
      i++;
    }
  }
  return out;
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

const rank = layers();
const problems = [];
const edges = new Map();
const used = new Set();
for (const file of rustFiles(src)) {
  const rel = relative(src, file);
  const from = rel.split("/")[0].replace(/\.rs$/, "");
  if (from === "lib" || from === "main") continue;
  if (!rank.has(from)) problems.push(`src/${rel}: module \`${from}\` is in no layer of src/lib.rs's order`);
  const text = code(readFileSync(file, "utf8"));
  for (const m of text.matchAll(/\bcrate::(?=[\w{])/g)) {
    const at = m.index + m[0].length;
    const line = text.slice(0, at).split("\n").length;
    for (const to of targets(text, at)) {
      if (to === from || !rank.has(to)) continue; // Items of lib.rs itself (error_chain) sit below every layer.
      const where = `src/${rel}:${line}`;
      if (!edges.has(from)) edges.set(from, new Map());
      if (!edges.get(from).has(to)) edges.get(from).set(to, where);
      if (rank.get(to) <= rank.get(from)) continue;
      const key = `${from} -> ${to}`;
      if (KNOWN.has(key)) used.add(key);
      else problems.push(`${where}: \`${from}\` imports \`${to}\`, a later layer (src/lib.rs's order)`);
    }
  }
}
for (const key of KNOWN.keys()) if (!used.has(key)) problems.push(`.ci/layers.mjs: known exception \`${key}\` no longer occurs: remove it`);

// Cycles between top-level modules (inside one layer, or through a known exception).
const state = new Map();
const stack = [];
function visit(m) {
  state.set(m, "open");
  stack.push(m);
  for (const [to, where] of edges.get(m) || []) {
    if (state.get(to) === "open") {
      const cycle = stack.slice(stack.indexOf(to)).concat(to).join(" -> ");
      problems.push(`${where}: an import cycle: ${cycle}`);
    } else if (!state.has(to)) visit(to);
  }
  stack.pop();
  state.set(m, "done");
}
for (const m of [...edges.keys()].sort()) if (!state.has(m)) visit(m);

for (const p of problems) console.log(p);
if (problems.length) {
  console.log(`layers: ${problems.length} problem(s)`);
  process.exit(1);
}
console.log(`layers: ${rank.size} modules in ${new Set(rank.values()).size} layers, no upward import, no cycle`);
