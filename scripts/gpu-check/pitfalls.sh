# The GPU check's card steps, `cards` and `more-cards` (sourced by scripts/gpu-check.sh; each
# runs under `step`, see there).
#
# Every card whose statements say a GPU step measures them (`Said::source`'s gpu_step in
# engine/src/pitfalls/) runs BY ID in that step, all of a step's cards in ONE process
# (`gradless pitfall all --only`): engine/tests/gpu_check_script.rs reads the lists below
# (CARDS_STEP_<step>, `-` as `_`) and holds them to the statements. `cards` (required) has
# the cards only CUDA can decide and those whose CUDA statements are the riskiest;
# `more-cards` (optional) the rest. A card decided by exact bytes must confirm on every
# device; any other verdict is a finding reported in the figures, not a failure (a card may
# be refuted or inconclusive on a device, which is what it is there to show). The
# rehearsal runs the same cards on the CPU (most are not applicable there, said at once).
CARDS_STEP_cards="allocated-vs-reserved,empty-cache,tf32,cudnn-benchmark,cuda-graphs,timing-gpu-work,sdpa-backend,static-cache,int8-decode-speed"
CARDS_STEP_more_cards="channels-last,input-copy,warm-up,item-per-batch,autocast,output-lifetime,decode-batch,autocast-decode,int4-and-the-kv-cache,int4-on-a-trained-model"

# run_cards NAME LIST: the cards of LIST by id, their report lines in OUT/NAME.jsonl.
run_cards() {
  local name=$1 list=$2 rc=0
  if [ "$MODE" = dry ]; then
    local id
    for id in ${list//,/ }; do
      echo "{\"id\": \"$id\", \"seconds\": 0.1, \"report\": {\"verdict\": \"not_applicable\", \"reason\": \"dry\"}}"
    done >"$OUT/$name.jsonl"
  else
    local budget=()
    # batch-scaling's budget on a GPU: 16 GiB of batches to try, not the whole card.
    [ "$MODE" = gpu ] && budget=(--budget-mib 16384)
    timeout --kill-after=2 "$(($(left) - 3))" \
      "$GRADLESS" pitfall all --only "$list" --device "$DEVICE" --jsonl "${budget[@]}" >"$OUT/$name.jsonl"
    rc=$?
  fi
  "$JSONPY" "$PARTS/pitfalls_summary.py" "$OUT/$name.jsonl" "$rc" "$list" "$MODE"
  local prc=$?
  [ $prc -eq 0 ] || tail -n 30 "$OUT/$name.log" 2>/dev/null | grep -v '^$' >"$OUT/$name.reason"
  return $prc
}
cards() { run_cards cards "$CARDS_STEP_cards"; }
# The rehearsal proves the plumbing, not the cards (cargo test's device tests run every card
# on the CPU): it leaves out autocast, half a minute of bf16 convolutions on a CPU without
# AVX-512, so that scripts/test.sh gets no slower.
REHEARSAL_LEAVES_OUT="autocast"
more_cards() {
  local list="$CARDS_STEP_more_cards"
  [ "$MODE" = rehearse ] && list="$(echo ",$list," | sed "s/,$REHEARSAL_LEAVES_OUT,/,/; s/^,//; s/,$//")"
  run_cards more-cards "$list"
}
export -f run_cards
export CARDS_STEP_cards CARDS_STEP_more_cards REHEARSAL_LEAVES_OUT
