#!/usr/bin/env bash
# The GPU check: a test, not a recorder, made to pass in one short visit to a GPU host that
# has PyTorch 2.11 (CUDA 13) but no Rust toolchain, no network and about 15 minutes in all.
#
# Two halves:
#   - here, where the code is built: `scripts/gpu-check.sh --bundle [DIR]` puts everything
#     the host needs into one folder (default target/gpu-bundle, ignored by git): the
#     stripped, xz-compressed `gradless` binary and the engine's per-device test binary
#     (the very ones `cargo test --release --workspace` built), this script and its parts
#     (gpu-check/, beside it), the peer benchmark (bench/compare.py, and bench/peer.py,
#     which the compiled runs build their models from), copies of the venv's safetensors
#     (pylib/: the compile script reads weights with it, and PyTorch does not depend on it)
#     and of CUDA's crt/ headers (cuda/include/crt: AOTInductor's CUDA build needs them,
#     torch's wheel has none), each used on the host only where it lacks its own, and
#     bundle.json (commit, sizes, sha256, and what the build can do on a GPU: whether CUDA
#     graph capture is compiled in). It measures itself and fails above 48 MiB (64 MiB is
#     all that travels), and fails when graph capture is not compiled in (a build without
#     CUDA's crt/ headers), unless --allow-no-cuda-graphs.
#   - there: `DIR/gpu-check.sh OUT_DIR` unpacks the binaries (Python's lzma: no xz needed),
#     checks the host, then runs every step under `timeout` with its own limit. The limits
#     add up to at most 540 s, so the whole check ends within nine minutes BY CONSTRUCTION
#     whatever hangs, inside a 15-minute visit with the machine's start and the transfers
#     (a rerun fits only when the steps end well inside their limits). It writes ONE summary,
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
#   replay) · compiled 180 s (tiny_mlp exported and compiled with AOTInductor, really: a
#   fresh cache; its compile times, its pass against eager's, their difference; the
#   compiled-model cards; torch.compile(mode="reduce-overhead")'s outputs in CUDA graph
#   memory that the next call takes back) · peer-compare 25 s (bench/compare.py: the same
#   configs in Python PyTorch).
#
# Where things are: this file is the entry point (the arguments, the step runner, the order
# of the steps and their limits). Each step's body is a bash function in the folder
# gpu-check/ beside it (scripts/gpu-check/ here, DIR/gpu-check/ in a bundle), which it
# sources: host.sh (unpack and host), facts.sh, generate.sh, cuda-tests.sh, pitfalls.sh,
# server-check.sh, compiled.sh, peer-compare.sh, and bundle.sh (the --bundle half). The
# Python they run is in the .py files beside them.
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
PARTS="$HERE/gpu-check" # each step's body, and the Python it runs (copied into the bundle)
[ -d "$PARTS" ] || { echo "error: no $PARTS: the check's steps live there, beside $0" >&2; exit 2; }

# ---- the build machine's half: the bundle (gpu-check/bundle.sh) -------------------------
if [ -n "$BUNDLE" ]; then
  source "$PARTS/bundle.sh"
  make_bundle
  exit $?
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
BUDGET=540 # the sum of the limits below may not pass it (checked as the steps are declared)
DECLARED=0
# The pitfalls step on a GPU: 125 s. A rehearsal runs the same cards on this machine's CPU,
# whose speed varies by host: without AVX-512 (a 2-core AMD EPYC, 2026-12-02) bf16 is
# slow. The rehearsal proves the plumbing, so on the CPU this step gets more time (and the
# budget with it); the GPU's limits stay as they are.
PITFALLS_LIMIT=125
# The compiled step on a GPU: 180 s, for two AOTInductor builds (Triton kernels and the C++
# wrapper, guessed at 20-40 s each on the host: tiny_mlp's, and the one compiled-shapes
# makes in its own Python process; the other cards reuse tiny_mlp's package from the
# step's cache) and one torch.compile(mode="reduce-overhead"). On this 2-core CPU
# (2026-12-07, another build running) the step took 86 s: tiny_mlp's package about 40 s
# (export 1.3 s, Inductor and the C++ build 35.5 s), the five cards 45 s (compiled-shapes
# 43 s of it); the rehearsal's gets 240 s.
COMPILED_LIMIT=180
if [ "$MODE" = rehearse ]; then
  PITFALLS_LIMIT=200; COMPILED_LIMIT=240; BUDGET=$((BUDGET + 75 + 60))
fi

# summary COMPLETE: OUT/summary.json from the steps recorded so far ("complete": false until
# the last step): a visit cut short (the machine taken back) keeps every step that ran.
summary() {
  "$JSONPY" "$PARTS/summary.py" "$RESULTS" "$OUT/summary.json" "$MODE" "$SECONDS" "$HERE" "$1"
}

# record NAME STATUS SECONDS LIMIT DETAIL [FIGURES_JSON]: one line of steps.jsonl, and the
# summary rewritten with it.
record() {
  "$JSONPY" "$PARTS/record.py" "$@" >>"$RESULTS"
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
export JSONPY PY GRADLESS TESTS OUT MODE DEVICE TORCH_VENV TORCH_LIB BIN SERVER_PORT HERE PARTS GRADLESS_TRAINED_DIR

# ---- the steps: each a function from its file in gpu-check/ -----------------------------
for part in host facts generate cuda-tests pitfalls server-check compiled peer-compare; do
  source "$PARTS/$part.sh" || { echo "error: $PARTS/$part.sh could not be read" >&2; exit 2; }
done
export -f left

# The order teaches: what the host is, then what the GPU is for (generation), then the
# tests, the cards, the server, the compiled model. The compiled step comes before the
# peer: its figures (a compile on this host, CUDA graph memory) are measured nowhere else,
# the peer's side-by-side is, so a visit cut short near its end loses the peer first. One
# step's failure never stops the next; only a bundle that cannot be unpacked leaves
# nothing to run.
step unpack 15 unpack
if [ $FAILED -eq 1 ] && [ "$MODE" != dry ]; then
  echo "== the bundle could not be unpacked; nothing else can run" >&2
  for s in "host 10" "facts 25" "generate 55" "cuda-tests 75" "pitfalls $PITFALLS_LIMIT" "server-check 30" "compiled $COMPILED_LIMIT" "peer-compare 25"; do
    set -- $s; skip "$1" "$2" "the bundle could not be unpacked"
  done
else
  step host 10 host_check
  step facts 25 facts
  step generate 55 generate_runs
  step cuda-tests 75 cuda_tests
  step pitfalls "$PITFALLS_LIMIT" pitfalls
  step server-check 30 server_check
  step compiled "$COMPILED_LIMIT" compiled_check
  step peer-compare 25 peer_compare
fi
[ -n "${GPU_CHECK_BIN_DIR:-}" ] || rm -rf "$BIN"

summary yes
echo "== summary: $OUT/summary.json (${SECONDS}s)" >&2
exit $FAILED
