#!/usr/bin/env node
// `dcp` for `npx dcp-opencode …` and `npm install -g dcp-opencode`: runs the binary the plugin
// would run (binary.js) with the same arguments, e.g. `npx dcp-opencode doctor`. OpenCode
// never loads this file: its entry is index.js.

import { spawnSync } from "node:child_process";
import { findBinary } from "./binary.js";

const found = findBinary();
if (!found.path) {
  console.error(`dcp: no dcp binary found (looked for ${found.tried})`);
  process.exit(1);
}
const run = spawnSync(found.path, process.argv.slice(2), { stdio: "inherit" });
if (run.error) {
  console.error(`dcp: cannot run ${found.path}: ${run.error.message}`);
  process.exit(1);
}
process.exit(run.status ?? 1);
