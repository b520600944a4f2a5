#!/usr/bin/env python3
"""What no timing of rewrites can beat: the cost of a run whose every prune is free.

usage: bound.py REPLAY_JSON [--manifest bench/real/sources.json]

REPLAY_JSON is `dcp replay --all --json --mode immediate`: the `immediate` run takes everything
the strategies pick on every request, so its prompts are the smallest dcp's strategies make
(under the configured windows, working set and protections). The policy only decides when
those prunes reach the model, and every rewrite re-bills the tail behind it. This script
prices each of no pruning's requests as if what `immediate` removed from it had been taken
with no re-billing at all: each removed token saves what no pruning paid for it there, the
cache-read price (0.1) where the request read its prefix from the cache, the write price
(1.25) where it wrote it again (a cold cache). That is the floor of any policy over the same picks; it would be exact but for
the outputs a prune takes before they are ever cached (a step of more calls than the kept
window), which save their write price instead.

It prints, per group (all sessions and, with --manifest, the kinds and "continuous 30+" as
`summary.py` forms them), no pruning's cost, the floor's and `immediate`'s as ratios (total and
median), tokens sent by `immediate`, and its misses as a share of steps; then the same floor
under the prunes the `dcp` run made (what its timing costs over what it took) beside its cost.
"""
import json
import sys

from summary import LONG_RUN, aggregate, kinds

READ_PRICE, WRITE_PRICE = 0.1, 1.25


def floor_cost(session, mode="immediate"):
    """No pruning's cost of `session` with what `mode` removed taken for free."""
    none = session["modes"]["none"]["per_request"]
    fast = session["modes"][mode]["per_request"]
    total, before = 0.0, 0
    for a, b in zip(none, fast):
        # The share of the request's older part that no pruning read from the cache.
        read = min(1.0, a["cached"] / before) if before else 1.0
        price = READ_PRICE * read + WRITE_PRICE * (1.0 - read)
        total += max(0.0, a["cost"] - price * (a["tokens"] - b["tokens"]))
        before = a["tokens"]
    return total


def line(label, sessions):
    none = [s["modes"]["none"]["cost"] for s in sessions]
    floors = [floor_cost(s) for s in sessions]
    fast = [s["modes"]["immediate"]["cost"] for s in sessions]
    sent = sum(s["modes"]["immediate"]["tokens_sent"] for s in sessions)
    sent_none = sum(s["modes"]["none"]["tokens_sent"] for s in sessions)
    misses = sum(s["modes"]["immediate"]["misses"] for s in sessions)
    steps = sum(s["requests"] for s in sessions)
    ratio = lambda xs: aggregate([x / n for x, n in zip(xs, none) if n], sum(xs) / sum(none))
    f, i = ratio(floors), ratio(fast)
    text = "  %-15s %4d  floor %.3f (median %.3f)  immediate %.3f (median %.3f)  tokens %.3f  misses %.1f%%" % (
        label, len(sessions), f[2], f[0], i[2], i[0], sent / sent_none, 100.0 * misses / steps)
    if "dcp" not in sessions[0]["modes"]:
        return text
    # The same floor under dcp's own prunes: what its timing costs over the prunes it made.
    own = ratio([floor_cost(s, "dcp") for s in sessions])
    paid = ratio([s["modes"]["dcp"]["cost"] for s in sessions])
    misses = sum(s["modes"]["dcp"]["misses"] for s in sessions)
    return text + "\n  %-15s       dcp's prunes free %.3f (median %.3f)  dcp %.3f (median %.3f)  misses %.1f%%" % (
        "", own[2], own[0], paid[2], paid[0], 100.0 * misses / steps)


def main():
    args = sys.argv[1:]
    with open(args[0]) as f:
        doc = json.load(f)
    if "immediate" not in doc["sessions"][0]["modes"]:
        sys.exit("bound.py: %s has no `immediate` run; replay with --mode immediate" % args[0])
    parts = [("all", doc["sessions"])]
    if "--manifest" in args:
        kind = kinds(doc, args[args.index("--manifest") + 1])
        for k in ("continuous", "interactive"):
            parts.append((k, [s for s in doc["sessions"] if kind.get(s["session_id"]) == k]))
        parts.append(("continuous %d+" % LONG_RUN, [s for s in doc["sessions"] if kind.get(
            s["session_id"]) == "continuous" and s["requests"] >= LONG_RUN]))
    print("ratios to no pruning: total (median); floor = immediate's prunes with no re-billing")
    for label, sessions in parts:
        if sessions:
            print(line(label, sessions))


if __name__ == "__main__":
    main()
