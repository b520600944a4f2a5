#!/usr/bin/env python3
"""Inspect a lab run of mode plugin (or dcp): outcome of discard/extract/compress calls and,
per main request, the state of every tool result (full, placeholder, distilled).

usage: inspect.py OUT/<mode>/requests.jsonl [--results]
"""
import json
import sys

path = sys.argv[1]
rows = [json.loads(l) for l in open(path) if l.strip()]
main = [r for r in rows if r["kind"] == "main"]


def text(c):
    if c is None:
        return ""
    if isinstance(c, str):
        return c
    return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in c)


# tool_call_id -> (label of the request that produced the call, tool name, args)
calls = {}
for r in main:
    for m in r["body"]["messages"]:
        for tc in m.get("tool_calls") or []:
            calls.setdefault(tc["id"], (tc["function"]["name"], tc["function"]["arguments"]))
origin = {}
for i, r in enumerate(main[1:], 1):
    # calls first seen in request i were produced by request i-1's reply
    for m in r["body"]["messages"]:
        for tc in m.get("tool_calls") or []:
            origin.setdefault(tc["id"], main[i - 1]["label"])

print("== manual prune calls and their results (first request that shows the result)")
seen = set()
for r in main:
    for m in r["body"]["messages"]:
        if m.get("role") == "tool" and m["tool_call_id"] not in seen:
            seen.add(m["tool_call_id"])
            name, args = calls.get(m["tool_call_id"], ("?", ""))
            if name in ("discard", "extract", "compress"):
                print("- %s %s args=%s\n    -> %s" % (origin.get(m["tool_call_id"]), name, args[:300], text(m["content"])[:400]))

print("\n== per request: label, size, tail message, history rewrites (first changed message < previous request's last)")
prev = {}
prev_args = {}
prev_msgs = None
for r in main:
    msgs = r["body"]["messages"]
    last = msgs[-1]
    tail = text(last.get("content")) if last.get("role") == "user" else ""
    state = {}
    for m in msgs:
        if m.get("role") == "tool":
            t = text(m["content"])
            lab = origin.get(m["tool_call_id"], "?")
            if t.startswith("[Output removed"):
                state[lab] = "placeholder"
            elif lab != "?" and len(t) < 400 and any(k in t for k in ("distill",)) :
                state[lab] = "short"
            else:
                state[lab] = len(t)
    args_now = {}
    for m in msgs:
        for tc in m.get("tool_calls") or []:
            args_now[tc["id"]] = len(tc["function"]["arguments"])
    changes = []
    for cid, n in args_now.items():
        if cid in prev_args and prev_args[cid] != n:
            changes.append("%s input: %d -> %d chars" % (origin.get(cid, "?"), prev_args[cid], n))
    prev_args = args_now
    rewrite = ""
    if prev_msgs is not None:
        cur = [json.dumps(m, sort_keys=True) for m in msgs]
        k = next((i for i, (a, b) in enumerate(zip(prev_msgs, cur)) if a != b), min(len(prev_msgs), len(cur)))
        if k < len(prev_msgs) - 1:
            tailchars = sum(len(x) for x in prev_msgs[k:])
            rewrite = "  REWRITE from msg %d/%d (%d chars of history re-sent uncached)" % (k, len(prev_msgs), tailchars)
    prev_msgs = [json.dumps(m, sort_keys=True) for m in msgs]
    for k, v in state.items():
        if k in prev and prev[k] != v:
            changes.append("%s: %s -> %s" % (k, prev[k], v))
    ptl = tail.count("\n") - 1 if "<prunable-tools>" in tail else 0
    print("%-26s %7d chars  tail %5d chars (%2d prunable lines)%s%s" % (
        r["label"], r["messages_chars"] + r["tools_chars"], len(tail), max(ptl, 0), rewrite,
        ("\n      CHANGED " + "; ".join(changes)) if changes else ""))
    prev = state
    if "--results" in sys.argv and r is main[-1]:
        for k, v in state.items():
            print("   ", k, v)
