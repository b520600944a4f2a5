#!/usr/bin/env python3
"""Compares `dcp replay --json` runs of one corpus, as issue 38's tables: per group (the
manifest's `kind`, a subagent taking its parent's), misses (share of steps, count), cost with
misses charged and cost (median / worst / total of the ratio to no pruning), tokens sent
(median / total), and the sessions above 1.02 of no pruning (by cost / by cost with misses).

usage: misses_table.py --manifest bench/real/sources.json LABEL=REPLAY_JSON[:MODE] ...

Without --manifest every session is in one group, `all`. MODE is the run's mode in the
document (`dcp` unless given).
"""
import json
import sys

from summary import aggregate, kinds

LIMIT = 1.02


def figures(sessions, mode):
    def ratio(key):
        pairs = [(s["modes"][mode][key], s["modes"]["none"][key]) for s in sessions if s["modes"]["none"][key]]
        total = sum(a for a, _ in pairs) / sum(b for _, b in pairs)
        return [a / b for a, b in pairs], total
    out = {}
    for key in ("cost_with_misses", "cost", "tokens_sent"):
        values, total = ratio(key)
        out[key] = (aggregate(values, total), sum(v > LIMIT for v in values))
    runs = [s["modes"][mode] for s in sessions]
    misses, steps = sum(r["misses"] for r in runs), sum(r["requests"] for r in runs)
    out["misses"] = (misses, steps)
    return out


def row(group, label, sessions, mode):
    f = figures(sessions, mode)
    misses, steps = f["misses"]
    (cm, over_m), (c, over_c), (t, _) = f["cost_with_misses"], f["cost"], f["tokens_sent"]
    return "| %s | %s | %d / %d | %.1f%% (%d) | %.3f / %.3f / %.3f | %.3f / %.3f / %.3f | %.3f / %.3f | %d / %d |" % (
        group, label, len(sessions), steps, 100.0 * misses / max(steps, 1), misses, *cm, *c, t[0], t[2], over_c, over_m)


def main():
    args = sys.argv[1:]
    manifest = None
    if "--manifest" in args:
        i = args.index("--manifest")
        manifest = args[i + 1]
        del args[i:i + 2]
    runs = []
    for a in args:
        label, path = a.split("=", 1)
        path, _, mode = path.partition(":")
        with open(path) as f:
            runs.append((label, json.load(f), mode or "dcp"))
    print("| group | run | sessions / steps | misses | cost w/ misses, median / worst / total "
          "| cost, median / worst / total | tokens sent, median / total | sessions > 1.02 (cost / w/ misses) |")
    print("|---|---|--:|--:|---|---|---|--:|")
    groups = ["all"] + (["interactive", "continuous"] if manifest else [])
    for group in groups:
        for label, doc, mode in runs:
            kind = kinds(doc, manifest) if manifest else {}
            mine = [s for s in doc["sessions"] if group == "all" or kind.get(s["session_id"]) == group]
            if mine:
                print(row(group, label, mine, mode))


if __name__ == "__main__":
    main()
