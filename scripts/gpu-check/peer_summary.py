# The peer-compare step's figures (gpu-check/peer-compare.sh): bench/compare.py's summary, and
# whether it showed what the step is for: every config measured by both sides (Gradless and
# Python PyTorch) at least once, with a finite p50 and peak. Exits 1 otherwise, each problem
# on stderr.
# argv: PEER_JSON
import json, math, sys
d = json.load(open(sys.argv[1]))
rows, problems = d.get("summary") or [], []
if not rows:
    problems.append("bench/compare.py measured no config")
for row in rows:
    for side in ("ours", "pytorch"):
        s = row.get(side) or {}
        p50, peak = s.get("p50_ms"), s.get("peak_above_baseline_bytes")
        if not s.get("ok"):
            problems.append(f"{row['config']}: no {side} run succeeded ({s.get('ok')}/{s.get('rounds')}): {'; '.join(s.get('errors') or [])[:300]}")
        elif not (isinstance(p50, (int, float)) and math.isfinite(p50) and p50 > 0 and isinstance(peak, (int, float))):
            problems.append(f"{row['config']}: {side} p50 {p50} ms, peak {peak} B")
print(json.dumps({"meta": d.get("meta"), "rows": [{"config": r["config"], "latency_ratio": r.get("latency_ratio"),
                  "memory_ratio": r.get("memory_ratio"), "ours_p50_ms": (r.get("ours") or {}).get("p50_ms"),
                  "pytorch_p50_ms": (r.get("pytorch") or {}).get("p50_ms"),
                  "ours_memory_source": (r.get("ours") or {}).get("memory_source"),
                  "pytorch_memory_source": (r.get("pytorch") or {}).get("memory_source")} for r in rows],
                  "problems": problems}))
if problems:
    print("\n".join(problems), file=sys.stderr)
    sys.exit(1)
