# The generate step's figures (gpu-check/generate.sh: generate_summary) from the runs' reports;
# exits 1 on a problem, written to stderr.
# argv: PAIR=REPORT_JSON...
import json, sys
out = []
for arg in sys.argv[1:]:
    pair, path = arg.split("=", 1)
    r = json.load(open(path)); g = r["generation"]
    adv = r["spec"].get("advanced", {})
    out.append({"pair": pair, "model": r["spec"]["model"], "weights": adv.get("dtype", adv.get("weights", "fp32")),
                "cuda_graph": adv.get("cuda_graph", False),
                "batch": g["batch"], "cache": g["cache"], "prefill_ms": g["prefill_ms"],
                "decode_p50_ms": (g.get("decode_ms_per_token") or {}).get("p50"),
                "tokens_per_s_total": g.get("tokens_per_s_total"), "kv_cache_bytes": g.get("kv_cache_bytes"),
                "kv_formula_bytes": g.get("kv_cache_formula_bytes"), "bandwidth_gb_s": g.get("decode_bandwidth_gb_s"),
                "bandwidth_percent": g.get("decode_bandwidth_percent"), "bandwidth_source": g.get("bandwidth_source"),
                "attention": g.get("attention"), "decode_graph": g.get("decode_graph"),
                "tokens": g.get("tokens"),
                "peak_allocated_bytes": r["memory"]["peak_allocated_bytes"], "device": r["env"]["device_name"]})
problems, pairs = [], {}
for o in out:
    what = f'{o["model"]} {o["weights"]} batch {o["batch"]} {o["cache"]}{" graph" if o["cuda_graph"] else ""}'
    if o["cuda_graph"] and not o["decode_graph"]:
        problems.append(f"{what}: CUDA graph replay was asked for but the decode steps ran eagerly")
    if not o["attention"]:
        problems.append(f"{what}: the report names no SDPA backend")
    elif (o["attention"].get("decode") or "") == "cudnn":
        problems.append(f"{what}: decode ran cuDNN attention (a plan per key length)")
    if o["kv_cache_bytes"] != o["kv_formula_bytes"]:
        problems.append(f'{what}: the KV cache holds {o["kv_cache_bytes"]} B, its formula says {o["kv_formula_bytes"]} B')
    pairs.setdefault(o["pair"], []).append(o)
agree = {}
for name, runs in pairs.items():
    if len(runs) == 2:
        a, b = runs
        agree[name] = {"runs": [f'{r["cache"]}{" graph" if r["cuda_graph"] else " eager"}' for r in runs],
                       "same_tokens": a["tokens"] == b["tokens"],
                       "first_difference": next((i for i, (x, y) in enumerate(zip(a["tokens"][0], b["tokens"][0])) if x != y), None)}
for o in out:
    del o["tokens"]
print(json.dumps({"runs": out, "pairs": agree, "problems": problems}))
if problems:
    print("\n".join(problems), file=sys.stderr)
    sys.exit(1)
