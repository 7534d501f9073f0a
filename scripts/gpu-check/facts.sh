# The GPU check's facts step (sourced by scripts/gpu-check.sh; run under `step`, see there).

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
  "$PY" "$PARTS/facts.py" "$DEVICE" "$OUT/facts.partial.json" "$GRADLESS"
  local rc=$?
  [ $rc -eq 0 ] || tail -n 5 "$OUT/facts.log" >"$OUT/facts.reason" 2>/dev/null
  return $rc
}
