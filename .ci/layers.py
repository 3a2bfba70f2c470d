#!/usr/bin/env python3
"""Checks the layering of core/src: the modules' import graph (one node per top-level module;
engine/ and processor/ count as one each) has no cycle, and nothing under engine/ imports a
public API module. Reads `crate::NAME` paths in the sources; prints the order it found."""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "core" / "src"
API = {"queue", "store", "tx", "received", "processor", "typed", "binding", "topic", "collator", "session", "job", "app_table", "traffic", "stream"}


def module_of(path: Path) -> str:
    rel = path.relative_to(ROOT)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def main() -> int:
    edges: dict[str, set[str]] = {}
    failures = []
    for f in sorted(ROOT.rglob("*.rs")):
        m = module_of(f)
        if m == "lib":
            continue
        text = f.read_text()
        used = set(re.findall(r"\bcrate::([a-z_]+)", text))
        edges.setdefault(m, set()).update(u for u in used if u != m)
        if m == "engine":
            for bad in sorted(used & API):
                failures.append(f"{f.relative_to(ROOT.parent.parent)} imports crate::{bad}")
    # Topological order (Kahn); whatever is left sits on a cycle.
    nodes = set(edges) | {d for ds in edges.values() for d in ds if (ROOT / f"{d}.rs").exists() or (ROOT / d).is_dir()}
    deps = {n: {d for d in edges.get(n, set()) if d in nodes} for n in nodes}
    order = []
    ready = sorted(n for n in nodes if not deps[n])
    while ready:
        n = ready.pop(0)
        order.append(n)
        for m in sorted(nodes):
            if n in deps[m]:
                deps[m].discard(n)
                if not deps[m] and m not in order and m not in ready:
                    ready.append(m)
    cyclic = sorted(n for n in nodes if n not in order)
    if cyclic:
        failures.append("import cycle among: " + ", ".join(cyclic))
    for f in failures:
        print(f"layers: {f}", file=sys.stderr)
    if failures:
        return 1
    print("layers: no cycles; bottom up: " + " < ".join(order))
    return 0


if __name__ == "__main__":
    sys.exit(main())
