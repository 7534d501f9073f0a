#!/usr/bin/env python3
"""Decode speed per decoder family: `gradless generate` against Hugging Face transformers'
`generate` on the same weights, interleaved round by round, medians reported as ratios.

    python bench/families.py --gradless target/release/gradless
        [--models llama_tiny qwen3_tiny gemma3_tiny qwen3_moe_tiny mixtral_tiny phi3_tiny]
        [--batch 1] [--prompt 32] [--new-tokens 64] [--rounds 5] [--threads 1]
        [--models-dir DIR] [--json OUT.json]

For each preset, transformers builds the preset's shape (its config from `gradless models
--json`, random weights seeded, transformers' initialisation) and saves it as a team
decoder folder (`save_pretrained`: config.json + model.safetensors, `<preset>_peer`, in a
temporary models directory or `--models-dir`); Gradless serves that folder
(`--models-dir`), so both sides run the same weights. Each round runs both, the side that
goes first alternating:

- Gradless: `gradless generate --models-dir D --model <preset>_peer --json` (greedy, fixed
  length, dynamic cache, eval + no_grad, fp32, CPU): `generation.decode_ms_per_token.p50`,
  its prompt ids and tokens, the KV cache's bytes;
- transformers: `model.generate(prompt, max_new_tokens=N, min_new_tokens=N,
  do_sample=False)` on Gradless's prompt ids, eager, the same threads; a StoppingCriteria
  stamps every step (what a reader gets per token, Python included); decode per token is
  the median of the steps after the first; the KV bytes are its cache's tensors.

Reported per family: decode per token on each side (median over rounds of each run's
median), their ratio (Gradless / transformers: below 1 is faster) with its range over the
rounds, and whether the greedy tokens and the cache bytes were equal in every round. The
tokens and bytes are checked; the timings are measured, never judged.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
import transformers  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from generate import hf_generate  # noqa: E402


def layer_types(c: dict) -> list[str]:
    """Each layer's attention, as `DecoderConfig::layer_type` reads the config."""
    if c.get("layer_types"):
        return list(c["layer_types"])
    kind = "sliding_attention" if c.get("sliding_window") else "full_attention"
    return [kind] * c["num_hidden_layers"]


def hf_model(c: dict):
    """transformers' model of a Gradless decoder config (protocol::decoder::DecoderConfig's
    JSON), random weights seeded."""
    a = c["architecture"]
    common = dict(
        vocab_size=c["vocab_size"], hidden_size=c["hidden_size"], intermediate_size=c["intermediate_size"],
        num_hidden_layers=c["num_hidden_layers"], num_attention_heads=c["num_attention_heads"],
        num_key_value_heads=c["num_key_value_heads"], head_dim=c["head_dim"],
        max_position_embeddings=c["max_position_embeddings"], rms_norm_eps=c["rms_norm_eps"],
        tie_word_embeddings=c["tie_word_embeddings"], attention_dropout=c["attention_dropout"],
        initializer_range=c["initializer_range"],
    )
    rope = {"rope_type": "default", "rope_theta": c["rope_theta"]}
    if c.get("rope_llama3"):
        rope = {"rope_type": "llama3", "rope_theta": c["rope_theta"], **c["rope_llama3"]}
    moe = c.get("moe")
    types = layer_types(c)
    if a == "LlamaForCausalLM":
        cfg = transformers.LlamaConfig(rope_parameters=rope, attention_bias=c["attention_bias"], **common)
        cls = transformers.LlamaForCausalLM
    elif a == "MistralForCausalLM":
        cfg = transformers.MistralConfig(rope_parameters=rope, sliding_window=c.get("sliding_window"), **common)
        cls = transformers.MistralForCausalLM
    elif a == "Qwen2ForCausalLM":
        cfg = transformers.Qwen2Config(rope_parameters=rope, **common)
        cls = transformers.Qwen2ForCausalLM
    elif a == "Qwen3ForCausalLM":
        sliding = "sliding_attention" in types
        cfg = transformers.Qwen3Config(rope_parameters=rope, attention_bias=c["attention_bias"],
                                       use_sliding_window=sliding, sliding_window=c.get("sliding_window"),
                                       layer_types=types, **common)
        cls = transformers.Qwen3ForCausalLM
    elif a == "Gemma3ForCausalLM":
        full = {"rope_type": "default", "rope_theta": c["rope_theta"]}
        if c.get("rope_linear_factor"):
            full = {"rope_type": "linear", "rope_theta": c["rope_theta"], "factor": c["rope_linear_factor"]}
        local = {"rope_type": "default", "rope_theta": c.get("rope_local_theta") or c["rope_theta"]}
        cfg = transformers.Gemma3TextConfig(
            sliding_window=c.get("sliding_window") or 4096, layer_types=types,
            query_pre_attn_scalar=int(c["query_pre_attn_scalar"]),
            rope_parameters={"full_attention": full, "sliding_attention": local}, **common)
        cls = transformers.Gemma3ForCausalLM
    elif a == "Qwen3MoeForCausalLM":
        cfg = transformers.Qwen3MoeConfig(
            rope_parameters=rope, attention_bias=c["attention_bias"], num_experts=moe["num_experts"],
            num_experts_per_tok=moe["num_experts_per_tok"], moe_intermediate_size=moe["expert_intermediate_size"],
            norm_topk_prob=moe["norm_topk_prob"], mlp_only_layers=moe.get("dense_layers", []), **common)
        cls = transformers.Qwen3MoeForCausalLM
    elif a == "MixtralForCausalLM":
        cfg = transformers.MixtralConfig(
            rope_parameters=rope, num_local_experts=moe["num_experts"], num_experts_per_tok=moe["num_experts_per_tok"],
            sliding_window=c.get("sliding_window"), **common)
        cls = transformers.MixtralForCausalLM
    elif a == "Phi3ForCausalLM":
        # Phi3Config pads with id 32000 by default, past the tiny vocabulary.
        cfg = transformers.Phi3Config(rope_parameters=rope, sliding_window=c.get("sliding_window"), pad_token_id=0, **common)
        cls = transformers.Phi3ForCausalLM
    else:
        raise SystemExit(f"{a}: no transformers peer here")
    torch.manual_seed(0)
    return cls(cfg).eval()


def gradless(binary, models_dir, name, batch, prompt, n, threads):
    cmd = [binary, "generate", "--models-dir", models_dir, "--model", name, "--batch", str(batch),
           "--prompt", str(prompt), "--new-tokens", str(n), "--cache", "dynamic", "--eval", "--grad", "no_grad",
           "--device", "cpu", "--threads", str(threads), "--json"]
    r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    g = r["generation"]
    return {"decode_p50_ms": (g["decode_ms_per_token"] or {}).get("p50"), "tokens": g["tokens"],
            "prompt_tokens": g["prompt_tokens"], "kv_bytes": g["kv_cache_bytes"],
            "kv_naive_bytes": g.get("kv_cache_naive_bytes"), "moe": g.get("moe"),
            "device": r["env"]["device_name"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gradless", required=True)
    ap.add_argument("--models", nargs="+",
                    default=["llama_tiny", "qwen3_tiny", "gemma3_tiny", "qwen3_moe_tiny", "mixtral_tiny", "phi3_tiny"])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--models-dir", help="where the peer folders are written (default: a temporary directory)")
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    transformers.utils.logging.disable_progress_bar()
    listed = json.loads(subprocess.run([a.gradless, "models", "--json"], check=True, capture_output=True,
                                       text=True).stdout)
    configs = {m["id"]: m["decoder"]["config"] for m in listed if m.get("decoder")}
    models_dir = a.models_dir or tempfile.mkdtemp(prefix="gradless-families-")
    peers = {}
    for name in a.models:
        model = hf_model(configs[name])
        model.save_pretrained(os.path.join(models_dir, f"{name}_peer"), safe_serialization=True)
        peers[name] = model
    results = []
    print(f"batch {a.batch}, prompt {a.prompt}, {a.new_tokens} new tokens, {a.rounds} rounds, "
          f"{a.threads} thread(s), fp32, dynamic cache; decode ms per token (p50 of each run, median over rounds)")
    print(f"{'model':<16}{'gradless':>10}{'transformers':>14}{'ratio':>8}  {'range':<14}{'tokens':>8}{'KV bytes':>10}")
    for name, model in peers.items():
        ours, theirs, ratios, tokens_equal, kv_equal = [], [], [], True, True
        # Gradless's prompt ids are seeded: every run of this shape gets the same.
        prompt = torch.tensor(gradless(a.gradless, models_dir, f"{name}_peer", a.batch, a.prompt, 1,
                                       a.threads)["prompt_tokens"])
        for r in range(a.rounds):
            g = None
            if r % 2 == 0:
                g = gradless(a.gradless, models_dir, f"{name}_peer", a.batch, a.prompt, a.new_tokens, a.threads)
            with torch.no_grad():
                times, tokens, kv = hf_generate(model, prompt, a.new_tokens)
            if g is None:
                g = gradless(a.gradless, models_dir, f"{name}_peer", a.batch, a.prompt, a.new_tokens, a.threads)
            assert g["prompt_tokens"] == prompt.tolist(), "the prompt is seeded"
            hf_ms = statistics.median(times[1:])
            ours.append(g["decode_p50_ms"])
            theirs.append(hf_ms)
            ratios.append(g["decode_p50_ms"] / hf_ms)
            tokens_equal &= tokens.tolist() == g["tokens"]
            kv_equal &= kv == g["kv_bytes"]
        row = {"model": name, "architecture": configs[name]["architecture"],
               "gradless_decode_ms": statistics.median(ours), "transformers_decode_ms": statistics.median(theirs),
               "ratio": statistics.median(ratios), "ratio_range": [min(ratios), max(ratios)],
               "tokens_equal": tokens_equal, "kv_bytes_equal": kv_equal, "rounds": a.rounds}
        results.append(row)
        print(f"{name:<16}{row['gradless_decode_ms']:>10.2f}{row['transformers_decode_ms']:>14.2f}"
              f"{row['ratio']:>8.2f}  {min(ratios):.2f}–{max(ratios):.2f}{'':<5}"
              f"{'equal' if tokens_equal else 'DIFFER':>8}{'equal' if kv_equal else 'DIFFER':>10}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"batch": a.batch, "prompt": a.prompt, "new_tokens": a.new_tokens, "threads": a.threads,
                       "results": results}, f, indent=2)
    return 0 if all(r["tokens_equal"] and r["kv_bytes_equal"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
