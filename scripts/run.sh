#!/usr/bin/env bash
# Sets up what is missing, builds, and serves Gradless at http://127.0.0.1:3000 (GRADLESS_ADDR
# to change). Uses the GPU when libtorch finds one, the CPU otherwise. Extra arguments go to
# `gradless serve`, e.g. scripts/run.sh --addr 0.0.0.0:8080
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/env.sh
echo "==> Building the server (the first build compiles libtorch's C++ wrapper: several minutes)"
cargo build --release -p server
scripts/build-site.sh
exec "$CARGO_TARGET_DIR/release/gradless" serve --site-root target/site "$@"
