#!/usr/bin/env bash
# Writes dcp's npm packages as tarballs into target/npm/ (or $DCP_NPM_OUT):
#
#   dcp-opencode-<version>.tgz             the plugin (plugin/), main: plugin/index.js, and the
#                                          platform packages as optionalDependencies
#   dcp-opencode-<platform>-<version>.tgz  one per platform with a binary: bin/dcp (bin/dcp.exe)
#
# Which binaries:
#   - $DCP_PACK_BIN_DIR/<platform>/dcp[.exe] for every platform found there (a release
#     workflow downloads each platform's build there); nothing is built then;
#   - else $DCP_BIN_FOR_PACK, an already built binary for this machine's platform (the tests
#     pack the binary they built, so they need no release build);
#   - else `cargo build --release`, and target/release/dcp.
# A binary for this machine's platform is stripped of its symbols ($DCP_PACK_STRIP=0 keeps them).
# Versions come from Cargo.toml; npm/package.json and plugin/package.json must carry the same.
# Nothing is published: see README.md, "Packaging".
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

die() { echo "pack.sh: $*" >&2; exit 1; }

version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)"
[ -n "$version" ] || die "no version in Cargo.toml"
for manifest in npm/package.json plugin/package.json; do
  grep -q "\"version\": \"$version\"" "$manifest" || die "$manifest does not carry version $version (Cargo.toml)"
done

# platform  os      cpu    libc   (the npm names: dcp-opencode-<platform>)
platforms="linux-x64 linux x64 glibc
linux-x64-musl linux x64 musl
linux-arm64 linux arm64 glibc
darwin-x64 darwin x64 -
darwin-arm64 darwin arm64 -
win32-x64 win32 x64 -"

host_platform() {
  local os cpu
  case "$(uname -s)" in
    Linux) os=linux ;;
    Darwin) os=darwin ;;
    MINGW* | MSYS* | CYGWIN*) os=win32 ;;
    *) die "unknown OS $(uname -s)" ;;
  esac
  case "$(uname -m)" in
    x86_64 | amd64) cpu=x64 ;;
    aarch64 | arm64) cpu=arm64 ;;
    *) die "unknown CPU $(uname -m)" ;;
  esac
  if [ "$os" = linux ] && ldd --version 2>&1 | grep -qi musl; then
    echo "$os-$cpu-musl"
  else
    echo "$os-$cpu"
  fi
}

out="${DCP_NPM_OUT:-$root/target/npm}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
stage="$out/stage"
rm -rf "$stage"
rm -f "$out"/dcp-opencode-*.tgz
mkdir -p "$stage"

# Which binary for which platform.
declare -A bins=()
if [ -n "${DCP_PACK_BIN_DIR:-}" ]; then
  while read -r platform _; do
    for name in dcp dcp.exe; do
      [ -f "$DCP_PACK_BIN_DIR/$platform/$name" ] && bins[$platform]="$DCP_PACK_BIN_DIR/$platform/$name"
    done
  done <<<"$platforms"
  [ ${#bins[@]} -gt 0 ] || die "no <platform>/dcp binary under $DCP_PACK_BIN_DIR"
else
  bin="${DCP_BIN_FOR_PACK:-}"
  if [ -z "$bin" ]; then
    cargo build --release --locked
    bin="$root/target/release/dcp"
  fi
  [ -x "$bin" ] || die "no executable binary at $bin"
  bins[$(host_platform)]="$bin"
fi

pack() {
  (cd "$1" && npm pack --silent --pack-destination "$out" >/dev/null) || die "npm pack failed in $1"
}

host="$(host_platform)"
while read -r platform os cpu libc; do
  src="${bins[$platform]:-}"
  [ -n "$src" ] || continue
  name="dcp-opencode-$platform"
  dir="$stage/$name"
  exe=dcp
  [ "$os" = win32 ] && exe=dcp.exe
  mkdir -p "$dir/bin"
  cp "$src" "$dir/bin/$exe"
  chmod 755 "$dir/bin/$exe"
  if [ "$platform" = "$host" ] && [ "${DCP_PACK_STRIP:-1}" != 0 ] && command -v strip >/dev/null; then
    strip "$dir/bin/$exe"
  fi
  libc_field=""
  [ "$libc" != - ] && libc_field="\"libc\": [\"$libc\"],"
  cat >"$dir/package.json" <<EOF
{
  "name": "$name",
  "version": "$version",
  "description": "The dcp binary for $os $cpu${libc_field:+ ($libc)}, used by the dcp-opencode OpenCode plugin.",
  "os": ["$os"],
  "cpu": ["$cpu"],
  $libc_field
  "files": ["bin/"],
  "preferUnplugged": true,
  "license": "MIT"
}
EOF
  printf '# %s\n\nThe prebuilt `dcp` binary (`bin/%s`) for %s %s%s. Install `dcp-opencode`, which picks it.\n' \
    "$name" "$exe" "$os" "$cpu" "${libc_field:+ ($libc)}" >"$dir/README.md"
  pack "$dir"
done <<<"$platforms"

# The main package: the plugin, whose entry is plugin/index.js.
main="$stage/dcp-opencode"
mkdir -p "$main"
cp npm/package.json npm/README.md "$main/"
cp -R plugin "$main/plugin"
rm -rf "$main/plugin/node_modules"
pack "$main"

rm -rf "$stage"
echo "npm packages of dcp $version in $out:"
for f in "$out"/dcp-opencode-*.tgz; do
  printf '  %-44s %8s KB\n' "$(basename "$f")" "$(( ($(stat -c %s "$f" 2>/dev/null || stat -f %z "$f") + 1023) / 1024 ))"
done
