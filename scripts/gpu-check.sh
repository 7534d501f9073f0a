#!/usr/bin/env bash
# The GPU check: a test, not a recorder, made to pass in one short visit to a GPU host that
# has PyTorch 2.11 (CUDA 13) but no Rust toolchain, no network and about 15 minutes in all.
#
# Two halves:
#   - here, where the code is built: `scripts/gpu-check.sh --bundle [DIR]` puts everything
#     the host needs into one folder (default target/gpu-bundle, ignored by git): the
#     stripped, xz-compressed `gradless` binary and the engine's per-device test binary
#     (the very ones `cargo test --release --workspace` built), this script, the peer
#     benchmark (bench/*.py) and bundle.json (commit, sizes, sha256, and what the build can
#     do on a GPU: whether CUDA graph capture is compiled in). It measures itself and fails
#     above 48 MiB (64 MiB is all that travels), and fails when graph capture is not
#     compiled in (a build without CUDA's crt/ headers), unless --allow-no-cuda-graphs.
#   - there: `DIR/gpu-check.sh OUT_DIR` unpacks the binaries (Python's lzma: no xz needed),
#     checks the host, then runs every step under `timeout` with its own limit. The limits
#     add up to at most 360 s, so the whole check ends within six minutes BY CONSTRUCTION
#     whatever hangs, which leaves a rerun within a 15-minute visit. It writes ONE summary,
#     OUT_DIR/summary.json: {"pass", "complete", "mode", "seconds", "commit", "build",
#     "steps": [{"name", "status": "pass"|"fail"|"skipped", "seconds", "limit_s",
#     "detail", "figures"}]}, rewritten after every step (a visit cut short keeps what ran),
#     beside each step's output and log, and exits non-zero when any step failed. One
#     step's failure never stops the next (only a bundle that cannot be unpacked does).
#
# The steps, in the order they teach (their limits on a GPU):
#   unpack 15 s · host 10 s · facts 25 s (the host's PyTorch, driver and cuDNN, the SDPA
#   backends' priority order, the bytes cuBLAS's workspaces take after one matmul on each
#   of two streams, the bandwidth and matmul FLOP/s against the datasheet row Gradless
#   matches) · generate 55 s (Llama-3.1-8B bf16: static cache with the decode step's CUDA
#   graph replayed against a dynamic cache eager; Llama-3.2-1B bf16: graph against eager;
#   decode ms per token, % of bandwidth, the SDPA backend per phase, the KV cache against
#   its formula, whether the graph's tokens equal eager's) · cuda-tests 75 s (the engine's
#   CUDA test halves, one thread; not the statistical A/A test, not the soak, not the
#   cards) · pitfalls 125 s (the CUDA cards by id in one process, then the device test
#   that runs every card alone and after the whole tour) · server-check 30 s (recorded
#   CUDA runs through the API: no leak, a traced pass, the memory breakdown, CUDA graph
#   replay) · peer-compare 25 s (bench/compare.py: the same configs in Python PyTorch).
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
#   scripts/gpu-check.sh --bundle [DIR] [--allow-no-cuda-graphs]   (where the code is built)
#   DIR/gpu-check.sh [--rehearse | --dry-run] OUT_DIR  (on the GPU host, or here)
#
#   --bundle [DIR]   build the bundle in DIR (default target/gpu-bundle) from the release
#                    build (cargo builds what is missing first); at most 48 MiB.
#   --allow-no-cuda-graphs
#                    with --bundle: make the bundle even when CUDA graph capture is not
#                    compiled in (bundle.json says so; the graph runs will fail on a GPU).
#                    For a bundle that only the CPU rehearsal runs (scripts/test.sh).
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
ALLOW_NO_GRAPHS=0
MAX_BUNDLE_BYTES=$((48 * 1024 * 1024))
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) MODE=dry ;;
    --allow-no-cuda-graphs) ALLOW_NO_GRAPHS=1 ;;
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
  # What the build can do on a GPU, answered by the very test binary that travels (no GPU
  # needed): whether CUDA graph capture was compiled in (engine/build.rs compiles it only
  # where CUDA's runtime headers, crt/ included, were found), and whether the libtorch it
  # links has CUDA at all.
  facts_file="$(mktemp)"
  if ! GRADLESS_BUILD_FACTS="$facts_file" "$tests_exe" --exact build_facts::what_this_build_can_do_on_a_gpu >"$facts_file.log" 2>&1; then
    cat "$facts_file.log" >&2; rm -f "$facts_file" "$facts_file.log"
    echo "error: the test binary could not say what this build can do ($tests_exe)" >&2; exit 1
  fi
  rm -f "$facts_file.log"
  # The libtorch the binaries link: the rpath engine/build.rs gave them.
  libtorch_cuda=false
  for d in $(readelf -d "$tests_exe" 2>/dev/null | sed -n 's/.*R[UN]*PATH.*\[\(.*\)\]/\1/p' | tr ':' ' '); do
    [ -e "$d/libtorch_cuda.so" ] && libtorch_cuda=true
  done
  build_json="$(python3 -c 'import json,sys
f = json.load(open(sys.argv[1]))
f["libtorch_cuda"] = sys.argv[2] == "true"
f["allowed_without_cuda_graphs"] = sys.argv[3] == "1"
print(json.dumps(f))' "$facts_file" "$libtorch_cuda" "$ALLOW_NO_GRAPHS")"
  rm -f "$facts_file"
  graphs_built="$(python3 -c 'import json,sys; print("yes" if json.loads(sys.argv[1])["cuda_graphs_built"] else "no")' "$build_json")"
  if [ "$graphs_built" != yes ]; then
    why="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1]).get("no_cuda_graphs") or "")' "$build_json")"
    if [ "$ALLOW_NO_GRAPHS" = 1 ]; then
      echo "warning: CUDA graph capture is not compiled into this build ($why); the bundle says so, and its graph runs will fail on a GPU (--allow-no-cuda-graphs)" >&2
    else
      echo "error: CUDA graph capture is not compiled into this build: $why" >&2
      echo "       (libtorch with CUDA: $libtorch_cuda). A GPU visit would fail its graph runs. Install CUDA's crt headers (scripts/setup.sh: nvidia-cuda-crt) or set CUDA_HOME, rebuild, and bundle again; or pass --allow-no-cuda-graphs for a bundle the CPU rehearsal alone runs" >&2
      exit 1
    fi
  fi
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
  python3 - "$BUNDLE" "$(git rev-parse HEAD 2>/dev/null || echo unknown)" "$(git status --porcelain 2>/dev/null | grep -c . || true)" "$build_json" <<'PY'
import datetime, hashlib, json, os, sys
root, commit, dirty, build = sys.argv[1], sys.argv[2], int(sys.argv[3] or 0), json.loads(sys.argv[4])
files = {}
for d, _, names in os.walk(root):
    for n in sorted(names):
        p = os.path.join(d, n)
        rel = os.path.relpath(p, root)
        files[rel] = {"bytes": os.path.getsize(p), "sha256": hashlib.sha256(open(p, "rb").read()).hexdigest()}
json.dump({"commit": commit, "uncommitted_changes": dirty,
           "built_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "build": build, "files": files, "bytes": sum(f["bytes"] for f in files.values())},
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
rm -f "$OUT/summary.json"
FAILED=0
BUDGET=360 # the sum of the limits below may not pass it (checked as the steps are declared)
DECLARED=0
# The pitfalls step on a GPU: 125 s. A rehearsal runs the same cards on this machine's CPU,
# whose speed varies by host: without AVX-512 (a 2-core AMD EPYC, 2026-12-02) bf16 is
# slow. The rehearsal proves the plumbing, so on the CPU this step gets more time (and the
# budget with it); the GPU's limits stay as they are.
PITFALLS_LIMIT=125
if [ "$MODE" = rehearse ]; then PITFALLS_LIMIT=200; BUDGET=$((BUDGET + 75)); fi

# summary COMPLETE: OUT/summary.json from the steps recorded so far ("complete": false until
# the last step): a visit cut short (the machine taken back) keeps every step that ran.
summary() {
  "$JSONPY" - "$RESULTS" "$OUT/summary.json" "$MODE" "$SECONDS" "$HERE" "$1" <<'PYEOF'
import json, os, sys
results, summary, mode, seconds, here, complete = sys.argv[1:7]
steps = [json.loads(l) for l in open(results) if l.strip()]
manifest = {}
if os.path.exists(os.path.join(here, "bundle.json")):
    manifest = json.load(open(os.path.join(here, "bundle.json")))
doc = {"pass": complete == "yes" and bool(steps) and all(s["status"] == "pass" for s in steps),
       "complete": complete == "yes", "mode": mode, "dry_run": mode == "dry", "seconds": int(seconds),
       "commit": manifest.get("commit", "unknown"), "bundle_bytes": manifest.get("bytes"),
       "build": manifest.get("build"), "steps": steps}
tmp = summary + ".tmp"
json.dump(doc, open(tmp, "w"), indent=1)
os.replace(tmp, summary)
if complete == "yes":
    print(json.dumps({"pass": doc["pass"], "seconds": doc["seconds"], "steps": {s["name"]: s["status"] for s in steps}}))
PYEOF
}

# record NAME STATUS SECONDS LIMIT DETAIL [FIGURES_JSON]: one line of steps.jsonl, and the
# summary rewritten with it.
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
  summary no
}

# dry_fails NAME: whether the dry run was asked to fail this step.
dry_fails() { case ",${GPU_CHECK_DRY_FAIL:-}," in *",$1,"*) return 0 ;; esac; return 1; }

# step NAME LIMIT_S FUNCTION: runs FUNCTION under `timeout LIMIT_S` (the whole function:
# whatever it starts is killed with it). FUNCTION prints one JSON object of figures on stdout
# (kept in OUT/NAME.json) and returns non-zero on failure, after writing the reason to
# OUT/NAME.reason; its stderr goes to OUT/NAME.log. A step that runs several commands
# writes what it has so far to OUT/NAME.partial.json as it goes: when it is stopped at its
# limit, that is its figures. STEP_DEADLINE (seconds since the epoch) lets it share its
# time between the commands it runs.
step() {
  local name=$1 limit=$2 fn=$3
  DECLARED=$((DECLARED + limit))
  if [ "$DECLARED" -gt "$BUDGET" ]; then
    echo "error: the steps' limits add up to ${DECLARED}s, over the ${BUDGET}s budget" >&2
    exit 3
  fi
  echo "== $name (at most ${limit}s)" >&2
  local start=$SECONDS rc
  rm -f "$OUT/$name.reason" "$OUT/$name.partial.json"
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
  if ! "$JSONPY" -c 'import json,sys; json.load(open(sys.argv[1]))' "$OUT/$name.json" 2>/dev/null; then
    if [ -s "$OUT/$name.partial.json" ]; then cp "$OUT/$name.partial.json" "$OUT/$name.json"; else echo '{}' >"$OUT/$name.json"; fi
  fi
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
           build=manifest.get("build"), seconds=round(time.time() - t, 1))
print(json.dumps(out))
PY
  # Said up front (the step still passes: --allow-no-cuda-graphs was asked for at --bundle).
  "$JSONPY" -c 'import json,sys; b = json.load(open(sys.argv[1])).get("build") or {}
sys.exit(0 if b.get("cuda_graphs_built", True) else 1)' "$HERE/bundle.json" \
    || echo "this bundle has no CUDA graph capture (built with --allow-no-cuda-graphs): the graph runs will fail" >"$OUT/unpack.reason"
  return 0
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

# What the host is, before anything is measured on it (about 20 s on a GPU): the host's
# PyTorch (the libtorch the binaries load), its CUDA, cuDNN and driver, the SDPA backends in
# the order PyTorch tries them (`torch._C._get_sdp_priority_order()`), the bytes cuBLAS's
# workspaces take after one matmul on the default stream and one on a second stream (what
# the engine primes at start-up and what a process-wide statistic then holds), the copy
# bandwidth and fp32/bf16 matmul FLOP/s measured in PyTorch, and the device's peak as
# `gradless` finds it (a datasheet row it matches, or its own measurement) with the
# measured figures as a share of it. On the CPU (the rehearsal) the CUDA parts are absent.
facts() {
  if [ "$MODE" = dry ]; then echo '{"dry_run": true}'; return 0; fi
  "$PY" - "$DEVICE" "$OUT/facts.partial.json" "$GRADLESS" <<'PY'
import json, math, os, subprocess, sys, time
device, partial, gradless = sys.argv[1:4]
t0 = time.time()
out, problems = {"device": device}, []
def save():
    json.dump(out, open(partial, "w"))
import torch
out.update(torch=torch.__version__, torch_cuda=torch.version.cuda, import_s=round(time.time() - t0, 1),
           cudnn=torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None)
try:
    names = []
    for b in torch._C._get_sdp_priority_order():
        try:
            names.append(torch.nn.attention.SDPBackend(b).name)
        except Exception:
            names.append(str(b))
    out["sdp_priority_order"] = names
except Exception as e:
    problems.append(f"torch._C._get_sdp_priority_order(): {e}")
try:
    out["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                   capture_output=True, text=True, timeout=8).stdout.strip() or None
except (OSError, subprocess.SubprocessError):
    out["driver"] = None
save()
def timed(f, n):
    """Best of n, in seconds (CUDA events; f runs once untimed first)."""
    f(); torch.cuda.synchronize()
    best = math.inf
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); f(); b.record(); torch.cuda.synchronize()
        best = min(best, a.elapsed_time(b) / 1000)
    return best
if device == "cuda":
    if not torch.cuda.is_available():
        problems.append("PyTorch sees no CUDA device")
    else:
        p = torch.cuda.get_device_properties(0)
        out["gpu"] = {"name": p.name, "total_memory_bytes": p.total_memory, "capability": f"{p.major}.{p.minor}",
                      "multiprocessors": p.multi_processor_count}
        # cuBLAS's workspaces: what one matmul (and one with a bias, cuBLASLt's epilogue)
        # leaves allocated on the default stream, then on a second stream.
        a = torch.ones(64, 64, device="cuda")
        bias = torch.ones(64, device="cuda")
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        def mm():
            for kind in (torch.float32, torch.bfloat16):
                x, c = a.to(kind), bias.to(kind)
                r1, r2 = x @ x, torch.addmm(c, x, x)
                del x, c, r1, r2
        mm(); torch.cuda.synchronize()
        first = torch.cuda.memory_allocated() - base
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            mm()
        torch.cuda.synchronize()
        second = torch.cuda.memory_allocated() - base - first
        out["cublas_workspace_bytes"] = {"default_stream": first, "second_stream": second,
                                         "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
                                         "CUBLASLT_WORKSPACE_SIZE": os.environ.get("CUBLASLT_WORKSPACE_SIZE")}
        save()
        # Copy bandwidth (read + write) over 1 GiB, and square matmuls of 8192.
        n = 256 << 20
        x = torch.empty(n, device="cuda"); y = torch.empty_like(x)
        out["copy_gb_s"] = round(2 * 4 * n / timed(lambda: y.copy_(x), 5) / 1e9, 1)
        del x, y
        k = 8192
        prev = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        for kind, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
            m = torch.randn(k, k, device="cuda", dtype=kind)
            out[f"matmul_{name}_tflops"] = round(2 * k ** 3 / timed(lambda: m @ m, 5) / 1e12, 1)
            del m
        torch.backends.cuda.matmul.allow_tf32 = prev
        torch.cuda.empty_cache()
        save()
# The peak Gradless reports against: a datasheet row its device name matches, or measured.
try:
    r = subprocess.run([gradless, "measure", "--device", device, "--model", "tiny_mlp", "--batch", "1", "--warmup", "0",
                        "--iters", "1", "--threads", "1", "--json"], capture_output=True, text=True, timeout=60)
    rep = json.loads(r.stdout)
    roof = rep.get("roofline") or {}
    g = {"device_name": rep["env"]["device_name"], "peak_source": rep.get("peak_source"),
         "peak_tflops": roof.get("peak_tflops"), "bandwidth_gb_s": roof.get("bandwidth_gb_s")}
    g["datasheet_match"] = (g["peak_source"] or "").startswith("datasheet")
    if g["bandwidth_gb_s"] and out.get("copy_gb_s"):
        g["copy_percent_of_datasheet"] = round(100 * out["copy_gb_s"] / g["bandwidth_gb_s"], 1)
    if g["peak_tflops"] and out.get("matmul_fp32_tflops"):
        g["matmul_fp32_percent_of_datasheet"] = round(100 * out["matmul_fp32_tflops"] / g["peak_tflops"], 1)
    out["gradless"] = g
    if device == "cuda" and not g["datasheet_match"]:
        problems.append(f"gradless matches no datasheet row for {g['device_name']!r} (it measured its own peak: {g['peak_source']}); the bandwidth percentages are against that")
except (OSError, subprocess.SubprocessError, ValueError, KeyError) as e:
    problems.append(f"gradless measure: {e}")
out["seconds"] = round(time.time() - t0, 1)
out["problems"] = problems
save()
print(json.dumps(out))
if problems:
    print("\n".join(problems), file=sys.stderr)
    sys.exit(1)
PY
  local rc=$?
  [ $rc -eq 0 ] || tail -n 5 "$OUT/facts.log" >"$OUT/facts.reason" 2>/dev/null
  return $rc
}

# The engine's per-device test binary. On a GPU: its CUDA halves (ignored by default, so
# `--ignored`), one test thread, less what other steps or no visit run: the pitfall cards'
# halves (the pitfalls step runs the cards), the statistical A/A test of the grading rule
# (a CPU-only count run by hand) and the soak (hundreds of runs: minutes). In the rehearsal:
# the CPU halves of the invariants and the traced pass (the binary, its libtorch and its
# harness proven; cargo test runs the rest), and, in every mode, the list of what the GPU's
# filters select, checked to hold neither of those.
CUDA_TEST_SKIPS="--skip pitfalls::cuda:: --skip a_a:: --skip soak::"
cuda_tests() {
  if [ "$MODE" = dry ]; then echo '{"dry_run": true}'; return 0; fi
  local args
  # shellcheck disable=SC2086
  "$TESTS" --list --ignored $CUDA_TEST_SKIPS >"$OUT/cuda-tests.list" 2>&1
  if [ "$MODE" = gpu ]; then
    # shellcheck disable=SC2206
    args=(--ignored --test-threads=1 $CUDA_TEST_SKIPS)
  else
    args=(--test-threads=1 invariants:: trace::)
  fi
  "$TESTS" "${args[@]}" >"$OUT/cuda-tests.txt" 2>&1
  local rc=$?
  "$JSONPY" - "$OUT/cuda-tests.txt" "$OUT/cuda-tests.list" <<'PY'
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
# What `--ignored` with the GPU's skips selects: the CUDA halves, never the A/A test, the
# soak or a card.
selected = [l.split(": test")[0] for l in open(sys.argv[2], errors="replace") if l.rstrip().endswith(": test")]
stray = [t for t in selected if t.startswith(("a_a::", "soak::", "pitfalls::cuda::"))]
print(json.dumps({"passed": passed, "failed": failed, "ignored": ignored,
                  "gpu_selection": len(selected), "gpu_selection_stray": stray}))
problems = []
# A filter that matched nothing passes vacuously: that is a failure of the check.
if not passed:
    problems.append("the engine's test binary ran no test (the filter matched nothing)")
if not selected or stray:
    problems.append(f"the GPU's test selection is wrong: {len(selected)} tests, of which {stray} should not be there")
if problems:
    print("\n".join(problems), file=sys.stderr)
    sys.exit(1)
PY
  local prc=$?
  if [ $rc -ne 0 ]; then
    { echo "the engine's test binary failed (exit $rc):"; grep -E '^test .* FAILED$|panicked at' "$OUT/cuda-tests.txt" | head -20; } >"$OUT/cuda-tests.reason"
    return 1
  fi
  if [ $prc -ne 0 ]; then
    tail -n 3 "$OUT/cuda-tests.log" >"$OUT/cuda-tests.reason" 2>/dev/null
    return 1
  fi
}

# The pitfall cards, in two parts. First the cards only CUDA can decide, by id, in ONE
# process (`gradless pitfall all --only`), with the card whose quality rows run int4 in bf16
# on CUDA (int4-on-a-trained-model); the cards decided by exact bytes must confirm on every
# device; any other verdict is a finding reported in the figures, not a failure (a card
# may be refuted or inconclusive on a device, which is what it is there to show). Then the
# device test that runs cards alone and after the whole tour (`per_device!` names its CUDA
# half pitfalls::cuda::NAME): every card of the tour runs on the GPU there, and each
# compared card must answer the same in both places. The rehearsal runs the same cards on
# the CPU, and proves the test's invocation: the GPU's name selects exactly that test, and
# a quick CPU test of the same module runs (the tour's CPU half runs in cargo test).
PITFALL_CARDS="cuda-graphs,sync-timing,empty-cache,allocated-vs-reserved,tf32,int8-speed-depends,sdpa-backend,static-cache,int4-on-a-trained-model"
TOUR_TEST="pitfalls::cuda::a_card_answers_the_same_wherever_it_sits_in_the_tour"
pitfalls() {
  local rc=0 trc=0
  if [ "$MODE" = dry ]; then
    printf '%s\n' '{"id": "dry-a", "seconds": 0.1, "report": {"verdict": "confirmed", "reason": "dry"}}' \
      '{"id": "dry-b", "seconds": 0.1, "report": {"verdict": "refuted", "reason": "dry"}}' >"$OUT/pitfalls.jsonl"
    echo "test $TOUR_TEST ... ok" >"$OUT/pitfalls-tour.txt"
    echo "$TOUR_TEST: test" >"$OUT/pitfalls-tour.list"
  else
    local budget=()
    # batch-scaling's budget on a GPU: 16 GiB of batches to try, not the whole card.
    [ "$MODE" = gpu ] && budget=(--budget-mib 16384)
    # The cards get two fifths of the step (50 s on a GPU); the tour test what is left.
    local share=$(($(left) * 2 / 5)); [ "$share" -ge 1 ] || share=1
    timeout --kill-after=2 "$share" \
      "$GRADLESS" pitfall all --only "$PITFALL_CARDS" --device "$DEVICE" --jsonl "${budget[@]}" >"$OUT/pitfalls.jsonl"
    rc=$?
    "$TESTS" --list --ignored --exact "$TOUR_TEST" >"$OUT/pitfalls-tour.list" 2>&1
    if [ "$MODE" = gpu ]; then
      local rest=$(($(left) - 3)); [ "$rest" -ge 1 ] || rest=1
      timeout --kill-after=2 "$rest" "$TESTS" --ignored --exact "$TOUR_TEST" --test-threads=1 >"$OUT/pitfalls-tour.txt" 2>&1
    else
      "$TESTS" --exact pitfalls::cpu::unknown_cards_are_refused_by_name --test-threads=1 >"$OUT/pitfalls-tour.txt" 2>&1
    fi
    trc=$?
  fi
  "$JSONPY" - "$OUT/pitfalls.jsonl" "$rc" "$OUT/pitfalls-tour.txt" "$trc" "$OUT/pitfalls-tour.list" "$TOUR_TEST" "$PITFALL_CARDS" "$MODE" <<'PY'
import json, sys
path, rc, tour_txt, trc, tour_list, tour, wanted, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6], sys.argv[7].split(","), sys.argv[8]
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
if rc in (124, 137):
    problems.append(f"the cards ran out of their share of the step after {len(cards)} of {len(wanted)}")
elif rc != 0 and not problems:
    problems.append(f"gradless pitfall all exited {rc} before every card had reported")
if mode != "dry":
    missing = [c for c in wanted if c not in cards]
    if missing and rc == 0:
        problems.append(f"no report for {missing}")
# The tour test: its CUDA name selects exactly one test, and the test run passed.
listed = [l for l in open(tour_list, errors="replace") if l.rstrip().endswith(": test")]
if len(listed) != 1:
    problems.append(f"{tour} selects {len(listed)} tests, not one")
lines = open(tour_txt, errors="replace").read().splitlines()
ran = [l for l in lines if l.startswith("test ") and " ... " in l]
tour_ok = trc == 0 and any(l.endswith(" ... ok") for l in ran)
if not tour_ok:
    why = "timed out" if trc in (124, 137) else f"exit {trc}"
    panics = [l for l in lines if "panicked at" in l or l.startswith("  left") or l.startswith("  right")][:6]
    problems.append(f"the tour test failed ({why}): {' | '.join(ran + panics)[:600]}")
print(json.dumps({"cards": len(cards), "verdicts": counts, "by_card": cards,
                  "tour_test": {"name": tour, "ran": ran, "passed": tour_ok}}))
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
# the worker's leak check failed. `--self-test` checks its peak rule on made-up reports.
#
# The peak rule compares what is comparable. An eager run's traced pass is one more pass of
# the same kind: its peak is the run's within 2%. A CUDA graph run's timed iterations are
# replays, which allocate nothing (the graph's pool was filled at capture), and its traced
# pass is an eager pass made after the graph is dropped: the replays' peak must be no
# higher than that pass's, and that pass's peak is the eager twin's (the same spec without
# the graph, run before it) within 2%.
SERVER_CLIENT='
import json, sys, time, urllib.error, urllib.request
def within(a, b, share=0.02):
    return abs(a - b) <= share * max(a, b)
def peak_problems(rid, graph, tpeak, rpeak, twin_rpeak):
    if not graph:
        return [] if within(tpeak, rpeak) else [f"run {rid}: trace peak {tpeak} B vs run peak {rpeak} B (more than 2% apart)"]
    out = []
    if rpeak > 1.02 * tpeak:
        out.append(f"run {rid}: its graph replays peaked at {rpeak} B, above its eager traced pass ({tpeak} B)")
    if twin_rpeak is not None and not within(tpeak, twin_rpeak):
        out.append(f"run {rid}: its eager traced pass peaked at {tpeak} B, the eager run of the same spec at {twin_rpeak} B (more than 2% apart)")
    return out
if sys.argv[1] == "--self-test":
    cases = [((False, 100, 101, None), 0), ((False, 100, 150, None), 1), ((True, 100_000, 2_000, 99_000), 0),
             ((True, 100_000, 2_000, None), 0), ((True, 100_000, 150_000, 99_000), 1), ((True, 100_000, 2_000, 60_000), 1)]
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
    graph = bool((spec.get("advanced") or {}).get("cuda_graph"))
    twin = eager_peaks.get(twin_key(spec)) if graph else None
    run.update(cuda_graph=graph, eager_twin_peak_bytes=twin)
    if not graph:
        eager_peaks[twin_key(spec)] = rpeak
    if not trace:
        problems.append(f"run {rid}: no traced pass")
    else:
        problems.extend(peak_problems(rid, graph, tpeak, rpeak, twin))
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
            {"model": "resnet18", "batch": 1, "grad": "inference_mode", "warmup": 3, "iters": 10},
            {"model": "resnet18", "batch": 1, "grad": "inference_mode", "warmup": 3, "iters": 10, "advanced": {"cuda_graph": true}}]'
  else
    specs='[{"model": "tiny_mlp", "batch": 64, "grad": "no_grad", "warmup": 2, "iters": 5, "threads": 1},
            {"model": "resnet18", "batch": 2, "input_size": 64, "grad": "enabled", "eval": false, "warmup": 1, "iters": 3, "threads": 1},
            {"model": "resnet18", "batch": 1, "input_size": 64, "grad": "inference_mode", "warmup": 1, "iters": 3, "threads": 1, "advanced": {"cuda_graph": true}, "expect_refusal": "CUDA graph"}]'
  fi
  # The peak rule first, on made-up reports (the CPU has no graph run to show it).
  if ! "$JSONPY" -c "$SERVER_CLIENT" --self-test >"$OUT/server-check.selftest.json" 2>>"$OUT/server-check.log"; then
    echo "the client's peak rule fails its own cases: $(cat "$OUT/server-check.selftest.json")" >"$OUT/server-check.reason"
    return 1
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

# Generate runs, each its own `gradless generate`, written as they finish. On a GPU the
# decoder shapes the GPU is for, most telling first, in pairs: Llama-3.1-8B bf16 at batch 1
# with a static cache and the decode step's CUDA graph replayed, against a dynamic cache
# eager; Llama-3.2-1B bf16, graph against eager on the same static cache. Each records
# prefill, decode per token, tokens/s, the KV cache against its formula (which must match:
# exact bytes), the SDPA backend per phase and the decode bandwidth as % of the
# datasheet's; each pair whether its greedy tokens agree (a finding, not a failure: bf16
# rounds the masked whole-capacity attention differently). In the rehearsal the CPU preset
# (static against dynamic), and a graph request that must be refused with its reason.
generate_runs() {
  if [ "$MODE" = dry ]; then echo '{"dry_run": true, "runs": 0}'; return 0; fi
  local runs=() failed=0 cfgs
  if [ "$MODE" = gpu ]; then
    cfgs=("llama_3_1_8b bf16 1 static graph 8b" "llama_3_1_8b bf16 1 dynamic - 8b"
          "llama_3_2_1b bf16 1 static graph 1b" "llama_3_2_1b bf16 1 static - 1b")
    local prompt=512 new=128
  else
    cfgs=("llama_tiny fp32 1 static - tiny" "llama_tiny fp32 1 dynamic - tiny")
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
      runs+=("$6=$f")
    else
      echo "generate $cfg failed: $(tail -n 2 "$OUT/generate.log" | head -c 400)" >>"$OUT/generate.reason"; failed=1
    fi
    # What has finished so far is the step's figures if its limit stops it.
    generate_summary "${runs[@]}" >"$OUT/generate.partial.json" 2>/dev/null
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
  generate_summary "${runs[@]}"
  [ $? -eq 0 ] || { tail -n 5 "$OUT/generate.log" >>"$OUT/generate.reason"; failed=1; }
  return $failed
}

# generate_summary PAIR=FILE...: the generate step's figures from the runs' reports; exits 1
# on a problem (a graph asked for and not replayed, no SDPA backend named, cuDNN attention in
# decode, a KV cache off its formula).
generate_summary() {
  "$JSONPY" - "$@" <<'PY'
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
PY
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

export -f left generate_summary
export CUDA_TEST_SKIPS PITFALL_CARDS TOUR_TEST
# The order teaches: what the host is, then what the GPU is for (generation), then the
# tests, the cards, the server. One step's failure never stops the next; only a bundle
# that cannot be unpacked leaves nothing to run.
step unpack 15 unpack
if [ $FAILED -eq 1 ] && [ "$MODE" != dry ]; then
  echo "== the bundle could not be unpacked; nothing else can run" >&2
  for s in "host 10" "facts 25" "generate 55" "cuda-tests 75" "pitfalls $PITFALLS_LIMIT" "server-check 30" "peer-compare 25"; do
    set -- $s; skip "$1" "$2" "the bundle could not be unpacked"
  done
else
  step host 10 host_check
  step facts 25 facts
  step generate 55 generate_runs
  step cuda-tests 75 cuda_tests
  step pitfalls "$PITFALLS_LIMIT" pitfalls
  step server-check 30 server_check
  step peer-compare 25 peer_compare
fi
[ -n "${GPU_CHECK_BIN_DIR:-}" ] || rm -rf "$BIN"

summary yes
echo "== summary: $OUT/summary.json (${SECONDS}s)" >&2
exit $FAILED
