#!/usr/bin/env bash
# The GPU check: Gradless's own comparisons and the side-by-side against the PyTorch peer,
# on a CUDA machine that has PyTorch 2.11 in /opt/torch/.venv. Everything it finds goes to
# OUT_DIR; a failing step is recorded (OUT_DIR/steps.tsv and OUT_DIR/<step>.log) and the
# script goes on. Every step is bounded by `timeout`, and the whole script stays under
# five minutes (GPU_CHECK_BUDGET_S, default 280 s).
#
# Usage: scripts/gpu-check.sh OUT_DIR [path-to-gradless-binary]
#   The binary defaults to the first that exists of target/release/gradless,
#   $CARGO_TARGET_DIR/release/gradless and ~/.cache/gradless/target/release/gradless.
#
# Writes:
#   nvidia-smi.txt                      the GPU, driver and CUDA as nvidia-smi reports them
#   python-info.txt                     the peer's torch, its CUDA, and whether torchvision is there
#   gradless-compare-resnet50-b32.json  gradless compare --model resnet50 --batch 32
#   gradless-compare-tiny_mlp-b256.json gradless compare --model tiny_mlp --batch 256
#   peer.json, peer.md                  bench/compare.py: raw results and the table
#   steps.tsv                           step, exit status (124: timed out), seconds
set -uo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 OUT_DIR [path-to-gradless-binary]" >&2
  exit 2
fi

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$1"
OUT="$(cd "$1" && pwd)"
cd "$ROOT"

TORCH_VENV="${TORCH_VENV:-/opt/torch/.venv}"
PY="$TORCH_VENV/bin/python3"
TORCH_LIB="$TORCH_VENV/lib/python3.12/site-packages/torch/lib"
if [ ! -d "$TORCH_LIB" ]; then  # another Python minor version in the venv
  for d in "$TORCH_VENV"/lib/python3*/site-packages/torch/lib; do [ -d "$d" ] && TORCH_LIB="$d"; done
fi
# cuda for the real check; cpu only to try the script on a machine without a GPU.
DEVICE="${GPU_CHECK_DEVICE:-cuda}"
export LD_LIBRARY_PATH="$TORCH_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

if [ $# -eq 2 ]; then
  GRADLESS="$2"
else
  GRADLESS=""
  for candidate in target/release/gradless \
                   "${CARGO_TARGET_DIR:-$HOME/.cache/gradless/target}/release/gradless" \
                   "$HOME/.cache/gradless/target/release/gradless"; do
    if [ -x "$candidate" ]; then GRADLESS="$candidate"; break; fi
  done
  GRADLESS="${GRADLESS:-target/release/gradless}"
fi
case "$GRADLESS" in /*) ;; *) GRADLESS="$ROOT/$GRADLESS" ;; esac

BUDGET="${GPU_CHECK_BUDGET_S:-280}"
STEPS="$OUT/steps.tsv"
printf 'step\trc\tseconds\n' >"$STEPS"
{
  echo "started: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "gradless: $GRADLESS"
  echo "python: $PY"
  echo "LD_LIBRARY_PATH: $LD_LIBRARY_PATH"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
} >"$OUT/run-info.txt"

# step NAME LIMIT_S STDOUT_FILE COMMAND...: runs COMMAND under `timeout`, stdout to
# STDOUT_FILE, stderr to OUT/NAME.log, and records the outcome. Never fails the script.
step() {
  local name=$1 limit=$2 stdout=$3
  shift 3
  local left=$((BUDGET - SECONDS))
  if [ "$left" -lt 10 ]; then
    printf '%s\tskipped (budget spent)\t0\n' "$name" >>"$STEPS"
    echo "== $name: skipped, the time budget is spent" >&2
    return 0
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local start=$SECONDS
  echo "== $name (at most ${limit}s)" >&2
  timeout --kill-after=5 "$limit" "$@" >"$stdout" 2>"$OUT/$name.log"
  local rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - start))" >>"$STEPS"
  if [ "$rc" -ne 0 ]; then
    echo "== $name FAILED (exit $rc; 124 means timed out): see $OUT/$name.log" >&2
  fi
  return 0
}

step nvidia-smi 15 "$OUT/nvidia-smi.txt" nvidia-smi
step python-info 20 "$OUT/python-info.txt" "$PY" -c '
import importlib.util, platform, torch
print("python", platform.python_version())
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(0), "cudnn", torch.backends.cudnn.version())
print("torchvision", "present" if importlib.util.find_spec("torchvision") else "absent (peer.py uses its built-in copies)")
'

if [ ! -x "$GRADLESS" ]; then
  echo "no gradless binary at $GRADLESS" | tee "$OUT/gradless-missing.txt" >&2
fi
step gradless-compare-resnet50-b32 60 "$OUT/gradless-compare-resnet50-b32.json" \
  "$GRADLESS" compare --model resnet50 --batch 32 --device "$DEVICE" --json
step gradless-compare-tiny_mlp-b256 40 "$OUT/gradless-compare-tiny_mlp-b256.json" \
  "$GRADLESS" compare --model tiny_mlp --batch 256 --device "$DEVICE" --json

# The server on the GPU: two recorded CUDA runs through the API, then the worker's leak
# check (memory held after each task against the cached weights and the CUDA libraries'
# workspaces) and the records, as JSON.
server_check() {
  local port=3999
  "$GRADLESS" serve --addr "127.0.0.1:$port" --db "$OUT/runs.sqlite3" --site-root target/site \
    >"$OUT/server.log" 2>&1 &
  local pid=$!
  "$PY" - "$port" "$DEVICE" <<'PYEOF'
import json, sys, time, urllib.request
port, device = sys.argv[1], sys.argv[2]
base = f"http://127.0.0.1:{port}"
for _ in range(240):
    try:
        urllib.request.urlopen(base + "/healthz", timeout=1); break
    except Exception:
        time.sleep(0.25)
def call(path, body=None):
    req = urllib.request.Request(base + path, data=None if body is None else json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")
out = {"runs": []}
for spec in ({"model": "resnet50", "batch": 32, "grad": "no_grad"},
             {"model": "resnet50", "batch": 32, "grad": "no_grad", "autocast": "fp16"},
             {"model": "tiny_mlp", "batch": 256, "grad": "enabled", "eval": False}):
    spec = {**spec, "device": device, "warmup": 3, "iters": 10}
    status, created = call("/api/runs", spec)
    report = None
    for _ in range(240):
        code, report = call(f"/api/runs/{created['id']}")
        if code != 409: break
        time.sleep(0.25)
    out["runs"].append({"spec": spec, "status": code, "id": created.get("id"),
                        "leaked_bytes": (report or {}).get("memory", {}).get("leaked_bytes"),
                        "peak_above_baseline_bytes": (report or {}).get("memory", {}).get("peak_above_baseline_bytes"),
                        "p50_ms": (report or {}).get("latency_ms", {}).get("p50")})
out["health"] = call("/api/health")[1]
out["records"] = call("/api/records")[1]
print(json.dumps(out, indent=1))
PYEOF
  local rc=$?
  # A clean stop (the current run finishes and is recorded), but never longer than 20 s.
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null
  return $rc
}
export -f server_check
export GRADLESS OUT PY DEVICE
step server-health 90 "$OUT/server-health.json" bash -c server_check

# The side-by-side gets whatever time is left. compare.py starts no run after its deadline
# and rewrites peer.json after every run, so a cut still leaves every finished result.
left=$((BUDGET - SECONDS - 5))
run_timeout=30
deadline=$((left - run_timeout - 10))
[ "$deadline" -lt 0 ] && deadline=0
configs=()
for model_batch in resnet50:32 tiny_mlp:256; do
  for mode in eval:no_grad eval:enabled train:enabled eval:inference_mode eval:no_grad:fp16 eval:no_grad:bf16; do
    configs+=(--config "$model_batch:$mode")
  done
done
step peer-compare "$left" "$OUT/peer-compare.stdout" \
  "$PY" bench/compare.py --gradless "$GRADLESS" --python "$PY" --device "$DEVICE" \
  --rounds 3 --warmup 3 --iters 10 --threads 1 --timeout "$run_timeout" --deadline "$deadline" \
  "${configs[@]}" --json "$OUT/peer.json" --markdown "$OUT/peer.md"
# If compare.py was cut before it wrote its table, render it from the raw results.
if [ ! -s "$OUT/peer.md" ] && [ -s "$OUT/peer.json" ]; then
  timeout 20 "$PY" bench/compare.py --render "$OUT/peer.json" --markdown "$OUT/peer.md" >/dev/null 2>>"$OUT/peer-compare.log"
fi

echo "finished: $(date -u +%Y-%m-%dT%H:%M:%SZ) after ${SECONDS}s" >>"$OUT/run-info.txt"
echo "== done in ${SECONDS}s; steps:" >&2
cat "$STEPS" >&2
[ -s "$OUT/peer.md" ] && cat "$OUT/peer.md" >&2
exit 0
