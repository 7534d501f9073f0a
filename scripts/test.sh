#!/usr/bin/env bash
# Sets up what is missing and runs every test: the Rust tests (protocol, engine invariants on
# CPU libtorch, a 300-run soak, the API through the router, a loopback load test, the app's
# pure logic), the check that the browser build pulls in no server crates, and the browser
# tests (Playwright + Debian's Chromium) against a freshly started server with an empty run
# database. First, the links of the README and docs/ and the engine's module imports (no
# cycle; a second together). The last line is Playwright's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "==> Links in README.md and docs/ (files and heading anchors)"
python3 scripts/check-links.py
echo "==> Import cycles between modules (each crate's module tree, level by level)"
python3 scripts/check-imports.py --self-test
python3 scripts/check-imports.py engine/src server/src fleet/src protocol/src app/src render/src
echo "==> Architecture invariants (docs/ARCHITECTURE.md): file sizes, unsafe, bench/, statics, decoder/nn"
python3 scripts/check-architecture.py --self-test
python3 scripts/check-architecture.py
scripts/setup.sh --browser --fleet
source scripts/env.sh
echo "==> Every picture the docs show is one end2end/screenshots.mjs takes (its --list; no browser)"
python3 scripts/check-screenshots.py --self-test
python3 scripts/check-screenshots.py
port=${GRADLESS_TEST_PORT:-3137}

echo "==> What the lessons say of PyTorch, observed in PyTorch itself (engine/mechanisms/, the venv's PyTorch; seconds)"
# Each card statement known "from PyTorch" names one of these tests: when an upgrade changes
# the mechanism (autocast's cast cache, the SDPA backends' order, ...), this fails.
"$GRADLESS_VENV/bin/python" -m unittest discover -s engine/mechanisms

echo "==> Rust tests (the first build compiles libtorch's C++ wrapper: several minutes)"
# The snippet test runs every model's Python snippet with the venv's PyTorch.
export GRADLESS_PYTHON="$GRADLESS_VENV/bin/python"
cargo test --release --workspace
for f in gradless-load.json gradless-viewers.json gradless-soak.json gradless-hostile.json; do
  [ -f "$CARGO_TARGET_DIR/$f" ] && echo "figures ($f): $(cat "$CARGO_TARGET_DIR/$f")"
done

echo "==> docs/lessons.md is what the cards say (each lesson's statements and how each is known)"
python3 scripts/lessons-doc.py "$CARGO_TARGET_DIR/release/gradless" --check

echo "==> docs/questions.md is what the cards ask (each card's question state, on a GPU server and on a CPU one)"
python3 scripts/questions-doc.py "$CARGO_TARGET_DIR/release/gradless" --check

echo "==> docs/cli.md is the binary's own help (every command and subcommand)"
python3 scripts/cli-doc.py "$CARGO_TARGET_DIR/release/gradless" --check
echo "==> The docs' card count and decoder families are the code's"
python3 scripts/docs-facts.py "$CARGO_TARGET_DIR/release/gradless"

echo "==> Quantized linear layers against a plain-PyTorch peer on the same weights (bench/generate.py --check; about 20 s)"
# The peer quantizes the same safetensors with linear.rs's formula and calls the same packed
# kernels: the weights' bytes, the greedy tokens and the drift must agree (never the timings).
"$GRADLESS_PYTHON" bench/generate.py --gradless "$CARGO_TARGET_DIR/release/gradless" --batches 1 \
  --quant int8 int4:64 --rounds 1 --prompt 8 --new-tokens 8 --threads 1 --check

echo "==> The trained model against PyTorch + transformers on the same folder (bench/train_bytes/peer.py; about 2 min)"
# Its fp32 bits per byte on the held-out text within 1e-4 of PyTorch's, beating gzip -9, and
# the same greedy tokens as transformers' generate (bf16 and fp16 too in the bench run).
"$GRADLESS_PYTHON" bench/train_bytes/peer.py --gradless "$CARGO_TARGET_DIR/release/gradless" --threads 2 \
  --pytorch-rows fp32 --json "$CARGO_TARGET_DIR/gradless-trained-peer.json" > /dev/null \
  || { cat "$CARGO_TARGET_DIR/gradless-trained-peer.json" 2>/dev/null; echo "error: the trained model's peer check failed" >&2; exit 1; }
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("trained peer:", r["bits_per_byte"], "gzip", r["baselines"]["gzip_9"], "same tokens:", r["greedy"]["same_tokens"])' "$CARGO_TARGET_DIR/gradless-trained-peer.json"

echo "==> A compiled model (AOTInductor) against Python running the same .pt2 and torch.compile (bench/compiled.py; about 40 s warm)"
# The package was built by the compiled test above (engine/tests/compiled.rs, which also
# checks Gradless's call and Python's give the same bits); here the per-pass ratio is
# measured side by side and printed, never asserted (a benchmark).
"$GRADLESS_PYTHON" bench/compiled.py --gradless "$CARGO_TARGET_DIR/release/gradless" --model tiny_mlp --input-size 512 \
  --batches 8 --rounds 3 --threads 1 --json "$CARGO_TARGET_DIR/gradless-compiled-peer.json"

echo "==> Fleet tests (nats-server and PostgreSQL on loopback; 2 fronts and 3 CPU workers as processes)"
# Ports after the browser tests' (port, port + 2): NATS, PostgreSQL, then the fronts and
# the workers' metrics (port + 5 ...). The services stay up for the browser tests' fleet
# test, and stop when this script ends.
services=$(mktemp -d)
root=$PWD # the trap runs wherever the script has gone (the browser tests run in end2end/)
stop_services() { "$root/scripts/services.sh" stop "$services" || true; rm -rf "$services"; }
trap stop_services EXIT
eval "$(scripts/services.sh start "$services" $((port + 3)) $((port + 4)))"
# `--workspace`, as above: `-p server` unifies features differently and would compile the
# server a second time.
GRADLESS_FLEET_PORT=$((port + 5)) cargo test --release --workspace --test fleet -- --ignored --nocapture --test-threads=1 || { echo "error: fleet tests failed (logs: $CARGO_TARGET_DIR/fleet-logs)" >&2; exit 1; }
[ -f "$CARGO_TARGET_DIR/gradless-fleet-load.json" ] && echo "figures (gradless-fleet-load.json): $(cat "$CARGO_TARGET_DIR/gradless-fleet-load.json")"
# The two emit-to-viewer p99s side by side: one process, and the fleet over NATS.
python3 - "$CARGO_TARGET_DIR" <<'PY' || true
import json, sys
d = sys.argv[1]
one = json.load(open(f"{d}/gradless-load.json"))
fleet = json.load(open(f"{d}/gradless-fleet-load.json"))
print(f"emit-to-viewer p99: single process {one['event_delay_ms']['p99']:.1f} ms ({one['viewers']} viewers); "
      f"fleet {fleet['emit_to_viewer_ms']['p99']:.1f} ms ({fleet['viewers']} viewers, {fleet['fronts']} fronts, {fleet['workers']} workers)")
PY

echo "==> Fault tests (NATS, PostgreSQL, 2 fronts and 3 workers in network namespaces of their own; links cut, lossy, slowed)"
# Its own namespaces and addresses (10.77.0.0/16), so no port of the steps above is shared.
cargo test --release --workspace --test faults -- --ignored --nocapture --test-threads=1 || { echo "error: fault tests failed (logs: $CARGO_TARGET_DIR/fault-logs)" >&2; exit 1; }

echo "==> The GPU check's bundle, and its rehearsal on this CPU from a scratch copy of only the bundle"
# What a GPU host gets: the binaries the tests above just built, stripped and compressed,
# with the check's script (scripts/gpu-check.sh and its parts, scripts/gpu-check/) and the
# peer. The rehearsal runs the bundle's own script with a bare environment (no cargo on
# PATH, HOME elsewhere, no build tree), every step on the CPU with small shapes, and must
# pass with its steps but the compiled ones and the cards within five minutes (the
# AOTInductor builds and the cards' experiments are this 2-core CPU's, not a GPU host's).
# Its returned folder must hold what the device machine would send back whole (two files).
# This bundle serves the rehearsal only, so it may lack CUDA graph capture (a machine
# without CUDA's crt/ headers): it says so in bundle.json, where a bundle for a GPU visit
# (`scripts/gpu-check.sh --bundle` without the flag) would have failed.
bundle="$CARGO_TARGET_DIR/gpu-bundle"
scripts/gpu-check.sh --bundle "$bundle" --allow-no-cuda-graphs
python3 -c 'import json,sys; b=json.load(open(sys.argv[1]))["build"]; print("bundle build:", "CUDA graph capture compiled in" if b["cuda_graphs_built"] else "no CUDA graph capture (" + b["no_cuda_graphs"] + ")", "| libtorch", b["libtorch"], "with CUDA" if b["libtorch_cuda"] else "without CUDA")' "$bundle/bundle.json"
rehearsal=$(mktemp -d)
cp -r "$bundle" "$rehearsal/bundle"
( cd "$rehearsal" && env -i PATH=/usr/bin:/bin HOME="$rehearsal" TMPDIR="$rehearsal" \
    TORCH_VENV="$GRADLESS_VENV" GPU_CHECK_PORT=$((port + 23)) \
    bash bundle/gpu-check.sh --rehearse out ) || {
  cat "$rehearsal/out/summary.json" 2>/dev/null
  echo "error: the GPU check's rehearsal failed (every step's files: $rehearsal/out/gpu-check-files.tar.gz)" >&2; exit 1
}
python3 "$rehearsal/bundle/gpu-check/returned.py" "$rehearsal/out"
python3 - "$rehearsal/out/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["pass"] and s["complete"] and s["mode"] == "rehearse" and not s["skipped"], s
names = [st["name"] for st in s["steps"]]
assert names.index("facts") < names.index("generate") < names.index("cuda-tests") < names.index("cards"), names
by = {st["name"]: st for st in s["steps"]}
heavy = ("compiled", "compiled-cards", "cards", "more-cards")
others = sum(st["seconds"] for st in s["steps"] if st["name"] not in heavy)
assert others < 300, f"the rehearsal's steps but {heavy} took {others} s, over five minutes"
f, c = by["compiled"]["figures"], by["compiled-cards"]["figures"]
assert f["cached"] is False and f["compile_ms"] > 0 and "GPU" in c["reduce_overhead"]["skipped"], (f, c)
print("rehearsal: " + ", ".join(f"{st['name']} {st['seconds']}/{st['limit_s']} s" for st in s["steps"])
      + f"; {s['seconds']} s in all, bundle {s['bundle_bytes']} B, returned {s['files']['tarball_bytes']} B")
print(f"rehearsal, compiled tiny_mlp on the CPU: export {f['export_ms']:.0f} ms, compile {f['compile_ms']:.0f} ms "
      f"(the Python process {f['subprocess_ms']:.0f} ms), load {f['load_ms']:.1f} ms, p50 {f['compiled_p50_ms']:.4f} ms "
      f"against eager's {f['eager_p50_ms']:.4f} ms; cards: " + ", ".join(f"{k} {v['verdict']}" for k, v in c["by_card"].items()))
PY
rm -rf "$rehearsal"

echo "==> The browser build pulls in no tch, tokio, axum or picture drawing (render, resvg)"
# Two steps, so that a failing `cargo tree` fails the check instead of passing it.
tree=$(cargo tree -p app --no-default-features --features hydrate --target wasm32-unknown-unknown -e normal)
[ -n "$tree" ] || { echo "error: cargo tree printed nothing for the hydrate build" >&2; exit 1; }
if grep -E '^[^a-z]*(tch|torch-sys|tokio|axum|leptos_axum|render|resvg|usvg|tiny-skia) v' <<<"$tree"; then
  echo "error: the hydrate build depends on server crates (listed above)" >&2
  exit 1
fi
echo "ok: none of them among $(grep -c . <<<"$tree") dependency lines"

echo "==> Building the site (the server binary is the one the Rust tests just built)"
# `cargo test` builds the `gradless` binary for the integration tests (target/release/gradless,
# with the test build's features): a separate `cargo build -p server` would compile the server
# and everything above hyper a second time for nothing.
[ -x "$CARGO_TARGET_DIR/release/gradless" ] || {
  echo "error: cargo test did not leave $CARGO_TARGET_DIR/release/gradless" >&2; exit 1
}
scripts/build-site.sh

docs_port=$((port + 2)) # the pretend docs site of the embed test
export GRADLESS_DOCS_PORT=$docs_port
log="$CARGO_TARGET_DIR/gradless-e2e.log"
scratch=$(mktemp -d)
echo "==> Making the team models the server serves (engine/tests/fixtures, with the venv's PyTorch)"
# Good ones and deliberately bad ones: the server must serve the first and name the others.
"$GRADLESS_PYTHON" engine/tests/fixtures/make_team_models.py "$scratch/models" >/dev/null
export GRADLESS_MODELS_DIR="$scratch/models"
echo "==> Starting gradless on 127.0.0.1:$port (log: $log)"
# A fresh database; the pretend docs site of the embed test may frame embeds; no rate limit
# (the tests start runs faster than a person would).
GRADLESS_THREADS=1 GRADLESS_DB="$scratch/runs.sqlite3" GRADLESS_EMBED_ORIGINS="http://127.0.0.1:$docs_port" GRADLESS_RATE_LIMIT=0 \
  "$CARGO_TARGET_DIR/release/gradless" serve --addr "127.0.0.1:$port" --site-root target/site >"$log" 2>&1 &
server_pid=$!
trap 'kill $server_pid 2>/dev/null || true; rm -rf "$scratch"; stop_services' EXIT
for _ in $(seq 1 120); do
  curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break
  kill -0 $server_pid 2>/dev/null || { cat "$log"; echo "error: the server did not start" >&2; exit 1; }
  sleep 0.5
done
curl -sf "http://127.0.0.1:$port/healthz" >/dev/null || {
  cat "$log"; echo "error: the server did not answer /healthz within 60 s" >&2; exit 1
}

echo "==> Browser tests"
# The permalink test starts its own server (restarting it); the export test runs the
# exported script with the venv's PyTorch.
export GRADLESS_BIN="$CARGO_TARGET_DIR/release/gradless" GRADLESS_SITE_ROOT="$PWD/target/site"
export GRADLESS_PYTHON="$GRADLESS_VENV/bin/python"
cd end2end
GRADLESS_URL="http://127.0.0.1:$port" npx playwright test

echo "==> scripts/run.sh's build finds nothing left to build (one server build per test run)"
# `cargo build -p server` and the test build ask for the same features (server/Cargo.toml
# lists the tests' crates as normal dependencies), so the binary the browser tests used is
# the one run.sh serves, and the warm starts below measure a start, not a compile.
rebuilt=$(cd .. && cargo build --release -p server 2>&1 | grep -E '^\s*Compiling' || true)
if [ -n "$rebuilt" ]; then
  echo "$rebuilt"
  echo "error: scripts/run.sh's build compiled the crates above again: its features differ from the test build's" >&2
  exit 1
fi
echo "ok: nothing compiled"

echo "==> The API fuzzed from its own OpenAPI document (schemathesis; a fresh server on port + 24)"
# Every operation, 25 generated requests each, fixed seed: never a 5xx, and every answer
# (status, content type, body, each SSE message) as the document says.
(cd .. && scripts/fuzz-api.sh $((port + 24)) 25)

echo "==> Load figures (a benchmark, not a test: medians of 5 cold loads, 3 warm starts)"
# The warm starts run scripts/run.sh on port + 20 ... + 22: past NATS and PostgreSQL
# (port + 3, + 4, still up) and the fleet tests' ports (port + 5 ... + 19).
(cd .. && timeout 400 node scripts/bench-load.mjs --url "http://127.0.0.1:$port" --runs 5 --warm-start --warm-start-port $((port + 20))) \
  || echo "load benchmark: could not run (not a test)"
