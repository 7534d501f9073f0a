# The GPU check's first steps (sourced by scripts/gpu-check.sh; each runs under `step`, see there):
# unpack, the bundle's binaries checked against bundle.json and unpacked (unpack.py), and host,
# what the host must have for the rest to run.

unpack() {
  if [ "$MODE" = dry ]; then echo '{"dry_run": true}'; return 0; fi
  [ -f "$HERE/bundle.json" ] || { echo "no bundle.json beside $0: run the copy in a bundle (scripts/gpu-check.sh --bundle DIR, then DIR/gpu-check.sh)" >"$OUT/unpack.reason"; return 1; }
  "$JSONPY" "$PARTS/unpack.py" "$HERE" "$BIN" || { cp "$OUT/unpack.log" "$OUT/unpack.reason" 2>/dev/null; return 1; }
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
    # The binary loads this host's libtorch (LD_LIBRARY_PATH, set by gpu-check.sh) and starts.
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
