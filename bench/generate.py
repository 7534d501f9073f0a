#!/usr/bin/env python3
"""Generation side by side: `gradless generate` against Hugging Face transformers'
`generate` (eager, the same config, the same threads) and a plain PyTorch hand-written
greedy loop (the same ops in the same order as Gradless's Rust decoder,
engine/src/models/decoder/), interleaved round by round, medians reported as ratios.

    python bench/generate.py --gradless target/release/gradless [--model llama_tiny]
        [--batches 1 8] [--prompt 32] [--new-tokens 64] [--rounds 5] [--threads 1]
        [--json OUT.json]

What each side measures, per round and batch (greedy, fixed length, dynamic cache,
eval + no_grad, fp32):
- Gradless: its JSON report (`generation.decode_ms_per_token.p50`, `prefill_ms`, the
  KV cache's bytes, each step's peak; memory is libtorch's CPU allocation reporting, or
  the CUDA caching allocator's statistics).
- transformers: `model.generate(..., max_new_tokens=N, min_new_tokens=N, do_sample=False,
  return_dict_in_generate=True)`; a StoppingCriteria records the time after every step
  (what a reader gets per token, Python included); the KV bytes are the returned
  DynamicCache's tensors.
- plain loop: per-step wall time; memory from the profiler's allocation events
  (`profile_memory=True`, the same mechanism as Gradless's counter), peak above the
  weights + prompt during the prefill and during the decode steps.

Weights: random (transformers' initialisation, seeded); the timing does not depend on
their values. The configuration comes from `gradless models --json`, never the Hub.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("KINETO_LOG_LEVEL", "5")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402


def hf_model(c: dict):
    cls = {"LlamaForCausalLM": (transformers.LlamaForCausalLM, transformers.LlamaConfig),
           "Qwen2ForCausalLM": (transformers.Qwen2ForCausalLM, transformers.Qwen2Config),
           "MistralForCausalLM": (transformers.MistralForCausalLM, transformers.MistralConfig)}[c["architecture"]]
    rope = {"rope_type": "default", "rope_theta": c["rope_theta"]}
    if c.get("rope_llama3"):
        rope = {"rope_type": "llama3", "rope_theta": c["rope_theta"], **c["rope_llama3"]}
    kwargs = dict(
        vocab_size=c["vocab_size"], hidden_size=c["hidden_size"], intermediate_size=c["intermediate_size"],
        num_hidden_layers=c["num_hidden_layers"], num_attention_heads=c["num_attention_heads"],
        num_key_value_heads=c["num_key_value_heads"], head_dim=c["head_dim"],
        max_position_embeddings=c["max_position_embeddings"], rms_norm_eps=c["rms_norm_eps"],
        tie_word_embeddings=c["tie_word_embeddings"], attention_dropout=c["attention_dropout"],
        initializer_range=c["initializer_range"], rope_parameters=rope,
    )
    if c["architecture"] == "LlamaForCausalLM":
        kwargs["attention_bias"] = c["attention_bias"]
    torch.manual_seed(0)
    return cls[0](cls[1](**kwargs)).eval()


class PlainDecoder:
    """The Rust decoder's ops in its order, in plain PyTorch, on the HF model's weights."""

    def __init__(self, model, c: dict):
        sd = {k: v.detach() for k, v in model.state_dict().items()}
        self.c = c
        self.embed = sd["model.embed_tokens.weight"]
        self.norm = sd["model.norm.weight"]
        self.head = sd.get("lm_head.weight", self.embed)
        if c["tie_word_embeddings"]:
            self.head = self.embed
        self.layers = []
        for i in range(c["num_hidden_layers"]):
            p = f"model.layers.{i}."
            g = lambda n: sd.get(p + n)  # noqa: E731
            self.layers.append({k: g(n) for k, n in [
                ("in_norm", "input_layernorm.weight"), ("post_norm", "post_attention_layernorm.weight"),
                ("q", "self_attn.q_proj.weight"), ("qb", "self_attn.q_proj.bias"),
                ("k", "self_attn.k_proj.weight"), ("kb", "self_attn.k_proj.bias"),
                ("v", "self_attn.v_proj.weight"), ("vb", "self_attn.v_proj.bias"),
                ("o", "self_attn.o_proj.weight"), ("gate", "mlp.gate_proj.weight"),
                ("up", "mlp.up_proj.weight"), ("down", "mlp.down_proj.weight")]})
        d = c["head_dim"]
        self.inv_freq = model.model.rotary_emb.inv_freq.detach().float()
        assert self.inv_freq.numel() == d // 2

    @staticmethod
    def rms(x, w, eps):
        kind = x.dtype
        x32 = x.float()
        inv = torch.rsqrt(x32.square().mean(-1, keepdim=True) + eps)
        return w * (x32 * inv).to(kind)

    @staticmethod
    def rope_owned(holder, cos, sin):
        """x * cos + rotate_half(x) * sin, taking the only reference to x from `holder`
        (as the Rust code takes x by value) so x is freed before the sum."""
        x = holder.pop()
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
        a = x * cos
        del x
        r = rotated * sin
        del rotated
        return a + r

    def forward(self, ids, position, cache):
        c = self.c
        b, t = ids.shape
        heads, kvh, d = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        x = F.embedding(ids, self.embed)
        pos = torch.arange(position, position + t, dtype=torch.float32)
        freqs = torch.outer(pos, self.inv_freq)
        emb = torch.cat([freqs, freqs], -1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        for i, L in enumerate(self.layers):
            h = self.rms(x, L["in_norm"], c["rms_norm_eps"])
            q = F.linear(h, L["q"], L["qb"]).view(b, t, heads, d).transpose(1, 2)
            k = F.linear(h, L["k"], L["kb"]).view(b, t, kvh, d).transpose(1, 2)
            v = F.linear(h, L["v"], L["vb"]).view(b, t, kvh, d).transpose(1, 2)
            del h
            # Rotary embeddings inlined: the Rust code moves q and k into its rope, so their
            # pre-rotation values are freed as soon as the rotated ones exist.
            qs, ks = [q], [k]
            del q, k
            q, k = self.rope_owned(qs, cos, sin), self.rope_owned(ks, cos, sin)
            if cache[i] is not None:
                k = torch.cat([cache[i][0], k], 2)
                v = torch.cat([cache[i][1], v], 2)
            cache[i] = (k, v)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1, enable_gqa=heads != kvh)
            del q, k, v
            a = a.transpose(1, 2).contiguous().view(b, t, heads * d)
            o = F.linear(a, L["o"])
            del a  # freed before the residual add, as the Rust block ends
            x = x + o
            del o
            h = self.rms(x, L["post_norm"], c["rms_norm_eps"])
            gate = F.silu(F.linear(h, L["gate"]))
            up = F.linear(h, L["up"])
            del h  # the Rust code drops h before the product
            act = gate * up
            del gate, up
            down = F.linear(act, L["down"])
            del act
            x = x + down
            del down
        h = self.rms(x, self.norm, c["rms_norm_eps"])
        del x
        return F.linear(h[:, t - 1:], self.head)


def plain_generate(dec: PlainDecoder, prompt, n, label=False):
    cache = [None] * dec.c["num_hidden_layers"]
    times, fed, position, tokens = [], prompt, 0, []
    for step in range(n):
        # Under the profiler, each step is a labelled range on the profiler's own clock.
        scope = torch.profiler.record_function(f"gradless_step_{step}") if label else None
        if scope:
            scope.__enter__()
        t0 = time.perf_counter()
        logits = dec.forward(fed, position, cache)
        nxt = logits.argmax(-1)
        del logits
        times.append((time.perf_counter() - t0) * 1000)
        if scope:
            scope.__exit__(None, None, None)
        position += fed.shape[1]
        fed = nxt
        tokens.append(nxt)
    kv = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in cache)
    return times, torch.cat(tokens, 1), kv


class StepClock(transformers.StoppingCriteria):
    def __init__(self):
        self.times = []

    def __call__(self, input_ids, scores, **kwargs):
        self.times.append(time.perf_counter())
        return torch.zeros(input_ids.shape[0], dtype=torch.bool)


def hf_generate(model, prompt, n):
    clock = StepClock()
    t0 = time.perf_counter()
    out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n, min_new_tokens=n,
                         do_sample=False, pad_token_id=0, return_dict_in_generate=True,
                         stopping_criteria=transformers.StoppingCriteriaList([clock]))
    stamps = [t0] + clock.times
    times = [(b - a) * 1000 for a, b in zip(stamps, stamps[1:])]
    kv = sum(layer.keys.numel() * layer.keys.element_size() + layer.values.numel() * layer.values.element_size()
             for layer in out.past_key_values.layers)
    return times, out.sequences[:, prompt.shape[1]:], kv


def plain_memory(dec, prompt, n):
    """Peak above the weights + prompt during the prefill and during the decode steps, from
    the profiler's allocation events (CPU tensor memory), each step told apart by its
    labelled range on the profiler's timeline."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        plain_generate(dec, prompt, n, label=True)
    events = list(prof.profiler.kineto_results.events())
    steps = sorted((e.start_ns(), e.end_ns(), e.name()) for e in events if e.name().startswith("gradless_step_"))
    prefill_end = next(end for start, end, name in steps if name == "gradless_step_0")
    first = steps[0][0]
    memory = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]" and e.start_ns() >= first)
    total, prefill_peak, decode_peak = 0, 0, 0
    for ts, nb in memory:
        total += nb
        if ts <= prefill_end:
            prefill_peak = max(prefill_peak, total)
        else:
            decode_peak = max(decode_peak, total)
    return prefill_peak, decode_peak


def gradless(binary, model, batch, prompt, n, threads):
    out = subprocess.run([binary, "generate", "--model", model, "--batch", str(batch), "--prompt", str(prompt),
                          "--new-tokens", str(n), "--cache", "dynamic", "--eval", "--grad", "no_grad",
                          "--device", "cpu", "--threads", str(threads), "--json"],
                         check=True, capture_output=True, text=True)
    r = json.loads(out.stdout)
    g = r["generation"]
    base = r["memory"]["baseline_bytes"]
    decode = [s for s in g["steps"] if s["phase"] == "decode"]
    return {
        "decode_p50_ms": g["decode_ms_per_token"]["p50"],
        "prefill_ms": g["prefill_ms"],
        "kv_bytes": g["kv_cache_bytes"],
        "kv_formula_bytes": g["kv_cache_formula_bytes"],
        "prefill_peak_above": g["steps"][0]["peak_bytes"] - base,
        "decode_peak_above": max(s["peak_bytes"] for s in decode) - base,
        "tokens": g["tokens"],
        "memory_source": r["memory"]["source"],
        "device": r["env"]["device_name"],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gradless", required=True)
    ap.add_argument("--model", default="llama_tiny")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    infos = json.loads(subprocess.run([a.gradless, "models", "--json"], check=True, capture_output=True, text=True).stdout)
    info = next(m for m in infos if m["id"] == a.model)
    c = info["decoder"]["config"]
    model = hf_model(c)
    plain = PlainDecoder(model, c)
    results = []
    for batch in a.batches:
        torch.manual_seed(1)
        prompt = torch.randint(0, c["vocab_size"], (batch, a.prompt))
        rows = {"gradless": [], "transformers": [], "plain": []}
        kv = {}
        with torch.no_grad():
            # Warm-up of both Python peers, outside the rounds.
            hf_generate(model, prompt, 4)
            plain_generate(plain, prompt, 4)
            for _ in range(a.rounds):
                rows["gradless"].append(gradless(a.gradless, a.model, batch, a.prompt, a.new_tokens, a.threads))
                t, _, kv["transformers"] = hf_generate(model, prompt, a.new_tokens)
                rows["transformers"].append({"decode_p50_ms": statistics.median(t[1:]), "prefill_ms": t[0]})
                t, _, kv["plain"] = plain_generate(plain, prompt, a.new_tokens)
                rows["plain"].append({"decode_p50_ms": statistics.median(t[1:]), "prefill_ms": t[0]})
            pre_peak, dec_peak = plain_memory(plain, prompt, a.new_tokens)
        med = {side: {k: statistics.median(r[k] for r in rs) for k in ("decode_p50_ms", "prefill_ms")} for side, rs in rows.items()}
        g0 = rows["gradless"][0]
        result = {
            "model": a.model, "batch": batch, "prompt": a.prompt, "new_tokens": a.new_tokens,
            "threads": a.threads, "rounds": a.rounds, "device": g0["device"],
            "memory_source": g0["memory_source"],
            "median": med,
            "decode_ratio_vs_transformers": med["gradless"]["decode_p50_ms"] / med["transformers"]["decode_p50_ms"],
            "decode_ratio_vs_plain": med["gradless"]["decode_p50_ms"] / med["plain"]["decode_p50_ms"],
            "prefill_ratio_vs_transformers": med["gradless"]["prefill_ms"] / med["transformers"]["prefill_ms"],
            "kv_bytes": {"gradless": g0["kv_bytes"], "formula": g0["kv_formula_bytes"], **kv},
            "kv_equal_to_the_byte": g0["kv_bytes"] == kv["transformers"] == kv["plain"],
            "peak_above_baseline": {
                "gradless_prefill": g0["prefill_peak_above"], "plain_prefill": pre_peak,
                "gradless_decode": g0["decode_peak_above"], "plain_decode": dec_peak,
            },
            "prefill_peak_ratio_vs_plain": g0["prefill_peak_above"] / max(pre_peak, 1),
            "decode_peak_ratio_vs_plain": g0["decode_peak_above"] / max(dec_peak, 1),
        }
        results.append(result)
        print(f"batch {batch}: decode/token gradless {med['gradless']['decode_p50_ms']:.3f} ms, "
              f"transformers {med['transformers']['decode_p50_ms']:.3f} ms ({result['decode_ratio_vs_transformers']:.2f}x), "
              f"plain loop {med['plain']['decode_p50_ms']:.3f} ms ({result['decode_ratio_vs_plain']:.2f}x); "
              f"KV {g0['kv_bytes']} B (transformers {kv['transformers']}, plain {kv['plain']}); "
              f"peak vs plain: prefill {result['prefill_peak_ratio_vs_plain']:.3f}x, decode {result['decode_peak_ratio_vs_plain']:.3f}x",
              flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
