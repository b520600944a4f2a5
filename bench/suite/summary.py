#!/usr/bin/env python3
"""Summarises a `dcp replay --all --json` document as one group of the effect bench.

usage: summary.py REPLAY_JSON --group NAME [--manifest bench/real/sources.json] [--markdown] [--reread]

The held-out sessions (bench/real/holdout.json) are summarised the same way, with their own
manifest: --group holdout --manifest bench/real/holdout.json.

Per mode, the ratios to no pruning of cost, cost with misses charged, tokens sent and final
context as median / worst / total over the sessions (as `dcp replay` aggregates them), and
the share of steps that were misses (median / worst session, and all misses over all steps).
With --manifest (the real group), the sessions are also summarised apart by their `kind`
(continuous, interactive), a subagent session taking its parent's; a session is matched to the
manifest by its title. The row "continuous 30+" is issue 24's own population: the continuous
runs of at least LONG_RUN requests (one prompt driving 30 to 100 steps), subagents included.
Misses and the cost with misses follow issue 23's rule: every step that quotes hidden text is
a miss, charged in full. With --reread, they follow the re-read model instead (`misses_reread`,
`cost_with_misses_reread`): a hidden text is a miss at its first quote, then carried from the
cache.
"""
import json
import sys

FIGURES = [("cost", "cost"), ("cost_with_misses", "cost w/ misses"), ("tokens_sent", "tokens sent"),
           ("final_context", "final context")]
# The misses counted: per quoting step (issue 23's rule, the default) or under the re-read model.
MISSES = "misses"
# The fewest requests of a run in the "continuous 30+" row.
LONG_RUN = 30


def aggregate(values, total):
    if not values:
        return None
    v = sorted(values)
    n = len(v)
    median = v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
    return (median, v[-1], total)


def summarise(sessions, mode):
    """{figure: (median, worst, total)} of `mode` over `sessions`, and the misses share."""
    out = {}
    for key, _ in FIGURES:
        ratios, num, den = [], 0.0, 0.0
        for s in sessions:
            m, none = s["modes"].get(mode), s["modes"]["none"]
            if m is None or not none[key]:
                continue
            ratios.append(m[key] / none[key])
            num, den = num + m[key], den + none[key]
        out[key] = aggregate(ratios, num / den if den else 1.0)
    runs = [s["modes"][mode] for s in sessions if mode in s["modes"] and s["modes"][mode]["requests"]]
    misses, steps = sum(r[MISSES] for r in runs), sum(r["requests"] for r in runs)
    out["misses"] = aggregate([r[MISSES] / r["requests"] for r in runs], misses / steps if steps else 0.0)
    out["miss_count"] = misses
    return out


def kinds(doc, manifest_path):
    """By session id: its manifest kind (a subagent takes its parent's)."""
    with open(manifest_path) as f:
        by_title = {e["title"]: e.get("kind", "continuous") for e in json.load(f)["sessions"]}
    own = {s["session_id"]: by_title.get(s["title"]) for s in doc["sessions"]}
    return {s["session_id"]: own.get(s["parent_id"]) if s["parent_id"] else own[s["session_id"]]
            for s in doc["sessions"]}


def cell(a):
    return "-" if a is None else "%.2f / %.2f / %.2f" % a


def rows(doc, sessions, label, markdown):
    modes = [m for m in doc["sessions"][0]["modes"] if m != "none"] if sessions else []
    steps = sum(s["requests"] for s in sessions)
    out = []
    for mode in modes:
        s = summarise(sessions, mode)
        cells = [cell(s[k]) for k, _ in FIGURES] + [cell(s["misses"]) + " (%d)" % s["miss_count"]]
        if markdown:
            out.append("| %s | %s | %d / %d | %s |" % (label, mode, len(sessions), steps, " | ".join(cells)))
        else:
            out.append("  %-15s %-14s %4d %6d  %s" % (label, mode, len(sessions), steps, "  ".join(
                "%-20s" % c for c in cells)))
    return out


def main():
    args = sys.argv[1:]
    with open(args[0]) as f:
        doc = json.load(f)
    group = args[args.index("--group") + 1] if "--group" in args else "sessions"
    markdown = "--markdown" in args
    if "--reread" in args:
        global MISSES
        MISSES = "misses_reread"
        FIGURES[1] = ("cost_with_misses_reread", "cost w/ misses re-read")
    parts = [("all", doc["sessions"])]
    if "--manifest" in args:
        kind = kinds(doc, args[args.index("--manifest") + 1])
        for k in ("continuous", "interactive"):
            mine = [s for s in doc["sessions"] if kind.get(s["session_id"]) == k]
            if mine:
                parts.append((k, mine))
        long_runs = [s for s in doc["sessions"]
                     if kind.get(s["session_id"]) == "continuous" and s["requests"] >= LONG_RUN]
        if long_runs:
            parts.append(("continuous %d+" % LONG_RUN, long_runs))
    ttl = doc.get("cache_ttl")
    cache = {None: "a cache that never expires", "sheet": "each session's own cache TTL"}.get(ttl, "a %s s cache" % ttl)
    prices = doc.get("prices", "anthropic-5m")
    print("%s: %d sessions, %s, %s prices; ratios to no pruning, median / worst / total; misses: share of steps"
          % (group, len(doc["sessions"]), cache, "each session's own" if prices == "auto" else prices))
    heads = [h for _, h in FIGURES] + ["misses"]
    if markdown:
        print("| sessions | mode | sessions / steps | %s |" % " | ".join(heads))
        print("|---|---|---|" + "---|" * len(heads))
    else:
        print("  %-15s %-14s %4s %6s  %s" % ("sessions", "mode", "n", "steps", "  ".join("%-20s" % h for h in heads)))
    for label, sessions in parts:
        print("\n".join(rows(doc, sessions, label, markdown)))


if __name__ == "__main__":
    main()
