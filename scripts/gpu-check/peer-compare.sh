# The GPU check's peer-compare step (sourced by scripts/gpu-check.sh; run under `step`, see
# there): bench/compare.py, the same configs in Python PyTorch beside gradless. It passes
# only when both sides measured every config (peer_summary.py); the ratios themselves are
# figures, never a pass or a fail (a benchmark).

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
  # What the step is to show: every config measured by BOTH sides at least once, each
  # with a finite p50 and peak, their ratios, and the memory source each side read.
  "$JSONPY" "$PARTS/peer_summary.py" "$OUT/peer.json" 2>"$OUT/peer-compare.reason"
  local prc=$?
  [ $rc -eq 0 ] || { echo "bench/compare.py exited $rc (see peer-compare.log)" >>"$OUT/peer-compare.reason"; return 1; }
  return $prc
}
