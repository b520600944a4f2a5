// Where the plugin's first request goes, phase by phase: the plugin's own pieces (encode.js,
// sidecar.js, edits.js) driven as hooks.js drives them, on a session made by `dcp-testkit gen
// session`, against a fresh `dcp serve` in a private temp HOME/XDG tree. Prints one line of
// milliseconds: the line written (the plugin encodes and writes it message by message, as the
// sidecar reads it: until the pipe took its last byte), the answer after that, and resolving
// and applying the edits. `--line-out FILE` also writes the `initialize` and `transform` lines,
// to feed `dcp serve < FILE` alone, its project the file's folder (under `perf` or `/usr/bin/time -v`).
//
//   node --max-old-space-size=8192 first.mjs --session FILE [--bin PATH] [--line-out FILE]

import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

function parseArgs(argv) {
  const args = { session: null, bin: join(repo, "target", "release", "dcp"), lineOut: null };
  for (let i = 0; i < argv.length; i += 2) {
    if (i + 1 >= argv.length) throw new Error(`${argv[i]} needs a value`);
    if (argv[i] === "--session") args.session = argv[i + 1];
    else if (argv[i] === "--bin") args.bin = resolve(argv[i + 1]);
    else if (argv[i] === "--line-out") args.lineOut = argv[i + 1];
    else throw new Error(`unknown argument ${argv[i]}`);
  }
  if (!args.session) throw new Error("--session FILE is required");
  return args;
}

/** A private HOME and XDG tree, and the project directory; set before the plugin loads. */
function sandbox(bin) {
  const root = mkdtempSync(join(tmpdir(), "dcp-first-"));
  for (const d of ["home", "data", "config", "project"]) mkdirSync(join(root, d), { recursive: true });
  Object.assign(process.env, { HOME: join(root, "home"), XDG_DATA_HOME: join(root, "data"), XDG_CONFIG_HOME: join(root, "config") });
  Object.assign(process.env, { DCP_BIN: bin, DCP_TIMEOUT_MS: "600000" });
  return root;
}

/** Wraps the child's stdin so that `pipe.done` is when it took the last byte of the last write. */
function watchPipe(child) {
  const write = child.stdin.write.bind(child.stdin);
  const pipe = { began: 0, done: 0, writes: 0 };
  child.stdin.write = (chunk) => {
    if (!pipe.writes++) pipe.began = performance.now();
    return write(chunk, () => (pipe.done = performance.now()));
  };
  return pipe;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const root = sandbox(args.bin);
  const { encodeEach, SentCache } = await import(join(repo, "plugin", "encode.js"));
  const { Sidecar } = await import(join(repo, "plugin", "sidecar.js"));
  const { applyEdits, resolveEdits } = await import(join(repo, "plugin", "edits.js"));
  const session = JSON.parse(readFileSync(args.session, "utf8"));
  const messages = structuredClone(session.messages);
  const sidecar = new Sidecar((level, text) => level === "warn" && process.stderr.write(`${text}\n`), join(root, "project"));
  sidecar.start();
  await sidecar.ready;
  const pipe = watchPipe(sidecar.child);
  const t = [performance.now()];
  const cache = new SentCache().session(session.sessionID, sidecar.generation);
  const request = { sessionID: session.sessionID, compaction: false, ...encodeEach(messages, cache) };
  t.push(performance.now());
  const answer = await sidecar.call("transform", request);
  t.push(performance.now());
  const result = resolveEdits(cache, answer);
  t.push(performance.now());
  applyEdits(messages, result);
  t.push(performance.now());
  const ms = (a, b) => Math.round(b - a);
  const line = JSON.stringify({ jsonrpc: "2.0", id: 2, method: "transform", params: request });
  const phases = {
    line_written_ms: ms(t[0], pipe.done),
    pipe_writes: pipe.writes,
    answer_after_line_ms: ms(pipe.done, t[2]),
    call_ms: ms(t[1], t[2]),
    resolve_edits_ms: ms(t[2], t[3]),
    apply_edits_ms: ms(t[3], t[4]),
    first_request_ms: ms(t[0], t[4]),
    line_bytes: Buffer.byteLength(line),
  };
  if (args.lineOut) {
    // The project is the line file's folder: the sandbox is gone when the line is fed.
    const directory = dirname(resolve(args.lineOut));
    const init = { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocol: 1, directory } };
    writeFileSync(args.lineOut, `${JSON.stringify(init)}\n${line}\n`);
  }
  process.stdout.write(`${JSON.stringify(phases)}\n`);
  // Its exit is expected: not a warning.
  sidecar.log = () => {};
  sidecar.child.kill("SIGTERM");
  setTimeout(() => {
    rmSync(root, { recursive: true, force: true });
    process.exit(0);
  }, 500);
}

main().catch((e) => {
  process.stderr.write(`first.mjs: ${e?.stack ?? e}\n`);
  process.exit(1);
});
