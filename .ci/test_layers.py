#!/usr/bin/env python3
"""Tests layers.py on small trees planted in a temporary directory: a clean tree passes, and each
kind of cycle (or an engine file importing a public API module) fails, naming its files."""

import subprocess
import sys
import tempfile
from pathlib import Path

LAYERS = Path(__file__).resolve().parent / "layers.py"

# A clean crate: a mod.rs that re-exports and calls its children, children using what their
# parent defines, a grouped import, a glob, and a test module whose imports would close a cycle.
CLEAN = {
    "lib.rs": "mod engine;\nmod error;\nmod message;\nmod queue;\npub use queue::Queue;\n",
    "error.rs": "pub struct Error;\npub type Result<T> = std::result::Result<T, Error>;\n",
    "message.rs": "use crate::error::Result;\npub struct Message;\n"
    "pub fn check() -> Result<()> { Ok(()) }\n"
    "#[cfg(test)]\nmod tests {\n    use crate::queue::Queue;\n}\n",
    "engine/mod.rs": "mod batch;\nmod read;\npub use batch::{Batch, Locked};\npub use read::get;\n"
    "pub struct Engine;\nimpl Engine { fn run(&self) { batch::Batch::new(); read::get(); } }\n",
    "engine/batch/mod.rs": "mod send;\npub use send::Locked;\npub struct Batch;\n"
    "impl Batch { pub fn new() -> Batch { Batch } }\n",
    "engine/batch/send.rs": "use super::*;\nuse crate::engine::Engine;\npub struct Locked;\n"
    "fn f(_: &Batch, _: &Engine) {}\n",
    "engine/read.rs": "use crate::{error::{Error, Result}, message::Message};\nuse super::Batch;\n"
    "pub fn get() {}\n",
    "queue.rs": "use crate::engine::{Engine, Locked};\nuse crate::message::*;\npub struct Queue;\n"
    "fn f(_: Message) {}\n",
}


def planted(changes: dict[str, str | None]) -> dict[str, str]:
    tree = dict(CLEAN)
    for path, text in changes.items():
        if text is None:
            tree.pop(path, None)
        else:
            tree[path] = text
    return tree


CASES = [
    # name, tree, expected to fail, files the report must name
    ("clean tree", CLEAN, False, []),
    (
        "two-file cycle",
        planted({"error.rs": "use crate::message::Message;\npub struct Error;\n"
                 "pub type Result<T> = std::result::Result<T, Error>;\n"}),
        True,
        ["error.rs", "message.rs"],
    ),
    (
        "cycle through a re-export",
        # read.rs names engine::Locked, which engine/mod.rs re-exports from batch/send.rs; send.rs
        # calls back into read.rs.
        planted({"engine/batch/send.rs": "use super::*;\npub struct Locked;\n"
                 "fn f(_: &Batch) { crate::engine::get(); }\n",
                 "engine/read.rs": "use crate::engine::Locked;\npub fn get() {}\n"}),
        True,
        ["engine/batch/send.rs", "engine/read.rs"],
    ),
    (
        "cycle through super::",
        planted({"engine/batch/mod.rs": "mod send;\npub use send::Locked;\npub struct Batch;\n"
                 "impl Batch { pub fn new() -> Batch { super::read::get(); Batch } }\n"}),
        True,
        ["engine/batch/mod.rs", "engine/read.rs"],
    ),
    (
        "cycle through a glob and a group",
        # message.rs names engine::Locked (re-exported twice, from batch/send.rs) in a group;
        # send.rs names Message through a glob.
        planted({"message.rs": "use crate::{engine::{self, Locked}};\npub struct Message;\n"
                 "fn f(_: Locked) {}\n",
                 "engine/batch/send.rs": "use super::*;\nuse crate::message::*;\npub struct Locked;\n"
                 "fn f(_: &Batch, _: Message) {}\n"}),
        True,
        ["message.rs", "engine/batch/send.rs"],
    ),
    (
        "an unnamed const or a raw pointer defines nothing",
        # error.rs glob-imports message.rs and spells `_` (a match arm) and `u8`; message.rs
        # has a `const _` and a `*const u8`. Only a real name would close error.rs ->
        # message.rs -> error.rs.
        planted({"error.rs": "use crate::message::*;\npub struct Error;\n"
                 "pub type Result<T> = std::result::Result<T, Error>;\n"
                 "fn f(x: u8) -> u8 { match x { _ => 0 } }\n",
                 "message.rs": "use crate::error::Result;\npub struct Message;\n"
                 "const _: () = ();\nfn p(_: *const u8) {}\n"
                 "pub fn check() -> Result<()> { Ok(()) }\n"}),
        False,
        [],
    ),
    (
        "cycle among the files of one directory",
        # Nothing is exempt: two files of processor/ importing each other fail.
        planted({"lib.rs": CLEAN["lib.rs"] + "mod processor;\n",
                 "processor/mod.rs": "mod a;\nmod b;\n",
                 "processor/a.rs": "use super::b::B;\npub struct A;\nfn f(_: B) {}\n",
                 "processor/b.rs": "use super::a::A;\npub struct B;\nfn f(_: A) {}\n"}),
        True,
        ["processor/a.rs", "processor/b.rs"],
    ),
    (
        "engine file importing a public module",
        planted({"engine/read.rs": "use crate::queue::Queue;\npub fn get() {}\n"}),
        True,
        ["engine/read.rs imports the public API module queue"],
    ),
]


def run(tree: dict[str, str]) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        for path, text in tree.items():
            (src / path).parent.mkdir(parents=True, exist_ok=True)
            (src / path).write_text(text)
        return subprocess.run([sys.executable, str(LAYERS), str(src)], capture_output=True, text=True)


def main() -> int:
    failed = 0
    for name, tree, should_fail, names in CASES:
        r = run(tree)
        problems = []
        if (r.returncode != 0) != should_fail:
            problems.append(f"exit {r.returncode}, expected {'failure' if should_fail else 'success'}")
        for n in names:
            if n not in r.stderr:
                problems.append(f"report does not name {n!r}")
        if problems:
            failed += 1
            print(f"test_layers: {name}: " + "; ".join(problems) + "\n" + r.stdout + r.stderr, file=sys.stderr)
        else:
            print(f"test_layers: {name}: ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
