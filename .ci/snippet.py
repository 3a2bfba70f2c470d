#!/usr/bin/env python3
"""Writes the code block after `<!-- snippet: LANG -->` to OUT, looking in README.md and
docs/*.md; fails if the marker or its block is missing, or if two files have it.
`snippet.py --list` prints every marker as `LANG FILE`, one a line, so that .ci/snippets.sh
can check that each one is run. Used by .ci/snippets.sh and .ci/windows.sh."""

import glob
import os
import re
import sys

OUT = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else None
os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
FILES = ["README.md"] + sorted(glob.glob("docs/*.md"))
MARKER = r"<!-- snippet: ([A-Za-z0-9_+-]+) -->"


def texts():
    for f in FILES:
        yield f, open(f, encoding="utf-8").read()


if sys.argv[1:] == ["--list"]:
    for f, text in texts():
        for m in re.finditer(MARKER, text):
            print(m.group(1), f)
    sys.exit(0)

lang = sys.argv[1]
found = []
for f, text in texts():
    if f"<!-- snippet: {lang} -->" not in text:
        continue
    m = re.search(r"<!-- snippet: " + re.escape(lang) + r" -->\n```[a-z+]*\n(.*?)\n```", text, re.S)
    if not m:
        sys.exit(f"{f} has <!-- snippet: {lang} --> but no code block right after it")
    found.append((f, m.group(1)))
if not found:
    sys.exit(f"no file of {' '.join(FILES)} has a block after <!-- snippet: {lang} -->")
if len(found) > 1:
    sys.exit(f"<!-- snippet: {lang} --> is in more than one file: {' '.join(f for f, _ in found)}")
open(OUT, "w", encoding="utf-8").write(found[0][1] + "\n")
