#!/usr/bin/env python3
"""What the plugin run of a lab scenario would cost if its requests were cut further: each
lever rewrites every recorded request body the same way, and the run is billed again with
summarize.py's model (0.1 x the prefix shared with the previous request + 1.25 x the rest,
characters / 4), against the no-plugin run of the same lab.

usage: levers.py BASE/requests.jsonl PLUGIN/requests.jsonl

A lever is an upper bound on what a rule could reach, not a rule: it is applied to every
request with hindsight (what it removes it removes at once), and its re-bills are what the
prefix comparison finds. Columns: tokens, last context and cost, each also as a share of the
no-plugin run.
"""
import copy
import json
import sys

sys.path.insert(0, "/work/shared/opencode-lab")
from summarize import common_prefix_chars, pieces  # noqa: E402

DCP_TOOLS = {"discard", "extract", "compress"}
MASKED = "[Output masked"


def load(path):
    rows = (json.loads(line) for line in open(path) if line.strip())
    return [r["body"] for r in rows if r["kind"] == "main"]


def bill(bodies, lever):
    """Tokens sent, last context and cost of the run with `lever` applied to every body."""
    prev, tokens, cost, last = None, 0.0, 0.0, 0
    for body in bodies:
        p = pieces(lever(copy.deepcopy(body)))
        size = sum(map(len, p))
        pre = common_prefix_chars(prev, p) if prev else 0
        tokens += size
        cost += 0.1 * pre + 1.25 * (size - pre)
        prev, last = p, size
    return tokens / 4, last / 4, cost / 4


def is_list(m):
    return m["role"] == "user" and "<prunable-tools>" in str(m.get("content"))


def is_masked(m):
    return m["role"] == "tool" and str(m.get("content", "")).startswith(MASKED)


def without_head(body):
    body["tools"] = [t for t in body.get("tools") or [] if t["function"]["name"] not in DCP_TOOLS]
    return body


def without_lists(body):
    body["messages"] = [m for m in body["messages"] if not is_list(m)]
    return body


def short_placeholders(body):
    for m in body["messages"]:
        if is_masked(m):
            m["content"] = "[Output masked]"
    return body


def drop_calls(messages, gone):
    """`messages` without the tool results whose call id is in `gone`, and without the
    assistant messages that held only such calls."""
    out = []
    for m in messages:
        if m["role"] == "tool" and m["tool_call_id"] in gone:
            continue
        calls = m.get("tool_calls") or []
        if calls and not m.get("content") and all(c["id"] in gone for c in calls):
            continue
        out.append(m)
    return out


def masked_calls_vanish(body):
    gone = {m["tool_call_id"] for m in body["messages"] if is_masked(m)}
    body["messages"] = drop_calls(body["messages"], gone)
    return body


def prompts(messages):
    return [i for i, m in enumerate(messages) if m["role"] == "user" and not is_list(m)]


def finished_turns_collapse(body):
    """Every tool call made before the latest prompt goes: earlier turns keep their prompt
    and their answer."""
    msgs = body["messages"]
    latest = (prompts(msgs) or [0])[-1]
    gone = {m["tool_call_id"] for m in msgs[:latest] if m["role"] == "tool"}
    body["messages"] = drop_calls(msgs, gone)
    return body


def finished_masked_calls_vanish(body):
    """The masked calls made before the latest prompt go, call and output."""
    msgs = body["messages"]
    latest = (prompts(msgs) or [0])[-1]
    gone = {m["tool_call_id"] for m in msgs[:latest] if is_masked(m)}
    body["messages"] = drop_calls(msgs, gone)
    return body


def finished_turns_masked(body):
    """Every output made before the latest prompt is masked (placeholders stay)."""
    msgs = body["messages"]
    latest = (prompts(msgs) or [0])[-1]
    for m in msgs[:latest]:
        if m["role"] == "tool" and not is_masked(m) and len(str(m.get("content"))) > 60:
            m["content"] = MASKED + "; run it again if needed]"
    return body


def call_note(call):
    """A call named by its tool and key argument, as masking's placeholder names it."""
    args = json.loads(call["function"]["arguments"] or "{}")
    key = next((str(args[k]) for k in ("filePath", "command", "pattern", "url") if k in args), "")
    key = key.rstrip("/").rsplit("/", 1)[-1] if "filePath" in args else " ".join(key.split())[:60]
    return f"{call['function']['name']} `{key}`"


def finished_turns_noted(body):
    """Like finished_turns_collapse, but each earlier turn's calls leave one user message
    that names them (what an automatic compressed range would say)."""
    msgs = body["messages"]
    starts = prompts(msgs)
    latest = (starts or [0])[-1]
    out = []
    for i, m in enumerate(msgs):
        if i >= latest or not (m["role"] == "tool" or m.get("tool_calls")):
            out.append(m)
            continue
        if m["role"] == "tool":
            continue
        names = "; ".join(call_note(c) for c in m["tool_calls"])
        if out and out[-1].get("dcp_note"):
            out[-1]["content"] = out[-1]["content"][:-1] + "; " + names + "]"
        else:
            out.append({"role": "user", "dcp_note": True, "content": f"[Earlier tool calls, outputs not shown: {names}]"})
    for m in out:
        m.pop("dcp_note", None)
    body["messages"] = out
    return body


def all_but_newest_masked(body):
    """Masking's floor: every output but the newest is masked, whatever the turn."""
    tools = [m for m in body["messages"] if m["role"] == "tool"]
    for m in tools[:-1]:
        if not is_masked(m) and len(str(m.get("content"))) > 60:
            m["content"] = MASKED + "; run it again if needed]"
    return body


LEVERS = [
    ("as run", lambda b: b),
    ("paths as in the base run", lambda b: json.loads(json.dumps(b).replace("/work/plugin/", "/work/base/"))),
    ("no dcp head (discard, compress)", without_head),
    ("no <prunable-tools> lists", without_lists),
    ("placeholders cut to [Output masked]", short_placeholders),
    ("every output but the newest masked", all_but_newest_masked),
    ("every output of earlier turns masked", finished_turns_masked),
    ("masked calls vanish (call and output)", masked_calls_vanish),
    ("masked calls of earlier turns vanish", finished_masked_calls_vanish),
    ("finished turns keep prompt and answer", finished_turns_collapse),
    ("finished turns: calls become one note", finished_turns_noted),
    ("finished turns collapse, no dcp head", lambda b: finished_turns_collapse(without_head(b))),
]


def main():
    base = bill(load(sys.argv[1]), lambda b: b)
    plugin = load(sys.argv[2])
    print("| lever | tokens | last | cost |")
    print("|---|---|---|---|")
    print(f"| no plugin | {base[0]:,.0f} | {base[1]:,.0f} | {base[2]:,.0f} |")
    for name, lever in LEVERS:
        figs = bill(plugin, lever)
        cells = " | ".join(f"{f:,.0f} ({f / b:.3f})" for f, b in zip(figs, base))
        print(f"| {name} | {cells} |")


if __name__ == "__main__":
    main()
