#!/usr/bin/env python3
"""Writes docs/cli.md: the `gradless` binary's own help, every command and subcommand.

The page is the binary's `--help` output, command by command (the commands found by
reading each help's "Commands:" list), so the flags, their defaults and their environment
variables are the code's and cannot drift: `--check` fails when the page differs from what
the binary prints (scripts/test.sh runs it).

Usage: scripts/cli-doc.py BINARY [--check]
Python 3 standard library only.
"""

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "cli.md"

HEAD = """# The command line, as the binary prints it

Written by `scripts/cli-doc.py` from the `gradless` binary's own `--help`, command by
command; `scripts/test.sh` fails when this page and the binary differ. What the commands
are for, with examples: the [README](../README.md), the [operator's guide](operating.md)
and [Generation](generation.md). Every flag that sets a run takes the same values as the
page's controls and the API's `RunSpec` ([API reference](api.md)).

"""


def help_of(binary: str, path: list[str]) -> str:
    out = subprocess.run([binary, *path, "--help"], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "COLUMNS": "100", "NO_COLOR": "1"})
    return out.stdout.rstrip() + "\n"


def commands(text: str) -> list[str]:
    """The subcommands a help lists under "Commands:", `help` left out."""
    m = re.search(r"^Commands:\n((?:  \S.*\n|    .*\n)+)", text, re.M)
    if not m:
        return []
    names = re.findall(r"^  (\S+)", m.group(1), re.M)
    return [n for n in names if n != "help"]


def page(binary: str) -> str:
    parts, toc = [], []

    def walk(path: list[str]):
        text = help_of(binary, path)
        name = " ".join(["gradless", *path])
        anchor = "-".join(["gradless", *path])
        toc.append(f"{'  ' * max(len(path) - 1, 0)}- [`{name}`](#{anchor})")
        parts.append(f"## {anchor}\n\n```text\n$ {name} --help\n{text}```\n")
        for sub in commands(text):
            walk([*path, sub])

    walk([])
    return HEAD + "\n".join(toc) + "\n\n" + "\n".join(parts)


def main() -> int:
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    text = page(args[0])
    if "--check" in args:
        if not PAGE.exists() or PAGE.read_text() != text:
            print(f"error: {PAGE.relative_to(ROOT)} differs from the binary's help: run scripts/cli-doc.py {args[0]}",
                  file=sys.stderr)
            return 1
        print(f"ok: {PAGE.relative_to(ROOT)} is the binary's help")
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
