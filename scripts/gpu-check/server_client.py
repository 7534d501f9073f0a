# The server-check step's client (gpu-check/server-check.sh): recorded runs through the API,
# then the worker's health. Any request that fails (refused, unreachable, not JSON) is a
# failure with its reason, never a crash.
# argv: base URL, device, the specs (a JSON list). Exits 1 when a run failed or leaked, or
# the worker's leak check failed. `--self-test` checks its peak rule on made-up reports.
#
# The peak rule compares what is comparable, by the one byte rule of the project
# (protocol/src/bytes_rule.rs, whose constants are copied here and held equal by
# engine/tests/gpu_check_script.rs): two peaks of the same computation agree exactly on the
# CPU, and on CUDA within the larger of 1% and 2 MiB (the caching allocator may hand a
# request above 1 MiB a cached block up to 1 MiB larger, counted whole, and cuDNN's
# workspace comes from the same large pool). An eager run's traced pass is one more pass of
# the same kind: its peak is the run's. A CUDA graph run's timed iterations are replays,
# which allocate nothing (the graph's pool was filled at capture), and its traced pass is an
# eager pass made after the graph is dropped: the replays' peak is at most that pass's, and
# that pass's peak is the eager twin's (the same spec without the graph, run before it).
import json, math, sys, time, urllib.error, urllib.request
SAME_BYTES_WITHIN = 0.01
CUDA_PEAK_FLOOR = 2 * (1 << 20)
def peak_slack(a, b, device):
    return 0 if device == "cpu" else max(math.ceil(max(a, b) * SAME_BYTES_WITHIN), CUDA_PEAK_FLOOR)
def same_peak(a, b, device):
    return abs(a - b) <= peak_slack(a, b, device)
def peak_problems(rid, graph, tpeak, rpeak, twin_rpeak, device):
    if not graph:
        return [] if same_peak(tpeak, rpeak, device) else [f"run {rid}: trace peak {tpeak} B vs run peak {rpeak} B (more than {peak_slack(tpeak, rpeak, device)} B apart)"]
    out = []
    if rpeak > tpeak + peak_slack(tpeak, rpeak, device):
        out.append(f"run {rid}: its graph replays peaked at {rpeak} B, above its eager traced pass ({tpeak} B)")
    if twin_rpeak is not None and not same_peak(tpeak, twin_rpeak, device):
        out.append(f"run {rid}: its eager traced pass peaked at {tpeak} B, the eager run of the same spec at {twin_rpeak} B (more than {peak_slack(tpeak, twin_rpeak, device)} B apart)")
    return out
if sys.argv[1] == "--self-test":
    M = 1 << 20
    cases = [((False, 100, 100, None, "cpu"), 0), ((False, 100, 101, None, "cpu"), 1),
             # ResNet-18 at batch 1 on CUDA: an unsplit 1 MiB remainder is no difference.
             ((False, 20 * M, 21 * M, None, "cuda"), 0), ((False, 20 * M, 30 * M, None, "cuda"), 1),
             ((True, 20 * M, 2 * M, 21 * M, "cuda"), 0), ((True, 20 * M, 2 * M, None, "cuda"), 0),
             ((True, 20 * M, 30 * M, 20 * M, "cuda"), 1), ((True, 20 * M, 2 * M, 12 * M, "cuda"), 1),
             ((True, 4096 * M, 2 * M, 4096 * M + 40 * M, "cuda"), 0), ((True, 4096 * M, 2 * M, 4096 * M + 42 * M, "cuda"), 1)]
    wrong = [(c, n, peak_problems("r", *c)) for c, n in cases if len(peak_problems("r", *c)) != n]
    print(json.dumps({"peak_rule_cases": len(cases), "wrong": [repr(w) for w in wrong]}))
    sys.exit(1 if wrong else 0)
base, device, specs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
problems = []
eager_peaks = {}
def twin_key(spec):
    adv = {k: v for k, v in (spec.get("advanced") or {}).items() if k != "cuda_graph"}
    return json.dumps({**{k: v for k, v in spec.items() if k != "advanced"}, "advanced": adv}, sort_keys=True)
def call(path, body=None):
    req = urllib.request.Request(base + path, data=None if body is None else json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            body = r.read()
            try:
                return r.status, json.loads(body or b"null")
            except ValueError:
                return r.status, body.decode(errors="replace")  # /healthz answers "ok"
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read() or b"null")
        except ValueError:
            return e.code, None
    except (OSError, ValueError) as e:
        return None, {"error": {"message": str(e)}}
def reason(answer):
    if isinstance(answer, dict) and isinstance(answer.get("error"), dict):
        return answer["error"].get("message", "")
    return repr(answer)[:200]
for _ in range(120):
    if call("/healthz")[0] == 200: break
    time.sleep(0.25)
else:
    problems.append("the server did not answer /healthz")
out = {"runs": []}
for spec in specs:
    expect_refusal = spec.pop("expect_refusal", None)
    spec = {**spec, "device": device}
    status, created = call("/api/runs", spec)
    run = {"spec": spec, "submit_status": status}
    out["runs"].append(run)
    if expect_refusal:
        # Refused up front with a 4xx naming why (e.g. CUDA graphs on a CPU).
        if status is None or not 400 <= status < 500 or expect_refusal not in reason(created):
            problems.append(f"POST /api/runs {spec}: expected a 4xx naming {expect_refusal!r}, got {status}: {reason(created)}")
        run["refused"] = reason(created)
        continue
    if status != 202 or not isinstance(created, dict) or "id" not in created:
        problems.append(f"POST /api/runs {spec}: {status}: {reason(created)}")
        continue
    rid = run["id"] = created["id"]
    code, report = None, None
    for _ in range(200):
        code, report = call("/api/runs/" + rid)
        if code != 409: break
        time.sleep(0.1)
    run["status"] = code
    if code != 200 or not isinstance(report, dict):
        problems.append(f"run {rid}: {code}: {reason(report)}")
        continue
    mem = report.get("memory", {})
    run.update(leaked_bytes=mem.get("leaked_bytes"), baseline_bytes=mem.get("baseline_bytes"),
               peak_above_baseline_bytes=mem.get("peak_above_baseline_bytes"),
               p50_ms=report.get("latency_ms", {}).get("p50"), memory_source=mem.get("source"))
    leaked = mem.get("leaked_bytes")
    if leaked:
        problems.append(f"run {rid} leaked {leaked} B")
    # The traced pass: a trace at every module boundary whose peak is the peak of the run
    # (by the peak rule above), the FLOP/s figures, and the memory breakdown with its parts.
    trace = report.get("trace") or []
    tpeak = max([max(p.get("peak_above_baseline_bytes", 0), p.get("allocated_above_baseline_bytes", 0)) for p in trace] or [0])
    rpeak = mem.get("peak_above_baseline_bytes") or 0
    breakdown = report.get("memory_breakdown") or {}
    run.update(trace_points=len(trace), trace_peak_bytes=tpeak, flops=report.get("flops"),
               achieved_tflops=report.get("achieved_tflops"), percent_of_peak=report.get("percent_of_peak"),
               peak_source=report.get("peak_source"),
               memory_breakdown={p.get("label"): p.get("bytes") for p in breakdown.get("parts", [])},
               driver_used_bytes=breakdown.get("total_bytes"))
    graph = bool((spec.get("advanced") or {}).get("cuda_graph"))
    twin = eager_peaks.get(twin_key(spec)) if graph else None
    run.update(cuda_graph=graph, eager_twin_peak_bytes=twin)
    if not graph:
        eager_peaks[twin_key(spec)] = rpeak
    if not trace:
        problems.append(f"run {rid}: no traced pass")
    else:
        problems.extend(peak_problems(rid, graph, tpeak, rpeak, twin, device))
    if not breakdown.get("parts"):
        problems.append(f"run {rid}: no memory breakdown")
code, health = call("/api/health")
out["health"] = health
if code != 200 or not isinstance(health, dict):
    problems.append(f"GET /api/health: {code}: {reason(health)}")
elif health.get("memory_check_failures", 0) != 0:
    failures, checks = health.get("memory_check_failures"), health.get("last_checks")
    problems.append(f"the worker leak check failed {failures} times: {checks}")
out["problems"] = problems
print(json.dumps(out))
if problems:
    print("\n".join(problems), file=sys.stderr)
    sys.exit(1)
