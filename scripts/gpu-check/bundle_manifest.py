# The --bundle half of scripts/gpu-check.sh: bundle.json, the bundle's manifest (commit, sizes,
# sha256 of every file, what the build can do on a GPU).
# argv: BUNDLE_DIR COMMIT UNCOMMITTED_CHANGES BUILD_JSON
import datetime, hashlib, json, os, sys
root, commit, dirty, build = sys.argv[1], sys.argv[2], int(sys.argv[3] or 0), json.loads(sys.argv[4])
files = {}
for d, _, names in os.walk(root):
    for n in sorted(names):
        p = os.path.join(d, n)
        rel = os.path.relpath(p, root)
        files[rel] = {"bytes": os.path.getsize(p), "sha256": hashlib.sha256(open(p, "rb").read()).hexdigest()}
json.dump({"commit": commit, "uncommitted_changes": dirty,
           "built_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "build": build, "files": files, "bytes": sum(f["bytes"] for f in files.values())},
          open(os.path.join(root, "bundle.json"), "w"), indent=1)
