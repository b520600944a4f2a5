#!/usr/bin/env bash
# The live meter on the proxy path: a lab scenario in mode base (OpenCode without the plugin)
# with its provider's baseURL at `dcp proxy`, which forwards to the lab's fake model; then
# bench/lab/meter.py --proxy compares the proxied conversation's `dcp stats` with `dcp replay`
# of the recorded OpenCode session (the agent tools off on both sides: a proxied client cannot
# run them).
#
#   LAB=/tmp/meter/proxy-long PORT=18961 SCENARIO=bench/lab/long-scenario.json bash bench/lab/proxy-meter.sh
#
# Knobs: DCP_BIN (default target/release/dcp), PPORT (the proxy's port, default PORT + 1), and
# those of ../shared/opencode-lab/run.sh.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
LABDIR="${LABDIR:-$REPO/../shared/opencode-lab}"
[ -d "$LABDIR" ] || LABDIR=/work/shared/opencode-lab
export LAB="${LAB:-/tmp/dcplab-proxy}" PORT="${PORT:-18961}"
PPORT="${PPORT:-$((PORT + 1))}"
DCP_BIN="${DCP_BIN:-$REPO/target/release/dcp}"
SCENARIO="${SCENARIO:-$REPO/bench/lab/long-scenario.json}"
case "$SCENARIO" in /*) ;; *) SCENARIO="$REPO/$SCENARIO" ;; esac
export SCENARIO
mkdir -p "$LAB/proxy/data" "$LAB/proxy/config/opencode"
echo '{"tools": {"discard": {"enabled": false}, "compress": {"enabled": false}}}' >"$LAB/proxy/config/opencode/dcp.jsonc"
XDG_DATA_HOME="$LAB/proxy/data" XDG_CONFIG_HOME="$LAB/proxy/config" \
  "$DCP_BIN" proxy --listen "127.0.0.1:$PPORT" --upstream "http://127.0.0.1:$PORT" 2>"$LAB/proxy.log" &
PROXY=$!
trap 'kill "$PROXY" 2>/dev/null || true' EXIT
MODES=base PROVIDER_URL="http://127.0.0.1:$PPORT/v1" bash "$LABDIR/run.sh"
kill -TERM "$PROXY"; wait "$PROXY" || true
trap - EXIT
python3 "$REPO/bench/lab/meter.py" --dcp "$DCP_BIN" --proxy "$LAB"
