#!/usr/bin/env python3
"""Sweeps dcp's existing knobs over the real group, cross-validated on two halves of the corpus.

usage: sweep.py DATA_DIR [--manifest bench/real/sources.json] [--dcp target/release/dcp]
                [--out sweep.json] [--markdown]

Each setting of the grid (GRID: a product of dotted config keys and their values) is written
as a `dcp.jsonc` in a temporary `OPENCODE_CONFIG_DIR` and replayed (`dcp replay --all --mode
dcp --cache-ttl 300 --json`). The continuous runs of 30 requests or more (summary.py's
"continuous 30+") are split by a fixed rule: sorted by session id, even positions are half A,
odd ones half B. A setting is chosen on half A by the median cost with misses charged (issue
23's rule), then the median tokens sent, and the same setting is reported on half B. Beside
each half: the whole population's worst uncharged cost and share of missed steps, and the
interactive sessions' median cost, the figures a default must not worsen. The default
settings are the grid point equal to the shipped configuration.
"""
import itertools
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import summary  # noqa: E402

# Dotted config keys and the values swept; the shipped default is among each key's values.
GRID = [
    ("rewrite.lossBound", [0.02, 0.05, 0.10]),
    ("rewrite.maxHorizon", [15, 30, 60]),
    ("strategies.masking.keepLast", [6, 10, 15]),
    ("strategies.masking.keepTokens", [5000, 10000, 20000]),
    ("strategies.masking.onRewrite.keepLast", [2, 4, 8]),
]
DEFAULTS = {"rewrite.lossBound": 0.05, "rewrite.maxHorizon": 30, "strategies.masking.keepLast": 6,
            "strategies.masking.keepTokens": 10000, "strategies.masking.onRewrite.keepLast": 4}


def nested(setting):
    """The config document of a {dotted key: value} setting."""
    doc = {}
    for key, value in setting.items():
        node = doc
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return doc


def replay(dcp, data_dir, setting):
    """The `dcp replay --all --json` document of one setting."""
    with tempfile.TemporaryDirectory() as cfg:
        with open(os.path.join(cfg, "dcp.jsonc"), "w") as f:
            json.dump(nested(setting), f)
        env = dict(os.environ, OPENCODE_CONFIG_DIR=cfg)
        out = subprocess.run([dcp, "replay", "--all", "--data-dir", data_dir, "--mode", "dcp",
                              "--cache-ttl", "300", "--json"], env=env, check=True,
                             capture_output=True, text=True).stdout
    return json.loads(out)


def populations(doc, manifest):
    """{name: sessions}: halves A and B of the continuous 30+ runs, all of them, interactive."""
    kind = summary.kinds(doc, manifest)
    long_runs = sorted((s for s in doc["sessions"] if kind.get(s["session_id"]) == "continuous"
                        and s["requests"] >= summary.LONG_RUN), key=lambda s: s["session_id"])
    return {"A": long_runs[0::2], "B": long_runs[1::2], "30+": long_runs,
            "interactive": [s for s in doc["sessions"] if kind.get(s["session_id"]) == "interactive"]}


def figures(doc, manifest):
    """The figures of one replay: per population, summary.py's (median, worst, total)s."""
    out = {}
    for name, sessions in populations(doc, manifest).items():
        s = summary.summarise(sessions, "dcp")
        out[name] = {"n": len(sessions), "cost": s["cost"], "charged": s["cost_with_misses"],
                     "tokens": s["tokens_sent"], "final": s["final_context"], "misses": s["misses"]}
    return out


def settings():
    """Every point of GRID as a {dotted key: value} dict."""
    keys = [k for k, _ in GRID]
    for values in itertools.product(*(v for _, v in GRID)):
        yield dict(zip(keys, values))


def label(setting):
    return " ".join("%s=%s" % (k.replace("strategies.masking.", "m."), v) for k, v in setting.items()
                    if setting[k] != DEFAULTS[k]) or "defaults"


def admissible(f, base):
    """Whether a setting may replace the defaults: better charged median and total on both
    halves, worst uncharged <= 1.02 and misses <= 6% on the 30+ runs, interactive median cost
    not raised."""
    better = all(f[h]["charged"][0] < base[h]["charged"][0] and f[h]["charged"][2] < base[h]["charged"][2]
                 for h in ("A", "B"))
    return (better and f["30+"]["cost"][1] <= 1.02 and f["30+"]["misses"][2] <= 0.06
            and f["interactive"]["cost"][0] <= base["interactive"]["cost"][0])


def row(setting, f, markdown):
    a, b, whole = f["A"], f["B"], f["30+"]
    cells = ["%.3f / %.3f" % (a["charged"][0], a["charged"][2]), "%.3f" % a["tokens"][0],
             "%.3f / %.3f" % (b["charged"][0], b["charged"][2]), "%.3f" % b["tokens"][0],
             "%.2f" % whole["cost"][1], "%.3f" % whole["misses"][2], "%.3f" % f["interactive"]["cost"][0]]
    if markdown:
        return "| %s | %s |" % (label(setting), " | ".join(cells))
    return "%-60s %s" % (label(setting), "  ".join(cells))


def main():
    args = sys.argv[1:]
    opt = lambda name, default: args[args.index(name) + 1] if name in args else default  # noqa: E731
    data_dir, manifest = args[0], opt("--manifest", "bench/real/sources.json")
    dcp, out = opt("--dcp", "target/release/dcp"), opt("--out", None)
    results = [(s, figures(replay(dcp, data_dir, s), manifest)) for s in settings()]
    if out:
        with open(out, "w") as f:
            json.dump([{"setting": s, "figures": f} for s, f in results], f)
    base = next(f for s, f in results if s == DEFAULTS)
    ranked = sorted(results, key=lambda r: (r[1]["A"]["charged"][0], r[1]["A"]["tokens"][0]))
    print("halves: A %d, B %d sessions; columns: A charged median / total, A tokens median, the same"
          " on B, 30+ worst uncharged, 30+ misses (all), interactive median cost"
          % (base["A"]["n"], base["B"]["n"]))
    for s, f in ranked[:15] + [(DEFAULTS, base)]:
        print(row(s, f, "--markdown" in args) + ("  admissible" if admissible(f, base) else ""))
    print("admissible settings: %d of %d" % (sum(admissible(f, base) for _, f in results), len(results)))


if __name__ == "__main__":
    main()
