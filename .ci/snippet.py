#!/usr/bin/env python3
"""Writes README.md's code block after `<!-- snippet: LANG -->` to OUT; fails if the marker or
its block is missing. Used by .ci/snippets.sh and .ci/windows.sh."""

import re
import sys

lang, out = sys.argv[1], sys.argv[2]
text = open("README.md", encoding="utf-8").read()
m = re.search(r"<!-- snippet: " + re.escape(lang) + r" -->\n```[a-z+]*\n(.*?)\n```", text, re.S)
if not m:
    sys.exit(f"README.md has no block after <!-- snippet: {lang} -->")
open(out, "w", encoding="utf-8").write(m.group(1) + "\n")
