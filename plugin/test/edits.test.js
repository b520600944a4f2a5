// Unit tests of edit application: the answer's edits completed from the last ones, and
// applied to OpenCode's messages.
import { test } from "node:test";
import assert from "node:assert/strict";
import { applyEdits, resolveEdits } from "../edits.js";

const messages = () => [
  { info: { id: "m0", role: "user" }, parts: [{ id: "p0", type: "text", text: "hi" }] },
  {
    info: { id: "m1", role: "assistant" },
    parts: [{ id: "p1", type: "tool", state: { status: "completed", input: { filePath: "/a", content: "x" }, output: "long" } }],
  },
];

test("an edit sets the value at its path inside the part", () => {
  const ms = messages();
  applyEdits(ms, { edits: [{ m: 1, p: 0, path: ["state", "output"], value: "[removed]" }] });
  assert.equal(ms[1].parts[0].state.output, "[removed]");
  applyEdits(ms, { edits: [{ m: 1, p: 0, path: ["state", "input", "content"], value: "[gone]" }] });
  assert.equal(ms[1].parts[0].state.input.content, "[gone]");
  assert.equal(ms[1].parts[0].state.input.filePath, "/a");
});

test("edits whose target is missing, or with no path, change nothing", () => {
  const ms = messages();
  const before = JSON.stringify(ms);
  applyEdits(ms, {
    edits: [
      { m: 7, p: 0, path: ["state", "output"], value: "x" },
      { m: 1, p: 3, path: ["state", "output"], value: "x" },
      { m: 0, p: 0, path: ["state", "output"], value: "x" },
      { m: 1, p: 0, path: ["state", "nothing", "deeper"], value: "x" },
      { m: 1, p: 0, path: [], value: "x" },
      { m: 1, p: 0, path: "state.output", value: "x" },
    ],
  });
  assert.equal(JSON.stringify(ms), before);
});

test("appended messages go after the history", () => {
  const ms = messages();
  const tail = { info: { id: "msg_dcp_prunable_tools", role: "user" }, parts: [] };
  applyEdits(ms, { append: [tail] });
  assert.equal(ms.length, 3);
  assert.equal(ms[2], tail);
  applyEdits(ms, {});
  assert.equal(ms.length, 3);
});

test("full, added and same edits resolve to the full list and remember it", () => {
  const cache = { seq: null, edits: [] };
  const a = { m: 1, p: 0, path: ["state", "output"], value: "a" };
  const b = { m: 2, p: 0, path: ["state", "output"], value: "b" };
  assert.deepEqual(resolveEdits(cache, { seq: 1, edits: [a] }).edits, [a]);
  assert.equal(cache.seq, 1);
  assert.deepEqual(resolveEdits(cache, { seq: 2, addEdits: [b] }).edits, [a, b]);
  assert.equal(cache.seq, 2);
  assert.deepEqual(resolveEdits(cache, { seq: 2, sameEdits: true }).edits, [a, b]);
  assert.equal(cache.seq, 2);
  // A full answer replaces what was held.
  assert.deepEqual(resolveEdits(cache, { seq: 3, edits: [b] }).edits, [b]);
  assert.deepEqual(cache.edits, [b]);
  // An answer without a seq (a skipped session) leaves the cache alone.
  assert.deepEqual(resolveEdits(cache, { edits: [], append: [] }).edits, []);
  assert.equal(cache.seq, 3);
  assert.deepEqual(cache.edits, [b]);
});

test("appends go after every value, kept edits first, so a pruned field keeps its tag", () => {
  const ms = messages();
  const tag = { m: 1, p: 0, path: ["state", "output"], append: "\n<m2>" };
  const prune = { m: 1, p: 0, path: ["state", "output"], value: "[removed]" };
  applyEdits(ms, { edits: [tag, prune, { m: 0, p: 0, path: ["text"], append: "!" }] });
  assert.equal(ms[1].parts[0].state.output, "[removed]\n<m2>");
  assert.equal(ms[0].parts[0].text, "hi!");
  // An append to a field that is not a string changes nothing.
  const again = messages();
  applyEdits(again, { edits: [{ m: 1, p: 0, path: ["state", "input"], append: "x" }] });
  assert.deepEqual(again, messages());
});

test("a replace range becomes its summary message, the last range first", () => {
  const ms = [...messages(), ...messages(), ...messages()];
  const summary = (id) => ({ info: { id, role: "user" }, parts: [{ type: "text", text: id }] });
  applyEdits(ms, {
    edits: [{ m: 5, p: 0, path: ["state", "output"], value: "[removed]" }],
    replace: [
      { from: 0, to: 1, message: summary("b1") },
      { from: 3, to: 4, message: summary("b2") },
      { from: 4, to: 9, message: summary("bad") },
    ],
  });
  assert.deepEqual(ms.map((m) => m.info.id), ["b1", "m0", "b2", "m1"]);
  assert.equal(ms[3].parts[0].state.output, "[removed]");
});
