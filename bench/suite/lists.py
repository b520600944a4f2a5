#!/usr/bin/env python3
"""What the <prunable-tools> lists cost as sent (appended after the history, gone from the
next request) against kept where they were sent (each list naming only the lines no earlier
list named, and read from the cache on every later request), by the cost model of
`dcp replay` and the lab (written at 1.25, read at 0.1; characters / 4 for tokens).

usage: lists.py DIR | REQUESTS.jsonl ...
DIR: a `dcp replay --requests DIR` dump (one <session>.jsonl per session); REQUESTS.jsonl: a
lab run's `$LAB/out/plugin/requests.jsonl`. Prints per session (with a list) the requests,
the lists, and the two costs in ~tokens, then the totals. A cache that expires between
requests is not modelled: it would only make keeping dearer (a kept list is written again).
"""
import json
import os
import re
import sys

LINE = re.compile(r"^\d+: ")


def text_of(message):
    """The text of a request's message, in either format, and whether it is a list."""
    if "parts" in message:
        ident = message.get("info", {}).get("id", "")
        return "".join(p.get("text", "") for p in message["parts"]), ident.startswith("msg_dcp_prunable")
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    content = content if isinstance(content, str) else ""
    return content, message.get("role") == "user" and content.startswith("<prunable-tools>")


def requests_of(path):
    """Per session: the messages of each request, in order."""
    if os.path.isdir(path):
        for name in sorted(os.listdir(path)):
            with open(os.path.join(path, name)) as f:
                yield name, [json.loads(line)["messages"] for line in f if line.strip()]
        return
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    yield path, [r["body"]["messages"] for r in rows if r.get("kind") == "main"]


def costs(requests):
    """(lists, cost as sent, cost kept) of one session's requests."""
    seen, lists, sent, kept = set(), 0, 0.0, 0.0
    for i, messages in enumerate(requests):
        text, is_list = text_of(messages[-1]) if messages else ("", False)
        if not is_list:
            continue
        lists += 1
        lines = [line for line in text.split("\n") if LINE.match(line)]
        other = len(text) - sum(len(line) + 1 for line in lines)
        new = other + sum(len(line) + 1 for line in lines if line not in seen)
        seen.update(lines)
        sent += 1.25 * len(text) / 4
        kept += (1.25 + 0.1 * (len(requests) - 1 - i)) * new / 4
    return lists, sent, kept


def main():
    totals = [0.0, 0.0]
    for path in sys.argv[1:]:
        for name, requests in requests_of(path):
            lists, sent, kept = costs(requests)
            if lists:
                print("%-40s %4d requests %2d lists  sent %7.0f  kept %7.0f" % (name[:40], len(requests), lists, sent, kept))
            totals = [totals[0] + sent, totals[1] + kept]
    print("total: sent %.0f, kept %.0f ~tokens" % tuple(totals))


if __name__ == "__main__":
    main()
