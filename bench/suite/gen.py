#!/usr/bin/env python3
"""Seeded generator of OpenCode 1.18 sessions for the replay suite (bench/suite/README.md).

usage: gen.py OUT_DB [--seed S] [--sessions N] [--shape suite|real]

Two shapes (README.md): `suite`, the default, is the replay suite's, drawn from distributions
fixed before any strategy was measured; `real` draws steps per session, prompts per session,
the gaps between steps and before prompts, and tool output sizes from what the real-session
corpus measures (real-shape.json, written by measure.py from bench/real).

Writes N top-level sessions (plus the subagent sessions some of them start) into OUT_DB, an
`opencode.db` with the session/message/part tables as OpenCode 1.18.33 writes them. The same
seed always gives the same database. The shapes (lengths, tool mixes, output sizes, agent
mistakes, idle gaps) are drawn from the distributions described in the README, not tuned to
any strategy: change them there first.
"""
import json
import math
import os
import random
import sqlite3
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

DDL = """
CREATE TABLE session (id text PRIMARY KEY, project_id text NOT NULL, workspace_id text, parent_id text,
  slug text NOT NULL, directory text NOT NULL, path text, title text NOT NULL, version text NOT NULL,
  share_url text, summary_additions integer, summary_deletions integer, summary_files integer,
  summary_diffs text, metadata text, cost real DEFAULT 0 NOT NULL, tokens_input integer DEFAULT 0 NOT NULL,
  tokens_output integer DEFAULT 0 NOT NULL, tokens_reasoning integer DEFAULT 0 NOT NULL,
  tokens_cache_read integer DEFAULT 0 NOT NULL, tokens_cache_write integer DEFAULT 0 NOT NULL,
  revert text, permission text, agent text, model text, time_created integer NOT NULL,
  time_updated integer NOT NULL, time_compacting integer, time_archived integer);
CREATE TABLE message (id text PRIMARY KEY, session_id text NOT NULL, time_created integer NOT NULL,
  time_updated integer NOT NULL, data text NOT NULL);
CREATE TABLE part (id text PRIMARY KEY, message_id text NOT NULL, session_id text NOT NULL,
  time_created integer NOT NULL, time_updated integer NOT NULL, data text NOT NULL);
"""

WORDS = ("value index result config parser token buffer stream record entry handler request response "
         "session state cache client server module item count total offset limit path name data error "
         "message event queue worker task batch field schema table column row key node tree list map").split()
KINDS = ["explore", "fix", "feature", "debug", "refactor"]
B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
ROOT = "/home/dev/proj"


class Ids:
    """OpenCode-shaped ids: prefix, 12 hex of a counter, 14 base62 chars."""

    def __init__(self, rng):
        self.rng, self.n = rng, 0x200000000000

    def __call__(self, prefix):
        self.n += 1
        return "%s_%012x%s" % (prefix, self.n, "".join(self.rng.choice(B62) for _ in range(14)))


def log_uniform(rng, lo, hi):
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


class Shape:
    """Where a session's sizes and clock come from: the suite's own distributions (`table`
    None), or the quantiles the corpus measured (real-shape.json), drawn log-linearly between
    them."""

    KEYS = ("min", "p10", "p25", "median", "p75", "p90", "max")
    AT = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)

    def __init__(self, name):
        self.name, self.table = name, None
        if name == "real":
            with open(os.path.join(HERE, "real-shape.json")) as f:
                self.table = json.load(f)

    def draw(self, rng, key, floor=0.001):
        """A value of `key` as the corpus spreads it."""
        q = self.table[key]
        u = rng.random()
        for i in range(1, len(self.AT)):
            if u <= self.AT[i]:
                lo, hi = max(floor, q[self.KEYS[i - 1]]), max(floor, q[self.KEYS[i]])
                f = (u - self.AT[i - 1]) / (self.AT[i] - self.AT[i - 1])
                return math.exp(math.log(lo) + f * (math.log(hi) - math.log(lo)))
        return q["max"]

    def lines(self, rng, chars_per_line):
        """Lines of an output whose size the corpus measured."""
        return max(1, int(self.draw(rng, "output_chars", 1) / chars_per_line))


class Project:
    """Files with seeded contents; an edit changes one line, so a re-read differs."""

    def __init__(self, rng, shape=None):
        self.rng = rng
        exts = ["py", "ts", "rs", "go"]
        self.files = {}
        for i in range(rng.randint(12, 40)):
            d = rng.choice(["src", "src/core", "src/api", "lib", "tests", "docs"])
            path = "%s/%s/%s_%d.%s" % (ROOT, d, rng.choice(WORDS), i, rng.choice(exts))
            # Most files are small or medium; one in six is large.
            lines = int(log_uniform(rng, 400, 2000)) if rng.random() < 1 / 6 else int(log_uniform(rng, 20, 300))
            if shape is not None and shape.table:
                lines = shape.lines(rng, 40)
            self.files[path] = {"lines": lines, "version": 0, "seed": rng.random()}

    def line(self, f, i):
        r = random.Random("%s:%d:%d" % (f["seed"], i, f["version"] if i % 37 == 0 else 0))
        w = [r.choice(WORDS) for _ in range(r.randint(2, 7))]
        kind = r.random()
        if kind < 0.15:
            return "def %s_%s(%s):" % (w[0], w[1], ", ".join(w[2:]))
        if kind < 0.3:
            return "    # %s" % " ".join(w)
        return "    %s = %s(%s)" % (w[0], "_".join(w[1:3]), ", ".join(w[3:]))

    def read(self, path, offset=0, limit=2000):
        f = self.files[path]
        n = min(f["lines"], limit)
        body = "\n".join("%d: %s" % (i + 1, self.line(f, i)) for i in range(offset, min(f["lines"], offset + n)))
        return "<path>%s</path>\n<type>file</type>\n<content>\n%s\n\n(End of file - total %d lines)\n</content>" % (
            path, body, f["lines"])


class Writer:
    """Writes sessions into the database, message by message."""

    def __init__(self, db, rng):
        self.db, self.rng, self.ids = db, rng, Ids(rng)

    def session(self, sid, parent, title, t0, t1):
        self.db.execute(
            "INSERT INTO session (id, project_id, parent_id, slug, directory, title, version, time_created, "
            "time_updated) VALUES (?,?,?,?,?,?,?,?,?)", (sid, "prj_suite", parent, "suite", ROOT, title, "1.18.33", t0, t1))

    def message(self, sid, data, parts, t):
        mid = self.ids("msg")
        self.db.execute("INSERT INTO message VALUES (?,?,?,?,?)", (mid, sid, t, t, json.dumps(data)))
        for k, p in enumerate(parts):
            self.db.execute("INSERT INTO part VALUES (?,?,?,?,?,?)",
                            (self.ids("prt"), mid, sid, t + k, t + k, json.dumps(p)))
        return mid


class Agent:
    """One session's agent: picks tool calls by the session's kind, makes mistakes."""

    def __init__(self, rng, project, kind, shape=None):
        self.rng, self.p, self.kind, self.shape = rng, project, kind, shape
        self.read_files = []
        self.calls = 0

    def call(self, tool, inp, out=None, error=None, t=0):
        self.calls += 1
        state = {"status": "error" if error else "completed", "input": inp,
                 "time": {"start": t, "end": t + 200}}
        if error:
            state["error"] = error
        else:
            state.update({"output": out, "title": tool, "metadata": {}})
        return {"type": "tool", "tool": tool, "callID": "call_g%d_%06x" % (self.calls, self.rng.getrandbits(24)),
                "state": state}

    def pick_file(self):
        # Re-reads: a third of the reads go back to a file already read.
        if self.read_files and self.rng.random() < 0.33:
            return self.rng.choice(self.read_files)
        return self.rng.choice(sorted(self.p.files))

    def step(self, t):
        weights = {
            "explore": [("read", 45), ("grep", 20), ("glob", 8), ("bash", 15), ("edit", 5), ("write", 2), ("task", 2)],
            "fix": [("read", 35), ("grep", 10), ("bash", 25), ("edit", 22), ("write", 5), ("todowrite", 3)],
            "feature": [("read", 30), ("grep", 8), ("bash", 20), ("edit", 20), ("write", 15), ("task", 2), ("todowrite", 3)],
            "debug": [("read", 25), ("grep", 12), ("bash", 45), ("edit", 15), ("write", 3)],
            "refactor": [("read", 35), ("grep", 15), ("glob", 5), ("bash", 15), ("edit", 25), ("write", 5)],
        }[self.kind]
        tool = self.rng.choices([w[0] for w in weights], [w[1] for w in weights])[0]
        return getattr(self, "do_" + tool)(t)

    def do_read(self, t):
        path = self.pick_file()
        if self.rng.random() < 0.05:
            missing = path.rsplit("/", 1)[0] + "/missing_%d.py" % self.rng.randint(1, 99)
            return self.call("read", {"filePath": missing}, error="File not found: %s" % missing, t=t)
        if path not in self.read_files:
            self.read_files.append(path)
        return self.call("read", {"filePath": path}, self.p.read(path), t=t)

    def do_grep(self, t):
        pat = self.rng.choice(WORDS)
        hits = [(f, i) for f in sorted(self.p.files)[: self.rng.randint(3, 20)] for i in range(self.rng.randint(0, 12))]
        out = "Found %d matches\n" % len(hits) + "\n".join("%s:\n  Line %d: %s = %s" % (f, i * 7 + 3, pat, self.rng.choice(WORDS)) for f, i in hits)
        return self.call("grep", {"pattern": pat, "path": ROOT + "/src"}, out, t=t)

    def do_glob(self, t):
        pat = self.rng.choice(["**/*.py", "**/*.ts", "src/**/*", "**/*test*"])
        return self.call("glob", {"pattern": pat}, "\n".join(sorted(self.p.files)), t=t)

    def do_bash(self, t):
        r = self.rng.random()
        if r < 0.45:  # test runs: long, and a third fail
            n = int(log_uniform(self.rng, 10, 400))
            if self.shape is not None and self.shape.table:
                n = self.shape.lines(self.rng, 24)
            fail = self.rng.random() < 0.33
            lines = ["test_%s_%d ... %s" % (self.rng.choice(WORDS), i, "FAILED" if fail and i % 9 == 0 else "ok") for i in range(n)]
            if fail:
                lines += ["Traceback (most recent call last):"] + ["  File \"%s\", line %d, in %s" % (
                    self.rng.choice(sorted(self.p.files)), self.rng.randint(1, 300), self.rng.choice(WORDS)) for _ in range(12)]
            cmd = self.rng.choice(["pytest -q", "npm test", "cargo test", "go test ./..."])
            return self.call("bash", {"command": cmd, "description": "Run the tests"}, "\n".join(lines), t=t)
        if r < 0.6:  # builds: large logs
            n = int(log_uniform(self.rng, 30, 800))
            if self.shape is not None and self.shape.table:
                n = self.shape.lines(self.rng, 26)
            out = "\n".join("   Compiling %s v0.%d.%d" % (self.rng.choice(WORDS), i % 9, i % 17) for i in range(n))
            return self.call("bash", {"command": "make build", "description": "Build"}, out, t=t)
        cmd = self.rng.choice(["git status --short", "git diff --stat", "ls -la src", "wc -l src/*"])
        out = "\n".join(" M %s" % f for f in sorted(self.p.files)[: self.rng.randint(1, 15)])
        return self.call("bash", {"command": cmd, "description": "Look around"}, out, t=t)

    def do_edit(self, t):
        path = self.pick_file()
        f = self.p.files[path]
        old = self.p.line(f, 37 * self.rng.randint(0, max(0, f["lines"] // 37)))
        new = old + "  # " + self.rng.choice(WORDS)
        inp = {"filePath": path, "oldString": old * self.rng.randint(1, 6), "newString": new * self.rng.randint(1, 6)}
        if self.rng.random() < 0.18:  # the agent's mistakes: a stale oldString
            return self.call("edit", inp, error="oldString not found in content", t=t)
        f["version"] += 1
        return self.call("edit", inp, "Edit applied successfully.", t=t)

    def do_write(self, t):
        path = "%s/src/new_%s_%d.py" % (ROOT, self.rng.choice(WORDS), self.calls)
        lines = int(log_uniform(self.rng, 20, 400))
        self.p.files[path] = {"lines": lines, "version": 0, "seed": self.rng.random()}
        content = "\n".join(self.p.line(self.p.files[path], i) for i in range(lines))
        return self.call("write", {"filePath": path, "content": content}, "Wrote file successfully.", t=t)

    def do_todowrite(self, t):
        todos = [{"content": "%s the %s" % (self.rng.choice(["check", "fix", "test"]), self.rng.choice(WORDS)),
                  "status": "pending", "id": str(i)} for i in range(self.rng.randint(2, 6))]
        return self.call("todowrite", {"todos": todos}, json.dumps(todos), t=t)

    def do_task(self, t):
        # The subagent's own session is written by the caller.
        desc = "Find where %s is handled" % self.rng.choice(WORDS)
        return self.call("task", {"description": desc, "prompt": desc + " and report the files.",
                                  "subagent_type": "general"}, "<task_result>\n" + " ".join(
            self.rng.choice(WORDS) for _ in range(self.rng.randint(60, 300))) + "\n</task_result>", t=t)


def user_info(t):
    return {"role": "user", "time": {"created": t}, "agent": "build",
            "model": {"providerID": "anthropic", "modelID": "claude-sonnet-4"}}


def assistant_info(parent, t, finish):
    return {"parentID": parent, "role": "assistant", "mode": "build", "agent": "build",
            "path": {"cwd": ROOT, "root": ROOT}, "cost": 0,
            "tokens": {"total": 0, "input": 0, "output": 0, "reasoning": 0, "cache": {"write": 0, "read": 0}},
            "modelID": "claude-sonnet-4", "providerID": "anthropic",
            "time": {"created": t, "completed": t + 1500}, "finish": finish}


# OpenCode compacts a session whose context overflows the model's window; the generator does
# it at about 150K tokens (chars / 4), as an automatic compaction in the middle of a turn.
COMPACT_AT_CHARS = 600_000


def compact(w, rng, sid, t):
    """An automatic compaction: a user message with a compaction part, then the summary."""
    t += 1000
    request = w.message(sid, user_info(t), [{"type": "compaction", "auto": True, "overflow": True}], t)
    t += int(log_uniform(rng, 10, 40) * 1000)
    info = assistant_info(request, t, "stop")
    info.update({"summary": True, "mode": "compaction", "agent": "compaction"})
    summary = "Summary of the work so far: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(300, 900)))
    w.message(sid, info, [{"type": "step-start"}, {"type": "text", "text": summary}, {"type": "step-finish", "reason": "stop"}], t)
    return t, request


def gap_before_prompt(rng):
    # About a third of the prompts come after the 5-minute cache TTL.
    return rng.uniform(300, 1800) if rng.random() < 1 / 3 else log_uniform(rng, 5, 300)


def real_turns(rng, shape, steps):
    """Steps per prompt as the corpus has them: its prompts per session, the steps split."""
    prompts = max(1, min(steps, int(round(shape.draw(rng, "prompts", 1)))))
    cuts = sorted(rng.sample(range(1, steps), prompts - 1)) if prompts > 1 else []
    return [b - a for a, b in zip([0] + cuts, cuts + [steps])]


def write_session(w, rng, sid, parent, steps, kind, t, project, shape=None):
    real = shape is not None and shape.table is not None
    agent = Agent(rng, project, kind, shape)
    t0, done, children, context = t, 0, [], 0
    turns = real_turns(rng, shape, steps) if real else None
    while done < steps:
        if real:
            t += int(shape.draw(rng, "prompt_gap_s") * 1000) if done else 0
        else:
            t += int(gap_before_prompt(rng) * 1000) if done else 0
        prompt = "Please %s the %s %s." % (rng.choice(["look at", "fix", "extend", "explain", "clean up"]),
                                             rng.choice(WORDS), rng.choice(WORDS))
        user = w.message(sid, user_info(t), [{"type": "text", "text": prompt}], t)
        turn = turns.pop(0) if real else min(steps - done, rng.randint(3, 20))
        for k in range(turn):
            # Model latency and tool time.
            t += int((shape.draw(rng, "step_gap_s") if real else log_uniform(rng, 2, 25)) * 1000)
            last = k == turn - 1
            parts = [{"type": "step-start"}]
            if rng.random() < 0.25 or last:
                parts.append({"type": "text", "text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 80)))})
            if not last:
                for _ in range(1 if rng.random() < 0.8 else rng.randint(2, 3)):
                    call = agent.step(t)
                    parts.append(call)
                    if call["tool"] == "task" and parent is None and len(children) < 2:
                        children.append((t, rng.randint(5, 40)))
            parts.append({"type": "step-finish", "reason": "stop" if last else "tool-calls"})
            w.message(sid, assistant_info(user, t, "stop" if last else "tool-calls"), parts, t)
            context += sum(len(json.dumps(p.get("state", p))) for p in parts)
            if context > COMPACT_AT_CHARS and not last:
                t, user = compact(w, rng, sid, t)
                context = 0
        done += turn
    w.session(sid, parent, "Generated %s session" % kind, t0, t)
    for (tc, n) in children:
        write_session(w, rng, w.ids("ses"), sid, n, "explore", tc + 500, project, shape)
    return t


def main():
    args = sys.argv[1:]
    out = args[0]
    seed = int(args[args.index("--seed") + 1]) if "--seed" in args else 14
    n = int(args[args.index("--sessions") + 1]) if "--sessions" in args else 30
    shape = Shape(args[args.index("--shape") + 1] if "--shape" in args else "suite")
    rng = random.Random(seed)
    db = sqlite3.connect(out)
    db.executescript(DDL)
    w = Writer(db, rng)
    t = 1_795_000_000_000
    for i in range(n):
        kind = KINDS[i % len(KINDS)]
        # Lengths log-uniform over 10..300 model steps: short sessions are common, long ones exist.
        steps = int(round(log_uniform(rng, 10, 300)))
        if shape.table:
            steps = max(2, int(round(shape.draw(rng, "steps", 1))))
        sid = w.ids("ses")
        t = write_session(w, rng, sid, None, steps, kind, t + 3_600_000, Project(rng, shape), shape)
    db.commit()
    db.close()


if __name__ == "__main__":
    main()
