#!/usr/bin/env python3
"""Checks that every relative link and backticked repository path in README.md and
docs/**/*.md (docs/development/ too) resolves.

A link is a Markdown link or image (`[text](target)`, `![alt](target)`, `[label]: target`)
or an HTML `href=`/`src=` attribute, outside fenced code blocks and inline code. For each
one that is not a URL with a scheme (https:, mailto:, ...):
  - the file or directory it names must exist, relative to the Markdown file;
  - a `#anchor` must be a heading of the target Markdown file (or of the file itself for a
    bare `#anchor`), as GitHub makes heading slugs: lower-cased, punctuation other than `-`
    and `_` dropped, spaces to `-`, a repeated slug suffixed `-1`, `-2`, ...

Repository paths written as inline code are checked too, since a file that moves leaves
them behind as surely as a link: a backticked token with a `/` in it must exist when
  - its first segment is a top-level folder of the repository (`engine/tests/device/`,
    `server/src/router.rs`): relative to the repository's root;
  - or it names a file (an extension at its end) under no top-level folder, as a table
    of one crate writes `dispatch/fleet.rs`: it must end the path of a tracked file.
Not checked: URLs and absolute or home paths (`/api/info`, `~/.cache/gradless`), the
ignored build outputs (`target/site`), and tokens with a placeholder or a pattern in them
(`paths/NAME.toml`, `OUT_DIR/x.json`, `/runs/{id}.png`, `<hash>`, `*`, `...`). A `:LINE` after a path is
dropped before the check.

Usage: scripts/check-links.py [FILE.md ...]   (default: README.md and docs/**/*.md)
Exits 1 and lists every broken link or path, with its file and line, when one does not
resolve. Python 3 standard library only (and `git ls-files` for the tracked files, read
from the work tree when git is not there); runs in well under a second.
"""

import os
import re
import subprocess
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


INLINE_TOKEN = re.compile(r"(`+)\s*([^`\s]+?)\s*\1")
# A path's line or range after it (`server/src/router.rs:42`, `:10-20`).
LINE_SUFFIX = re.compile(r":\d+(?:-\d+)?$")
# Placeholders and patterns: the token names no one file.
NOT_ONE_PATH = re.compile(r"[<>{}*?=|()\[\],;…]|\.\.\.|://")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]+$")  # `NAME`, `OUT_DIR`, in a segment or a file's stem
CAPITAL_NAMES = {"README", "LICENSE", "CHANGELOG", "CONTRIBUTING", "ARCHITECTURE", "SECURITY", "NOTICE"}
EXTENSION = re.compile(r"\.[A-Za-z0-9]+$")

_tracked = None


def tracked():
    """The tracked files' paths, relative to the root (every file but the ignored build
    outputs when git is not there)."""
    global _tracked
    if _tracked is None:
        try:
            out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
            _tracked = [p for p in out.stdout.decode("utf-8").split("\0") if p]
        except (OSError, subprocess.CalledProcessError):
            _tracked = [
                os.path.relpath(os.path.join(d, f), ROOT)
                for d, dirs, files in os.walk(ROOT)
                if not (dirs.__setitem__(slice(None), [x for x in dirs if not x.startswith(".") and x not in ("target", "node_modules")]))
                for f in files
            ]
    return _tracked


def top_level_folders():
    """The repository's top-level folders: the first segment of a tracked file's path."""
    return {p.split("/", 1)[0] for p in tracked() if "/" in p}


def ignored_top_level():
    """Top-level names the repository ignores (`/target` in .gitignore): build outputs a
    document may name, never in a clone."""
    names = set()
    gitignore = ROOT / ".gitignore"
    if gitignore.exists():
        for line in gitignore.read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if line.startswith("/") and "/" not in line[1:].rstrip("/"):
                names.add(line[1:].rstrip("/"))
    return names


def code_paths(path):
    """(line number, path) of every backticked token that names a repository path."""
    top, ignored = top_level_folders(), ignored_top_level()
    fence = None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
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
        for _, token in INLINE_TOKEN.findall(line):
            token = LINE_SUFFIX.sub("", token.rstrip(".,:;"))
            if token.startswith("./"):
                token = token[2:]
            if "/" not in token or token.startswith(("/", "~", "$", "-")) or NOT_ONE_PATH.search(token):
                continue
            segments = [s for s in token.split("/") if s]
            stems = [s.split(".", 1)[0] for s in segments]
            if not segments or any(PLACEHOLDER.match(s) and s not in CAPITAL_NAMES for s in stems):
                continue
            first = segments[0]
            if first in top or (EXTENSION.search(segments[-1]) and first not in ignored):
                yield number, token


def check_code_path(path, number, token):
    """A message when a backticked repository path names nothing."""
    where = f"{os.path.relpath(path, ROOT)}:{number}: `{token}`"
    if token.split("/", 1)[0] in top_level_folders():
        if not (ROOT / token).exists():
            return f"{where}: no such file or folder in the repository"
        return None
    bare = token.rstrip("/")
    if (path.parent / bare).exists() or any(p == bare or p.endswith("/" + bare) for p in tracked()):
        return None
    return f"{where}: no tracked file's path ends so"


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
    for number, token in code_paths(path):
        message = check_code_path(path, number, token)
        if message:
            broken.append(message)
    return broken


def main(argv):
    files = [Path(a).resolve() for a in argv] or [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    broken, count, paths = [], 0, 0
    for path in files:
        count += sum(1 for _ in links(path))
        paths += sum(1 for _ in code_paths(path))
        broken.extend(check(path))
    for message in broken:
        print(f"broken: {message}", file=sys.stderr)
    if broken:
        print(f"error: {len(broken)} broken link(s) or path(s) in {len(files)} file(s)", file=sys.stderr)
        return 1
    print(f"ok: {count} links and {paths} backticked paths in {len(files)} files resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
