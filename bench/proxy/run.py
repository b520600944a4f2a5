#!/usr/bin/env python3
"""Times `dcp proxy` against a direct call to the same upstream.

    python3 bench/proxy/run.py --session FILE [--bin target/release/dcp] [--steps N] [--stages]
                               [--compare OTHER_DCP] [--floor] [--config JSON]

FILE is a generated session (`dcp-testkit gen session`, see BENCHMARKS.md, The generated data).
Its history and steps are sent as OpenCode sends them to an OpenAI-compatible provider: one
Chat Completions request per step (`stream: true`), the history growing by one step each time.
A fake upstream on 127.0.0.1 reads each body and answers with a server-sent event stream whose
first event goes out at once. Each request is sent twice, directly and through the proxy, in
alternating order, so both see the same machine; the first request (the whole history, which
the engine reads once) is reported apart. Prints one JSON line: p50 and p99 of the total time
of a request and of the time to its first streamed byte, both ways, and the added time (the
per-request difference, p50 and p99, of the total and of the first byte), and each proxy's
resident memory at the end (`rss_mb`, and its peak, `peak_rss_mb`, from /proc) and the CPU
time it spent per request after the first (`cpu_ms_per_request`, user and system, all its
threads: what the load of a shared machine does not inflate). With
--stages, dcp's debug log is on and the p50 of each stage of a pruned request (parse, map,
engine, write) is added from it, and for a request sent ahead of the engine: `received` (from
the request's head to its body's last byte), `advancing` (the time spent comparing and sending
ahead in that span), `pruned`, `compared` and `answered` (from the body's last byte to the
engine's edits, to the rest found, to the upstream's answer), `frames` (the body's frames).
The fake upstream reads each body into one buffer, so its reading time does not depend on how
the bytes come cut. With --compare, a second proxy (another dcp binary, say
the one before a change) gets each request too, in turn with the others, and its figures
are reported under `compare_`, from the same run. --config gives every proxy dcp.jsonc keys
(JSON; `{"enabled": false}`: the proxy's path with dcp leaving every conversation alone). With --floor, the first proxy also gets
each request on a path it does not know (`/v1/forward`), which it streams upstream unread: the
forwarding floor of the body through two loopback sockets, reported under `floor_` (the
proxy's CPU time then includes them); with --compare, the second proxy too (`compare_floor_`).
"""
import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import tempfile
import threading
import time

STREAM = b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": "ok"}}]}).encode() + b"\n\n"


def chat_messages(messages):
    """OpenCode's messages as the Chat Completions messages an OpenAI-compatible provider gets."""
    out = []
    for m in messages:
        role = m["info"].get("role")
        for part in m.get("parts", []):
            kind = part.get("type")
            if kind == "text" and role in ("user", "assistant"):
                out.append({"role": role, "content": part.get("text", "")})
            elif kind == "tool":
                state = part.get("state", {})
                call = {"id": part["callID"], "type": "function",
                        "function": {"name": part["tool"], "arguments": json.dumps(state.get("input", {}))}}
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
                text = state.get("output") if state.get("status") == "completed" else state.get("error", "")
                out.append({"role": "tool", "tool_call_id": part["callID"], "content": text or ""})
    return out


def serve_upstream(listener):
    """The fake upstream: reads a request, answers with an event stream."""
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=answer, args=(conn,), daemon=True).start()


def answer(conn):
    with conn:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return
            data += chunk
        head, body = data.split(b"\r\n\r\n", 1)
        length = next(int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:"))
        # Read into one buffer: joining the pieces as they come costs the body's size per
        # piece, which would time the reader instead of the sender.
        buf = bytearray(max(length, len(body)))
        buf[:len(body)] = body
        view, got = memoryview(buf), len(body)
        while got < length:
            n = conn.recv_into(view[got:], length - got)
            if not n:
                return
            got += n
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n" + STREAM)
        conn.sendall(b"data: [DONE]\n\n")


def timed_post(port, body, path="/v1/chat/completions"):
    """Sends one request; returns (seconds to the first body byte, seconds to the end)."""
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer sk-bench\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    start = time.perf_counter()
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(head + body)
    got, first = b"", None
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
        if first is None and b"\r\n\r\n" in got and got.split(b"\r\n\r\n", 1)[1]:
            first = time.perf_counter() - start
    s.close()
    assert got.startswith(b"HTTP/1.1 200"), got[:200]
    return first, time.perf_counter() - start


def start_proxy(binary, upstream_port, home, config):
    env = dict(os.environ, HOME=home, XDG_DATA_HOME=f"{home}/data", XDG_CONFIG_HOME=f"{home}/config")
    if config:
        os.makedirs(f"{home}/config/opencode")
        with open(f"{home}/config/opencode/dcp.jsonc", "w") as f:
            f.write(json.dumps(config))
    proc = subprocess.Popen([binary, "proxy", "--listen", "127.0.0.1:0", "--upstream", f"http://127.0.0.1:{upstream_port}"],
                            stdout=subprocess.PIPE, env=env)
    line = proc.stdout.readline().decode()
    return proc, int(line.split("http://127.0.0.1:")[1].split(",")[0])


def pct(values, q):
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))] * 1000, 3)


def cpu_seconds(pid):
    """A process's user and system CPU time so far, in seconds, from /proc."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(args, session, targets, procs=()):
    base = chat_messages(session["messages"])
    times = {name: [] for name, _ in targets}
    first = {}
    history = list(base)
    for step in range(args.steps + 1):
        if step:
            history += chat_messages(session["steps"][step - 1])
        body = json.dumps({"model": "m", "stream": True, "messages": history}).encode()
        turn = step % len(targets)
        order = targets[turn:] + targets[:turn]
        for name, port in (order if step % 2 else order[::-1]):
            t = timed_post(port, body, "/v1/forward") if name.endswith("floor") else timed_post(port, body)
            if step == 0:
                first[name] = t
            else:
                times[name].append(t)
        if step == 0:
            cpu_start = [cpu_seconds(p.pid) for p in procs]
    cpu = [round((cpu_seconds(p.pid) - c) * 1000 / max(args.steps, 1), 2) for p, c in zip(procs, cpu_start)]
    return base, times, first, cpu


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--session", required=True)
    p.add_argument("--bin", default="target/release/dcp")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--stages", action="store_true")
    p.add_argument("--compare", help="a second dcp binary, measured in the same run")
    p.add_argument("--floor", action="store_true", help="also time the proxy forwarding unread")
    p.add_argument("--config", default="{}", help="dcp.jsonc keys for every proxy, as JSON")
    args = p.parse_args()
    session = json.load(open(args.session))
    listener = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=serve_upstream, args=(listener,), daemon=True).start()
    upstream = listener.getsockname()[1]
    with tempfile.TemporaryDirectory() as home, tempfile.TemporaryDirectory() as other_home:
        procs, targets = [], [("direct", upstream)]
        try:
            for name, binary, where in [("proxy", args.bin, home), ("compare", args.compare, other_home)]:
                if binary:
                    config = dict({"debug": True} if args.stages else {}, **json.loads(args.config))
                    proc, port = start_proxy(binary, upstream, where, config)
                    procs.append(proc)
                    targets.append((name, port))
                    if args.floor:
                        targets.append(("floor" if name == "proxy" else "compare_floor", port))
            base, times, first, cpu = measure(args, session, targets, procs)
            memory = [rss(proc.pid) for proc in procs]
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait()
        found = stages(f"{home}/config/opencode/logs/dcp") if args.stages else {}
        if args.stages and args.compare:
            found.update({f"compare_{k}": v for k, v in stages(f"{other_home}/config/opencode/logs/dcp").items()})
    out = {"messages": len(session["messages"]), "chat_messages": len(base), "steps": args.steps,
           "load_average": round(os.getloadavg()[0], 1)}
    for name, _ in targets:
        if name.endswith("floor"):
            out.update(figures(name, times, first))
    for (name, _), (now, peak), cpu_ms in zip([t for t in targets[1:] if not t[0].endswith("floor")], memory, cpu):
        out.update(figures(name, times, first))
        prefix = "" if name == "proxy" else "compare_"
        out.update({f"{prefix}rss_mb": now, f"{prefix}peak_rss_mb": peak, f"{prefix}cpu_ms_per_request": cpu_ms})
    print(json.dumps({**out, **found}))


def figures(name, times, first):
    """The figures of proxy `name` against the direct calls; keys prefixed `compare_` for the second."""
    total = {k: [t[1] for t in v] for k, v in times.items()}
    ttfb = {k: [t[0] for t in v] for k, v in times.items()}
    added = [p_ - d for p_, d in zip(total[name], total["direct"])]
    ttfb_added = [p_ - d for p_, d in zip(ttfb[name], ttfb["direct"])]
    prefix = {"proxy": "", "floor": "floor_", "compare_floor": "compare_floor_"}.get(name, "compare_")
    return {f"{prefix}{k}": v for k, v in {
        "first_direct_ms": round(first["direct"][1] * 1000, 1), "first_proxy_ms": round(first[name][1] * 1000, 1),
        "total_p50_direct_ms": pct(total["direct"], 0.5), "total_p50_proxy_ms": pct(total[name], 0.5),
        "added_p50_ms": pct(added, 0.5), "added_p99_ms": pct(added, 0.99),
        "ttfb_p50_direct_ms": pct(ttfb["direct"], 0.5), "ttfb_p50_proxy_ms": pct(ttfb[name], 0.5),
        "ttfb_added_p50_ms": pct(ttfb_added, 0.5), "ttfb_added_p99_ms": pct(ttfb_added, 0.99),
    }.items()}


def rss(pid):
    """A process's resident memory now and at its peak, in MB, from /proc."""
    found = {}
    for line in open(f"/proc/{pid}/status"):
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = round(int(value.split()[0]) / 1024, 1)
    return found.get("VmRSS"), found.get("VmHWM")


def stages(log_dir):
    """The p50 of each stage of the pruned requests, from the proxy's debug log, in ms, and how
    many requests went upstream before the engine answered (kept, aborted)."""
    found = {"parse": [], "matched": [], "map": [], "engine": [], "write": [], "spliced": [],
             "joined": [], "pruned": [], "compared": [], "answered": [], "received": [], "advancing": [], "frames": []}
    bets = {"kept": 0, "aborted": 0}
    for name in os.listdir(log_dir):
        for line in open(os.path.join(log_dir, name)):
            for bet in bets:
                bets[bet] += f"speculation {bet}" in line
            if "pruned" not in line and "speculation kept" not in line:
                continue
            for key in found:
                m = re.search(rf"\b{key}=([0-9.]+)(ms|µs|ns|s|)\b", line)
                if m:
                    scale = {"ms": 1e-3, "µs": 1e-6, "ns": 1e-9, "s": 1, "": 1e-3}[m.group(2)]
                    found[key].append(float(m.group(1)) * scale)
    out = {f"stage_{k}_p50_ms": pct(v, 0.5) for k, v in found.items() if v}
    return dict(out, **{f"speculation_{k}": v for k, v in bets.items()})


if __name__ == "__main__":
    main()
