"""Where each miss of a replay came from: the step that quoted hidden text, the parts it
quoted, when each part was made and which rewrite hid it (its trigger), for one group of
sessions.

    dcp replay --all --data-dir DIR --mode dcp --cache-ttl 300 --json --requests REQ > R.json
    python3 bench/suite/miss_trace.py R.json REQ DIR/opencode.db [--kind interactive]

A part is hidden at the first request whose copy of it differs from the copy first sent
(`--requests` holds every request as dcp would have sent it); the trigger is that request's
`applied` reason. Ages are in requests.
"""
import argparse
import json
import os
import sqlite3


def short(part):
    """A tool part as `tool key-argument`, or the part's type."""
    if part.get("type") != "tool":
        return part.get("type", "?")
    args = part.get("state", {}).get("input", {})
    key = str(next((args[k] for k in ("filePath", "command", "pattern", "path", "url") if k in args), ""))
    # A path is told by its end (the file), anything else by its start.
    key = "…" + key[-69:] if "filePath" in args and len(key) > 70 else key[:70]
    return "%s %s" % (part.get("tool"), key.replace("\n", " "))


def first_changes(lines):
    """By part id: the request that first sent it, and the first that sent it changed."""
    first, created, hidden = {}, {}, {}
    for k, req in enumerate(lines):
        for msg in req["messages"]:
            for p in msg["parts"]:
                state = json.dumps(p.get("state"), sort_keys=True)
                if p["id"] not in first:
                    first[p["id"]], created[p["id"]] = state, k
                elif state != first[p["id"]] and p["id"] not in hidden:
                    hidden[p["id"]] = k
    return created, hidden


def trace(session, reqdir, db):
    """Prints the misses of one session's `dcp` run."""
    run = session["modes"]["dcp"]
    per = run["per_request"]
    with open(os.path.join(reqdir, session["session_id"] + ".jsonl")) as f:
        created, hidden = first_changes([json.loads(line) for line in f])
    print("== %s (%d requests, %d misses)" % (session["title"][:70], session["requests"], run["misses"]))
    for k, r in enumerate(per):
        if not r["miss"]:
            continue
        rows = db.execute("select data from part where message_id=? order by id", (r["message_id"],))
        parts = [json.loads(d) for (d,) in rows]
        step = "; ".join(short(p) for p in parts if p.get("type") in ("tool", "text"))
        print("  request %d quotes (step: %s)" % (k, step[:120]))
        for pid in r["miss"]["quoted"]:
            row = db.execute("select data from part where id=?", (pid,)).fetchone()
            part = json.loads(row[0]) if row else {}
            h = hidden.get(pid)
            print("    %s, made at %s, hidden at %s by %s, %s requests old when quoted" % (
                short(part), created.get(pid), h, per[h]["applied"] if h is not None else None,
                k - created.get(pid, k)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("replay")
    ap.add_argument("requests")
    ap.add_argument("db")
    ap.add_argument("--kind", default="interactive")
    ap.add_argument("--manifest", default="bench/real/sources.json")
    a = ap.parse_args()
    with open(a.manifest) as f:
        titles = [s["title"][:40] for s in json.load(f)["sessions"] if s["kind"] == a.kind]
    with open(a.replay) as f:
        sessions = json.load(f)["sessions"]
    db = sqlite3.connect(a.db)
    for s in sessions:
        if s["modes"]["dcp"]["misses"] and any(s["title"].startswith(t) for t in titles):
            trace(s, a.requests, db)


if __name__ == "__main__":
    main()
