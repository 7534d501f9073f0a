# Sourced by the other scripts: where Gradless keeps its caches and how the build finds
# libtorch. Everything heavy lives outside the clone so fresh clones (and CI) reuse it.
export GRADLESS_CACHE="${GRADLESS_CACHE:-$HOME/.cache/gradless}"
export GRADLESS_VENV="${GRADLESS_VENV:-$GRADLESS_CACHE/venv}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$GRADLESS_CACHE/target}"
export PATH="$HOME/.cargo/bin:$PATH"
if [ -n "${LIBTORCH:-}" ]; then
  # A libtorch the user unpacked: torch-sys reads LIBTORCH itself.
  unset LIBTORCH_USE_PYTORCH
else
  export LIBTORCH_USE_PYTORCH=1
  export VIRTUAL_ENV="$GRADLESS_VENV"
  export PATH="$GRADLESS_VENV/bin:$PATH"
fi
