#!/usr/bin/env python3
"""Lists every rewrite of the `dcp` runs of a `dcp replay --all --json` document as a bet.

usage: bets.py REPLAY_JSON [--manifest bench/real/sources.json] [--min-requests 30] [--all]

A rewrite re-bills the tail of the prompt behind its first change: it costs extra on its own
request and pays back a cached read of what it removed on every later warm request. For each
request where the engine applied pending rewrites (`per_request[i].applied`, warm ones only:
a cold-cache rewrite costs nothing), read beside the same request without pruning (mode
`none`), this prints what the policy knew then and what came of it:

* `i/n`: the request's index (from 0) and the run's length; `warm`: requests since the cache
  was last cold, this one included (the policy's horizon is half of it);
* `removed`: tokens the rewrite took out (the growth of the gap between the two runs' sizes);
  `tail`: tokens of the previous request it re-billed (those not read from the cache);
  `share`: removed over the previous request's size; `of tail`: removed over tail;
* `extra`: what the request cost beyond the run's steady saving before it (the dcp run's cost
  minus no pruning's, against the same difference on the request before), in tokens at the
  base input price; `need`: later requests it needs to pay back at 0.1 x removed each;
* `bank`: the run's balance against no pruning before the request (dcp's own additions
  included), `base`: what the session had cost without pruning so far; `bet`: the extra went
  beyond the bank, i.e. the loss bound paid for it;
* `left`: warm requests after it to the run's end (or its next cold cache); `paid`: whether
  `left >= need` (the bet paid back by the end); `end`: the session's cost over no pruning.

Tokens are the tokenizer's (the replay's estimator), not the policy's characters / 4. With
--manifest only the continuous runs of at least --min-requests requests are listed (issue
24's population), unless --all.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from summary import LONG_RUN, kinds  # noqa: E402

CACHE_READ = 0.1


def args(argv):
    opts = {"manifest": None, "min": LONG_RUN, "all": False, "path": None}
    it = iter(argv)
    for a in it:
        if a == "--manifest":
            opts["manifest"] = next(it)
        elif a == "--min-requests":
            opts["min"] = int(next(it))
        elif a == "--all":
            opts["all"] = True
        else:
            opts["path"] = a
    if not opts["path"]:
        sys.exit(__doc__)
    return opts


def bets(session):
    """The warm rewrites of one session's dcp run, each a dict of the figures above."""
    none, dcp = session["modes"]["none"]["per_request"], session["modes"]["dcp"]["per_request"]
    n = len(dcp)
    diff = [d["cost"] - o["cost"] for d, o in zip(dcp, none)]
    gap = [o["tokens"] - d["tokens"] for d, o in zip(dcp, none)]
    out, steady, bank, base, warm = [], 0.0, 0.0, 0.0, 0
    for i in range(n):
        base += none[i]["cost"]
        warm = 1 if dcp[i]["cold"] else warm + 1
        applied = dcp[i]["applied"]
        if applied and not dcp[i]["cold"] and i > 0:
            removed = max(gap[i] - gap[i - 1], 0)
            extra = diff[i] - steady
            tail = max(dcp[i - 1]["tokens"] - dcp[i]["cached"], 0)
            left = later_warm(dcp, i)
            need = extra / (CACHE_READ * removed) if removed else float("inf")
            out.append({
                "i": i, "n": n, "warm": warm, "trigger": applied, "removed": removed, "tail": tail,
                "share": removed / max(dcp[i - 1]["tokens"], 1), "of_tail": removed / max(tail, 1),
                "extra": extra, "need": need, "bank": bank, "base": base, "bet": extra > max(bank, 0.0),
                "left": left, "paid": left >= need,
            })
            steady = diff[i - 1] - CACHE_READ * removed
        else:
            steady = diff[i]
        bank -= diff[i]
    return out


def later_warm(dcp, i):
    """Warm requests after request `i`, up to the run's end or its next cold cache."""
    left = 0
    for r in dcp[i + 1:]:
        if r["cold"]:
            break
        left += 1
    return left


def ratio(session):
    return session["modes"]["dcp"]["cost"] / session["modes"]["none"]["cost"]


def rows(doc, opts):
    kind = kinds(doc, opts["manifest"]) if opts["manifest"] and not opts["all"] else None
    out = []
    for s in doc["sessions"]:
        if "dcp" not in s["modes"]:
            continue
        if kind is not None and (kind[s["session_id"]] != "continuous" or s["requests"] < opts["min"]):
            continue
        for b in bets(s):
            out.append((s, b))
    return out


def main():
    opts = args(sys.argv[1:])
    with open(opts["path"]) as f:
        doc = json.load(f)
    found = rows(doc, opts)
    head = ("session", "i/n", "warm", "trigger", "removed", "tail", "share", "of tail", "extra", "need",
            "bank", "base", "bet", "left", "paid", "end")
    print("\t".join(head))
    for s, b in found:
        print("\t".join([
            s["title"][:44], f"{b['i']}/{b['n']}", str(b["warm"]), b["trigger"], str(b["removed"]), str(b["tail"]),
            f"{b['share']:.3f}", f"{b['of_tail']:.2f}", f"{b['extra']:.0f}", f"{b['need']:.1f}", f"{b['bank']:.0f}",
            f"{b['base']:.0f}", "bet" if b["bet"] else "-", str(b["left"]), "yes" if b["paid"] else "NO",
            f"{ratio(s):.3f}",
        ]))
    lost = [b for _, b in found if not b["paid"]]
    bets_taken = [b for _, b in found if b["bet"]]
    print(f"\n{len(found)} warm rewrites in {len({s['session_id'] for s, _ in found})} sessions; "
          f"{len(lost)} did not pay back by the end; {len(bets_taken)} went beyond the bank "
          f"({sum(1 for b in bets_taken if not b['paid'])} of them did not pay back)")


if __name__ == "__main__":
    main()
