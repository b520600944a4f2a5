// Edit application: what the sidecar answers to a transform, applied to OpenCode's messages.
// An answer carries its edits in full (`edits`), as additions to the last ones (`addEdits`;
// with `keepEditsBefore`, to those of the messages before it), or says the last ones still
// hold (`sameEdits`); `resolveEdits` turns each into the full list.
//
// OpenCode hands fresh messages on every request, so every edit in force is applied again on
// every request. The held edits are therefore planned once, as they come (`Plan`): each
// field's edits become one write, its last value with the message id tags appended to it
// after, so that a pruned field that carries a tag is written without reading what it held.
// Applying the plan gives what applying the edits in order gives (`applyEditsInOrder`); a
// list the plan cannot keep that promise for (a value that is no string, a field inside
// another edited one) is applied in order.

/** Completes `answer.edits` from what `cache` (a session of `SentCache`) holds, and keeps the
 * answer's edits there, planned, for the next request. Returns the answer. */
export function resolveEdits(cache, answer) {
  // Edits already sent are not sent again: the last ones hold, plus any new ones.
  if (answer?.sameEdits) answer.edits = cache.edits;
  else if (answer?.addEdits) {
    // `keepEditsBefore`: the messages from there on changed, and their edits come anew.
    const before = answer.keepEditsBefore;
    const cut = Number.isInteger(before);
    const kept = cut ? cache.edits.filter((e) => e?.m < before) : cache.edits;
    cache.edits = kept.concat(answer.addEdits);
    cache.seq = answer.seq;
    answer.edits = cache.edits;
    if (cache.plan && cut) cache.plan = cache.plan.cut(before) ?? new Plan(kept);
    if (cache.plan) cache.plan.add(answer.addEdits);
  } else if (answer?.seq !== undefined) {
    cache.seq = answer.seq;
    cache.edits = answer.edits ?? [];
    cache.plan = new Plan(cache.edits);
  }
  if (answer && cache.plan && answer.edits === cache.edits) answer.plan = cache.plan;
  return answer;
}

/** A list of edits as one write per field: for each field its last value (if any) and the
 * tags to append after it, in the order the fields were first edited. */
export class Plan {
  constructor(edits) {
    this.fields = [];
    this.byKey = new Map();
    // Parents of edited fields, by part: a field inside another edited one makes the plan
    // unusable (its writes would depend on their order).
    this.parents = new Set();
    this.ok = true;
    // How many edits the plan holds: it stands for a list of exactly that many.
    this.count = 0;
    this.add(edits ?? []);
  }

  add(edits) {
    this.count += edits.length;
    for (let k = 0; k < edits.length && this.ok; k++) {
      const e = edits[k];
      const path = e?.path;
      if (!Array.isArray(path) || path.length === 0 || path.length > 3 || !path.every((s) => typeof s === "string")) {
        this.ok = false;
        break;
      }
      const isValue = e.append === undefined;
      if ((isValue && typeof e.value !== "string") || (!isValue && typeof e.append !== "string")) {
        this.ok = false;
        break;
      }
      const key = `${e.m}\u0000${e.p}\u0000${path.join("\u0000")}`;
      let field = this.byKey.get(key);
      if (!field) {
        if (this.parents.has(key)) {
          this.ok = false;
          break;
        }
        for (let i = 1; i < path.length; i++) {
          const parent = `${e.m}\u0000${e.p}\u0000${path.slice(0, i).join("\u0000")}`;
          if (this.byKey.has(parent)) {
            this.ok = false;
            break;
          }
          this.parents.add(parent);
        }
        if (!this.ok) break;
        field = { m: e.m, p: e.p, path, holder: holderOf(path), key: path[path.length - 1], value: undefined, tags: "", write: undefined, edits: 0 };
        this.byKey.set(key, field);
        this.fields.push(field);
      }
      field.edits++;
      if (isValue) field.value = e.value;
      else field.tags += e.append;
      // The string a value edit writes, built once here rather than on every request.
      if (field.value !== undefined) field.write = field.tags ? field.value + field.tags : field.value;
    }
  }

  /** Drops the fields of the messages from `before` on, as if their edits had never been
   * added: OpenCode changed those messages. Returns the plan, or undefined when it cannot say
   * (a plan that gave up keeps no fields to drop). */
  cut(before) {
    if (!this.ok) return undefined;
    let dropped = 0;
    const fields = this.fields.filter((f) => {
      if (f.m < before) return true;
      dropped += f.edits;
      this.byKey.delete(`${f.m}\u0000${f.p}\u0000${f.path.join("\u0000")}`);
      for (let i = 1; i < f.path.length; i++) this.parents.delete(`${f.m}\u0000${f.p}\u0000${f.path.slice(0, i).join("\u0000")}`);
      return false;
    });
    this.fields = fields;
    this.count -= dropped;
    return this;
  }

  /** Applies the plan to `messages`, as `applyEditsInOrder` would apply its edits. */
  apply(messages) {
    const fields = this.fields;
    for (let k = 0; k < fields.length; k++) {
      const f = fields[k];
      const part = messages[f.m]?.parts?.[f.p];
      if (!part) continue;
      // The fresh objects are read by named properties where the path is a usual one: a
      // keyed read of each path step costs more than the write.
      let target;
      switch (f.holder) {
        case OUTPUT: {
          // Most fields are a tool's output: a named store, which costs less than a keyed one.
          const state = part.state;
          if (!state || typeof state !== "object") continue;
          if (f.write !== undefined) state.output = f.write;
          else if (typeof state.output === "string") state.output += f.tags;
          continue;
        }
        case PART:
          target = part;
          break;
        case STATE:
          target = part.state;
          break;
        case INPUT:
          target = part.state?.input;
          break;
        default:
          target = part;
          for (let i = 0; target && i < f.path.length - 1; i++) target = target[f.path[i]];
      }
      if (!target || typeof target !== "object") continue;
      if (f.write !== undefined) target[f.key] = f.write;
      else if (typeof target[f.key] === "string") target[f.key] += f.tags;
    }
  }
}

/** Where a field's object is inside its part: the part, its `state`, the state's `input`, or
 * elsewhere (the path is walked); `OUTPUT` is the field `state.output` itself. */
const PART = 0;
const STATE = 1;
const INPUT = 2;
const OTHER = 3;
const OUTPUT = 4;

function holderOf(path) {
  if (path.length === 1) return PART;
  if (path.length === 2 && path[0] === "state" && path[1] === "output") return OUTPUT;
  if (path.length === 2 && path[0] === "state") return STATE;
  if (path.length === 3 && path[0] === "state" && path[1] === "input") return INPUT;
  return OTHER;
}

/** The parent object of `path` inside part `p` of message `m`, or undefined. */
function parentOf(messages, edit) {
  const path = edit.path;
  if (!Array.isArray(path) || path.length === 0) return undefined;
  let target = messages[edit.m]?.parts?.[edit.p];
  if (path.length === 2) target = target?.[path[0]];
  else for (let i = 0; target && i < path.length - 1; i++) target = target[path[i]];
  return target && typeof target === "object" ? target : undefined;
}

/** Applies `edits` to `messages` in their order: each `value` edit sets its `path` inside part
 * `p` of message `m`; then each `append` (a message id tag) is added at the end of its string,
 * after every value, so a prune of a tagged field keeps its tag. Edits whose target is not
 * there are skipped. */
export function applyEditsInOrder(messages, edits) {
  let appends = false;
  for (let k = 0; k < edits.length; k++) {
    const edit = edits[k];
    if (edit.append !== undefined) {
      appends = true;
      continue;
    }
    const target = parentOf(messages, edit);
    if (target) target[edit.path[edit.path.length - 1]] = edit.value;
  }
  if (appends) {
    for (let k = 0; k < edits.length; k++) {
      const edit = edits[k];
      if (typeof edit.append !== "string") continue;
      const target = parentOf(messages, edit);
      const key = edit.path[edit.path.length - 1];
      if (target && typeof target[key] === "string") target[key] += edit.append;
    }
  }
}

/** Applies a transform answer to OpenCode's messages, in place: its edits (by their plan when
 * `resolveEdits` made one), then each `replace` range of whole messages becomes its summary
 * message, then the `append` messages go after the history. */
export function applyEdits(messages, result) {
  const edits = result.edits ?? [];
  if (result.plan?.ok && result.plan.count === edits.length) result.plan.apply(messages);
  else applyEditsInOrder(messages, edits);
  replaceRanges(messages, result.replace);
  for (const message of result.append ?? []) messages.push(message);
}

/** What `applyEdits` does, one edit and one range at a time: the plain reading of the
 * protocol, which the tests hold the planned one to. */
export function applyEditsOneByOne(messages, result) {
  applyEditsInOrder(messages, result.edits ?? []);
  spliceEach(messages, Array.isArray(result.replace) ? result.replace : []);
  for (const message of result.append ?? []) messages.push(message);
}

/** Replaces each `replace` range of whole messages by its summary message (positions in the
 * history before any replacement): in one pass when the ranges are valid and in order, as
 * the sidecar sends them; else one by one from the last back. */
function replaceRanges(messages, replace) {
  const ranges = Array.isArray(replace) ? replace : [];
  if (ranges.length === 0) return;
  const fits = (r, k) =>
    Number.isInteger(r?.from) &&
    Number.isInteger(r?.to) &&
    r.from >= 0 &&
    r.to >= r.from &&
    r.to < messages.length &&
    r.message?.info &&
    Array.isArray(r.message.parts) &&
    (k === 0 || ranges[k - 1].to < r.from);
  if (!ranges.every(fits)) {
    spliceEach(messages, ranges);
    return;
  }
  // Each range leaves one message for one or more, so what is written never passes what is
  // read.
  let write = 0;
  let read = 0;
  for (const { from, to, message } of ranges) {
    while (read < from) messages[write++] = messages[read++];
    messages[write++] = message;
    read = to + 1;
  }
  while (read < messages.length) messages[write++] = messages[read++];
  messages.length = write;
}

/** Replaces each valid range by its summary message, from the last range back so earlier
 * positions hold. */
function spliceEach(messages, ranges) {
  for (let k = ranges.length - 1; k >= 0; k--) {
    const { from, to, message } = ranges[k] ?? {};
    if (!Number.isInteger(from) || !Number.isInteger(to) || from < 0 || to < from || to >= messages.length) continue;
    if (!message?.info || !Array.isArray(message.parts)) continue;
    messages.splice(from, to - from + 1, message);
  }
}
