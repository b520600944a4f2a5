// Unit tests of the agent tools' registration: the tools the sidecar enables are registered
// with its arguments, and the `tool.definition` hook leaves optional what the sidecar's
// `required` lists leave out (OpenCode marks every argument of a JSON-Schema tool required).
// The sidecar is a small shell script that answers `initialize` and exits.
import { test } from "node:test";
import assert from "node:assert/strict";
import { DcpPlugin } from "../hooks.js";
import { fakeDcp } from "./fake-dcp.js";

const STRINGS = { type: "array", items: { type: "string" } };

/** A plugin whose fake `dcp` answers `initialize` with `result` (DCP_BIN points at it). */
async function pluginWith(t, result) {
  const answer = JSON.stringify({ jsonrpc: "2.0", id: 0, result }).replace('"id":0', '"id":\'"$id"\'');
  const dir = fakeDcp(t, `read line\nid=$(echo "$line" | sed 's/.*"id":\\([0-9]*\\).*/\\1/')\necho '${answer}'`);
  return DcpPlugin({ client: {}, directory: dir });
}

/** What OpenCode hands `tool.definition` for a JSON-Schema tool: every argument required. */
function opencodeDefinition(args) {
  return { description: "d", parameters: {}, jsonSchema: { type: "object", properties: args, required: Object.keys(args) } };
}

const INIT = {
  protocol: 1,
  commands: true,
  tools: { discard: true, extract: false, compress: true },
  descriptions: { discard: "Drop.", compress: "Replace." },
  args: { discard: { ids: STRINGS, distillation: STRINGS }, compress: { from: { type: "string" } } },
  required: { discard: ["ids"], compress: ["from"] },
};

test("discard's distillation is optional in the definition OpenCode sends, and other tools are left alone", async (t) => {
  const hooks = await pluginWith(t, INIT);
  assert.deepEqual(Object.keys(hooks.tool), ["discard", "compress"]);
  const discard = opencodeDefinition(INIT.args.discard);
  await hooks["tool.definition"]({ toolID: "discard" }, discard);
  assert.deepEqual(discard.jsonSchema, { type: "object", properties: INIT.args.discard, required: ["ids"] });
  // Another plugin's tool of the same shape, and extract (not registered), keep theirs.
  for (const toolID of ["grep_records", "extract"]) {
    const other = opencodeDefinition(INIT.args.discard);
    await hooks["tool.definition"]({ toolID }, other);
    assert.deepEqual(other.jsonSchema.required, ["ids", "distillation"], toolID);
  }
});

test("a binary without required lists leaves every argument required", async (t) => {
  const { required, ...older } = INIT;
  const hooks = await pluginWith(t, older);
  const discard = opencodeDefinition(INIT.args.discard);
  await hooks["tool.definition"]({ toolID: "discard" }, discard);
  assert.deepEqual(discard.jsonSchema.required, ["ids", "distillation"]);
});
