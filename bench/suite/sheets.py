#!/usr/bin/env python3
"""dcp over no pruning under every price sheet, on several data dirs, before and after a change.

usage: sheets.py run --dcp BIN --out DIR NAME=DATA_DIR ... [--sheets a,b,...] [--jobs N]
       sheets.py table BEFORE_DIR [AFTER_DIR] [--manifest NAME=MANIFEST ...] [--sheets a,b,...]

`run` replays each data dir under each sheet with its own TTL (`BIN replay --all --data-dir
DATA_DIR --mode dcp --prices SHEET --json`, no `--cache-ttl`), into DIR/NAME-SHEET.json; a file
already there is kept, so a sweep cut short goes on where it stopped. `table` reads one such
directory, or two (before and after, the same names), and prints per data dir (NAME) a
Markdown table, one row per sheet: dcp's cost over no pruning's, both modelled at that sheet,
median / worst / total (the sum of dcp's cost over the sum of no pruning's), the sessions above
1.02, the same three for `cost_with_misses`, the median of the continuous runs of 30 requests or
more (with a manifest, whose `kind` says which are continuous; without one every session
counts), the rewrites of the `dcp` runs, and the worst session. With two directories each cell
reads `before → after`. Sessions are matched to a manifest by title, a subagent taking its
parent's entry (as summary.py does). The sessions above 1.02 follow each table, with the number
of the request that last rewrote and the reason.
"""
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

SHEETS = ["auto", "anthropic-5m", "anthropic-1h", "openai", "openai-24h", "gemini", "deepseek", "none", "local"]
LIMIT = 1.02
LONG_RUN = 30


def options(argv):
    opts = {"positional": [], "manifest": {}, "sheets": SHEETS, "jobs": 1, "dcp": "target/release/dcp", "out": None}
    it = iter(argv)
    for a in it:
        if a == "--manifest":
            name, path = next(it).split("=", 1)
            opts["manifest"][name] = path
        elif a == "--sheets":
            opts["sheets"] = next(it).split(",")
        elif a in ("--jobs", "--dcp", "--out"):
            opts[a[2:]] = int(next(it)) if a == "--jobs" else next(it)
        else:
            opts["positional"].append(a)
    return opts


def run(opts):
    if not opts["out"]:
        sys.exit(__doc__)
    os.makedirs(opts["out"], exist_ok=True)
    jobs = []
    for spec in opts["positional"]:
        name, data = spec.split("=", 1)
        for sheet in opts["sheets"]:
            path = os.path.join(opts["out"], "%s-%s.json" % (name, sheet))
            if not os.path.exists(path):
                jobs.append((data, sheet, path))

    def one(job):
        data, sheet, path = job
        cmd = ["nice", opts["dcp"], "replay", "--all", "--data-dir", data, "--mode", "dcp", "--prices", sheet, "--json"]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        with open(path + ".part", "w") as f:
            f.write(out)
        os.rename(path + ".part", path)
        print(" ".join(cmd), file=sys.stderr)

    with ThreadPoolExecutor(max_workers=opts["jobs"]) as pool:
        list(pool.map(one, jobs))


def median(values):
    v = sorted(values)
    n = len(v)
    if not n:
        return None
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def continuous(doc, manifest):
    """Session ids of the continuous runs, by the manifest (all of them without one)."""
    if not manifest:
        return {s["session_id"] for s in doc["sessions"]}
    with open(manifest) as f:
        by_title = {e["title"]: e for e in json.load(f)["sessions"]}
    own = {s["session_id"]: by_title.get(s["title"]) for s in doc["sessions"]}
    out = set()
    for s in doc["sessions"]:
        entry = own.get(s["parent_id"]) if s["parent_id"] else own.get(s["session_id"])
        if (entry or {}).get("kind", "continuous") == "continuous":
            out.add(s["session_id"])
    return out


def figures(path, manifest):
    with open(path) as f:
        doc = json.load(f)
    cont = continuous(doc, manifest)
    rows = []
    for s in doc["sessions"]:
        none, dcp = s["modes"]["none"], s["modes"]["dcp"]
        if not none["cost"]:
            continue
        applied = [(i, r["applied"]) for i, r in enumerate(dcp.get("per_request", [])) if r.get("applied")]
        rows.append({"title": s["title"], "id": s["session_id"], "requests": s["requests"],
                     "cost": dcp["cost"], "none": none["cost"], "misses": dcp["cost_with_misses"],
                     "ratio": dcp["cost"] / none["cost"], "with_misses": dcp["cost_with_misses"] / none["cost"],
                     "rewrites": dcp["rewrites"], "long": s["session_id"] in cont and s["requests"] >= LONG_RUN,
                     "last": applied[-1] if applied else None})
    total = sum(r["cost"] for r in rows) / sum(r["none"] for r in rows)
    total_m = sum(r["misses"] for r in rows) / sum(r["none"] for r in rows)
    worst = max(rows, key=lambda r: r["ratio"])
    return {
        "median": median([r["ratio"] for r in rows]), "worst": worst["ratio"], "total": total,
        "above": sum(1 for r in rows if r["ratio"] > LIMIT),
        "m_median": median([r["with_misses"] for r in rows]), "m_worst": max(r["with_misses"] for r in rows),
        "m_total": total_m, "long": median([r["ratio"] for r in rows if r["long"]]),
        "rewrites": sum(r["rewrites"] for r in rows), "worst_title": worst["title"][:40],
        "rows": rows,
    }


def cell(key, fmt, before, after):
    b = fmt % before[key] if before[key] is not None else "-"
    if after is None:
        return b
    a = fmt % after[key] if after[key] is not None else "-"
    return b if a == b else "%s → %s" % (b, a)


def table(opts):
    dirs = opts["positional"]
    if not dirs:
        sys.exit(__doc__)
    files = os.listdir(dirs[0])
    names = sorted({f[: -len("-%s.json" % s)] for f in files for s in SHEETS if f.endswith("-%s.json" % s)})
    for name in names:
        print("### %s\n" % name)
        print("| sheet | median | worst | total | above %.2f | with misses: median / worst / total |"
              " continuous %d+ median | rewrites | worst session |" % (LIMIT, LONG_RUN))
        print("|---|---|---|---|---|---|---|---|---|")
        above = []
        for sheet in opts["sheets"]:
            paths = [os.path.join(d, "%s-%s.json" % (name, sheet)) for d in dirs]
            if not all(os.path.exists(p) for p in paths):
                continue
            got = [figures(p, opts["manifest"].get(name)) for p in paths]
            before, after = got[0], got[1] if len(got) > 1 else None
            misses = " / ".join(cell(k, "%.3f", before, after) for k in ("m_median", "m_worst", "m_total"))
            print("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                sheet, cell("median", "%.3f", before, after), cell("worst", "%.3f", before, after),
                cell("total", "%.3f", before, after), cell("above", "%d", before, after), misses,
                cell("long", "%.3f", before, after), cell("rewrites", "%d", before, after),
                (after or before)["worst_title"]))
            for r in (after or before)["rows"]:
                if r["ratio"] > LIMIT:
                    above.append((sheet, r))
        print()
        for sheet, r in above:
            last = "request %d of %d: %s" % (r["last"][0], r["requests"], r["last"][1]) if r["last"] else "no rewrite"
            print("- %s, `%s` (%s): %.4f; last rewrite at %s" % (sheet, r["title"][:50], r["id"], r["ratio"], last))
        if above:
            print()


def main():
    argv = sys.argv[1:]
    if not argv or argv[0] not in ("run", "table"):
        sys.exit(__doc__)
    opts = options(argv[1:])
    run(opts) if argv[0] == "run" else table(opts)


if __name__ == "__main__":
    main()
