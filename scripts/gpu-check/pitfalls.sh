# The GPU check's pitfalls step (sourced by scripts/gpu-check.sh; run under `step`, see there).

# The pitfall cards, in two parts. First the cards only CUDA can decide, by id, in ONE
# process (`gradless pitfall all --only`), with the card whose quality rows run int4 in bf16
# on CUDA (int4-on-a-trained-model); the cards decided by exact bytes must confirm on every
# device; any other verdict is a finding reported in the figures, not a failure (a card
# may be refuted or inconclusive on a device, which is what it is there to show). Then the
# device test that runs cards alone and after the whole tour (`per_device!` names its CUDA
# half pitfalls::cuda::NAME): every card of the tour runs on the GPU there, and each
# compared card must answer the same in both places. The rehearsal runs the same cards on
# the CPU, and proves the test's invocation: the GPU's name selects exactly that test, and
# a quick CPU test of the same module runs (the tour's CPU half runs in cargo test).
PITFALL_CARDS="cuda-graphs,sync-timing,empty-cache,allocated-vs-reserved,tf32,int8-speed-depends,sdpa-backend,static-cache,int4-on-a-trained-model"
TOUR_TEST="pitfalls::cuda::a_card_answers_the_same_wherever_it_sits_in_the_tour"
pitfalls() {
  local rc=0 trc=0
  if [ "$MODE" = dry ]; then
    printf '%s\n' '{"id": "dry-a", "seconds": 0.1, "report": {"verdict": "confirmed", "reason": "dry"}}' \
      '{"id": "dry-b", "seconds": 0.1, "report": {"verdict": "refuted", "reason": "dry"}}' >"$OUT/pitfalls.jsonl"
    echo "test $TOUR_TEST ... ok" >"$OUT/pitfalls-tour.txt"
    echo "$TOUR_TEST: test" >"$OUT/pitfalls-tour.list"
  else
    local budget=()
    # batch-scaling's budget on a GPU: 16 GiB of batches to try, not the whole card.
    [ "$MODE" = gpu ] && budget=(--budget-mib 16384)
    # The cards get two fifths of the step (50 s on a GPU); the tour test what is left.
    local share=$(($(left) * 2 / 5)); [ "$share" -ge 1 ] || share=1
    timeout --kill-after=2 "$share" \
      "$GRADLESS" pitfall all --only "$PITFALL_CARDS" --device "$DEVICE" --jsonl "${budget[@]}" >"$OUT/pitfalls.jsonl"
    rc=$?
    "$TESTS" --list --ignored --exact "$TOUR_TEST" >"$OUT/pitfalls-tour.list" 2>&1
    if [ "$MODE" = gpu ]; then
      local rest=$(($(left) - 3)); [ "$rest" -ge 1 ] || rest=1
      timeout --kill-after=2 "$rest" "$TESTS" --ignored --exact "$TOUR_TEST" --test-threads=1 >"$OUT/pitfalls-tour.txt" 2>&1
    else
      "$TESTS" --exact pitfalls::cpu::unknown_cards_are_refused_by_name --test-threads=1 >"$OUT/pitfalls-tour.txt" 2>&1
    fi
    trc=$?
  fi
  "$JSONPY" "$PARTS/pitfalls_summary.py" "$OUT/pitfalls.jsonl" "$rc" "$OUT/pitfalls-tour.txt" "$trc" "$OUT/pitfalls-tour.list" "$TOUR_TEST" "$PITFALL_CARDS" "$MODE"
  local prc=$?
  [ $prc -eq 0 ] || tail -n 30 "$OUT/pitfalls.log" 2>/dev/null | grep -v '^$' >"$OUT/pitfalls.reason"
  return $prc
}
export PITFALL_CARDS TOUR_TEST
