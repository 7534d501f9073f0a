#!/usr/bin/env python3
"""Checks the facts the docs state that the code decides: how many cards there are, and
which decoder families a team's checkpoint may name.

- The cards: every "N cards" in README.md and docs/*.md (N written in figures or words,
  at least 10, so "two cards" of a topic is left alone, and not followed by a qualifier
  such as "on ...", which counts a part) must be the number of cards the binary lists
  (`gradless pitfall list --json`).
- The families: the `...ForCausalLM` classes README.md and docs/generation.md name as read
  must be exactly the ones protocol's `Architecture` parses (protocol/src/decoder/arch.rs,
  its serde names); a class named as refused (in a sentence with "not") is left alone.
The generated pages (lessons.md, questions.md, cli.md) are checked by their own scripts.

Usage: scripts/docs-facts.py BINARY
Exits 1 naming each page, line and figure that differs. Python 3 standard library only.
"""

import json
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
GENERATED = {"lessons.md", "questions.md", "cli.md"}
UNITS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split()
TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def number(word: str):
    w = word.lower()
    if w.isdigit():
        return int(w)
    if w in UNITS:
        return UNITS.index(w)
    parts = w.split("-")
    if parts[0] in TENS and parts[0] != "_":
        n = TENS.index(parts[0]) * 10
        if len(parts) == 2 and parts[1] in UNITS[1:10]:
            return n + UNITS.index(parts[1])
        if len(parts) == 1:
            return n
    return None


def pages():
    yield ROOT / "README.md"
    for p in sorted((ROOT / "docs").glob("*.md")):
        if p.name not in GENERATED:
            yield p


def check_cards(binary: str) -> list[str]:
    out = subprocess.run([binary, "pitfall", "list", "--json"], capture_output=True, text=True, check=True)
    cards = len(json.loads(out.stdout))
    errors = []
    for p in pages():
        for i, line in enumerate(p.read_text(encoding="utf-8").split("\n"), 1):
            # "Forty-four cards:", "the 44 cards (text + ...)": a count of them all. One
            # followed by a qualifier ("Twenty cards on the Pitfalls page run on a
            # decoder") counts a part, and is left alone.
            for m in re.finditer(r"\b([A-Za-z]+(?:-[a-z]+)?|\d+) (?:pitfall )?cards\b(?! (?:on|that|which|run|in|of|about)\b)", line):
                n = number(m.group(1))
                if n is not None and n >= 10 and n != cards:
                    errors.append(f"{p.relative_to(ROOT)}:{i}: says {m.group(0)!r}; the binary lists {cards} cards")
    print(f"ok: the docs' card counts are the binary's {cards}" if not errors else "", end="\n" if not errors else "")
    return errors


def check_families() -> list[str]:
    arch = (ROOT / "protocol/src/decoder/arch.rs").read_text(encoding="utf-8")
    parsed = set(re.findall(r'#\[serde\(rename = "(\w+ForCausalLM)"\)\]', arch))
    errors = []
    for rel in ["README.md", "docs/generation.md"]:
        text = (ROOT / rel).read_text(encoding="utf-8")
        # The sentences that list what is read: those naming at least three families.
        named = set()
        for sentence in re.split(r"(?<=[.:])\s", text):
            classes = set(re.findall(r"`(\w+ForCausalLM)`", sentence))
            if len(classes) >= 3 and not re.search(r"\bnot\b|refus", sentence.split("ForCausalLM")[0]):
                named |= classes
        for c in sorted(named - parsed):
            errors.append(f"{rel}: names {c} as read, which protocol's Architecture does not parse")
        for c in sorted(parsed - named):
            errors.append(f"{rel}: does not name {c} among the families read, which protocol's Architecture parses")
    if not errors:
        print(f"ok: README.md and docs/generation.md name the {len(parsed)} families protocol parses")
    return errors


def main() -> int:
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    errors = check_cards(sys.argv[1]) + check_families()
    for e in errors:
        print(f"error: {e}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
