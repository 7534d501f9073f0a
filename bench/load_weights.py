#!/usr/bin/env python3
"""How fast Gradless loads a team's sharded checkpoint, against reading the same bytes, and
what the load holds in memory.

    python bench/load_weights.py [--gradless ~/.cache/gradless/target/release/gradless]
        [--dir DIR] [--rounds 5] [--layers 8] [--shard-mb 200] [--json OUT.json]

Writes a Llama checkpoint as transformers saves one (bf16, about 1 GB: config.json, ~200 MB
shards model-0000N-of-0000M.safetensors, model.safetensors.index.json, Hugging Face names,
random values) into DIR/models/bench_llama_1g (DIR temporary and deleted, unless --dir: kept
and reused), its shapes checked against transformers' LlamaForCausalLM built on the meta
device. Then, page cache warm, R rounds, the side that goes first alternating:

- read: `cat SHARDS > /dev/null`, timed around the process: the floor for any loader that
  sees every byte once;
- load: `gradless models --models-dir DIR/models --load bench_llama_1g --load-dtype bf16
  --json`: `load_ms` (the model built, every weight read from its mapped shard),
  `held_bytes`, and the process's wall time and peak RSS;
- baseline: the same command on a ~100 KB checkpoint beside it (`bench_llama_tiny`): the
  process's and libtorch's own footprint by the same code path. The listing (`gradless
  models --json`) is measured once for reference: it builds the built-in models to count
  their parameters, so its peak is above what a load process pays without weights.

Reported: medians of read ms, load_ms and load/read (goal <= 1.5); peak RSS above the
baseline against the checkpoint's bytes and against the weights held plus the largest shard
(goal <= 1: Gradless maps one shard at a time); minor page faults. Then one fp32 load
(bf16 -> fp32 as it reads, 2x the bytes held), reported the same way. Memory is the peak
RSS (VmHWM; ru_maxrss, read as /usr/bin/time reads it): it counts the pages of mapped
files the process touched, not only its allocations. `--load` builds outside the
measurement worker, so no thread flag applies: libtorch's default threads.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NAME, TINY = "bench_llama_1g", "bench_llama_tiny"
MB = 1e6


def llama_config(hidden: int, inter: int, layers: int, heads: int, kv: int, vocab: int) -> dict:
    """A config.json as a published Llama checkpoint has it (transformers 4.x's field names)."""
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv, "vocab_size": vocab,
        "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "rope_scaling": None, "tie_word_embeddings": False, "attention_bias": False,
        "attention_dropout": 0.0, "mlp_bias": False, "initializer_range": 0.02,
        "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16", "use_cache": True,
    }


def tensor_shapes(c: dict) -> list[tuple[str, tuple[int, ...]]]:
    """Every tensor with its shape, in the order save_pretrained writes them."""
    h, i, hd = c["hidden_size"], c["intermediate_size"], c["hidden_size"] // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    layer = {"self_attn.q_proj": (q, h), "self_attn.k_proj": (kv, h), "self_attn.v_proj": (kv, h),
             "self_attn.o_proj": (h, q), "mlp.gate_proj": (i, h), "mlp.up_proj": (i, h), "mlp.down_proj": (h, i),
             "input_layernorm": (h,), "post_attention_layernorm": (h,)}
    return ([("model.embed_tokens.weight", (c["vocab_size"], h))]
            + [(f"model.layers.{n}.{k}.weight", s) for n in range(c["num_hidden_layers"]) for k, s in layer.items()]
            + [("model.norm.weight", (h,)), ("lm_head.weight", (c["vocab_size"], h))])


def write_checkpoint(folder: Path, config: dict, shard_bytes: float) -> None:
    import torch
    import transformers
    from safetensors.torch import save_file

    shapes = tensor_shapes(config)
    # Checked before a GB is written: what transformers builds from this config.json is what
    # Gradless's reader must accept too. The meta device allocates nothing.
    cfg = transformers.LlamaConfig.from_dict(config)
    with torch.device("meta"):
        want = {k: tuple(v.shape) for k, v in transformers.LlamaForCausalLM(cfg).state_dict().items()}
    if want != dict(shapes):
        sys.exit(f"shapes differ from transformers': {set(want.items()) ^ set(shapes)}")
    # Greedy packing in order, as save_pretrained's max_shard_size does.
    shards: list[list] = [[]]
    size = 0
    for name, shape in shapes:
        n = math.prod(shape) * 2
        if shards[-1] and size + n > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append((name, shape))
        size += n
    folder.mkdir(parents=True)
    g = torch.Generator().manual_seed(0)
    weight_map, total = {}, 0
    for k, group in enumerate(shards):
        file = "model.safetensors" if len(shards) == 1 else f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        # Norms at one, the rest as a trained model's scale; the load's time does not depend
        # on the values, only a reader of the text would.
        tensors = {n: torch.ones(s, dtype=torch.bfloat16) if len(s) == 1
                   else torch.randn(s, generator=g, dtype=torch.bfloat16) * 0.02 for n, s in group}
        save_file(tensors, folder / file, metadata={"format": "pt"})
        total += sum(t.numel() * 2 for t in tensors.values())
        weight_map.update({n: file for n in tensors})
    if len(shards) > 1:
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    (folder / "config.json").write_text(json.dumps(config, indent=2))


# What /usr/bin/time does, in a fresh small Python: fork, exec the command, wait4 for its
# rusage. Not wait4 on a child of this process: Python spawns by vfork, and exec then starts
# the child's ru_maxrss at this process's own peak (over a GB once torch wrote the checkpoint).
# The shim's few MB, copied by its fork, count in the load and the baseline alike.
SHIM = """import os, sys, time
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.execv(sys.argv[1], sys.argv[1:])
    finally:
        os._exit(127)
_, status, ru = os.wait4(pid, 0)
print(time.perf_counter() - t0, ru.ru_maxrss, ru.ru_minflt, file=sys.stderr)
sys.exit(os.waitstatus_to_exitcode(status))"""


def run(cmd: list[str]) -> tuple[float, int, int, str]:
    """Wall seconds, peak RSS bytes (ru_maxrss), minor page faults and stdout of one process."""
    p = subprocess.run([sys.executable, "-I", "-S", "-c", SHIM, *cmd], capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"`{' '.join(cmd)}` failed ({p.returncode}):\n{p.stdout}{p.stderr}")
    wall, maxrss, faults = p.stderr.splitlines()[-1].split()
    return float(wall), int(maxrss) * 1024, int(faults), p.stdout


def gradless(binary: str, models: Path, name: str, dtype: str) -> dict:
    cmd = [binary, "models", "--models-dir", str(models), "--load", name, "--load-dtype", dtype, "--json"]
    wall, rss, faults, out = run(cmd)
    # Minor page faults: each 4 KiB page first touched (a fresh allocation or a mapped page).
    return {**json.loads(out[out.index("{"):]), "wall_ms": wall * 1000, "peak_rss": rss, "minor_faults": faults}


def read(files: list[Path]) -> float:
    t0 = time.perf_counter()
    subprocess.run(["cat", *map(str, files)], stdout=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - t0) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gradless", default=os.path.expanduser("~/.cache/gradless/target/release/gradless"))
    ap.add_argument("--dir", type=Path)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--layers", type=int, default=8, help="8: 0.98 GB in bf16")
    ap.add_argument("--shard-mb", type=float, default=200)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="gradless-load-"))
    try:
        models = root / "models"
        for name, shape, limit in ((NAME, (2048, 5632, args.layers, 32, 8, 32000), args.shard_mb * MB),
                                   (TINY, (64, 128, 1, 4, 2, 256), math.inf)):
            if not (models / name / "config.json").exists():  # written last: the folder is complete
                shutil.rmtree(models / name, ignore_errors=True)
                t0 = time.perf_counter()
                write_checkpoint(models / name, llama_config(*shape), limit)
                print(f"wrote {models / name} in {time.perf_counter() - t0:.1f} s")
        files = sorted((models / NAME).glob("*.safetensors"))
        sizes = [f.stat().st_size for f in files]
        # Warm: every shard in the page cache, libtorch's libraries read once, so no round
        # pays a cold disk or a first dynamic load.
        read(files)
        gradless(args.gradless, models, TINY, "bf16")
        rounds = []
        sides = {"read_ms": lambda: read(files), "load": lambda: gradless(args.gradless, models, NAME, "bf16")}
        for r in range(args.rounds):
            # The first alternates: neither side always runs right after the other's work.
            order = list(sides)[:: 1 if r % 2 == 0 else -1]
            row = {"first": order[0], **{k: sides[k]() for k in order}}
            row["baseline"] = gradless(args.gradless, models, TINY, "bf16")
            rounds.append(row)
            print(f"round {r + 1}: read {row['read_ms']:.0f} ms, load {row['load']['load_ms']:.0f} ms")
        listing_wall, listing_rss, _, _ = run([args.gradless, "models", "--models-dir", str(models), "--json"])
        fp32 = gradless(args.gradless, models, NAME, "fp32")
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)

    med = statistics.median
    cpu = next((l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines()
                if l.startswith("model name")), "unknown")
    read_ms, ckpt, largest = med(r["read_ms"] for r in rounds), sum(sizes), max(sizes)
    base, base_faults = (med(r["baseline"][k] for r in rounds) for k in ("peak_rss", "minor_faults"))

    def summary(runs: list[dict], reads: list[float]) -> dict:
        s = {k: med(r[k] for r in runs) for k in ("load_ms", "wall_ms", "peak_rss", "minor_faults")}
        above, held = s["peak_rss"] - base, runs[0]["held_bytes"]
        return {**s, "load_over_read": med(r["load_ms"] / t for r, t in zip(runs, reads)), "held_bytes": held,
                "rss_above_baseline": above, "held_plus_largest_shard": held + largest,
                "rss_over_checkpoint": above / ckpt, "rss_over_held_plus_shard": above / (held + largest)}

    bf16 = summary([r["load"] for r in rounds], [r["read_ms"] for r in rounds])
    f32 = summary([fp32], [read_ms])
    # Other work on the machine shows in the timings; the load average says how much there was.
    print(f"\nmachine: {cpu}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} (1 min); "
          f"medians of {args.rounds} rounds")
    print(f"checkpoint: {len(files)} shards, {ckpt / MB:.1f} MB (stored_bytes {rounds[0]['load']['stored_bytes']}); "
          f"shards MB: {', '.join(f'{s / MB:.1f}' for s in sizes)}")
    print(f"read (cat > /dev/null, page cache warm): {read_ms:.0f} ms = {ckpt / MB / read_ms:.2f} GB/s")
    print(f"baseline peak RSS: {base / MB:.1f} MB (--load of the tiny checkpoint); the listing, "
          f"`gradless models --json`: {listing_rss / MB:.1f} MB in {listing_wall * 1000:.0f} ms (reference)")
    print("memory: the process's peak RSS (VmHWM / max RSS), which counts the mapped file pages it touches")
    print(f"\n{'':<24}{'load_ms':>9}{'wall_ms':>9}{'load/read':>10}{'≤1.5':>6}{'held MB':>9}"
          f"{'RSS-base MB':>12}{'/ckpt':>7}{'held+shard MB':>14}{'/that':>7}{'≤1':>6}")
    for label, s in (("bf16 (as stored)", bf16), ("fp32 (bf16->fp32, once)", f32)):
        print(f"{label:<24}{s['load_ms']:>9.0f}{s['wall_ms']:>9.0f}{s['load_over_read']:>10.2f}"
              f"{'ok' if s['load_over_read'] <= 1.5 else 'over':>6}{s['held_bytes'] / MB:>9.1f}"
              f"{s['rss_above_baseline'] / MB:>12.1f}{s['rss_over_checkpoint']:>7.2f}"
              f"{s['held_plus_largest_shard'] / MB:>14.1f}{s['rss_over_held_plus_shard']:>7.2f}"
              f"{'ok' if s['rss_over_held_plus_shard'] <= 1 else 'over':>6}")
    ratios = ", ".join(f"{r['load']['load_ms'] / r['read_ms']:.2f}" for r in rounds)
    aboves = ", ".join(f"{(r['load']['peak_rss'] - r['baseline']['peak_rss']) / MB:.0f}" for r in rounds)
    print(f"bf16 per round: load/read {ratios}; RSS-base MB {aboves}")
    print(f"minor page faults above baseline: bf16 {bf16['minor_faults'] - base_faults:.0f} "
          f"({(bf16['minor_faults'] - base_faults) * 4096 / ckpt:.2f} per 4 KiB of checkpoint), "
          f"fp32 {f32['minor_faults'] - base_faults:.0f}")
    if args.json:
        args.json.write_text(json.dumps({
            "machine": {"cpu": cpu, "cores": os.cpu_count(), "loadavg": os.getloadavg()}, "shard_bytes": sizes,
            "read_ms": read_ms, "baseline_peak_rss": base, "listing_peak_rss": listing_rss, "bf16": bf16,
            "fp32": f32, "rounds": rounds, "fp32_run": fp32}, indent=2))


if __name__ == "__main__":
    main()
