#!/usr/bin/env python3
"""The PyTorch peer of `gradless measure`: the same measurement, written in plain Python.

This module owns the Python side of the side-by-side benchmark (bench/compare.py runs it)
and the script a recorded run exports (server/src/export.rs: this file with the
architectures, gradless/models.py, in place of their import).
It takes the same flags as `gradless measure` and prints the same JSON keys where they
apply, so that a reader can check Gradless's numbers against what PyTorch itself reports.

The method mirrors engine/src/lab.rs step by step:

  1. torch.manual_seed(0); build the model (random weights) and put it on the device;
     model.train() or model.eval().
     Without torchvision, the image models come from gradless.models's line-for-line
     copies of torchvision's architectures (checked with --check-builtin).
  2. torch.manual_seed(0); the input is torch.randn(shape) on the device (a team model's
     inputs as its sidecar describes each: randn, randint(0, high) for ids, or full(fill)
     for a mask; several inputs are a tuple passed as model(*x), and each setting applies
     to each of them as Gradless applies it).
  0. On CUDA, before anything else: the first matmuls Gradless's worker makes at start-up
     (a matmul and an addmm with a bias, in fp32, fp16 and bf16), so that cuBLAS's and
     cuBLASLt's workspaces, which they keep for the life of the process, exist before the
     baseline; what is allocated then (the workspaces) is "other held" memory.
  3. torch.set_num_threads(threads); synchronise; baseline = the weights and the input
     (allocated bytes minus what was held before the model was built); reset peaks. Every
     CUDA figure leaves out the memory held before the model was built, as Gradless's do.
  4. Warm-up iterations, timed and reported apart, never in the statistics.
  5. Reset peaks. Each timed iteration drops the previous output first, then
     t0 = perf_counter(); out = model(x) inside the grad context and, within it, autocast;
     synchronise (CUDA); latency. The output stays alive until the next iteration.
  6. Statistics: mean, p50/p95/p99 (numpy's default linear interpolation), min, max,
     sample stddev; throughput = batch * 1000 / mean_ms.

Memory. On CUDA the caching allocator's statistics are read during the timed loop
(torch.cuda.memory_allocated / max_memory_allocated / max_memory_reserved, after
torch.cuda.reset_peak_memory_stats()), exactly as Gradless reads them.

On the CPU PyTorch has no allocation counter in Python. Gradless counts CPU tensor memory
with a c10::MemoryReportingInfoBase installed in the thread-local debug info, which is the
very mechanism behind the profiler's `profile_memory`. So the peer runs the timed loop a
second time (same iteration count) under
`torch.profiler.profile(activities=[ProfilerActivity.CPU], profile_memory=True)` and reads
the "[memory]" events from `prof.profiler.kineto_results.events()` (each has `nbytes()`,
positive for an allocation and negative for a free, and `start_ns()`). Sorted by time and
summed, their running total starting at 0 at the loop start is the memory above the
baseline; its maximum is the peak above baseline. The profiled pass is separate from the
latency pass, so profiler overhead never touches the timings. The CPU baseline is the
bytes of the distinct storages of the model's parameters and buffers and of the input:
what Gradless's counter holds at that point for a freshly built model.

Run `python python/gradless/peer.py --self-test` to check the CPU memory method on known tensors, and
`python python/gradless/peer.py --check-builtin` to check the built-in image models against torchvision.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import math
import os
from pathlib import Path
import platform
import sys
import time

# Kineto logs an error when a CUDA build of torch profiles on a machine without a GPU;
# it changes nothing, so keep stderr readable. Must be set before torch is imported.
os.environ.setdefault("KINETO_LOG_LEVEL", "5")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

# ---- the architectures: gradless/models.py (an exported script carries its text here) ----
if __name__ == "__main__" and not __package__:
    # Run as a file (python python/gradless/peer.py): the package is the folder above.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gradless.models import (  # noqa: E402
    BUILTIN_IMAGE_MODELS,
    CLASSES,
    IMAGE_MODELS,
    INPUT_SIZES,
    MODELS,
    WEIGHT_DTYPES,
    build,
    input_shape,
)
# ---- end of the architectures ----

GRAD_MODES = ("enabled", "no_grad", "inference_mode")
AUTOCASTS = ("off", "fp16", "bf16")
WEIGHTS = ("fp32", "fp16", "bf16")
MEMORY_FORMATS = ("contiguous", "channels_last")
INPUT_SOURCES = ("device", "pageable", "pinned")
SEED = 0


def team_sidecar(models_dir: str | None, name: str) -> dict | None:
    """The sidecar of team model `name` (NAME.json beside NAME.pt in --models-dir), or None
    for a built-in model."""
    if name in MODELS:
        return None
    if not models_dir:
        raise SystemExit(f"error: unknown model `{name}`; known: {', '.join(MODELS)} (team models need --models-dir)")
    path = Path(models_dir) / f"{name}.json"
    if not (Path(models_dir) / f"{name}.pt").exists() or not path.exists():
        raise SystemExit(f"error: {models_dir} holds no team model `{name}` ({name}.pt and {name}.json)")
    return json.loads(path.read_text())


def team_input(sidecar: dict, batch: int, size: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """A team model's inputs, in the forward's order, as its sidecar describes each (the
    same tensors as engine/src/team/mod.rs's `input`): random normal, integers in 0..high
    (token ids), or `fill` in every element (an attention mask)."""
    xs = []
    for spec in sidecar["inputs"]:
        shape = [batch if d == "batch" else size if d == "size" else d for d in spec["shape"]]
        dtype = getattr(torch, spec.get("dtype", "float32"))
        if "high" in spec:
            xs.append(torch.randint(0, spec["high"], shape, dtype=dtype, device=device))
        elif "fill" in spec:
            fill = spec["fill"] if dtype.is_floating_point else int(spec["fill"])
            xs.append(torch.full(shape, fill, dtype=dtype, device=device))
        else:
            xs.append(torch.randn(shape, dtype=dtype, device=device))
    return tuple(xs)


def build_model(name: str, input_size: int, builtin: bool = False, models_dir: str | None = None) -> tuple[nn.Module, str]:
    """The architecture `name` with random weights, on the CPU, and where it came from; a
    team model is the same TorchScript file Gradless loads."""
    if name not in MODELS:
        path = Path(models_dir) / f"{name}.pt"
        return torch.jit.load(str(path), map_location="cpu"), f"torch.jit.load({path})"
    if not builtin and name in IMAGE_MODELS:
        try:
            import torchvision  # only the image models need it
        except ImportError:
            pass
        else:
            return getattr(torchvision.models, name)(num_classes=CLASSES), f"torchvision {torchvision.__version__}"
    if name in IMAGE_MODELS:
        return build(name, input_size), "gradless.models (torchvision's architecture; torchvision not used)"
    return build(name, input_size), "gradless.models"


def check_builtin() -> int:
    """Checks the built-in image models against torchvision: same state_dict, same output,
    same CPU memory peak with and without grad."""
    import torchvision
    from torch.profiler import ProfilerActivity, profile

    def peak(model: nn.Module, x: torch.Tensor, grad: str) -> int:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True, acc_events=True) as prof:
            out = forward(model, (x,), grad, "off", x.device)
            del out
        return running_peak(cpu_memory_trace(prof)[0])[0]

    failures = 0
    for name, make in BUILTIN_IMAGE_MODELS.items():
        ref = getattr(torchvision.models, name)(num_classes=CLASSES).eval()
        ours = make().eval()
        ours.load_state_dict(ref.state_dict(), strict=True)
        x = torch.randn(2, 3, 64, 64)
        with torch.no_grad():
            same = torch.equal(ref(x), ours(x))
        peaks = {g: (peak(ref, x, g), peak(ours, x, g)) for g in ("no_grad", "enabled")}
        same_memory = all(a == b for a, b in peaks.values())
        count = sum(p.numel() for p in ours.parameters())
        print(
            f"{name}: {count:,} parameters, state_dict matches, outputs {'identical' if same else 'DIFFER'}, "
            f"peaks (torchvision, built-in) {peaks} {'identical' if same_memory else 'DIFFER'}"
        )
        failures += not (same and same_memory)
    return 1 if failures else 0


# ---- statistics -----------------------------------------------------------------------------


def percentile(sorted_xs: list[float], q: float) -> float:
    """numpy.percentile's default (linear interpolation between closest ranks)."""
    rank = (q / 100.0) * (len(sorted_xs) - 1)
    lo, hi = math.floor(rank), math.ceil(rank)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (rank - lo)


def latency_stats(latencies_ms: list[float]) -> dict:
    """Same summary as engine/src/stats.rs latency_stats."""
    xs = sorted(latencies_ms)
    n = len(xs)
    mean = sum(xs) / n
    stddev = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1)) if n > 1 else 0.0
    return {
        "mean": mean,
        "p50": percentile(xs, 50.0),
        "p95": percentile(xs, 95.0),
        "p99": percentile(xs, 99.0),
        "min": xs[0],
        "max": xs[-1],
        "stddev": stddev,
    }


# ---- CPU memory from the profiler -------------------------------------------------------------

MEMORY_EVENT = "[memory]"
ITERATION_MARK = "gradless_peer_iteration_"


def cpu_memory_trace(prof) -> tuple[list[tuple[int, int]], dict[int, int]]:
    """CPU memory deltas from a finished `profile_memory=True` profile, in time order.

    Returns ([(start_ns, nbytes), ...], {iteration: end_ns of its marker}). The kineto
    result list (torch >= 2.0; checked on 2.11) holds every "[memory]" event, including
    frees outside any op, which `prof.events()` attributes to ops and partly drops.
    """
    deltas = []
    marks = {}
    for e in prof.profiler.kineto_results.events():
        name = e.name()
        if name == MEMORY_EVENT:
            if e.device_type() == torch.autograd.DeviceType.CPU:
                deltas.append((e.start_ns(), e.nbytes()))
        elif name.startswith(ITERATION_MARK):
            marks[int(name[len(ITERATION_MARK):])] = e.end_ns()
    deltas.sort(key=lambda d: d[0])  # stable: simultaneous events keep their order
    return deltas, marks


def running_peak(deltas: list[tuple[int, int]]) -> tuple[int, int]:
    """(peak, final) of the running sum of deltas, starting from 0."""
    total = peak = 0
    for _, nbytes in deltas:
        total += nbytes
        peak = max(peak, total)
    return peak, total


def allocated_at(deltas: list[tuple[int, int]], t_ns: int) -> int:
    """Running sum of the deltas up to and including time t_ns."""
    return sum(n for t, n in deltas if t <= t_ns)


def storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind `tensors` (shared storages count once)."""
    seen = {}
    for t in tensors:
        if t.device.type == "cpu":
            s = t.untyped_storage()
            seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


# ---- measurement ------------------------------------------------------------------------------


def grad_context(grad: str):
    if grad == "no_grad":
        return torch.no_grad()
    if grad == "inference_mode":
        return torch.inference_mode()
    return contextlib.nullcontext()


def autocast_context(autocast: str, device: torch.device):
    if autocast == "off":
        return contextlib.nullcontext()
    dtype = torch.float16 if autocast == "fp16" else torch.bfloat16
    return torch.autocast(device_type=device.type, dtype=dtype)


def place(xs: tuple[torch.Tensor, ...], source: str, device: torch.device) -> tuple[torch.Tensor, ...]:
    """The inputs as the pass receives them: themselves when they are already on the
    device, else a fresh copy of each to the device (non_blocking from pinned memory),
    inside the timed pass."""
    if source == "device":
        return xs
    return tuple(x.to(device, non_blocking=source == "pinned", copy=True) for x in xs)


def forward(model: nn.Module, xs: tuple[torch.Tensor, ...], grad: str, autocast: str, device: torch.device,
            source: str = "device") -> torch.Tensor:
    """One forward pass on the inputs `xs` (one tensor for a built-in model): grad context
    outside, autocast inside, entered per iteration; inputs in host memory are copied to
    the device first, inside both."""
    with grad_context(grad):
        with autocast_context(autocast, device):
            return model(*place(xs, source, device))


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# tch's names for dtypes, so `output.dtype` reads the same on both sides.
TCH_KIND = {
    torch.float32: "Float",
    torch.float16: "Half",
    torch.bfloat16: "BFloat16",
    torch.float64: "Double",
}


def cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def env_stamp(device: torch.device, threads: int) -> dict:
    cuda = device.type == "cuda"
    stamp = {
        "device": device.type,
        "device_name": torch.cuda.get_device_name(device) if cuda else cpu_model_name(),
        "device_total_memory_bytes": torch.cuda.get_device_properties(device).total_memory if cuda else None,
        "cuda_version": torch.version.cuda if cuda else None,
        "cudnn_version": None,
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "cpu_model": cpu_model_name(),
        "threads": threads,
        "measured_at": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "peer": "pytorch",
    }
    if cuda and torch.backends.cudnn.is_available():
        v = torch.backends.cudnn.version()
        stamp["cudnn_version"] = f"{v // 10000}.{(v % 10000) // 100}.{v % 100}" if v else None
    return stamp


def prime_cuda_libraries(device: torch.device) -> None:
    """The first matmuls Gradless's worker makes at start-up (engine/src/lab.rs,
    prime_cuda_libraries): cuBLAS and cuBLASLt allocate their per-stream workspaces through
    the caching allocator at their first use and keep them, so priming them here keeps them
    out of the run's figures, as in Gradless. A dtype the GPU cannot multiply is skipped."""
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        try:
            a = torch.ones(64, 64, dtype=dtype, device=device)
            bias = torch.ones(64, dtype=dtype, device=device)
            a.matmul(a)
            torch.addmm(bias, a, a)
        except RuntimeError as e:
            print(f"note: could not prime CUDA matmuls in {dtype}: {e}", file=sys.stderr)
    torch.cuda.synchronize(device)


def measure(args: argparse.Namespace) -> dict:
    """Measures one run as Gradless does and returns its report."""
    if args.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("error: device: this machine has no CUDA device; use cpu or auto")
        device = torch.device("cuda", 0)
        torch.cuda.set_device(device)
    sidecar = team_sidecar(args.models_dir, args.model)
    if sidecar is None:
        size = args.input_size or INPUT_SIZES[args.model][0]
    else:
        size = args.input_size or sidecar.get("size", {}).get("default", 0)
    threads = args.threads or max(1, (os.cpu_count() or 2) // 2)
    torch.set_num_threads(threads)
    cuda = device.type == "cuda"
    # Held before the model exists (on CUDA: the primed libraries' workspaces); left out of
    # every figure, as Gradless leaves out what its worker holds besides the run.
    other_held = 0
    if cuda:
        prime_cuda_libraries(device)
        other_held = torch.cuda.memory_allocated(device)

    if cuda:
        # The CUDA math switches, as Gradless sets them for a run: TF32 both on or both off.
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
        torch.backends.cudnn.allow_tf32 = args.tf32
        torch.backends.cudnn.benchmark = args.cudnn_benchmark

    torch.manual_seed(SEED)
    model, model_source = build_model(args.model, size, args.builtin_models, args.models_dir)
    model = model.to(device)
    if args.weights != "fp32":
        model = model.to(WEIGHT_DTYPES[args.weights])  # model.half() / model.to(torch.bfloat16)
    if args.memory_format == "channels_last":
        model = model.to(memory_format=torch.channels_last)
    model.train(not args.eval)
    parameters = sum(p.numel() for p in model.parameters())
    torch.manual_seed(SEED)
    home = device if args.input_source == "device" else torch.device("cpu")
    if sidecar is None:
        x = (torch.randn(input_shape(args.model, args.batch, size), device=home),)
    else:
        x = team_input(sidecar, args.batch, size, home)
    if args.weights != "fp32":
        # As model.half() treats buffers: only floating-point inputs are cast (ids and masks
        # keep their dtype).
        x = tuple(t.to(WEIGHT_DTYPES[args.weights]) if t.is_floating_point() else t for t in x)
    if args.memory_format == "channels_last":
        x = tuple(t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t for t in x)
    if args.input_source == "pinned":
        x = tuple(t.pin_memory() for t in x)

    def allocated() -> int | None:
        return torch.cuda.memory_allocated(device) - other_held if cuda else None

    def reserved() -> int | None:
        return torch.cuda.memory_reserved(device) if cuda else None

    graph = static_out = None

    def timed(i: int) -> tuple[dict, torch.Tensor]:
        """One forward pass (or the captured graph's replay), timed; memory is read after
        the clock stops."""
        t0 = time.perf_counter()
        if graph is not None:
            graph.replay()  # static_out holds the result
            out = static_out
        else:
            out = forward(model, x, args.grad, args.autocast, device, args.input_source)
        synchronize(device)
        latency_ms = (time.perf_counter() - t0) * 1000.0
        sample = {"iteration": i, "latency_ms": latency_ms, "allocated_bytes": allocated(), "reserved_bytes": reserved()}
        return sample, out

    synchronize(device)
    if cuda:
        baseline = torch.cuda.memory_allocated(device) - other_held
        torch.cuda.reset_peak_memory_stats(device)
    else:
        baseline = storage_bytes(list(model.parameters()) + list(model.buffers()) + list(x))

    warmup = []
    for i in range(args.warmup):
        sample, out = timed(i)
        del out
        warmup.append(sample)

    if args.cuda_graph:
        # As Gradless does: one pass on a side stream (lazy initialisation outside the
        # capture), then one captured pass; every timed iteration replays it.
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            forward(model, x, args.grad, args.autocast, device, args.input_source)
        torch.cuda.current_stream(device).wait_stream(side)
        with torch.cuda.graph(graph):
            static_out = forward(model, x, args.grad, args.autocast, device, args.input_source)

    # Peaks count from here: the statistics describe the steady state only.
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    samples = []
    out = None
    for i in range(args.iters):
        # The previous output (and its graph) goes before the next pass, or the peak
        # would count two iterations at once.
        out = None
        sample, out = timed(i)
        samples.append(sample)
    output = {
        "dtype": TCH_KIND.get(out.dtype, str(out.dtype).removeprefix("torch.")),
        "torch_dtype": str(out.dtype),
        "shape": list(out.shape),
        "is_inference": out.is_inference(),
        "requires_grad": out.requires_grad,
    }

    if cuda:
        peak_allocated = torch.cuda.max_memory_allocated(device) - other_held
        peak_reserved = torch.cuda.max_memory_reserved(device)
        out = graph = static_out = None  # the graph's pool goes back to the allocator
        synchronize(device)
        after_release = torch.cuda.memory_allocated(device) - other_held
        free, total = torch.cuda.mem_get_info(device)
        device_used = total - free
    else:
        out = None
        peak_above, after_above, per_iter = profile_cpu_memory(model, x, args)
        peak_allocated = baseline + peak_above
        peak_reserved = None
        after_release = baseline + after_above
        device_used = None
        for s, above in zip(samples, per_iter):
            s["allocated_bytes"] = None if above is None else baseline + above

    latency = latency_stats([s["latency_ms"] for s in samples])
    return {
        "spec": {
            "model": args.model,
            "device": device.type,
            "batch": args.batch,
            "input_size": size,
            "eval": args.eval,
            "grad": args.grad,
            "autocast": args.autocast,
            "warmup": args.warmup,
            "iters": args.iters,
            "threads": args.threads,
            "weights": args.weights,
            "memory_format": args.memory_format,
            "input_source": args.input_source,
            "tf32": args.tf32,
            "cudnn_benchmark": args.cudnn_benchmark,
            "cuda_graph": args.cuda_graph,
        },
        "env": {**env_stamp(device, torch.get_num_threads()), "model_source": model_source},
        "parameters": parameters,
        "latency_ms": latency,
        "throughput_per_s": args.batch * 1000.0 / latency["mean"] if latency["mean"] > 0 else 0.0,
        "memory": {
            "source": "cuda_caching_allocator" if cuda else "cpu_tensor_memory",
            "method": "torch.cuda memory statistics"
            if cuda
            else "profiler [memory] events in a separate pass; baseline = storages of weights, buffers and input",
            "baseline_bytes": baseline,
            "peak_allocated_bytes": peak_allocated,
            "peak_above_baseline_bytes": max(0, peak_allocated - baseline),
            "peak_reserved_bytes": peak_reserved,
            "after_release_bytes": after_release,
            "leaked_bytes": max(0, after_release - baseline),
            "device_used_bytes": device_used,
            "other_held_bytes": other_held,
        },
        "output": output,
        "warmup": warmup,
        "samples": samples,
    }


def profile_cpu_memory(model: nn.Module, x: tuple[torch.Tensor, ...], args: argparse.Namespace) -> tuple[int, int, list[int]]:
    """Runs the timed loop again under the memory profiler (see the module docs).

    Returns (peak above the loop start, bytes above it after the last output is dropped,
    bytes above it at the end of each iteration with its output alive). Must start with no
    output alive, i.e. at the baseline.
    """
    from torch.profiler import ProfilerActivity, profile, record_function

    device = torch.device("cpu")
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, acc_events=True) as prof:
        out = None
        for i in range(args.iters):
            out = None
            with record_function(f"{ITERATION_MARK}{i}"):
                out = forward(model, x, args.grad, args.autocast, device, args.input_source)
        out = None
    deltas, marks = cpu_memory_trace(prof)
    peak, final = running_peak(deltas)
    per_iter = [allocated_at(deltas, marks[i]) if i in marks else None for i in range(args.iters)]
    return peak, final, per_iter


def self_test() -> int:
    """Checks the CPU memory method on allocations of known size. Exit status 0 when sane."""
    from torch.profiler import ProfilerActivity, profile

    mib = 1024 * 1024
    keep = torch.zeros(16)  # alive before and after: never counted
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, acc_events=True) as prof:
        a = torch.empty(mib, dtype=torch.uint8).fill_(1)  # 1 MiB
        b = torch.empty(4 * mib, dtype=torch.uint8).fill_(1)  # 4 MiB, peak 5 MiB
        del a
        c = torch.empty(2 * mib, dtype=torch.uint8).fill_(1)  # 6 MiB, below the peak
        del b, c
        d = torch.empty(mib, dtype=torch.uint8)  # 1 MiB still alive at the end
    deltas, _ = cpu_memory_trace(prof)
    peak, final = running_peak(deltas)
    ok = peak == 6 * mib and final == mib
    print(f"profiler memory: {len(deltas)} events, peak {peak} B (expect {6 * mib}), final {final} B (expect {mib})")
    del d, keep
    return 0 if ok else 1


# ---- command line ---------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Measure one PyTorch inference setting the way `gradless measure` does.",
    )
    p.add_argument("--model", default="tiny_mlp",
                   help=f"{', '.join(MODELS)}, or a team model of --models-dir")
    p.add_argument("--models-dir", default=os.environ.get("GRADLESS_MODELS_DIR"),
                   help="the directory of team models (NAME.pt + NAME.json), as `gradless --models-dir`")
    p.add_argument("--batch", type=int, default=32)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--eval", dest="eval", action="store_true", default=True, help="model.eval() (default)")
    mode.add_argument("--train", dest="eval", action="store_false", help="model.train()")
    p.add_argument("--grad", choices=GRAD_MODES, default="enabled")
    p.add_argument("--autocast", choices=AUTOCASTS, default="off")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--threads", type=int, default=None, help="intra-op threads (default: half the CPUs)")
    p.add_argument("--input-size", type=int, default=None, help="model-specific sample size")
    p.add_argument("--dtype", "--weights", dest="weights", choices=WEIGHTS, default="fp32",
                   help="weights dtype: cast once with model.half() / .to(torch.bfloat16) (--weights: its old name)")
    p.add_argument("--memory-format", choices=MEMORY_FORMATS, default="contiguous")
    p.add_argument("--input-source", choices=INPUT_SOURCES, default="device",
                   help="where the input starts each iteration; a host input is copied inside the timing")
    p.add_argument("--tf32", action="store_true", help="CUDA: TF32 on for matmuls and cuDNN")
    p.add_argument("--cudnn-benchmark", action="store_true", help="CUDA: torch.backends.cudnn.benchmark = True")
    p.add_argument("--cuda-graph", action="store_true",
                   help="CUDA: capture one pass after the warm-up and replay it in every timed iteration")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--builtin-models", action="store_true",
                   help="use this file's copies of torchvision's image models even if torchvision is there")
    p.add_argument("--self-test", action="store_true", help="check the CPU memory method and exit")
    p.add_argument("--check-builtin", action="store_true",
                   help="check the built-in image models against torchvision and exit")
    args = p.parse_args(argv)
    if args.self_test or args.check_builtin:
        return args
    if args.batch < 1:
        p.error("batch must be at least 1")
    if args.iters < 1:
        p.error("at least one timed iteration is needed")
    if args.warmup < 0:
        p.error("warmup cannot be negative")
    if args.threads is not None and args.threads < 1:
        p.error("threads must be at least 1")
    if args.memory_format == "channels_last" and args.model not in IMAGE_MODELS:
        p.error(f"channels_last needs a convolution model; {args.model} has none")
    if args.device == "cpu" and (args.tf32 or args.cudnn_benchmark or args.input_source == "pinned"):
        p.error("tf32, cudnn-benchmark and a pinned input source are CUDA settings")
    if args.cuda_graph and args.device == "cpu":
        p.error("cuda-graph is a CUDA setting: a CPU executes ops directly")
    if args.cuda_graph and args.grad == "enabled":
        p.error("cuda-graph captures an inference pass: use --grad no_grad or inference_mode")
    if args.cuda_graph and args.input_source != "device":
        p.error("cuda-graph replays fixed device buffers: the input must start on the device")
    if args.model not in MODELS:
        sidecar = team_sidecar(args.models_dir, args.model)
        size = sidecar.get("size")
        if args.input_size is not None and size is None:
            p.error(f"{args.model} has a fixed input shape: leave --input-size out")
        if args.input_size is not None and not size.get("min", 1) <= args.input_size <= size["max"]:
            p.error(f"input_size {args.input_size} is out of range for {args.model}: allowed {size.get('min', 1)}..={size['max']}")
    elif args.input_size is not None:
        lo = 32 if args.model in IMAGE_MODELS else 1
        hi = INPUT_SIZES[args.model][1]
        if not lo <= args.input_size <= hi:
            p.error(f"input_size {args.input_size} is out of range for {args.model}: allowed {lo}..={hi}")
    return args


def format_bytes(n: int | None) -> str:
    """Binary units, like protocol::format_bytes."""
    if n is None:
        return "-"
    value, unit = float(n), 0
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    while value >= 1024.0 and unit + 1 < len(units):
        value /= 1024.0
        unit += 1
    return f"{n} B" if unit == 0 else f"{value:.1f} {units[unit]}"


def settings_label(s: dict) -> str:
    return " · ".join(
        [("eval" if s["eval"] else "train"), s["grad"]]
        + ([s["autocast"]] if s["autocast"] != "off" else [])
        + ([f"{s['weights']} weights"] if s["weights"] != "fp32" else [])
        + (["channels_last"] if s["memory_format"] != "contiguous" else [])
        + ([f"input from {s['input_source']} memory"] if s["input_source"] != "device" else [])
        + (["CUDA graph"] if s.get("cuda_graph") else [])
        + [f"batch {s['batch']}"]
    )


def cpu_autocast_caveat(r: dict) -> str | None:
    """The caveat Gradless carries with such figures: CPU fp16/bf16 is often emulated."""
    s = r["spec"]
    if s["autocast"] != "off" and r["env"]["device"] == "cpu":
        return (f"{s['autocast']} autocast ran on a CPU: without native low-precision units it is "
                "emulated and usually slower than fp32; its latency says nothing about a GPU.")
    return None


# The measured rows of the table, each read the same way from this run's report and from
# the recorded one (an exported script passes Gradless's report, which has these fields).
MEASURED_ROWS = [
    ("latency p50", lambda r: f"{r['latency_ms']['p50']:.3f} ms"),
    ("latency mean", lambda r: f"{r['latency_ms']['mean']:.3f} ms ± {r['latency_ms']['stddev']:.3f}"),
    ("latency p95/p99", lambda r: f"{r['latency_ms']['p95']:.3f} / {r['latency_ms']['p99']:.3f} ms"),
    ("latency min/max", lambda r: f"{r['latency_ms']['min']:.3f} / {r['latency_ms']['max']:.3f} ms"),
    ("throughput", lambda r: f"{r['throughput_per_s']:.1f} samples/s"),
    ("memory source", lambda r: r["memory"]["source"]),
    ("baseline", lambda r: format_bytes(r["memory"]["baseline_bytes"])),
    ("peak above baseline", lambda r: format_bytes(r["memory"]["peak_above_baseline_bytes"])),
    ("peak reserved", lambda r: format_bytes(r["memory"]["peak_reserved_bytes"])),
    ("leaked", lambda r: format_bytes(r["memory"]["leaked_bytes"])),
]


def print_table(r: dict, recorded: dict | None = None) -> None:
    """The report as a table; with `recorded` (an exported script's recorded run), the
    recorded figures in a column beside this machine's."""
    s, out = r["spec"], r["output"]
    rows = [
        ("model", f"{s['model']} ({r['parameters']:,} parameters), input size {s['input_size']}", None),
        ("built by", r["env"]["model_source"], None),
        ("settings", settings_label(s), recorded and recorded["settings"]),
        ("device", f"{r['env']['device']}: {r['env']['device_name']}, threads: {r['env']['threads']}",
         recorded and recorded["device"]),
        ("torch", r["env"]["torch_version"], recorded and recorded["torch"]),
    ]
    rows += [(k, f(r), recorded and f(recorded)) for k, f in MEASURED_ROWS]
    rows.append(("output", f"{out['torch_dtype']} {out['shape']}, requires_grad={out['requires_grad']}, "
                           f"is_inference={out['is_inference']}", None))
    if recorded:
        rows.insert(0, ("", "this machine", f"recorded by Gradless (run {recorded['run_id']})"))
        rows.insert(1, ("measured at", "now", recorded["measured_at"]))
    width = max(len(k) for k, _, _ in rows)
    col = max(len(v) for _, v, _ in rows)
    for k, v, rec in rows:
        print(f"{k:<{width}}  {v:<{col}}  {rec or ''}".rstrip())
    for label, caveat in (("this machine", cpu_autocast_caveat(r)), ("recorded", recorded and recorded.get("caveat"))):
        if caveat:
            print(f"caveat ({label}): {caveat}")


def main(argv: list[str] | None = None, recorded: dict | None = None) -> int:
    """Measures and prints; `recorded` (from an exported script) is printed beside the
    new figures, or added to the JSON as `recorded`."""
    args = parse_args(argv)
    if args.self_test:
        return self_test()
    if args.check_builtin:
        return check_builtin()
    report = measure(args)
    if args.json:
        if recorded:
            report["recorded"] = recorded
        json.dump(report, sys.stdout)
        sys.stdout.write("\n")
    else:
        print_table(report, recorded)
    return 0


if __name__ == "__main__":
    sys.exit(main())
