#!/usr/bin/env python3
"""The live meter against `dcp replay` on a recorded lab run (mode plugin): what `dcp stats`
says the session kept out and saved, as the sidecar counted it while it answered, beside what
`dcp replay` says of the same recording (tokens kept out = none's tokens sent - dcp's; cost
share = 1 - dcp's cost / none's), with the gap in percent. With --requests, one row per
request: the live trail point (context without and with dcp) beside replay's none and dcp
requests, matched by time, to find where they part.

usage: meter.py [--dcp BIN] [--requests] LAB [LAB ...]
       meter.py [--dcp BIN] --proxy LAB [LAB ...]

LAB is a lab root as bench/lab/run.sh leaves it ($LAB/out/plugin/raw-data, its session_id,
and the config dir of the run under $LAB/work/plugin/xdg/config, whose dcp.jsonc replay takes).
With --proxy, as bench/lab/proxy-meter.sh leaves it: the run in mode base, the proxy's data and
config under $LAB/proxy; the proxied conversation is the one with the most requests.
"""
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def dcp_json(binary, lab, args):
    data = os.path.join(lab, "out/plugin/raw-data")
    env = dict(os.environ, XDG_CONFIG_HOME=os.path.join(lab, "work/plugin/xdg/config"),
               XDG_CACHE_HOME=os.path.join(lab, "meter-cache"))
    out = subprocess.run([binary, "--data-dir", data, "--json", *args], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"dcp {args}: {out.stderr}")
    return json.loads(out.stdout)


def compare(binary, lab, per_request):
    sid = open(os.path.join(lab, "out/plugin/session_id")).read().strip()
    live = dcp_json(binary, lab, ["stats", "--session", sid])["session"]
    replay = dcp_json(binary, lab, ["replay", "--session", sid, "--context-limit", "128000"])["sessions"][0]
    none, dcp = replay["modes"]["none"], replay["modes"]["dcp"]
    kept = none["tokens_sent"] - dcp["tokens_sent"]
    share = 1 - dcp["cost"] / none["cost"]
    gap = (live["kept_out_tokens"] - kept) / kept if kept else float("nan")
    name = os.path.basename(lab.rstrip("/"))
    print(f"{name:<22} requests live {live['requests']:>3} replay {replay['requests']:>3} (none {none['requests']:>3}) | "
          f"kept out live {live['kept_out_tokens']:>8,} replay {kept:>8,} gap {100 * gap:+6.2f}% | "
          f"cost share live {live['cost_saved_share']:.4f} replay {share:.4f} gap {live['cost_saved_share'] - share:+.4f}")
    if per_request:
        rows(lab, sid, none, dcp)
    return gap


def compare_proxy(binary, lab):
    """The proxied conversation's live figures against replay of the recorded session."""
    env = dict(os.environ, XDG_CONFIG_HOME=os.path.join(lab, "proxy/config"),
               XDG_CACHE_HOME=os.path.join(lab, "meter-cache"))
    def run(data, args):
        out = subprocess.run([binary, "--data-dir", data, "--json", *args], env=env, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"dcp {args}: {out.stderr}")
        return json.loads(out.stdout)
    proxy_data = os.path.join(lab, "proxy/data/opencode")
    states = os.path.join(proxy_data, "storage/plugin/dcp/proxy")
    best = None
    for client in os.listdir(states):
        for name in os.listdir(os.path.join(states, client)):
            if not name.endswith(".json"):
                continue
            state = json.load(open(os.path.join(states, client, name)))
            requests = state.get("stats", {}).get("requests", 0)
            if best is None or requests > best[0]:
                best = (requests, name[:-len(".json")])
    live = run(proxy_data, ["stats", "--session", best[1]])["session"]
    sid = open(os.path.join(lab, "out/base/session_id")).read().strip()
    replay = run(os.path.join(lab, "out/base/raw-data"), ["replay", "--session", sid, "--context-limit", "128000"])
    replay = replay["sessions"][0]
    none, dcp = replay["modes"]["none"], replay["modes"]["dcp"]
    kept = none["tokens_sent"] - dcp["tokens_sent"]
    share = 1 - dcp["cost"] / none["cost"]
    gap = (live["kept_out_tokens"] - kept) / kept if kept else float("nan")
    reported = live.get("reported") or {}
    name = os.path.basename(lab.rstrip("/")) + " (proxy)"
    print(f"{name:<22} requests live {live['requests']:>3} replay {replay['requests']:>3} | "
          f"kept out live {live['kept_out_tokens']:>8,} replay {kept:>8,} gap {100 * gap:+6.2f}% | "
          f"cost share live {live['cost_saved_share']:.4f} replay {share:.4f} gap {live['cost_saved_share'] - share:+.4f} | "
          f"usage reported for {reported.get('requests', 0)} requests")
    return gap


def rows(lab, sid, none, dcp):
    state = json.load(open(os.path.join(lab, "out/plugin/raw-data/storage/plugin/dcp", sid + ".json")))
    trail = [line.split() for line in state["dcp"].get("trail", [])]
    by_time = {r["time"]: r for r in none["per_request"]}
    print(f"{'#':>3} {'live without':>12} {'live with':>9} {'replay none':>11} {'replay dcp':>10} {'d(without)':>10} {'d(with)':>8}")
    for i, (point, r) in enumerate(zip(trail, dcp["per_request"])):
        n = by_time.get(r["time"])
        without, with_ = int(point[1]), int(point[2])
        none_tokens = n["tokens"] if n else 0
        print(f"{i:>3} {without:>12,} {with_:>9,} {none_tokens:>11,} {r['tokens']:>10,} "
              f"{without - none_tokens:>10,} {with_ - r['tokens']:>8,} {point[4]}{' (no none request)' if not n else ''}")


def main():
    args = sys.argv[1:]
    binary = os.path.join(REPO, "target/release/dcp")
    per_request = proxy = False
    while args and args[0].startswith("--"):
        flag = args.pop(0)
        if flag == "--dcp":
            binary = args.pop(0)
        elif flag == "--requests":
            per_request = True
        elif flag == "--proxy":
            proxy = True
    for lab in args:
        if proxy:
            compare_proxy(binary, lab)
        else:
            compare(binary, lab, per_request)


if __name__ == "__main__":
    main()
