#!/usr/bin/env python3
"""The misses that quote the agent's own writes and edits: of every missed step, each quoted
part that was an `edit` or `write` whose text arguments masking had taken ("applied to the
file on disk"), with what was knowable when they were taken, for one corpus and its groups.

    dcp replay --all --data-dir DIR --mode dcp --prices auto --cache-ttl 300 --json --requests REQ > R.json
    python3 bench/suite/write_quotes.py R.json REQ DIR/opencode.db [--manifest bench/real/sources.json] [--list]

Per group: the steps, the missed steps, those quoting a hidden write or edit input, and of the
quoted inputs: how many requests after the write the step came (and after the input was
hidden); whether a prompt came between them (`same turn` or not); whether the quoting step
itself writes or edits that file; whether the file was edited again between the write and the
step; whether the quoted part was the file's latest write or edit then; which field the quote
came from (a write's `content`, an edit's `newString` or `oldString`: a 48-character run in
common); whether the latest prompt or the agent's latest text named the file
(`miss_causes.named`).
"""
import collections
import json
import os

from miss_causes import arguments, cause, history, named, path_of, texts

EDIT_TOOLS = ("edit", "write", "multiedit", "patch")
RUN = 48


def flat(text):
    return " ".join((text or "").split())


def shares(field, quotes):
    """Whether `field` and `quotes` have a RUN-character run in common (stepping by 8)."""
    f = flat(field)
    return len(f) >= RUN and any(f[i:i + RUN] in quotes for i in range(0, len(f) - RUN + 1, 8))


def session_parts(db, sid):
    """The session's tool parts in order, each with its message's place, and the places of
    its typed user prompts."""
    msgs = db.execute("select id, data from message where session_id=? order by time_created, id", (sid,)).fetchall()
    place = {m: i for i, (m, _) in enumerate(msgs)}
    prompts = []
    calls = []
    for i, (mid, data) in enumerate(msgs):
        role = json.loads(data).get("role")
        parts = [json.loads(d) for (d,) in db.execute("select data from part where message_id=? order by id", (mid,))]
        if role == "user" and any(p.get("type") == "text" and not p.get("synthetic") and (p.get("text") or "").strip()
                                  for p in parts):
            prompts.append(i)
        calls.extend((i, p) for p in parts if p.get("type") == "tool")
    return place, prompts, calls


def step_quotes(parts):
    """The step's text and string arguments, flattened (what replay looks quotes in)."""
    out = []
    for p in parts:
        if p.get("type") == "text":
            out.append(p.get("text", ""))
        elif p.get("type") == "tool":
            out.extend(v for v in ((p.get("state") or {}).get("input") or {}).values() if isinstance(v, str))
    return flat("\n".join(out))


def trace(session, reqdir, db, counts, listing):
    per = session["modes"]["dcp"]["per_request"]
    counts["steps"] += len(per)
    counts["missed"] += sum(1 for r in per if r["miss"])
    if not session["modes"]["dcp"]["misses"]:
        return
    with open(os.path.join(reqdir, session["session_id"] + ".jsonl")) as f:
        lines = [json.loads(line) for line in f]
    created, hidden = history(lines)
    place, prompts, calls = session_parts(db, session["session_id"])
    for k, r in enumerate(per):
        if not r["miss"]:
            continue
        sent = {p["id"]: p for m in lines[k]["messages"] for p in m["parts"]}
        at = place.get(r["message_id"], len(place))
        step = [json.loads(d) for (d,) in db.execute("select data from part where message_id=?", (r["message_id"],))]
        quotes = step_quotes(step)
        stepfiles = {path_of(p) for p in step if p.get("tool") in EDIT_TOOLS}
        prompt, agent = texts(lines[k], r["message_id"])
        any_input = False
        for pid in r["miss"]["quoted"]:
            row = db.execute("select message_id, data from part where id=?", (pid,)).fetchone()
            if not row:
                continue
            part = json.loads(row[1])
            if not cause(part, sent.get(pid)).endswith(" input") or part.get("tool") not in EDIT_TOOLS:
                continue
            any_input = True
            wat, path = place[row[0]], path_of(part)
            later = [(i, p) for i, p in calls if wat < i < at and p.get("tool") in EDIT_TOOLS and path_of(p) == path]
            args = (part.get("state") or {}).get("input") or {}
            fields = [f for f in ("content", "newString", "oldString") if shares(args.get(f), quotes)]
            c = counts["parts"]
            c["tool " + part.get("tool")] += 1
            age = k - created.get(pid, k)
            c["age %s" % ("1-4" if age < 5 else "5-9" if age < 10 else "10-19" if age < 20 else "20+")] += 1
            c["same turn" if not any(wat < q < at for q in prompts) else "a prompt between"] += 1
            c["step edits the file" if path in stepfiles else "step does not edit it"] += 1
            c["edited again before" if later else "not edited since"] += 1
            c["latest of its file" if not later else "older than the latest"] += 1
            for f in fields or ["field ?"]:
                c["quoted " + f] += 1
            c["named: " + ("prompt" if named(path, prompt) else "agent" if named(path, agent) else "-")] += 1
            if listing:
                h = hidden.get(pid)
                print("  %s req %d: %s %s, written at req %d, hidden at %s (%s); %s; step edits it: %s; "
                      "edited since: %d; quoted %s" % (
                          session["title"][:28], k, part.get("tool"), path[-45:], created.get(pid, -1), h,
                          per[h]["applied"] if h is not None else None,
                          "same turn" if not any(wat < q < at for q in prompts) else "later turn",
                          path in stepfiles, len(later), ",".join(fields) or "?"))
        counts["input_steps"] += any_input


def main():
    a, doc, kind, db = arguments(__doc__)
    groups = collections.defaultdict(lambda: {"steps": 0, "missed": 0, "input_steps": 0,
                                              "parts": collections.Counter()})
    for s in doc["sessions"]:
        trace(s, a.requests, db, groups[kind.get(s["session_id"]) or "all"], a.list)
    for g, c in sorted(groups.items()):
        print("== %s: %d steps, %d missed, %d quoting a hidden write/edit input (%.1f%%)" % (
            g, c["steps"], c["missed"], c["input_steps"], 100.0 * c["input_steps"] / max(c["steps"], 1)))
        print("  " + ", ".join("%s %d" % kv for kv in sorted(c["parts"].items())))


if __name__ == "__main__":
    main()
