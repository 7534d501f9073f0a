# The GPU check's cuda-tests step (sourced by scripts/gpu-check.sh; run under `step`, see there).

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
  "$JSONPY" "$PARTS/cuda_tests_summary.py" "$OUT/cuda-tests.txt" "$OUT/cuda-tests.list"
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
export CUDA_TEST_SKIPS
