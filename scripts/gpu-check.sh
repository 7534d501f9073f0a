#!/usr/bin/env bash
# The GPU check: a test, not a recorder, made to pass in one short visit to a GPU host that
# has PyTorch 2.11 (CUDA 13) but no Rust toolchain, no network and about 15 minutes in all,
# the machine's start and a second try included.
#
# Two halves:
#   - here, where the code is built: `scripts/gpu-check.sh --bundle [DIR]` puts everything
#     the host needs into one folder (default target/gpu-bundle, ignored by git): the
#     stripped, xz-compressed `gradless` binary and the engine's per-device test binary
#     (the very ones `cargo test --release --workspace` built), this script and its parts
#     (gpu-check/, beside it), the peer benchmark (bench/compare.py, and the package it
#     runs, python/gradless/, whose sources the binary also carries), copies of the venv's
#     safetensors (pylib/) and of CUDA's crt/ headers (cuda/include/crt), each used on the
#     host only where it lacks its own, and bundle.json (commit, sizes, sha256, and whether CUDA graph
#     capture is compiled in). What travels to the host is the whole working tree AND the
#     bundle, 64 MiB together: the bundle step counts both and fails above 62 MiB, and fails
#     when graph capture is not compiled in, unless --allow-no-cuda-graphs.
#   - there: `DIR/gpu-check.sh OUT_DIR` unpacks the binaries (Python's lzma: no xz needed),
#     checks the host, then runs every step under `timeout` with its own limit.
#
# The time, by construction: the REQUIRED steps' limits add up to at most 300 s (checked
# as they are declared). Each OPTIONAL step after them starts only when the seconds spent
# so far plus its limit stay within the 360 s BUDGET; otherwise it is recorded as skipped,
# with the reason, and the check still passes. Whatever hangs, the visit ends within six
# minutes, which leaves room in 15 for the machine's start and a second try.
#
# The order, by what the visit teaches and what is riskiest (limits on a GPU):
#   required: unpack 10 s · host 10 s · facts 25 s (the host's PyTorch, driver and cuDNN;
#     the SDPA backends' order read after one bf16 SDPA call, and the kernel that ran;
#     cuBLAS's workspaces; bandwidth and matmul FLOP/s against the datasheet row Gradless
#     matches) · generate 55 s (Llama-3.1-8B bf16, the decode step's CUDA graph against a
#     dynamic cache eager; Llama-3.2-1B, graph against eager) · cuda-tests 60 s (the
#     engine's CUDA tests, by exact name) · cards 60 s (the cards only CUDA decides, and
#     those decided by exact bytes, by id) · compiled 80 s (tiny_mlp exported and compiled
#     by AOTInductor in a fresh cache, measured against eager).
#   optional: server-check 30 s (recorded CUDA runs through the API) · more-cards 60 s (the
#     other cards whose statements name a GPU step) · tour 40 s (the tour-order test on
#     CUDA: one worker, per-run deltas) · compiled-cards 90 s (torch.compile's
#     reduce-overhead outputs in CUDA graph memory, and the five compiled-model cards, on
#     the compiled step's package) · peer-compare 25 s (bench/compare.py: the same configs
#     in Python PyTorch; passes only when both sides measured every config).
# Every card whose statements say a GPU step measures them (`Said::source`'s gpu_step in
# engine/src/pitfalls/) is run by id in that step: engine/tests/gpu_check_script.rs holds the
# lists (CARDS_STEP_* in gpu-check/*.sh) to the statements.
#
# What comes back: the device machine returns at most 8 files from OUT_DIR (16 MiB each,
# 64 MiB together, two folders down at most, names of letters, digits, '.', '_' and '-').
# So the steps write into a scratch folder (GPU_CHECK_WORK, default a fresh one under
# TMPDIR), and OUT_DIR gets exactly two files, rewritten after every step so that a visit
# cut short keeps what ran: summary.json ({"pass", "complete", "mode", "seconds",
# "budget_s", "commit", "build", "steps": [{"name", "required", "status":
# "pass"|"fail"|"skipped", "seconds", "limit_s", "detail", "figures"}], "files"}) and
# gpu-check-files.tar.gz (every step's output and log; a file that would take it past
# 15 MiB is left out and named in summary.json). The check ends by testing OUT_DIR against
# those limits (gpu-check/returned.py) and fails when it would not come back whole. It exits
# non-zero when any step failed; one step's failure never stops the next (only a bundle
# that cannot be unpacked does).
#
# Where things are: this file is the entry point (the arguments, the step runner, the order
# of the steps and their limits). Each step's body is a bash function in the folder
# gpu-check/ beside it (scripts/gpu-check/ here, DIR/gpu-check/ in a bundle), which it
# sources: host.sh (unpack and host), facts.sh, generate.sh, cuda-tests.sh, pitfalls.sh
# (cards, more-cards), tour.sh, server-check.sh, compiled.sh (compiled, compiled-cards),
# peer-compare.sh, and bundle.sh (the --bundle half). The Python they run is beside them.
#
# `--rehearse` runs the same bundle and the same steps on this machine's CPU with small
# shapes, from wherever the bundle was copied to (scripts/test.sh copies ONLY the bundle to
# a scratch folder, with no cargo and no build tree on PATH), every step (none is skipped:
# the CPU's limits are its own), so the plumbing, the paths and the returned files are
# proven before minutes on a GPU are spent. `--dry-run` exercises the script's own
# bookkeeping with nothing heavy (engine/tests/gpu_check_script.rs); with
# GPU_CHECK_DRY_CLOCK=limits its clock advances by each step's limit, so the budget's skips
# are exercised too.
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
#                    build (cargo builds what is missing first).
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
MAX_TRAVEL_BYTES=$((62 * 1024 * 1024)) # the bundle and the working tree together (64 MiB travel)
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
# RETURNED: the folder that comes back (two files); OUT: the scratch folder every step
# writes into (the step functions name it OUT).
RETURNED="$(cd "$OUT_ARG" && pwd)"
OUT="${GPU_CHECK_WORK:-$(mktemp -d "${TMPDIR:-/tmp}/gradless-gpu-check-files.XXXXXX")}"
mkdir -p "$OUT" || { echo "error: cannot create $OUT" >&2; exit 2; }
OUT="$(cd "$OUT" && pwd)"
[ "$OUT" != "$RETURNED" ] || { echo "error: GPU_CHECK_WORK must not be OUT_DIR" >&2; exit 2; }
rm -f "$RETURNED/summary.json" "$RETURNED/gpu-check-files.tar.gz"
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

# The steps: NAME, its limit on a GPU, its limit on the CPU (the rehearsal: a 2-core CPU
# builds AOTInductor packages and runs the cards far slower than a GPU host, and proves
# the plumbing, not the GPU's time), the function in gpu-check/ that runs it, and whether
# it is required. In this order.
STEPS=(
  "unpack 10 15 unpack required"
  "host 10 10 host_check required"
  "facts 25 25 facts required"
  "generate 55 55 generate_runs required"
  "cuda-tests 60 75 cuda_tests required"
  "cards 60 120 cards required"
  "compiled 80 150 compiled_check required"
  "server-check 30 30 server_check optional"
  "more-cards 60 200 more_cards optional"
  "tour 40 20 tour optional"
  "compiled-cards 90 200 compiled_cards optional"
  "peer-compare 25 25 peer_compare optional"
)
REQUIRED_BUDGET=300 # the required steps' limits may not add up to more (on a GPU)
BUDGET=360          # no optional step starts that could end past it (on a GPU)
limit_of() { if [ "$MODE" = rehearse ]; then echo "$3"; else echo "$2"; fi; }
required_sum=0 all_sum=0
for s in "${STEPS[@]}"; do
  set -- $s
  l=$(limit_of "$@")
  all_sum=$((all_sum + l))
  [ "$5" = required ] && required_sum=$((required_sum + $2))
done
if [ "$required_sum" -gt "$REQUIRED_BUDGET" ]; then
  echo "error: the required steps' limits add up to ${required_sum}s on a GPU, over ${REQUIRED_BUDGET}s" >&2
  exit 3
fi
# The rehearsal runs every step (its limits are the CPU's own); the dry run keeps the GPU's.
[ "$MODE" = rehearse ] && BUDGET=$all_sum
# The clock the budget reads: seconds since the start, or, in a dry run with
# GPU_CHECK_DRY_CLOCK=limits, the sum of the limits of the steps run so far.
VIRTUAL=0
clock() { if [ "$MODE" = dry ] && [ "${GPU_CHECK_DRY_CLOCK:-}" = limits ]; then echo "$VIRTUAL"; else echo "$SECONDS"; fi; }

# summary COMPLETE: summary.json from the steps recorded so far ("complete": false until
# the last step), in the scratch folder and in the returned one, with the tarball of the
# scratch folder beside it: a visit cut short (the machine taken back) keeps every step
# that ran.
summary() {
  "$JSONPY" "$PARTS/summary.py" "$RESULTS" "$OUT/summary.json" "$MODE" "$(clock)" "$HERE" "$1" "$BUDGET" "$RETURNED"
}

# record NAME REQUIRED STATUS SECONDS LIMIT DETAIL [FIGURES_JSON]: one line of steps.jsonl,
# and the summary rewritten with it. A required step that did not pass, or any step that
# failed, fails the check; an optional step skipped for the budget does not.
record() {
  "$JSONPY" "$PARTS/record.py" "$@" >>"$RESULTS"
  if [ "$3" = fail ] || { [ "$2" = required ] && [ "$3" != pass ]; }; then FAILED=1; fi
  echo "== $1: $3 in ${4}s${6:+ ($6)}" >&2
  summary no
}

# dry_fails NAME: whether the dry run was asked to fail this step.
dry_fails() { case ",${GPU_CHECK_DRY_FAIL:-}," in *",$1,"*) return 0 ;; esac; return 1; }

# step NAME LIMIT FUNCTION REQUIRED: runs FUNCTION under `timeout LIMIT` (the whole
# function: whatever it starts is killed with it). FUNCTION prints one JSON object of
# figures on stdout (kept in OUT/NAME.json) and returns non-zero on failure, after writing
# the reason to OUT/NAME.reason; its stderr goes to OUT/NAME.log. A step that runs several
# commands writes what it has so far to OUT/NAME.partial.json as it goes: when it is
# stopped at its limit, that is its figures. STEP_DEADLINE (seconds since the epoch) lets
# it share its time between the commands it runs.
step() {
  local name=$1 limit=$2 fn=$3 req=$4
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
  VIRTUAL=$((VIRTUAL + limit))
  local reason=""
  [ -s "$OUT/$name.reason" ] && reason="$(head -c 2000 "$OUT/$name.reason")"
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then reason="timed out after ${limit}s${reason:+; $reason}"; fi
  if ! "$JSONPY" -c 'import json,sys; json.load(open(sys.argv[1]))' "$OUT/$name.json" 2>/dev/null; then
    if [ -s "$OUT/$name.partial.json" ]; then cp "$OUT/$name.partial.json" "$OUT/$name.json"; else echo '{}' >"$OUT/$name.json"; fi
  fi
  if [ $rc -eq 0 ]; then
    record "$name" "$req" pass $((SECONDS - start)) "$limit" "$reason" "$(cat "$OUT/$name.json")"
  else
    record "$name" "$req" fail $((SECONDS - start)) "$limit" "${reason:-exit status $rc; see $name.log}" "$(cat "$OUT/$name.json")"
  fi
}

# skip NAME REQUIRED LIMIT REASON: a step that does not run.
skip() { record "$1" "$2" skipped 0 "$3" "$4"; }

# left: seconds until this step's deadline (for the commands a step runs one by one).
left() { echo $((STEP_DEADLINE - $(date +%s))); }

# The trained model's folder travels in the bundle (the build's own path is not on the host).
GRADLESS_TRAINED_DIR="$HERE/models"
export JSONPY PY GRADLESS TESTS OUT MODE DEVICE TORCH_VENV TORCH_LIB BIN SERVER_PORT HERE PARTS GRADLESS_TRAINED_DIR

# ---- the steps: each a function from its file in gpu-check/ -----------------------------
for part in host facts generate cuda-tests pitfalls tour server-check compiled peer-compare; do
  source "$PARTS/$part.sh" || { echo "error: $PARTS/$part.sh could not be read" >&2; exit 2; }
done
export -f left

# One step's failure never stops the next; only a bundle that cannot be unpacked leaves
# nothing to run. An optional step starts only if it would end within the budget.
unpacked=1
for s in "${STEPS[@]}"; do
  set -- $s
  name=$1 limit=$(limit_of "$@") fn=$4 req=$5
  if [ $unpacked -eq 0 ]; then
    skip "$name" "$req" "$limit" "the bundle could not be unpacked"
  elif [ "$req" = optional ] && [ $(($(clock) + limit)) -gt "$BUDGET" ]; then
    skip "$name" "$req" "$limit" "it could end past the ${BUDGET}s budget ($(clock)s spent, at most ${limit}s more)"
  else
    step "$name" "$limit" "$fn" "$req"
  fi
  if [ "$name" = unpack ] && [ $FAILED -eq 1 ] && [ "$MODE" != dry ]; then
    echo "== the bundle could not be unpacked; nothing else can run" >&2
    unpacked=0
  fi
done
[ -n "${GPU_CHECK_BIN_DIR:-}" ] || rm -rf "$BIN"

summary yes || FAILED=1
echo "== summary: $RETURNED/summary.json, every step's files in $RETURNED/gpu-check-files.tar.gz (${SECONDS}s)" >&2
exit $FAILED
