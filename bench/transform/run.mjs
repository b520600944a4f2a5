// Times one plugin's `experimental.chat.messages.transform` hook on a session made by
// `dcp-testkit gen session`: the first request on the whole history, then the steady state as the
// generated steps are appended one at a time. `--plugin ours` loads this repository's
// plugin/index.js (which drives `dcp serve`); `--plugin published` loads the published DCP
// plugin installed here by `npm install` (it is AGPL: it is called, never copied). Both are
// loaded and called the way OpenCode does it, with a stub client, inside a private temp
// HOME/XDG tree so nothing touches the real user's files. Prints one JSON line of results.
//
// OpenCode builds fresh message objects from its database for every request, so each call
// gets a deep copy (structuredClone, outside the timed region, followed by a minor GC so the
// copy's garbage is not collected inside the timed call); only the hook call is timed.
//
//   node run.mjs --plugin ours|published --session FILE [--steps N] [--budget-s S] [--min-steps M]
//                [--first-runs F] [--bin PATH] [--digests]
//
// --digests adds `digests` to the result: a digest of what each call handed on (the first
// request's, then each step's), to check that two binaries answer alike.
// --steps caps the steady-state steps; --budget-s stops the steady state once it has run that
// long, after at least --min-steps steps (default 20), so a slow plugin does not hold a
// benchmark run for hours.

import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { performance, PerformanceObserver } from "node:perf_hooks";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, "..", "..");

function parseArgs(argv) {
  const args = {
    plugin: "ours",
    session: null,
    steps: Infinity,
    budgetS: Infinity,
    minSteps: 20,
    firstRuns: 3,
    bin: join(repo, "target", "release", "dcp"),
  };
  for (let i = 0; i < argv.length; i++) {
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${argv[i]} needs a value`);
      return argv[++i];
    };
    switch (argv[i]) {
      case "--plugin": args.plugin = value(); break;
      case "--session": args.session = value(); break;
      case "--steps": args.steps = Number(value()); break;
      case "--budget-s": args.budgetS = Number(value()); break;
      case "--min-steps": args.minSteps = Number(value()); break;
      case "--first-runs": args.firstRuns = Math.max(1, Number(value())); break;
      case "--bin": args.bin = resolve(value()); break;
      case "--digests": args.digests = true; break;
      default: throw new Error(`unknown argument ${argv[i]}`);
    }
  }
  if (!["ours", "published"].includes(args.plugin)) throw new Error("--plugin is ours or published");
  if (!args.session) throw new Error("--session FILE is required");
  return args;
}

const PLACEHOLDERS = ["[Output removed", "[input removed", "[content removed"];

/** Tool parts whose output or an input the plugin replaced with a placeholder. */
function countPruned(messages) {
  let n = 0;
  for (const m of messages) {
    for (const p of m?.parts ?? []) {
      if (p?.type !== "tool" || !p.state) continue;
      const strings = [p.state.output, ...Object.values(p.state.input ?? {})];
      if (strings.some((s) => typeof s === "string" && PLACEHOLDERS.some((h) => s.startsWith(h)))) n++;
    }
  }
  return n;
}

/** The history with every session id replaced, so each fresh instance sees a new session. */
/** A short digest of what the model would be sent, for `--digests`: two binaries that answer
 * alike give the same digests. */
function digest(messages) {
  return createHash("sha256").update(JSON.stringify(messages)).digest("hex").slice(0, 16);
}

function withSession(messages, id) {
  for (const m of messages) {
    if (m.info) m.info.sessionID = id;
    for (const p of m.parts ?? []) p.sessionID = id;
  }
  return messages;
}

/** A minor garbage collection, outside the timed region. The copy just made fills node's
 * young generation (18 MB at 2,000 messages), and the scavenge it calls for would otherwise
 * run inside the next timed call, at whatever allocation tips it: measured at 2,000
 * messages, it made up about 6 ms of a 9 ms steady step. OpenCode loads the messages it
 * hands the hook from its database, and that garbage is its own. Needs `node --expose-gc`
 * (the bench passes it); without it nothing is collected. */
function collectCopy() {
  globalThis.gc?.({ type: "minor" });
}

function quantile(sorted, q) {
  if (!sorted.length) return null;
  // Nearest rank: the smallest value with at least q of the samples at or below it.
  const rank = Math.max(1, Math.ceil(q * sorted.length));
  return sorted[rank - 1];
}

const round = (ms) => (ms == null ? null : Math.round(ms * 1000) / 1000);

/** Pids of the dcp sidecars: this process's children whose command line is `… serve`, or,
 * when `--bin` is a wrapper that runs dcp as its own child (`perf stat -- dcp serve`), that
 * child, so that the CPU read is dcp's own. */
function sidecarPids() {
  const serving = new Map();
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      // The command name is in parentheses and may hold spaces: the ppid follows the last ")".
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      const argv = readFileSync(`/proc/${name}/cmdline`, "utf8").split("\0");
      if (argv.includes("serve")) serving.set(Number(name), ppid);
    } catch {
      // The process exited while we looked.
    }
  }
  const pids = new Set();
  for (const [pid, ppid] of serving) {
    if (ppid !== process.pid) continue;
    const child = [...serving].find(([, parent]) => parent === pid);
    pids.add(child ? child[0] : pid);
  }
  return pids;
}

/** CPU time the process has used, in milliseconds (utime + stime; Linux counts in 1/100 s). */
function cpuMs(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    // Fields 14 and 15 of stat(5), counted from the state field, which is field 3.
    return (Number(fields[11]) + Number(fields[12])) * 10;
  } catch {
    return null;
  }
}

/** CPU time of each thread of `pid` so far, in milliseconds, by thread: `main` for the
 * process's first thread, the others by their name (summed when several share one). */
function threadCpuMs(pid) {
  const out = {};
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      const name = tid === String(pid) ? "main" : readFileSync(`/proc/${pid}/task/${tid}/comm`, "utf8").trim();
      const ms = cpuMs(`${pid}/task/${tid}`);
      if (ms !== null) out[name] = (out[name] ?? 0) + ms;
    }
  } catch {
    return null;
  }
  return out;
}

/** Resolves once none of `pids` is running any more (or after `ms`). */
async function waitGone(pids, ms) {
  const deadline = performance.now() + ms;
  const running = (pid) => {
    try {
      // A zombie (state Z) has exited but is not reaped yet: it writes nothing more.
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) !== "Z";
    } catch {
      return false;
    }
  };
  while (pids.some(running) && performance.now() < deadline) await new Promise((r) => setTimeout(r, 20));
}

function statusKb(pid, field) {
  try {
    const m = new RegExp(`${field}:\\s+(\\d+) kB`).exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

/** Peak RSS. */
function peakRssKb(pid) {
  return statusKb(pid, "VmHWM");
}

/** A private HOME and XDG tree, set before either plugin is imported: the published one
 * computes its paths when its module loads. Returns the sandbox and the project directory. */
function setUpSandbox(args) {
  const sandbox = mkdtempSync(join(tmpdir(), "dcp-bench-"));
  const project = join(sandbox, "project");
  for (const d of ["home", "data", "config/opencode", "project"]) mkdirSync(join(sandbox, d), { recursive: true });
  process.env.HOME = join(sandbox, "home");
  process.env.XDG_DATA_HOME = join(sandbox, "data");
  process.env.XDG_CONFIG_HOME = join(sandbox, "config");
  for (const v of ["OPENCODE_CONFIG_DIR", "OPENCODE_DB", "OPENCODE_SERVER_PASSWORD"]) delete process.env[v];
  process.env.DCP_BIN = args.bin;
  // A first request on a huge history may take longer than the plugin's 3 s default; the
  // bench wants the real time, not a pass-through.
  process.env.DCP_TIMEOUT_MS = process.env.DCP_TIMEOUT_MS || "600000";
  if (args.plugin === "published") {
    // Its auto-update would query the registry and could replace the installed package.
    writeFileSync(join(sandbox, "config/opencode/dcp.jsonc"), JSON.stringify({ autoUpdate: false }) + "\n");
  }
  return { sandbox, project };
}

/** The context OpenCode hands a plugin, with cheap no-op stubs. The warnings and errors the
 * plugin logs go to a fresh `log.warnings`, so those reported are the last instance's. */
function newContext(project, log) {
  const logged = (log.warnings = []);
  const ok = async () => ({ data: {} });
  const client = {
    app: {
      log: async (opts) => {
        if (opts?.body?.level === "warn" || opts?.body?.level === "error") logged.push(opts.body.message);
        return {};
      },
    },
    session: {
      get: async () => ({ data: { parentID: null } }),
      prompt: ok,
      abort: ok,
      messages: async () => ({ data: [] }),
    },
    tui: { showToast: ok },
  };
  return {
    client,
    project: { id: "bench", worktree: project, time: { created: 0 } },
    directory: project,
    worktree: project,
    experimental_workspace: { register() {} },
    serverUrl: new URL("http://127.0.0.1:4096"),
    $: () => {
      throw new Error("no shell in the bench");
    },
  };
}

/** Imports the plugin and returns a function that makes a fresh instance of it and returns
 * that instance's transform hook. */
async function loadPlugin(args, project, log) {
  const entry = args.plugin === "ours" ? pathToFileURL(join(repo, "plugin", "index.js")).href : "@tarquinen/opencode-dcp";
  const mod = await import(entry);
  // As OpenCode does: call every exported plugin function once and merge the hooks.
  const plugins = [...new Set(Object.values(mod).filter((f) => typeof f === "function"))];
  return async () => {
    const ctx = newContext(project, log);
    const hooks = {};
    for (const plugin of plugins) Object.assign(hooks, await plugin(ctx));
    const transform = hooks["experimental.chat.messages.transform"];
    if (!transform) throw new Error(`${args.plugin}: no experimental.chat.messages.transform hook`);
    return transform;
  };
}

/** First request: a fresh plugin instance on a fresh session, `--first-runs` times. Only the
 * last instance goes on to the steady state; its transform, sidecar and session are returned. */
async function firstRequests(args, instance, session) {
  const first = { runs: [], transform: null, sidecar: null, pruned: 0, sessionID: session.sessionID };
  for (let run = 0; run < args.firstRuns; run++) {
    const before = sidecarPids();
    first.transform = await instance();
    const started = [...sidecarPids()].filter((p) => !before.has(p));
    first.sessionID = `${session.sessionID.slice(0, -3)}r${String(run).padStart(2, "0")}`;
    const output = { messages: withSession(structuredClone(session.messages), first.sessionID) };
    collectCopy();
    const t0 = performance.now();
    await first.transform({}, output);
    first.runs.push(performance.now() - t0);
    first.pruned = countPruned(output.messages);
    if (args.digests) first.digests = [digest(output.messages)];
    if (run < args.firstRuns - 1) {
      // Stop the sidecars of the instances that do not go on.
      for (const pid of started) try { process.kill(pid, "SIGTERM"); } catch {}
    } else {
      first.sidecar = started[0] ?? null;
    }
  }
  return first;
}

/** Node's garbage collections from now on, as [start, end] pairs; `stop()` returns them once
 * the observer has seen the last ones. */
function watchGc() {
  const gcs = [];
  const observer = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) gcs.push([e.startTime, e.startTime + e.duration]);
  });
  observer.observe({ entryTypes: ["gc"] });
  return {
    stop: async () => {
      await new Promise((r) => setTimeout(r, 50));
      observer.disconnect();
      return gcs;
    },
  };
}

/** The sidecar's CPU time and peak RSS now, then its RSS and peak again `settleMs` later (all
 * null without a sidecar). */
async function sidecarProbe(pid, settleMs) {
  if (!pid) return { cpu: null, peak: null, rss: null, settledPeak: null };
  const cpu = cpuMs(pid);
  const threads = threadCpuMs(pid);
  const peak = peakRssKb(pid);
  await new Promise((r) => setTimeout(r, settleMs));
  return { cpu, threads, peak, rss: statusKb(pid, "VmRSS"), settledPeak: peakRssKb(pid) };
}

/** Steady state: the steps appended one by one, the hook called after each, until `--steps`
 * ran out or `--budget-s` is spent (after at least `--min-steps`). */
async function steadyState(args, first, session) {
  const steps = session.steps.slice(0, Number.isFinite(args.steps) ? args.steps : undefined);
  const current = withSession(structuredClone(session.messages), first.sessionID);
  // Where each timed call ran, to match node's garbage collections against it afterwards.
  const steady = { times: [], windows: [], copies: [], stopped: false, pruned: first.pruned, appended: 0 };
  const gc = watchGc();
  // Resident memory once the first request is answered and counted ahead, to see what the
  // steps add to it: it should grow with what is new, not with the history.
  const before = await sidecarProbe(first.sidecar, 2000);
  let lastOutput = null;
  const start = performance.now();
  for (let i = 0; i < steps.length; i++) {
    if (i >= args.minSteps && performance.now() - start > args.budgetS * 1000) {
      steady.stopped = true;
      break;
    }
    // Only the last step's result is kept, to count its placeholders after the loop.
    lastOutput = null;
    current.push(...withSession(structuredClone(steps[i]), first.sessionID));
    const c0 = performance.now();
    const output = { messages: structuredClone(current) };
    steady.copies.push(performance.now() - c0);
    collectCopy();
    const sent = output.messages.length;
    const t0 = performance.now();
    await first.transform({}, output);
    const t1 = performance.now();
    steady.times.push(t1 - t0);
    steady.windows.push([t0, t1]);
    steady.appended = output.messages.length - sent;
    if (args.digests) first.digests.push(digest(output.messages));
    lastOutput = output;
  }
  if (lastOutput) steady.pruned = countPruned(lastOutput.messages);
  lastOutput = null;
  const gcs = await gc.stop();
  // The steps a collection ran inside.
  steady.withGc = steady.windows.map(([a, b]) => gcs.some(([s, e]) => s < b && e > a));
  const after = await sidecarProbe(first.sidecar, 2000);
  Object.assign(steady, { cpuBefore: before.cpu, peakFirst: before.settledPeak, rssBefore: before.rss });
  Object.assign(steady, { cpuAfter: after.cpu, peak: after.peak, rssAfter: after.rss });
  Object.assign(steady, { threadsBefore: before.threads, threadsAfter: after.threads });
  return steady;
}

/** The one JSON line of results. */
function report(args, session, first, steady, log) {
  const { times, withGc } = steady;
  const sorted = [...times].sort((a, b) => a - b);
  const clean = times.filter((_, i) => !withGc[i]).sort((a, b) => a - b);
  const slow = times.map((t, i) => [t, withGc[i]]).filter(([t]) => t > 5);
  const result = {
    plugin: args.plugin,
    messages: session.messages.length,
    first_ms: round(quantile([...first.runs].sort((a, b) => a - b), 0.5)),
    first_runs_ms: first.runs.map(round),
    steady_p50_ms: round(quantile(sorted, 0.5)),
    steady_p99_ms: round(quantile(sorted, 0.99)),
    steady_max_ms: round(sorted[sorted.length - 1] ?? null),
    // Steps during which node collected garbage (the bench's copies, OpenCode's in real use),
    // and the percentiles of the others.
    steady_steps_with_gc: withGc.filter(Boolean).length,
    steady_slow_steps: slow.length,
    steady_slow_steps_with_gc: slow.filter(([, gc]) => gc).length,
    steady_p50_without_gc_ms: round(quantile(clean, 0.5)),
    steady_p99_without_gc_ms: round(quantile(clean, 0.99)),
    // What it takes node to copy the history once: a floor for what OpenCode spends handing
    // the hook fresh objects on every request.
    copy_p50_ms: round(quantile([...steady.copies].sort((a, b) => a - b), 0.5)),
    steps: times.length,
    steps_stopped_by_budget: steady.stopped,
    pruned_first: first.pruned,
    pruned_last: steady.pruned,
    appended_last: steady.appended,
    warnings: [...new Set(log.warnings)].slice(0, 5),
  };
  if (args.plugin === "ours") Object.assign(result, sidecarReport(first.sidecar, steady));
  return result;
}

/** The sidecar's fields of the results (dcp's plugin only). */
function sidecarReport(pid, steady) {
  const { cpuBefore, cpuAfter, times } = steady;
  return {
    sidecar_pid: pid,
    sidecar_peak_rss_kb: steady.peak,
    sidecar_peak_rss_first_kb: steady.peakFirst,
    sidecar_rss_before_steps_kb: steady.rssBefore,
    sidecar_rss_after_steps_kb: steady.rssAfter,
    // How much of a step is the sidecar's own work (the rest is node: encoding, JSON, edits).
    sidecar_cpu_ms_per_step:
      cpuBefore != null && cpuAfter != null && times.length ? round((cpuAfter - cpuBefore) / times.length) : null,
    // The same by thread: `main` answers and counts ahead, the tokio worker saves.
    sidecar_cpu_ms_per_step_by_thread: perThread(steady.threadsBefore, steady.threadsAfter, times.length),
  };
}

/** The CPU milliseconds per step of each thread between two `threadCpuMs` readings. */
function perThread(before, after, steps) {
  if (!before || !after || !steps) return null;
  return Object.fromEntries(Object.entries(after).map(([name, ms]) => [name, round((ms - (before[name] ?? 0)) / steps)]));
}

/** Stops the sidecars still running and removes the sandbox. */
async function cleanUp(sandbox) {
  const left = [...sidecarPids()];
  for (const pid of left) try { process.kill(pid, "SIGTERM"); } catch {}
  // Wait for them to be gone, or a late state save would recreate the temp dir after it is removed.
  await waitGone(left, 3000);
  try {
    rmSync(sandbox, { recursive: true, force: true });
  } catch {}
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const session = JSON.parse(readFileSync(args.session, "utf8"));
  const { sandbox, project } = setUpSandbox(args);
  const log = { warnings: [] };
  const instance = await loadPlugin(args, project, log);
  const first = await firstRequests(args, instance, session);
  const steady = await steadyState(args, first, session);
  const result = report(args, session, first, steady, log);
  if (args.digests) result.digests = first.digests;
  process.stdout.write(JSON.stringify(result) + "\n");
  await cleanUp(sandbox);
  process.exit(0);
}

main().catch((e) => {
  process.stderr.write(`run.mjs: ${e?.stack ?? e}\n`);
  process.exit(1);
});
