# The GPU check's tour step (sourced by scripts/gpu-check.sh; run under `step`, see there).
#
# The tour-order test of the engine's device tests (engine/tests/device/pitfalls/tour.rs) on
# CUDA: on ONE worker, a few cards run alone, then after every card of the tour, and each
# must give the same verdict and the same byte figures, each taken above its own run's
# start (the CPU runs the same comparison in cargo test). In every mode the test's CUDA name
# must select exactly that one test; the rehearsal then runs a quick CPU test of the same
# module, which proves the binary and its harness (the tour itself takes minutes on a CPU).
TOUR_TEST="pitfalls::cuda::a_card_answers_the_same_wherever_it_sits_in_the_tour"
tour() {
  local trc=0
  if [ "$MODE" = dry ]; then
    echo "test $TOUR_TEST ... ok" >"$OUT/tour.txt"
    echo "$TOUR_TEST: test" >"$OUT/tour.list"
  else
    "$TESTS" --list --ignored --exact "$TOUR_TEST" >"$OUT/tour.list" 2>&1
    if [ "$MODE" = gpu ]; then
      timeout --kill-after=2 "$(($(left) - 3))" "$TESTS" --ignored --exact "$TOUR_TEST" --test-threads=1 >"$OUT/tour.txt" 2>&1
    else
      "$TESTS" --exact pitfalls::cpu::unknown_cards_are_refused_by_name --test-threads=1 >"$OUT/tour.txt" 2>&1
    fi
    trc=$?
  fi
  "$JSONPY" "$PARTS/tour_summary.py" "$OUT/tour.txt" "$trc" "$OUT/tour.list" "$TOUR_TEST"
  local prc=$?
  [ $prc -eq 0 ] || tail -n 10 "$OUT/tour.log" 2>/dev/null >"$OUT/tour.reason"
  return $prc
}
export TOUR_TEST
