// Unit tests of the delta encoder: what is sent in full, by reference, or not at all.
import { test } from "node:test";
import assert from "node:assert/strict";
import { SentCache, encode, version, wireInfo, wirePart } from "../encode.js";

const tool = (id, output, status = "completed") => ({
  id,
  type: "tool",
  callID: `call_${id}`,
  tool: "read",
  state: { status, input: { filePath: "/a" }, output, time: { start: 1, end: 2 } },
});
const text = (id, t) => ({ id, type: "text", text: t });
const message = (id, role, parts) => ({ info: { id, role, sessionID: "ses_1", time: { created: 1 } }, parts });

/** A fresh copy, as OpenCode hands the plugin fresh objects on every request. */
const copy = (messages) => JSON.parse(JSON.stringify(messages));

function history(n) {
  const messages = [];
  for (let i = 0; i < n; i++) {
    messages.push(message(`u${i}`, "user", [text(`pu${i}`, `question ${i}`)]));
    messages.push(message(`a${i}`, "assistant", [tool(`pt${i}`, `output ${i}`)]));
  }
  return messages;
}

test("without a cache, every message is sent, as much of it as the sidecar reads", () => {
  const messages = history(2);
  const { base, messages: wire } = encode(messages, null);
  assert.equal(base, 0);
  assert.equal(wire.length, 4);
  assert.deepEqual(wire[1].info, messages[1].info);
  assert.deepEqual(wire[1].parts, [{ ...messages[1].parts[0], state: { status: "completed", input: { filePath: "/a" }, output: "output 0" } }]);
});

test("a message is sent without the fields the sidecar drops as they arrive", () => {
  const info = { id: "a1", sessionID: "ses_1", parentID: "u1", role: "assistant", modelID: "m", providerID: "p", cost: 1,
    tokens: { input: 1 }, time: { created: 5, completed: 6 }, finish: "stop", agent: "build", path: { cwd: "/" } };
  // A model step keeps what the provider billed (`usage` reads it from the history).
  const billed = { modelID: "m", providerID: "p", cost: 1, tokens: { input: 1 } };
  assert.deepEqual(wireInfo(info), { id: "a1", sessionID: "ses_1", role: "assistant", ...billed, time: { created: 5 }, agent: "build" });
  const summary = { ...info, summary: true };
  assert.deepEqual(wireInfo(summary), { id: "a1", sessionID: "ses_1", parentID: "u1", role: "assistant", ...billed, time: { created: 5 }, finish: "stop", agent: "build", summary: true });
  const prompt = { id: "u1", sessionID: "ses_1", role: "user", cost: 0, tokens: { input: 1 }, time: { created: 4 } };
  assert.deepEqual(wireInfo(prompt), { id: "u1", sessionID: "ses_1", role: "user", time: { created: 4 } });
  // An error is sent as that there was one, as the sidecar keeps it.
  const stopped = { ...info, error: { name: "MessageAbortedError", data: { message: "aborted" } } };
  assert.equal(wireInfo(stopped).error, true);
  assert.equal(Object.hasOwn(wireInfo({ ...info, error: null }), "error"), false);
  const ids = { sessionID: "ses_1", messageID: "a1" };
  const step = { id: "s1", ...ids, type: "step-finish", tokens: { input: 1 }, snapshot: "x" };
  assert.deepEqual(wirePart(step), { id: "s1", type: "step-finish" });
  const said = { id: "t1", ...ids, type: "text", text: "hi", time: { start: 1 }, metadata: {}, synthetic: true };
  assert.deepEqual(wirePart(said), { id: "t1", type: "text", text: "hi", synthetic: true });
  const state = { status: "completed", title: "t", input: { filePath: "/a" }, output: "out", metadata: { preview: "out" }, time: { start: 1, end: 2, compacted: 3 } };
  const call = { id: "c1", ...ids, type: "tool", tool: "read", callID: "call_1", state };
  assert.deepEqual(wirePart(call), { id: "c1", type: "tool", tool: "read", callID: "call_1",
    state: { status: "completed", input: { filePath: "/a" }, output: "out", time: { compacted: 3 } } });
  const file = { id: "f1", ...ids, type: "file", url: "file:///a", mime: "text/plain" };
  assert.deepEqual(wirePart(file), { id: "f1", type: "file", url: "file:///a", mime: "text/plain" });
});

test("the first request of a session sends everything; a repeat sends only the newest four by reference", () => {
  const cache = new SentCache().session("ses_1", 0);
  const messages = history(5);
  const first = encode(copy(messages), cache);
  assert.equal(first.base, 0);
  assert.equal(first.messages.length, 10);
  assert.ok(first.messages.every((m) => m.info && m.parts.every((p) => !p.ref)));
  const second = encode(copy(messages), cache);
  // Unchanged messages are not sent at all.
  assert.equal(second.base, 10);
  assert.deepEqual(second.messages, []);
});

test("a grown history sends only the new messages", () => {
  const cache = new SentCache().session("ses_1", 0);
  const messages = history(5);
  encode(copy(messages), cache);
  messages.push(message("u5", "user", [text("pu5", "next")]));
  const next = encode(copy(messages), cache);
  assert.equal(next.base, 10);
  assert.equal(next.messages.length, 1);
  assert.equal(next.messages[0].id, "u5");
  assert.equal(next.messages[0].info.id, "u5");
});

test("a changed tool output is re-sent in full, its unchanged neighbours by reference", () => {
  const cache = new SentCache().session("ses_1", 0);
  const messages = history(5);
  encode(copy(messages), cache);
  const changed = copy(messages);
  changed[9].parts.push(tool("ptx", "running", "running"));
  const delta = encode(copy(changed), cache);
  assert.equal(delta.base, 9);
  assert.equal(delta.messages.length, 1);
  const [m] = delta.messages;
  // The info did not change: it goes by reference (left out), as does the first part.
  assert.equal(m.info, undefined);
  assert.deepEqual(m.parts[0], { ref: "pt4" });
  assert.equal(m.parts[1].id, "ptx");
  // When the new call completes, its part is sent again.
  changed[9].parts[1] = tool("ptx", "done");
  const after = encode(copy(changed), cache);
  assert.equal(after.base, 9);
  assert.deepEqual(after.messages[0].parts[0], { ref: "pt4" });
  assert.equal(after.messages[0].parts[1].state.output, "done");
});

test("a revert that drops the end of the history sends from the cut", () => {
  const cache = new SentCache().session("ses_1", 0);
  const messages = history(6);
  encode(copy(messages), cache);
  const reverted = copy(messages).slice(0, 8);
  reverted.push(message("u9", "user", [text("pu9", "instead")]));
  const delta = encode(reverted, cache);
  assert.equal(delta.base, 8);
  assert.deepEqual(
    delta.messages.map((m) => m.id),
    ["u9"],
  );
});

test("a settled message compacted deep in the history is noticed by the moving window", () => {
  const cache = new SentCache().session("ses_1", 0);
  const messages = history(10);
  encode(copy(messages), cache);
  const compacted = copy(messages);
  compacted[3].parts[0].state.time.compacted = 99;
  let base = null;
  // The window checks settled messages a few dozen at a time; 20 messages fit in one.
  for (let i = 0; i < 3 && base !== 3; i++) base = encode(copy(compacted), cache).base;
  assert.equal(base, 3);
});

test("a part without an id is always sent in full", () => {
  const cache = new SentCache().session("ses_1", 0);
  const messages = [message("u0", "user", [{ type: "text", text: "no id" }])];
  encode(copy(messages), cache);
  const again = encode(copy(messages), cache);
  assert.equal(again.base, 0);
  assert.equal(again.messages[0].parts[0].text, "no id");
});

test("a new sidecar generation forgets what was sent", () => {
  const sent = new SentCache();
  const messages = history(3);
  encode(copy(messages), sent.session("ses_1", 1));
  assert.equal(encode(copy(messages), sent.session("ses_1", 1)).base, 6);
  const fresh = encode(copy(messages), sent.session("ses_1", 2));
  assert.equal(fresh.base, 0);
  assert.equal(fresh.messages.length, 6);
  sent.forget("ses_1");
  assert.equal(encode(copy(messages), sent.session("ses_1", 2)).base, 0);
});

test("a message's version: its id and info slots, then each part's id and slots", () => {
  const m = message("a0", "assistant", [tool("pt0", "out"), text("px0", "hello")]);
  const v = version(m);
  assert.equal(v.length, 7 + 5 * 2);
  assert.deepEqual([v[0], v[7], v[12]], ["a0", "pt0", "px0"]);
  assert.deepEqual(v.slice(7), ["pt0", "completed", undefined, 2, 3, "px0", "text", 5, undefined, undefined]);
  // Every field that changes changes the version; the rest (a tool's input) does not.
  const changes = [
    (c) => (c.info.time.completed = 5),
    (c) => (c.info.finish = "stop"),
    (c) => (c.info.summary = true),
    (c) => (c.info.error = { name: "x" }),
    (c) => (c.info.tokens = { output: 3 }),
    (c) => (c.parts[0].state.status = "error"),
    (c) => (c.parts[0].state.time.end = 9),
    (c) => (c.parts[0].state.time.compacted = 9),
    (c) => (c.parts[0].state.output = "longer output"),
    (c) => (c.parts[1].text = "hello, world"),
    (c) => (c.parts[1].ignored = true),
    (c) => c.parts.push(text("px1", "more")),
  ];
  for (const change of changes) {
    const c = copy([m])[0];
    change(c);
    assert.notDeepEqual(version(c), v, change.toString());
  }
  const same = copy([m])[0];
  same.parts[0].state.input = { filePath: "/elsewhere" };
  assert.deepEqual(version(same), v);
});

test("a part without an id stands as null in the version; its message is re-sent, its other parts by reference", () => {
  const cache = new SentCache().session("ses_1", 0);
  const messages = [message("u0", "user", [text("pu0", "with id"), { type: "text", text: "no id" }])];
  assert.deepEqual(version(messages[0]).slice(7), ["pu0", "text", 7, undefined, undefined, null, null, null, null, null]);
  encode(copy(messages), cache);
  const again = encode(copy(messages), cache);
  assert.equal(again.base, 0);
  assert.deepEqual(again.messages[0].parts[0], { ref: "pu0" });
  assert.equal(again.messages[0].parts[1].text, "no id");
  assert.equal(again.messages[0].info, undefined);
});

test("a settled tool part whose status changed is noticed by the moving window", () => {
  const cache = new SentCache().session("ses_1", 0);
  const messages = history(10);
  encode(copy(messages), cache);
  const changed = copy(messages);
  changed[5].parts[0].state.status = "error";
  let base = null;
  for (let i = 0; i < 3 && base !== 5; i++) base = encode(copy(changed), cache).base;
  assert.equal(base, 5);
});
