// Unit tests of what the plugin forwards of OpenCode's billing: a finished step's `tokens` and
// `cost` and the model's prices, from the payloads OpenCode 1.18.33 hands its hooks (recorded
// in the lab: a `message.updated` event and `experimental.chat.system.transform`'s model),
// reach the sidecar as one `usage` notification; nothing else does.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DcpPlugin } from "../hooks.js";
import { modelFacts, stepUsage } from "../usage.js";
import { fakeDcp } from "./fake-dcp.js";

/** The model OpenCode 1.18.33 hands `experimental.chat.system.transform` (and `chat.params`). */
const MODEL = {
  id: "fake-model",
  api: { id: "fake-model", npm: "@ai-sdk/openai-compatible", url: "" },
  status: "active",
  name: "Fake Model",
  providerID: "fake",
  cost: { input: 3, output: 15, cache: { read: 0.3, write: 3.75 } },
  options: {},
  limit: { context: 128000, output: 8192 },
};

/** A finished step's info, as OpenCode's `message.updated` event carries it. */
function step(over = {}) {
  return {
    id: "msg_2501088cc001Fk7ZmN50wCqILw",
    sessionID: "ses_dafef995dffeCKh8S6KDrKskfg",
    role: "assistant",
    tokens: { total: 7496, input: 495, output: 1, reasoning: 0, cache: { write: 0, read: 7000 } },
    cost: 0.0225,
    time: { created: 1796639590604, completed: 1796639591199 },
    finish: "stop",
    modelID: "fake-model",
    providerID: "fake",
    ...over,
  };
}

test("a model's data gives its provider, prices per million tokens and context window", () => {
  assert.deepEqual(modelFacts(MODEL), {
    provider: "fake",
    id: "fake-model",
    cost: { input: 3, output: 15, cacheRead: 0.3, cacheWrite: 3.75 },
    context: 128000,
  });
  // A model without prices (OpenCode's default for a custom one) is named without them.
  assert.deepEqual(modelFacts({ ...MODEL, cost: undefined }), { provider: "fake", id: "fake-model", context: 128000 });
  assert.equal(modelFacts({ name: "no ids" }), undefined);
});

test("a finished step's usage is what OpenCode stored, with the model's prices when it is that model", () => {
  const facts = modelFacts(MODEL);
  assert.deepEqual(stepUsage(step(), facts), {
    sessionID: "ses_dafef995dffeCKh8S6KDrKskfg",
    created: 1796639590604,
    usage: { input: 495, output: 1, reasoning: 0, cacheRead: 7000, cacheWrite: 0, cost: 0.0225 },
    model: facts,
  });
  // Another model than the one whose prices are known is named alone; a cost of 0 is none.
  const other = stepUsage(step({ modelID: "other", cost: 0 }), facts);
  assert.deepEqual(other.model, { provider: "fake", id: "other" });
  assert.equal(other.usage.cost, undefined);
  // Not a finished step: nothing.
  assert.equal(stepUsage(step({ time: { created: 1 } }), facts), undefined, "still running");
  assert.equal(stepUsage(step({ role: "user" }), facts), undefined, "a user message");
  assert.equal(stepUsage(step({ summary: true }), facts), undefined, "a compaction's summary");
  assert.equal(stepUsage(step({ tokens: undefined }), facts), undefined, "no tokens");
});

test("the plugin forwards each finished step's usage to the sidecar, and nothing for other events", async (t) => {
  const lines = join(mkdtempSync(join(tmpdir(), "dcp-usage-test-")), "lines");
  // A sidecar that answers `initialize`, writes down the next line it gets, and exits (after 3 s
  // without one too).
  const init = `'{"jsonrpc":"2.0","id":'$id',"result":{"protocol":1,"commands":false}}'`;
  const id = `id=$(echo "$line" | sed 's/.*"id":\\([0-9]*\\).*/\\1/')`;
  const dir = fakeDcp(t, `read line\n${id}\necho ${init}\ntimeout 3 head -n 1 >> '${lines}'`);
  const hooks = await DcpPlugin({ client: {}, directory: dir });
  const sessionID = step().sessionID;
  await hooks["experimental.chat.system.transform"]({ sessionID, model: MODEL }, { system: ["You are OpenCode."] });
  const running = step({ time: { created: 1796639590604 } });
  for (const info of [running, step(), { id: "msg_u", sessionID, role: "user", time: { created: 1 } }]) {
    await hooks.event({ event: { type: "message.updated", properties: { sessionID, info } } });
  }
  await hooks.event({ event: { type: "message.part.updated", properties: { sessionID, part: { id: "prt" } } } });
  const sent = () => {
    try {
      return readFileSync(lines, "utf8").trim().split("\n").filter(Boolean).map((l) => JSON.parse(l));
    } catch {
      return [];
    }
  };
  for (let i = 0; i < 100 && sent().length < 1; i++) await new Promise((r) => setTimeout(r, 20));
  await new Promise((r) => setTimeout(r, 100));
  const got = sent();
  assert.equal(got.length, 1, JSON.stringify(got));
  assert.equal(got[0].method, "usage");
  assert.equal(got[0].id, undefined, "a notification");
  assert.deepEqual(got[0].params, stepUsage(step(), modelFacts(MODEL)));
});
