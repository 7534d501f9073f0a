# The build machine's half of the GPU check (`scripts/gpu-check.sh --bundle [DIR]`), sourced by
# scripts/gpu-check.sh, which has set BUNDLE, ALLOW_NO_GRAPHS, MAX_TRAVEL_BYTES, HERE (the
# scripts/ folder) and PARTS (this folder). make_bundle puts everything the GPU host needs
# into BUNDLE and exits: 0, or 1 with the reason on stderr.

make_bundle() {
  ROOT="$(cd "$HERE/.." && pwd)"
  cd "$ROOT"
  source scripts/env.sh
  start=$SECONDS
  # The binaries `cargo test --release --workspace` builds (nothing is compiled when it has
  # run: the same command, the same features). Its JSON messages name each executable.
  artefacts="$(cargo test --release --workspace --no-run --message-format=json 2>/dev/null | python3 "$PARTS/bundle_artefacts.py")" \
    || { echo "error: the release build failed (run cargo test --release --workspace --no-run to see why)" >&2; exit 1; }
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
  # The cuda-tests step runs the binary's CUDA tests by exact name: its list must name every
  # one of them (a test added since would otherwise never run on a GPU) and nothing else.
  source "$PARTS/cuda-tests.sh"
  "$tests_exe" --list --ignored >"$facts_file.list" 2>&1
  # shellcheck disable=SC2086
  if ! python3 "$PARTS/cuda_tests_summary.py" --check-list "$facts_file.list" "$CUDA_TESTS_SKIPPED" $CUDA_TESTS >&2; then
    rm -f "$facts_file" "$facts_file.list"
    echo "error: scripts/gpu-check/cuda-tests.sh's CUDA_TESTS differs from the test binary's CUDA tests (above)" >&2; exit 1
  fi
  rm -f "$facts_file.list"
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
  # Its parts: each step's body (bash) and the Python it runs, found beside the script.
  cp -r "$PARTS" "$BUNDLE/gpu-check"
  rm -rf "$BUNDLE/gpu-check/__pycache__"
  # The peer benchmark: bench/compare.py runs python/gradless/peer.py, found beside bench/
  # (the binary carries the package's sources it runs itself).
  cp bench/compare.py "$BUNDLE/bench/"
  mkdir -p "$BUNDLE/python/gradless"
  cp python/gradless/*.py "$BUNDLE/python/gradless/"
  # safetensors, for the compile script (python/gradless/aoti_compile.py reads the weights
  # with it) on a host whose venv lacks it: PyTorch does not depend on it. The venv's copy
  # is an abi3 wheel's (CPython 3.10 or newer, manylinux); the compiled step puts pylib/ on
  # PYTHONPATH only where the host's Python cannot import its own.
  safetensors="$(ls -d "$GRADLESS_VENV"/lib/python3*/site-packages/safetensors 2>/dev/null | head -1)"
  if [ -n "$safetensors" ]; then
    mkdir -p "$BUNDLE/pylib"
    cp -r "$safetensors" "$BUNDLE/pylib/"
    rm -rf "$BUNDLE/pylib/safetensors/__pycache__"
  else
    echo "warning: no safetensors in $GRADLESS_VENV: the bundle carries none (a host without it cannot compile)" >&2
  fi
  # CUDA's crt/ headers (nvidia-cuda-crt, which scripts/setup.sh adds beside torch's CUDA
  # runtime): AOTInductor's CUDA build includes cuda_runtime_api.h, which includes
  # crt/host_defines.h, and torch's wheel brings no crt/. The compiled step puts them on
  # CPLUS_INCLUDE_PATH only where the host's CUDA headers lack them.
  crt="$(ls -d "$GRADLESS_VENV"/lib/python3*/site-packages/nvidia/cu13/include/crt 2>/dev/null | head -1)"
  if [ -n "$crt" ]; then
    mkdir -p "$BUNDLE/cuda/include"
    cp -r "$crt" "$BUNDLE/cuda/include/"
  else
    echo "warning: no CUDA crt/ headers in $GRADLESS_VENV: the bundle carries none (a host without them cannot compile for CUDA)" >&2
  fi
  # The model trained here (its weights and held-out text): the card int4-on-a-trained-model
  # and the device tests build it, found through GRADLESS_TRAINED_DIR on the host.
  mkdir -p "$BUNDLE/models"
  cp -r models/torch_bytes "$BUNDLE/models/"
  python3 "$PARTS/bundle_manifest.py" "$BUNDLE" "$(git rev-parse HEAD 2>/dev/null || echo unknown)" "$(git status --porcelain 2>/dev/null | grep -c . || true)" "$build_json"
  bytes=$(du -sb "$BUNDLE" | cut -f1)
  # What travels to the GPU host is the working tree (tracked and untracked-not-ignored
  # files) AND the bundle, carried beside it: 64 MiB together, of which this keeps 2 spare.
  tree=$(git ls-files -z -co --exclude-standard 2>/dev/null | python3 -c 'import os,sys
print(sum(os.path.getsize(p) for p in sys.stdin.buffer.read().decode().split("\0") if p and os.path.isfile(p)))')
  travels=$((bytes + tree))
  echo "bundle: $BUNDLE, $bytes bytes; with the working tree's $tree bytes, $travels bytes travel ($((travels / 1024 / 1024)) MiB of at most $((MAX_TRAVEL_BYTES / 1024 / 1024))), in $((SECONDS - start)) s" >&2
  ls -l "$BUNDLE" "$BUNDLE/bin" >&2
  if [ "$travels" -gt "$MAX_TRAVEL_BYTES" ]; then
    echo "error: the bundle ($bytes B) and the working tree ($tree B) come to $travels B, over the $MAX_TRAVEL_BYTES B that leaves room in the 64 MiB that travels" >&2
    exit 1
  fi
  exit 0
}
