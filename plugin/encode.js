// The delta encoder: the history in wire form, with what the sidecar already holds left out
// (leading messages unchanged since the last request) or sent by reference (unchanged infos
// and parts). See PROTOCOL.md for the wire form.

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
export function encode(messages, cache) {
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
