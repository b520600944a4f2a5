// Unit tests of what the user is told: failures once per kind, where the user looks, and
// messages the TUI shows (not synthetic) and the model never gets (ignored).
import { test } from "node:test";
import assert from "node:assert/strict";
import { Notifier, shownPart, surfaceOf } from "../notify.js";

/** A stand-in for OpenCode's client that records what it was asked to show. */
function client() {
  const calls = { toasts: [], prompts: [] };
  return {
    calls,
    tui: { showToast: async (req) => calls.toasts.push(req.body) },
    session: { prompt: async (req) => (calls.prompts.push(req), { data: {} }) },
  };
}

test("opencode run is told apart from the TUI by its arguments", () => {
  assert.equal(surfaceOf(["bun", "/$bunfs/root/src/index.js", "run", "--command", "dcp"]), "run");
  assert.equal(surfaceOf(["bun", "/$bunfs/root/src/cli/tui/worker.js"]), "tui");
  assert.equal(surfaceOf(["bun", "/$bunfs/root/src/index.js", "serve"]), "tui");
});

test("a shown part is ignored by the model and not hidden by the TUI", () => {
  const part = shownPart("▣ DCP | -1.7K tokens, 1 tool");
  assert.equal(part.type, "text");
  assert.equal(part.ignored, true);
  assert.equal(part.synthetic, undefined);
  assert.ok(part.time.end >= part.time.start);
});

test("a failure is told once per kind, toasted and logged at warn level", () => {
  const c = client();
  const logged = [];
  const n = new Notifier(c, (level, text) => logged.push([level, text]), "tui");
  n.sawEvent("session.created");
  n.notifyUser("binary", "dcp is off: no binary");
  n.notifyUser("binary", "dcp is off: no binary");
  n.notifyUser("start", "dcp is off: exited at start");
  assert.deepEqual(logged, [["warn", "dcp is off: no binary"], ["warn", "dcp is off: exited at start"]]);
  assert.deepEqual(c.calls.toasts.map((t) => t.message), ["dcp is off: no binary", "dcp is off: exited at start"]);
  assert.equal(c.calls.toasts[0].variant, "error");
  assert.equal(n.reason, "dcp is off: exited at start");
});

test("a failure told before any client is up is toasted again when one is", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout"] });
  const c = client();
  const n = new Notifier(c, () => {}, "tui");
  n.notifyUser("binary", "dcp is off: no binary");
  assert.equal(c.calls.toasts.length, 1);
  n.sawEvent("tui.toast.show");
  n.sawEvent("plugin.added");
  t.mock.timers.tick(1000);
  assert.equal(c.calls.toasts.length, 2, "toasted again a second after the client's first event");
});

test("under opencode run a failure goes to stderr, not to a toast", () => {
  const c = client();
  const written = [];
  const write = process.stderr.write;
  process.stderr.write = (text) => written.push(String(text));
  try {
    new Notifier(c, () => {}, "run").notifyUser("binary", "dcp is off: no binary");
  } finally {
    process.stderr.write = write;
  }
  assert.deepEqual(written, ["dcp is off: no binary\n"]);
  assert.equal(c.calls.toasts.length, 0);
});

test("show posts one message of ignored parts that asks for no reply", async () => {
  const c = client();
  const n = new Notifier(c, () => {}, "tui");
  assert.equal(await n.show("ses_1", ["/dcp stats", "DCP statistics"]), true);
  const [req] = c.calls.prompts;
  assert.equal(req.path.id, "ses_1");
  assert.equal(req.body.noReply, true);
  assert.deepEqual(req.body.parts.map((p) => [p.text, p.ignored]), [["/dcp stats", true], ["DCP statistics", true]]);
  assert.equal(await n.show(undefined, ["x"]), false);
});
