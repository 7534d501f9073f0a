#!/usr/bin/env python3
"""Checks Gradless's FLOP count against PyTorch's own `torch.utils.flop_counter.FlopCounterMode`.

For every built-in model (same architecture as python/gradless/models.py's, same batch and input size)
it runs one forward pass under FlopCounterMode and one `gradless measure --json` (whose
`flops` field is counted from the shapes at every module boundary of the traced pass), and
prints both totals and their ratio. They must agree within 1%: the exit status is 1
otherwise. Both count a multiply-add as 2 FLOPs and leave biases and element-wise ops out.

    python bench/flops.py --gradless target/release/gradless [--batch 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

# The package gradless (python/, beside bench/): the same architectures Gradless builds.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
from gradless import models  # noqa: E402

MODELS = list(models.MODELS)
DEFAULT_SIZE = {"tiny_mlp": 512, "resnet18": 224, "resnet50": 224, "mobilenet_v2": 224, "transformer": 128}


def pytorch_flops(name: str, batch: int, size: int) -> int:
    model = models.build(name, size).eval()
    x = torch.randn(models.input_shape(name, batch, size))
    counter = FlopCounterMode(display=False)
    # On the CPU, attention dispatches to `_scaled_dot_product_flash_attention_for_cpu`,
    # which FlopCounterMode has no formula for (it would count attention as 0). The math
    # backend computes the same attention with two batched matmuls, which it counts.
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), counter:
        model(x)
    return int(counter.get_total_flops())


def gradless_flops(binary: str, name: str, batch: int, size: int) -> int:
    out = subprocess.run(
        [binary, "measure", "--model", name, "--batch", str(batch), "--input-size", str(size),
         "--grad", "no_grad", "--warmup", "0", "--iters", "1", "--device", "cpu", "--json"],
        check=True, capture_output=True, text=True,
    )
    return int(json.loads(out.stdout)["flops"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gradless", required=True, help="path to the gradless binary")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    rows = []
    for name in MODELS:
        size = DEFAULT_SIZE[name]
        ours = gradless_flops(args.gradless, name, args.batch, size)
        theirs = pytorch_flops(name, args.batch, size)
        rows.append({"model": name, "batch": args.batch, "input_size": size, "gradless_flops": ours,
                     "flop_counter_mode_flops": theirs, "ratio": ours / theirs if theirs else None})
    if args.json:
        print(json.dumps({"torch": torch.__version__, "rows": rows}, indent=2))
    else:
        print(f"torch {torch.__version__}; batch {args.batch}; one forward pass under no_grad")
        print(f"{'model':<14}{'input':>6}{'Gradless GFLOPs':>18}{'FlopCounterMode':>18}{'ratio':>9}")
        for r in rows:
            print(f"{r['model']:<14}{r['input_size']:>6}{r['gradless_flops'] / 1e9:>18.4f}"
                  f"{r['flop_counter_mode_flops'] / 1e9:>18.4f}{r['ratio']:>9.4f}")
    bad = [r for r in rows if r["ratio"] is None or abs(r["ratio"] - 1) > 0.01]
    for r in bad:
        print(f"DISAGREE: {r['model']} ratio {r['ratio']}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
