#!/usr/bin/env bash
# The GPU check: a test, not a recorder. On a CUDA machine it checks the host first, then
# runs the engine's CUDA tests (the `cuda-tests` feature, one test thread), every pitfall
# experiment on CUDA (each must answer a report whose verdict is `confirmed`), the server
# (recorded CUDA runs through the API, no leak, the worker's leak check clean; each run's
# traced pass, FLOP/s and memory breakdown read and checked), generate runs on the 1B and
# 8B decoder shapes (dynamic against static cache) and the side by side against the
# PyTorch peer. It exits non-zero when any step fails and writes ONE
# summary, OUT_DIR/summary.json: {"pass": bool, "dry_run": bool, "seconds": n, "steps":
# [{"name", "status": "pass"|"fail"|"skipped", "seconds", "detail", "figures": {...}}]},
# next to each step's output and log. The whole check stays under six minutes
# (GPU_CHECK_BUDGET_S, default 345 s); a step that would start after the budget is spent
# is `skipped`, which fails the check.
#
# Host requirements (checked first, each with its own message):
#   - glibc 2.36 or newer (the binaries are built on Debian 12);
#   - an NVIDIA driver for CUDA 13 (580 or newer) and a GPU nvidia-smi can see;
#   - PyTorch 2.11 with CUDA in TORCH_VENV (default /opt/torch/.venv): its torch/lib holds
#     the libtorch the binaries load (libtorch_cuda.so, libc10_cuda.so), and its python
#     runs the peer.
#
# Usage:
#   scripts/gpu-check.sh [--dry-run] [--tests-dir DIR] [--gradless BIN] OUT_DIR
#   scripts/gpu-check.sh --build-tests DIR     (on the build machine, see below)
#
#   --tests-dir DIR  the engine's test binaries built with the cuda-tests feature (default
#                    $GPU_CHECK_TESTS_DIR, else target/gpu-tests). A GPU machine has no
#                    Rust toolchain and little time: build them where the code is built,
#                    with `scripts/gpu-check.sh --build-tests target/gpu-tests`, which runs
#                    `cargo test --release -p engine --features cuda-tests --no-run` and
#                    copies the binaries there, and carry that folder to the GPU machine.
#                    Each binary runs its `::cuda` tests (the per-device tests' CUDA half,
#                    engine/tests/common) with --test-threads=1: CUDA allocator statistics
#                    are per process, so tests in parallel would mix peaks and baselines.
#   --gradless BIN   the gradless binary (default: the first that exists of
#                    target/release/gradless, $CARGO_TARGET_DIR/release/gradless,
#                    ~/.cache/gradless/target/release/gradless).
#   --dry-run        exercises this script's own logic on any machine, without a GPU and
#                    without running anything heavy: arguments, the host checks (reported,
#                    not enforced), every step's bookkeeping, the server client's handling
#                    of failed requests (against a stub that refuses everything), and the
#                    summary. GPU_CHECK_DRY_FAIL=step,step makes those steps fail, to test
#                    the failure path. engine/tests/gpu_check_script.rs runs it.
set -uo pipefail

usage() {
  sed -n '/^# Usage:/,/^#   --dry-run/p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

DRY=0
TESTS_DIR="${GPU_CHECK_TESTS_DIR:-}"
GRADLESS=""
OUT_ARG=""
BUILD_TESTS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --tests-dir) [ $# -ge 2 ] || usage; TESTS_DIR="$2"; shift ;;
    --gradless) [ $# -ge 2 ] || usage; GRADLESS="$2"; shift ;;
    --build-tests) [ $# -ge 2 ] || usage; BUILD_TESTS="$2"; shift ;;
    -h|--help) usage ;;
    -*) echo "error: unknown option $1" >&2; usage ;;
    *) [ -z "$OUT_ARG" ] || { echo "error: one OUT_DIR only (got $OUT_ARG and $1)" >&2; usage; }
       OUT_ARG="$1" ;;
  esac
  shift
done

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if [ -n "$BUILD_TESTS" ]; then
  # The build machine's half: compile the CUDA test binaries and gather them.
  cd "$ROOT"
  source scripts/env.sh
  mkdir -p "$BUILD_TESTS"
  cargo test --release -p engine --features cuda-tests --no-run --message-format=json \
    | python3 -c '
import json, shutil, sys, os
dest = sys.argv[1]
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    exe = m.get("executable")
    if m.get("reason") == "compiler-artifact" and exe and m.get("profile", {}).get("test"):
        name = m["target"]["name"] + ("-lib" if m["target"]["kind"] == ["lib"] else "")
        shutil.copy2(exe, os.path.join(dest, name))
        print(os.path.join(dest, name))
' "$BUILD_TESTS"
  exit "${PIPESTATUS[0]}"
fi

[ -n "$OUT_ARG" ] || { echo "error: OUT_DIR is required" >&2; usage; }
mkdir -p "$OUT_ARG" || { echo "error: cannot create $OUT_ARG" >&2; exit 2; }
OUT="$(cd "$OUT_ARG" && pwd)"
cd "$ROOT"
TESTS_DIR="${TESTS_DIR:-target/gpu-tests}"

TORCH_VENV="${TORCH_VENV:-/opt/torch/.venv}"
PY="$TORCH_VENV/bin/python3"
TORCH_LIB=""
for d in "$TORCH_VENV"/lib/python3*/site-packages/torch/lib; do [ -d "$d" ] && TORCH_LIB="$d"; done
# The summary and the stub need only a plain python3; the peer needs the venv's.
JSONPY="$(command -v python3 || echo "$PY")"
[ $DRY -eq 1 ] && [ ! -x "$PY" ] && PY="$JSONPY"
[ -n "$TORCH_LIB" ] && export LD_LIBRARY_PATH="$TORCH_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

if [ -z "$GRADLESS" ]; then
  for candidate in target/release/gradless \
                   "${CARGO_TARGET_DIR:-$HOME/.cache/gradless/target}/release/gradless" \
                   "$HOME/.cache/gradless/target/release/gradless"; do
    if [ -x "$candidate" ]; then GRADLESS="$candidate"; break; fi
  done
  GRADLESS="${GRADLESS:-target/release/gradless}"
fi
case "$GRADLESS" in /*) ;; *) GRADLESS="$ROOT/$GRADLESS" ;; esac

BUDGET="${GPU_CHECK_BUDGET_S:-345}"
RESULTS="$OUT/steps.jsonl"
: >"$RESULTS"
FAILED=0

# record NAME STATUS SECONDS DETAIL [FIGURES_JSON]: one line of steps.jsonl.
record() {
  "$JSONPY" -c 'import json,sys
figs = sys.argv[5] if len(sys.argv) > 5 and sys.argv[5] else "{}"
try:
    figs = json.loads(figs)
except ValueError:
    figs = {"unparsed": figs}
print(json.dumps({"name": sys.argv[1], "status": sys.argv[2], "seconds": int(sys.argv[3]),
                  "detail": sys.argv[4], "figures": figs}))' "$@" >>"$RESULTS"
  [ "$2" = pass ] || FAILED=1
  echo "== $1: $2${4:+ ($4)}" >&2
}

# dry_fails NAME: whether the dry run was asked to fail this step.
dry_fails() { case ",${GPU_CHECK_DRY_FAIL:-}," in *",$1,"*) return 0 ;; esac; return 1; }

# step NAME LIMIT_S FUNCTION: runs FUNCTION under the time budget. FUNCTION prints one JSON
# object of figures on stdout (kept in OUT/NAME.json) and returns non-zero on failure, after
# writing the reason to OUT/NAME.reason; its stderr goes to OUT/NAME.log.
step() {
  local name=$1 limit=$2 fn=$3
  local left=$((BUDGET - SECONDS))
  if [ "$left" -lt 10 ]; then
    record "$name" skipped 0 "the six-minute budget was spent before this step"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (at most ${limit}s)" >&2
  local start=$SECONDS rc
  rm -f "$OUT/$name.reason"
  if [ $DRY -eq 1 ] && dry_fails "$name"; then
    echo '{"dry_run": true}' >"$OUT/$name.json"
    echo "failure injected by GPU_CHECK_DRY_FAIL" >"$OUT/$name.reason"
    rc=1
  else
    STEP_LIMIT=$limit "$fn" >"$OUT/$name.json" 2>"$OUT/$name.log"
    rc=$?
  fi
  local reason=""
  [ -s "$OUT/$name.reason" ] && reason="$(head -c 2000 "$OUT/$name.reason")"
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && reason="timed out after ${limit}s${reason:+; $reason}"
  if [ $rc -eq 0 ]; then
    record "$name" pass $((SECONDS - start)) "$reason" "$(cat "$OUT/$name.json")"
  else
    record "$name" fail $((SECONDS - start)) "${reason:-exit status $rc; see $name.log}" "$(cat "$OUT/$name.json")"
  fi
}

# ---- the steps -------------------------------------------------------------------------

host_check() {
  local problems=() glibc driver major gpu
  glibc="$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')"
  if [ -z "$glibc" ] || [ "$(printf '%s\n2.36\n' "$glibc" | sort -V | head -1)" != "2.36" ]; then
    problems+=("glibc ${glibc:-unknown} is older than 2.36 (the binaries are built on Debian 12)")
  fi
  driver="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)"
  gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
  major="${driver%%.*}"
  if [ -z "$driver" ]; then
    problems+=("nvidia-smi sees no GPU: an NVIDIA driver for CUDA 13 (580 or newer) is needed")
  elif [ "$major" -lt 580 ] 2>/dev/null; then
    problems+=("NVIDIA driver $driver is too old for CUDA 13: 580 or newer is needed")
  fi
  if [ -z "$TORCH_LIB" ] || [ ! -e "$TORCH_LIB/libtorch_cuda.so" ]; then
    problems+=("no CUDA libtorch under $TORCH_VENV (torch/lib/libtorch_cuda.so): install PyTorch 2.11 with CUDA 13 there, or set TORCH_VENV")
  fi
  [ -x "$PY" ] || problems+=("no python at $PY (TORCH_VENV)")
  [ -x "$GRADLESS" ] || problems+=("no gradless binary at $GRADLESS (--gradless)")
  ls "$TESTS_DIR"/* >/dev/null 2>&1 || problems+=("no CUDA test binaries in $TESTS_DIR: build them with scripts/gpu-check.sh --build-tests $TESTS_DIR where the code is built")
  "$JSONPY" -c 'import json,sys; print(json.dumps({"glibc": sys.argv[1], "driver": sys.argv[2], "gpu": sys.argv[3], "torch_lib": sys.argv[4]}))' \
    "$glibc" "$driver" "$gpu" "$TORCH_LIB"
  if [ ${#problems[@]} -gt 0 ]; then
    printf '%s\n' "${problems[@]}" >"$OUT/host.reason"
    # The dry run reports the host but carries on: it runs on machines without a GPU.
    [ $DRY -eq 1 ] && { echo "dry run: host problems reported, not enforced" >>"$OUT/host.reason"; return 0; }
    return 1
  fi
}

cuda_tests() {
  local ran=0 failed=() bin
  for bin in "$TESTS_DIR"/*; do
    [ -x "$bin" ] && [ -f "$bin" ] || continue
    ran=$((ran + 1))
    if [ $DRY -eq 1 ]; then
      echo "dry run: would run $bin ::cuda --test-threads=1" >&2
      continue
    fi
    # The CUDA half of the per-device tests (named `<test>::cuda`); the CPU half ran where
    # the code was built. One test thread: see --tests-dir above.
    if ! timeout --kill-after=5 "$STEP_LIMIT" "$bin" ::cuda --test-threads=1 >&2; then
      failed+=("$(basename "$bin")")
    fi
  done
  echo "{\"binaries\": $ran, \"failed\": ${#failed[@]}}"
  if [ $ran -eq 0 ] && [ $DRY -eq 0 ]; then
    echo "no test binaries in $TESTS_DIR" >"$OUT/cuda-tests.reason"; return 1
  fi
  if [ ${#failed[@]} -gt 0 ]; then
    echo "failed: ${failed[*]}" >"$OUT/cuda-tests.reason"; return 1
  fi
}

pitfalls() {
  local ids id verdicts=() bad=()
  if [ $DRY -eq 1 ]; then
    ids="dry-a dry-b"
  else
    ids="$("$GRADLESS" pitfall list --json | "$JSONPY" -c 'import json,sys; print(" ".join(c["id"] for c in json.load(sys.stdin)))')" \
      || { echo "gradless pitfall list failed" >"$OUT/pitfalls.reason"; echo '{}'; return 1; }
  fi
  mkdir -p "$OUT/pitfalls"
  for id in $ids; do
    local verdict
    if [ $DRY -eq 1 ]; then
      echo '{"verdict": "confirmed"}' >"$OUT/pitfalls/$id.json"
    else
      timeout --kill-after=5 60 "$GRADLESS" pitfall "$id" --device cuda --json >"$OUT/pitfalls/$id.json" 2>>"$OUT/pitfalls.log"
    fi
    verdict="$("$JSONPY" -c 'import json,sys; print(json.load(open(sys.argv[1])).get("verdict", "none"))' "$OUT/pitfalls/$id.json" 2>/dev/null || echo "no report")"
    verdicts+=("$id=$verdict")
    [ "$verdict" = confirmed ] || bad+=("$id: $verdict")
  done
  "$JSONPY" -c 'import json,sys; print(json.dumps({"verdicts": dict(a.split("=", 1) for a in sys.argv[1:])}))' "${verdicts[@]}"
  if [ ${#bad[@]} -gt 0 ]; then
    printf '%s\n' "not confirmed on CUDA:" "${bad[@]}" >"$OUT/pitfalls.reason"; return 1
  fi
}

# The server client: recorded CUDA runs through the API, then the worker's health. Any
# request that fails (refused, unreachable, not JSON) is a failure with its reason, never a
# crash. Prints the figures; exits 1 when a run failed, leaked, or the leak check failed.
SERVER_CLIENT='
import json, sys, time, urllib.error, urllib.request
base, device = sys.argv[1], sys.argv[2]
problems = []
def call(path, body=None):
    req = urllib.request.Request(base + path, data=None if body is None else json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read() or b"null")
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
for _ in range(240):
    if call("/healthz")[0] == 200: break
    time.sleep(0.25)
else:
    problems.append("the server did not answer /healthz")
out = {"runs": []}
for spec in ({"model": "resnet50", "batch": 32, "grad": "no_grad"},
             {"model": "resnet50", "batch": 32, "grad": "no_grad", "autocast": "fp16"},
             {"model": "tiny_mlp", "batch": 256, "grad": "enabled", "eval": False},
             # CUDA graph replay: captured after the warm-up, replayed in every timed pass.
             {"model": "resnet18", "batch": 1, "grad": "inference_mode", "advanced": {"cuda_graph": True}}):
    spec = {**spec, "device": device, "warmup": 3, "iters": 10}
    status, created = call("/api/runs", spec)
    run = {"spec": spec, "submit_status": status}
    out["runs"].append(run)
    if status != 202 or not isinstance(created, dict) or "id" not in created:
        problems.append(f"POST /api/runs {spec}: {status}: {reason(created)}")
        continue
    rid = run["id"] = created["id"]
    code, report = None, None
    for _ in range(240):
        code, report = call("/api/runs/" + rid)
        if code != 409: break
        time.sleep(0.25)
    run["status"] = code
    if code != 200 or not isinstance(report, dict):
        problems.append(f"run {rid}: {code}: {reason(report)}")
        continue
    mem = report.get("memory", {})
    run.update(leaked_bytes=mem.get("leaked_bytes"), baseline_bytes=mem.get("baseline_bytes"),
               peak_above_baseline_bytes=mem.get("peak_above_baseline_bytes"),
               p50_ms=report.get("latency_ms", {}).get("p50"))
    leaked = mem.get("leaked_bytes")
    if leaked:
        problems.append(f"run {rid} leaked {leaked} B")
    # The traced pass: a trace at every module boundary whose peak is the peak of the run
    # (within 2%), the FLOP/s figures, and the CUDA memory breakdown with its parts.
    trace = report.get("trace") or []
    tpeak = max([max(p.get("peak_above_baseline_bytes", 0), p.get("allocated_above_baseline_bytes", 0)) for p in trace] or [0])
    rpeak = mem.get("peak_above_baseline_bytes") or 0
    breakdown = report.get("memory_breakdown") or {}
    run.update(trace_points=len(trace), trace_peak_bytes=tpeak, flops=report.get("flops"),
               achieved_tflops=report.get("achieved_tflops"), percent_of_peak=report.get("percent_of_peak"),
               peak_source=report.get("peak_source"),
               memory_breakdown={p.get("label"): p.get("bytes") for p in breakdown.get("parts", [])},
               driver_used_bytes=breakdown.get("total_bytes"))
    if not trace:
        problems.append(f"run {rid}: no traced pass")
    elif abs(tpeak - rpeak) > 0.02 * max(tpeak, rpeak):
        problems.append(f"run {rid}: trace peak {tpeak} B vs run peak {rpeak} B (more than 2% apart)")
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
'

# A stand-in server for the dry run: healthy, but refuses every run the way a full queue
# does, so the client's failure path runs.
STUB_SERVER='
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def answer(self, code, body):
        data = json.dumps(body).encode() if body is not None else b"not json"
        self.send_response(code); self.send_header("content-length", str(len(data))); self.end_headers(); self.wfile.write(data)
    def do_GET(self):
        if self.path == "/healthz": self.answer(200, "ok")
        else: self.answer(200, {"memory_check_failures": 0, "last_checks": []})
    def do_POST(self):
        self.answer(503, {"error": {"code": "queue_full", "message": "the run queue is full"}})
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
'

server_check() {
  local pid port rc
  if [ $DRY -eq 1 ]; then
    # exec: the coprocess's pid is then the stub's own, so the kill below stops it (not
    # only a subshell, leaving the stub serving forever).
    coproc STUB { exec "$JSONPY" -c "$STUB_SERVER"; }
    pid=$STUB_PID
    read -r port <&"${STUB[0]}"
  else
    port=3999
    "$GRADLESS" serve --addr "127.0.0.1:$port" --db "$OUT/runs.sqlite3" --site-root target/site \
      >"$OUT/server.log" 2>&1 &
    pid=$!
  fi
  "$JSONPY" -c "$SERVER_CLIENT" "http://127.0.0.1:$port" cuda 2>"$OUT/server-check.reason"
  rc=$?
  # A clean stop (the current run finishes and is recorded), but never longer than 20 s.
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  if [ $DRY -eq 1 ]; then
    # The stub refuses every run: the client must have said so, not crashed.
    if [ $rc -eq 1 ] && grep -q "queue is full" "$OUT/server-check.reason"; then
      echo "dry run: the client reported the refused runs as failures" >"$OUT/server-check.reason"
      return 0
    fi
    echo "dry run: the client did not handle refused runs (exit $rc)" >>"$OUT/server-check.reason"
    return 1
  fi
  return $rc
}

# Generate runs on the decoder shapes the GPU is for: Llama-3.2-1B (fp32 and bf16 weights,
# batch 1 and 8) and Llama-3.1-8B (bf16 weights), a dynamic against a static cache. Each
# records prefill, decode per token, tokens/s, the KV cache against its formula and the
# decode bandwidth as % of the datasheet's. (CUDA graph replay of the decode step is not
# implemented yet: the static runs are eager.)
generate_runs() {
  if [ $DRY -eq 1 ]; then
    echo '{"dry_run": true, "runs": 0}'
    return 0
  fi
  local runs=() failed=0
  for cfg in "llama_3_2_1b fp32 1" "llama_3_2_1b bf16 1" "llama_3_2_1b bf16 8" "llama_3_1_8b bf16 1"; do
    set -- $cfg
    for cache in dynamic static; do
      local f="$OUT/generate-$1-$2-b$3-$cache.json"
      if timeout 60 "$GRADLESS" generate --device cuda --model "$1" --weights "$2" --batch "$3" \
          --prompt 512 --new-tokens 128 --cache "$cache" --grad inference_mode --json >"$f" 2>>"$OUT/generate.reason"; then
        runs+=("$f")
      else
        echo "generate $1 $2 batch $3 $cache failed" >>"$OUT/generate.reason"; failed=1
      fi
    done
  done
  "$JSONPY" - "${runs[@]}" <<'PY'
import json, sys
out = []
for path in sys.argv[1:]:
    r = json.load(open(path)); g = r["generation"]
    out.append({"model": r["spec"]["model"], "weights": r["spec"].get("advanced", {}).get("weights", "fp32"),
                "batch": g["batch"], "cache": g["cache"], "prefill_ms": g["prefill_ms"],
                "decode_p50_ms": (g["decode_ms_per_token"] or {}).get("p50"),
                "tokens_per_s_total": g["tokens_per_s_total"], "kv_cache_bytes": g["kv_cache_bytes"],
                "kv_formula_bytes": g["kv_cache_formula_bytes"], "bandwidth_gb_s": g["decode_bandwidth_gb_s"],
                "bandwidth_percent": g["decode_bandwidth_percent"], "bandwidth_source": g["bandwidth_source"],
                "peak_allocated_bytes": r["memory"]["peak_allocated_bytes"], "device": r["env"]["device_name"]})
print(json.dumps({"runs": out}))
PY
  return $failed
}

peer_compare() {
  if [ $DRY -eq 1 ]; then
    echo '{"configs": 0}'
    return 0
  fi
  local run_timeout=30 deadline=$((STEP_LIMIT - 40)) configs=()
  [ "$deadline" -lt 0 ] && deadline=0
  for model_batch in resnet50:32 tiny_mlp:256; do
    for mode in eval:no_grad train:enabled eval:no_grad:bf16; do
      configs+=(--config "$model_batch:$mode")
    done
  done
  timeout --kill-after=5 "$STEP_LIMIT" "$PY" bench/compare.py --gradless "$GRADLESS" --python "$PY" --device cuda \
    --rounds 2 --warmup 3 --iters 10 --threads 1 --timeout "$run_timeout" --deadline "$deadline" \
    "${configs[@]}" --json "$OUT/peer.json" --markdown "$OUT/peer.md" >&2
  local rc=$?
  if [ ! -s "$OUT/peer.json" ]; then
    echo "bench/compare.py wrote no results (exit $rc)" >"$OUT/peer-compare.reason"; echo '{}'; return 1
  fi
  "$JSONPY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps({"results": len(d) if isinstance(d, list) else len(d.get("results", d))}))' "$OUT/peer.json"
  [ $rc -eq 0 ] || { echo "bench/compare.py exited $rc (see peer-compare.log)" >"$OUT/peer-compare.reason"; return 1; }
}

step host 15 host_check
if [ $FAILED -eq 1 ] && [ $DRY -eq 0 ]; then
  echo "== the host does not meet the requirements above; nothing else runs" >&2
else
  step cuda-tests 100 cuda_tests
  step pitfalls 110 pitfalls
  step server-check 45 server_check
  step generate 60 generate_runs
  step peer-compare 60 peer_compare
fi

"$JSONPY" - "$RESULTS" "$OUT/summary.json" "$DRY" "$SECONDS" "$(git rev-parse HEAD 2>/dev/null || echo unknown)" <<'PYEOF'
import json, sys
results, summary, dry, seconds, commit = sys.argv[1:6]
steps = [json.loads(l) for l in open(results) if l.strip()]
doc = {"pass": bool(steps) and all(s["status"] == "pass" for s in steps),
       "dry_run": dry == "1", "seconds": int(seconds), "commit": commit, "steps": steps}
json.dump(doc, open(summary, "w"), indent=1)
print(json.dumps({"pass": doc["pass"], "steps": {s["name"]: s["status"] for s in steps}}))
PYEOF
echo "== summary: $OUT/summary.json (${SECONDS}s)" >&2
exit $FAILED
