// The plugin tests' stand-in for the `dcp` binary: a small shell script that DCP_BIN points
// at for the length of one test.
import { chmodSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** Writes a fake `dcp` that runs `body` (sh), points DCP_BIN at it until test `t` ends, and
 * returns the folder it is in. */
export function fakeDcp(t, body) {
  const dir = mkdtempSync(join(tmpdir(), "dcp-plugin-test-"));
  const bin = join(dir, "dcp");
  writeFileSync(bin, `#!/bin/sh\n${body}\n`);
  chmodSync(bin, 0o755);
  const before = process.env.DCP_BIN;
  process.env.DCP_BIN = bin;
  t.after(() => {
    if (before === undefined) delete process.env.DCP_BIN;
    else process.env.DCP_BIN = before;
  });
  return dir;
}
