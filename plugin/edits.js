// Edit application: what the sidecar answers to a transform, applied to OpenCode's messages.
// An answer carries its edits in full (`edits`), as additions to the last ones (`addEdits`),
// or says the last ones still hold (`sameEdits`); `resolveEdits` turns each into the full list.

/** Completes `answer.edits` from what `cache` (a session of `SentCache`) holds, and keeps the
 * answer's edits there for the next request. Returns the answer. */
export function resolveEdits(cache, answer) {
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

/** Applies a transform answer to OpenCode's messages, in place: each edit's `value` is set at
 * its `path` inside part `p` of message `m`; then each `append` (a message id tag) is added
 * at the end of its string, after every value, so a prune of a tagged field keeps its tag;
 * then each `replace` range of whole messages becomes its summary message, from the last
 * range back so earlier positions hold; then the `append` messages go after the history.
 * Edits whose target is not there are skipped. */
export function applyEdits(messages, result) {
  const edits = result.edits ?? [];
  // Every edit is applied again on every request (OpenCode hands fresh objects), so these
  // loops are kept plain: most paths are `state.output`, two steps deep.
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
  const ranges = Array.isArray(result.replace) ? result.replace : [];
  for (let k = ranges.length - 1; k >= 0; k--) {
    const { from, to, message } = ranges[k] ?? {};
    if (!Number.isInteger(from) || !Number.isInteger(to) || from < 0 || to < from || to >= messages.length) continue;
    if (!message?.info || !Array.isArray(message.parts)) continue;
    messages.splice(from, to - from + 1, message);
  }
  for (const message of result.append ?? []) messages.push(message);
}
