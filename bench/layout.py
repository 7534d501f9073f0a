#!/usr/bin/env python3
"""A linear layer's weight row-major against column-major, in plain PyTorch on the CPU:
the measurement behind Gradless's `WeightLayout` (engine/src/models/decoder/mod.rs).

    python bench/layout.py [--shapes 704x256 256x704 256x256 8192x256] [--rows 1 8 64 512]
        [--dtypes float32 bfloat16 float16 autocast-bfloat16 autocast-float16]
        [--rounds 7] [--threads 1] [--working-set-mb 64] [--json OUT.json]

For each weight shape `[out, in]`, row count M and dtype, `F.linear(x, W)` with x `[M, in]`
runs on two copies of the same values:
- row-major: `W` contiguous (PyTorch's default, what `nn.Linear` holds);
- column-major: `W.t().contiguous().t()`, the same `[out, in]` tensor with strides `[1, out]`.

A decode step at batch 1 streams each weight once from memory, so every call here reads a
weight that is not in the cache: each side cycles through enough distinct copies of its
weight that they exceed `--working-set-mb` (64 MB by default). Set it beyond the machine's
last-level cache to measure reads from DRAM (`lscpu`: the 2-core AMD EPYC VM's L3 acted like
~16 MB, the Xeon VM's is 260 MiB, where `--working-set-mb 1024` is needed). "autocast-X" runs fp32 weights under `torch.autocast("cpu", X)`, which casts the
weight per call and keeps its strides. Rounds outside, the side that goes first
alternating; each round times `--calls` calls per side and takes their median; reported:
the medians over rounds (µs per call), the weight's bytes over that time (GB/s), and the
ratio column-major / row-major (below 1: column-major is faster) with its range over the
rounds. The outputs of the two layouts are compared (max |Δ| relative to max |y|) and
printed beside the timings; nothing is judged.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def parse_shape(s: str) -> tuple[int, int]:
    try:
        out, inp = (int(v) for v in s.lower().split("x"))
    except ValueError:
        sys.exit(f"layout.py: a shape is OUTxIN, e.g. 704x256 (got {s!r})")
    if out < 1 or inp < 1:
        sys.exit(f"layout.py: a shape's sizes are positive (got {s!r})")
    return out, inp


def setting(name: str):
    """(weight dtype, autocast dtype or None) for a --dtypes entry."""
    if name.startswith("autocast-"):
        inner = name[len("autocast-"):]
        if inner not in ("bfloat16", "float16"):
            sys.exit(f"layout.py: autocast runs in bfloat16 or float16 (got {name!r})")
        return torch.float32, DTYPES[inner]
    if name not in DTYPES:
        sys.exit(f"layout.py: unknown dtype {name!r} (use {', '.join(DTYPES)}, autocast-bfloat16, autocast-float16)")
    return DTYPES[name], None


def timed(weights, x, calls, autocast):
    ctx = torch.autocast("cpu", dtype=autocast) if autocast is not None else contextlib.nullcontext()
    times = []
    with torch.inference_mode(), ctx:
        for i in range(calls):
            w = weights[i % len(weights)]
            t0 = time.perf_counter()
            F.linear(x, w)
            times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", default=["704x256", "256x704", "256x256", "8192x256"])
    ap.add_argument("--rows", nargs="+", type=int, default=[1, 8, 64, 512])
    ap.add_argument("--dtypes", nargs="+",
                    default=["float32", "bfloat16", "float16", "autocast-bfloat16", "autocast-float16"])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--working-set-mb", type=float, default=64.0)
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.rounds < 1 or a.calls < 1 or a.threads < 1 or a.working_set_mb <= 0:
        sys.exit("layout.py: --rounds, --calls, --threads and --working-set-mb are positive")
    if any(m < 1 for m in a.rows):
        sys.exit("layout.py: --rows are positive")
    shapes = [parse_shape(s) for s in a.shapes]
    settings = [(name, *setting(name)) for name in a.dtypes]
    torch.manual_seed(0)
    torch.set_num_threads(a.threads)
    print(f"# torch {torch.__version__}, CPU, {a.threads} thread(s), working set >= {a.working_set_mb:g} MB "
          f"per side; µs per F.linear call (median of {a.calls} calls, median over {a.rounds} rounds)")
    print(f"{'dtype':<18}{'shape':>10}{'M':>5}{'row-major':>11}{'col-major':>11}{'GB/s rm':>9}"
          f"{'GB/s cm':>9}{'cm/rm':>7}  {'range':<12}{'|Δ|/max|y|':>11}")
    results = []
    for name, wdtype, autocast in settings:
        for out, inp in shapes:
            base = torch.randn(out, inp) / inp ** 0.5
            nbytes = out * inp * torch.tensor([], dtype=wdtype).element_size()
            copies = max(2, int(a.working_set_mb * 1e6 // nbytes) + 1)
            row = [base.to(wdtype).clone() for _ in range(copies)]
            col = [w.t().contiguous().t() for w in row]
            assert col[0].stride() == (1, out) and torch.equal(col[0], row[0])
            for m in a.rows:
                x = torch.randn(m, inp).to(torch.float32 if autocast is not None else wdtype)
                with torch.inference_mode(), (torch.autocast("cpu", dtype=autocast) if autocast is not None
                                              else contextlib.nullcontext()):
                    yr, yc = F.linear(x, row[0]).float(), F.linear(x, col[0]).float()
                rel = ((yr - yc).abs().max() / yr.abs().max().clamp_min(1e-30)).item()
                timed(row, x, len(row), autocast)  # one pass over each side's copies first
                timed(col, x, len(col), autocast)
                rm, cm = [], []
                for r in range(a.rounds):
                    sides = [(row, rm), (col, cm)] if r % 2 == 0 else [(col, cm), (row, rm)]
                    for ws, acc in sides:
                        acc.append(timed(ws, x, a.calls, autocast))
                ratios = [c / r for r, c in zip(rm, cm)]
                rmm, cmm = statistics.median(rm), statistics.median(cm)
                rec = {"dtype": name, "out": out, "in": inp, "rows": m, "row_major_us": rmm, "col_major_us": cmm,
                       "ratio": cmm / rmm, "ratio_range": [min(ratios), max(ratios)],
                       "weight_bytes": nbytes, "copies": copies, "max_rel_diff": rel}
                results.append(rec)
                print(f"{name:<18}{f'{out}x{inp}':>10}{m:>5}{rmm:>11.1f}{cmm:>11.1f}{nbytes / rmm / 1e3:>9.1f}"
                      f"{nbytes / cmm / 1e3:>9.1f}{cmm / rmm:>7.2f}  {min(ratios):.2f}–{max(ratios):.2f}"
                      f"{'':<3}{rel:>11.1e}", flush=True)
            del row, col
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"torch": torch.__version__, "threads": a.threads, "working_set_mb": a.working_set_mb,
                       "rounds": a.rounds, "calls": a.calls, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
