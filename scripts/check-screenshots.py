#!/usr/bin/env python3
"""Checks that every picture the docs show is one end2end/screenshots.mjs takes (issue 65:
every screenshot comes from today's build, retaken, never edited).

Reads the files the script writes from `node end2end/screenshots.mjs --list` (no browser;
well under a second), then, in README.md and docs/**/*.md outside fenced code blocks and
inline code, every image (`![alt](target)`, `<img src="target">`) and every link to a
picture (`[screenshot](x.png)`) whose target is not a URL with a scheme. Each must
  - resolve to docs/NAME, with NAME one the script lists;
and each file the script lists must exist in docs/ and be shown by some doc, and each
picture in docs/ must be one the script lists, so that no picture is kept that nothing shows
or that nothing retakes (a scene the docs dropped goes with its file).

Usage: scripts/check-screenshots.py [--self-test]
Exits 1 listing each picture no scene takes, each listed file missing, each unshown one.
"""

import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
# A Markdown image or link (`![alt](t)`, `[text](t)`), or an HTML src attribute.
TARGET = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|\bsrc=\"([^\"]+)\"")
PICTURE = re.compile(r"\.(png|jpe?g|gif|svg|webp)$", re.I)


def listed(root):
    """The files end2end/screenshots.mjs writes, from its --list."""
    out = subprocess.run(["node", str(root / "end2end/screenshots.mjs"), "--list"],
                         capture_output=True, text=True, check=True).stdout
    return {line.split("\t")[0] for line in out.splitlines() if line.strip()}


def shown(root, docs):
    """(doc, line, target, resolved path) for every local picture the docs show."""
    for md in docs:
        fenced = None
        for n, line in enumerate(md.read_text(encoding="utf-8").splitlines(), 1):
            m = FENCE.match(line)
            if m:
                fenced = None if fenced and m.group(1)[0] == fenced else (fenced or m.group(1)[0])
                continue
            if fenced:
                continue
            for m in TARGET.finditer(INLINE_CODE.sub("", line)):
                target = (m.group(1) or m.group(2)).split("#")[0]
                is_image = m.group(0).startswith(("!", "src="))
                if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or not target:
                    continue
                if is_image or PICTURE.search(target):
                    yield md.relative_to(root), n, target, (md.parent / target).resolve()


def check(root, names):
    docs = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    docs_dir = (root / "docs").resolve()
    errors, seen = [], set()
    for md, n, target, path in shown(root, [d for d in docs if d.exists()]):
        if path.parent != docs_dir or path.name not in names:
            errors.append(f"{md}:{n}: {target} is not a picture end2end/screenshots.mjs takes "
                          "(add a scene that writes it: docs/ pictures are retaken, never edited)")
        seen.add(path.name)
    for name in sorted(names):
        if not (docs_dir / name).exists():
            errors.append(f"docs/{name}: listed by end2end/screenshots.mjs but missing "
                          f"(GRADLESS_URL=... node end2end/screenshots.mjs --only {name})")
        elif name not in seen:
            errors.append(f"docs/{name}: taken by end2end/screenshots.mjs but shown by no doc "
                          "(drop its scene and the file)")
    for path in sorted(docs_dir.rglob("*")):
        if PICTURE.search(path.name) and path.name not in names:
            errors.append(f"{path.relative_to(root.resolve())}: a picture in docs/ that end2end/screenshots.mjs "
                          "does not take (add its scene, or remove it)")
    return errors


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "docs").mkdir()
        for name in ("a.png", "b.png"):
            (root / "docs" / name).write_bytes(b"")
        (root / "README.md").write_text("![a](docs/a.png)\n```\n![not read](docs/z.png)\n```\n")
        (root / "docs/guide.md").write_text('<img src="b.png" width="200"> `![code](y.png)` ![web](https://x/y.png)\n')
        assert check(root, {"a.png", "b.png"}) == [], check(root, {"a.png", "b.png"})
        # A doc embedding a picture no scene takes fails, as does a linked one.
        (root / "docs/more.md").write_text("![c](c.png) and [screenshot](d.png)\n")
        errs = check(root, {"a.png", "b.png"})
        assert len(errs) == 2 and "c.png" in errs[0] and "d.png" in errs[1], errs
        (root / "docs/more.md").write_text("nothing shown\n")
        # A listed file missing, or one no doc shows, fails.
        errs = check(root, {"a.png", "b.png", "e.png"})
        assert len(errs) == 1 and "docs/e.png" in errs[0] and "missing" in errs[0], errs
        (root / "docs/guide.md").write_text("no picture\n")
        errs = check(root, {"a.png", "b.png"})
        assert len(errs) == 1 and "docs/b.png" in errs[0] and "no doc" in errs[0], errs
        # A picture outside docs/ is not one the script writes, even with a listed name.
        (root / "README.md").write_text("![a](a.png)\n")
        (root / "a.png").write_bytes(b"")
        errs = check(root, {"a.png"})
        assert any("README.md:1: a.png" in e for e in errs), errs
        # A picture kept in docs/ that no scene takes fails.
        (root / "README.md").write_text("![a](docs/a.png)\n")
        errs = check(root, {"a.png"})
        assert len(errs) == 1 and "docs/b.png" in errs[0] and "does not take" in errs[0], errs
    # The script's own list reads (node, no browser) and names pictures only.
    names = listed(ROOT)
    assert names and all(PICTURE.search(n) for n in names), names
    print("ok: self-test")


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    names = listed(ROOT)
    errors = check(ROOT, names)
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        sys.exit(1)
    print(f"ok: every picture the docs show is one of the {len(names)} end2end/screenshots.mjs takes")


if __name__ == "__main__":
    main()
