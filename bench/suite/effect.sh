#!/usr/bin/env bash
# The effect benchmark, in three groups reported apart, the real one first (README.md):
#   1. real: bench/real's corpus of other people's agent sessions (dcp-testkit import), with
#      continuous runs and interactive sessions apart;
#   2. generated: gen.py's sessions, seed 14, in the suite's shape and in the shape
#      calibrated to the corpus (`real`);
#   3. lab: the real OpenCode against the scripted model, recorded with dcp's plugin
#      (fixtures/replay), and the recorded fixture session.
# The held-out group (`holdout`: bench/real/holdout.json, sessions no one tunes on) runs only
# when named: EFFECT_GROUPS=holdout. Report its figures; never tune on them.
# Each group is replayed in every mode (`dcp replay --all --json`) with a 5-minute prompt cache
# and with one that never expires, and summarised by summary.py: per mode, the ratios to no
# pruning of cost, cost with misses charged, tokens sent and final context (median / worst /
# total over the sessions) and the share of steps that were misses.
#
#   bash bench/suite/effect.sh            # from the repository root; builds dcp --release first
#
# Knobs: DCP_BIN (default target/release/dcp), TESTKIT_BIN (default
# target/release/dcp-testkit), OUT (default target/effect: the data dirs and the replay JSON
# documents, <group>-<ttl>.json), MODES (default all), TTLS (default "300 never"), EFFECT_GROUPS
# (default "real generated generated-real lab"; also "holdout"), PRICES (default auto: each session's
# own price sheet; a family such as anthropic-5m prices every session alike), TABLES=1 also prints
# dcp replay's own per-session tables.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO"
DCP_BIN="${DCP_BIN:-$REPO/target/release/dcp}"
TESTKIT_BIN="${TESTKIT_BIN:-$REPO/target/release/dcp-testkit}"
OUT="${OUT:-$REPO/target/effect}"
[ -x "$DCP_BIN" ] || cargo build --release -p dcp
[ -x "$TESTKIT_BIN" ] || cargo build --release -p dcp-testkit
mkdir -p "$OUT"

build() {
  case "$1" in
    real) rm -f "$OUT/real/opencode.db"
          "$TESTKIT_BIN" import --manifest bench/real/sources.json --out "$OUT/real" | tail -1 ;;
    holdout) rm -f "$OUT/holdout/opencode.db"
          "$TESTKIT_BIN" import --manifest bench/real/holdout.json --out "$OUT/holdout" | tail -1 ;;
    generated) python3 bench/suite/build.py "$OUT/generated" --group generated ;;
    generated-real) python3 bench/suite/build.py "$OUT/generated-real" --group generated --shape real ;;
    lab) python3 bench/suite/build.py "$OUT/lab" --group lab ;;
    *) echo "effect.sh: unknown group $1" >&2; exit 2 ;;
  esac
}

for group in ${EFFECT_GROUPS:-real generated generated-real lab}; do
  build "$group" >&2
  extra=()
  [ "$group" = real ] && extra=(--manifest bench/real/sources.json)
  [ "$group" = holdout ] && extra=(--manifest bench/real/holdout.json)
  for ttl in ${TTLS:-300 never}; do
    json="$OUT/$group-$ttl.json"
    SECONDS=0
    "$DCP_BIN" replay --all --data-dir "$OUT/$group" --mode "${MODES:-all}" --cache-ttl "$ttl" \
      --prices "${PRICES:-auto}" --json >"$json"
    echo
    echo "== $group: dcp replay --all --data-dir $OUT/$group --mode ${MODES:-all} --cache-ttl $ttl --prices ${PRICES:-auto} (${SECONDS} s)"
    python3 bench/suite/summary.py "$json" --group "$group" "${extra[@]}"
    if [ "${TABLES:-0}" = 1 ]; then
      "$DCP_BIN" replay --all --data-dir "$OUT/$group" --mode "${MODES:-all}" --cache-ttl "$ttl" --prices "${PRICES:-auto}"
    fi
  done
done
