#!/usr/bin/env python3
"""Checks the architecture invariants docs/ARCHITECTURE.md states, on the source tree.

Each check reads the sources (comments and string literals left out where a token is
looked for) and prints what breaks its rule, with the file and line. A check that still
has known exceptions lists them in EXCEPTIONS with why; an exception that no longer
breaks the rule fails the check too, so the list only shrinks.

Usage: scripts/check-architecture.py [--self-test]
Exits 1 when an invariant is broken, 0 with one "ok:" line per invariant otherwise.
Python 3 standard library only.
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CRATES = ["protocol", "engine", "server", "app", "render", "fleet"]
MAX_LINES = 600

# Files still over MAX_LINES, each with the work that splits it. Remove a line when the
# file is split; a listed file that is no longer over fails the check.
EXCEPTIONS_SIZE = {
}

# Where `unsafe` may appear: the libtorch-facing extension, and the one memory map of a
# checkpoint's shards (memmap2's `Mmap::map` is unsafe because another process may change
# the file under it).
UNSAFE_ALLOWED = [
    "engine/src/torch_ext.rs",
    "engine/src/torch_ext/",
    "engine/src/models/decoder/weights.rs",
]

# Product code that still reads bench/: none since the Python package (python/gradless/,
# issue 63, item 5).
EXCEPTIONS_BENCH: dict[str, str] = {}

# Process-wide state in protocol: none since the catalog value (protocol/src/catalog.rs,
# issue 63, item 4).
EXCEPTIONS_STATIC: dict[str, str] = {}


def _strip_code():
    """check-imports.py's `strip_code` (comments, string and char literals blanked, newlines
    kept): one stripper for both checks."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("check_imports", pathlib.Path(__file__).with_name("check-imports.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.strip_code


strip_code = _strip_code()


def production_sources():
    for crate in CRATES:
        for p in sorted((ROOT / crate / "src").rglob("*.rs")):
            rel = p.relative_to(ROOT).as_posix()
            # Unit tests kept in a file of their own are not production code.
            if p.name == "tests.rs" or p.name.endswith("_tests.rs") or "/tests/" in rel:
                continue
            yield rel, p


def check_size(files):
    errors, over = [], {}
    for rel, p in files:
        n = sum(1 for _ in p.open(encoding="utf-8"))
        if n > MAX_LINES:
            over[rel] = n
    for rel, n in over.items():
        if rel not in EXCEPTIONS_SIZE:
            errors.append(f"{rel}: {n} lines, over {MAX_LINES}: split it by concept")
    for rel, why in EXCEPTIONS_SIZE.items():
        if rel not in over:
            errors.append(f"{rel} is listed as over {MAX_LINES} lines ({why}) but is not: remove it from EXCEPTIONS_SIZE")
    return errors, f"no production source over {MAX_LINES} lines but the {len(EXCEPTIONS_SIZE)} listed"


def check_unsafe(files):
    errors = []
    for rel, p in files:
        if any(rel == a or (a.endswith("/") and rel.startswith(a)) for a in UNSAFE_ALLOWED):
            continue
        code = strip_code(p.read_text(encoding="utf-8"))
        for i, line in enumerate(code.split("\n"), 1):
            if re.search(r"\bunsafe\b", line):
                errors.append(f"{rel}:{i}: `unsafe` outside the libtorch extension (engine/src/torch_ext)")
    return errors, "`unsafe` only in engine/src/torch_ext and the checkpoint's memory map"


def check_bench(files):
    errors, reading = [], set()
    for rel, p in files:
        if not rel.split("/")[0] in ("engine", "server", "protocol"):
            continue
        code = p.read_text(encoding="utf-8")
        stripped = strip_code(code)
        for i, (line, raw) in enumerate(zip(stripped.split("\n"), code.split("\n")), 1):
            # A path into bench/ in code: in a string literal (blanked in `line`, so read
            # from `raw` where `line` still has the code around it).
            if re.search(r"\binclude_(str|bytes)!", line) and "bench/" in raw:
                reading.add(rel)
            elif "bench" in raw and re.search(r'"[^"]*\.\./bench[^"]*"|"[^"]*/bench/[^"]*"|"bench/', raw) and not raw.lstrip().startswith("//"):
                reading.add(rel)
    for rel in sorted(reading - set(EXCEPTIONS_BENCH)):
        errors.append(f"{rel}: product code reads a file of bench/ (benchmarks only there)")
    for rel, why in EXCEPTIONS_BENCH.items():
        if rel not in reading:
            errors.append(f"{rel} is listed as reading bench/ ({why}) but does not: remove it from EXCEPTIONS_BENCH")
    return errors, f"engine, server and protocol read no file of bench/ but the {len(EXCEPTIONS_BENCH)} listed"


def check_statics(files):
    errors, holding = [], {}
    for rel, p in files:
        if not rel.startswith("protocol/"):
            continue
        code = strip_code(p.read_text(encoding="utf-8"))
        for i, line in enumerate(code.split("\n"), 1):
            m = re.match(r"\s*(pub(\([^)]*\))?\s+)?static\s+(mut\s+)?([A-Z_][A-Z0-9_]*)\s*:\s*(.*)", line)
            # Writable state only: a constant built once (a OnceLock of the presets) is
            # not state, however it is stored.
            if m and re.search(r"RwLock|Mutex|\bCell<|RefCell|Atomic", m.group(5)):
                holding.setdefault(rel, []).append((i, m.group(4)))
    for rel, items in holding.items():
        if rel not in EXCEPTIONS_STATIC:
            for i, name in items:
                errors.append(f"{rel}:{i}: static {name} holds process-wide state in protocol: pass a value instead")
    for rel, name in EXCEPTIONS_STATIC.items():
        if rel not in holding:
            errors.append(f"{rel} is listed as holding static {name} but does not: remove it from EXCEPTIONS_STATIC")
    return errors, f"protocol holds no process-wide state but the {len(EXCEPTIONS_STATIC)} listed"


def check_nn(files):
    errors = []
    for rel, p in files:
        if not rel.startswith("engine/src/models/decoder/nn/"):
            continue
        code = strip_code(p.read_text(encoding="utf-8"))
        for i, line in enumerate(code.split("\n"), 1):
            if re.search(r"\b(Architecture|architecture|gemma_style|DecoderConfig)\b", line):
                errors.append(f"{rel}:{i}: a shared decoder layer reads the family or its config: take what differs as a parameter")
    return errors, "the decoder's shared layers (decoder/nn/) read no family and no config"


CHECKS = [check_size, check_unsafe, check_bench, check_statics, check_nn]


def self_test():
    src = 'let a = "unsafe // not a comment"; // unsafe here\n/* unsafe */ let b = \'u\'; unsafe { x }\nlet r = r#"unsafe"#;'
    s = strip_code(src)
    assert s.count("unsafe") == 1, s
    assert len(s.split("\n")) == 3
    assert "let a" in s and "let b" in s and "let r" in s
    print("ok: self-test")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return 0
    files = list(production_sources())
    failed = False
    for check in CHECKS:
        errors, what = check(files)
        for e in errors:
            print(f"error: {e}", file=sys.stderr)
        if errors:
            failed = True
        else:
            print(f"ok: {what}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
