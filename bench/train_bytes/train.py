"""Trains the byte-level Llama-shaped decoder on PyTorch's own source (see corpus.py), on CPU,
in fp32, deterministically, and writes a Hugging Face folder (config.json,
generation_config.json, model.safetensors) with the corpus manifest and the training curve.

    /root/.cache/gradless/venv/bin/python bench/train_bytes/train.py --out models/torch_bytes

Same seed, same step count, same thread count, same torch build: the same weights. Nothing
here reaches the network; the config is built locally.
"""

import argparse
import csv
import json
import math
import os
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import corpus  # noqa: E402

# The shape: within Gradless's decoder loader (LlamaForCausalLM, SwiGLU, RoPE default, no
# biases, tied head) and its int4 path (every linear layer's input width a multiple of 128).
SHAPE = dict(
    vocab_size=corpus.VOCAB,
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    max_position_embeddings=256,
    rms_norm_eps=1e-5,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    tie_word_embeddings=True,
    attention_bias=False,
    attention_dropout=0.0,
    mlp_bias=False,
    hidden_act="silu",
    initializer_range=0.02,
    bos_token_id=corpus.BOS,
    eos_token_id=corpus.EOS,
    pad_token_id=corpus.PAD,
)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="the folder to write")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=16, help="windows per step")
    ap.add_argument("--context", type=int, default=256, help="bytes per window (the model's context)")
    ap.add_argument("--lr", type=float, default=2e-3, help="peak learning rate")
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=46)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--eval-every", type=int, default=500,
                    help="steps between the monitor slice's bits per byte (torch/distributions)")
    ap.add_argument("--time-only", action="store_true",
                    help="time the steps and write nothing (to choose --steps)")
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F

    c = corpus.load()
    train_text, monitor, manifest = c.train, c.monitor, c.manifest
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)

    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    shape = dict(SHAPE, max_position_embeddings=args.context)
    config = LlamaConfig(**shape)
    model = LlamaForCausalLM(config)  # transformers' init, under the seed above
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"parameters: {n_params:,}; train bytes {len(train_text):,}; monitor {len(monitor):,}", flush=True)

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr, betas=(0.9, 0.95), eps=1e-8, foreach=False,
    )

    def lr_at(step):  # step counts from 0
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        t = (step - args.warmup) / max(1, args.steps - args.warmup)
        floor = args.lr * args.min_lr_ratio
        return floor + (args.lr - floor) * 0.5 * (1 + math.cos(math.pi * t))

    data = torch.frombuffer(bytearray(train_text), dtype=torch.uint8)
    gen = torch.Generator().manual_seed(args.seed)
    T, B = args.context, args.batch
    bos = torch.full((B, 1), corpus.BOS, dtype=torch.long)

    rows, window, t0 = [], [], time.time()
    out = pathlib.Path(args.out)
    if not args.time_only:
        out.mkdir(parents=True, exist_ok=True)
    log_path = out / "training_log.csv"
    fields = ["step", "bytes_seen", "lr", "train_loss_nats", "train_bpb", "distributions_bpb", "elapsed_s"]

    def write_log():
        with open(log_path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows(rows)

    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        starts = torch.randint(0, len(data) - T + 1, (B,), generator=gen)
        y = torch.stack([data[s:s + T] for s in starts.tolist()]).long()
        x = torch.cat([bos, y[:, :-1]], 1)  # the same framing as the evaluation
        logits = model(input_ids=x).logits
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        window.append(loss.item())

        done = step + 1
        if args.time_only:
            if done in (2, args.steps):
                print(f"step {done}: {time.time() - t0:.1f} s, loss {loss.item():.3f}", flush=True)
            if done == 2:
                t0 = time.time()
            continue
        last = done == args.steps
        if done % args.log_every == 0 or last:
            mean = sum(window) / len(window)
            window = []
            row = {"step": done, "bytes_seen": done * B * T, "lr": f"{lr_at(step):.6g}",
                   "train_loss_nats": f"{mean:.4f}", "train_bpb": f"{mean / math.log(2):.4f}",
                   "distributions_bpb": "", "elapsed_s": f"{time.time() - t0:.0f}"}
            if done % args.eval_every == 0 or last:
                row["distributions_bpb"] = f"{corpus.bits_per_byte(model, monitor, T):.4f}"
            rows.append(row)
            write_log()
            print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)

    if args.time_only:
        per = (time.time() - t0) / (args.steps - 2)
        print(f"{per:.3f} s/step (batch {B} x context {T}, {args.threads} thread(s))")
        return

    wall = time.time() - t0
    model.eval()
    model.save_pretrained(out)
    GenerationConfig(bos_token_id=corpus.BOS, eos_token_id=corpus.EOS, pad_token_id=corpus.PAD,
                     do_sample=False, max_new_tokens=64).save_pretrained(out)
    manifest["training"] = {
        "command": "/root/.cache/gradless/venv/bin/python bench/train_bytes/train.py " + " ".join(sys.argv[1:]),
        "args": vars(args),
        "parameters": n_params,
        "wall_s": round(wall, 1),
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "python": sys.version.split()[0],
        "cpu": _cpu_name(),
        "final_train_loss_nats": float(rows[-1]["train_loss_nats"]),
        "final_distributions_bpb": float(rows[-1]["distributions_bpb"]),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"wrote {out} in {wall:.0f} s", flush=True)


def _cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    main()
