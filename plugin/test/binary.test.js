// Unit tests of the binary lookup (DCP_BIN, the platform package beside the plugin, PATH) and
// of the version check at `initialize`, on real files in a temp dir laid out as npm installs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { findBinary, platformPackages, PLUGIN_VERSION } from "../binary.js";
import { Sidecar } from "../sidecar.js";

/** `node_modules/dcp-opencode/plugin/` and the given platform packages beside it. */
function install(packages) {
  const root = mkdtempSync(join(tmpdir(), "dcp-binary-"));
  const modules = join(root, "node_modules");
  mkdirSync(join(modules, "dcp-opencode/plugin"), { recursive: true });
  for (const name of packages) {
    mkdirSync(join(modules, name, "bin"), { recursive: true });
    writeFileSync(join(modules, name, "package.json"), JSON.stringify({ name, version: "0.1.0" }));
    writeFileSync(join(modules, name, "bin/dcp"), "");
  }
  mkdirSync(join(root, "path-dir"));
  return { root, modules, from: pathToFileURL(join(modules, "dcp-opencode/plugin/binary.js")).href };
}

const linux = { platform: "linux", arch: "x64", musl: false };

test("DCP_BIN comes first, and a DCP_BIN with no file is not passed over", () => {
  const i = install(["dcp-opencode-linux-x64"]);
  const bin = join(i.root, "path-dir/dcp");
  writeFileSync(bin, "");
  assert.deepEqual(findBinary({ ...linux, from: i.from, env: { DCP_BIN: bin } }), { path: bin, source: "DCP_BIN" });
  const missing = findBinary({ ...linux, from: i.from, env: { DCP_BIN: join(i.root, "nope") } });
  assert.equal(missing.path, null);
  assert.match(missing.tried, /no file there/);
  rmSync(i.root, { recursive: true });
});

test("the platform package beside the plugin is found from the plugin's own location", () => {
  const i = install(["dcp-opencode-linux-x64"]);
  const found = findBinary({ ...linux, from: i.from, env: { PATH: join(i.root, "path-dir") } });
  assert.deepEqual(found, { path: join(i.modules, "dcp-opencode-linux-x64/bin/dcp"), source: "dcp-opencode-linux-x64" });
  rmSync(i.root, { recursive: true });
});

test("on musl the musl package is found, and the other one when only it is installed", () => {
  assert.deepEqual(platformPackages("linux", "x64", true), ["dcp-opencode-linux-x64-musl", "dcp-opencode-linux-x64"]);
  assert.deepEqual(platformPackages("darwin", "arm64", false), ["dcp-opencode-darwin-arm64"]);
  const i = install(["dcp-opencode-linux-x64-musl"]);
  assert.equal(findBinary({ ...linux, musl: true, from: i.from, env: {} }).source, "dcp-opencode-linux-x64-musl");
  assert.equal(findBinary({ ...linux, musl: false, from: i.from, env: {} }).source, "dcp-opencode-linux-x64-musl");
  rmSync(i.root, { recursive: true });
});

test("PATH is the last resort, and nothing found says what was looked for", () => {
  const i = install([]);
  const bin = join(i.root, "path-dir/dcp");
  assert.deepEqual(findBinary({ ...linux, from: i.from, env: { PATH: join(i.root, "path-dir") } }), {
    path: null,
    tried: "DCP_BIN, dcp-opencode-linux-x64, PATH",
  });
  writeFileSync(bin, "");
  assert.deepEqual(findBinary({ ...linux, from: i.from, env: { PATH: join(i.root, "path-dir") } }), { path: bin, source: "PATH" });
  rmSync(i.root, { recursive: true });
});

test("the plugin's version is its package.json's", () => {
  const manifest = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
  assert.equal(PLUGIN_VERSION, manifest.version);
});

test("a binary of another version is told to the user once, naming both versions", () => {
  const told = [];
  const sidecar = new Sidecar(() => {}, "/proj", (kind, text) => told.push([kind, text]));
  const found = { path: "/x/dcp", source: "PATH" };
  sidecar.checkVersion({ version: PLUGIN_VERSION }, found);
  assert.equal(told.length, 0);
  sidecar.checkVersion({ version: "9.9.9" }, found);
  sidecar.checkVersion({ version: "9.9.9" }, found);
  assert.equal(told.length, 1);
  assert.equal(told[0][0], "version");
  assert.match(told[0][1], new RegExp(`plugin is ${PLUGIN_VERSION.replaceAll(".", "\\.")} but the binary it runs is 9\\.9\\.9 \\(/x/dcp, from PATH\\)`));
});
