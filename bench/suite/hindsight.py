#!/usr/bin/env python3
"""What pruning with perfect hindsight could reach: a floor no choice of what to mask can beat.

usage: hindsight.py REPLAY_JSON DATA_DIR --manifest bench/real/sources.json [--inputs]

REPLAY_JSON is any `dcp replay --all --json` of DATA_DIR's opencode.db (its `none` run prices
each request). For each continuous run of LONG_RUN requests or more, every tool output (and,
with --inputs, every call's input) of at least 200 characters is an item. An item is kept for
the request after the step that made it, so the model reads it once, and then until the last
step that quotes it (a WINDOW-character window after `normalise`, as `dcp replay` finds
misses); from there on it is removed, with no re-billing: each removed token saves what no
pruning paid for it on that request (the cache-read or the write price, as `bound.py` prices).
That is zero misses. With a misses budget (a share of the steps), items are removed early, the
ones that save most per miss first, until the steps they make misses fill the budget (a step
is one miss however many removed items it quotes, as `dcp replay` counts).

Tokens are characters / 4 times CALIBRATION (o200k against characters / 4 on the corpus's
long runs, median). The step's own text and the prompts are never removed; dcp's `discard`,
`extract` and `compress` inputs are not quotes. It prints the floor's total and median ratio
to no pruning for each budget.
"""
import json
import re
import sqlite3
import statistics
import sys

from summary import LONG_RUN, kinds

WINDOW, MIN_CHARS, CALIBRATION = 64, 200, 1.23
READ_PRICE, WRITE_PRICE = 0.1, 1.25
OWN_TOOLS = {"discard", "extract", "compress"}
BUDGETS = (0.0, 0.03, 0.06, 0.10)
PREFIX = re.compile(r" *\d+(\t|→|\| )")


def windows(text):
    """Every WINDOW-character window of `text` without line-number prefixes and runs of space."""
    lines = (" ".join(PREFIX.sub("", line, count=1).split()) for line in text.split("\n"))
    flat = " ".join(line for line in lines if line)
    return {flat[i:i + WINDOW] for i in range(len(flat) - WINDOW + 1)}


def strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


def steps_of(db, session_id):
    """The parts of each assistant message of the session, in order: one per request."""
    rows = db.execute("select id, data from message where session_id = ? order by time_created, id", (session_id,))
    steps = []
    for message_id, data in rows.fetchall():
        if json.loads(data).get("role") == "assistant":
            parts = db.execute("select data from part where message_id = ? order by id", (message_id,))
            steps.append([json.loads(p) for (p,) in parts.fetchall()])
    return steps


def quotes(parts):
    found = set()
    for p in parts:
        if p.get("type") == "text":
            found |= windows(p.get("text", ""))
        elif p.get("type") == "tool" and p.get("tool") not in OWN_TOOLS:
            for s in strings(p.get("state", {}).get("input", {})):
                found |= windows(s)
    return found


def items(steps, with_inputs):
    """(step made, steps that quote it later, tokens) of every item of the run."""
    quoted = [quotes(parts) for parts in steps]
    out = []
    for made, parts in enumerate(steps):
        for p in (p for p in parts if p.get("type") == "tool"):
            state = p.get("state", {})
            texts = [str(state.get("output", "") or "")]
            if with_inputs and p.get("tool") not in OWN_TOOLS:
                texts.append("\n".join(strings(state.get("input", {}))))
            for text in (t for t in texts if len(t) >= MIN_CHARS):
                w = windows(text)
                later = [s for s in range(made + 1, len(steps)) if w & quoted[s]]
                out.append((made, later, len(text) / 4 * CALIBRATION))
    return out


def prices(session):
    """The price no pruning paid per token of each request's older part."""
    out, before = [], 0
    for r in session["modes"]["none"]["per_request"]:
        read = min(1.0, r["cached"] / before) if before else 1.0
        out.append(READ_PRICE * read + WRITE_PRICE * (1.0 - read))
        before = r["tokens"]
    return out


def floor(session, price, run_items, early):
    """No pruning's cost with each item removed after its end: its last quote, or early."""
    ends = [made + 1 if (i in early) else max([made + 1] + later) for i, (made, later, _) in enumerate(run_items)]
    total = 0.0
    for r, request in enumerate(session["modes"]["none"]["per_request"]):
        gone = sum(t for (_, _, t), end in zip(run_items, ends) if r > end)
        total += max(0.0, request["cost"] - price[r] * min(gone, request["tokens"]))
    return total


def main():
    args = sys.argv[1:]
    doc = json.load(open(args[0]))
    db = sqlite3.connect("file:%s/opencode.db?mode=ro" % args[1], uri=True)
    kind = kinds(doc, args[args.index("--manifest") + 1])
    runs = []
    for s in doc["sessions"]:
        if kind.get(s["session_id"]) == "continuous" and s["requests"] >= LONG_RUN:
            steps = steps_of(db, s["session_id"])
            if len(steps) == s["requests"]:
                runs.append((s, prices(s), items(steps, "--inputs" in args)))
    steps = sum(s["requests"] for s, _, _ in runs)
    # What removing an item right after it was read saves, per miss it causes.
    offers = []
    for n, (s, price, run_items) in enumerate(runs):
        for i, (made, later, tokens) in enumerate(run_items):
            misses = [q for q in later if q > made + 1]
            if misses:
                saved = tokens * sum(price[r] for r in range(made + 2, max(later) + 1))
                offers.append((saved / len(misses), misses, n, i))
    offers.sort(reverse=True)
    print("%d continuous runs of %d+ requests, %d steps; ratios to no pruning" % (len(runs), LONG_RUN, len(runs) and steps))
    for budget in BUDGETS:
        used, early, missed = 0, [set() for _ in runs], [set() for _ in runs]
        for _, misses, n, i in offers:
            new = set(misses) - missed[n]
            if used + len(new) <= budget * steps:
                used += len(new)
                missed[n] |= new
                early[n].add(i)
        floors = [floor(s, price, it, e) for (s, price, it), e in zip(runs, early)]
        none = [s["modes"]["none"]["cost"] for s, _, _ in runs]
        print("  misses up to %4.1f%% (%3d): floor total %.3f, median %.3f" % (
            100 * budget, used, sum(floors) / sum(none), statistics.median(f / n for f, n in zip(floors, none))))


if __name__ == "__main__":
    main()
