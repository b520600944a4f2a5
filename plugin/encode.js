// The delta encoder: the history in wire form, with what the sidecar already holds left out
// (leading messages unchanged since the last request) or sent by reference (unchanged infos
// and parts), and what it sends of a message only what the sidecar reads of it (`wireInfo`,
// `wirePart`). See PROTOCOL.md for the wire form.

import { Lazy } from "./streamed.js";

/** What was last sent of each session, so unchanged messages and parts are not re-sent. */
export class SentCache {
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

// A message's version is coded once, here, as a flat list of plain values: its info's id and
// the info fields that change (INFO slots), then, for each part, its id and the part fields
// that change (PART slots). `putInfo` and `putPart` write those slots; everything else (the
// cache of the last request's versions, the by-reference test for infos and parts) compares
// slots, so that checking a message builds nothing.
const INFO = 7;
const PART = 5;

/** Writes `info`'s slots into `v` at `at`: id, role, completion, finish, summary, error,
 * output tokens. */
function putInfo(v, at, info) {
  v[at] = info.id;
  v[at + 1] = info.role;
  v[at + 2] = info.time?.completed;
  v[at + 3] = info.finish;
  v[at + 4] = info.summary === true;
  v[at + 5] = !!info.error;
  v[at + 6] = info.tokens?.output;
}

/** Writes the first TOOL_LIVE slots of a tool part with a state: its id, status and
 * compaction, what OpenCode still changes in a finished message (see `settled`). */
function putToolLive(v, at, part) {
  v[at] = part.id;
  v[at + 1] = part.state.status;
  v[at + 2] = part.state.time?.compacted;
}
const TOOL_LIVE = 3;

/** Writes `part`'s slots into `v` at `at`: its id, then a tool's status, compaction, end and
 * output length; a text's type, length, end and whether it is ignored; for anything else
 * (step markers, patches, files: written once, never changed) its type. A part without an
 * id gets `null` slots: it is always sent in full. */
function putPart(v, at, part) {
  const st = part?.state;
  if (!part || !part.id) v.fill(null, at, at + PART);
  else if (part.type === "tool" && st) {
    putToolLive(v, at, part);
    v[at + 3] = st.time?.end;
    v[at + 4] = (st.output ?? st.error ?? "").length;
  } else if (typeof part.text === "string") {
    v[at] = part.id;
    v[at + 1] = part.type;
    v[at + 2] = part.text.length;
    v[at + 3] = part.time?.end;
    v[at + 4] = part.ignored;
  } else {
    v[at] = part.id;
    v[at + 1] = part.type;
    v[at + 2] = v[at + 3] = v[at + 4] = 0;
  }
}

/** A message's version (see above). */
export function version(m) {
  const parts = m.parts ?? [];
  const v = new Array(INFO + PART * parts.length);
  putInfo(v, 0, m.info ?? {});
  for (let k = 0; k < parts.length; k++) putPart(v, INFO + PART * k, parts[k]);
  return v;
}

/** Whether `n` slots of `a` from `i` equal those of `b` from `j`. */
function sameSlots(a, i, b, j, n) {
  for (let k = 0; k < n; k++) if (a[i + k] !== b[j + k]) return false;
  return true;
}

const scratch = new Array(INFO);

/** Whether `part` still has the slots of `f` at `at`, read without building anything. */
function partIs(part, f, at) {
  putPart(scratch, 0, part);
  return scratch[0] !== null && sameSlots(scratch, 0, f, at, PART);
}

/** What the cache keeps of a message's version to compare the next request's with: the
 * version, or `null` when a part has no id, so that the message is always re-sent. */
function print(v) {
  for (let at = INFO; at < v.length; at += PART) if (v[at] === null) return null;
  return v;
}

/** Whether `m` still has version `f`: every slot. This runs only from where the quick
 * checks stopped, a few messages a request. */
function matches(m, f) {
  const parts = m.parts ?? [];
  if (!f || f.length !== INFO + PART * parts.length) return false;
  putInfo(scratch, 0, m.info ?? {});
  if (!sameSlots(scratch, 0, f, 0, INFO)) return false;
  for (let k = 0; k < parts.length; k++) if (!partIs(parts[k], f, INFO + PART * k)) return false;
  return true;
}

/** The quick form of `matches` for messages well behind the newest: a finished message
 * keeps its info and its text; what OpenCode still changes there is a tool part's status and
 * compaction, so only those slots (and every part count) are compared. The messages are
 * fresh objects, each field read a cache miss: the others are not read. */
function settled(m, f) {
  const parts = m.parts ?? [];
  if (!f || f.length !== INFO + PART * parts.length || f[0] !== m.info?.id) return false;
  for (let k = 0; k < parts.length; k++) {
    const part = parts[k];
    if (part?.type !== "tool" || !part.state) continue;
    putToolLive(scratch, 0, part);
    if (!sameSlots(scratch, 0, f, INFO + PART * k, TOOL_LIVE)) return false;
  }
  return true;
}

/** The quickest check: same id, same number of parts. */
function same(m, f) {
  return f !== null && f !== undefined && f[0] === m.info?.id && f.length === INFO + PART * (m.parts?.length ?? 0);
}

/** How many settled messages each request checks with `settled`: a window that moves on
 * with every request, so that a change OpenCode makes deep in the history (marking old
 * outputs compacted when it prunes them) is noticed within a few dozen requests. */
function sweepWindow(settledCount) {
  return 32 + (settledCount >> 6);
}

/** The parts nothing reads but by their place and id: a step's start and finish, a patch. */
const OPAQUE = new Set(["step-start", "step-finish", "patch", "snapshot"]);

/** The info fields the sidecar reads (`session::slim::slim_info`); a compaction summary's
 * flag, parent and finish too, and a model step's billing (its tokens, cost and model). */
const INFO_KEPT = new Set(["id", "sessionID", "role", "agent", "model"]);
const SUMMARY_KEPT = new Set(["summary", "parentID", "finish"]);
const STEP_KEPT = new Set(["tokens", "cost", "modelID", "providerID"]);

/** What the sidecar reads of a message's info, in its order: the rest (paths, times but
 * creation, an error's details) it drops as it arrives, and need not be sent. */
export function wireInfo(info) {
  if (!info || typeof info !== "object" || Array.isArray(info)) return info;
  const summary = info.summary === true;
  const step = info.role === "assistant";
  const out = {};
  for (const key in info) {
    if (!Object.hasOwn(info, key)) continue;
    const v = info[key];
    if (INFO_KEPT.has(key) || (summary && SUMMARY_KEPT.has(key)) || (step && STEP_KEPT.has(key))) out[key] = v;
    else if (key === "error" && v != null) out[key] = true;
    else if (key === "time") out[key] = v && typeof v === "object" && !Array.isArray(v) ? only(v, "created") : v;
  }
  return out;
}

/** `object` with only `key`, if it has it. */
function only(object, key) {
  return Object.hasOwn(object, key) ? { [key]: object[key] } : {};
}

/** What the sidecar reads of a part, in its order (`session::slim::strip_part`): never the
 * session and message ids every part repeats; of a step or a patch, its id and type; of a
 * text, not its times and metadata; of a tool call's state, its status, input, output, error
 * and whether it was compacted (not its title, metadata, where OpenCode keeps a second copy
 * of the output, or times). */
export function wirePart(part) {
  if (!part || typeof part !== "object" || Array.isArray(part)) return part;
  const type = part.type;
  const out = {};
  for (const key in part) {
    if (!Object.hasOwn(part, key) || key === "sessionID" || key === "messageID") continue;
    const v = part[key];
    if (OPAQUE.has(type)) {
      if (key === "id" || key === "type") out[key] = v;
    } else if (type === "text" || type === "reasoning") {
      if (key !== "time" && key !== "metadata") out[key] = v;
    } else if (type === "tool" && key === "state" && v && typeof v === "object" && !Array.isArray(v)) {
      out[key] = wireState(v);
    } else out[key] = v;
  }
  return out;
}

/** A tool call's state as the sidecar keeps it (`session::slim::strip_state`). */
function wireState(state) {
  const out = {};
  for (const key in state) {
    if (!Object.hasOwn(state, key)) continue;
    const v = state[key];
    if (key === "status" || key === "input" || key === "output" || key === "error") out[key] = v;
    else if (key === "time") {
      if (!v || typeof v !== "object" || Array.isArray(v)) out[key] = v;
      else if (Object.hasOwn(v, "compacted")) out[key] = only(v, "compacted");
    }
  }
  return out;
}

/** The history in wire form: `base` leading messages unchanged since the last request are
 * not sent at all; of the rest, unchanged infos and parts go by reference. */
export function encode(messages, cache) {
  const base = unchangedBelow(messages, cache);
  return { base, messages: [...wireMessages(messages, base, cache)] };
}

/** `encode`, its messages a `Lazy` list encoded as the sidecar's writer reads them: the
 * sidecar reads the first while the rest are encoded (`streamed.js`). */
export function encodeEach(messages, cache) {
  const base = unchangedBelow(messages, cache);
  return { base, messages: new Lazy(wireMessages(messages, base, cache)) };
}

/** How many leading messages are unchanged since the last request `cache` holds. */
function unchangedBelow(messages, cache) {
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
  }
  return base;
}

/** The messages from `base` in wire form, one at a time. */
function* wireMessages(messages, base, cache) {
  for (let i = base; i < messages.length; i++) {
    const m = messages[i];
    if (!cache) {
      yield { id: m.info?.id, parts: (m.parts ?? []).map(wirePart), info: wireInfo(m.info ?? {}) };
      continue;
    }
    const v = version(m);
    cache.prints.push(print(v));
    yield delta(m, v, cache);
  }
}

/** One message in wire form: its info and parts in full, or by reference where `cache`
 * holds the same slots for them from an earlier request (the sidecar has them). */
function delta(m, v, cache) {
  const info = m.info ?? {};
  const entry = { id: info.id, parts: [] };
  const sent = info.id ? cache.infos.get(info.id) : undefined;
  // Sent before and unchanged, the info is left out.
  if (!sent || !sameSlots(sent, 0, v, 0, INFO)) {
    entry.info = wireInfo(info);
    if (info.id) cache.infos.set(info.id, v);
  }
  const parts = m.parts ?? [];
  for (let k = 0, at = INFO; k < parts.length; k++, at += PART) {
    const part = parts[k];
    if (v[at] === null) {
      entry.parts.push(wirePart(part));
      continue;
    }
    const before = cache.parts.get(part.id);
    if (before && sameSlots(before.v, before.at, v, at, PART)) entry.parts.push({ ref: part.id });
    else {
      entry.parts.push(wirePart(part));
      cache.parts.set(part.id, { v, at });
    }
  }
  return entry;
}
