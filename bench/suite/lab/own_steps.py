#!/usr/bin/env python3
"""Derives own-steps.json from bench/lab/long-scenario.json: the same 13 prompts, but dcp's
discard/extract calls come as model steps of their own (in mode `plugin`), before the step
they rode along with, and one discard names an id that is not in the list ("99").

usage: own_steps.py ../../lab/long-scenario.json > own-steps.json
"""
import json
import sys

src = json.load(open(sys.argv[1]))
turns = []
wrong_done = False
for t in src["turns"]:
    if t.get("only") != "plugin":
        turns.append(t)
        continue
    prune = [c for c in t["tool_calls"] if c["name"] in ("discard", "extract")]
    rest = [c for c in t["tool_calls"] if c["name"] not in ("discard", "extract")]
    if prune and not wrong_done and prune[0]["name"] == "discard":
        prune = json.loads(json.dumps(prune))
        prune[0]["arguments"]["ids"] = prune[0]["arguments"]["ids"] + ["99"]
        wrong_done = True
    turns.append({"label": t["label"] + ".prune", "only": "plugin", "tool_calls": prune})
    if rest:
        turns.append({"label": t["label"], "only": "plugin", "tool_calls": rest})
out = dict(src)
out["comment"] = ("Derived from bench/lab/long-scenario.json by own_steps.py: in mode plugin, dcp's "
                  "discard/extract calls are model steps of their own (label *.prune), and the first "
                  "discard also names id 99, which is not in the list.")
out["turns"] = turns
json.dump(out, sys.stdout, indent=1)
print()
