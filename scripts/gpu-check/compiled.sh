# The GPU check's compiled steps, `compiled` and `compiled-cards` (sourced by
# scripts/gpu-check.sh; each runs under `step`, see there).

# A forward model compiled ahead of time (`--compiled`: torch.export, then AOTInductor in the
# venv's Python, the package run from libtorch), in two steps: `compiled` (required: the
# toolchain and part 1) and `compiled-cards` (optional: parts 2 and 3, on the package part 1
# left in the step's cache: both run with ONE thread count, GRADLESS_THREADS=1, so the
# package's key is the same and the cards' first one must find it cached). Each part runs
# under its own share of its step so that the figures are always written:
#   1. tiny_mlp compiled and measured (`gradless measure --compiled --batch 8 --eval --grad
#      no_grad --threads 1`): export, Inductor + build and load times, the compiled pass's
#      p50 beside the eager pass's, the largest difference, the package's size, and on CUDA
#      the driver's growth across the load (the package's constants: AOTInductor allocates
#      them with its own cudaMalloc, outside the caching allocator). GRADLESS_CACHE points at a
#      scratch folder of this visit (under $BIN), so the package, Inductor's cache
#      ($GRADLESS_CACHE/aoti/inductor) and Triton's are empty: the compile is a real one on
#      this host (a package from a cache is a failure: its times would not be this host's).
#   2. on a GPU only: torch.compile(mode="reduce-overhead") in the venv's Python, on a small
#      Linear/ReLU stack under no_grad: CUDA graph trees serve the outputs from the graphs'
#      memory, which the next call takes back. Read in torch/_inductor/cudagraph_trees.py
#      (v2.11.0): a call that starts a new generation (every call of a compiled function in
#      inference) ends the warm-up or recording run before it and frees that run's outputs,
#      whose storages then raise "Error: accessing tensor output of CUDAGraphs that has been
#      overwritten by a subsequent run" (dealloc_current_path_weakrefs, format_dealloc_msg);
#      once replaying, each replay hands back the same cached output tensors
#      (reconstruct_outputs), so an output kept from one call silently holds the next call's
#      values: no error then. Either way a clone taken before the next call keeps its own. The check sees
#      both, and the seconds of the first call (compile and warm-up). On the CPU it is
#      recorded as skipped: CUDA graphs need a GPU.
#   3. the compiled-model cards by id, on tiny_mlp, in one process (like the pitfalls step):
#      each must report (any verdict, not_applicable included: a finding, not a failure).
# The venv's Python compiles (GRADLESS_PYTHON: the binary's default is a venv under
# GRADLESS_CACHE or HOME, not TORCH_VENV), with the compile script and the architectures the
# binary carries (python/gradless/, compiled in). It needs a C++ compiler (AOTInductor's wrapper and CPU kernels), on
# a GPU a C compiler and Python.h (Triton's launcher), and safetensors (the compile script
# reads the weights with it; PyTorch does not depend on it, so the bundle carries a copy,
# used only where the host's Python has none): checked first, each with its own reason. On
# a GPU AOTInductor's CUDA build also needs a CUDA_HOME with crt/ among its headers and
# libcuda.so where the linker looks (torch.utils.cpp_extension, torch/_inductor/
# cpp_builder.py): where the host lacks one, the step works round it (torch's own
# nvidia/cu13 as CUDA_HOME, the bundle's crt/ on CPLUS_INCLUDE_PATH, a link to the driver's
# libcuda.so.1 on LIBRARY_PATH) and says so in its detail: a Gradless server compiling on
# that host would need the same.
CARDS_STEP_compiled_cards="compiled-first-call,compiled-batch,compiled-shapes,compiled-outputs,compiled-settings"

# compiled_setup: the environment both compiled steps share (the step's cache under $BIN, the
# venv's Python, one thread), and the toolchain check, once (its env is exported).
compiled_setup() {
  local work="$BIN/compiled" tool="$OUT/compiled-toolchain.json"
  mkdir -p "$work/cache"
  export GRADLESS_CACHE="$work/cache" TRITON_CACHE_DIR="$work/cache/triton" GRADLESS_THREADS=1
  export GRADLESS_PYTHON="$PY"
  if [ "$MODE" = dry ]; then
    echo '{"dry_run": true, "problems": []}' >"$tool"
    return 0
  fi
  # safetensors: the host's, else the bundle's copy.
  if ! "$PY" -c 'import safetensors' 2>/dev/null && [ -d "$HERE/pylib/safetensors" ]; then
    export PYTHONPATH="$HERE/pylib${PYTHONPATH:+:$PYTHONPATH}"
  fi
  if [ ! -s "$tool" ]; then
    rm -rf "$work/cuda-link"
    "$PY" "$PARTS/compiled_toolchain.py" "$MODE" "$HERE" "$work" >"$tool" 2>"$OUT/compiled-toolchain.err"
  fi
  # What the toolchain check set for these steps (CUDA_HOME, CPLUS_INCLUDE_PATH, LIBRARY_PATH).
  while IFS= read -r kv; do [ -n "$kv" ] && export "$kv"; done < <("$JSONPY" -c 'import json,sys
for k, v in (json.load(open(sys.argv[1])).get("env") or {}).items(): print(f"{k}={v}")' "$tool" 2>/dev/null)
  "$JSONPY" -c 'import json,sys; sys.exit(1 if json.load(open(sys.argv[1])).get("problems") else 0)' "$tool" 2>/dev/null
}

# The compiled step: tiny_mlp compiled in a fresh cache and measured.
compiled_check() {
  local mrc=- report="$OUT/compiled-measure.json"
  rm -rf "$BIN/compiled" "$report" "$OUT/compiled-toolchain.json" "$OUT"/compiled-*.err
  if compiled_setup; then
    if [ "$MODE" = dry ]; then
      # Made-up answers in the binary's shapes: the figures and the failure rules are exercised.
      "$JSONPY" -c 'import json; print(json.dumps({"env": {"device_name": "dry"}, "latency_ms": {"p50": 0.03},
        "compiled": {"package": "tiny_mlp-0.pt2", "package_bytes": 1, "cached": False, "export_ms": 1.0, "compile_ms": 2.0, "build_ms": 1.0,
                     "subprocess_ms": 3.0, "load_ms": 0.1, "batch_min": 1, "batch_max": 64, "eager_p50_ms": 0.05,
                     "eager_iters": 20, "eager_peak_above_baseline_bytes": 0, "max_abs_diff": 0.0, "bitwise_equal": True,
                     "break_even_passes": 100.0, "torch_version": "dry", "threads": 1}}))' >"$report"
      mrc=0
    else
      timeout --kill-after=2 "$(($(left) - 3))" "$GRADLESS" measure --model tiny_mlp --compiled --batch 8 --eval --grad no_grad \
        --device "$DEVICE" --threads 1 --json >"$report" 2>"$OUT/compiled-measure.err"
      mrc=$?
    fi
  fi
  compiled_summary measure "$report" "$mrc" - - - - 2>"$OUT/compiled.reason"
}

# The compiled-cards step: reduce-overhead's outputs (a GPU only), then the cards by id.
compiled_cards() {
  local rrc=- crc=- share work="$BIN/compiled"
  local report="$OUT/compiled-measure.json" ro="$OUT/compiled-reduce-overhead.json" cards="$OUT/compiled-cards.jsonl"
  rm -f "$ro" "$cards"
  if compiled_setup; then
    if [ "$MODE" = dry ]; then
      for id in ${CARDS_STEP_compiled_cards//,/ }; do
        echo "{\"id\": \"$id\", \"seconds\": 0.1, \"report\": {\"verdict\": \"not_applicable\", \"reason\": \"dry\"}}"
      done >"$cards"
      crc=0
    else
      if [ "$MODE" = gpu ]; then
        # A minute at most, and never more than leaves the cards 30 s.
        share=$(($(left) - 30)); [ "$share" -le 60 ] || share=60; [ "$share" -ge 1 ] || share=1
        # (reduce_overhead.py is read from stdin: it has no __main__ guard, and a compile
        # worker started with TORCHINDUCTOR_WORKER_START=spawn re-runs a main script that
        # is a file.)
        TORCHINDUCTOR_CACHE_DIR="$work/cache/reduce-overhead" TRITON_CACHE_DIR="$work/cache/reduce-overhead/triton" \
          timeout --kill-after=2 "$share" "$PY" - "$ro" <"$PARTS/reduce_overhead.py" 2>"$OUT/compiled-reduce-overhead.err" >/dev/null
        rrc=$?
        compiled_summary cards "$report" - "$ro" "$rrc" "$cards" "$crc" >"$OUT/compiled-cards.partial.json" 2>/dev/null
      fi
      share=$(($(left) - 4)); [ "$share" -ge 1 ] || share=1
      timeout --kill-after=2 "$share" "$GRADLESS" pitfall all --only "$CARDS_STEP_compiled_cards" --model tiny_mlp \
        --device "$DEVICE" --jsonl >"$cards" 2>"$OUT/compiled-cards.err"
      crc=$?
    fi
  fi
  compiled_summary cards "$report" - "$ro" "$rrc" "$cards" "$crc" 2>"$OUT/compiled-cards.reason"
  local rc=$?
  [ "$MODE" = gpu ] || echo "the reduce-overhead check did not run: CUDA graphs need a GPU" >>"$OUT/compiled-cards.reason"
  return $rc
}

# compiled_summary PART REPORT MEASURE_RC RO_JSON RO_RC CARDS_JSONL CARDS_RC: a compiled
# step's figures ("-": that part has not run); exits 1 on a problem, each written to stderr.
compiled_summary() {
  "$JSONPY" "$PARTS/compiled_summary.py" "$@" "$CARDS_STEP_compiled_cards" "$MODE" "$OUT"
}
export -f compiled_summary compiled_setup
export CARDS_STEP_compiled_cards
