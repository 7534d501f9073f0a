# The GPU check's generate step (sourced by scripts/gpu-check.sh; run under `step`, see there).

# Generate runs, each its own `gradless generate`, written as they finish. On a GPU the
# decoder shapes the GPU is for, most telling first, in pairs: Llama-3.1-8B bf16 at batch 1
# with a static cache and the decode step's CUDA graph replayed, against a dynamic cache
# eager; Llama-3.2-1B bf16, graph against eager on the same static cache. Each records
# prefill, decode per token, tokens/s, the KV cache against its formula (which must match:
# exact bytes), the SDPA backend per phase and the decode bandwidth as % of the
# datasheet's; each pair whether its greedy tokens agree (a finding, not a failure: bf16
# rounds the masked whole-capacity attention differently). In the rehearsal the CPU preset
# (static against dynamic), and a graph request that must be refused with its reason.
generate_runs() {
  if [ "$MODE" = dry ]; then echo '{"dry_run": true, "runs": 0}'; return 0; fi
  local runs=() failed=0 cfgs
  if [ "$MODE" = gpu ]; then
    cfgs=("llama_3_1_8b bf16 1 static graph 8b" "llama_3_1_8b bf16 1 dynamic - 8b"
          "llama_3_2_1b bf16 1 static graph 1b" "llama_3_2_1b bf16 1 static - 1b")
    local prompt=512 new=128
  else
    cfgs=("llama_tiny fp32 1 static - tiny" "llama_tiny fp32 1 dynamic - tiny")
    local prompt=16 new=8
  fi
  for cfg in "${cfgs[@]}"; do
    set -- $cfg
    local f="$OUT/generate-$1-$2-b$3-$4${5/-/}.json" graph=()
    [ "$5" = graph ] && graph=(--cuda-graph)
    # Each run gets what is left of the step, less a margin for the summary below.
    local limit=$(($(left) - 3))
    if [ "$limit" -lt 5 ]; then echo "generate $cfg: no time left" >>"$OUT/generate.reason"; failed=1; continue; fi
    if timeout --kill-after=2 "$limit" "$GRADLESS" generate --device "$DEVICE" --model "$1" --dtype "$2" --batch "$3" \
        --prompt $prompt --new-tokens $new --cache "$4" "${graph[@]}" --eval --grad inference_mode --threads 1 --json >"$f" 2>>"$OUT/generate.log"; then
      runs+=("$6=$f")
    else
      echo "generate $cfg failed: $(tail -n 2 "$OUT/generate.log" | head -c 400)" >>"$OUT/generate.reason"; failed=1
    fi
    # What has finished so far is the step's figures if its limit stops it.
    generate_summary "${runs[@]}" >"$OUT/generate.partial.json" 2>/dev/null
  done
  if [ "$MODE" = rehearse ]; then
    # CUDA graph replay of the decode step needs CUDA: refused up front, naming the field.
    if timeout 30 "$GRADLESS" generate --device cpu --model llama_tiny --prompt 8 --new-tokens 4 --cache static --cuda-graph \
        >/dev/null 2>"$OUT/generate-graph-refused.txt"; then
      echo "a CUDA-graph generation on the CPU was accepted" >>"$OUT/generate.reason"; failed=1
    elif ! grep -qi "cuda" "$OUT/generate-graph-refused.txt"; then
      echo "the CPU's refusal of CUDA graphs does not say why: $(head -c 300 "$OUT/generate-graph-refused.txt")" >>"$OUT/generate.reason"; failed=1
    fi
  fi
  generate_summary "${runs[@]}"
  [ $? -eq 0 ] || { tail -n 5 "$OUT/generate.log" >>"$OUT/generate.reason"; failed=1; }
  return $failed
}

# generate_summary PAIR=FILE...: the generate step's figures from the runs' reports; exits 1
# on a problem (a graph asked for and not replayed, no SDPA backend named, cuDNN attention in
# decode, a KV cache off its formula).
generate_summary() {
  "$JSONPY" "$PARTS/generate_summary.py" "$@"
}
export -f generate_summary
