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

/** `/dcp ARGS` through the plugin's command hook under a fake `dcp` that runs `script`; the
 * answer shown (the client cannot post, so it takes the place of the command's prompt). */
async function dcpAnswer(t, script, args) {
  const dir = fakeDcp(t, script);
  const hooks = await DcpPlugin({ client: {}, directory: dir });
  const output = { parts: [] };
  await hooks["command.execute.before"]({ command: "dcp", sessionID: "ses_a", arguments: args }, output);
  return output.parts.map((p) => p.text).join("\n");
}

test("a /dcp command the sidecar fails is answered with its error, not as if dcp were off", async (t) => {
  const id = `id=$(echo "$line" | sed 's/.*"id":\\([0-9]*\\).*/\\1/')`;
  const init = `'{"jsonrpc":"2.0","id":'$id',"result":{"protocol":1,"commands":true}}'`;
  const error = `'{"jsonrpc":"2.0","id":'$id',"error":{"code":-32603,"message":"cannot list state files in /s: Not a directory"}}'`;
  const text = await dcpAnswer(t, `read line\n${id}\necho ${init}\nread line\n${id}\necho ${error}`, "stats");
  assert.match(text, /^dcp could not answer `\/dcp stats`: cannot list state files in \/s: Not a directory\n/);
  assert.doesNotMatch(text, /dcp is off|try again/);
  assert.match(text, /`dcp doctor`/);
});

test("a /dcp command while dcp is off says how to find the cause and to restart OpenCode", async (t) => {
  const text = await dcpAnswer(t, "echo 'dcp: config /c/dcp.jsonc: `debug` must be true or false' >&2\nexit 1", "");
  assert.match(text, /^dcp is off: the sidecar exited at start: config \/c\/dcp.jsonc: `debug` must be true or false\n/);
  assert.match(text, /Run `dcp doctor` \(or `npx dcp-opencode doctor`\) to see what is wrong, fix it, and restart OpenCode/);
});

test("compress's description is the sidecar's for the session of the latest hook, and stays as registered before one", async (t) => {
  const init = JSON.stringify({ jsonrpc: "2.0", id: 0, result: INIT }).replace('"id":0', '"id":\'"$id"\'');
  const described = `{"jsonrpc":"2.0","id":'"$id"',"result":{"compress":"Replace by <mN>."}}`;
  const script = `while read line; do
id=$(echo "$line" | sed 's/.*"id":\\([0-9]*\\).*/\\1/')
case "$line" in
*'"describe"'*) echo '${described}'; exit 0;;
*) echo '${init}';;
esac
done`;
  const dir = fakeDcp(t, script);
  const hooks = await DcpPlugin({ client: {}, directory: dir });
  const before = opencodeDefinition(INIT.args.compress);
  await hooks["tool.definition"]({ toolID: "compress" }, before);
  assert.equal(before.description, "d", "no session seen yet: nothing to ask");
  await hooks["tool.execute.after"]({ tool: "read", sessionID: "ses_a", callID: "c1" }, {});
  const after = opencodeDefinition(INIT.args.compress);
  await hooks["tool.definition"]({ toolID: "compress" }, after);
  assert.equal(after.description, "Replace by <mN>.");
  assert.deepEqual(after.jsonSchema.required, ["from"], "the required list still applies");
});
