#!/usr/bin/env python3
"""Checks that the modules of a Rust crate import one another without a cycle.

The graph has one node per module at each level of the module tree: a reference from code
inside module A (any file or inline `mod` under it) to a module B that is a sibling of A
(B has the same parent as A) is an edge A -> B. So `engine/src/lab/measure.rs` naming
`crate::trace::Probe` is the edge lab -> trace among the crate's top-level modules, and
`super::graph::capture` in the same file is the edge measure -> graph among lab's children.
References to one's own ancestors (`super::x` for an item of the parent) and to one's own
descendants do not count: a parent declares its children, and a child may use what its
parent holds.

A reference is a path in a `use` declaration (trees with braces, `self`, `as` included) or
a path in code that starts with `crate::`, `super::` or `self::`, outside comments and
string literals. A name that a module only re-exports (`pub use failure::catch_torch;`, or
any `use` a child can reach through `super::`) is followed to the module that defines it,
so `super::catch_torch` from a sibling is an edge to `failure`, not to the parent. Modules
are found by following `mod NAME;` from the crate roots (lib.rs, main.rs, bin/*.rs; each
root is its own crate), `mod NAME { ... }` blocks included.

Usage: scripts/check-imports.py CRATE/src [CRATE/src ...]
       scripts/check-imports.py --self-test
Prints each cycle with the files and lines that make each of its edges and exits 1, or
prints "ok: DIR: N modules, no import cycle" for each directory and exits 0.
Python 3 standard library only.
"""

import io
import re
import sys
import tempfile
from collections import defaultdict
from contextlib import redirect_stdout
from pathlib import Path

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
TOKEN = re.compile(r"r#" + IDENT + r"|" + IDENT + r"|::|[{}(),;*]|\S")


def strip_code(text):
    """The text with comments, string and char literals blanked (newlines kept), so only
    code is searched and line numbers still match."""
    out = []
    i, n = 0, len(text)

    def blank(s):
        return "".join("\n" if c == "\n" else " " for c in s)

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(blank(text[i:j]))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(blank(text[i:j]))
            i = j
        elif (m := re.match(r'b?r(#*)"', text[i:])) and (i == 0 or not re.match(r"\w", text[i - 1])):
            end = '"' + m.group(1)
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(blank(text[i:j]))
            i = j
        elif c == '"' or (c == "b" and text.startswith('b"', i) and (i == 0 or not re.match(r"\w", text[i - 1]))):
            j = i + (2 if c == "b" else 1)
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(blank(text[i : j + 1]))
            i = j + 1
        elif c == "'":
            # A char literal ('a', '\n', '\u{1F600}') or a lifetime ('a): only the former closes.
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", text[i:])
            if m:
                out.append(blank(m.group(0)))
                i += m.end()
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


class Module:
    def __init__(self, path, file, line, children_dir):
        self.path = path  # tuple of names from the crate root
        self.file = file
        self.line = line
        self.children_dir = children_dir  # where `mod NAME;` files of this module live
        self.children = set()
        self.imports = {}  # name -> (absolute-ish path segments, line): this module's `use`s


def parse_use_tree(tokens, pos, prefix, out):
    """Parses one use tree at tokens[pos]; appends (segments, alias or None) to out."""
    segs = list(prefix)
    while pos < len(tokens):
        t = tokens[pos][0]
        if t == "{":
            pos += 1
            while pos < len(tokens) and tokens[pos][0] != "}":
                pos = parse_use_tree(tokens, pos, segs, out)
                if pos < len(tokens) and tokens[pos][0] == ",":
                    pos += 1
            return pos + 1
        if t == "*":
            out.append((segs + ["*"], None))
            return pos + 1
        if t == "::":
            pos += 1
            continue
        if re.fullmatch(r"r#" + IDENT + "|" + IDENT, t):
            name = t[2:] if t.startswith("r#") else t
            if name == "self" and segs:
                pos += 1  # `{self, ...}`: the path so far itself
            else:
                segs.append(name)
                pos += 1
            if pos < len(tokens) and tokens[pos][0] == "as":
                out.append((segs, tokens[pos + 1][0]))
                return pos + 2
            if pos < len(tokens) and tokens[pos][0] == "::":
                continue
            out.append((segs, None))
            return pos
        return pos + 1
    return pos


def scan_file(code):
    """Yields (kind, payload, line, inline module path, depth) for one file's stripped code:
    ("mod", name, ...) for `mod NAME;`, ("block", name, ...) for `mod NAME {`, ("use",
    [(segments, alias)], ...), ("path", segments, ...)."""
    tokens = []
    for m in TOKEN.finditer(code):
        tokens.append((m.group(0), code.count("\n", 0, m.start()) + 1, m.start()))
    inline = []  # stack of (name, depth at which its block opened)
    depth = 0
    i = 0
    while i < len(tokens):
        t, line, start = tokens[i]
        prev = tokens[i - 1][0] if i else ""
        if t == "{":
            depth += 1
        elif t == "}":
            depth -= 1
            if inline and inline[-1][1] == depth:
                inline.pop()
        elif t == "mod" and i + 2 < len(tokens) and re.fullmatch(IDENT, tokens[i + 1][0]):
            name, nxt = tokens[i + 1][0], tokens[i + 2][0]
            if nxt == ";":
                yield ("mod", name, line, tuple(n for n, _ in inline), depth)
                i += 3
                continue
            if nxt == "{":
                yield ("block", name, line, tuple(n for n, _ in inline), depth)
                inline.append((name, depth))
                depth += 1
                i += 3
                continue
        elif t == "use" and prev not in ("::",):
            trees = []
            j = parse_use_tree(tokens, i + 1, [], trees)
            yield ("use", trees, line, tuple(n for n, _ in inline), depth - len(inline))
            while j < len(tokens) and tokens[j][0] != ";":
                j += 1
            i = j + 1
            continue
        elif t in ("crate", "super", "self") and prev != "::" and code[start - 1 : start] != "$":
            segs, j = [t], i + 1
            while j + 1 < len(tokens) and tokens[j][0] == "::" and re.fullmatch(IDENT, tokens[j + 1][0]):
                segs.append(tokens[j + 1][0])
                j += 2
            if len(segs) > 1:
                yield ("path", segs, line, tuple(n for n, _ in inline), depth)
            i = j
            continue
        i += 1


class Crate:
    def __init__(self, root_file, label):
        self.label = label
        self.modules = {}
        self.refs = []  # (from module path, segments, file, line, is_use)
        self.load(root_file, (), root_file.parent, 1)

    def load(self, file, path, children_dir, line):
        code = strip_code(file.read_text(encoding="utf-8"))
        top = Module(path, file, line, children_dir)
        self.modules[path] = top
        for kind, payload, line, inline, depth in scan_file(code):
            here = path + inline
            if kind == "block":
                child = Module(here + (payload,), file, line, None)
                self.modules[here + (payload,)] = child
                self.modules[here].children.add(payload)
            elif kind == "mod":
                owner = self.modules[here]
                base = owner.children_dir if not inline else (children_dir.joinpath(*inline))
                for candidate in (base / f"{payload}.rs", base / payload / "mod.rs"):
                    if candidate.is_file():
                        owner.children.add(payload)
                        sub = base / payload
                        self.load(candidate, here + (payload,), sub, line)
                        break
            elif kind == "use":
                for segs, alias in payload:
                    self.refs.append((here, segs, file, line, True))
                    if depth == 0 and segs[-1] != "*":
                        self.modules[here].imports[alias or segs[-1]] = (segs, line)
            else:
                self.refs.append((here, payload, file, line, False))

    def resolve(self, here, segs, is_use, seen=None):
        """The module a reference from module `here` lands in, or None (another crate)."""
        seen = seen or set()
        first = segs[0]
        if first == "crate":
            base, rest = (), segs[1:]
        elif first in ("super", "self"):
            base, rest = here, list(segs)
            while rest and rest[0] in ("super", "self"):
                if rest[0] == "super":
                    base = base[:-1]
                rest = rest[1:]
        elif is_use and first in self.modules.get(here, Module(here, None, 0, None)).children:
            base, rest = here, segs
        elif is_use and first in self.modules.get(here, Module(here, None, 0, None)).imports:
            target, _ = self.modules[here].imports[first]
            if (here, first) in seen or target == segs:
                return None
            seen.add((here, first))
            return self.resolve(here, list(target) + list(segs[1:]), True, seen)
        else:
            return None
        while rest and rest[0] in self.modules.get(base, Module(base, None, 0, None)).children:
            base, rest = base + (rest[0],), rest[1:]
        if rest and rest[0] != "*" and base in self.modules:
            imported = self.modules[base].imports.get(rest[0])
            if imported and (base, rest[0]) not in seen:
                seen.add((base, rest[0]))
                target = self.resolve(base, list(imported[0]) + list(rest[1:]), True, seen)
                if target is not None:
                    return target
        return base if base in self.modules else None

    def edges(self):
        """{parent: {(a, b): [(file, line), ...]}} for the references between siblings."""
        out = defaultdict(lambda: defaultdict(list))
        for here, segs, file, line, is_use in self.refs:
            target = self.resolve(here, segs, is_use)
            if target is None:
                continue
            common = 0
            while common < min(len(here), len(target)) and here[common] == target[common]:
                common += 1
            if common == len(here) or common == len(target):
                continue  # an ancestor or a descendant
            parent = here[:common]
            out[parent][(here[common], target[common])].append((file, line))
        return out


def cycles(nodes, edges):
    """The strongly connected components of more than one node (Tarjan)."""
    graph = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    index, low, stack, on, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return found, graph


def one_cycle(comp, graph):
    """A shortest cycle through the component's first node (breadth-first)."""
    start, members = comp[0], set(comp)
    prev, queue = {start: None}, [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v]):
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [start]
            if w in members and w not in prev:
                prev[w] = v
                queue.append(w)
    return comp + [start]


def check(src):
    """Prints the cycles of the crate(s) under `src`; returns (ok, module count)."""
    src = Path(src)
    roots = [p for p in (src / "lib.rs", src / "main.rs") if p.is_file()]
    roots += sorted((src / "bin").glob("*.rs")) if (src / "bin").is_dir() else []
    if not roots:
        print(f"error: {src}: no lib.rs, main.rs or bin/*.rs", file=sys.stderr)
        return False, 0
    ok, count = True, 0
    for root in roots:
        crate = Crate(root, root.stem)
        count += len(crate.modules)
        label = "" if root.stem == "lib" else f" ({root.name})"
        for parent, edges in sorted(crate.edges().items()):
            nodes = {n for edge in edges for n in edge}
            components, graph = cycles(nodes, edges)
            for comp in components:
                ok = False
                path = one_cycle(comp, graph)
                on_path = set(zip(path, path[1:]))
                where = "::".join(("crate",) + parent)
                print(f"cycle in {src}{label} among the children of {where}: " + " -> ".join(path))
                for a, b in zip(path, path[1:]):
                    sites = sorted(set(edges[(a, b)]))
                    listed = ", ".join(f"{f}:{line}" for f, line in sites[:6])
                    more = f" (+{len(sites) - 6} more)" if len(sites) > 6 else ""
                    print(f"  {a} -> {b}: {listed}{more}")
                others = sorted(e for e in edges if e[0] in comp and e[1] in comp and e not in on_path)
                if others:
                    print("  other edges inside the cycle: " + ", ".join(f"{a} -> {b}" for a, b in others))
    return ok, count


def self_test():
    """A temporary crate with a three-module cycle (one edge through a re-export) and a
    sibling cycle inside a directory module must be found; the same crate with the cycles
    broken must pass."""
    files = {
        "lib.rs": "pub mod a;\npub mod b;\npub mod c;\nmod d;\n// crate::d::x is a comment\n",
        "a.rs": 'use crate::b::Thing;\nconst S: &str = "crate::c::x";\n',
        "b.rs": "pub struct Thing;\npub fn f() { crate::c::g(); }\n",
        "c.rs": "pub fn g() {}\npub fn h() { let _ = crate::a::CALLER; }\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
        "d/mod.rs": "mod p;\nmod q;\npub use q::moved;\nfn here() {}\n",
        "d/p.rs": "use super::{moved, here};\n",
        "d/q.rs": "pub fn moved() { super::p::x(); }\n",
    }
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        for name, text in files.items():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            (src / name).write_text(text)
        (src / "a.rs").write_text((src / "a.rs").read_text() + "pub const CALLER: u8 = 0;\n")
        buf = io.StringIO()
        with redirect_stdout(buf):
            ok, count = check(src)
        report = buf.getvalue()
        expect = [
            "among the children of crate: a -> b -> c -> a",
            "among the children of crate::d: p -> q -> p",
            "c -> a: " + str(src / "c.rs") + ":2",
            "p -> q: " + str(src / "d" / "p.rs") + ":1",
        ]
        missing = [e for e in expect if e not in report]
        failures = []
        if ok or missing:
            failures.append(f"cycles not reported as expected (missing {missing}):\n{report}")
        if count != 8:
            failures.append(f"expected 8 modules (the root, a, b, c, c::tests, d, d::p, d::q), got {count}")
        (src / "c.rs").write_text("pub fn g() {}\n")
        (src / "d/q.rs").write_text("pub fn moved() {}\n")
        buf = io.StringIO()
        with redirect_stdout(buf):
            ok, _ = check(src)
        if not ok:
            failures.append(f"a false cycle once the cycles were broken:\n{buf.getvalue()}")
    if failures:
        print("check-imports self-test failed:\n" + "\n".join(failures), file=sys.stderr)
        return 1
    print("ok: check-imports self-test (cycles found, none invented)")
    return 0


def main(argv):
    if argv == ["--self-test"]:
        return self_test()
    if not argv or any(a.startswith("-") for a in argv):
        print("usage: scripts/check-imports.py CRATE/src [CRATE/src ...] | --self-test", file=sys.stderr)
        return 2
    failed = False
    for src in argv:
        ok, count = check(Path(src))
        if ok:
            print(f"ok: {src.rstrip('/')}: {count} modules, no import cycle")
        failed |= not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
