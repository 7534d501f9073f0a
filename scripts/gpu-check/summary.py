# The GPU check's one summary (scripts/gpu-check.sh's `summary`): summary.json from the steps
# recorded so far, in the scratch folder, then the scratch folder packed into the returned
# folder's tarball and summary.json written beside it (returned.py). With COMPLETE "yes" it
# also tests the returned folder against what the device machine sends back, fails the
# check when it would not come back whole, and prints the verdict in one line.
# argv: STEPS_JSONL SUMMARY_JSON MODE SECONDS HERE COMPLETE BUDGET RETURNED_DIR
import json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import returned as ret

results, summary, mode, seconds, here, complete, budget, back = sys.argv[1:9]
steps = [json.loads(l) for l in open(results) if l.strip()]
manifest = {}
if os.path.exists(os.path.join(here, "bundle.json")):
    manifest = json.load(open(os.path.join(here, "bundle.json")))
failed = [s["name"] for s in steps if s["status"] == "fail" or (s["required"] and s["status"] != "pass")]
doc = {"pass": complete == "yes" and bool(steps) and not failed,
       "complete": complete == "yes", "mode": mode, "dry_run": mode == "dry", "seconds": int(seconds),
       "budget_s": int(budget), "commit": manifest.get("commit", "unknown"), "bundle_bytes": manifest.get("bytes"),
       "build": manifest.get("build"), "failed": failed,
       "skipped": [f'{s["name"]}: {s["detail"]}' for s in steps if s["status"] == "skipped"],
       "steps": steps}


def write(path):
    tmp = path + ".tmp"
    json.dump(doc, open(tmp, "w"), indent=1)
    os.replace(tmp, path)


write(summary)
size, left_out = ret.pack(os.path.dirname(summary), back)
doc["files"] = {"tarball": ret.TARBALL, "tarball_bytes": size, "left_out": left_out}
if complete == "yes":
    write(os.path.join(back, "summary.json"))
    wrong = ret.problems(back)
    doc["files"]["would_come_back_whole"] = not wrong
    if wrong:
        doc["pass"] = False
        doc["files"]["problems"] = wrong
write(os.path.join(back, "summary.json"))
if complete == "yes":
    print(json.dumps({"pass": doc["pass"], "seconds": doc["seconds"], "steps": {s["name"]: s["status"] for s in steps},
                      "files": doc["files"]}))
    sys.exit(0 if doc["pass"] else 1)
