#!/usr/bin/env python3
"""What each miss of a replay quoted, counted by cause: which hidden part (a masked output by
its tool, an edit's or write's input, a part of a collapsed or compressed turn), how many
requests after it was hidden, and whether the person's latest prompt or the agent's latest
text named its file, for one corpus and its groups.

    dcp replay --all --data-dir DIR --mode dcp --prices auto --cache-ttl 300 --json --requests REQ > R.json
    python3 bench/suite/miss_causes.py R.json REQ DIR/opencode.db --manifest bench/real/sources.json [--list]

A part is hidden at the first request that sent it changed, or left it out (its message
collapsed into a line or compressed into a range). "Named" compares the part's file path (its
name, at least 4 characters) with the typed text of the latest user prompt and with the text
parts of the agent's last step before the miss, as the request carried them.
"""
import argparse
import collections
import json
import os
import sqlite3

from miss_trace import short
from summary import kinds


def path_of(part):
    args = (part.get("state") or {}).get("input") or {}
    return args.get("filePath") or args.get("path") or ""


def history(lines):
    """By part id: the request that first sent it, its first copy, and the request that first
    sent it changed or left it out."""
    first, created, hidden = {}, {}, {}
    for k, req in enumerate(lines):
        seen = set()
        for msg in req["messages"]:
            for p in msg["parts"]:
                seen.add(p["id"])
                state = json.dumps([p.get("state"), p.get("text")], sort_keys=True)
                if p["id"] not in first:
                    first[p["id"]], created[p["id"]] = state, k
                elif state != first[p["id"]] and p["id"] not in hidden:
                    hidden[p["id"]] = k
        for pid in first:
            if pid not in seen and pid not in hidden:
                hidden[pid] = k
    return created, hidden


def cause(part, sent):
    """How request `sent` (its copy of the part, or None) hid `part`."""
    if sent is None:
        return "collapsed/compressed turn"
    if part.get("type") != "tool":
        return "text"
    a, b = part.get("state") or {}, sent.get("state") or {}
    if a.get("input") != b.get("input"):
        return "%s input" % part.get("tool")
    return "masked %s output" % part.get("tool")


def texts(req, k_msg_id):
    """The latest typed prompt and the agent's latest text before the step, as `req` sent them."""
    prompt, agent = "", ""
    for msg in req["messages"]:
        role = msg["info"]["role"]
        typed = [p.get("text", "") for p in msg["parts"] if p.get("type") == "text" and not p.get("synthetic")]
        if role == "user" and typed and any(t.strip() for t in typed):
            prompt = "\n".join(typed)
        if role == "assistant":
            words = [p.get("text", "") for p in msg["parts"] if p.get("type") == "text"]
            if any(w.strip() for w in words):
                agent = "\n".join(words)
    return prompt.lower(), agent.lower()


def named(path, text):
    name = os.path.basename(path).lower()
    return len(name) >= 4 and (name in text or path.lower() in text)


def trace(session, reqdir, db, counts, listing):
    run = session["modes"]["dcp"]
    per = run["per_request"]
    path = os.path.join(reqdir, session["session_id"] + ".jsonl")
    with open(path) as f:
        lines = [json.loads(line) for line in f]
    created, hidden = history(lines)
    for k, r in enumerate(per):
        if not r["miss"]:
            continue
        req = lines[k]
        sent = {p["id"]: p for m in req["messages"] for p in m["parts"]}
        prompt, agent = texts(req, r["message_id"])
        for pid in r["miss"]["quoted"]:
            row = db.execute("select data from part where id=?", (pid,)).fetchone()
            part = json.loads(row[0]) if row else {}
            c = cause(part, sent.get(pid))
            h = hidden.get(pid)
            age = k - h if h is not None else -1
            p = path_of(part)
            said = "prompt" if p and named(p, prompt) else "agent" if p and named(p, agent) else "-"
            counts["cause"][c] += 1
            counts["age"]["1-4" if age < 5 else "5-9" if age < 10 else "10-19" if age < 20 else "20+"] += 1
            counts["named"][said] += 1
            counts["trigger"][str(per[h]["applied"]) if h is not None else "?"] += 1
            if listing:
                print("  %s req %d: %s; %s, hidden at %s (%s), %d after; named: %s" % (
                    session["title"][:30], k, short(part)[:60], c, h, per[h]["applied"] if h is not None else None,
                    age, said))


def arguments(doc_string):
    """The arguments this script and write_quotes.py share: the replay JSON, the request dumps'
    directory, the database, and the manifest. Returns them with the replay, the sessions' kinds
    and the database opened."""
    ap = argparse.ArgumentParser(description=doc_string.split("\n\n")[0])
    ap.add_argument("replay")
    ap.add_argument("requests")
    ap.add_argument("db")
    ap.add_argument("--manifest")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    with open(a.replay) as f:
        doc = json.load(f)
    kind = kinds(doc, a.manifest) if a.manifest else {}
    return a, doc, kind, sqlite3.connect(a.db)


def main():
    a, doc, kind, db = arguments(__doc__)
    groups = collections.defaultdict(lambda: {k: collections.Counter() for k in ("cause", "age", "named", "trigger")})
    for s in doc["sessions"]:
        if s["modes"]["dcp"]["misses"]:
            if a.list:
                print("%s (%s)" % (s["title"][:60], kind.get(s["session_id"], "all")))
            trace(s, a.requests, db, groups[kind.get(s["session_id"], "all")], a.list)
    for g, counts in sorted(groups.items()):
        print("== %s: quoted hidden parts" % g)
        for k, c in counts.items():
            print("  %-8s %s" % (k, ", ".join("%s %d" % kv for kv in c.most_common())))


if __name__ == "__main__":
    main()
