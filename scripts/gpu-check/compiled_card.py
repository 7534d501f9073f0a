# One line of the compiled step's cards (gpu-check/compiled.sh), for a `gradless pitfall ID`
# run alone: its report, or the error it said.
# argv: CARD_ID START_SECONDS EXIT_STATUS REPORT_JSON STDERR_FILE
import json, sys, time
card, t0, rc, report, err = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
line = {"id": card, "seconds": round(time.time() - t0, 3)}
try:
    line["report"] = json.load(open(report)) if rc == 0 else None
except ValueError:
    line["report"] = None
if line["report"] is None:
    del line["report"]
    said = [l.strip() for l in open(err, errors="replace") if l.strip()]
    why = next((l for l in said if l.lower().startswith("error")), said[-1] if said else f"exit {rc}")
    line["error"] = why[:600] + (" (timed out)" if rc in (124, 137) else "")
print(json.dumps(line))
