// dcp for OpenCode: a thin plugin that forwards OpenCode's hooks to the `dcp serve` sidecar
// and applies what it answers. Every decision is made in Rust (see PROTOCOL.md); this file
// only carries messages across. If the sidecar is missing, crashes, answers garbage or is too
// slow, the messages pass through unchanged, the failure is logged once, and the sidecar is
// restarted for the next request. OpenCode never sees an exception from dcp.

import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { delimiter, join } from "node:path";

const PROTOCOL = 1;
const TIMEOUT_MS = Number(process.env.DCP_TIMEOUT_MS) || 3000;
// A sidecar that fails to start, or dies before its first answer, is not retried for this
// long; one that dies after answering is restarted on the next request.
const RESTART_BACKOFF_MS = 2000;
const RESYNC = -32001;

function findBinary() {
  if (process.env.DCP_BIN) return existsSync(process.env.DCP_BIN) ? process.env.DCP_BIN : null;
  const names = process.platform === "win32" ? ["dcp.exe", "dcp"] : ["dcp"];
  for (const dir of (process.env.PATH || "").split(delimiter)) {
    for (const name of names) {
      const candidate = join(dir, name);
      if (dir && existsSync(candidate)) return candidate;
    }
  }
  return null;
}

/** One `dcp serve` child process, restarted on demand after any failure. */
class Sidecar {
  constructor(log, directory) {
    this.log = log;
    this.directory = directory;
    this.child = null;
    this.pending = new Map();
    this.nextId = 1;
    this.generation = 0;
    this.buffer = "";
    this.failedAt = 0;
    this.warned = new Set();
  }

  warnOnce(key, message) {
    if (this.warned.has(key)) return;
    this.warned.add(key);
    this.log("warn", message);
  }

  start() {
    if (this.child) return true;
    if (Date.now() - this.failedAt < RESTART_BACKOFF_MS) return false;
    const bin = findBinary();
    if (!bin) {
      this.failedAt = Date.now();
      this.warnOnce("nobin", "dcp binary not found (set DCP_BIN or put dcp on PATH); messages pass through unchanged");
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
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (chunk) => this.onData(child, chunk));
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (chunk) => {
      for (const line of chunk.split("\n")) if (line.trim()) this.log("debug", line.trim());
    });
    child.on("error", (e) => this.onExit(child, `sidecar error: ${e?.message ?? e}`));
    child.on("exit", (code, signal) => this.onExit(child, `sidecar exited (${signal ?? code})`));
    child.stdin.on("error", () => {});
    this.ready = this.call("initialize", { protocol: PROTOCOL, directory: this.directory }).catch(() => null);
    return true;
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

  onExit(child, why) {
    if (child !== this.child) return;
    this.child = null;
    this.fail(why);
    if (this.answered) this.failedAt = 0;
  }

  fail(why) {
    this.failedAt = Date.now();
    this.warnOnce(`fail:${why.split(":")[0]}`, `${why}; messages pass through unchanged, and the sidecar restarts on the next request`);
    for (const [, waiter] of this.pending) {
      clearTimeout(waiter.timer);
      waiter.reject(new Error(why));
    }
    this.pending.clear();
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
      try {
        child.stdin.write(JSON.stringify({ jsonrpc: "2.0", id, method, params }) + "\n");
      } catch (e) {
        clearTimeout(timer);
        this.pending.delete(id);
        this.restart(`cannot write to the sidecar: ${e?.message ?? e}`);
        reject(e);
      }
    });
  }

  notify(method, params) {
    if (!this.child) return;
    try {
      this.child.stdin.write(JSON.stringify({ jsonrpc: "2.0", method, params }) + "\n");
    } catch {}
  }
}

/** What was last sent of each session, so unchanged messages and parts are not re-sent. */
class SentCache {
  constructor() {
    this.generation = -1;
    this.sessions = new Map();
  }

  session(id, generation) {
    if (generation !== this.generation) {
      this.sessions.clear();
      this.generation = generation;
    }
    let s = this.sessions.get(id);
    // `seq` and `edits`: the last answer's edits, which the sidecar may tell us to reuse.
    // `sweep`: where the next deep check of settled messages starts (see `sweepWindow`).
    if (!s) this.sessions.set(id, (s = { infos: new Map(), parts: new Map(), prints: [], sweep: 0, seq: null, edits: [] }));
    return s;
  }

  forget(id) {
    this.sessions.delete(id);
  }
}

function partKey(part) {
  const state = part.state;
  if (part.type === "tool" && state) {
    const body = state.output ?? state.error ?? "";
    return `t|${state.status}|${state.time?.end ?? ""}|${state.time?.compacted ?? ""}|${body.length}`;
  }
  if (typeof part.text === "string") return `x|${part.type}|${part.text.length}|${part.time?.end ?? ""}|${part.ignored ?? ""}`;
  // Step markers, patches, files and the like are written once and never change.
  return `o|${part.type}`;
}

function infoKey(info) {
  return `${info.role}|${info.time?.completed ?? ""}|${info.finish ?? ""}|${info.summary === true}|${info.error ? 1 : 0}|${info.tokens?.output ?? ""}`;
}

/** What identifies a message's version, as a flat list: its info and every part, by id and
 * the fields that change (a tool's status, end, compaction and output length; a text's
 * length). `null` for a message with a part that has no id: it is always re-sent. */
function fingerprint(m) {
  const info = m.info ?? {};
  const f = [info.id, info.role, info.time?.completed, info.finish, info.summary === true, !!info.error, info.tokens?.output];
  for (const part of m.parts ?? []) {
    if (!part || !part.id) return null;
    const st = part.state;
    if (part.type === "tool" && st) f.push(part.id, st.status, st.time?.end, st.time?.compacted, (st.output ?? st.error ?? "").length);
    else if (typeof part.text === "string") f.push(part.id, part.type, part.text.length, part.time?.end, part.ignored);
    else f.push(part.id, part.type, 0, 0, 0);
  }
  return f;
}

/** Whether `m` still has fingerprint `f`, read without building anything: this runs over
 * the whole history on every request. */
function matches(m, f) {
  if (!f) return false;
  const info = m.info ?? {};
  const parts = m.parts ?? [];
  if (f.length !== 7 + 5 * parts.length) return false;
  if (f[0] !== info.id || f[1] !== info.role || f[2] !== info.time?.completed || f[3] !== info.finish) return false;
  if (f[4] !== (info.summary === true) || f[5] !== !!info.error || f[6] !== info.tokens?.output) return false;
  let i = 7;
  for (const part of parts) {
    if (!part || part.id !== f[i]) return false;
    const st = part.state;
    if (part.type === "tool" && st) {
      if (f[i + 1] !== st.status || f[i + 2] !== st.time?.end || f[i + 3] !== st.time?.compacted) return false;
      if (f[i + 4] !== (st.output ?? st.error ?? "").length) return false;
    } else if (typeof part.text === "string") {
      if (f[i + 1] !== part.type || f[i + 2] !== part.text.length || f[i + 3] !== part.time?.end || f[i + 4] !== part.ignored) return false;
    } else if (f[i + 1] !== part.type) return false;
    i += 5;
  }
  return true;
}

/** The quick form of `matches` for messages well behind the newest: a finished message
 * keeps its info and its text; what OpenCode still changes there is a tool part's status and
 * its compaction, so only those (and every id and part count) are compared. */
function settled(m, f) {
  if (!f) return false;
  const parts = m.parts ?? [];
  if (f.length !== 7 + 5 * parts.length || f[0] !== m.info?.id) return false;
  let i = 7;
  for (const part of parts) {
    if (part?.type === "tool") {
      const st = part.state;
      if (part.id !== f[i] || f[i + 1] !== st?.status || f[i + 3] !== st?.time?.compacted) return false;
    }
    i += 5;
  }
  return true;
}

/** The quickest check: same id, same number of parts. */
function same(m, f) {
  return f !== null && f !== undefined && f[0] === m.info?.id && f.length === 7 + 5 * (m.parts?.length ?? 0);
}

/** How many settled messages each request checks with `settled`: a window that moves on
 * with every request, so that a change OpenCode makes deep in the history (marking old
 * outputs compacted when it prunes them) is noticed within a few dozen requests. */
function sweepWindow(settledCount) {
  return 32 + (settledCount >> 6);
}

/** The history in wire form: `base` leading messages unchanged since the last request are
 * not sent at all; of the rest, unchanged infos and parts go by reference. */
function encode(messages, cache) {
  let base = 0;
  if (cache) {
    const previous = cache.prints;
    // The newest messages are compared in full: they are the ones still being written.
    const settledBelow = Math.min(messages.length, previous.length) - 4;
    // OpenCode appends to a history, cuts it at a compaction and drops its end on a revert:
    // with the first and the last settled messages unchanged, so is everything between. The
    // messages are fresh objects, so each one read is a cache miss; reading all of them on
    // every request would cost more than the rest of the request.
    if (settledBelow > 0 && same(messages[0], previous[0]) && same(messages[settledBelow - 1], previous[settledBelow - 1])) {
      base = settledBelow;
    } else {
      while (base < settledBelow && same(messages[base], previous[base])) base++;
    }
    if (settledBelow > 0) {
      let at = cache.sweep < settledBelow ? cache.sweep : 0;
      const end = Math.min(settledBelow, at + sweepWindow(settledBelow));
      for (; at < end; at++) {
        if (at < base && !settled(messages[at], previous[at])) {
          base = at;
          break;
        }
      }
      cache.sweep = at;
    }
    while (base < messages.length && base < previous.length && matches(messages[base], previous[base])) base++;
    previous.length = base;
    for (let i = base; i < messages.length; i++) previous.push(fingerprint(messages[i]));
  }
  const wire = [];
  for (let i = base; i < messages.length; i++) {
    const m = messages[i];
    const info = m.info ?? {};
    const entry = { id: info.id, parts: [] };
    const ik = infoKey(info);
    if (cache && info.id && cache.infos.get(info.id) === ik) {
      // Sent before and unchanged: the sidecar has it.
    } else {
      entry.info = info;
      if (cache && info.id) cache.infos.set(info.id, ik);
    }
    for (const part of m.parts ?? []) {
      const key = part && part.id ? partKey(part) : null;
      if (cache && key && cache.parts.get(part.id) === key) entry.parts.push({ ref: part.id });
      else {
        entry.parts.push(part);
        if (cache && key) cache.parts.set(part.id, key);
      }
    }
    wire.push(entry);
  }
  return { base, messages: wire };
}

function applyEdits(messages, result) {
  const edits = result.edits ?? [];
  // Every edit is applied again on every request (OpenCode hands fresh objects), so this
  // loop is kept plain: most paths are `state.output`, two steps deep.
  for (let k = 0; k < edits.length; k++) {
    const edit = edits[k];
    const path = edit.path;
    if (!Array.isArray(path) || path.length === 0) continue;
    let target = messages[edit.m]?.parts?.[edit.p];
    if (path.length === 2) target = target?.[path[0]];
    else for (let i = 0; target && i < path.length - 1; i++) target = target[path[i]];
    if (target && typeof target === "object") target[path[path.length - 1]] = edit.value;
  }
  for (const message of result.append ?? []) messages.push(message);
}

/** The JSON-Schema form of the agent tools' arguments (a plugin loaded from a folder cannot
 * import `@opencode-ai/plugin`, so no zod). OpenCode marks every listed key required and does
 * not validate, so the sidecar checks what it gets. */
const TOOL_ARGS = {
  discard: {
    ids: { type: "array", items: { type: "string" }, description: "ids from the <prunable-tools> list" },
    reason: { type: "string", enum: ["completion", "noise"], description: "completion: the work they served is done; noise: they never helped" },
  },
  extract: {
    ids: { type: "array", items: { type: "string" }, description: "ids from the <prunable-tools> list" },
    distillation: { type: "array", items: { type: "string" }, description: "one distillation per id, in the same order" },
  },
};

function isSideRequest(system) {
  const first = Array.isArray(system) ? String(system[0] ?? "") : "";
  return first.startsWith("You are a title generator") || first.includes("context summarization agent");
}

export const DcpPlugin = async ({ client, directory }) => {
  const log = (level, message) => {
    try {
      client?.app?.log?.({ body: { service: "dcp", level, message } })?.catch?.(() => {});
    } catch {}
  };
  const sidecar = new Sidecar(log, directory);
  const sent = new SentCache();
  const contextLimits = new Map();
  const parents = new Map();
  const compacting = new Set();
  const abortNext = new Set();
  const notices = new Map();
  sidecar.start();
  const init = (await sidecar.ready) ?? null;

  const show = (sessionID, text) => {
    if (!text || !sessionID) return;
    try {
      const now = Date.now();
      const part = { type: "text", text, ignored: true, synthetic: true, time: { start: now, end: now } };
      client.session.prompt({ path: { id: sessionID }, body: { noReply: true, parts: [part] } })?.catch?.(() => {});
    } catch {}
  };

  const parentOf = async (sessionID) => {
    if (parents.has(sessionID)) return parents.get(sessionID);
    let parent;
    try {
      const r = await client.session.get({ path: { id: sessionID } });
      if (r?.data) parent = r.data.parentID ?? null;
    } catch {}
    if (parent !== undefined) parents.set(sessionID, parent);
    return parent;
  };

  const hooks = {
    "experimental.chat.messages.transform": async (_input, output) => {
      try {
        const messages = output?.messages;
        if (!Array.isArray(messages) || messages.length === 0) return;
        const sessionID = messages.find((m) => m?.info?.sessionID)?.info?.sessionID;
        if (!sessionID) return;
        if (abortNext.delete(sessionID)) {
          // A /dcp command ran: it needs no model request.
          await client.session.abort({ path: { id: sessionID } }).catch?.(() => {});
          return;
        }
        const compaction = compacting.delete(sessionID);
        if (!sidecar.child && !sidecar.start()) return;
        const params = { sessionID, contextLimit: contextLimits.get(sessionID), compaction };
        const parentID = await parentOf(sessionID);
        if (parentID !== undefined) params.parentID = parentID;
        let result;
        if (compaction) {
          result = await sidecar.call("transform", { ...params, ...encode(messages, null) });
        } else {
          const send = () => {
            const cache = sent.session(sessionID, sidecar.generation);
            const request = { ...params, ...encode(messages, cache) };
            if (cache.seq !== null) request.have = cache.seq;
            return sidecar.call("transform", request).then((answer) => {
              // Edits already sent are not sent again: the last ones hold, plus any new ones.
              if (answer?.sameEdits) answer.edits = cache.edits;
              else if (answer?.addEdits) {
                cache.edits = cache.edits.concat(answer.addEdits);
                cache.seq = answer.seq;
                answer.edits = cache.edits;
              } else if (answer?.seq !== undefined) {
                cache.seq = answer.seq;
                cache.edits = answer.edits ?? [];
              }
              return answer;
            });
          };
          try {
            result = await send();
          } catch (e) {
            if (e?.code !== RESYNC) throw e;
            sent.forget(sessionID);
            result = await send();
          }
        }
        applyEdits(messages, result);
        if (result.notify) notices.set(sessionID, [...(notices.get(sessionID) ?? []), result.notify]);
      } catch {
        // Pass the messages through: the failure was logged, and the sidecar restarts.
      }
    },

    "experimental.chat.system.transform": async (input, output) => {
      try {
        if (isSideRequest(output?.system)) return;
        const sessionID = input?.sessionID;
        const limit = input?.model?.limit?.context;
        if (sessionID && limit) contextLimits.set(sessionID, limit);
        const params = { sessionID };
        if (sessionID) {
          const parentID = await parentOf(sessionID);
          if (parentID !== undefined) params.parentID = parentID;
        }
        const result = await sidecar.call("system", params);
        if (Array.isArray(output?.system)) for (const line of result.system ?? []) output.system.push(line);
      } catch {}
    },

    "experimental.session.compacting": async (input) => {
      try {
        if (input?.sessionID) compacting.add(input.sessionID);
      } catch {}
    },

    event: async ({ event }) => {
      try {
        const props = event?.properties ?? {};
        if (event?.type === "session.idle" && props.sessionID) {
          // Notifications wait for the turn to end, so they never interrupt the agent.
          const queued = notices.get(props.sessionID);
          notices.delete(props.sessionID);
          if (queued?.length) show(props.sessionID, queued.join("\n"));
        }
        if (event?.type === "session.deleted") {
          const id = props.info?.id;
          if (id) sent.forget(id);
        }
        if (event?.type === "session.deleted" || event?.type === "session.compacted") {
          sidecar.notify("event", { type: event.type, properties: props });
        }
      } catch {}
    },
  };

  const tools = {};
  for (const name of ["discard", "extract"]) {
    if (!init?.tools?.[name]) continue;
    tools[name] = {
      description: init.descriptions?.[name] ?? name,
      args: TOOL_ARGS[name],
      async execute(args, ctx) {
        try {
          const result = await sidecar.call("tool", { sessionID: ctx?.sessionID, name, args: args ?? {} });
          return { title: result.title ?? name, output: String(result.output ?? ""), metadata: {} };
        } catch {
          return "dcp is unavailable right now; nothing was pruned.";
        }
      },
    };
  }
  if (Object.keys(tools).length) hooks.tool = tools;

  if (init?.commands) {
    hooks.config = async (cfg) => {
      try {
        cfg.command = cfg.command ?? {};
        cfg.command.dcp = { template: "/dcp $ARGUMENTS", description: init.descriptions?.command ?? "dcp" };
      } catch {}
    };
    hooks["command.execute.before"] = async (input, output) => {
      try {
        if (input?.command !== "dcp" || !input.sessionID) return;
        let text;
        try {
          const result = await sidecar.call("command", { sessionID: input.sessionID, arguments: input.arguments ?? "" });
          text = String(result.text ?? "");
        } catch {
          text = "dcp is unavailable right now; try again.";
        }
        // Show the answer in the session, never to the model, and skip the model request
        // OpenCode would start for the command.
        const now = Date.now();
        if (Array.isArray(output?.parts)) {
          output.parts.splice(0, output.parts.length, { type: "text", text, ignored: true, synthetic: true, time: { start: now, end: now } });
          abortNext.add(input.sessionID);
        }
      } catch {}
    };
  }

  return hooks;
};
