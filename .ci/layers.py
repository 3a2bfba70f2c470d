#!/usr/bin/env python3
"""Checks the layering of a crate's sources, one node per FILE.

The import graph has an edge from a file to every file it names an item of: `use` trees
(`crate::`, `super::`, `self::`, paths relative to a module in scope, groups, globs, `as`) and
paths written in code (`crate::a::B`, `super::C`). A name that a module re-exports (`pub use`,
or a private `use` seen from a child module) resolves through to the file that defines it, so
an import of a re-exported name points at that file, not at the mod.rs. A mod.rs or lib.rs
composes the files under it: declaring, re-exporting or calling into them is no import of them
(they may import what it defines).
`use a::b;` of a module b is no import by itself; the paths `b::C` through it are. Comments,
strings and `#[cfg(test)] mod` blocks are ignored.

Fails (exit 1) on any import cycle, printing the files on it, on a cycle among the top-level
modules (a directory as one node, which the file graph can hide), and on a file under engine/
that imports a public API module; on success prints the top-level modules bottom up. Usage: layers.py [--bindings] [SRC_DIR ...] (default
core/src); with no SRC_DIR it also checks ffi/src for cycles; --bindings also reports the cycles of python/src, without failing.
"""

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The public API modules of core/src: nothing under engine/ may import them.
API = {"queue", "store", "tx", "received", "processor", "typed", "binding", "topic", "collator", "session", "job", "app_table", "traffic", "stream"}
ENGINE = "engine"

TOKEN = re.compile(
    r"""
    (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<rawstr>\bb?r(?P<hashes>\#*)".*?"(?P=hashes))
  | (?P<str>b?"(?:\\.|[^"\\])*")
  | (?P<char>b?'(?:\\[^']{1,10}|[^\\'\n])')
  | (?P<mod>(?P<modtest>\#\[cfg\((?:all\()?test\b[^\]]*\]\s*)?(?:pub(?:\([^)]*\))?\s+)?mod\s+(?P<modname>\w+)\s*\{)
  | (?P<use>(?P<usepub>pub(?:\([^)]*\))?\s+)?use\s+(?P<usetree>[^;]+);)
  | (?P<def>(?<!\*)\b(?:fn|struct|enum|trait|type|const|static|union)\s+(?P<defname>\w+)|macro_rules!\s*(?P<macname>\w+))
  | (?P<path>(?<![\w:.])[a-z_]\w*(?:\s*::\s*\w+)+)
  | (?P<open>\{)
  | (?P<close>\})
    """,
    re.S | re.X,
)


def parse_tree(s: str, prefix: list[str], out: list[tuple[list[str], str]]) -> None:
    """Expands a use tree into (path, binding) pairs; binding "*" is a glob."""
    s = s.strip()
    if not s:
        return
    depth = 0
    i = s.find("{")  # a group: `head::{a, b::{c, d}}`
    if i >= 0:
        head = s[:i].strip().rstrip(":").strip()
        body = s[i + 1 : s.rindex("}")]
        base = prefix + [p for p in (x.strip() for x in head.split("::")) if p]
        parts, cur = [], ""
        for ch in body:
            depth += ch == "{"
            depth -= ch == "}"
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        parts.append(cur)
        for p in parts:
            parse_tree(p, base, out)
        return
    alias = None
    m = re.match(r"(.*?)\s+as\s+(\w+)$", s)
    if m:
        s, alias = m.group(1), m.group(2)
    segs = prefix + [p.strip() for p in s.split("::") if p.strip()]
    if segs and segs[-1] == "*":
        out.append((segs[:-1], "*"))
    elif segs and segs[-1] == "self":
        out.append((segs[:-1], alias or segs[-2]))
    elif segs:
        out.append((segs, alias or segs[-1]))


def children_dir(f: Path):
    """The directory of the modules a parent file declares: a mod.rs or lib.rs composes its own
    directory, and a 2018-style `queue.rs` the directory `queue/` beside it; None otherwise."""
    if f.name in ("mod.rs", "lib.rs", "main.rs"):
        return f.parent
    d = f.with_suffix("")
    return d if d.is_dir() else None


def composes(f: Path, t: Path) -> bool:
    """Whether `f` is the parent file of the module in `t` (then f -> t is composition)."""
    d = children_dir(f)
    return d is not None and t.is_relative_to(d)


class Crate:
    def __init__(self, root: Path):
        self.root = root
        self.modules: dict[tuple, Path] = {}  # module path -> file
        self.bindings: dict[tuple, dict[str, list[str]]] = {}  # module -> name -> path
        self.globs: dict[tuple, list[list[str]]] = {}
        self.defs: dict[tuple, set[str]] = {}
        self.words: dict[Path, set[str]] = {}  # the identifiers each file's code spells
        self.refs: list[tuple[Path, tuple, list[str], str, bool]] = []  # file, module, path, shown, a named use
        for f in sorted(root.rglob("*.rs")):
            rel = f.relative_to(root).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] in ("mod", "lib", "main") and (len(parts) > 1 or parts[-1] != "mod"):
                parts = parts[:-1]
            self.modules[tuple(parts)] = f
        for mod, f in list(self.modules.items()):
            self.scan(f, mod)

    def scan(self, f: Path, mod: tuple) -> None:
        text = f.read_text()
        code = TOKEN.sub(lambda m: " " if m.group("comment") or m.group("str") or m.group("rawstr") or m.group("char") else m.group(0), text)
        self.words[f] = set(re.findall(r"\b[A-Za-z_]\w*", code))
        is_parent = children_dir(f) is not None
        stack: list[tuple[tuple, int, bool]] = [(mod, 0, False)]
        depth = 0
        for m in TOKEN.finditer(text):
            cur, _, in_test = stack[-1]
            if m.group("open"):
                depth += 1
            elif m.group("close"):
                depth -= 1
                if len(stack) > 1 and depth == stack[-1][1]:
                    stack.pop()
            elif m.group("mod"):
                depth += 1
                inner = cur + (m.group("modname"),)
                self.modules.setdefault(inner, f)
                stack.append((inner, depth - 1, in_test or bool(m.group("modtest"))))
            elif in_test:
                continue
            elif m.group("use"):
                tree = re.sub(r"\s+", " ", m.group("usetree")).strip()
                out: list[tuple[list[str], str]] = []
                parse_tree(tree, [], out)
                reexport = bool(m.group("usepub")) and is_parent
                for segs, name in out:
                    if name == "*":
                        self.globs.setdefault(cur, []).append(segs)
                    else:
                        self.bindings.setdefault(cur, {})[name] = segs
                    if not reexport:
                        self.refs.append((f, cur, segs, "use " + "::".join(segs + (["*"] if name == "*" else [])), name != "*"))
            elif m.group("def"):
                # `const _` names nothing: a glob of its module brings no `_` to import.
                if (m.group("defname") or m.group("macname")) != "_":
                    self.defs.setdefault(cur, set()).add(m.group("defname") or m.group("macname"))
            elif m.group("path"):
                segs = [p.strip() for p in m.group("path").split("::")]
                self.refs.append((f, cur, segs, "::".join(segs), False))

    def lookup(self, mod: tuple, name: str, seen: set) -> tuple[str, object] | None:
        """What `name` means inside module `mod`: ("mod", path) or ("file", Path)."""
        key = (mod, name)
        if key in seen:
            return None
        seen = seen | {key}
        if mod + (name,) in self.modules:
            return ("mod", mod + (name,))
        if name in self.defs.get(mod, ()):
            return ("file", self.modules[mod])
        segs = self.bindings.get(mod, {}).get(name)
        if segs is not None:
            return self.resolve(mod, segs, seen)
        for g in self.globs.get(mod, []):
            r = self.resolve(mod, g, seen)
            if r and r[0] == "mod":
                inner = r[1]
                if name in self.defs.get(inner, ()) or name in self.bindings.get(inner, {}) or self.globs.get(inner):
                    found = self.lookup(inner, name, seen)
                    if found:
                        return found
        return None

    def resolve(self, mod: tuple, segs: list[str], seen: set = frozenset()) -> tuple[str, object] | None:
        """Resolves a path written in module `mod`; None for an outside crate."""
        if not segs:
            return ("mod", mod)
        cur = mod
        first = segs[0]
        rest = segs
        if first == "crate":
            cur, rest = (), segs[1:]
        elif first in ("super", "self"):
            while rest and rest[0] in ("super", "self"):
                if rest[0] == "super":
                    cur = cur[:-1]
                rest = rest[1:]
        else:
            # A relative path: it must start at a name in scope in `mod`, else it is outside.
            if (
                mod + (first,) not in self.modules
                and first not in self.bindings.get(mod, {})
                and first not in self.defs.get(mod, ())
            ):
                return None
        for i, seg in enumerate(rest):
            r = self.lookup(cur, seg, seen)
            if r is None:
                # Unknown here (a method, a variant, a generated item): the module's own file.
                return ("file", self.modules[cur])
            if r[0] == "mod":
                cur = r[1]
                continue
            return r
        return ("mod", cur)

    def file_of(self, r: tuple[str, object]) -> Path:
        return self.modules[r[1]] if r[0] == "mod" else r[1]

    def graph(self) -> dict[Path, dict[Path, str]]:
        edges: dict[Path, dict[Path, str]] = {f: {} for f in set(self.modules.values())}
        for f, mod, segs, shown, named in self.refs:
            r = self.resolve(mod, segs)
            if r is None:
                continue
            if r[0] == "mod" and shown.endswith("::*"):
                # A glob imports what the file then spells: each such name, where it is defined.
                g = r[1]
                names = set(self.defs.get(g, ())) | set(self.bindings.get(g, {})) | {m[-1] for m in self.modules if m[:-1] == g}
                for n in sorted(names & self.words[f]):
                    found = self.lookup(g, n, frozenset())
                    t = self.file_of(found) if found and found[0] == "file" else None
                    if t is not None and t != f and not composes(f, t):
                        edges[f].setdefault(t, shown + f" ({n})")
                continue
            if r[0] == "mod" and named:
                # `use a::b;` of a module only names it: the paths through it are the imports.
                continue
            t = self.file_of(r)
            if composes(f, t):
                # A directory's mod.rs composes its children: they may use what it defines.
                continue
            if t != f:
                edges[f].setdefault(t, shown)
        return edges


def cycles(edges: dict) -> list[list]:
    """The strongly connected components of more than one file (Tarjan, iterative)."""
    index: dict[Path, int] = {}
    low: dict[Path, int] = {}
    on: set[Path] = set()
    stack: list[Path] = []
    out = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, {})))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def one_cycle(edges: dict[Path, dict[Path, str]], comp: list[Path]) -> list[Path]:
    """A shortest circle through the component's first file, to print as an example."""
    inside = set(comp)
    start = comp[0]
    prev = {start: None}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(edges[v]):
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return list(reversed(path))
            if w in inside and w not in prev:
                prev[w] = v
                queue.append(w)
    return comp


def check(src: Path, api: bool) -> list[str]:
    crate = Crate(src)
    edges = crate.graph()
    name = lambda p: str(p.relative_to(src))  # noqa: E731
    failures = []
    if api and (src / ENGINE).is_dir():
        for f in sorted(edges):
            rel = f.relative_to(src).parts
            if rel[0] != ENGINE:
                continue
            for t, shown in sorted(edges[f].items()):
                top = t.relative_to(src).parts[0].removesuffix(".rs")
                if top in API:
                    failures.append(f"{name(f)} imports the public API module {top} ({shown})")
    if api:
        # The top-level modules stay layered too (a directory counts as one node).
        for comp in module_order(src)[1]:
            failures.append("import cycle among top-level modules: " + ", ".join(comp))
    for comp in cycles(edges):
        circle = one_cycle(edges, comp)
        where = src.relative_to(REPO) if src.is_relative_to(REPO) else src
        lines = [f"import cycle among {len(comp)} files of {where}: " + ", ".join(name(p) for p in comp)]
        lines.append("  for example:")
        for a, b in zip(circle, circle[1:] + circle[:1]):
            lines.append(f"    {name(a)} -> {name(b)}  ({edges[a][b]})")
        failures.append("\n".join(lines))
    return failures


def module_order(src: Path) -> tuple[list[str], list[list[str]]]:
    """The top-level modules bottom up (each after everything it imports), and the cycles among
    them (a directory counting as one node)."""
    edges = Crate(src).graph()
    top = lambda p: p.relative_to(src).parts[0].removesuffix(".rs")  # noqa: E731
    deps: dict[str, dict[str, str]] = {}
    for a, targets in edges.items():
        if top(a) != "lib":
            deps.setdefault(top(a), {}).update({top(b): "" for b in targets if top(b) not in (top(a), "lib")})
    for d in list(deps.values()):
        for m in d:
            deps.setdefault(m, {})
    order: list[str] = []
    while True:
        ready = sorted(m for m in deps if m not in order and set(deps[m]) <= set(order))
        if not ready:
            return order, cycles(deps)
        order.append(ready[0])


def main(argv: list[str]) -> int:
    # By default core/src (layers and cycles) and ffi/src (cycles) must pass; --bindings also
    # reads python/src, reporting its cycles without failing (its pyclasses name each other).
    bindings = "--bindings" in argv
    given = [Path(a).resolve() for a in argv if a != "--bindings"]
    checked = [(r, True) for r in given] or [(REPO / "core" / "src", True), (REPO / "ffi" / "src", False)]
    shown = lambda r: str(r.relative_to(REPO)) if r.is_relative_to(REPO) else str(r)  # noqa: E731
    failures = []
    for src, api in checked:
        failures += check(src, api=api)
    for f in failures:
        print(f"layers: {f}", file=sys.stderr)
    if bindings:
        for f in check(REPO / "python" / "src", api=False):
            print(f"layers (not enforced): {f}", file=sys.stderr)
    if failures:
        return 1
    print("layers: no import cycle among the files of " + ", ".join(shown(r) for r, _ in checked))
    core = REPO / "core" / "src"
    if any(r == core for r, _ in checked):
        print("layers: bottom up: " + " < ".join(module_order(core)[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
