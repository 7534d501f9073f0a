# The GPU check's one summary (scripts/gpu-check.sh's `summary`): OUT/summary.json from the
# steps recorded so far; with COMPLETE "yes" it also prints the verdict in one line.
# argv: STEPS_JSONL SUMMARY_JSON MODE SECONDS HERE COMPLETE
import json, os, sys
results, summary, mode, seconds, here, complete = sys.argv[1:7]
steps = [json.loads(l) for l in open(results) if l.strip()]
manifest = {}
if os.path.exists(os.path.join(here, "bundle.json")):
    manifest = json.load(open(os.path.join(here, "bundle.json")))
doc = {"pass": complete == "yes" and bool(steps) and all(s["status"] == "pass" for s in steps),
       "complete": complete == "yes", "mode": mode, "dry_run": mode == "dry", "seconds": int(seconds),
       "commit": manifest.get("commit", "unknown"), "bundle_bytes": manifest.get("bytes"),
       "build": manifest.get("build"), "steps": steps}
tmp = summary + ".tmp"
json.dump(doc, open(tmp, "w"), indent=1)
os.replace(tmp, summary)
if complete == "yes":
    print(json.dumps({"pass": doc["pass"], "seconds": doc["seconds"], "steps": {s["name"]: s["status"] for s in steps}}))
