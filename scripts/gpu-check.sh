#!/usr/bin/env bash
# The GPU check: a test, not a recorder, made to pass in one short visit to a GPU host that
# has PyTorch 2.11 (CUDA 13) but no Rust toolchain, no network and about 15 minutes in all.
#
# Two halves:
#   - here, where the code is built: `scripts/gpu-check.sh --bundle [DIR]` puts everything
#     the host needs into one folder (default target/gpu-bundle, ignored by git): the
#     stripped, xz-compressed `gradless` binary and the engine's per-device test binary
#     (the very ones `cargo test --release --workspace` built), this script, the peer
#     benchmark (bench/*.py) and bundle.json (commit, sizes, sha256). It measures itself
#     and fails above 48 MiB (64 MiB is all that travels).
#   - there: `DIR/gpu-check.sh OUT_DIR` unpacks the binaries (Python's lzma: no xz needed),
#     checks the host, then runs every step under `timeout` with its own limit. The limits
#     add up to at most 300 s, so the whole check ends within five minutes BY CONSTRUCTION
#     whatever hangs. It writes ONE summary, OUT_DIR/summary.json: {"pass", "mode",
#     "seconds", "commit", "steps": [{"name", "status": "pass"|"fail"|"skipped", "seconds",
#     "limit_s", "detail", "figures"}]}, beside each step's output and log, and exits
#     non-zero when any step failed.
#
# The steps (their limits on a GPU):
#   unpack 15 s · host 10 s · cuda-tests 75 s (the engine's CUDA test halves, one thread)
#   · pitfalls 90 s (every card in ONE process: `gradless pitfall all --device cuda`)
#   · server-check 35 s (recorded CUDA runs through the API: no leak, a traced pass, the
#   memory breakdown, CUDA graph replay) · generate 45 s (Llama-3.2-1B and Llama-3.1-8B
#   shapes in bf16, dynamic and static cache, with and without CUDA graph replay)
#   · peer-compare 30 s (bench/compare.py: the same configs in Python PyTorch).
#
# `--rehearse` runs the same bundle and the same steps on this machine's CPU with small
# shapes, from wherever the bundle was copied to (scripts/test.sh copies ONLY the bundle to
# a scratch folder, with no cargo and no build tree on PATH), so the plumbing, the paths and
# the timing are proven before minutes on a GPU are spent. `--dry-run` exercises the
# script's own bookkeeping with nothing heavy (engine/tests/gpu_check_script.rs).
#
# Host requirements (checked first, each with its own message): glibc 2.36 or newer (the
# binaries are built on Debian 12); an NVIDIA driver for CUDA 13 (580 or newer) and a GPU
# nvidia-smi sees; PyTorch 2.11 with CUDA in TORCH_VENV (default /opt/torch/.venv), whose
# torch/lib holds the libtorch the binaries load and whose python runs the peer.
#
# Usage:
#   scripts/gpu-check.sh --bundle [DIR]             (where the code is built)
#   DIR/gpu-check.sh [--rehearse | --dry-run] OUT_DIR  (on the GPU host, or here)
#
#   --bundle [DIR]   build the bundle in DIR (default target/gpu-bundle) from the release
#                    build (cargo builds what is missing first); at most 48 MiB.
#   --rehearse       the same bundle and steps on the CPU, small shapes; TORCH_VENV
#                    defaults to this project's venv (~/.cache/gradless/venv) there.
#   --dry-run        the script's own logic only: no binaries, no device; the server
#                    client meets a stub that refuses every run. GPU_CHECK_DRY_FAIL=a,b
#                    makes those steps fail, to test the failure path.
set -uo pipefail

usage() {
  sed -n '/^# Usage:/,/^#                    makes those/p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

MODE=gpu
OUT_ARG=""
BUNDLE=""
MAX_BUNDLE_BYTES=$((48 * 1024 * 1024))
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) MODE=dry ;;
    --rehearse) MODE=rehearse ;;
    --bundle)
      BUNDLE="target/gpu-bundle"
      if [ $# -ge 2 ] && [ "${2#-}" = "$2" ]; then BUNDLE="$2"; shift; fi ;;
    -h|--help) usage ;;
    -*) echo "error: unknown option $1" >&2; usage ;;
    *) [ -z "$OUT_ARG" ] || { echo "error: one OUT_DIR only (got $OUT_ARG and $1)" >&2; usage; }
       OUT_ARG="$1" ;;
  esac
  shift
done

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# ---- the build machine's half: the bundle ----------------------------------------------
if [ -n "$BUNDLE" ]; then
  ROOT="$(cd "$HERE/.." && pwd)"
  cd "$ROOT"
  source scripts/env.sh
  start=$SECONDS
  # The binaries `cargo test --release --workspace` builds (nothing is compiled when it has
  # run: the same command, the same features). Its JSON messages name each executable.
  artefacts="$(cargo test --release --workspace --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
found = {}
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    exe = m.get("executable")
    if m.get("reason") != "compiler-artifact" or not exe:
        continue
    t = m["target"]
    # The binary itself, not the harness of its unit tests (also a "bin" target, test: true).
    if t["name"] == "gradless" and t["kind"] == ["bin"] and not m["profile"]["test"]:
        found["gradless"] = exe
    elif t["name"] == "device" and t["kind"] == ["test"]:
        found["device-tests"] = exe
for k in ("gradless", "device-tests"):
    if k not in found:
        sys.exit(f"cargo built no {k} executable")
    print(found[k])
')" || { echo "error: the release build failed (run cargo test --release --workspace --no-run to see why)" >&2; exit 1; }
  { read -r gradless_exe; read -r tests_exe; } <<<"$artefacts"
  rm -rf "$BUNDLE"
  mkdir -p "$BUNDLE/bin" "$BUNDLE/bench"
  for pair in "gradless:$gradless_exe" "device-tests:$tests_exe"; do
    name="${pair%%:*}" exe="${pair#*:}"
    strip -o "$BUNDLE/bin/$name" "$exe" || { echo "error: strip $exe failed" >&2; exit 1; }
    xz -T2 -6 -f "$BUNDLE/bin/$name" || { echo "error: xz $name failed" >&2; exit 1; }
  done
  cp scripts/gpu-check.sh "$BUNDLE/gpu-check.sh"
  cp bench/compare.py bench/peer.py "$BUNDLE/bench/"
  # The model trained here (its weights and held-out text): the card int4-on-a-trained-model
  # and the device tests build it, found through GRADLESS_TRAINED_DIR on the host.
  mkdir -p "$BUNDLE/models"
  cp -r models/torch_bytes "$BUNDLE/models/"
  python3 - "$BUNDLE" "$(git rev-parse HEAD 2>/dev/null || echo unknown)" "$(git status --porcelain 2>/dev/null | grep -c . || true)" <<'PY'
import datetime, hashlib, json, os, sys
root, commit, dirty = sys.argv[1], sys.argv[2], int(sys.argv[3] or 0)
files = {}
for d, _, names in os.walk(root):
    for n in sorted(names):
        p = os.path.join(d, n)
        rel = os.path.relpath(p, root)
        files[rel] = {"bytes": os.path.getsize(p), "sha256": hashlib.sha256(open(p, "rb").read()).hexdigest()}
json.dump({"commit": commit, "uncommitted_changes": dirty,
           "built_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "files": files, "bytes": sum(f["bytes"] for f in files.values())},
          open(os.path.join(root, "bundle.json"), "w"), indent=1)
PY
  bytes=$(du -sb "$BUNDLE" | cut -f1)
  echo "bundle: $BUNDLE, $bytes bytes ($((bytes / 1024 / 1024)) MiB of at most 48), in $((SECONDS - start)) s" >&2
  ls -l "$BUNDLE" "$BUNDLE/bin" >&2
  if [ "$bytes" -gt "$MAX_BUNDLE_BYTES" ]; then
    echo "error: the bundle is $bytes bytes, over the 48 MiB ($MAX_BUNDLE_BYTES B) that leaves room in the 64 MiB that travels" >&2
    exit 1
  fi
  exit 0
fi

# ---- the GPU host's half (or the rehearsal, or the dry run) -----------------------------
[ -n "$OUT_ARG" ] || { echo "error: OUT_DIR is required" >&2; usage; }
mkdir -p "$OUT_ARG" || { echo "error: cannot create $OUT_ARG" >&2; exit 2; }
OUT="$(cd "$OUT_ARG" && pwd)"
cd "$HERE"

if [ -z "${TORCH_VENV:-}" ]; then
  TORCH_VENV=/opt/torch/.venv
  # The rehearsal runs against this project's own PyTorch 2.11, as the GPU host runs its.
  [ "$MODE" = gpu ] || TORCH_VENV="${GRADLESS_VENV:-$HOME/.cache/gradless/venv}"
fi
PY="$TORCH_VENV/bin/python3"
TORCH_LIB=""
for d in "$TORCH_VENV"/lib/python3*/site-packages/torch/lib; do [ -d "$d" ] && TORCH_LIB="$d"; done
# The summary and the stub need only a plain python3; the peer needs the venv's.
JSONPY="$(command -v python3 || echo "$PY")"
[ "$MODE" = dry ] && [ ! -x "$PY" ] && PY="$JSONPY"
# The binaries' rpath points at the build machine's venv: the host's libtorch comes from
# here, and its own $ORIGIN rpaths find the nvidia libraries beside it.
[ -n "$TORCH_LIB" ] && export LD_LIBRARY_PATH="$TORCH_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

if [ "$MODE" = gpu ]; then DEVICE=cuda; else DEVICE=cpu; fi
BIN="${GPU_CHECK_BIN_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/gradless-gpu-check.XXXXXX")}"
GRADLESS="$BIN/gradless"
TESTS="$BIN/device-tests"
SERVER_PORT="${GPU_CHECK_PORT:-3999}"

RESULTS="$OUT/steps.jsonl"
: >"$RESULTS"
FAILED=0
BUDGET=300 # the sum of the limits below may not pass it (checked as the steps are declared)
DECLARED=0
# The pitfall cards on a GPU: 90 s. A rehearsal runs them on this machine's CPU, whose
# speed varies by host: without AVX-512 (a 2-core AMD EPYC, 2026-12-02) bf16 autocast is
# slow, the autocast card alone 25 s and every card about 100 s, against 38 s on a host
# with it. The rehearsal proves the plumbing, so on the CPU this step gets more time (and
# the budget with it); the GPU's limits stay as they are.
PITFALLS_LIMIT=90
if [ "$MODE" = rehearse ]; then PITFALLS_LIMIT=240; BUDGET=$((BUDGET + 150)); fi

# record NAME STATUS SECONDS LIMIT DETAIL [FIGURES_JSON]: one line of steps.jsonl.
record() {
  "$JSONPY" -c 'import json,sys
figs = sys.argv[6] if len(sys.argv) > 6 and sys.argv[6] else "{}"
try:
    figs = json.loads(figs)
except ValueError:
    figs = {"unparsed": figs[:2000]}
print(json.dumps({"name": sys.argv[1], "status": sys.argv[2], "seconds": int(sys.argv[3]),
                  "limit_s": int(sys.argv[4]), "detail": sys.argv[5], "figures": figs}))' "$@" >>"$RESULTS"
  [ "$2" = pass ] || FAILED=1
  echo "== $1: $2 in ${3}s${5:+ ($5)}" >&2
}

# dry_fails NAME: whether the dry run was asked to fail this step.
dry_fails() { case ",${GPU_CHECK_DRY_FAIL:-}," in *",$1,"*) return 0 ;; esac; return 1; }

# step NAME LIMIT_S FUNCTION: runs FUNCTION under `timeout LIMIT_S` (the whole function:
# whatever it starts is killed with it). FUNCTION prints one JSON object of figures on stdout
# (kept in OUT/NAME.json) and returns non-zero on failure, after writing the reason to
# OUT/NAME.reason; its stderr goes to OUT/NAME.log. STEP_DEADLINE (seconds since the epoch)
# lets it share its time between the commands it runs.
step() {
  local name=$1 limit=$2 fn=$3
  DECLARED=$((DECLARED + limit))
  if [ "$DECLARED" -gt "$BUDGET" ]; then
    echo "error: the steps' limits add up to ${DECLARED}s, over the ${BUDGET}s budget" >&2
    exit 3
  fi
  echo "== $name (at most ${limit}s)" >&2
  local start=$SECONDS rc
  rm -f "$OUT/$name.reason"
  if [ "$MODE" = dry ] && dry_fails "$name"; then
    echo '{"dry_run": true}' >"$OUT/$name.json"
    echo "failure injected by GPU_CHECK_DRY_FAIL" >"$OUT/$name.reason"
    rc=1
  else
    # A subshell under timeout: `timeout` runs programs, not shell functions.
    export -f "$fn"
    STEP_DEADLINE=$(($(date +%s) + limit)) timeout --kill-after=5 "$limit" bash -c "$fn" \
      >"$OUT/$name.json" 2>"$OUT/$name.log"
    rc=$?
  fi
  local reason=""
  [ -s "$OUT/$name.reason" ] && reason="$(head -c 2000 "$OUT/$name.reason")"
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then reason="timed out after ${limit}s${reason:+; $reason}"; fi
  [ -s "$OUT/$name.json" ] || echo '{}' >"$OUT/$name.json"
  if [ $rc -eq 0 ]; then
    record "$name" pass $((SECONDS - start)) "$limit" "$reason" "$(cat "$OUT/$name.json")"
  else
    record "$name" fail $((SECONDS - start)) "$limit" "${reason:-exit status $rc; see $name.log}" "$(cat "$OUT/$name.json")"
  fi
}

# skip NAME LIMIT REASON: a step that cannot run (counts against the check).
skip() { DECLARED=$((DECLARED + $2)); record "$1" skipped 0 "$2" "$3"; }

# left: seconds until this step's deadline (for the commands a step runs one by one).
left() { echo $((STEP_DEADLINE - $(date +%s))); }

# The trained model's folder travels in the bundle (the build's own path is not on the host).
GRADLESS_TRAINED_DIR="$HERE/models"
export JSONPY PY GRADLESS TESTS OUT MODE DEVICE TORCH_VENV TORCH_LIB BIN SERVER_PORT HERE GRADLESS_TRAINED_DIR

# ---- the steps -------------------------------------------------------------------------

unpack() {
  if [ "$MODE" = dry ]; then echo '{"dry_run": true}'; return 0; fi
  [ -f "$HERE/bundle.json" ] || { echo "no bundle.json beside $0: run the copy in a bundle (scripts/gpu-check.sh --bundle DIR, then DIR/gpu-check.sh)" >"$OUT/unpack.reason"; return 1; }
  "$JSONPY" - "$HERE" "$BIN" <<'PY' || { cp "$OUT/unpack.log" "$OUT/unpack.reason" 2>/dev/null; return 1; }
import hashlib, json, lzma, os, shutil, sys, time
here, bindir = sys.argv[1], sys.argv[2]
manifest = json.load(open(os.path.join(here, "bundle.json")))
t = time.time()
for rel, f in manifest["files"].items():
    p = os.path.join(here, rel)
    if hashlib.sha256(open(p, "rb").read()).hexdigest() != f["sha256"]:
        sys.exit(f"{rel}: its sha256 differs from bundle.json (a damaged copy)")
out = {}
for name in ("gradless", "device-tests"):
    dest = os.path.join(bindir, name)
    with lzma.open(os.path.join(here, "bin", name + ".xz")) as src, open(dest, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    os.chmod(dest, 0o755)
    out[name + "_bytes"] = os.path.getsize(dest)
out.update(commit=manifest["commit"], built_at=manifest["built_at"], bundle_bytes=manifest["bytes"],
           seconds=round(time.time() - t, 1))
print(json.dumps(out))
PY
}

host_check() {
  local problems=() glibc driver major gpu
  glibc="$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')"
  if [ -z "$glibc" ] || [ "$(printf '%s\n2.36\n' "$glibc" | sort -V | head -1)" != "2.36" ]; then
    problems+=("glibc ${glibc:-unknown} is older than 2.36 (the binaries are built on Debian 12)")
  fi
  driver="$(timeout 8 nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)"
  gpu="$(timeout 8 nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1)"
  major="${driver%%.*}"
  if [ "$MODE" = gpu ]; then
    if [ -z "$driver" ]; then
      problems+=("nvidia-smi sees no GPU: an NVIDIA driver for CUDA 13 (580 or newer) is needed")
    elif [ "$major" -lt 580 ] 2>/dev/null; then
      problems+=("NVIDIA driver $driver is too old for CUDA 13: 580 or newer is needed")
    fi
    if [ -z "$TORCH_LIB" ] || [ ! -e "$TORCH_LIB/libtorch_cuda.so" ]; then
      problems+=("no CUDA libtorch under $TORCH_VENV (torch/lib/libtorch_cuda.so): install PyTorch 2.11 with CUDA 13 there, or set TORCH_VENV")
    fi
  fi
  [ -x "$PY" ] || problems+=("no python at $PY (TORCH_VENV)")
  if [ "$MODE" != dry ]; then
    [ -x "$GRADLESS" ] || problems+=("no unpacked gradless at $GRADLESS")
    # The binary loads this host's libtorch (LD_LIBRARY_PATH above) and starts.
    timeout 30 "$GRADLESS" pitfall list --json >/dev/null 2>"$OUT/host.ldd" \
      || problems+=("gradless does not start here: $(head -c 400 "$OUT/host.ldd")")
  fi
  "$JSONPY" -c 'import json,sys; print(json.dumps({"glibc": sys.argv[1], "driver": sys.argv[2], "gpu": sys.argv[3], "torch_lib": sys.argv[4], "mode": sys.argv[5]}))' \
    "$glibc" "$driver" "$gpu" "$TORCH_LIB" "$MODE"
  if [ ${#problems[@]} -gt 0 ]; then
    printf '%s\n' "${problems[@]}" >"$OUT/host.reason"
    # The dry run reports the host but carries on: it runs on machines without a GPU.
    [ "$MODE" = dry ] && { echo "dry run: host problems reported, not enforced" >>"$OUT/host.reason"; return 0; }
    return 1
  fi
}

# The engine's per-device test binary. On a GPU: its CUDA halves (ignored by default, so
# `--ignored`), one test thread, minus the pitfall cards' CUDA halves (the pitfalls step runs
# every card in one process instead). In the rehearsal: the CPU halves of the invariants and
# the traced pass (the binary, its libtorch and its harness proven; cargo test runs the rest).
cuda_tests() {
  if [ "$MODE" = dry ]; then echo '{"dry_run": true}'; return 0; fi
  local args
  if [ "$MODE" = gpu ]; then
    args=(--ignored --test-threads=1 --skip pitfalls::cuda::)
  else
    args=(--test-threads=1 invariants:: trace::)
  fi
  "$TESTS" "${args[@]}" >"$OUT/cuda-tests.txt" 2>&1
  local rc=$?
  "$JSONPY" - "$OUT/cuda-tests.txt" <<'PY'
import json, sys
passed, failed, ignored = 0, [], 0
for l in open(sys.argv[1], errors="replace"):
    l = l.rstrip()
    if l.startswith("test ") and l.endswith(" ... ok"):
        passed += 1
    elif l.startswith("test ") and l.endswith(" ... FAILED"):
        failed.append(l.split()[1])
    elif l.startswith("test ") and " ... ignored" in l:
        ignored += 1
print(json.dumps({"passed": passed, "failed": failed, "ignored": ignored}))
# A filter that matched nothing passes vacuously: that is a failure of the check.
sys.exit(0 if passed else 1)
PY
  if [ $? -ne 0 ] && [ $rc -eq 0 ]; then
    echo "the engine's test binary ran no test (the filter matched nothing)" >"$OUT/cuda-tests.reason"
    return 1
  fi
  if [ $rc -ne 0 ]; then
    { echo "the engine's test binary failed (exit $rc):"; grep -E '^test .* FAILED$|panicked at' "$OUT/cuda-tests.txt" | head -20; } >"$OUT/cuda-tests.reason"
    return 1
  fi
}

# Every card's experiment in ONE process. The cards decided by exact bytes must confirm on
# every device; any other verdict is a finding reported in the figures, not a failure (a
# card may be refuted or inconclusive on a device, which is what it is there to show).
pitfalls() {
  if [ "$MODE" = dry ]; then
    printf '%s\n' '{"id": "dry-a", "seconds": 0.1, "report": {"verdict": "confirmed", "reason": "dry"}}' \
      '{"id": "dry-b", "seconds": 0.1, "report": {"verdict": "refuted", "reason": "dry"}}' >"$OUT/pitfalls.jsonl"
  else
    local budget=()
    # batch-scaling's default budget is the GPU's free memory: 140 GB of batches to try.
    [ "$MODE" = gpu ] && budget=(--budget-mib 16384)
    "$GRADLESS" pitfall all --device "$DEVICE" --jsonl "${budget[@]}" >"$OUT/pitfalls.jsonl"
  fi
  local rc=$?
  "$JSONPY" - "$OUT/pitfalls.jsonl" "$rc" <<'PY'
import json, sys
path, rc = sys.argv[1], int(sys.argv[2])
# Decided by exact byte counts: no noise can excuse another verdict on any device.
exact = {"generate-no-grad", "kv-cache-size", "gqa", "static-cache", "padding-waste", "inference-tensor-cache"}
cards, problems = {}, []
for line in open(path):
    try:
        o = json.loads(line)
    except ValueError:
        continue
    r = o.get("report")
    if r is None:
        cards[o["id"]] = {"verdict": "failed", "seconds": o.get("seconds"), "reason": o.get("error", "")[:300]}
        problems.append(f'{o["id"]}: failed: {o.get("error", "")[:300]}')
        continue
    cards[o["id"]] = {"verdict": r["verdict"], "seconds": o.get("seconds"), "reason": r.get("reason", "")[:400]}
    if o["id"] in exact and r["verdict"] != "confirmed":
        problems.append(f'{o["id"]} is decided by exact bytes but read {r["verdict"]}: {r.get("reason", "")[:300]}')
counts = {}
for c in cards.values():
    counts[c["verdict"]] = counts.get(c["verdict"], 0) + 1
print(json.dumps({"cards": len(cards), "verdicts": counts, "by_card": cards}))
if rc != 0 and not problems:
    problems.append(f"gradless pitfall all exited {rc} before every card had reported")
if problems:
    print("\n".join(problems), file=sys.stderr)
    sys.exit(1)
PY
  local prc=$?
  [ $prc -eq 0 ] || tail -n 30 "$OUT/pitfalls.log" 2>/dev/null | grep -v '^$' >"$OUT/pitfalls.reason"
  return $prc
}

# The server client: recorded runs through the API, then the worker's health. Any request
# that fails (refused, unreachable, not JSON) is a failure with its reason, never a crash.
# argv: base URL, device, the specs (a JSON list). Exits 1 when a run failed or leaked, or
# the worker's leak check failed.
SERVER_CLIENT='
import json, sys, time, urllib.error, urllib.request
base, device, specs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
problems = []
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
    # (within 2%), the FLOP/s figures, and the memory breakdown with its parts.
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
export SERVER_CLIENT STUB_SERVER

server_check() {
  local pid port rc specs
  if [ "$MODE" = gpu ]; then
    specs='[{"model": "resnet50", "batch": 32, "grad": "no_grad", "warmup": 3, "iters": 10},
            {"model": "resnet50", "batch": 32, "grad": "no_grad", "autocast": "fp16", "warmup": 3, "iters": 10},
            {"model": "tiny_mlp", "batch": 256, "grad": "enabled", "eval": false, "warmup": 3, "iters": 10},
            {"model": "resnet18", "batch": 1, "grad": "inference_mode", "warmup": 3, "iters": 10, "advanced": {"cuda_graph": true}}]'
  else
    specs='[{"model": "tiny_mlp", "batch": 64, "grad": "no_grad", "warmup": 2, "iters": 5, "threads": 1},
            {"model": "resnet18", "batch": 2, "input_size": 64, "grad": "enabled", "eval": false, "warmup": 1, "iters": 3, "threads": 1},
            {"model": "resnet18", "batch": 1, "input_size": 64, "grad": "inference_mode", "warmup": 1, "iters": 3, "threads": 1, "advanced": {"cuda_graph": true}, "expect_refusal": "CUDA graph"}]'
  fi
  if [ "$MODE" = dry ]; then
    # exec: the coprocess's pid is then the stub's own, so the kill below stops it.
    coproc STUB { exec "$JSONPY" -c "$STUB_SERVER"; }
    pid=$STUB_PID
    read -r port <&"${STUB[0]}"
  else
    port=$SERVER_PORT
    "$GRADLESS" serve --addr "127.0.0.1:$port" --db "$OUT/runs.sqlite3" --site-root "$OUT/no-site" \
      >"$OUT/server.log" 2>&1 &
    pid=$!
  fi
  "$JSONPY" -c "$SERVER_CLIENT" "http://127.0.0.1:$port" "$DEVICE" "$specs" 2>"$OUT/server-check.reason"
  rc=$?
  # A clean stop (the current run finishes and is recorded), but never longer than 10 s.
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  if [ "$MODE" = dry ]; then
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

# Generate runs. On a GPU the decoder shapes the GPU is for, most telling first: Llama-3.1-8B
# and Llama-3.2-1B in bf16 at batch 1, eager and with the decode step's CUDA graph replayed
# (static cache). Each records prefill, decode per token, tokens/s, the KV cache against its
# formula, the SDPA backend and the decode bandwidth as % of the datasheet's. In the
# rehearsal the CPU preset, and a graph request that must be refused with its reason.
generate_runs() {
  if [ "$MODE" = dry ]; then echo '{"dry_run": true, "runs": 0}'; return 0; fi
  local runs=() failed=0 cfgs
  if [ "$MODE" = gpu ]; then
    cfgs=("llama_3_1_8b bf16 1 static graph" "llama_3_1_8b bf16 1 dynamic -"
          "llama_3_2_1b bf16 1 static graph" "llama_3_2_1b bf16 1 static -" "llama_3_2_1b bf16 8 dynamic -")
    local prompt=512 new=128
  else
    cfgs=("llama_tiny fp32 1 dynamic -" "llama_tiny fp32 2 static -")
    local prompt=16 new=8
  fi
  for cfg in "${cfgs[@]}"; do
    set -- $cfg
    local f="$OUT/generate-$1-$2-b$3-$4${5/-/}.json" graph=()
    [ "$5" = graph ] && graph=(--cuda-graph)
    # Each run gets what is left of the step, less a margin for the summary below.
    local limit=$(($(left) - 3))
    if [ "$limit" -lt 5 ]; then echo "generate $cfg: no time left" >>"$OUT/generate.reason"; failed=1; continue; fi
    if timeout --kill-after=2 "$limit" "$GRADLESS" generate --device "$DEVICE" --model "$1" --dtype "$2" --batch "$3" \
        --prompt $prompt --new-tokens $new --cache "$4" "${graph[@]}" --eval --grad inference_mode --threads 1 --json >"$f" 2>>"$OUT/generate.log"; then
      runs+=("$f")
    else
      echo "generate $cfg failed: $(tail -n 2 "$OUT/generate.log" | head -c 400)" >>"$OUT/generate.reason"; failed=1
    fi
  done
  if [ "$MODE" = rehearse ]; then
    # CUDA graph replay of the decode step needs CUDA: refused up front, naming the field.
    if timeout 30 "$GRADLESS" generate --device cpu --model llama_tiny --prompt 8 --new-tokens 4 --cache static --cuda-graph \
        >/dev/null 2>"$OUT/generate-graph-refused.txt"; then
      echo "a CUDA-graph generation on the CPU was accepted" >>"$OUT/generate.reason"; failed=1
    elif ! grep -qi "cuda" "$OUT/generate-graph-refused.txt"; then
      echo "the CPU's refusal of CUDA graphs does not say why: $(head -c 300 "$OUT/generate-graph-refused.txt")" >>"$OUT/generate.reason"; failed=1
    fi
  fi
  "$JSONPY" - "${runs[@]}" <<'PY'
import json, sys
out = []
for path in sys.argv[1:]:
    r = json.load(open(path)); g = r["generation"]
    adv = r["spec"].get("advanced", {})
    out.append({"model": r["spec"]["model"], "weights": adv.get("dtype", adv.get("weights", "fp32")),
                "cuda_graph": adv.get("cuda_graph", False),
                "batch": g["batch"], "cache": g["cache"], "prefill_ms": g["prefill_ms"],
                "decode_p50_ms": (g.get("decode_ms_per_token") or {}).get("p50"),
                "tokens_per_s_total": g.get("tokens_per_s_total"), "kv_cache_bytes": g.get("kv_cache_bytes"),
                "kv_formula_bytes": g.get("kv_cache_formula_bytes"), "bandwidth_gb_s": g.get("decode_bandwidth_gb_s"),
                "bandwidth_percent": g.get("decode_bandwidth_percent"), "bandwidth_source": g.get("bandwidth_source"),
                "attention": g.get("attention"), "decode_graph": g.get("decode_graph"),
                "peak_allocated_bytes": r["memory"]["peak_allocated_bytes"], "device": r["env"]["device_name"]})
problems = []
for o in out:
    what = f'{o["model"]} {o["weights"]} batch {o["batch"]} {o["cache"]}'
    if o["cuda_graph"] and not o["decode_graph"]:
        problems.append(f"{what}: CUDA graph replay was asked for but the decode steps ran eagerly")
    if not o["attention"]:
        problems.append(f"{what}: the report names no SDPA backend")
    elif (o["attention"].get("decode") or "") == "cudnn":
        problems.append(f"{what}: decode ran cuDNN attention (a plan per key length)")
print(json.dumps({"runs": out, "problems": problems}))
if problems:
    print("\n".join(problems), file=sys.stderr)
    sys.exit(1)
PY
  [ $? -eq 0 ] || { cat "$OUT/generate.log" | tail -n 5 >>"$OUT/generate.reason"; failed=1; }
  return $failed
}

peer_compare() {
  if [ "$MODE" = dry ]; then echo '{"configs": 0}'; return 0; fi
  local configs=() run_timeout deadline
  # Each side of each round is its own process (an import of torch, CUDA's start-up): the
  # configs and rounds are what fits the step, and no run starts that could not finish in it.
  if [ "$MODE" = gpu ]; then
    configs=(--config resnet50:32:eval:no_grad --config resnet50:32:eval:no_grad:bf16)
    run_timeout=8
  else
    configs=(--config tiny_mlp:64:eval:no_grad)
    run_timeout=10
  fi
  deadline=$(($(left) - run_timeout - 3))
  [ "$deadline" -lt 0 ] && deadline=0
  "$PY" bench/compare.py --gradless "$GRADLESS" --python "$PY" --device "$DEVICE" \
    --rounds 2 --warmup 3 --iters 10 --threads 1 --timeout "$run_timeout" --deadline "$deadline" \
    "${configs[@]}" --json "$OUT/peer.json" --markdown "$OUT/peer.md" >&2
  local rc=$?
  if [ ! -s "$OUT/peer.json" ]; then
    echo "bench/compare.py wrote no results (exit $rc)" >"$OUT/peer-compare.reason"; echo '{}'; return 1
  fi
  "$JSONPY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps({"results": d}))' "$OUT/peer.json"
  [ $rc -eq 0 ] || { echo "bench/compare.py exited $rc (see peer-compare.log)" >"$OUT/peer-compare.reason"; return 1; }
}

export -f left
step unpack 15 unpack
step host 10 host_check
if [ $FAILED -eq 1 ] && [ "$MODE" != dry ]; then
  echo "== the bundle or the host does not meet the requirements above; nothing else runs" >&2
  for s in "cuda-tests 75" "pitfalls $PITFALLS_LIMIT" "server-check 35" "generate 45" "peer-compare 30"; do
    set -- $s; skip "$1" "$2" "the host check failed"
  done
else
  step cuda-tests 75 cuda_tests
  step pitfalls "$PITFALLS_LIMIT" pitfalls
  step server-check 35 server_check
  step generate 45 generate_runs
  step peer-compare 30 peer_compare
fi
[ -n "${GPU_CHECK_BIN_DIR:-}" ] || rm -rf "$BIN"

"$JSONPY" - "$RESULTS" "$OUT/summary.json" "$MODE" "$SECONDS" "$HERE" <<'PYEOF'
import json, os, sys
results, summary, mode, seconds, here = sys.argv[1:6]
steps = [json.loads(l) for l in open(results) if l.strip()]
manifest = {}
if os.path.exists(os.path.join(here, "bundle.json")):
    manifest = json.load(open(os.path.join(here, "bundle.json")))
doc = {"pass": bool(steps) and all(s["status"] == "pass" for s in steps),
       "mode": mode, "dry_run": mode == "dry", "seconds": int(seconds),
       "commit": manifest.get("commit", "unknown"), "bundle_bytes": manifest.get("bytes"), "steps": steps}
json.dump(doc, open(summary, "w"), indent=1)
print(json.dumps({"pass": doc["pass"], "seconds": doc["seconds"], "steps": {s["name"]: s["status"] for s in steps}}))
PYEOF
echo "== summary: $OUT/summary.json (${SECONDS}s)" >&2
exit $FAILED
