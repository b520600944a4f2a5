// Unit tests of the sidecar client's failures as the user meets them: a sidecar that exits at
// start is told with its first line of stderr, one that keeps crashing is told once, and its
// warnings reach OpenCode's log once each. The sidecar is a small shell script.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Sidecar } from "../sidecar.js";
import { chmodSync } from "node:fs";
import { join } from "node:path";
import { fakeDcp } from "./fake-dcp.js";

const WARNING = "dcp: warning: /cfg/dcp.jsonc: unknown key `foo` ignored";

function recorder() {
  const logged = [];
  const told = [];
  return { logged, told, log: (level, text) => logged.push([level, text]), tell: (kind, text) => told.push([kind, text]) };
}

const BAD_VALUE = 'config /cfg/dcp.jsonc: `pruneNotification` must be one of off, minimal, detailed, not "loud"';

/** Starts a sidecar whose binary runs `script`, and checks that its exit at start is told with
 * `BAD_VALUE`. */
async function assertToldAtStart(t, script) {
  fakeDcp(t, script);
  const r = recorder();
  const sidecar = new Sidecar(r.log, "/proj", r.tell);
  sidecar.start();
  assert.equal(await sidecar.ready, null);
  assert.deepEqual(r.told, [["start", `dcp is off: the sidecar exited at start: ${BAD_VALUE}`]]);
}

test("a sidecar that exits at start is told with its first line of stderr", async (t) => {
  await assertToldAtStart(t, `echo 'dcp: ${BAD_VALUE}' >&2\nexit 1`);
});

test("a sidecar's reason cut across two writes is told whole", async (t) => {
  // The pipe delivers `dcp: ` and the rest apart, as a loaded machine did in CI.
  await assertToldAtStart(t, `printf 'dcp: ' >&2\nsleep 0.3\necho '${BAD_VALUE}' >&2\nexit 1`);
});

test("a sidecar that keeps crashing is told from its third failure, and its warnings are logged once each", async (t) => {
  // Answers `initialize`, then dies on the next request.
  fakeDcp(
    t,
    `echo '${WARNING}' >&2
read line
echo '{"jsonrpc":"2.0","id":'"$(echo "$line" | sed 's/.*"id":\\([0-9]*\\).*/\\1/')"',"result":{"protocol":1,"commands":true}}'
read line
exit 3`,
  );
  const r = recorder();
  const sidecar = new Sidecar(r.log, "/proj", r.tell);
  const crashes = () => r.told.filter(([kind]) => kind === "crash");
  for (let i = 1; i <= 3; i++) {
    assert.equal(crashes().length, 0, `nothing told before failure ${i}`);
    assert.ok(sidecar.start(), `start ${i}`);
    assert.ok(await sidecar.ready, `initialize ${i}`);
    await assert.rejects(sidecar.call("system", {}));
  }
  // The notifier tells each kind once; the sidecar hands it every count from the third on.
  assert.equal(crashes().length, 1, JSON.stringify(r.told));
  assert.match(crashes()[0][1], /^dcp keeps failing \(3 times in 10 minutes, last: sidecar exited \(3\)/);
  assert.deepEqual(r.logged.filter(([, text]) => text === WARNING), [["warn", WARNING]]);
});

test("a binary that is not executable is told by name with the fix, not as a sidecar that exited", async (t) => {
  const bin = join(fakeDcp(t, "exit 0"), "dcp");
  chmodSync(bin, 0o644);
  const r = recorder();
  const sidecar = new Sidecar(r.log, "/proj", r.tell);
  sidecar.start();
  assert.equal(await sidecar.ready, null);
  const expected = `dcp is off: cannot run ${bin}: it is not executable (permission denied): \`chmod +x\` it, or install it again`;
  assert.deepEqual(r.told, [["start", expected]]);
});
