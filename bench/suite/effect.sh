#!/usr/bin/env bash
# The effect benchmark: replays the whole suite (README.md) in every mode, with a 5-minute
# prompt cache and with one that never expires, and prints per session and aggregated
# (median, worst, total) the ratios to no pruning of tokens sent, cost and final context.
#
#   bash bench/suite/effect.sh            # from the repository root; builds dcp --release first
#
# Knobs: DCP_BIN (default target/release/dcp, built if missing), SUITE (default target/suite),
# MODES (default all), JSON=1 also writes $SUITE/effect-<ttl>.json.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO"
DCP_BIN="${DCP_BIN:-$REPO/target/release/dcp}"
SUITE="${SUITE:-$REPO/target/suite}"
[ -x "$DCP_BIN" ] || cargo build --release
python3 bench/suite/build.py "$SUITE"
for ttl in 300 never; do
  echo
  echo "== dcp replay --all --mode ${MODES:-all} --cache-ttl $ttl"
  SECONDS=0
  "$DCP_BIN" replay --all --data-dir "$SUITE" --mode "${MODES:-all}" --cache-ttl "$ttl"
  echo "replayed in about ${SECONDS} s"
  if [ "${JSON:-0}" = 1 ]; then
    "$DCP_BIN" replay --all --data-dir "$SUITE" --mode "${MODES:-all}" --cache-ttl "$ttl" --json >"$SUITE/effect-$ttl.json"
  fi
done
