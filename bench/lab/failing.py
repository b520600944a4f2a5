#!/usr/bin/env python3
"""Derives failing-scenario.json from long-scenario.json: its first 12 prompts, with agent calls
that fail and a compress that makes its range bigger, for the live meter against replay
(issue 37, part 5).

In mode plugin, besides the long scenario's discards (which ride along with real work):
  p2  a discard of its own naming only ids that do not exist;
  p3  a compress of its own of the first prompt alone (m1..m1) with a summary longer than the
      prompt: the range grows (or, where dcp refuses such a summary, a failing call);
  p4  a compress of its own with a range past the newest message, and one that names no ids;
  p6  a compress of its own of the first two prompts (m2..m14, which grows to take dcp's own
      ranges of finished turns);
  p7  a compress of its own with an empty summary;
  p9  a discard naming the records read again (already pruned) beside a wrong id;
and, in every mode, errored tools: a read of a missing file (p4, p6), an edit whose oldString
is not in the file (p8), a read of a directory (p10).

usage: failing.py long-scenario.json > failing-scenario.json
"""
import json
import sys

GROWN_SUMMARY = (
    "The user asked for an overview of the demo project: the files it holds, and what "
    "src/parser.py (eighteen section parsers of key = value lines) and src/storage.py (a "
    "Journal class with fourteen operations appending JSON lines, and load()) do, in detail."
)
PREFIX_SUMMARY = (
    "Overview: src/ holds calc.py, cli.py, parser.py (parse_section_1..18 of key = value lines, "
    "values repeated i % 3 + 1 times) and storage.py (Journal, op_1..op_14, load()). "
    "data/records.csv has 120 rows; the total qty * price is 35312.40."
)


def own(label, calls):
    """A model step of its own, in mode plugin only."""
    return {"label": label, "only": "plugin", "tool_calls": calls}


def compress(rng, summary, topic="Earlier work"):
    return {"name": "compress", "arguments": {"topic": topic, "range": rng, "summary": summary}}


def discard(ids, **more):
    return {"name": "discard", "arguments": {"ids": ids, **more}}


def tool(name, **args):
    return {"name": name, "arguments": args}


EXTRA = {
    # Inserted before the first turn of the prompt whose label prefix is the key.
    "p2": [own("p2.discard_wrong", [discard(["999", "call_nowhere_0"], reason="noise")])],
    "p3": [own("p3.compress_grows", [compress("m1..m1", GROWN_SUMMARY, "The first prompt")])],
    "p4": [
        own("p4.compress_past", [compress("m9000..m9999", "Nothing that exists.")]),
        own("p4.compress_no_ids", [compress("start..end", "Not message ids.")]),
    ],
    "p6": [
        own("p6.compress_prefix", [compress("m2..m14", PREFIX_SUMMARY, "Overview and inventory")]),
        {"label": "p6.read_missing", "tool_calls": [tool("read", filePath="{{cwd}}/data/none.csv")]},
    ],
    "p7": [own("p7.compress_empty", [compress("m20..m24", "   ")])],
    "p9": [
        own(
            "p9.discard_again",
            [discard(["{{match:0:(\\d+): read, [^\\n]*records\\.csv}}", "4242"], reason="completion")],
        )
    ],
    "p10": [{"label": "p10.read_dir", "tool_calls": [tool("read", filePath="{{cwd}}/src")]}],
}


def main():
    src = json.load(open(sys.argv[1]))
    prompts = src["prompts"][:12]
    turns, seen = [], set()
    for t in src["turns"]:
        prompt = t["label"].split(".")[0]
        if int(prompt[1:]) > len(prompts):
            break
        if prompt not in seen:
            seen.add(prompt)
            turns.extend(EXTRA.get(prompt, []))
        turns.append(t)
    out = {
        "comment": (
            "Derived from long-scenario.json by failing.py (its header says what is added): the "
            "first 12 prompts, with failing agent calls, a compress that grows its range and errored "
            "tools. Run: SCENARIO=bench/lab/failing-scenario.json MODES=plugin bash bench/lab/run.sh, "
            "then python3 bench/lab/meter.py $LAB."
        ),
        "prompts": prompts,
        "turns": turns,
    }
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
