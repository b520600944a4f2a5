// Unit tests of edit application: the answer's edits completed from the last ones, and
// applied to OpenCode's messages.
import { test } from "node:test";
import assert from "node:assert/strict";
import { applyEdits, applyEditsOneByOne, resolveEdits } from "../edits.js";

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

/** A deterministic generator (xorshift), so a failure names its seed. */
function rng(seed) {
  let x = seed >>> 0 || 1;
  return (n) => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) % n;
  };
}

/** A history of `n` messages of text and tool parts, some outputs not strings. */
function history(n, pick) {
  return Array.from({ length: n }, (_, i) => ({
    info: { id: `m${i}`, role: i % 3 ? "assistant" : "user" },
    parts: Array.from({ length: 1 + pick(3) }, (_, k) =>
      pick(3) === 0
        ? { id: `p${i}.${k}`, type: "text", text: `text ${i}.${k}` }
        : { id: `p${i}.${k}`, type: "tool", metadata: { note: "n" }, state: { input: { filePath: `/f${k}`, content: "c" }, output: pick(9) ? `out ${i}` : { o: 1 } } },
    ),
  }));
}

/** An edit such as the sidecar sends (a value or a tag on a field), or now and then one it
 * does not: a missing target, a field inside another, a value that is no string. */
function edit(pick, n) {
  const paths = [["state", "output"], ["text"], ["state", "input", "content"], ["state", "input"], ["state", "error"], ["state", "output", "x"], ["metadata", "note"]];
  const path = paths[pick(10) < 8 ? pick(3) : pick(paths.length)];
  const at = { m: pick(n + 2), p: pick(4), path };
  if (pick(2)) return { ...at, append: `\n<m${pick(n)}>` };
  return { ...at, value: pick(20) ? `[removed ${pick(5)}]` : { v: pick(3) } };
}

test("the planned edits and ranges give what applying them one by one gives", () => {
  let planned = 0;
  for (let seed = 1; seed <= 300; seed++) {
    const pick = rng(seed);
    const n = 5 + pick(40);
    const base = history(n, pick);
    const cache = { seq: null, edits: [] };
    // A full answer, then answers that add edits, as the sidecar sends them.
    let answer = resolveEdits(cache, { seq: 1, edits: Array.from({ length: pick(30) }, () => edit(pick, n)) });
    for (let step = 2; step < 2 + pick(4); step++) {
      answer = resolveEdits(cache, { seq: step, addEdits: Array.from({ length: pick(10) }, () => edit(pick, n)) });
    }
    const ranges = [];
    for (let at = pick(4); at < n + 1; at += 2 + pick(8)) {
      const to = at + pick(4);
      ranges.push({ from: pick(12) ? at : -1, to, message: { info: { id: `b${at}` }, parts: [] } });
    }
    if (pick(4) === 0) ranges.reverse();
    const result = { ...answer, replace: ranges, append: [{ info: { id: "tail" }, parts: [] }] };
    const a = structuredClone(base);
    const b = structuredClone(base);
    applyEdits(a, result);
    applyEditsOneByOne(b, result);
    assert.deepEqual(a, b, `seed ${seed}`);
    planned += answer.plan?.ok ? 1 : 0;
  }
  assert.ok(planned > 50, `the plan was used (${planned} of 300)`);
});

test("edits kept before a changed message, then added to, apply as the full list they stand for", () => {
  let cut = 0;
  for (let seed = 1; seed <= 200; seed++) {
    const pick = rng(seed);
    const n = 5 + pick(40);
    const base = history(n, pick);
    const cache = { seq: null, edits: [] };
    let expected = Array.from({ length: pick(30) }, () => edit(pick, n));
    resolveEdits(cache, { seq: 1, edits: expected });
    for (let step = 2; step < 12; step++) {
      const added = Array.from({ length: pick(6) }, () => edit(pick, n));
      // As the sidecar answers: mostly the messages from one near the end changed, at times
      // only new edits, now and then the whole list.
      const kind = pick(6);
      let answer;
      if (kind === 0) {
        expected = added;
        answer = { seq: step, edits: added };
      } else if (kind === 1) {
        expected = expected.concat(added);
        answer = { seq: step, addEdits: added };
      } else {
        const before = n - pick(6);
        expected = expected.filter((e) => e.m < before).concat(added);
        answer = { seq: step, keepEditsBefore: before, addEdits: added };
      }
      const result = resolveEdits(cache, answer);
      assert.deepEqual(result.edits, expected, `seed ${seed}, step ${step}`);
      const a = structuredClone(base);
      const b = structuredClone(base);
      applyEdits(a, result);
      applyEditsOneByOne(b, { edits: expected });
      assert.deepEqual(a, b, `seed ${seed}, step ${step}`);
      cut += kind > 1 && result.plan?.ok && result.plan.count === expected.length ? 1 : 0;
    }
  }
  assert.ok(cut > 200, `a plan kept across a cut was used ${cut} times`);
});
