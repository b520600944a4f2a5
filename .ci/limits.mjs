#!/usr/bin/env node
// The size limits of issue 16: no source file over 500 lines, no function over 60 lines, in
// every Rust, JavaScript and Python source the repository holds: src/, plugin/, tests/, crates/,
// benches/ (the Rust benches), bench/ (the JavaScript benches and the suite's Python), fuzz/,
// fixtures/ (the Python that records them), .ci/ and the root build.rs. Prints each breach as
// `path:line: what` and exits 1 if there is one. Run it from anywhere:
//
//     node .ci/limits.mjs            # the limits
//     FILE_LIMIT=400 FN_LIMIT=40 node .ci/limits.mjs   # to see what comes next
//
// A function is counted from the line of its `fn`/`function` to the line of its closing brace,
// both included, doc comments not; a Python `def`, to its last line before the next statement
// indented no deeper than the `def`. Braces inside strings, chars and comments are ignored; the
// scan is lexical, not a parser, so a function it cannot see (a closure, an arrow function
// passed as an argument) is not measured. `.ci/run` runs it.
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(fileURLToPath(import.meta.url), "..", "..");
const FILE_LIMIT = Number(process.env.FILE_LIMIT || 500);
const FN_LIMIT = Number(process.env.FN_LIMIT || 60);
const ROOTS = ["src", "plugin", "tests", "crates", "benches", "bench", "fuzz", "fixtures", ".ci", "build.rs"];
const SKIP = new Set(["node_modules", "target", "snapshots"]);
const SOURCE = /\.(rs|js|mjs|py)$/;

// The sources under `dir`, or `dir` itself when it is a source file.
function* sources(dir) {
  if (SOURCE.test(dir) && existsSync(dir) && statSync(dir).isFile()) {
    yield dir;
    return;
  }
  let entries;
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return;
  }
  for (const e of entries) {
    const path = join(dir, e.name);
    if (e.isDirectory() && !SKIP.has(e.name)) yield* sources(path);
    else if (e.isFile() && SOURCE.test(e.name)) yield path;
  }
}

// The text with the insides of strings, chars and comments blanked (newlines kept), so that
// counting braces line by line sees only code.
function blank(text, rust) {
  let out = "";
  let i = 0;
  const keep = (c) => (c === "\n" ? "\n" : " ");
  while (i < text.length) {
    const c = text[i];
    const next = text[i + 1];
    if (c === "/" && next === "/") {
      while (i < text.length && text[i] !== "\n") (out += " "), i++;
    } else if (c === "/" && next === "*") {
      let depth = 0;
      do {
        if (text[i] === "/" && text[i + 1] === "*") depth++, (out += "  "), (i += 2);
        else if (text[i] === "*" && text[i + 1] === "/") depth--, (out += "  "), (i += 2);
        else (out += keep(text[i])), i++;
      } while (i < text.length && depth > 0);
    } else if (rust && c === "r" && /^r#*"/.test(text.slice(i, i + 20)) && !/\w/.test(text[i - 1] || "")) {
      const hashes = /^r(#*)"/.exec(text.slice(i))[1];
      const end = text.indexOf('"' + hashes, i + hashes.length + 2);
      const stop = end < 0 ? text.length : end + hashes.length + 1;
      for (; i < stop; i++) out += keep(text[i]);
    } else if (c === '"' || (!rust && (c === "'" || c === "`"))) {
      out += " ";
      i++;
      while (i < text.length && text[i] !== c) {
        if (text[i] === "\\") (out += " "), i++;
        out += keep(text[i] ?? "");
        i++;
      }
      out += " ";
      i++;
    } else if (rust && c === "'" && /^'(\\.[^']*|[^\\'\n])'/.test(text.slice(i, i + 12))) {
      const len = /^'(\\.[^']*|[^\\'\n])'/.exec(text.slice(i, i + 12))[0].length;
      out += " ".repeat(len);
      i += len;
    } else {
      out += c;
      i++;
    }
  }
  return out;
}

const RUST_FN = /^\s*(pub(\([^)]*\))?\s+)?((const|async|unsafe|extern "C")\s+)*fn\s+(\w+)/;
const JS_FN =
  /^\s*(export\s+)?(default\s+)?(async\s+)?function\s*\*?\s*(\w+)|^\s*(export\s+)?(const|let)\s+(\w+)\s*=\s*(async\s*)?(\([^)]*\)|\w+)\s*=>\s*\{\s*$|^\s*(async\s+)?(?!if\b|for\b|while\b|switch\b|catch\b)(\w+)\s*\([^)]*\)\s*\{\s*$/;

function functions(lines, rust) {
  const found = [];
  lines.forEach((line, start) => {
    const m = (rust ? RUST_FN : JS_FN).exec(line);
    if (!m) return;
    const name = rust ? m[5] : m[4] || m[7] || m[11];
    let depth = 0;
    let opened = false;
    for (let j = start; j < lines.length; j++) {
      for (const ch of lines[j]) {
        if (ch === "{") (depth++, (opened = true));
        else if (ch === "}") depth--;
        else if (ch === ";" && !opened) return; // a declaration without a body
      }
      if (opened && depth <= 0) {
        found.push({ name, line: start + 1, length: j - start + 1 });
        return;
      }
    }
  });
  return found;
}

// Python's functions. A line starts a statement unless it is blank, a comment, or inside
// brackets or a string that an earlier line opened.
const PY_FN = /^(\s*)(async\s+)?def\s+(\w+)/;

function pythonStatements(lines) {
  let depth = 0;
  let quote = null;
  return lines.map((line) => {
    const trimmed = line.trim();
    const starts = depth === 0 && quote === null && trimmed !== "" && !trimmed.startsWith("#");
    for (let i = 0; i < line.length; i++) {
      const c = line[i];
      if (quote) {
        if (c === "\\") i++;
        else if (line.startsWith(quote, i)) (i += quote.length - 1), (quote = null);
      } else if (c === "#") break;
      else if (c === '"' || c === "'") {
        quote = line.startsWith(c.repeat(3), i) ? c.repeat(3) : c;
        i += quote.length - 1;
      } else if ("([{".includes(c)) depth++;
      else if (")]}".includes(c)) depth--;
    }
    if (quote?.length === 1) quote = null; // a short string ends with its line
    return starts;
  });
}

function pythonFunctions(lines) {
  const starts = pythonStatements(lines);
  const indent = (line) => line.length - line.trimStart().length;
  const found = [];
  lines.forEach((line, start) => {
    const m = starts[start] && PY_FN.exec(line);
    if (!m) return;
    let end = start;
    for (let j = start + 1; j < lines.length; j++) {
      if (starts[j] && indent(lines[j]) <= m[1].length) break;
      const comment = lines[j].trim().startsWith("#") && indent(lines[j]) <= m[1].length;
      if (lines[j].trim() !== "" && !comment) end = j;
    }
    found.push({ name: m[3], line: start + 1, length: end - start + 1 });
  });
  return found;
}

let breaches = 0;
for (const dir of ROOTS) {
  for (const path of sources(join(root, dir))) {
    const text = readFileSync(path, "utf8");
    const shown = relative(root, path);
    const lines = text.split("\n");
    const count = text.endsWith("\n") ? lines.length - 1 : lines.length;
    if (count > FILE_LIMIT) {
      console.log(`${shown}: ${count} lines (limit ${FILE_LIMIT})`);
      breaches++;
    }
    const rust = path.endsWith(".rs");
    const found = path.endsWith(".py") ? pythonFunctions(lines) : functions(blank(text, rust).split("\n"), rust);
    for (const f of found) {
      if (f.length > FN_LIMIT) {
        console.log(`${shown}:${f.line}: fn ${f.name} is ${f.length} lines (limit ${FN_LIMIT})`);
        breaches++;
      }
    }
  }
}
if (breaches > 0) {
  console.log(`limits: ${breaches} over (files ${FILE_LIMIT} lines, functions ${FN_LIMIT} lines)`);
  process.exit(1);
}
console.log(`limits: no file over ${FILE_LIMIT} lines, no function over ${FN_LIMIT} lines`);
