#!/usr/bin/env python3
"""Checks that every relative link in README.md and docs/*.md resolves.

A link is a Markdown link or image (`[text](target)`, `![alt](target)`, `[label]: target`)
or an HTML `href=`/`src=` attribute, outside fenced code blocks and inline code. For each
one that is not a URL with a scheme (https:, mailto:, ...):
  - the file or directory it names must exist, relative to the Markdown file;
  - a `#anchor` must be a heading of the target Markdown file (or of the file itself for a
    bare `#anchor`), as GitHub makes heading slugs: lower-cased, punctuation other than `-`
    and `_` dropped, spaces to `-`, a repeated slug suffixed `-1`, `-2`, ...

Usage: scripts/check-links.py [FILE.md ...]   (default: README.md and docs/*.md)
Exits 1 and lists every broken link, with its file and line, when one does not resolve.
Python 3 standard library only; runs in well under a second.
"""

import os
import re
import sys
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parent.parent

FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target "title") and ![alt](target); the text may hold one level of brackets
# (an image inside a link). The target stops at whitespace or the closing parenthesis.
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HTML_ATTR = re.compile(r"""\b(?:href|src)\s*=\s*["']([^"']+)["']""", re.IGNORECASE)
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"""<a\s+[^>]*(?:name|id)\s*=\s*["']([^"']+)["']""", re.IGNORECASE)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def strip_code(lines):
    """Yields (line number, text) outside fenced code blocks, with inline code blanked."""
    fence = None
    for number, line in enumerate(lines, 1):
        match = FENCE.match(line)
        if match:
            marker = match.group(1)
            if fence is None:
                fence = marker[0] * 3
            elif marker.startswith(fence):
                fence = None
            continue
        if fence is None:
            yield number, INLINE_CODE.sub(lambda m: " " * len(m.group(0)), line)


def slug(heading):
    """GitHub's anchor for a heading's text."""
    text = INLINE_CODE.sub(lambda m: m.group(0).strip("`"), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text, not its target
    text = re.sub(r"<[^>]+>", "", text)  # HTML tags
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)  # \w keeps letters, digits and `_` in any script
    return text.replace(" ", "-")


_anchors = {}


def anchors(path):
    """Every anchor a Markdown file defines: its headings' slugs and explicit <a id/name>."""
    if path not in _anchors:
        found, seen = set(), {}
        lines = path.read_text(encoding="utf-8").splitlines()
        fence = None
        for line in lines:
            match = FENCE.match(line)
            if match:
                marker = match.group(1)
                if fence is None:
                    fence = marker[0] * 3
                elif marker.startswith(fence):
                    fence = None
                continue
            if fence is not None:
                continue
            heading = HEADING.match(line)
            if heading:
                base = slug(heading.group(2))
                count = seen.get(base, 0)
                seen[base] = count + 1
                found.add(base if count == 0 else f"{base}-{count}")
            found.update(HTML_ANCHOR.findall(line))
        _anchors[path] = found
    return _anchors[path]


def links(path):
    """(line number, target) of every link in a Markdown file."""
    for number, line in strip_code(path.read_text(encoding="utf-8").splitlines()):
        for target in INLINE_LINK.findall(line):
            yield number, target
        definition = REFERENCE_DEF.match(line)
        if definition:
            yield number, definition.group(1)
        for target in HTML_ATTR.findall(line):
            yield number, target


def check(path):
    """The broken links of one file, as messages."""
    broken = []
    for number, target in links(path):
        if SCHEME.match(target) or target.startswith("//"):
            continue  # a URL: not checked here (no network)
        name, _, anchor = target.partition("#")
        name = unquote(name.split("?", 1)[0])
        where = f"{os.path.relpath(path, ROOT)}:{number}: {target}"
        dest = path if name == "" else (path.parent / name).resolve()
        if name.startswith("/"):
            broken.append(f"{where}: an absolute path (GitHub reads it from the site's root)")
            continue
        if not dest.exists():
            broken.append(f"{where}: no such file")
            continue
        if ROOT in path.parents and ROOT not in dest.parents and dest != ROOT:
            broken.append(f"{where}: points outside the repository")
            continue
        if anchor:
            if dest.is_dir() or dest.suffix.lower() != ".md":
                broken.append(f"{where}: an anchor into something that is not Markdown")
            elif unquote(anchor).lower() not in anchors(dest):
                broken.append(f"{where}: no heading with the anchor #{anchor} in {os.path.relpath(dest, ROOT)}")
    return broken


def main(argv):
    files = [Path(a).resolve() for a in argv] or [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken, count = [], 0
    for path in files:
        count += sum(1 for _ in links(path))
        broken.extend(check(path))
    for message in broken:
        print(f"broken link: {message}", file=sys.stderr)
    if broken:
        print(f"error: {len(broken)} broken link(s) in {len(files)} file(s)", file=sys.stderr)
        return 1
    print(f"ok: {count} links in {len(files)} files resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
