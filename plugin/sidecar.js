// The `dcp serve` child process: spawning it, one JSON-RPC line per request, and restarting
// it after any failure. A sidecar that fails is logged once and messages pass through. The
// user is told (`tell`) when dcp cannot run at all (no binary, an exit at start, an
// `initialize` refused) and when it keeps crashing.

import { spawn } from "node:child_process";
import { findBinary, PLUGIN_VERSION } from "./binary.js";
import { hasLazy, linePieces } from "./streamed.js";

export const PROTOCOL = 2;
const TIMEOUT_MS = Number(process.env.DCP_TIMEOUT_MS) || 3000;
// A sidecar that fails to start, or dies before its first answer, is not retried for this
// long; one that dies after answering is restarted on the next request.
const RESTART_BACKOFF_MS = 2000;
/** This many failures of a running sidecar within `CRASH_WINDOW_MS` are told to the user. */
const CRASHES_TOLD = 3;
const CRASH_WINDOW_MS = 10 * 60 * 1000;
/** The error code asking for the full history again (the sidecar was restarted). */
export const RESYNC = -32001;

/** A line made as it is written (`streamed.js`) is handed to the pipe this much at a time;
 * between two, the event loop lets the pipe take what it can while the next is made. */
const STREAM_BATCH_CHARS = 256 * 1024;

/** How a sidecar process ended: it ran and exited, or it could not be started at all. */
const Ended = Object.freeze({ EXITED: "exited", NOT_STARTED: "not started" });

/** Why `bin` could not be started, with what to do where that is clear. */
function spawnFailure(bin, e) {
  if (e?.code === "EACCES") return `cannot run ${bin}: it is not executable (permission denied): \`chmod +x\` it, or install it again`;
  return `cannot run ${bin}: ${e?.message ?? e}`;
}

/** One `dcp serve` child process, restarted on demand after any failure. */
/** Hands `onText` a stream's text in whole lines: a pipe may cut a line anywhere (a sidecar
 * writes `dcp: ` and its error in separate writes), and the first line says why it exited.
 * `end` hands over what is left without a newline. */
export function wholeLines(onText) {
  let partial = "";
  return {
    push: (chunk) => {
      partial += chunk;
      const cut = partial.lastIndexOf("\n");
      if (cut < 0) return;
      onText(partial.slice(0, cut));
      partial = partial.slice(cut + 1);
    },
    end: () => {
      if (partial) onText(partial);
      partial = "";
    },
  };
}

export class Sidecar {
  /** `log(level, text)` writes OpenCode's log; `tell(kind, text)` tells the user (not only
   * the log) about a problem they must fix. */
  constructor(log, directory, tell = (_kind, text) => log("warn", text)) {
    this.log = log;
    this.tell = tell;
    this.crashes = [];
    this.directory = directory;
    this.child = null;
    this.pending = new Map();
    this.nextId = 1;
    this.generation = 0;
    this.buffer = "";
    this.failedAt = 0;
    this.warned = new Set();
    /** The line being streamed, if one is: its child, and the lines to write after it. */
    this.streaming = null;
  }

  warnOnce(key, message) {
    if (this.warned.has(key)) return;
    this.warned.add(key);
    this.log("warn", message);
  }

  start() {
    if (this.child) return true;
    if (Date.now() - this.failedAt < RESTART_BACKOFF_MS) return false;
    const found = findBinary();
    const bin = found.path;
    if (!bin) {
      this.failedAt = Date.now();
      this.tell("binary", `dcp is off: the dcp binary was not found; looked for ${found.tried}.`);
      return false;
    }
    let child;
    try {
      child = spawn(bin, ["serve"], { stdio: ["pipe", "pipe", "pipe"], env: process.env });
    } catch (e) {
      this.fail(`cannot start ${bin}: ${e?.message ?? e}`);
      return false;
    }
    this.child = child;
    this.answered = false;
    this.generation += 1;
    this.buffer = "";
    this.stderrHead = null;
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (chunk) => this.onData(child, chunk));
    child.stderr.setEncoding("utf8");
    const stderr = wholeLines((text) => this.onStderr(child, text));
    child.stderr.on("data", stderr.push);
    child.stderr.on("end", stderr.end);
    child.on("error", (e) => this.onExit(child, spawnFailure(bin, e), Ended.NOT_STARTED));
    // `close`, not `exit`: it comes after the last of stderr, which holds the reason.
    child.on("close", (code, signal) => this.onExit(child, `sidecar exited (${signal ?? code})`));
    child.stdin.on("error", () => {});
    this.ready = this.call("initialize", { protocol: PROTOCOL, directory: this.directory, pluginVersion: PLUGIN_VERSION })
      .then((init) => {
        this.checkVersion(init, found);
        return init;
      })
      .catch((e) => {
        // An error the sidecar answered (a bad project config); exits and timeouts are told
        // where they are found.
        if (e?.code !== undefined) this.tell("initialize", `dcp is off: ${e.message}`);
        return null;
      });
    return true;
  }

  /** A plugin and a binary of different versions still talk (the protocol number is what
   * must match), but what one expects of the other may differ: the user is told once. */
  checkVersion(init, found) {
    const version = init?.version;
    if (!version || !PLUGIN_VERSION || version === PLUGIN_VERSION || this.warned.has("version")) return;
    this.warned.add("version");
    this.tell(
      "version",
      `dcp: the plugin is ${PLUGIN_VERSION} but the binary it runs is ${version} (${found.path}, from ${found.source}); ` +
        "install one version of both (`dcp doctor` shows which is where)",
    );
  }

  /** The sidecar's stderr: its warnings (`dcp: warning: …`) and errors go to OpenCode's log
   * at warn level, each text once per OpenCode process; the rest at debug level. The first
   * line is kept: it says why a sidecar that exits at start did. */
  onStderr(child, chunk) {
    for (const raw of chunk.split("\n")) {
      const line = raw.trim();
      if (!line) continue;
      if (child === this.child && this.stderrHead === null && !line.startsWith("dcp: warning:")) this.stderrHead = line;
      if (line.startsWith("dcp: ")) this.warnOnce(`stderr:${line}`, line);
      else this.log("debug", line);
    }
  }

  onData(child, chunk) {
    if (child !== this.child) return;
    this.buffer += chunk;
    let newline;
    while ((newline = this.buffer.indexOf("\n")) >= 0) {
      const line = this.buffer.slice(0, newline);
      this.buffer = this.buffer.slice(newline + 1);
      if (!line.trim()) continue;
      let message;
      try {
        message = JSON.parse(line);
      } catch {
        this.restart(`sidecar sent a line that is not JSON: ${line.slice(0, 80)}`);
        return;
      }
      this.answered = true;
      const waiter = this.pending.get(message.id);
      if (!waiter) continue;
      this.pending.delete(message.id);
      clearTimeout(waiter.timer);
      if (message.error) waiter.reject(Object.assign(new Error(message.error.message), { code: message.error.code }));
      else waiter.resolve(message.result);
    }
  }

  onExit(child, why, ended = Ended.EXITED) {
    if (child !== this.child) return;
    this.child = null;
    if (!this.answered && ended === Ended.NOT_STARTED) {
      this.tell("start", `dcp is off: ${why}`);
    } else if (!this.answered) {
      const said = this.stderrHead ? this.stderrHead.replace(/^dcp: (error: )?/, "") : why;
      this.tell("start", `dcp is off: the sidecar exited at start: ${said}`);
    }
    this.fail(why);
    if (this.answered) this.failedAt = 0;
  }

  fail(why) {
    this.failedAt = Date.now();
    if (this.answered) this.countCrash(why);
    this.warnOnce(`fail:${why.split(":")[0]}`, `${why}; messages pass through unchanged, and the sidecar restarts on the next request`);
    for (const [, waiter] of this.pending) {
      clearTimeout(waiter.timer);
      waiter.reject(new Error(why));
    }
    this.pending.clear();
  }

  /** Tells the user, once, about a sidecar that failed `CRASHES_TOLD` times lately. */
  countCrash(why) {
    const now = Date.now();
    this.crashes = this.crashes.filter((t) => now - t < CRASH_WINDOW_MS);
    this.crashes.push(now);
    if (this.crashes.length >= CRASHES_TOLD) {
      const said = this.stderrHead ? `: ${this.stderrHead}` : "";
      this.tell("crash", `dcp keeps failing (${this.crashes.length} times in 10 minutes, last: ${why}${said}); nothing is pruned until it runs again.`);
    }
  }

  restart(why) {
    const child = this.child;
    this.child = null;
    if (child) {
      try {
        child.kill("SIGKILL");
      } catch {}
    }
    this.fail(why);
    this.failedAt = 0;
  }

  call(method, params, timeout = TIMEOUT_MS) {
    if (!this.child && !this.start()) return Promise.reject(new Error("sidecar unavailable"));
    const id = this.nextId++;
    const child = this.child;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        if (child === this.child) this.restart(`sidecar did not answer ${method} within ${timeout} ms`);
        reject(new Error("timeout"));
      }, timeout);
      this.pending.set(id, { resolve, reject, timer });
      const failed = (e) => {
        clearTimeout(timer);
        this.pending.delete(id);
        this.restart(`cannot write to the sidecar: ${e?.message ?? e}`);
        reject(e);
      };
      const envelope = { jsonrpc: "2.0", id, method, params };
      if (hasLazy(params) && !this.streaming) {
        // A line cut short leaves the sidecar without what the encoder's cache says it sent:
        // it restarts, and the next request sends the history in full.
        this.stream(child, envelope).catch((e) => {
          if (child === this.child) failed(e);
          else {
            clearTimeout(timer);
            this.pending.delete(id);
            reject(e);
          }
        });
        return;
      }
      try {
        this.write(child, JSON.stringify(envelope) + "\n");
      } catch (e) {
        failed(e);
      }
    });
  }

  notify(method, params) {
    if (!this.child) return;
    try {
      this.write(this.child, JSON.stringify({ jsonrpc: "2.0", method, params }) + "\n");
    } catch {}
  }

  /** Writes `line` to `child`, after the line being streamed to it if there is one. */
  write(child, line) {
    if (this.streaming?.child === child) this.streaming.after.push(line);
    else child.stdin.write(line);
  }

  /** Writes `envelope`'s line to `child` as it is made (`linePieces`), giving way to the event
   * loop between batches, so that the sidecar reads and counts the first messages while the
   * rest are encoded. Other lines wait for its end. If making it fails halfway, the line is
   * ended as it is and the call fails (and the caller restarts the sidecar). */
  async stream(child, envelope) {
    const streaming = { child, after: [] };
    this.streaming = streaming;
    let batch = "";
    try {
      for (const piece of linePieces(envelope)) {
        batch += piece;
        if (batch.length < STREAM_BATCH_CHARS) continue;
        child.stdin.write(batch);
        batch = "";
        await new Promise((resolve) => setImmediate(resolve));
        if (child !== this.child) throw new Error("the sidecar exited while a request was written");
      }
      child.stdin.write(batch + "\n");
    } catch (e) {
      try {
        if (child === this.child) child.stdin.write(batch + "\n");
      } catch {}
      throw e;
    } finally {
      this.streaming = null;
      if (child === this.child) for (const line of streaming.after) child.stdin.write(line);
    }
  }
}
