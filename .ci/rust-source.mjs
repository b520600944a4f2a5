// Reading Rust sources for the checks in this directory (`layers.mjs`, `names.mjs`): the
// files under a directory, and their text with comments, strings and char literals blanked.
import { readdirSync } from "node:fs";
import { join } from "node:path";

export function* rustFiles(dir) {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, e.name);
    if (e.isDirectory()) yield* rustFiles(path);
    else if (path.endsWith(".rs")) yield path;
  }
}

// The text with comments, strings and char literals blanked (newlines kept, so lines still count).
export function code(t) {
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
