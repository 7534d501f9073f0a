#!/usr/bin/env bash
# Sets up what is missing and runs every test: the Rust tests (protocol, engine invariants on
# CPU libtorch, the API through the router, the app's pure logic), the check that the browser
# build pulls in no server crates, and the browser tests (Playwright + Debian's Chromium)
# against a freshly started server. The last line is Playwright's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --browser
source scripts/env.sh

echo "==> Rust tests (the first build compiles libtorch's C++ wrapper: several minutes)"
cargo test --release --workspace

echo "==> The browser build pulls in no tch, tokio or axum"
if cargo tree -p app --no-default-features --features hydrate --target wasm32-unknown-unknown -e normal \
    | grep -E '^[^a-z]*(tch|torch-sys|tokio|axum|leptos_axum) v'; then
  echo "error: the hydrate build depends on server crates (listed above)" >&2
  exit 1
fi
echo "ok: none"

echo "==> Building the server and the site"
cargo build --release -p server
scripts/build-site.sh

port=${GRADLESS_TEST_PORT:-3137}
log="$CARGO_TARGET_DIR/gradless-e2e.log"
echo "==> Starting gradless on 127.0.0.1:$port (log: $log)"
GRADLESS_THREADS=1 "$CARGO_TARGET_DIR/release/gradless" serve --addr "127.0.0.1:$port" --site-root target/site >"$log" 2>&1 &
server_pid=$!
trap 'kill $server_pid 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break
  kill -0 $server_pid 2>/dev/null || { cat "$log"; echo "error: the server did not start" >&2; exit 1; }
  sleep 0.5
done

echo "==> Browser tests"
cd end2end
GRADLESS_URL="http://127.0.0.1:$port" npx playwright test
