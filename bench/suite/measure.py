#!/usr/bin/env python3
"""Measures the shape of the sessions in an OpenCode data dir: what gen.py's `real` shape is
calibrated to (bench/suite/README.md).

usage: measure.py DB [--json]

Over the top-level sessions (subagents apart): model steps per session, user prompts per
session, steps per prompt, the gap between two steps of one prompt (seconds), the gap before a
later prompt (seconds, and the share over 5 minutes), and tool output sizes (characters). Each
as quantiles (min, 10th, 25th, median, 75th, 90th, max). With --json, the table gen.py's
`real` shape reads:

    python3 bench/suite/measure.py target/real/opencode.db --json > bench/suite/real-shape.json
"""
import json
import sqlite3
import sys


def quantiles(values):
    if not values:
        return None
    v = sorted(values)
    pick = lambda q: v[min(len(v) - 1, int(q * len(v)))]  # noqa: E731
    return {"n": len(v), "min": v[0], "p10": pick(0.1), "p25": pick(0.25), "median": pick(0.5), "p75": pick(0.75),
            "p90": pick(0.9), "max": v[-1]}


def is_prompt(parts):
    return any(p.get("type") == "text" and not p.get("synthetic") and not p.get("ignored") for p in parts)


def session_shape(db, sid, out):
    rows = db.execute("SELECT id, data FROM message WHERE session_id = ? ORDER BY time_created, id", (sid,)).fetchall()
    parts = {}
    for mid, data in db.execute("SELECT message_id, data FROM part WHERE session_id = ? ORDER BY id", (sid,)):
        parts.setdefault(mid, []).append(json.loads(data))
    steps, prompts, last, per_prompt = 0, 0, None, 0
    for mid, data in rows:
        info = json.loads(data)
        t = info.get("time", {}).get("created")
        mine = parts.get(mid, [])
        if info.get("role") == "user" and is_prompt(mine):
            if prompts and last is not None:
                out["prompt_gap_s"].append((t - last) / 1000)
                out["steps_per_prompt"].append(per_prompt)
            prompts, per_prompt = prompts + 1, 0
        elif info.get("role") == "assistant" and not info.get("summary"):
            if per_prompt and last is not None:
                out["step_gap_s"].append((t - last) / 1000)
            steps, per_prompt = steps + 1, per_prompt + 1
            for p in mine:
                state = p.get("state") or {}
                if p.get("type") == "tool" and state.get("status") == "completed":
                    out["output_chars"].append(len(state.get("output") or ""))
        last = t if t is not None else last
    if prompts:
        out["steps_per_prompt"].append(per_prompt)
    out["steps"].append(steps)
    out["prompts"].append(prompts)


def main():
    db = sqlite3.connect(sys.argv[1])
    out = {k: [] for k in ("steps", "prompts", "steps_per_prompt", "step_gap_s", "prompt_gap_s", "output_chars")}
    for (sid,) in db.execute("SELECT id FROM session WHERE parent_id IS NULL ORDER BY id"):
        session_shape(db, sid, out)
    gaps = out["prompt_gap_s"]
    shape = {k: quantiles(v) for k, v in out.items()}
    shape["prompt_gaps_over_5_min"] = sum(g > 300 for g in gaps) / len(gaps) if gaps else None
    shape["step_gaps_over_5_min"] = sum(g > 300 for g in out["step_gap_s"]) / max(1, len(out["step_gap_s"]))
    if "--json" in sys.argv:
        print(json.dumps(shape, indent=1))
        return
    for k, q in shape.items():
        if isinstance(q, dict):
            print("%-18s n=%-5d p10 %-8.4g p25 %-8.4g median %-8.4g p75 %-8.4g p90 %-8.4g max %.4g" % (
                k, q["n"], q["p10"], q["p25"], q["median"], q["p75"], q["p90"], q["max"]))
        else:
            print("%-18s %s" % (k, "-" if q is None else "%.3f" % q))


if __name__ == "__main__":
    main()
