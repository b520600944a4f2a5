#!/usr/bin/env node
// One name, one thing (issue 39): no two public types under src/ share a name. Reads every
// `pub` (or `pub(crate)`, `pub(super)`, `pub(in path)`) struct, enum, union, type alias and
// trait defined in src/ (comments and strings are skipped) and fails on a name defined more
// than once, even in one file: a type that differs by platform keeps one definition and puts
// the `#[cfg]` on its fields. A private type may share a name; a public one is read from other
// files, where a shared name leaves the reader to find out which one is meant. Prints each
// name defined twice as `name: path:line, path:line` and exits 1 if there is one. Before it
// reads src/ it checks itself on planted files (a duplicate in two files, one in a nested
// visibility, a name in a comment or a string that is no definition) and fails if it is wrong
// on one. Run it from anywhere: `node .ci/names.mjs`. `.ci/run` runs it.
import { readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { code, rustFiles } from "./rust-source.mjs";

const root = join(fileURLToPath(import.meta.url), "..", "..");

const DEFINITION = /^[ \t]*pub(?:\([^)]*\))?[ \t]+(?:struct|enum|union|type|trait)[ \t]+([A-Za-z_][A-Za-z0-9_]*)/gm;

// `files`: [path, text] pairs. Returns each name defined more than once, with where.
function duplicates(files) {
  const where = new Map();
  for (const [path, text] of files) {
    const blank = code(text);
    for (const m of blank.matchAll(DEFINITION)) {
      const line = blank.slice(0, m.index).split("\n").length;
      if (!where.has(m[1])) where.set(m[1], []);
      where.get(m[1]).push(`${path}:${line}`);
    }
  }
  return [...where].filter(([, at]) => at.length > 1).map(([name, at]) => `${name}: ${at.join(", ")}`);
}

// The check on planted files: each duplicate must be found, and a clean set must pass.
function selfTest() {
  const clean = [
    ["a.rs", "pub struct Usage {}\n// pub struct Report {}\nconst S: &str = \"pub enum Report {}\";\nstruct Private;\n"],
    ["b.rs", "pub enum Report { A }\nstruct Private;\npub fn usage() {}\n"],
  ];
  const planted = [
    ["a duplicate in two files", [...clean, ["c.rs", "  pub struct Usage {\n}\n"]], "Usage: a.rs:1, c.rs:1"],
    ["a duplicate behind a nested visibility", [...clean, ["d.rs", "\npub(in crate::x) type Report = u8;\n"]], "Report: b.rs:1, d.rs:2"],
    ["a duplicate by platform in one file", [["e.rs", "#[cfg(unix)]\npub struct W;\n#[cfg(not(unix))]\npub struct W;\n"]], "W: e.rs:2, e.rs:4"],
  ];
  const failures = [];
  const found = duplicates(clean);
  if (found.length) failures.push(`the clean planted files fail: ${found.join("; ")}`);
  for (const [what, files, expect] of planted) {
    const got = duplicates(files);
    if (got.join("\n") !== expect) failures.push(`${what}: expected \`${expect}\`, got \`${got.join("; ")}\``);
  }
  return failures;
}

const failures = selfTest();
if (failures.length) {
  for (const f of failures) console.error(`names.mjs self-test: ${f}`);
  process.exit(1);
}
const files = [...rustFiles(join(root, "src"))].sort().map((p) => [relative(root, p), readFileSync(p, "utf8")]);
const found = duplicates(files);
for (const f of found) console.error(`${f}: a public type's name is defined twice; give each a name that says what it holds`);
if (found.length) process.exit(1);
console.log(`names: ${files.length} files, every public type's name defined once`);
