#!/usr/bin/env bash
# Long lab scenario (13 prompts, one session) with the REAL OpenCode binary against the
# scripted fake LLM of ../shared/opencode-lab: no plugin (base), the published DCP (dcp) and
# our plugin + `dcp serve` sidecar (plugin). Prints summarize.py's table and per-step sizes.
#
#   cd /work/main && cargo build --release
#   LAB=/tmp/dcplab PORT=18801 bash bench/lab/run.sh                       # base dcp plugin, batched rewrites
#   LAB=/tmp/dcplab-imm PORT=18801 MODES=plugin DCP_JSONC=bench/lab/dcp-immediate.jsonc bash bench/lab/run.sh
#
# Knobs: DCP_BIN (default target/release/dcp; point it at a frozen copy while src/ is being
# rebuilt), MODES (default "base dcp plugin"), DCP_JSONC (our plugin's config; default
# bench/lab/dcp.jsonc = {} = dcp defaults, i.e. rewrite.mode "batched"), LAB, PORT and the
# other knobs of ../shared/opencode-lab/run.sh. Note: that script wipes $LAB/out first, so use
# one LAB per configuration. To reuse installs: ln -s /tmp/fixture-lab/node_modules $LAB/node_modules
# and copy an earlier run's $LAB/plugin-deps (run.sh caches @opencode-ai/plugin there).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# The shared lab sits beside the clone (../shared); a worktree elsewhere names it with LABDIR.
LABDIR="${LABDIR:-$REPO/../shared/opencode-lab}"
[ -d "$LABDIR" ] || LABDIR=/work/shared/opencode-lab
export LAB="${LAB:-/tmp/dcplab}"
export PORT="${PORT:-18801}"
export MODES="${MODES:-base dcp plugin}"
DCP_JSONC="${DCP_JSONC:-$REPO/bench/lab/dcp.jsonc}"
case "$DCP_JSONC" in /*) ;; *) DCP_JSONC="$REPO/$DCP_JSONC" ;; esac
# run.sh copies PLUGIN_FILES by their base name into the config dir: it must be dcp.jsonc.
mkdir -p "$LAB"
cp "$DCP_JSONC" "$LAB/dcp.jsonc"
export SCENARIO="${SCENARIO:-$REPO/bench/lab/long-scenario.json}"
case "$SCENARIO" in /*) ;; *) SCENARIO="$REPO/$SCENARIO" ;; esac
export PLUGIN_DIR="$REPO/plugin"
DCP_BIN="${DCP_BIN:-$REPO/target/release/dcp}"
export PLUGIN_ENV="DCP_BIN=$DCP_BIN"
export PLUGIN_FILES="$LAB/dcp.jsonc"
[ -x "$DCP_BIN" ] || { echo "build first: cargo build --release (or set DCP_BIN)" >&2; exit 1; }
bash "$LABDIR/run.sh"
python3 "$LABDIR/summarize.py" --steps "$LAB/out"
