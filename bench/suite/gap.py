#!/usr/bin/env python3
"""dcp's ratios to no pruning, median / worst / total to three decimals, for each `dcp replay
--all --json` document given; with two, the per-session gap of the first's cost ratio over the
second's (e.g. the agent tools offered from the first request against `offer: "paid"`).

usage: gap.py A.json [B.json]
"""
import json
import statistics
import sys

FIGURES = ("cost", "cost_with_misses", "tokens_sent", "final_context")


def load(path):
    """session id -> figure -> (dcp, none)."""
    doc = json.load(open(path))
    return {
        s["session_id"]: {k: (s["modes"]["dcp"][k], s["modes"]["none"][k]) for k in FIGURES}
        for s in doc["sessions"]
    }


def ratios(run, figure):
    values = [run[s][figure][0] / run[s][figure][1] for s in run if run[s][figure][1]]
    total = sum(run[s][figure][0] for s in run) / sum(run[s][figure][1] for s in run)
    return statistics.median(values), max(values), total


def main():
    runs = [(path, load(path)) for path in sys.argv[1:]]
    for path, run in runs:
        print(f"{path}: {len(run)} sessions, median / worst / total of the ratio to no pruning")
        for figure in FIGURES:
            median, worst, total = ratios(run, figure)
            print(f"  {figure:18} {median:.3f} / {worst:.3f} / {total:.3f}")
    if len(runs) != 2:
        return
    a, b = runs[0][1], runs[1][1]
    gaps = sorted(a[s]["cost"][0] / a[s]["cost"][1] - b[s]["cost"][0] / b[s]["cost"][1] for s in a if s in b)
    total = ratios(a, "cost")[2] - ratios(b, "cost")[2]
    print(f"cost ratio, first minus second, per session: median {statistics.median(gaps):.4f}, "
          f"largest {gaps[-1]:.4f}, smallest {gaps[0]:.4f}; of the totals {total:.4f}")


if __name__ == "__main__":
    main()
