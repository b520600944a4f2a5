#!/usr/bin/env python3
"""Builds the replay suite: one OpenCode data dir holding every session of it.

usage: build.py OUT_DIR [--group all|generated|lab] [--shape suite|real]
                               (writes OUT_DIR/opencode.db; the repository's root is found
                                from this file)

`--group` builds one group of the effect bench alone (effect.sh): the generated sessions, or
the lab's and the fixture's; `all` (the default) is the suite as it always was. `--shape` is
gen.py's (`real`: calibrated to the real-session corpus).

The suite is (README.md says how the shapes were chosen):
- the generated sessions: gen.py with seed 14, 30 top-level sessions and the subagent
  sessions they start;
- the lab sessions recorded with dcp's plugin (fixtures/replay/*/opencode.db);
- the recorded fixture session (fixtures/data/opencode.db).
Rows are copied verbatim; the same inputs always give the same database.
"""
import os
import sqlite3
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import gen  # noqa: E402


def copy_sessions(dst, src_path):
    src = sqlite3.connect(src_path)
    cols = ["id", "project_id", "parent_id", "slug", "directory", "title", "version", "time_created", "time_updated"]
    for row in src.execute("SELECT %s FROM session" % ", ".join(cols)):
        dst.execute("INSERT INTO session (%s) VALUES (%s)" % (", ".join(cols), ",".join("?" * len(cols))), row)
    for table, n in (("message", 5), ("part", 6)):
        names = "id, session_id, time_created, time_updated, data" if n == 5 else \
            "id, message_id, session_id, time_created, time_updated, data"
        dst.executemany("INSERT INTO %s VALUES (%s)" % (table, ",".join("?" * n)),
                        src.execute("SELECT %s FROM %s" % (names, table)))
    src.close()


def main():
    args = sys.argv[1:]
    out = args[0]
    group = args[args.index("--group") + 1] if "--group" in args else "all"
    shape = args[args.index("--shape") + 1] if "--shape" in args else "suite"
    os.makedirs(out, exist_ok=True)
    db_path = os.path.join(out, "opencode.db")
    if os.path.exists(db_path):
        os.remove(db_path)
    # The lab group alone still needs the tables: gen.py writes them with no session.
    sessions = "0" if group == "lab" else "30"
    subprocess.run([sys.executable, os.path.join(HERE, "gen.py"), db_path, "--seed", "14", "--sessions", sessions,
                    "--shape", shape], check=True)
    db = sqlite3.connect(db_path)
    if group == "generated":
        recorded = []
    # The `-always` runs were recorded with a non-default config (the agent tools offered
    # from the first request); the suite replays dcp's defaults, so they stay out.
    else:
        recorded = sorted(os.path.join(ROOT, "fixtures", "replay", d, "opencode.db")
                          for d in os.listdir(os.path.join(ROOT, "fixtures", "replay"))
                          if os.path.isfile(os.path.join(ROOT, "fixtures", "replay", d, "opencode.db"))
                          and not d.endswith("-always"))
        recorded.append(os.path.join(ROOT, "fixtures", "data", "opencode.db"))
    for path in recorded:
        copy_sessions(db, path)
    db.commit()
    n, subs = db.execute("SELECT count(*), sum(parent_id IS NOT NULL) FROM session").fetchone()
    db.close()
    print("%s: %d sessions (%d subagents), %d bytes" % (db_path, n, subs, os.path.getsize(db_path)))


if __name__ == "__main__":
    main()
