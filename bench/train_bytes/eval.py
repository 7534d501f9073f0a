"""Held-out figures of a byte-level model folder: its bits per byte on the 64 KiB held-out
slice of torch/fx (corpus.py), beside gzip -9 and a unigram byte model on the same bytes
(and the same three on the torch/distributions monitor slice), and a greedy continuation of
a prompt, through transformers' AutoModelForCausalLM (offline). Exits 1 when the model does
not beat gzip -9 on the held-out slice.

    /root/.cache/gradless/venv/bin/python bench/train_bytes/eval.py models/torch_bytes [--json]

Bits per byte: the slice is cut into non-overlapping chunks of the model's context
(max_position_embeddings); each chunk is fed as [BOS] + chunk[:-1] and every byte is
scored, in fp32, the log-probabilities summed in float64.
Greedy text: the prompt is fed as [BOS] + its UTF-8 bytes, 64 new tokens, no sampling.
"""

import argparse
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import corpus  # noqa: E402

PROMPT = "def forward(self, x):"


def load(folder):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, local_files_only=True)
    model.eval()
    return model


def greedy(model, prompt: str, new_tokens: int = 64):
    import torch

    ids = torch.tensor([[corpus.BOS] + list(prompt.encode("utf-8"))])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                             do_sample=False, pad_token_id=corpus.PAD, eos_token_id=corpus.EOS)
    new = out[0, ids.shape[1]:].tolist()
    text = bytes(t for t in new if t < 256).decode("utf-8", errors="replace")
    return new, text


def gradless_compatible(folder: pathlib.Path):
    """What Gradless's decoder loader (protocol/src/decoder.rs, engine/src/models/decoder)
    needs of the folder, checked from Python: a list of problems, empty when none."""
    from safetensors import safe_open

    cfg = json.loads((folder / "config.json").read_text())
    problems = []
    if cfg.get("architectures", [None])[0] != "LlamaForCausalLM":
        problems.append(f"architectures: {cfg.get('architectures')}")
    if cfg.get("hidden_act", "silu") != "silu":
        problems.append("hidden_act is not silu")
    if cfg.get("mlp_bias"):
        problems.append("mlp_bias")
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        problems.append(f"rope type {rope}")
    h, heads, kv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d, inter, v = cfg.get("head_dim") or h // heads, cfg["intermediate_size"], cfg["vocab_size"]
    want = {"model.embed_tokens.weight": [v, h], "model.norm.weight": [h]}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        want.update({
            p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h],
            p + "self_attn.q_proj.weight": [heads * d, h], p + "self_attn.k_proj.weight": [kv * d, h],
            p + "self_attn.v_proj.weight": [kv * d, h], p + "self_attn.o_proj.weight": [h, heads * d],
            p + "mlp.gate_proj.weight": [inter, h], p + "mlp.up_proj.weight": [inter, h],
            p + "mlp.down_proj.weight": [h, inter],
        })
    if not cfg.get("tie_word_embeddings", False):
        want["lm_head.weight"] = [v, h]
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        have = {k: list(f.get_slice(k).get_shape()) for k in f.keys()}
        dtypes = {f.get_slice(k).get_dtype() for k in f.keys()}
    for k, shape in want.items():
        if have.get(k) != shape:
            problems.append(f"{k}: {have.get(k)} in the file, {shape} wanted")
    if not dtypes <= {"F32", "BF16", "F16"}:
        problems.append(f"dtypes {dtypes}")
    for g in (32, 64, 128):  # int4 groups: every linear layer's input width a multiple
        if h % g or (heads * d) % g or inter % g:
            problems.append(f"an input width is not a multiple of {g}")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    folder = pathlib.Path(args.folder)
    c = corpus.load()
    model = load(folder)
    context = model.config.max_position_embeddings
    tokens, text = greedy(model, args.prompt, args.new_tokens)

    def figures(data, entry):
        return {"dir": entry["dir"], "bytes": len(data), "sha256": entry["sha256"], "chunk": context,
                "model": round(corpus.bits_per_byte(model, data, context), 4),
                "gzip_9": round(corpus.gzip_bpb(data), 4),
                "unigram": round(corpus.unigram_bpb(c.train, data), 4)}

    result = {
        "folder": str(folder),
        "parameters": sum(p.numel() for p in model.parameters()),
        "safetensors_bytes": (folder / "model.safetensors").stat().st_size,
        "bpb": figures(c.heldout, c.manifest["heldout"]),
        "bpb_monitor": figures(c.monitor, c.manifest["monitor"]),
        "prompt": args.prompt,
        "greedy_tokens": tokens,
        "greedy_text": text,
        "gradless_problems": gradless_compatible(folder),
    }
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"{folder}: {result['parameters']:,} parameters, model.safetensors {result['safetensors_bytes']:,} B")
        for key, what in (("bpb", "held-out"), ("bpb_monitor", "monitor")):
            b = result[key]
            print(f"{what}: {b['bytes']:,} B of {b['dir']} (sha256 {b['sha256'][:16]}…), chunks of {context}: "
                  f"bits per byte: model {b['model']:.4f}, gzip -9 {b['gzip_9']:.4f}, unigram {b['unigram']:.4f}")
        print(f"greedy from {args.prompt!r}:\n{args.prompt}{text}")
        print("Gradless loader:", "ok" if not result["gradless_problems"] else result["gradless_problems"])
    if result["bpb"]["model"] >= result["bpb"]["gzip_9"]:
        print("warning: the model does not beat gzip -9", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
