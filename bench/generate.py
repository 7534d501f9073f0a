#!/usr/bin/env python3
"""Generation side by side: `gradless generate` against Hugging Face transformers'
`generate` (eager, the same config, the same threads) and a plain PyTorch hand-written
greedy loop (the same computation in the same order as Gradless's Rust decoder,
engine/src/models/decoder/, its fp32 weights laid out column-major as Gradless lays them
out on the CPU; its q, k, v and gate, up stay separate matmuls where Gradless stacks them),
interleaved round by round, medians reported as ratios.

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

Quantized linear layers, against a plain-PyTorch peer on the same weights:

    python bench/generate.py --gradless target/release/gradless --batches 1
        --quant [none] int8 int4:32 int4:64 [--rounds 15] [--threads 1] [--check] [--json OUT.json]

writes the model's fp32 weights as a team decoder folder (`save_pretrained`: config.json +
model.safetensors, `<model>_peer`, in a temporary models directory or `--models-dir`).
Gradless loads it (`--models-dir`) and quantizes those weights at load; the peer reads the
same file, quantizes the blocks' linear layers with linear.rs's formula (gpt-fast's
`quantize.py`, the statistics in fp32) and runs the plain loop above with them through the
same kernels (`torch._weight_int8pack_mm`, `torch._convert_weight_to_int4pack_for_cpu` +
`torch._weight_int4pack_mm_for_cpu`), on Gradless's seeded prompt ids. Compared: the linear
layers' and the other weights' bytes (to the byte), the weights at the peak, the greedy
tokens of every round, the prefill's logits number for number (`gradless generate
--prefill-logits` against the peer's own prefill) and the drift figures (the peer computes
engine/src/lab/drift.rs's max |Δ logit| at the prefill, the largest |logit| and the
teacher-forced agreement on its own two models); timed: decode per token (p50 of each run,
medians over rounds, the ratio with its per-round range, and the fastest step of each run).
Rounds outside, settings inside, the side that goes first alternating. `--check` exits 1
unless the bytes, tokens, prefill logits and drift agree (within 1e-4); it never judges the
timings.
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


LINEARS = ("q", "k", "v", "o", "gate", "up", "down")
DRIFT = ("max_abs_logit_delta", "max_abs_logit", "greedy_agreement")


def inner_k_tiles(k: int) -> int:
    """int4's packing tile along the input width, as linear.rs chooses it."""
    return next((t for t in (8, 4, 2) if k % (t * 16) == 0), 1)


def quantize_int8(w):
    """gpt-fast's `dynamically_quantize_per_channel` (quantize.py), int8 symmetric per output
    channel, with linear.rs's casts: the statistics in fp32, the scales in the weight's dtype."""
    act, w32 = w.dtype, w.detach().float()
    lo = torch.minimum(w32.amin(1), torch.zeros(1))
    hi = torch.maximum(w32.amax(1), torch.zeros(1))
    scales = (torch.maximum(-lo, hi) / 127.5).clamp(min=torch.finfo(torch.float32).eps).to(act)
    q = (w32 / scales.float().unsqueeze(1)).round().clamp(-128, 127).to(torch.int8)
    return q, scales


def quantize_int4(w, group: int):
    """gpt-fast's `get_group_qparams` + `group_quantize_tensor_from_qparams` +
    `pack_tinygemm_scales_and_zeros` (4 bits, asymmetric per group of `group` input
    columns), with linear.rs's casts; packed by `_convert_weight_to_int4pack_for_cpu`."""
    act, w32 = w.dtype, w.detach().float()
    n, k = w32.shape
    groups = w32.reshape(n, k // group, group)
    hi = groups.amax(2, keepdim=True)
    lo = groups.amin(2, keepdim=True)
    scales = ((hi - lo).clamp(min=1e-6) / 15).to(act)
    zeros = (lo + scales.float() * 8).to(act)
    s32, z32 = scales.float(), zeros.float()
    lo_q = z32 - s32 * 8
    ints = ((groups - lo_q) / s32).round().clamp(0, 15).to(torch.int32).reshape(n, k)
    packed = torch._convert_weight_to_int4pack_for_cpu(ints, inner_k_tiles(k))
    scales_zeros = torch.cat([scales, zeros], 2).transpose(0, 1).contiguous()
    return packed, scales_zeros


class QuantLinear:
    """A block's linear layer quantized as linear.rs quantizes it, run by the same packed
    kernel (`torch._weight_int8pack_mm`, `torch._weight_int4pack_mm_for_cpu`)."""

    def __init__(self, w, kind: str, group):
        self.kind, self.group, self.out = kind, group, w.shape[0]
        if kind == "int8":
            self.tensors = quantize_int8(w)
        elif kind == "int4":
            self.tensors = quantize_int4(w, group)
        else:
            raise ValueError(kind)

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors)

    def __call__(self, x, bias=None):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        if self.kind == "int8":
            y = torch._weight_int8pack_mm(x2, *self.tensors)
        else:
            packed, scales_zeros = self.tensors
            y = torch._weight_int4pack_mm_for_cpu(x2, packed, self.group, scales_zeros)
        y = y.view(*shape[:-1], self.out)
        return y if bias is None else y + bias


def linear(x, w, bias=None):
    return w(x, bias) if isinstance(w, QuantLinear) else F.linear(x, w, bias)


class PlainDecoder:
    """The Rust decoder's ops in its order, in plain PyTorch, on the HF model's weights (or
    `sd`, a state dict by transformers' names, e.g. a `model.safetensors` read back), its
    blocks' linear layers dense or quantized (`quant`: None, ("int8", None), ("int4", g))."""

    def __init__(self, model, c: dict, sd=None, quant=None):
        if sd is None:
            sd = model.state_dict()
        sd = {k: v.detach() for k, v in sd.items()}
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
        if quant is not None:
            for L in self.layers:
                for k in LINEARS:
                    L[k] = QuantLinear(L[k], *quant)
        # Gradless lays fp32 weights out column-major on the CPU (WeightLayout in
        # engine/src/models/decoder/mod.rs; bench/layout.py measures why): the dense blocks'
        # linear layers and the head (the embedding table itself when tied), same values.
        col = lambda w: w.t().contiguous().t() if w is not None and w.dtype == torch.float32 else w  # noqa: E731
        for L in self.layers:
            for k in LINEARS:
                if not isinstance(L[k], QuantLinear):
                    L[k] = col(L[k])
        self.head = col(self.head)
        if c["tie_word_embeddings"]:
            self.embed = self.head
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

    def weights_breakdown(self):
        """(linear_bytes, other_bytes) measured from the tensors, as Gradless splits them:
        the blocks' seven linear layers (packed, with their scales) against the rest."""
        nb = lambda t: 0 if t is None else t.numel() * t.element_size()  # noqa: E731
        linear = sum(L[k].nbytes() if isinstance(L[k], QuantLinear) else nb(L[k])
                     for L in self.layers for k in LINEARS)
        other = nb(self.embed) + nb(self.norm) + (0 if self.head is self.embed else nb(self.head))
        other += sum(nb(L[k]) for L in self.layers for k in ("in_norm", "post_norm", "qb", "kb", "vb"))
        return linear, other

    def forward(self, ids, position, cache, all_logits=False):
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
            q = linear(h, L["q"], L["qb"]).view(b, t, heads, d).transpose(1, 2)
            k = linear(h, L["k"], L["kb"]).view(b, t, kvh, d).transpose(1, 2)
            v = linear(h, L["v"], L["vb"]).view(b, t, kvh, d).transpose(1, 2)
            del h
            # Rotary embeddings inlined: the Rust code moves q and k into its rope, so their
            # pre-rotation values are freed as soon as the rotated ones exist.
            qs, ks = [q], [k]
            del q, k
            q, k = self.rope_owned(qs, cos, sin), self.rope_owned(ks, cos, sin)
            if cache is not None:
                if cache[i] is not None:
                    k = torch.cat([cache[i][0], k], 2)
                    v = torch.cat([cache[i][1], v], 2)
                else:
                    # The first keys and values copied, as DynamicCache's first cat onto an
                    # empty tensor (and Gradless's cache) copies them.
                    k, v = k.clone(), v.clone()
                cache[i] = (k, v)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1, enable_gqa=heads != kvh)
            del q, k, v
            a = a.transpose(1, 2).contiguous().view(b, t, heads * d)
            o = linear(a, L["o"])
            del a  # freed before the residual add, as the Rust block ends
            x = x + o
            del o
            h = self.rms(x, L["post_norm"], c["rms_norm_eps"])
            gate = F.silu(linear(h, L["gate"]))
            up = linear(h, L["up"])
            del h  # the Rust code drops h before the product
            act = gate * up
            del gate, up
            down = linear(act, L["down"])
            del act
            x = x + down
            del down
        h = self.rms(x, self.norm, c["rms_norm_eps"])
        del x
        return F.linear(h if all_logits else h[:, t - 1:], self.head)


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


def parse_quant(text: str):
    """`int8`, `int4:32`, `int4:64`, `int4:128` → ("int8", None), ("int4", 32), ...; `none`:
    the same weights unquantized (fp32), the reference row measured in the same rounds."""
    kind, _, group = text.partition(":")
    if kind == "none" and not group:
        return ("none", None)
    if kind == "int8" and not group:
        return ("int8", None)
    if kind == "int4" and group in ("32", "64", "128"):
        return ("int4", int(group))
    raise argparse.ArgumentTypeError(f"{text!r}: none, int8, int4:32, int4:64 or int4:128")


def write_team_decoder(model, models_dir: str, name: str) -> str:
    """The fp32 weights as a team would save them (config.json + model.safetensors): what
    both sides load, Gradless as a team decoder of its models directory."""
    folder = os.path.join(models_dir, name)
    transformers.utils.logging.disable_progress_bar()
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def gradless_quant(binary, models_dir, name, quant, batch, prompt, n, threads):
    kind, group = quant
    cmd = [binary, "generate", "--models-dir", models_dir, "--model", name, "--batch", str(batch),
           "--prompt", str(prompt), "--new-tokens", str(n), "--cache", "dynamic", "--eval", "--grad", "no_grad",
           "--quant", kind, "--device", "cpu", "--threads", str(threads), "--json",
           "--prefill-logits"]
    if group:
        cmd[cmd.index("--device"):cmd.index("--device")] = ["--group-size", str(group)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    r = json.loads(out.stdout)
    g = r["generation"]
    decode = [s["latency_ms"] for s in g["steps"] if s["phase"] == "decode"]
    return {"cmd": cmd, "decode_p50_ms": g["decode_ms_per_token"]["p50"], "prefill_ms": g["prefill_ms"],
            "decode_min_ms": min(decode),
            "tokens": g["tokens"], "prompt_tokens": g["prompt_tokens"],
            "weights_breakdown": g["weights_breakdown"], "weights_formula": g["weights_formula"],
            "memory_peak": g["memory_peak"], "drift": g["drift"], "prefill_logits": g["prefill_logits"],
            "memory_source": r["memory"]["source"], "device": r["env"]["device_name"]}


def peer_drift(quantized: PlainDecoder, dense: PlainDecoder, prompt, tokens):
    """What engine/src/lab/drift.rs computes, on the peer's two models: one pass (no cache,
    every position's logits) over prompt ++ tokens[:-1]; the prefill's logits at the prompt's
    last position; the dense model's teacher-forced greedy picks against `tokens`."""
    p, n = prompt.shape[1], tokens.shape[1]
    fed = torch.cat([prompt, tokens[:, :-1]], 1)
    lq = quantized.forward(fed, 0, None, all_logits=True).float()
    lr = dense.forward(fed, 0, None, all_logits=True).float()
    picks = lr[:, p - 1:p - 1 + n].argmax(-1)
    return {"max_abs_logit_delta": (lq[:, p - 1] - lr[:, p - 1]).abs().max().item(),
            "max_abs_logit": lr[:, p - 1].abs().max().item(),
            "greedy_agreement": (picks == tokens).float().mean().item(),
            "prefill_logits": lq[:, p - 1]}


def spread(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def run_quant(a, c, model):
    """The quantized runs: Gradless against the plain loop on the same fp32 weights (a team
    decoder folder), each quantizing them at load with linear.rs's formula and calling the
    same packed kernels. Checked: the weight bytes to the byte, the greedy tokens, the drift
    figures (the logits' only trace in Gradless's JSON); timed: decode per token, interleaved."""
    import tempfile

    import safetensors.torch
    if not a.models_dir:
        with tempfile.TemporaryDirectory(prefix="gradless-quant-peer-") as d:
            a.models_dir = d
            try:
                return run_quant(a, c, model)
            finally:
                a.models_dir = None
    models_dir = a.models_dir
    name = f"{a.model}_peer"
    folder = write_team_decoder(model, models_dir, name)
    sd = safetensors.torch.load_file(os.path.join(folder, "model.safetensors"))
    dense = PlainDecoder(model, c, sd=sd)
    peers = {q: dense if q[0] == "none" else PlainDecoder(model, c, sd=sd, quant=q) for q in a.quant}
    cells = [(q, b) for b in a.batches for q in a.quant]
    rows = {cell: {"gradless": [], "peer": []} for cell in cells}
    prompts = {}

    def peer_round(cell):
        t, toks, _ = plain_generate(peers[cell[0]], prompts[cell[1]], a.new_tokens)
        rows[cell]["peer"].append({"decode_p50_ms": statistics.median(t[1:]), "prefill_ms": t[0], "decode_min_ms": min(t[1:]),
                                   "tokens": toks.tolist()})

    with torch.no_grad():
        # Rounds outside, settings inside, so every setting sees the machine's load of the same
        # minutes; within a round the side that goes first alternates.
        for r in range(a.rounds):
            for cell in cells:
                quant, batch = cell
                if r % 2 == 1:
                    peer_round(cell)
                g = gradless_quant(a.gradless, models_dir, name, quant, batch, a.prompt, a.new_tokens, a.threads)
                rows[cell]["gradless"].append(g)
                if batch not in prompts:
                    # Gradless's seeded prompt, fed to the peer as ids.
                    prompts[batch] = torch.tensor(g["prompt_tokens"], dtype=torch.int64)
                if r == 0:
                    plain_generate(peers[quant], prompts[batch], 4)  # the peer's warm-up, outside the figures
                if r % 2 == 0:
                    peer_round(cell)
    results = []
    for cell in cells:
        quant, batch = cell
        peer, prompt = peers[quant], prompts[batch]
        label = {"none": "fp32 (unquantized)"}.get(quant[0], quant[0]) + (f", groups of {quant[1]}" if quant[1] else "")
        g0, p0 = rows[cell]["gradless"][0], rows[cell]["peer"][0]
        with torch.no_grad():
            tokens_ref = torch.tensor(p0["tokens"], dtype=torch.int64)
            drift = peer_drift(peer, dense, prompt, tokens_ref) if quant[0] != "none" else None
            # The peer's own prefill logits from the generation against its drift pass's.
            prefill = peer.forward(prompt, 0, [None] * c["num_hidden_layers"])[:, -1].float()
        linear_b, other_b = peer.weights_breakdown()
        gb = g0["weights_breakdown"]
        gd = g0["drift"]
        rc = rows[cell]
        ratios = [gr["decode_p50_ms"] / pr["decode_p50_ms"] for gr, pr in zip(rc["gradless"], rc["peer"])]
        med = {side: {k: statistics.median(x[k] for x in rs) for k in ("decode_p50_ms", "prefill_ms", "decode_min_ms")}
               for side, rs in rc.items()}
        result = {
            "model": a.model, "team_folder": name, "weights": quant[0], "group_size": quant[1],
            "batch": batch, "prompt": a.prompt, "new_tokens": a.new_tokens, "threads": a.threads,
            "rounds": a.rounds, "device": g0["device"], "memory_source": g0["memory_source"],
            "gradless_cmd": " ".join(g0["cmd"]),
            "weights_bytes": {"gradless": {"linear": gb["linear_bytes"], "other": gb["other_bytes"]},
                              "gradless_formula": {"linear": g0["weights_formula"]["linear_bytes"],
                                                   "other": g0["weights_formula"]["other_bytes"]},
                              "peer": {"linear": linear_b, "other": other_b},
                              "linear_unquantized": gb["linear_unquantized_bytes"]},
            "weights_equal_to_the_byte": (gb["linear_bytes"], gb["other_bytes"]) == (linear_b, other_b),
            # What the run holds as weights at its peak: the tensors above and the rotary frequencies.
            "memory_peak_weights_equal": g0["memory_peak"]["weights_bytes"] == linear_b + other_b + peer.inv_freq.nbytes,
            "tokens_identical_every_round": all(gr["tokens"] == pr["tokens"]
                                                for gr in rc["gradless"] for pr in rc["peer"]),
            "drift": drift and {"gradless": {k: gd[k] for k in DRIFT}, "peer": {k: drift[k] for k in DRIFT}},
            "drift_abs_difference": drift and {k: abs(gd[k] - drift[k]) for k in DRIFT},
            "peer_prefill_vs_drift_pass_max_abs": drift and (prefill - drift["prefill_logits"]).abs().max().item(),
            # Gradless's prefill logits (`--prefill-logits`) against the peer's, number for number.
            "prefill_logits_max_abs_difference": (torch.tensor(g0["prefill_logits"]) - prefill).abs().max().item(),
            "prefill_logits_max_abs": prefill.abs().max().item(),
            "median": med,
            "decode_ratio": med["gradless"]["decode_p50_ms"] / med["peer"]["decode_p50_ms"],
            "decode_ratio_per_round": spread(ratios),
            # The fastest decode step of each run (median over rounds): what a step costs when the
            # scheduler did not preempt it, the companion figure on a loaded machine.
            "decode_min_ratio": med["gradless"]["decode_min_ms"] / med["peer"]["decode_min_ms"],
            "decode_p50_ms_per_round": {side: [x["decode_p50_ms"] for x in rs] for side, rs in rc.items()},
        }
        results.append(result)
        dd = result["drift_abs_difference"]
        drift_text = "" if not drift else (
            f"drift |Δ| gradless {gd['max_abs_logit_delta']:.6f} peer {drift['max_abs_logit_delta']:.6f} "
            f"(diff {dd['max_abs_logit_delta']:.2e}; max|logit| diff {dd['max_abs_logit']:.2e}; "
            f"agreement {gd['greedy_agreement']:.4f} / {drift['greedy_agreement']:.4f}); ")
        print(f"{label}, batch {batch}: weights linear {gb['linear_bytes']} B / peer {linear_b} B, "
              f"other {gb['other_bytes']} B / peer {other_b} B (equal: {result['weights_equal_to_the_byte']}); "
              f"tokens identical: {result['tokens_identical_every_round']}; "
              f"prefill logits max |Δ| {result['prefill_logits_max_abs_difference']:.2e} (of |logit| up to "
              f"{result['prefill_logits_max_abs']:.2f}); " + drift_text +
              f"decode/token gradless {med['gradless']['decode_p50_ms']:.3f} ms, peer "
              f"{med['peer']['decode_p50_ms']:.3f} ms: {result['decode_ratio']:.2f}x "
              f"(per round {min(ratios):.2f}-{max(ratios):.2f}); fastest step {med['gradless']['decode_min_ms']:.3f} / "
              f"{med['peer']['decode_min_ms']:.3f} ms: {result['decode_min_ratio']:.2f}x", flush=True)
    return results


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
    ap.add_argument("--quant", type=parse_quant, nargs="+", metavar="int8|int4:G",
                    help="the quantized runs against the plain loop on the same weights, instead of transformers")
    ap.add_argument("--models-dir", help="with --quant: where the team decoder folder is written (default: a temporary one)")
    ap.add_argument("--check", action="store_true",
                    help="with --quant: exit 1 unless the bytes, the greedy tokens and the drift agree (not the timings)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    infos = json.loads(subprocess.run([a.gradless, "models", "--json"], check=True, capture_output=True, text=True).stdout)
    info = next(m for m in infos if m["id"] == a.model)
    c = info["decoder"]["config"]
    model = hf_model(c)
    if a.quant:
        results = run_quant(a, c, model)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(results, f, indent=2)
        if a.check:
            bad = [f"{r['weights']}:{r['group_size']} batch {r['batch']}: {what}" for r in results for what, ok in [
                ("weight bytes differ", r["weights_equal_to_the_byte"]),
                ("the weights at the peak differ from the tensors'", r["memory_peak_weights_equal"]),
                ("greedy tokens differ", r["tokens_identical_every_round"]),
                ("drift differs by more than 1e-4", not r["drift"] or max(r["drift_abs_difference"].values()) <= 1e-4),
                ("prefill logits differ by more than 1e-4", r["prefill_logits_max_abs_difference"] <= 1e-4),
            ] if not ok]
            if bad:
                print("error: " + "; ".join(bad), file=sys.stderr)
                return 1
            print(f"ok: {len(results)} settings, weight bytes equal to the byte, greedy tokens identical, "
                  "prefill logits and drift within 1e-4 of the peer's")
        return 0
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
