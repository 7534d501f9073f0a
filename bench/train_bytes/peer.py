"""The trained model's quality and text in plain PyTorch + transformers, side by side with
Gradless on the same folder and the same held-out bytes:

- bits per byte on `heldout.txt` with the weights in fp32, bf16 and fp16 (each chunk of the
  model's context fed as [BOS] + the chunk but its last byte; corpus.bits_per_byte), against
  the rows of `gradless generate --quality --json`: equal within 1e-4;
- gzip -9 (Python's zlib) and the unigram baseline (train_byte_counts.json) against
  Gradless's figures on the same bytes;
- the greedy continuation of a text prompt through `AutoModelForCausalLM.generate`: the same
  tokens as Gradless's.

Reads only the model's folder (no torch source tree), so it runs wherever the folder is.

    /root/.cache/gradless/venv/bin/python bench/train_bytes/peer.py \
        --gradless target/release/gradless [--folder models/torch_bytes] [--threads 1] [--json OUT]

Exits 1 when a figure differs beyond its tolerance.
"""

import argparse
import gzip
import json
import math
import pathlib
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import corpus  # noqa: E402

PROMPT = "def forward(self, x):"
TOLERANCE = 1e-4


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gradless", required=True)
    ap.add_argument("--folder", default=str(pathlib.Path(__file__).resolve().parents[2] / "models" / "torch_bytes"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--pytorch-rows", nargs="+", default=["fp32", "bf16", "fp16"], choices=["fp32", "bf16", "fp16"],
                    help="the weights dtypes PyTorch scores too (scripts/test.sh: fp32 only, for time)")
    args = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(args.threads)
    folder = pathlib.Path(args.folder)
    held = (folder / "heldout.txt").read_bytes()
    counts = json.loads((folder / "train_byte_counts.json").read_text())["counts"]

    cmd = [args.gradless, "generate", "--model", "torch_bytes", "--device", "cpu", "--prompt-text", PROMPT,
           "--new-tokens", str(args.new_tokens), "--quality", "--threads", str(args.threads), "--json"]
    start = time.time()
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"gradless failed ({out.returncode}): {out.stderr.strip()[-2000:]}")
    report = json.loads(out.stdout)
    gradless_s = time.time() - start
    g = report["generation"]
    q = g["quality"]
    rows = {(r["weights"], r.get("quant", "none"), r.get("group_size"), r.get("kv_dtype", "as_activations")): r for r in q["rows"]}

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, local_files_only=True).eval()
    context = model.config.max_position_embeddings
    figures, failures = [], []
    for dtype, word in ((torch.float32, "fp32"), (torch.bfloat16, "bf16"), (torch.float16, "fp16")):
        if word not in args.pytorch_rows:
            continue
        m = model.to(dtype)
        t = time.time()
        peer = corpus.bits_per_byte(m, held, context, batch=32)
        row = rows[(word, "none", None, "as_activations")]
        diff = abs(peer - row["bits_per_byte"])
        figures.append({"setting": row["setting"], "gradless": row["bits_per_byte"], "pytorch": peer,
                        "abs_diff": diff, "pytorch_s": round(time.time() - t, 2), "gradless_s": round(row["seconds"], 2)})
        if diff > TOLERANCE:
            failures.append(f"{row['setting']}: Gradless {row['bits_per_byte']:.6f}, PyTorch {peer:.6f}")
    model = model.to(torch.float32)

    gz = 8 * len(gzip.compress(held, compresslevel=9, mtime=0)) / len(held)
    total = sum(c + 1 for c in counts)
    uni = -sum(math.log2((counts[b] + 1) / total) for b in held) / len(held)
    baselines = {"gzip_9": {"gradless": q["gzip_bits_per_byte"], "python_zlib": gz},
                 "unigram": {"gradless": q["unigram_bits_per_byte"], "python": uni}}
    if abs(uni - q["unigram_bits_per_byte"]) > 1e-9:
        failures.append(f"unigram: Gradless {q['unigram_bits_per_byte']}, Python {uni}")
    # Two DEFLATE implementations at level 9 may pick different matches: stated, not failed.
    fp32 = rows[("fp32", "none", None, "as_activations")]["bits_per_byte"]
    if not fp32 < min(gz, q["gzip_bits_per_byte"]):
        failures.append(f"the model ({fp32:.4f} bits per byte) does not beat gzip -9 ({gz:.4f})")

    ids = torch.tensor([[corpus.BOS] + list(PROMPT.encode("utf-8"))])
    with torch.no_grad():
        hf = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.new_tokens, do_sample=False,
                            pad_token_id=corpus.PAD, eos_token_id=None)
    hf_tokens = hf[0, ids.shape[1]:].tolist()
    same = hf_tokens == g["tokens"][0]
    if not same:
        failures.append(f"greedy tokens differ: transformers {hf_tokens[:16]}…, Gradless {g['tokens'][0][:16]}…")
    result = {
        "folder": str(folder),
        "device": report["env"]["device_name"],
        "threads": args.threads,
        "held_out": q["text"],
        "bits_per_byte": figures,
        "gradless_rows": [{"setting": r["setting"], "bits_per_byte": r["bits_per_byte"], "seconds": r["seconds"],
                       "kernel_max_abs_logit_delta": r.get("kernel_max_abs_logit_delta")} for r in q["rows"]],
        "baselines": baselines,
        "greedy": {"prompt": PROMPT, "same_tokens": same, "gradless_text": g["text"]["generated"][0],
                   "transformers_text": corpus_text(hf_tokens)},
        "gradless_run_s": round(gradless_s, 1),
        "pass": not failures,
        "failures": failures,
    }
    text = json.dumps(result, indent=1, ensure_ascii=False)
    if args.json:
        pathlib.Path(args.json).write_text(text + "\n")
    print(text)
    sys.exit(0 if not failures else 1)


def corpus_text(tokens):
    return bytes(t for t in tokens if t < 256).decode("utf-8", errors="replace")


if __name__ == "__main__":
    main()
