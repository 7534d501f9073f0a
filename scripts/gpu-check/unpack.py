# The unpack step (gpu-check/host.sh): checks every file of the bundle against bundle.json and
# unpacks the xz-compressed binaries into BIN_DIR (Python's lzma: no xz needed on the host).
# argv: BUNDLE_DIR BIN_DIR
import hashlib, json, lzma, os, shutil, sys, time
here, bindir = sys.argv[1], sys.argv[2]
manifest = json.load(open(os.path.join(here, "bundle.json")))
t = time.time()
for rel, f in manifest["files"].items():
    p = os.path.join(here, rel)
    if hashlib.sha256(open(p, "rb").read()).hexdigest() != f["sha256"]:
        sys.exit(f"{rel}: its sha256 differs from bundle.json (a damaged copy)")
out = {}
for name in ("gradless", "device-tests"):
    dest = os.path.join(bindir, name)
    with lzma.open(os.path.join(here, "bin", name + ".xz")) as src, open(dest, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    os.chmod(dest, 0o755)
    out[name + "_bytes"] = os.path.getsize(dest)
out.update(commit=manifest["commit"], built_at=manifest["built_at"], bundle_bytes=manifest["bytes"],
           build=manifest.get("build"), seconds=round(time.time() - t, 1))
print(json.dumps(out))
