#!/usr/bin/env python3
"""Where a lab run's cost goes, by summarize.py's model (0.1 x the prefix shared with the
previous request + 1.25 x the rest, characters / 4), split by what was billed.

usage: account.py [--first N] [--per-request] RUN/requests.jsonl ...

For each run, in ~tokens of cost:
  fixed     OpenCode's system prompt and its own tools, written once then read;
  head      dcp's tool definitions (discard, extract, compress), written once then read;
  written   messages billed at 1.25 because they are new (the newest output, a prompt);
  rebilled  messages billed at 1.25 again because a rewrite changed the prompt before them;
  lists     the appended <prunable-tools> lists (never cached);
  outputs   cached reads of tool outputs kept whole (what masking could still take);
  frames    cached reads of the rest of the history: prompts, answers, the calls
            themselves, placeholders;
each also for the first N requests (--first, default 5: the first prompt of the shared
scenario) and the rest. With --per-request, one row per request as well: its size, the part
the previous request cached, its cost and that cost by kind, and the outputs it sent whole.
"""
import json
import sys

sys.path.insert(0, "/work/shared/opencode-lab")
from summarize import common_prefix_chars, pieces  # noqa: E402

DCP_TOOLS = {"discard", "extract", "compress"}
KINDS = ["fixed", "head", "written", "rebilled", "lists", "outputs", "frames"]


def load(path):
    rows = (json.loads(line) for line in open(path) if line.strip())
    return [r["body"] for r in rows if r["kind"] == "main"]


def whole_output(message):
    """Whether a history message is a tool output still sent whole."""
    content = str(message.get("content", ""))
    return message["role"] == "tool" and not content.startswith("[Output masked") and len(content) > 60


def split(body):
    """The request's pieces (tools first, then the messages) with the kind of each, the tools
    split into OpenCode's and dcp's."""
    tools = body.get("tools") or []
    dcp = [t for t in tools if t["function"]["name"] in DCP_TOOLS]
    head = sum(len(json.dumps(t, ensure_ascii=False, sort_keys=True)) + 2 for t in dcp)
    p = pieces(body)
    kinds = ["tools"]
    for m in body["messages"]:
        if m["role"] == "system":
            kinds.append("fixed")
        elif m["role"] == "user" and "<prunable-tools>" in str(m.get("content")):
            kinds.append("lists")
        else:
            kinds.append("outputs" if whole_output(m) else "frames")
    return p, kinds, head


def bill_request(prev, body, prev_last):
    """This request's cost by kind, given the previous request's pieces and the index of
    the previous request's last message."""
    p, kinds, head = split(body)
    shared = common_prefix_chars(prev, p) if prev else 0
    out = dict.fromkeys(KINDS, 0.0)
    pos = 0
    for i, (piece, kind) in enumerate(zip(p, kinds)):
        cached = max(0, min(len(piece), shared - pos))
        fresh = len(piece) - cached
        pos += len(piece)
        if kind == "tools":
            ratio = head / len(piece) if piece else 0
            out["head"] += (0.1 * cached + 1.25 * fresh) * ratio / 4
            out["fixed"] += (0.1 * cached + 1.25 * fresh) * (1 - ratio) / 4
            continue
        if kind in ("fixed", "lists"):
            out[kind] += (0.1 * cached + 1.25 * fresh) / 4
            continue
        out[kind] += 0.1 * cached / 4
        out["rebilled" if prev and i <= prev_last else "written"] += 1.25 * fresh / 4
    return p, out


def row(n, body, prev, p, out):
    """One request's row: size, cached, cost, the kinds, and the outputs it sent whole."""
    size = sum(map(len, p))
    shared = common_prefix_chars(prev, p) if prev else 0
    names = {c["id"]: c["function"]["name"] for m in body["messages"] for c in m.get("tool_calls") or []}
    whole = [f"{names.get(m['tool_call_id'], '?')} {len(str(m['content'])) // 4}" for m in body["messages"] if whole_output(m)]
    cells = " | ".join(f"{out[k]:,.0f}" for k in KINDS)
    return f"| {n + 1} | {size / 4:,.0f} | {shared / 4:,.0f} | {sum(out.values()):,.0f} | {cells} | {', '.join(whole)} |"


def account(bodies, first, rows=None):
    parts = {"first": dict.fromkeys(KINDS, 0.0), "rest": dict.fromkeys(KINDS, 0.0)}
    prev, prev_last = None, 0
    for n, body in enumerate(bodies):
        before = prev
        prev, out = bill_request(prev, body, prev_last)
        if rows is not None:
            rows.append(row(n, body, before, prev, out))
        lists = sum(1 for m in body["messages"] if "<prunable-tools>" in str(m.get("content")))
        prev_last = len(prev) - 1 - lists
        for k, v in out.items():
            parts["first" if n < first else "rest"][k] += v
    return parts


def main():
    args = sys.argv[1:]
    first, per_request = 5, "--per-request" in args
    args = [a for a in args if a != "--per-request"]
    if args[:1] == ["--first"]:
        first, args = int(args[1]), args[2:]
    print("| run | part | " + " | ".join(KINDS) + " | total |")
    print("|---|---|" + "---|" * (len(KINDS) + 1))
    rows = []
    for path in args:
        parts = account(load(path), first, rows if per_request else None)
        for name, part in [("first", parts["first"]), ("rest", parts["rest"])]:
            cells = " | ".join(f"{part[k]:,.0f}" for k in KINDS)
            print(f"| {path} | {name} {first if name == 'first' else ''} | {cells} | {sum(part.values()):,.0f} |")
    if rows:
        print("\n| request | size | cached | cost | " + " | ".join(KINDS) + " | outputs sent whole |")
        print("|---|---|---|---|" + "---|" * (len(KINDS) + 1))
        print("\n".join(rows))


if __name__ == "__main__":
    main()
