# One line of the GPU check's steps.jsonl (scripts/gpu-check.sh's `record`).
# argv: NAME REQUIRED|optional STATUS SECONDS LIMIT DETAIL [FIGURES_JSON]
import json, sys
figs = sys.argv[7] if len(sys.argv) > 7 and sys.argv[7] else "{}"
try:
    figs = json.loads(figs)
except ValueError:
    figs = {"unparsed": figs[:2000]}
print(json.dumps({"name": sys.argv[1], "required": sys.argv[2] == "required", "status": sys.argv[3],
                  "seconds": int(sys.argv[4]), "limit_s": int(sys.argv[5]), "detail": sys.argv[6], "figures": figs}))
