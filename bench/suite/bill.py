#!/usr/bin/env python3
"""The bill the provider reported: replay's calibration per session and dcp's effect on it.

usage: bill.py (REPLAY_JSON | --data-dir DIR [--dcp BIN] [--prices SHEET]) --manifest MANIFEST [--group NAME]
       bill.py --sheets --data-dir DIR [--dcp BIN] [--manifest MANIFEST]

From a `dcp replay --all --json` document (or, with --data-dir, from the replay it runs:
`dcp replay --all --data-dir DIR --mode dcp --json`), for every session that recorded the
provider's usage (`calibration` in the JSON, see src/replay/calibrate.rs):

1. the calibration table, one row per session: its sheet, what the fit rests on (each
   request's usage, or the run's totals only), the fitted fixed prefix and token ratio, the
   implicit cache's hit share, the requests the usage shows cold, the reported bill, no
   pruning's bill by the fitted model, the calibration error, and dcp's effect: the calibrated
   bill with pruning over the reported bill, beside replay's own ratio (dcp over no pruning,
   both modelled);
2. per group (all, continuous 30+, interactive, Codex; the group name given for a held-out
   manifest), the calibration error (median and worst of its size) and dcp's effect on the
   reported bill and replay's own, median / worst / total.

With --sheets, the same data dir is replayed under every price sheet family (`--prices NAME`)
and each gives dcp's cost over no pruning's, both modelled at that sheet: median, worst (and
which session), and how many sessions cost more than 1.02 of no pruning; with a manifest, also
the median of the continuous runs and of those of 30 requests or more.

Sessions are matched to the manifest by title (a subagent takes its parent's entry), as
summary.py does. Markdown, ready for docs/results/bill.md.
"""
import json
import subprocess
import sys

LONG_RUN = 30


def load(args):
    if "--data-dir" in args:
        dcp = args[args.index("--dcp") + 1] if "--dcp" in args else "target/release/dcp"
        prices = args[len(args) - 1 - args[::-1].index("--prices") + 1] if "--prices" in args else "auto"
        cmd = [dcp, "replay", "--all", "--data-dir", args[args.index("--data-dir") + 1], "--mode", "dcp",
               "--prices", prices, "--json"]
        return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout), " ".join(cmd)
    with open(args[0]) as f:
        return json.load(f), args[0]


def entries(doc, manifest_path):
    """By session id: its manifest entry (a subagent takes its parent's)."""
    with open(manifest_path) as f:
        by_title = {e["title"]: e for e in json.load(f)["sessions"]}
    own = {s["session_id"]: by_title.get(s["title"]) for s in doc["sessions"]}
    return {s["session_id"]: own.get(s["parent_id"]) if s["parent_id"] else own[s["session_id"]]
            for s in doc["sessions"]}


def replay_ratio(s):
    none, dcp = s["modes"]["none"]["cost"], s["modes"]["dcp"]["cost"]
    return dcp / none if none else 1.0


def median(values):
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def three(values, total):
    return "%.2f / %.2f / %.2f" % (median(values), max(values), total)


def session_rows(sessions, entry):
    print("| session | harness | requests | sheet | basis | fixed prefix | token ratio | hit share | cold |"
          " reported | modelled | error | dcp / reported | replay's dcp / none |")
    print("|---|---|--:|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for s in sessions:
        c, e = s["calibration"], entry.get(s["session_id"]) or {}
        name = e.get("name", s["title"][:40]) + (" / " + s["title"][:32] if s["parent_id"] else "")
        hit = "-" if c["hit_share"] is None else "%.2f" % c["hit_share"]
        print("| %s | %s | %d | %s | %s | %s | %.2f | %s | %d | %s | %s | %+.1f%% | %.2f | %.2f |" % (
            name, e.get("harness", "?"), c["requests"], s["sheet"]["name"], c["basis"],
            "{:,}".format(c["fixed_prefix"]), c["token_ratio"], hit, c["cold"], "{:,}".format(c["reported"]),
            "{:,}".format(c["modelled"]), 100 * c["error"], c["effect"], replay_ratio(s)))


def group_rows(groups):
    print("| sessions | n | calibration error, median / worst | dcp / reported bill, median / worst / total |"
          " replay's dcp / none, median / worst / total |")
    print("|---|--:|---|---|---|")
    for label, sessions in groups:
        if not sessions:
            continue
        cal = [s["calibration"] for s in sessions]
        errors = [abs(c["error"]) for c in cal]
        effect_total = sum(c["dcp"] for c in cal) / sum(c["reported"] for c in cal)
        ratios = [replay_ratio(s) for s in sessions]
        replay_total = sum(s["modes"]["dcp"]["cost"] for s in sessions) / sum(s["modes"]["none"]["cost"] for s in sessions)
        print("| %s | %d | %.1f%% / %.1f%% | %s | %s |" % (
            label, len(sessions), 100 * median(errors), 100 * max(errors),
            three([c["effect"] for c in cal], effect_total), three(ratios, replay_total)))


FAMILIES = ["auto", "anthropic-5m", "anthropic-1h", "openai", "openai-24h", "gemini", "deepseek", "none", "local"]


def sheets(args):
    print("| sheet | sessions | dcp / none, median / worst | worst session | above 1.02 | continuous, median | continuous 30+, median |")
    print("|---|--:|---|---|--:|--:|--:|")
    for family in FAMILIES:
        doc, _ = load(args + ["--prices", family])
        entry = entries(doc, args[args.index("--manifest") + 1]) if "--manifest" in args else {}
        rated = [(replay_ratio(s), s) for s in doc["sessions"] if s["modes"]["none"]["cost"]]
        worst = max(rated, key=lambda r: r[0])
        cont = [r for r, s in rated if (entry.get(s["session_id"]) or {}).get("kind", "continuous") == "continuous"]
        long = [r for r, s in rated if (entry.get(s["session_id"]) or {}).get("kind", "continuous") == "continuous"
                and s["requests"] >= LONG_RUN]
        print("| %s | %d | %.3f / %.3f | %s | %d | %s | %s |" % (
            family, len(rated), median([r for r, _ in rated]), worst[0], worst[1]["title"][:44],
            sum(1 for r, _ in rated if r > 1.02), "%.3f" % median(cont) if cont else "-",
            "%.3f" % median(long) if long else "-"))


def main():
    args = sys.argv[1:]
    if "--sheets" in args:
        return sheets(args)
    doc, source = load(args)
    entry = entries(doc, args[args.index("--manifest") + 1])
    group = args[args.index("--group") + 1] if "--group" in args else None
    calibrated = [s for s in doc["sessions"] if s.get("calibration")]
    print("From `%s`: %d of %d sessions recorded the provider's usage.\n" % (source, len(calibrated), len(doc["sessions"])))
    session_rows(calibrated, entry)
    print()
    kind = lambda s: (entry.get(s["session_id"]) or {}).get("kind", "continuous")
    harness = lambda s: (entry.get(s["session_id"]) or {}).get("harness", "")
    groups = [("all" if group is None else group, calibrated)]
    groups.append(("continuous %d+" % LONG_RUN,
                   [s for s in calibrated if kind(s) == "continuous" and s["requests"] >= LONG_RUN]))
    groups.append(("interactive", [s for s in calibrated if kind(s) == "interactive"]))
    groups.append(("Codex", [s for s in calibrated if "Codex" in harness(s)]))
    group_rows(groups)


if __name__ == "__main__":
    main()
