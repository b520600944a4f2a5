// Unit tests of the request line written as it is made (`streamed.js`): its pieces are the
// line `JSON.stringify` makes, the lazy encoding sends what the eager one sends and leaves the
// same cache, and no other line is written into the middle of a line being streamed.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Lazy, linePieces } from "../streamed.js";
import { SentCache, encode, encodeEach } from "../encode.js";
import { Sidecar } from "../sidecar.js";
import { fakeDcp } from "./fake-dcp.js";

const line = (envelope) => [...linePieces(envelope)].join("");

test("a line made in pieces is the line JSON.stringify makes", () => {
  const items = () => [{ a: 1 }, "é \u2028 \"q\"", undefined, () => 1, null, [1, [2]], { toJSON: () => "t" }];
  const params = [
    { sessionID: "s", messages: new Lazy(items()), have: 3 },
    { gone: undefined, f: () => 1, messages: new Lazy([]), base: 0 },
    { messages: new Lazy(items()), other: new Lazy([1, 2]), nested: { list: new Lazy([3]) } },
    { first: new Lazy(["x"]) },
  ];
  for (const p of params) {
    const envelope = { jsonrpc: "2.0", id: 7, method: "transform", params: p };
    assert.equal(line(envelope), JSON.stringify(envelope));
  }
  // Without a lazy list, or with params that are no plain object, the line is made whole.
  for (const p of [{ a: 1 }, [new Lazy([1])], 5, undefined, { toJSON: () => ({ messages: new Lazy([1]) }) }]) {
    const envelope = { jsonrpc: "2.0", id: 1, method: "m", params: p };
    assert.equal(line(envelope), JSON.stringify(envelope));
  }
});

/** A history of `n` messages, each with a text part and a tool part. */
function history(n) {
  return Array.from({ length: n }, (_, i) => ({
    info: { id: `msg_${i}`, sessionID: "ses_a", role: i % 2 ? "assistant" : "user", time: { created: i, completed: i + 1 } },
    parts: [
      { id: `prt_t${i}`, sessionID: "ses_a", messageID: `msg_${i}`, type: "text", text: `text ${i}`, time: { start: i } },
      {
        id: `prt_c${i}`,
        sessionID: "ses_a",
        messageID: `msg_${i}`,
        type: "tool",
        tool: "read",
        callID: `call_${i}`,
        state: { status: "completed", input: { filePath: `/f${i % 7}` }, output: "x".repeat(i % 50), title: "t", time: { start: i, end: i } },
      },
    ],
  }));
}

test("the history encoded as it is written is the history encoded whole, and leaves the same cache", () => {
  const messages = history(300);
  const eager = new SentCache().session("ses_a", 1);
  const lazy = new SentCache().session("ses_a", 1);
  for (const upTo of [200, 200, 260, 300]) {
    const now = messages.slice(0, upTo);
    now[upTo - 1] = structuredClone(now[upTo - 1]);
    now[upTo - 1].parts[0].text += " (edited)";
    const whole = JSON.stringify({ jsonrpc: "2.0", id: 2, method: "transform", params: { sessionID: "ses_a", ...encode(now, eager) } });
    const made = line({ jsonrpc: "2.0", id: 2, method: "transform", params: { sessionID: "ses_a", ...encodeEach(now, lazy) } });
    assert.equal(made, whole, `up to ${upTo}`);
    assert.deepEqual(lazy.prints, eager.prints);
    assert.deepEqual([...lazy.infos.keys()], [...eager.infos.keys()]);
    assert.deepEqual([...lazy.parts.keys()], [...eager.parts.keys()]);
  }
});

/** A fake `dcp` (node) that writes every line it reads to `out`, and answers each request. */
function echoingDcp(t, out) {
  const js = `
    const fs = require("fs");
    let buf = "";
    process.stdin.setEncoding("utf8");
    process.stdin.on("data", (chunk) => {
      buf += chunk;
      let at;
      while ((at = buf.indexOf("\\n")) >= 0) {
        const text = buf.slice(0, at);
        buf = buf.slice(at + 1);
        fs.appendFileSync(${JSON.stringify(out)}, text + "\\n");
        const m = JSON.parse(text);
        if (m.id !== undefined) process.stdout.write(JSON.stringify({ jsonrpc: "2.0", id: m.id, result: { got: text.length } }) + "\\n");
      }
    });`;
  fakeDcp(t, `exec node -e '${js.replace(/'/g, "'\\''")}'`);
}

test("lines written while a long line is streamed wait for its end", async (t) => {
  const out = join(fakeDcp(t, ""), "lines.jsonl");
  echoingDcp(t, out);
  const sidecar = new Sidecar(() => {}, "/proj");
  sidecar.start();
  assert.ok(await sidecar.ready);
  // Over a megabyte: the line is handed to the pipe in several batches.
  const messages = Array.from({ length: 400 }, (_, i) => ({ id: `m${i}`, text: "y".repeat(3000) }));
  const params = { sessionID: "s", messages: new Lazy(messages.values()) };
  const transform = sidecar.call("transform", params);
  sidecar.notify("event", { type: "session.idle" });
  const system = sidecar.call("system", { sessionID: "s" });
  const [a, b] = await Promise.all([transform, system]);
  const lines = readFileSync(out, "utf8").trimEnd().split("\n");
  const expected = JSON.stringify({ jsonrpc: "2.0", id: 2, method: "transform", params: { sessionID: "s", messages } });
  assert.equal(lines.length, 4);
  assert.equal(lines[1], expected);
  assert.equal(a.got, expected.length);
  assert.deepEqual(JSON.parse(lines[2]), { jsonrpc: "2.0", method: "event", params: { type: "session.idle" } });
  assert.equal(JSON.parse(lines[3]).method, "system");
  assert.equal(b.got, lines[3].length);
  sidecar.log = () => {};
  sidecar.child.kill("SIGTERM");
});

test("a line whose encoding fails halfway fails its call and restarts the sidecar", async (t) => {
  const out = join(fakeDcp(t, ""), "lines.jsonl");
  echoingDcp(t, out);
  const logged = [];
  const sidecar = new Sidecar((level, text) => logged.push([level, text]), "/proj");
  sidecar.start();
  assert.ok(await sidecar.ready);
  const first = sidecar.child;
  function* failing() {
    for (let i = 0; i < 300; i++) yield { id: `m${i}`, text: "y".repeat(3000) };
    throw new Error("encoding failed");
  }
  await assert.rejects(sidecar.call("transform", { sessionID: "s", messages: new Lazy(failing()) }), /encoding failed/);
  // Its cache says the sidecar has what it never read whole: the next request starts afresh.
  assert.notEqual(sidecar.child, first);
  assert.ok(logged.some(([, text]) => text.startsWith("cannot write to the sidecar: encoding failed")), JSON.stringify(logged));
});
