# The GPU check's cuda-tests step (sourced by scripts/gpu-check.sh; run under `step`, see there).

# The engine's per-device test binary's CUDA tests, BY EXACT NAME (the list below), one test
# thread. Not in the list: the pitfall cards' halves (the card steps run the cards by id,
# the tour step the tour-order test), the statistical A/A test of the grading rule (a
# CPU-only count run by hand) and the soak (hundreds of runs: minutes). The list is held to
# the binary when the bundle is made (bundle.sh: every ignored test but those is named here,
# and every name here is one test), and again in every mode from the binary's own list. In
# the rehearsal the CPU halves of the invariants and the traced pass run instead (the
# binary, its libtorch and its harness proven; cargo test runs the rest).
CUDA_TESTS_SKIPPED="pitfalls::cuda:: a_a:: soak::"
CUDA_TESTS="
advanced::a_run_with_half_weights_reports_a_half_precision_output_and_a_smaller_baseline::cuda
advanced::an_input_copied_from_host_memory_adds_exactly_its_bytes_to_each_pass::cuda
advanced::channels_last_gives_the_input_and_conv_weights_nhwc_strides_and_the_same_output::cuda
advanced::cuda_math::cuda_graph_replay_matches_eager_and_its_run_is_measured
advanced::cuda_math::cudnn_benchmark_pays_at_the_first_pass_of_a_new_shape
advanced::cuda_math::tf32_changes_an_fp32_matmul_by_a_bounded_amount
advanced::cuda_math_switches_are_refused_on_a_cpu_with_their_reason::cuda
advanced::half_and_bf16_weights_hold_exactly_half_of_fp32s_parameter_bytes::cuda
advanced::pinned_memory_is_pinned_on_cuda_and_refused_with_its_reason_on_a_cpu::cuda
generate::a_generation_runs_under_the_specs_math_switches::cuda
generate::a_static_cache_never_grows::cuda
generate::cuda_graph_replay_of_the_decode_step_is_accepted_on_cuda_only::cuda
generate::dynamic_static_and_no_cache_generate_the_same_tokens::cuda
generate::each_phase_names_the_attention_backend_it_ran::cuda
generate::every_step_holds_exactly_its_cache_and_tokens::cuda
generate::grad_keeps_a_growing_graph_on_top_of_the_cache::cuda
generate::kv_cache_bytes_equal_the_formula_at_every_step::cuda
generate::the_bandwidth_counts_the_positions_attended_not_the_capacity::cuda
generate::the_masked_whole_capacity_path_gives_todays_tokens::cuda
generate::under_autocast_the_kv_formula_equals_the_measured_cache::cuda
generate::without_a_cache_step_time_rises_with_the_position::cuda
guarantees::the_same_spec_has_the_same_baseline_whatever_ran_before::cuda
invariants::a_full_queue_refuses_and_a_cancelled_run_never_runs::cuda
invariants::autocast_bf16_yields_bf16_output::cuda
invariants::batchnorm_couples_batch_mates_in_train_mode_only_and_updates_running_stats::cuda
invariants::dropout_differs_between_calls_in_train_mode_only::cuda
invariants::grad_peak_exceeds_no_grad_peak_and_inference_mode_matches_no_grad::cuda
invariants::memory_returns_to_baseline_after_every_kind_of_run::cuda
invariants::out_of_memory_is_a_result_and_the_worker_carries_on::cuda
invariants::reports_keep_warmup_apart_and_order_their_statistics::cuda
quant::a_half_precision_cache_halves_the_cache_not_the_weights::cuda
quant::an_fp8_cache_holds_one_byte_per_element_on_a_gpu
quant::memory_splits_into_weights_cache_and_activations::cuda
quant::the_drift_from_the_unquantized_model_grows_as_the_levels_shrink::cuda
quant::the_packed_kernels_multiply_by_the_quantized_values::cuda
quant::the_quality_table_runs_every_setting_on_a_gpu
quant::the_weights_split_equals_the_formula_and_the_linear_layers_shrink::cuda
trace::every_model_has_a_readable_trace_and_counted_flops::cuda
trace::flops_are_linear_in_the_batch_and_independent_of_the_grad_mode::cuda
trace::grad_holds_more_than_no_grad_at_the_end_of_the_pass::cuda
trace::with_grad_the_trace_climbs_and_ends_near_its_peak::cuda
trace::without_grad_the_trace_holds_at_most_two_activations::cuda
"
cuda_tests() {
  if [ "$MODE" = dry ]; then echo '{"dry_run": true}'; return 0; fi
  local names args
  # shellcheck disable=SC2206
  names=($CUDA_TESTS)
  "$TESTS" --list --ignored >"$OUT/cuda-tests.list" 2>&1
  if [ "$MODE" = gpu ]; then
    args=(--ignored --exact --test-threads=1 "${names[@]}")
  else
    args=(--test-threads=1 invariants:: trace::)
  fi
  "$TESTS" "${args[@]}" >"$OUT/cuda-tests.txt" 2>&1
  local rc=$?
  "$JSONPY" "$PARTS/cuda_tests_summary.py" "$OUT/cuda-tests.txt" "$OUT/cuda-tests.list" "$MODE" "$CUDA_TESTS_SKIPPED" "${names[@]}"
  local prc=$?
  if [ $rc -ne 0 ]; then
    { echo "the engine's test binary failed (exit $rc):"; grep -E '^test .* FAILED$|panicked at' "$OUT/cuda-tests.txt" | head -20; } >"$OUT/cuda-tests.reason"
    return 1
  fi
  if [ $prc -ne 0 ]; then
    tail -n 3 "$OUT/cuda-tests.log" >"$OUT/cuda-tests.reason" 2>/dev/null
    return 1
  fi
}
export CUDA_TESTS CUDA_TESTS_SKIPPED
