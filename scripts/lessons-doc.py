#!/usr/bin/env python3
"""Writes docs/lessons.md from the cards themselves: every lesson's statements and how each
is known (this run's figures, a PyTorch mechanism test, PyTorch's source with the GPU step).

    scripts/lessons-doc.py GRADLESS_BINARY [--check]

With --check it writes nothing and fails when docs/lessons.md is not what the cards say
(scripts/test.sh runs it so, so the page can never drift from the code).
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DOC = os.path.join(HERE, "..", "docs", "lessons.md")


def render(cards):
    by = {"run": 0, "pytorch": 0, "source": 0}
    for c in cards:
        for s in c.get("statements", []):
            by[s["known"]["by"]] += 1
    out = [
        "# How each lesson is known",
        "",
        "Written by `scripts/lessons-doc.py` from the cards themselves (`gradless pitfall list --json`);",
        "`scripts/test.sh` fails when this page and the cards differ. Each card's lesson is a list of",
        "statements, and each says how it is known:",
        "",
        "- **run**: decided by the figures of the card's own run, named here; the device tests fail",
        "  when a report lacks one.",
        "- **PyTorch**: observed in the PyTorch Gradless links by a test of",
        "  [`engine/mechanisms/`](../engine/mechanisms), which `scripts/test.sh` runs; an upgrade",
        "  that changes the mechanism fails it.",
        "- **source**: a fact only a CUDA device shows: the PyTorch v2.11.0 file and function that",
        "  decide it, and the step of the GPU check (`scripts/gpu-check.sh`) that measures it.",
        "",
        f"{len(cards)} cards, {sum(by.values())} statements: {by['run']} decided by the run, "
        f"{by['pytorch']} observed in PyTorch by a test, {by['source']} from PyTorch's source and "
        "measured on a GPU.",
        "",
    ]
    for i, c in enumerate(cards, 1):
        out += [f"## {i}. {c['id']}: {c['title']}", "", f"Claim: {c['claim']}", ""]
        out += ["| statement | how it is known |", "|---|---|"]
        for s in c.get("statements", []):
            k = s["known"]
            if k["by"] == "run":
                how = "run: " + ", ".join(f"“{f}”" for f in k["figures"])
            elif k["by"] == "pytorch":
                file, test = k["test"].split("::", 1)
                how = f"PyTorch: [{file}](../engine/mechanisms/{file}) {test}"
            else:
                url = f"https://github.com/pytorch/pytorch/blob/v2.11.0/{k['file']}"
                how = f"source: [{k['file']}]({url}) {k['function']}; GPU check step {k['gpu_step']}"
            text = s["text"].replace("|", "\\|")
            out.append(f"| {text} | {how.replace('|', chr(92) + '|')} |")
        out.append("")
    return "\n".join(out)


def main():
    binary = sys.argv[1]
    check = "--check" in sys.argv[2:]
    # The CPU's view of the cards: the statements do not depend on the device.
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    cards = json.loads(subprocess.run([binary, "pitfall", "list", "--json"], check=True, capture_output=True, text=True, env=env).stdout)
    text = render(cards)
    if check:
        current = open(DOC).read() if os.path.exists(DOC) else ""
        if current != text:
            sys.exit(f"error: docs/lessons.md is not what the cards say: run scripts/lessons-doc.py {binary}")
        print("docs/lessons.md matches the cards")
        return
    open(DOC, "w").write(text)
    print(f"wrote {DOC}")


if __name__ == "__main__":
    main()
