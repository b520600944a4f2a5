// Times the plugin's delta encoder alone (plugin/encode.js's `encode`), against another copy of
// it, interleaved in one process so both see the same machine: the first request on a whole
// generated history, then the steady state as its steps are appended (each call gets a fresh
// copy, as OpenCode hands the plugin fresh objects; only `encode` is timed).
//
//   node bench/transform/encode.mjs --session FILE [--against DIR] [--rounds N] [--steps N]
//
// DIR holds the other `plugin/` (e.g. `git archive <rev> plugin | tar -x -C DIR`); without it,
// only this one is timed. Prints p50 and p99 per copy.
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseArgs } from "node:util";

const { values: args } = parseArgs({
  options: {
    session: { type: "string" },
    against: { type: "string" },
    rounds: { type: "string", default: "4" },
    steps: { type: "string", default: "60" },
  },
});
if (!args.session) throw new Error("--session FILE is required (see BENCHMARKS.md, The generated data)");
const repo = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const load = (dir) => import(pathToFileURL(join(dir, "plugin", "encode.js")).href);
const copies = { this: await load(repo) };
if (args.against) copies.against = await load(resolve(args.against));

const session = JSON.parse(readFileSync(args.session, "utf8"));
const steps = session.steps.slice(0, Number(args.steps));
const first = {};
const steady = {};
for (const name in copies) (first[name] = []), (steady[name] = []);
for (let r = 0; r < Number(args.rounds); r++) {
  const order = Object.keys(copies);
  if (r % 2) order.reverse();
  for (const name of order) {
    const { SentCache, encode } = copies[name];
    const cache = new SentCache().session(session.sessionID, 0);
    let history = structuredClone(session.messages);
    let t = performance.now();
    encode(history, cache);
    first[name].push(performance.now() - t);
    for (const step of steps) {
      history = structuredClone(history.concat(step));
      t = performance.now();
      encode(history, cache);
      steady[name].push(performance.now() - t);
    }
  }
}
const pct = (xs, p) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.ceil((p / 100) * xs.length) - 1)];
for (const name in copies) {
  const s = steady[name];
  console.log(
    `${name}: first request p50 ${pct(first[name], 50).toFixed(2)} ms; steady p50 ${pct(s, 50).toFixed(3)} ms, p99 ${pct(s, 99).toFixed(3)} ms (${s.length} steps)`,
  );
}
