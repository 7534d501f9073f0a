#!/usr/bin/env bash
# Fuzzes the HTTP API from its own OpenAPI document: a fresh `gradless serve` (an empty
# database, on PORT), then schemathesis (pinned in the venv by scripts/setup.sh) against its
# /api/openapi.json: every operation, a bounded number of generated requests each (fixed
# seed, so a failure reproduces), and the checks that the server never answers 5xx for
# what it was sent (`not_a_server_error`) and answers only what the document says: its
# statuses, content types and response schemas. What it finds is fixed in the code or in
# the document (server/src/openapi.rs), never silenced.
#
# Usage: scripts/fuzz-api.sh PORT [EXAMPLES]   (EXAMPLES: 25, as scripts/test.sh runs it).
# Needs the release binary ($CARGO_TARGET_DIR/release/gradless) and target/site.
set -euo pipefail
cd "$(dirname "$0")/.."
port=${1:?usage: scripts/fuzz-api.sh PORT [EXAMPLES]}
examples=${2:-25}
: "${CARGO_TARGET_DIR:=target}"
venv=${GRADLESS_VENV:-$HOME/.cache/gradless/venv}
bin="$CARGO_TARGET_DIR/release/gradless"
[ -x "$bin" ] || { echo "error: $bin is missing: build the server first" >&2; exit 1; }
[ -x "$venv/bin/schemathesis" ] || { echo "error: schemathesis is not in $venv: run scripts/setup.sh" >&2; exit 1; }
scratch=$(mktemp -d)
log="$CARGO_TARGET_DIR/gradless-fuzz.log"
# Small limits keep generated runs short (they are measured for real): a batch of at most
# 4, a run stopped after 5 s, a short queue (a full one answers a documented 503).
GRADLESS_THREADS=1 GRADLESS_RATE_LIMIT=0 "$bin" serve --addr "127.0.0.1:$port" --db "$scratch/runs.sqlite3" \
  --site-root target/site --max-batch 4 --run-timeout-s 5 --queue-capacity 4 >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$scratch"' EXIT
for _ in $(seq 1 120); do
  curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break
  kill -0 $pid 2>/dev/null || { cat "$log"; echo "error: the server did not start" >&2; exit 1; }
  sleep 0.5
done
report="$CARGO_TARGET_DIR/schemathesis"
rm -rf "$report"
status=0
timeout 480 "$venv/bin/schemathesis" run "http://127.0.0.1:$port/api/openapi.json" \
  --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance \
  --max-examples "$examples" --seed 37 --workers 2 --request-timeout 30 --no-color \
  --generation-database none --report junit --report-dir "$report" || status=$?
if [ $status -ne 0 ]; then
  echo "error: schemathesis found the failures above (exit $status; server log: $log, report: $report)" >&2
  exit $status
fi
kill -0 $pid 2>/dev/null || { cat "$log"; echo "error: the server stopped during the fuzzing" >&2; exit 1; }
echo "ok: schemathesis found nothing ($examples examples per operation, seed 37)"
