# The GPU check's server-check step (sourced by scripts/gpu-check.sh; run under `step`, see there).

# The API checked through a real server (`gradless serve`, recorded runs): server_client.py
# (beside this file) submits the specs, checks each report (no leak, a traced pass whose peak
# is the run's, a memory breakdown) and the worker's health; its peak rule is checked on
# made-up reports first. The dry run meets stub_server.py instead, which refuses every run,
# and passes when the client reports those refusals as failures instead of crashing.
server_check() {
  local pid port rc specs
  if [ "$MODE" = gpu ]; then
    specs='[{"model": "resnet50", "batch": 32, "grad": "no_grad", "warmup": 3, "iters": 10},
            {"model": "resnet50", "batch": 32, "grad": "no_grad", "autocast": "fp16", "warmup": 3, "iters": 10},
            {"model": "tiny_mlp", "batch": 256, "grad": "enabled", "eval": false, "warmup": 3, "iters": 10},
            {"model": "resnet18", "batch": 1, "grad": "inference_mode", "warmup": 3, "iters": 10},
            {"model": "resnet18", "batch": 1, "grad": "inference_mode", "warmup": 3, "iters": 10, "advanced": {"cuda_graph": true}}]'
  else
    specs='[{"model": "tiny_mlp", "batch": 64, "grad": "no_grad", "warmup": 2, "iters": 5, "threads": 1},
            {"model": "resnet18", "batch": 2, "input_size": 64, "grad": "enabled", "eval": false, "warmup": 1, "iters": 3, "threads": 1},
            {"model": "resnet18", "batch": 1, "input_size": 64, "grad": "inference_mode", "warmup": 1, "iters": 3, "threads": 1, "advanced": {"cuda_graph": true}, "expect_refusal": "CUDA graph"}]'
  fi
  # The peak rule first, on made-up reports (the CPU has no graph run to show it).
  if ! "$JSONPY" "$PARTS/server_client.py" --self-test >"$OUT/server-check.selftest.json" 2>>"$OUT/server-check.log"; then
    echo "the client's peak rule fails its own cases: $(cat "$OUT/server-check.selftest.json")" >"$OUT/server-check.reason"
    return 1
  fi
  if [ "$MODE" = dry ]; then
    # exec: the coprocess's pid is then the stub's own, so the kill below stops it.
    coproc STUB { exec "$JSONPY" "$PARTS/stub_server.py"; }
    pid=$STUB_PID
    read -r port <&"${STUB[0]}"
  else
    port=$SERVER_PORT
    "$GRADLESS" serve --addr "127.0.0.1:$port" --db "$OUT/runs.sqlite3" --site-root "$OUT/no-site" \
      >"$OUT/server.log" 2>&1 &
    pid=$!
  fi
  "$JSONPY" "$PARTS/server_client.py" "http://127.0.0.1:$port" "$DEVICE" "$specs" 2>"$OUT/server-check.reason"
  rc=$?
  # A clean stop (the current run finishes and is recorded), but never longer than 10 s.
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  if [ "$MODE" = dry ]; then
    # The stub refuses every run: the client must have said so, not crashed.
    if [ $rc -eq 1 ] && grep -q "queue is full" "$OUT/server-check.reason"; then
      echo "dry run: the client reported the refused runs as failures" >"$OUT/server-check.reason"
      return 0
    fi
    echo "dry run: the client did not handle refused runs (exit $rc)" >>"$OUT/server-check.reason"
    return 1
  fi
  return $rc
}
