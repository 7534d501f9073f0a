# What comes back from a GPU visit: the device machine returns at most 8 files from OUT_DIR,
# each at most 16 MiB, 64 MiB together, no deeper than two folders, each file and folder
# named in letters, digits, '.', '_' and '-' alone. `pack` puts a scratch folder into one
# tarball within those limits; `problems` tests a folder against them. summary.py calls both
# after every step; scripts/test.sh runs `python3 returned.py OUT_DIR` on the rehearsal's.
import os, re, sys, tarfile

MAX_FILES = 8
MAX_FILE = 16 << 20
MAX_TOTAL = 64 << 20
MAX_DEPTH = 2  # folders between OUT_DIR and a file
# The tarball's files, uncompressed, stay under this: compression only shrinks them, so
# the tarball stays under MAX_FILE whatever they hold.
PACK_LIMIT = 15 << 20
NAME = re.compile(r"^[A-Za-z0-9._-]+$")
TARBALL = "gpu-check-files.tar.gz"


def pack(work, returned):
    """Writes returned/TARBALL from every file under `work`, smallest first, leaving out what
    would take the uncompressed total past PACK_LIMIT; returns (tarball bytes, left out)."""
    files = []
    for root, _, names in os.walk(work):
        for n in names:
            p = os.path.join(root, n)
            if os.path.isfile(p) and not os.path.islink(p):
                files.append((os.path.getsize(p), os.path.relpath(p, work)))
    files.sort()
    kept, left_out, total = [], [], 0
    for size, rel in files:
        if total + size <= PACK_LIMIT:
            kept.append(rel)
            total += size
        else:
            left_out.append(f"{rel} ({size} B)")
    tmp = os.path.join(returned, TARBALL + ".tmp")
    with tarfile.open(tmp, "w:gz") as t:
        for rel in sorted(kept):
            t.add(os.path.join(work, rel), arcname=rel)
    os.replace(tmp, os.path.join(returned, TARBALL))
    return os.path.getsize(os.path.join(returned, TARBALL)), left_out


def problems(folder):
    """What would not come back whole from `folder`."""
    out, count, total = [], 0, 0
    for root, dirs, names in os.walk(folder):
        rel_root = os.path.relpath(root, folder)
        depth = 0 if rel_root == "." else rel_root.count(os.sep) + 1
        for d in dirs:
            if not NAME.match(d):
                out.append(f"folder {os.path.join(rel_root, d)}: a name of other characters than letters, digits, '.', '_', '-'")
        for n in names:
            p, rel = os.path.join(root, n), os.path.normpath(os.path.join(rel_root, n))
            count += 1
            if os.path.islink(p) or not os.path.isfile(p):
                out.append(f"{rel}: not a plain file")
                continue
            size = os.path.getsize(p)
            total += size
            if not NAME.match(n):
                out.append(f"{rel}: a name of other characters than letters, digits, '.', '_', '-'")
            if size > MAX_FILE:
                out.append(f"{rel}: {size} B, over {MAX_FILE} B")
            if depth > MAX_DEPTH:
                out.append(f"{rel}: {depth} folders down, over {MAX_DEPTH}")
    if count > MAX_FILES:
        out.append(f"{count} files, over {MAX_FILES}")
    if total > MAX_TOTAL:
        out.append(f"{total} B in all, over {MAX_TOTAL} B")
    return out


if __name__ == "__main__":
    found = problems(sys.argv[1])
    print("\n".join(found) or f"{sys.argv[1]}: would come back whole")
    sys.exit(1 if found else 0)
