#!/usr/bin/env python3
"""The Python side of Gradless's per-call-overhead cards: the same experiment, timed from Python.

Gradless calls libtorch from Rust, so its timings pay PyTorch's C++ dispatch and the kernels,
and no Python interpreter per op. A team's code is Python: every module call, every op and
every `with` block also runs bytecode. For the cards whose lesson is per-call overhead
(inference-vs-nograd, warm-up, timing-gpu-work, item-per-batch, cuda-graphs), and for
compiled-first-call's torch.compile just-in-time path, the engine runs this file
with the server's Python (`gradless serve --python PATH`, GRADLESS_PYTHON; by default the
venv's) after its own timing, and shows these figures beside its own as "Python: <name>".

The engine passes this module and gradless/models.py on the command line, compiled into the
binary (engine/src/python_package.rs: `python -c PROGRAM REQUEST`), so a server needs no
checkout; by hand: `python python/gradless/card_peer.py '{"card": "warm-up", ...}'`.

The request (one JSON object, argv[1]) is built by the card's experiment from its own plan
(engine/src/pitfalls/python.rs and the card's file): the card, the device ("cpu" or "cuda"),
the threads (torch.set_num_threads, the server's threads for cards), the seed, and each
card's shapes, iterations and rounds. The answer (one JSON object on stdout) holds the raw
latencies of each arm in milliseconds, in the order they were timed; the engine computes
every median, ratio and 95% interval from them with the same code as its own figures, so
the two sides differ only in who calls libtorch:

  {"card": ..., "python": "3.11.7", "torch": "2.11.0", "device": "cpu", "device_name": ...,
   "threads": 2, "samples": {"ARM": [ms, ...], ...}, "notes": [...], "not_applicable": null}

`not_applicable` says why nothing was timed (a CUDA-only experiment on a CPU); a note says why
a part was left out (a model this file does not build, the unsynchronised timer on a CPU).

How each pass is timed, as Gradless's method (docs/measuring.md): the device synchronised
before the first pass; a timed pass is perf_counter() around the call (the grad context
entered inside it, as Gradless enters its guards inside its pass), then
torch.cuda.synchronize() on CUDA, then the clock stops; the previous output is dropped
before the next pass; warm-up passes are never timed. Arms alternate exactly as the card's
experiment alternates them (runs of passes for inference-vs-nograd, pass by pass for
timing-gpu-work, loop by loop for item-per-batch).

The models are gradless.models's, the architectures Gradless builds (tiny MLP, torchvision's
ResNet-18/50 and MobileNetV2, the 4-layer encoder; `python python/gradless/peer.py
--check-builtin` checks them against torchvision). Their weights are random: they do not
change a pass's time, only its values. On CUDA the TF32 switches and
cudnn.benchmark are off, as in Gradless's passes.

Python 3 and PyTorch only.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time

# Kineto and some CUDA builds log to stderr at import; the engine reads stdout only.
os.environ.setdefault("KINETO_LOG_LEVEL", "5")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

# ---- the architectures: gradless/models.py --------------------------------------------------
if __name__ == "__main__" and not __package__:
    # Run as a file (python python/gradless/card_peer.py): the package is the folder above.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from gradless import models  # noqa: E402


class NotBuilt(Exception):
    """A model this file does not build (a decoder, a team's TorchScript module)."""


def build(name: str, size: int, device: torch.device, seed: int) -> nn.Module:
    """The architecture `name` with random weights, in eval(), on the device."""
    if name not in models.MODELS:
        raise NotBuilt(f"{name} is not timed from Python: this peer builds {', '.join(models.MODELS)}")
    torch.manual_seed(seed)
    return models.build(name, size).to(device).eval()


def make_input(name: str, batch: int, size: int, device: torch.device) -> torch.Tensor:
    return torch.randn(models.input_shape(name, batch, size), device=device)


# ---- timing -------------------------------------------------------------------------------------


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def ms_since(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000.0


def forward(model: nn.Module, x: torch.Tensor, grad) -> torch.Tensor:
    with grad():
        return model(x)


def timed_passes(model, x, grad, device, warmup: int, iters: int) -> list[float]:
    """One run, as Gradless's Lab measures one: untimed warm-up passes, then each timed pass
    with the previous output dropped first, synchronised before the clock stops."""
    for _ in range(warmup):
        forward(model, x, grad)
    synchronize(device)
    times, out = [], None
    for _ in range(iters):
        out = None
        t0 = time.perf_counter()
        out = forward(model, x, grad)
        synchronize(device)
        times.append(ms_since(t0))
    del out
    return times


# ---- the cards ----------------------------------------------------------------------------------


def inference_vs_nograd(req: dict, device: torch.device, out: dict) -> None:
    """Each model: `rounds` runs of each mode, alternating (no_grad first), each run
    `warmup` untimed and `iters` timed passes; arms "LABEL no_grad", "LABEL inference_mode"."""
    modes = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode}
    for m in req["models"]:
        try:
            model = build(m["model"], m["size"], device, req["seed"])
        except NotBuilt as e:
            out["notes"].append(str(e))
            continue
        torch.manual_seed(req["seed"])
        x = make_input(m["model"], m["batch"], m["size"], device)
        for _ in range(req["rounds"]):
            for mode, grad in modes.items():
                arm = out["samples"].setdefault(f"{m['label']} {mode}", [])
                arm.extend(timed_passes(model, x, grad, device, m["warmup"], m["iters"]))


def warm_up(req: dict, device: torch.device, out: dict) -> None:
    """A freshly built model's passes on a batch size this process has not run, each timed
    on its own: arm "passes", in order. First, one untimed pass of another model of the
    architecture at `prewarm_batch`: a new Python process's first pass also pays for what a
    long-running server paid once (the thread pool, oneDNN's engine, on CUDA the context and
    the cuBLAS handles), which the card does not ask about and Gradless's worker has paid."""
    name, size = req["model"], req["size"]
    prewarm = build(name, size, device, req["seed"] + 1)
    forward(prewarm, make_input(name, req["prewarm_batch"], size, device), torch.no_grad)
    synchronize(device)
    del prewarm
    if device.type == "cuda":
        torch.cuda.empty_cache()
    model = build(name, size, device, req["seed"])
    x = make_input(name, req["batch"], size, device)
    synchronize(device)
    times = []
    for _ in range(req["passes"]):
        t0 = time.perf_counter()
        y = forward(model, x, torch.no_grad)
        synchronize(device)
        times.append(ms_since(t0))
        del y
    out["samples"]["passes"] = times
    out["notes"].append(
        f"From Python: the process was warmed first by one pass at batch {req['prewarm_batch']} on another {name}; "
        f"then a fresh model timed on batch {req['batch']}."
    )


def timing_gpu_work(req: dict, device: torch.device, out: dict) -> None:
    """`rounds` passes per timer, alternating: arm "naive" stops the clock when model(x)
    returns (CUDA only), arm "synchronised" after torch.cuda.synchronize()."""
    model = build(req["model"], req["size"], device, req["seed"])
    torch.manual_seed(req["seed"])
    x = make_input(req["model"], req["batch"], req["size"], device)
    for _ in range(req["warmup"]):
        forward(model, x, torch.no_grad)
    naive = device.type == "cuda"
    if not naive:
        out["notes"].append("From Python: the timer stopped right after model(x) is not applicable on a CPU, where each op has finished when it returns; only the synchronised timer was run.")
    synchronize(device)
    arms = (["naive"] if naive else []) + ["synchronised"]
    for _ in range(req["rounds"]):
        for arm in arms:
            t0 = time.perf_counter()
            y = forward(model, x, torch.no_grad)
            if arm == "naive":
                ms = ms_since(t0)
                synchronize(device)
            else:
                synchronize(device)
                ms = ms_since(t0)
            del y
            out["samples"].setdefault(arm, []).append(ms)


def item_per_batch(req: dict, device: torch.device, out: dict) -> None:
    """One batch's launches alone ("batch naive", CUDA only) and synchronised ("batch
    synchronised"), 5 alternating passes each; then `rounds` loops of `loop_batches` batches
    of each kind, alternating, each timed whole: arm "item" reads loss.item() every batch,
    arm "accumulate" adds the loss to a tensor on the device and reads it once."""
    name, batch, size = req["model"], req["batch"], req["size"]
    model = build(name, size, device, req["seed"])
    naive = device.type == "cuda"
    x = make_input(name, batch, size, device)
    synchronize(device)
    for _ in range(req["batch_rounds"]):
        for arm in (["batch naive"] if naive else []) + ["batch synchronised"]:
            t0 = time.perf_counter()
            y = forward(model, x, torch.no_grad)
            if arm == "batch naive":
                ms = ms_since(t0)
                synchronize(device)
            else:
                synchronize(device)
                ms = ms_since(t0)
            del y
            out["samples"].setdefault(arm, []).append(ms)
    if not naive:
        out["notes"].append("From Python: a batch's launches alone (no synchronisation) are not applicable on a CPU; only the synchronised batch was timed.")
    batches = [make_input(name, batch, size, device) for _ in range(req["loop_batches"])]

    def run_loop(per_batch_item: bool) -> float:
        host_total = 0.0
        device_total = torch.zeros((), device=device)
        for xb in batches:
            y = forward(model, xb, torch.no_grad)
            loss = y.mean(dtype=torch.float32)
            if per_batch_item:
                host_total += loss.item()
            else:
                device_total += loss
        return host_total + device_total.item()

    run_loop(True)
    run_loop(False)
    synchronize(device)
    for _ in range(req["rounds"]):
        for arm in ("item", "accumulate"):
            t0 = time.perf_counter()
            run_loop(arm == "item")
            synchronize(device)
            out["samples"].setdefault(arm, []).append(ms_since(t0))


def cuda_graphs(req: dict, device: torch.device, out: dict) -> None:
    """Each batch: one run of eager passes under inference_mode (`warmup` untimed, `iters`
    timed), then one of a captured CUDA graph's replays (`warmup` eager passes, the capture
    after a warm-up pass on a side stream, `iters` timed replays, the input already in the
    captured buffer): arms "batch B: eager", "batch B: replay"."""
    if device.type != "cuda":
        out["not_applicable"] = "CUDA graphs record and replay GPU kernel launches; a CPU has no graphs to capture."
        return
    model = build(req["model"], req["size"], device, req["seed"])
    for batch in req["batches"]:
        torch.manual_seed(req["seed"])
        static_x = make_input(req["model"], batch, req["size"], device)
        out["samples"][f"batch {batch}: eager"] = timed_passes(
            model, static_x, torch.inference_mode, device, req["warmup"], req["iters"]
        )
        with torch.inference_mode():
            for _ in range(req["warmup"]):
                model(static_x)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                model(static_x)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_y = model(static_x)
        synchronize(device)
        times = []
        for _ in range(req["iters"]):
            t0 = time.perf_counter()
            graph.replay()
            synchronize(device)
            times.append(ms_since(t0))
        out["samples"][f"batch {batch}: replay"] = times
        del graph, static_y, static_x


def compiled_first_call(req: dict, device: torch.device, out: dict) -> None:
    """torch.compile's just-in-time path on the same model, beside Gradless's package
    compiled ahead of time: the first call of `torch.compile(model)` under no_grad (Dynamo
    traces, Inductor compiles the kernels, with Inductor's on-disk graph cache off so it is
    a first compile, as on a fresh machine), then `iters` passes of the compiled and the
    eager model alternating, then the first call at two more batches (the second batch seen
    recompiles with the batch symbolic; the third reuses it). Arms: "torch.compile: first
    call", "torch.compile: pass", "eager: pass", "torch.compile: first call at batch B"."""
    import torch._dynamo
    import torch._inductor.config

    torch._inductor.config.fx_graph_cache = False
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    model = build(req["model"], req["size"], device, req["seed"])
    compiled = torch.compile(model)
    batch = req["batch"]
    x = make_input(req["model"], batch, req["size"], device)
    synchronize(device)
    with torch.no_grad():
        t0 = time.perf_counter()
        compiled(x)
        synchronize(device)
        out["samples"]["torch.compile: first call"] = [ms_since(t0)]
        eager, jit = [], []
        for _ in range(req["iters"]):
            for arm, fn in ((eager, model), (jit, compiled)):
                t0 = time.perf_counter()
                fn(x)
                synchronize(device)
                arm.append(ms_since(t0))
        out["samples"]["eager: pass"] = eager
        out["samples"]["torch.compile: pass"] = jit
        for b in (batch + 1, batch + 2):
            xb = make_input(req["model"], b, req["size"], device)
            synchronize(device)
            t0 = time.perf_counter()
            compiled(xb)
            synchronize(device)
            out["samples"][f"torch.compile: first call at batch {b}"] = [ms_since(t0)]
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    out["notes"].append(
        f"From Python, torch.compile compiled {graphs} graph(s) over batches {batch}, {batch + 1} and {batch + 2}: "
        "the first call specialises on its batch, the second batch recompiles with the batch symbolic, the third reuses it."
    )


CARDS = {
    "compiled-first-call": compiled_first_call,
    "inference-vs-nograd": inference_vs_nograd,
    "warm-up": warm_up,
    "timing-gpu-work": timing_gpu_work,
    "item-per-batch": item_per_batch,
    "cuda-graphs": cuda_graphs,
}


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__, file=sys.stderr)
        return 2
    req = json.loads(argv[1])
    card = CARDS.get(req["card"])
    if card is None:
        print(f"card_peer: no Python side for `{req['card']}`; known: {', '.join(CARDS)}", file=sys.stderr)
        return 2
    if req["device"] == "cuda" and not torch.cuda.is_available():
        print("card_peer: this Python's PyTorch sees no CUDA device", file=sys.stderr)
        return 2
    device = torch.device("cuda:0" if req["device"] == "cuda" else "cpu")
    torch.set_num_threads(int(req["threads"]))
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = False
    out = {
        "card": req["card"],
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": device.type,
        "device_name": device_name(device),
        "threads": torch.get_num_threads(),
        "samples": {},
        "notes": [],
        "not_applicable": None,
    }
    try:
        card(req, device, out)
    except NotBuilt as e:
        out["notes"].append(str(e))
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
