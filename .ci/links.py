#!/usr/bin/env python3
"""Checks that every relative link and #anchor in the docs resolves: README.md,
CONTRIBUTING.md, BENCHMARKS.md, .ci/README.md, python/README.md and docs/*.md. A link names
an existing file (or directory); an anchor names a heading of the Markdown file it points to,
slugged as GitHub does. Links inside code are not links. Run from .ci/snippets.sh;
`python3 .ci/links.py --self-test` shows it fails on a planted broken link."""

import glob
import os
import re
import sys
import tempfile

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
FILES = ["README.md", "CONTRIBUTING.md", "BENCHMARKS.md", ".ci/README.md", "python/README.md"]


def prose(text):
    """The text with fenced code blanked line by line and inline code blanked out, so that
    line numbers stay and a link whose text wraps onto the next line is still one match."""
    fence, out = None, []
    for line in text.split("\n"):
        m = re.match(r"\s*(```+|~~~+)", line)
        if m:
            if fence is None:
                fence = m.group(1)
            elif m.group(1).startswith(fence):
                fence = None
            out.append("")
        elif fence is None:
            out.append(re.sub(r"`+[^`]*`+", "``", line))
        else:
            out.append("")
    return "\n".join(out)


def slug(heading):
    """GitHub's anchor for a heading: its text without Markdown, lowercase, punctuation
    dropped, spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"(^|\s)_+|_+(\s|$)", r"\1\2", text)
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen, found = {}, set()
        fence = None
        for line in open(path, encoding="utf-8").read().split("\n"):
            m = re.match(r"\s*(```+|~~~+)", line)
            if m:
                fence = m.group(1) if fence is None else (None if m.group(1).startswith(fence) else fence)
                continue
            h = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line) if fence is None else None
            if h:
                s = slug(h.group(1))
                n = seen.get(s, 0)
                seen[s] = n + 1
                found.add(s if n == 0 else f"{s}-{n}")
        cache[path] = found
    return cache[path]


def check(files):
    """Returns one line per broken link."""
    broken = []
    for f in files:
        text = prose(open(f, encoding="utf-8").read())
        for m in LINK.finditer(text):
            target = m.group(1)
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            at = f"{f}:{text.count(chr(10), 0, m.start()) + 1}: {target}"
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
            if not os.path.exists(dest):
                broken.append(f"{at}: no file {dest}")
            elif anchor:
                if not dest.endswith(".md") or os.path.isdir(dest):
                    broken.append(f"{at}: an anchor into a file that is not Markdown")
                elif anchor not in anchors(dest):
                    broken.append(f"{at}: {dest} has no heading #{anchor}")
    return broken


def self_test():
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "docs"))
        good = os.path.join(d, "README.md")
        with open(good, "w", encoding="utf-8") as w:
            w.write("# Top\n\n## The store's files, the `-log` and backups\n\n## A\n\n## A\n\n"
                    "[x](docs/p.md#the-sub) [y](#the-stores-files-the--log-and-backups) [z](#a-1)\n"
                    "`[not a link](nowhere.md)`\n```\n[nor this](nowhere.md)\n```\n"
                    "[web](https://example.com/#x)\n")
        page = os.path.join(d, "docs", "p.md")
        with open(page, "w", encoding="utf-8") as w:
            w.write("# P\n\n## The sub\n\n[back](../README.md#top)\n")
        bad = check([good, page])
        if bad:
            sys.exit(f"links: self-test failed, good links reported broken: {bad}")
        with open(page, "a", encoding="utf-8") as w:
            w.write("[gone](../README.md#no-such-heading) [lost, its text\nwrapped](missing.md)\n")
        bad = check([good, page])
        caught = len(bad) == 2 and "no heading #no-such-heading" in bad[0] and "missing.md" in bad[1]
        if not caught:
            sys.exit(f"links: self-test failed, the planted broken link and anchor gave: {bad}")
    print("links: self-test passed (a planted broken link and anchor are caught)")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    files = [f for f in FILES if os.path.exists(f)] + sorted(glob.glob("docs/*.md"))
    broken = check(files)
    for b in broken:
        print(b)
    if broken:
        sys.exit(f"links: {len(broken)} broken link(s)")
    print(f"links: every relative link and anchor in {len(files)} files resolves")


if __name__ == "__main__":
    main()
