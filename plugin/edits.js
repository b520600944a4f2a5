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

/** Sets each edit's `value` at `path` inside part `p` of message `m`, skipping edits whose
 * target is not there, then appends the answer's `append` messages. */
export function applyEdits(messages, result) {
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
