#!/usr/bin/env node
// docs/layout.md names every file (issue 39): each Rust source under src/ and each JavaScript
// source of plugin/ must be named, in backticks, in the row of docs/layout.md's table that
// holds its top-level module (`src/sidecar/`, `src/policy.rs`, `plugin/`). A file is named by
// its path below that module (`stream/scanner.rs`) or by its own name (`scanner.rs`); a
// module's `mod.rs` may be named as the module's own (`mod.rs`, or `src/x/` alone when the
// module has no other file). Prints each file it misses as `path: not named in docs/layout.md`
// and exits 1 if there is one. Before it reads the repository it checks itself on a planted
// table. Run it from anywhere: `node .ci/layout.mjs`. `.ci/run` runs it.
import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(fileURLToPath(import.meta.url), "..", "..");

function* files(dir, ext) {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, e.name);
    if (e.isDirectory() && e.name !== "node_modules" && e.name !== "test") yield* files(path, ext);
    else if (e.isFile() && path.endsWith(ext)) yield path;
  }
}

// The table's rows: for each, the module paths its first cell names and the backticked names
// of the whole row.
function rows(layout) {
  const out = [];
  for (const line of layout.split("\n")) {
    if (!line.startsWith("| ") || line.startsWith("|---")) continue;
    const first = line.split("|")[1] || "";
    const heads = [...first.matchAll(/`([^`]+)`/g)].map((m) => m[1]);
    const names = new Set([...line.matchAll(/`([^`]+)`/g)].map((m) => m[1]));
    out.push({ heads, names });
  }
  return out;
}

// Whether `rel` (a path from the repository's root) is named by a row of `table`: a row whose
// first cell names the file's top-level module, and which names the file by any tail of its
// path (`src/sidecar/stream/scanner.rs`, `stream/scanner.rs`, `scanner.rs`).
function named(rel, table) {
  const parts = rel.split("/");
  // The module: src/x.rs or src/x/ (src/x.rs's children are in src/x/), plugin/.
  const top = parts[0] === "src" ? (parts.length === 2 ? rel : `src/${parts[1]}/`) : `${parts[0]}/`;
  const tails = parts.map((_, i) => parts.slice(i).join("/"));
  for (const { heads, names } of table) {
    const covers = heads.some((h) => h === top || h.replace(/\.rs$/, "/") === top || h.startsWith(top) || top.startsWith(h));
    if (!covers) continue;
    if (heads.includes(rel) || tails.some((t) => names.has(t))) return true;
    // A module's `mod.rs` is what its own row describes.
    if (parts[parts.length - 1] === "mod.rs" && heads.includes(`${parts.slice(0, -1).join("/")}/`)) return true;
  }
  return false;
}

function missing(paths, layout) {
  const table = rows(layout);
  return paths.filter((p) => !named(p, table));
}

function selfCheck() {
  const layout = [
    "| module | owns |",
    "|---|---|",
    "| `src/a/` | the server (`mod.rs`), its parts (`b.rs`, `c/d.rs`) |",
    "| `src/e.rs` | e |",
  ].join("\n");
  const fails = [];
  const ok = ["src/a/mod.rs", "src/a/b.rs", "src/a/c/d.rs", "src/e.rs"];
  if (missing(ok, layout).length) fails.push(`named files are reported: ${missing(ok, layout).join(", ")}`);
  if (!missing(["src/a/x.rs"], layout).length) fails.push("a file the table does not name is not reported");
  if (!missing(["src/f.rs"], layout).length) fails.push("a module the table does not name is not reported");
  return fails;
}

const selfFails = selfCheck();
if (selfFails.length) {
  for (const f of selfFails) console.log(`.ci/layout.mjs self-check: ${f}`);
  process.exit(1);
}
const layout = readFileSync(join(root, "docs/layout.md"), "utf8");
const paths = [...files(join(root, "src"), ".rs"), ...files(join(root, "plugin"), ".js")].map((p) => relative(root, p));
const gaps = missing(paths.sort(), layout);
for (const g of gaps) console.log(`${g}: not named in docs/layout.md`);
if (gaps.length) {
  console.log(`layout: ${gaps.length} of ${paths.length} files not named`);
  process.exit(1);
}
console.log(`layout: docs/layout.md names all ${paths.length} files of src/ and plugin/`);
