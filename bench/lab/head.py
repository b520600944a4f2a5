#!/usr/bin/env python3
"""What dcp adds in front of a lab run's requests: its tool definitions (discard, extract,
compress, as OpenCode sends them) and its system-prompt paragraph, from the first main request
that carries them; sizes in characters and characters / 4. Also counts the message id tags
(<m12>) and the requests carrying a <prunable-tools> list.

usage: head.py OUT/plugin/requests.jsonl
"""
import json
import re
import sys

DCP_TOOLS = ("discard", "extract", "compress")
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
main = [r for r in rows if r["kind"] == "main"]


def text(c):
    if isinstance(c, list):
        return "".join(p.get("text", "") for p in c if isinstance(p, dict))
    return c or ""


offered = [r for r in main if any(t["function"]["name"] in DCP_TOOLS for t in r["body"].get("tools") or [])]
print(f"{len(main)} main requests, {len(offered)} carry dcp's tools")
if offered:
    body = offered[0]["body"]
    tools = [t for t in body["tools"] if t["function"]["name"] in DCP_TOOLS]
    tool_chars = sum(len(json.dumps(t, separators=(",", ":"))) for t in tools)
    systems = [text(m["content"]) for m in body["messages"] if m["role"] == "system"]
    # dcp's paragraph is the system message OpenCode adds after its own (the plugin's push).
    dcp_system = sum(len(s) for s in systems[1:])
    for t in tools:
        print(f"  {t['function']['name']:9} {len(json.dumps(t, separators=(',', ':'))):5} chars")
    print(f"  tools {tool_chars} chars, system paragraph {dcp_system} chars, head {tool_chars + dcp_system} chars"
          f" = {(tool_chars + dcp_system) / 4:.0f} ~tokens")
last = main[-1]["body"]["messages"] if main else []
tags = sum(len(re.findall(r"\n<m\d+>", text(m.get("content")))) for m in last)
listed = sum(1 for r in main if "<prunable-tools>" in text(r["body"]["messages"][-1].get("content")))
print(f"last request: {tags} message id tags; requests with a <prunable-tools> list: {listed}")
