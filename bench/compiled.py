#!/usr/bin/env python3
"""Compiled passes side by side: Gradless running an AOTInductor package from libtorch
(`gradless measure --compiled`) against Python running the SAME .pt2
(`torch._inductor.aoti_load_package`), against `torch.compile` of the same architecture,
and against eager PyTorch, interleaved round by round, medians reported as ratios.

    python bench/compiled.py --gradless target/release/gradless [--model tiny_mlp]
        [--input-size 64] [--batches 1 32] [--rounds 5] [--iters 50] [--warmup 5]
        [--threads 1] [--json OUT.json]

Per batch (CPU, eval, no_grad, fp32):
- One Gradless run first compiles (or takes from its cache) the package; it is not
  counted, and its report names the package (`compiled.package`, in $GRADLESS_CACHE/aoti
  or ~/.cache/gradless/aoti), which Python then loads.
- Then R rounds; the side going first alternates (Gradless first on even rounds):
  Gradless: one `gradless measure ... --compiled --json` process: `latency_ms.p50` (the
    compiled passes) and `compiled.eager_p50_ms` (libtorch eager, same run).
  Python (this process, loaded once per batch, kept across rounds): AOTI = the package
    through `aoti_load_package`; torch.compile = `torch.compile(model)` (default mode) of
    gradless.models.build(name, size) in eval, its first call (Dynamo's trace and
    Inductor's compile) timed once per batch after torch._dynamo.reset(); Inductor's disk
    cache is a fresh directory for this process, shared by its batches, so the first
    batch's figure also holds Inductor's one-time start; eager = that model itself.
    Each: `warmup` passes, then `iters` passes under torch.no_grad(), perf_counter_ns
    around each call, median.
Why: the ratio Gradless / Python AOTI says what Gradless's runner adds over PyTorch's own
runner of the identical compiled code (goal <= 1.1; reported, not asserted: exit 0);
Gradless eager / PyTorch eager is the same figure for the eager model; torch.compile shows
what a Python user gets from JIT compiling the same architecture, and what its first call
costs. The inputs are random (the timings do not depend on their values); the Python
models' weights are gradless.models's seeded ones, the package holds Gradless's. Outputs are not
compared here (a test checks the package bit for bit); Gradless's own compiled-vs-eager
max |diff| is printed. Memory is not measured here.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

# A cold torch.compile: Inductor's caches in a fresh directory (before torch is imported).
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="gradless-bench-inductor-")
atexit.register(shutil.rmtree, os.environ["TORCHINDUCTOR_CACHE_DIR"], ignore_errors=True)
os.environ.setdefault("KINETO_LOG_LEVEL", "5")
# The package gradless (python/, beside bench/): the architectures and the peer's helpers.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))

import torch  # noqa: E402

from gradless import models, peer  # noqa: E402


def gradless(a, batch):
    cmd = [a.gradless, "measure", "--model", a.model, "--compiled", "--batch", str(batch), "--eval",
           "--grad", "no_grad", "--device", "cpu", "--threads", str(a.threads), "--input-size", str(a.input_size),
           "--warmup", str(a.warmup), "--iters", str(a.iters), "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise SystemExit(f"error: {' '.join(cmd)} exited {p.returncode}:\n{p.stderr.strip()}")
    return json.loads(p.stdout)


def timed(fn, x, warmup, iters):
    """Median ms of `iters` calls after `warmup`, under no_grad."""
    with torch.no_grad():
        for _ in range(warmup):
            fn(x)
        ts = []
        for _ in range(iters):
            t0 = time.perf_counter_ns()
            fn(x)
            ts.append((time.perf_counter_ns() - t0) / 1e6)
    return statistics.median(ts)


def cache_dir():
    root = os.environ.get("GRADLESS_CACHE") or os.path.expanduser("~/.cache/gradless")
    return os.path.join(root, "aoti")


def run_batch(a, batch):
    first = gradless(a, batch)  # compiles or loads the package; not counted
    c0 = first["compiled"]
    path = os.path.join(cache_dir(), c0["package"])
    aoti = torch._inductor.aoti_load_package(path)
    torch.manual_seed(0)
    x = torch.randn(models.input_shape(a.model, batch, a.input_size))
    torch.manual_seed(0)
    model = models.build(a.model, a.input_size).eval()
    torch._dynamo.reset()
    compiled = torch.compile(model)
    with torch.no_grad():
        t0 = time.perf_counter()
        compiled(x)
        first_call_s = time.perf_counter() - t0
    rows = {k: [] for k in ("gradless", "gradless_eager", "aoti", "torch_compile", "eager")}

    def python_side():
        rows["aoti"].append(timed(aoti, x, a.warmup, a.iters))
        rows["torch_compile"].append(timed(compiled, x, a.warmup, a.iters))
        rows["eager"].append(timed(model, x, a.warmup, a.iters))

    for r in range(a.rounds):
        if r % 2 == 1:
            python_side()
        g = gradless(a, batch)
        rows["gradless"].append(g["latency_ms"]["p50"])
        rows["gradless_eager"].append(g["compiled"]["eager_p50_ms"])
        if r % 2 == 0:
            python_side()
    med = {k: statistics.median(v) for k, v in rows.items()}
    ratios = [gr / pr for gr, pr in zip(rows["gradless"], rows["aoti"])]
    return {
        "model": a.model, "batch": batch, "input_size": a.input_size, "threads": a.threads, "rounds": a.rounds,
        "iters": a.iters, "warmup": a.warmup, "device": first["env"].get("device_name"),
        "package": path, "package_bytes": c0["package_bytes"], "package_batch_range": [c0["batch_min"], c0["batch_max"]],
        "first_run": {k: c0[k] for k in ("cached", "export_ms", "compile_ms", "subprocess_ms", "load_ms")},
        "gradless_compiled_vs_eager": {"max_abs_diff": c0["max_abs_diff"], "bitwise_equal": c0["bitwise_equal"]},
        "median_p50_ms": med, "per_round_p50_ms": rows,
        "ratio_gradless_vs_python_aoti": med["gradless"] / med["aoti"],
        "ratio_per_round": {"min": min(ratios), "max": max(ratios)},
        "ratio_gradless_eager_vs_pytorch_eager": med["gradless_eager"] / med["eager"],
        "torch_compile_first_call_s": first_call_s,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gradless", required=True)
    ap.add_argument("--model", default="tiny_mlp")
    ap.add_argument("--input-size", type=int, default=64)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"machine: {peer.cpu_model_name()}, {os.cpu_count()} logical CPUs ({cpus} usable); torch "
          f"{torch.__version__}; {a.threads} thread(s); {a.rounds} rounds x {a.iters} passes; memory is not measured here",
          flush=True)
    start = time.perf_counter()
    results = []
    for batch in a.batches:
        r = run_batch(a, batch)
        results.append(r)
        m, fr = r["median_p50_ms"], r["first_run"]
        ratio = r["ratio_gradless_vs_python_aoti"]
        print(f"batch {batch}: package {os.path.basename(r['package'])} ({r['package_bytes']} B, batches "
              f"{r['package_batch_range'][0]}..{r['package_batch_range'][1]}; first run: "
              f"{'cached' if fr['cached'] else 'compiled'}, export {fr['export_ms']:.0f} ms, "
              f"compile {fr['compile_ms']:.0f} ms, load {fr['load_ms']:.1f} ms)\n"
              f"  compiled p50: gradless {m['gradless']:.4f} ms, python AOTI {m['aoti']:.4f} ms: {ratio:.3f}x "
              f"(per round {r['ratio_per_round']['min']:.3f}-{r['ratio_per_round']['max']:.3f}) "
              f"{'PASS' if ratio <= 1.1 else 'over'} (goal <= 1.1)\n"
              f"  eager p50: gradless {m['gradless_eager']:.4f} ms, pytorch {m['eager']:.4f} ms: "
              f"{r['ratio_gradless_eager_vs_pytorch_eager']:.3f}x\n"
              f"  torch.compile: first call {r['torch_compile_first_call_s']:.2f} s (trace + compile), p50 {m['torch_compile']:.4f} ms\n"
              f"  gradless compiled vs its eager: max |diff| {r['gradless_compiled_vs_eager']['max_abs_diff']:.3g}, "
              f"bitwise equal {r['gradless_compiled_vs_eager']['bitwise_equal']}", flush=True)
    print(f"total {time.perf_counter() - start:.1f} s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
