# One line of the GPU check's steps.jsonl (scripts/gpu-check.sh's `record`).
# argv: NAME STATUS SECONDS LIMIT DETAIL [FIGURES_JSON]
import json,sys
figs = sys.argv[6] if len(sys.argv) > 6 and sys.argv[6] else "{}"
try:
    figs = json.loads(figs)
except ValueError:
    figs = {"unparsed": figs[:2000]}
print(json.dumps({"name": sys.argv[1], "status": sys.argv[2], "seconds": int(sys.argv[3]),
                  "limit_s": int(sys.argv[4]), "detail": sys.argv[5], "figures": figs}))
