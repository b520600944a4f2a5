// Which `dcp` binary the plugin runs, and which version the plugin is.
//
// The order: `DCP_BIN`; then the platform package (`dcp-opencode-linux-x64`, …) resolved from
// this file's own location, as Node resolves a package: OpenCode installs the main package
// `dcp-opencode` with npm, which puts the platform package matching `os`/`cpu`/`libc` beside
// it (no install script runs); then `dcp` on `PATH`, for a clone with `cargo install`.
// `dcp doctor` follows the same order (src/doctor/install.rs).

import { createRequire } from "node:module";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { delimiter, dirname, join } from "node:path";

export const PACKAGE = "dcp-opencode";

/** This plugin's version, from the package.json beside it; null if unreadable. */
export const PLUGIN_VERSION = (() => {
  try {
    return JSON.parse(readFileSync(new URL("./package.json", import.meta.url), "utf8")).version ?? null;
  } catch {
    return null;
  }
})();

function isMusl() {
  try {
    return readdirSync("/lib").some((f) => f.startsWith("ld-musl-"));
  } catch {
    return false;
  }
}

/** The platform packages that could hold this machine's binary, the likelier first. */
export function platformPackages(platform = process.platform, arch = process.arch, musl = platform === "linux" && isMusl()) {
  const base = `${PACKAGE}-${platform}-${arch}`;
  if (platform !== "linux") return [base];
  return musl ? [`${base}-musl`, base] : [base, `${base}-musl`];
}

/**
 * The binary to run: `{path, source}` where `source` is `DCP_BIN`, the platform package's
 * name, or `PATH`; or `{path: null, tried}` saying what was looked for.
 * `from` is the URL of the module packages are resolved from (this one, by default).
 */
export function findBinary({ env = process.env, from = import.meta.url, platform = process.platform, arch = process.arch, musl } = {}) {
  const exe = platform === "win32" ? "dcp.exe" : "dcp";
  if (env.DCP_BIN) {
    return existsSync(env.DCP_BIN) ? { path: env.DCP_BIN, source: "DCP_BIN" } : { path: null, tried: `DCP_BIN=${env.DCP_BIN} (no file there)` };
  }
  const packages = platformPackages(platform, arch, musl ?? (platform === "linux" && isMusl()));
  let require;
  try {
    require = createRequire(from);
  } catch {}
  for (const name of packages) {
    try {
      const candidate = join(dirname(require.resolve(`${name}/package.json`)), "bin", exe);
      if (existsSync(candidate)) return { path: candidate, source: name };
    } catch {}
  }
  for (const dir of (env.PATH || "").split(delimiter)) {
    const candidate = join(dir, exe);
    if (dir && existsSync(candidate)) return { path: candidate, source: "PATH" };
  }
  return { path: null, tried: `DCP_BIN, ${packages[0]}, PATH` };
}
