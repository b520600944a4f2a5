#!/usr/bin/env python3
"""Per-step cache-weighted cost (summarize.py's model: 0.1 x prefix shared with the previous
request + 1.25 x the rest, /4 for ~tokens), side by side for several runs, aligned by label.

usage: costs.py NAME=OUT/<mode>/requests.jsonl ...
Columns per run: size ~tok, uncached ~tok (not in the previous request's prefix), cost ~tok.
Then a breakdown per run: cost of the extra (only-mode) requests, of re-billed history
(uncached chars before the previous request's last message, i.e. rewrites), and of the
appended <prunable-tools> tail message.
"""
import json
import sys

sys.path.insert(0, "/work/shared/opencode-lab")
from summarize import pieces, common_prefix_chars  # noqa: E402

runs = []
for arg in sys.argv[1:]:
    name, path = arg.split("=", 1)
    rows = [json.loads(l) for l in open(path) if l.strip()]
    main = [r for r in rows if r["kind"] == "main"]
    steps, prev = {}, None
    order = []
    extra = {"rewrite": 0.0, "tail": 0.0}
    for r in main:
        p = pieces(r["body"])
        size = sum(len(x) for x in p)
        pre = common_prefix_chars(prev, p) if prev else 0
        cost = 0.1 * pre + 1.25 * (size - pre)
        if prev:
            # History rewrite: the new request diverges before the previous request's last
            # message. Re-billed = what the new request holds from the divergence point up to
            # that message's position (exact when edits keep the message count, as dcp's
            # plugin does; an estimate when messages were removed, as DCP's compress does).
            hist = sum(len(x) for x in prev[:-1])
            if pre < hist:
                upto = min(len(prev) - 1, len(p))
                rebilled = max(0, sum(len(x) for x in p[:upto]) - pre)
                extra["rewrite"] += (1.25 - 0.1) * rebilled
        last = r["body"]["messages"][-1]
        c = last.get("content")
        t = c if isinstance(c, str) else json.dumps(c)
        if last.get("role") == "user" and ("<prunable-tools>" in t or "<dcp-nudge>" in t):
            extra["tail"] += 1.25 * len(p[-1])
        steps[r["label"]] = (size // 4, (size - pre) // 4, cost / 4)
        order.append(r["label"])
        prev = p
    runs.append((name, steps, order, extra))

labels = []
for _, _, order, _ in runs:
    for l in order:
        if l not in labels:
            labels.append(l)
hdr = "%-26s" % "label" + "".join("| %-6s %7s %7s %7s " % (n[:6], "size", "uncach", "cost") for n, *_ in runs)
print(hdr)
tot = [0.0] * len(runs)
for l in labels:
    row = "%-26s" % l
    for i, (n, steps, _, _) in enumerate(runs):
        if l in steps:
            s, u, c = steps[l]
            tot[i] += c
            row += "| %-6s %7d %7d %7d " % ("", s, u, c)
        else:
            row += "| %-6s %7s %7s %7s " % ("", "-", "-", "-")
    print(row)
print("%-26s" % "TOTAL cost" + "".join("| %-6s %7s %7s %7d " % ("", "", "", t) for t in tot))
common = set.intersection(*[set(s) for _, s, _, _ in runs])
print()
for i, (n, steps, _, extra) in enumerate(runs):
    only = [l for l in steps if l not in common]
    print("%-12s total %7d  extra-request cost %6d (%d reqs)  rewrite re-bill %6d  tail-list %6d" % (
        n, tot[i], sum(steps[l][2] for l in only), len(only), extra["rewrite"] / 4, extra["tail"] / 4))
