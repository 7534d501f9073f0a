#!/usr/bin/env python3
"""Writes docs/questions.md from the cards themselves: what the Pitfalls page shows of each
card before the learner locks in a prediction (its question state), card by card, as a GPU
server shows it and, where it differs, as a CPU server does, so that every question can be
read and audited in one file.

    scripts/questions-doc.py GRADLESS_BINARY [--check]

The cards come from `gradless pitfall list --json --device cuda` and `--device cpu` (listing
runs nothing, so a CPU machine lists a GPU server's cards too). The page's own words around
them (the headings, the not-here sentence, the order of the two pieces of code) are written
here as app/src/pitfalls.rs and app/src/prediction.rs show them; each is looked up in those
files first, so a change to the page stops this script until it is changed to match.

With --check it writes nothing and fails when docs/questions.md is not what the cards say
(scripts/test.sh runs it so, so the page can never drift from the code).
"""
import difflib
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
DOC = os.path.join(ROOT, "docs", "questions.md")

# What the page writes around a card's fields in its question state, and the file that
# writes it: each must be found there verbatim (see `page_words`).
CARD = "app/src/pitfalls.rs"
CONTROLS = "app/src/prediction.rs"
WORDS = {
    "measured": (CARD, '"What is measured"'),
    "not_here": (CARD, '"This server cannot show the effect. "'),
    "not_here_end": (CARD, '" Predict what a GPU would show: your answer is kept, and never graded against this server\'s figure."'),
    "lock_in": (CARD, '"Lock in and run"'),
    "skip": (CARD, '"Show the lesson without predicting"'),
    "budget": (CARD, '"Memory budget "'),
    "predict": (CONTROLS, '"Predict first"'),
    "counted": (CONTROLS, '"Counted right: {}."'),
}
# The two pieces of code, in the order the page shows them before the lock-in: "A", then "B".
# A card shows `python_pitfall` (its first label) first, unless its `fix_first` is set (a
# fixed function of its id), when `python_fix` (its second label) comes first. Each pattern
# must match the page's source, in this order.
VARIANTS = [
    ("A", r'"A" \}\}": "\{label_a\}</h3>\s*<pre[^>]*><code>\{code_a\}'),
    ("B", r'"B" \}\}": "\{label_b\}</h3>\s*<pre[^>]*><code>\{code_b\}'),
]
ORDER_PATTERN = r'if card\.fix_first \{\s*variants\.swap\(0, 1\);'


def shown_variants(card):
    """The card's two pieces of code as the page shows them: (letter, label, code)."""
    pair = [(card["labels"][0], card["python_pitfall"]), (card["labels"][1], card["python_fix"])]
    if card.get("fix_first"):
        pair.reverse()
    return [(letter, label, code) for (letter, _), (label, code) in zip(VARIANTS, pair)]
# batch-scaling's memory-budget menu, shown above its question (the page's presets).
BUDGET_CARD = "batch-scaling"
BUDGET_PATTERN = r'let budget_picker = \(card\.id == "batch-scaling"\)'
BUDGET_MENU = ["this device (free memory; 160 MiB on a CPU)", "1 GiB", "16 GiB card", "24 GiB card", "80 GiB card"]


def page_words():
    """The page's words, each checked against the file that writes it: a page changed
    without this script fails here, naming what to update."""
    sources = {f: open(os.path.join(ROOT, f)).read() for f in {CARD, CONTROLS}}
    missing = [f"{f}: {w}" for f, w in WORDS.values() if w not in sources[f]]
    at = 0
    for label, pattern in VARIANTS:
        m = re.compile(pattern).search(sources[CARD], at)
        if not m:
            missing.append(f"{CARD}: code {label}, after the one before")
        at = m.end() if m else at
    if not re.search(ORDER_PATTERN, sources[CARD]):
        missing.append(f"{CARD}: the two pieces of code swapped where fix_first is set")
    if not re.search(BUDGET_PATTERN, sources[CARD]):
        missing.append(f"{CARD}: the memory-budget menu of {BUDGET_CARD}")
    missing += [f"{CARD}: budget \"{b}\"" for b in BUDGET_MENU if f'"{b}"' not in sources[CARD]]
    if missing:
        sys.exit("error: the page no longer shows a card as scripts/questions-doc.py writes it; update the script where it says:\n  "
                 + "\n  ".join(missing))
    # The words as the page shows them: without the quotes and the format's braces.
    return {k: w.strip('"').replace("{}.", "") for k, (_, w) in WORDS.items()}


def esc(text):
    """Plain text as Markdown shows it: what Markdown would read as markup escaped (an
    underscore only at a word's edge, where GitHub would read it as emphasis)."""
    text = re.sub(r"([\\`*\[\]<>|])", r"\\\1", text)
    return re.sub(r"(?<!\w)_|_(?!\w)", r"\\_", text)


def fence(code):
    ticks = "`" * max(3, max((len(m) for m in re.findall(r"`+", code)), default=0) + 1)
    return [f"{ticks}python", code, ticks]


def answer_lines(answer, words):
    if "scale" in answer:
        s = answer["scale"]
        form = (f"a slider on a log scale from {s['from']} to {s['to']}; it starts in the middle, at "
                f"{s['middle']}, and is not an answer until dragged or pressed")
    else:
        form = "one of " + ", ".join(f"“{c}”" for c in answer["choices"])
    return [f"Answer: {esc(form)}.", "", f"{words['counted']}{esc(answer['counted_right'])}."]


def not_here_line(why, words):
    return f"> **{esc(words['not_here'].strip())}** {esc(why)}{esc(words['not_here_end'])}"


def shown(card, number, words):
    """The card's question state as the page shows it, as Markdown lines: its title (the
    page's heading, numbered in tour order), then the rest."""
    out = [f"**{number}. {esc(card['asks'])}**", "", f"{words['measured']}:", ""]
    out += [f"{i}. {esc(line)}" for i, line in enumerate(card["setup"], 1)]
    out.append("")
    if card.get("not_here"):
        out += [not_here_line(card["not_here"], words), ""]
    for letter, label, code in shown_variants(card):
        out += [f"{letter}: {esc(label)}", ""] + fence(code) + [""]
    if card["id"] == BUDGET_CARD:
        out += [f"{words['budget'].strip()}: a menu of " + ", ".join(f"“{b}”" for b in BUDGET_MENU)
                + " (the first is selected until another is chosen).", ""]
    out += [f"{words['predict']}: {esc(card['question']['text'])}", ""]
    out += answer_lines(card["answer"], words) + [""]
    return out


def differences(gpu, cpu, number, words):
    """What a CPU server shows differently from a GPU one, as Markdown lines."""
    out = []
    if cpu.get("not_here") != gpu.get("not_here"):
        out += ["The line before the code:" if cpu.get("not_here") else "No line before the code.", ""]
        if cpu.get("not_here"):
            out += [not_here_line(cpu["not_here"], words), ""]
    if cpu["asks"] != gpu["asks"]:
        out += [f"The title: **{number}. {esc(cpu['asks'])}**", ""]
    if cpu["setup"] != gpu["setup"]:
        out += [f"{words['measured']}, where it differs (by the GPU's line numbers above):", ""]
        ops = difflib.SequenceMatcher(a=gpu["setup"], b=cpu["setup"], autojunk=False).get_opcodes()
        for op, i1, i2, j1, j2 in ops:
            lines = [esc(line) for line in cpu["setup"][j1:j2]]
            at = f"{i1 + 1}" if i2 - i1 == 1 else f"{i1 + 1}–{i2}"
            if op == "replace" and i2 - i1 == j2 - j1:
                out += [f"- in place of {i}: {line}" for i, line in enumerate(lines, i1 + 1)]
            elif op == "replace":
                out += [f"- in place of {at}:"] + [f"  - {line}" for line in lines]
            elif op == "insert":
                out += [f"- after {i1}: {line}" for line in lines]
            elif op == "delete":
                out.append(f"- {at}: not shown")
        out.append("")
    for (letter, label, code), gpu_shown in zip(shown_variants(cpu), shown_variants(gpu)):
        if (letter, label, code) != gpu_shown:
            out += [f"{letter}: {esc(label)}", ""] + fence(code) + [""]
    if cpu["question"]["text"] != gpu["question"]["text"]:
        out += [f"{words['predict']}: {esc(cpu['question']['text'])}", ""]
    if cpu["answer"] != gpu["answer"]:
        out += answer_lines(cpu["answer"], words) + [""]
    return out


def render(gpu_cards, cpu_cards, words):
    not_here = [c["id"] for c in cpu_cards if c.get("not_here")]
    out = [
        "# What each card asks before the lock-in",
        "",
        "Written by `scripts/questions-doc.py` from the cards themselves (`gradless pitfall list --json",
        "--device cuda`, then `--device cpu`); `scripts/test.sh` fails when this page and the cards",
        "differ. It is what the Pitfalls page shows of each card before the learner locks in a",
        "prediction, so that every question can be read, and checked for what it gives away, in one",
        "file. The lessons, shown only after the lock-in, are in [How each lesson is known](lessons.md).",
        "",
        "Each card is headed by its id (a link to it here is `questions.md#ID`, as the page's is",
        "`/pitfalls#ID`) and shown as a server running it on a GPU shows it, in the page's order:",
        "the card's question as its numbered title, what is measured, the two pieces of code under",
        "their neutral labels (A, then B: which one the lesson recommends is first on about half",
        "the cards, fixed by the card's id), and the question with its answer. Below it, what a",
        "server running it on its CPU shows differently: the effect of a CUDA-only card cannot show",
        "there, and a line before the code says so. Every card then offers two buttons:",
        f"“{words['lock_in']}” (once an answer is given) and “{words['skip']}”.",
        "Nothing the page shows only after the lock-in is here: the lesson's title and claim, its",
        "statements, which code falls in the pitfall and which avoids it, and the verdict's rule.",
        "",
        f"{len(gpu_cards)} cards; on a CPU server {len(not_here)} of them cannot show their effect "
        f"({', '.join(not_here)}).",
        "",
    ]
    for i, (gpu, cpu) in enumerate(zip(gpu_cards, cpu_cards), 1):
        assert gpu["id"] == cpu["id"], (gpu["id"], cpu["id"])
        out += [f"## {gpu['id']}", "", "On a GPU server:", ""]
        out += shown(gpu, i, words)
        diff = differences(gpu, cpu, i, words)
        out += (["On a CPU server, what differs:", ""] + diff) if diff else ["A CPU server shows it the same.", ""]
    return "\n".join(out).rstrip("\n") + "\n"


def listed(binary, device):
    # The device is named, so the listing is the same on any machine.
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    run = subprocess.run([binary, "pitfall", "list", "--json", "--device", device], check=True, capture_output=True, text=True, env=env)
    return json.loads(run.stdout)


def main():
    binary = sys.argv[1]
    check = "--check" in sys.argv[2:]
    words = page_words()
    text = render(listed(binary, "cuda"), listed(binary, "cpu"), words)
    if check:
        current = open(DOC).read() if os.path.exists(DOC) else ""
        if current != text:
            sys.exit(f"error: docs/questions.md is not what the cards say: run scripts/questions-doc.py {binary}")
        print("docs/questions.md matches the cards")
        return
    open(DOC, "w").write(text)
    print(f"wrote {DOC}")


if __name__ == "__main__":
    main()
