#!/usr/bin/env python3
"""Compiles one of Gradless's built-in forward models ahead of time with AOTInductor.

The engine runs this in a subprocess, with the venv's python, from the sources compiled into
it (engine/src/python_package.rs). It builds the architecture in PyTorch from gradless.models
(the same architectures Gradless builds with tch), loads Gradless's own weights into it (its
VarStore saved as safetensors: Gradless's variable names are the module's state_dict names),
exports it with a dynamic batch dimension and packages it with
torch._inductor.aoti_compile_and_package.

    python python/gradless/aoti_compile.py --model NAME --input-size N
        --weights W.safetensors --batch-min 1 --batch-max B --threads T
        --device cpu|cuda --dtype fp32|fp16|bf16 --out PACKAGE.pt2 [--eval|--train]
        [--check-eager] [--map-only]

A team model (a TorchScript NAME.pt with its NAME.json sidecar, docs/operating.md "Team
models") is compiled from the sidecar's "source" instead: the module is built from the
Python file's class or function (FILE.py:NAME, called with no arguments) or torchvision's
constructor (torchvision:NAME), filled with the TorchScript file's state_dict (every tensor
by name and shape, or exit 2), and exported on the sidecar's inputs, one dynamic batch
dimension shared by all of them:

    python aoti_compile.py --team-source FILE.py:NAME|torchvision:NAME --team-name NAME
        --team-weights NAME.pt --team-inputs '[{"shape": ["batch", "size"], ...}, ...]'
        [--input-size N] --batch-min 1 --batch-max B --threads T --device cpu|cuda
        --dtype fp32|fp16|bf16 --out PACKAGE.pt2 [--eval|--train] [--check-eager] [--map-only]

--team-inputs is the sidecar's `inputs` list; --input-size is the value of "size" (needed
when a shape uses it). --check-eager compares with the TorchScript module itself.

Prints one line of JSON on stdout and nothing else there:
  {"export_s", "compile_s" (Inductor and the C++ build), "build_s" (the C++ build within it),
   "package_bytes", "torch_version", "inputs": [[null, ...], ...]
   (each input's shape, null for the batch), "weights_mapped" (tensors loaded)}
  (+ "max_abs_diff", "bitwise_equal" with --check-eager: the package against the eager
  module at batch B); --map-only stops after loading: {"weights_mapped"}.
Everything else (warnings, Inductor's logs, the C++ compiler's) goes to stderr, with a line
`gradless-phase: export|inductor|c++ build` as each part begins (the page shows it). Failures:
a one-line reason on stderr and exit 2 (bad arguments or weights), 3 (export), 4 (compile
or loading the package).
"""

from __future__ import annotations

import os

# Before torch loads: a persistent Inductor cache makes a second compile of the same graph
# much faster (the engine sets its own), and Kineto's harmless CUDA warning stays quiet.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.expanduser("~/.cache/gradless/inductor"))
os.environ.setdefault("KINETO_LOG_LEVEL", "5")

import argparse
import importlib.util
import json
import sys
import time

import torch
from safetensors.torch import load_file
from torch.export import Dim

if __name__ == "__main__" and not __package__:
    # Run as a file (python python/gradless/aoti_compile.py): the package is the folder above.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from gradless import models  # noqa: E402


DTYPES = ("fp32", "fp16", "bf16")


def phase(name: str) -> None:
    """Says on stderr which part of the work begins (`gradless-phase: export`): the engine
    passes it on to the page while the compile runs (engine/src/lab/subprocess.rs)."""
    print(f"gradless-phase: {name}", file=sys.stderr, flush=True)


def fail(code: int, reason: str) -> None:
    print(f"aoti_compile: {reason}", file=sys.stderr, flush=True)
    sys.exit(code)


def first_line(e: Exception) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"


def build_and_load(model: str, input_size: int, weights: str):
    """gradless.models's `model` holding Gradless's weights; returns (module, tensors loaded).
    Gradless's variable names are the module's state_dict names (engine/src/models/ names its
    variables as torchvision and gradless.models name their modules): every tensor must have
    its place and its shape, and every place a tensor."""
    module = models.build(model, input_size)
    try:
        tensors = load_file(weights)
    except Exception as e:  # noqa: BLE001 - an unreadable file is the caller's input error
        fail(2, f"cannot read weights {weights}: {first_line(e)}")
    expected = {k: v for k, v in module.state_dict().items() if not k.endswith("num_batches_tracked")}
    for name, t in tensors.items():
        if name not in expected:
            fail(2, f"Gradless tensor `{name}` has no place in {model}")
        if tuple(t.shape) != tuple(expected[name].shape):
            fail(2, f"Gradless tensor `{name}` has shape {list(t.shape)}, {model}'s needs {list(expected[name].shape)}")
    missing = sorted(set(expected) - set(tensors))
    if missing:
        fail(2, f"{weights} fills not every tensor of {model}: {len(missing)} missing, first `{missing[0]}`")
    # strict=False only for num_batches_tracked, which tch does not keep; everything else
    # was checked above. load_state_dict copies (and casts to the module's dtype).
    module.load_state_dict(tensors, strict=False)
    return module, len(tensors)


def parse_args(argv: list[str] | None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.error = lambda message: fail(2, message)  # one line, not argparse's usage block
    # Required ones are checked below: which depends on the mode.
    p.add_argument("--model", choices=models.MODELS)
    p.add_argument("--input-size", type=int)
    p.add_argument("--weights", help="Gradless's VarStore as .safetensors")
    p.add_argument("--team-source", help="a team model's FILE.py:NAME or torchvision:NAME (instead of --model, --weights)")
    p.add_argument("--team-name", help="the team model's name (for the package's metadata)")
    p.add_argument("--team-weights", help="the team model's TorchScript file, whose state_dict fills the module")
    p.add_argument("--team-inputs", help="the sidecar's `inputs` list, as JSON")
    p.add_argument("--batch-min", type=int, default=1)
    p.add_argument("--batch-max", type=int)
    p.add_argument("--threads", type=int)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--dtype", choices=DTYPES, default="fp32")
    p.add_argument("--out", help="the package to write (.pt2)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--eval", dest="eval", action="store_true", default=True)
    mode.add_argument("--train", dest="eval", action="store_false")
    p.add_argument("--check-eager", action="store_true", help="compare the package with eager at --batch-max")
    p.add_argument("--map-only", action="store_true", help="stop after loading the weights")
    a = p.parse_args(argv)
    team = a.team_source is not None
    if team:
        stray = [f for f, v in (("--model", a.model), ("--weights", a.weights)) if v is not None]
        if stray:
            fail(2, f"--team-source takes no {', '.join(stray)}")
        required = ("--team-name", "--team-weights", "--team-inputs", "--batch-max", "--threads")
    else:
        stray = [f for f in ("--team-name", "--team-weights", "--team-inputs") if getattr(a, f[2:].replace("-", "_")) is not None]
        if stray:
            fail(2, f"{', '.join(stray)} belong{'s' if len(stray) == 1 else ''} to --team-source")
        required = ("--model", "--input-size", "--weights", "--batch-max", "--threads")
    missing = [f for f in required if getattr(a, f[2:].replace("-", "_")) is None]
    if missing:
        fail(2, f"the following arguments are required: {', '.join(missing)}")
    if team:
        a.team_inputs = parse_team_inputs(a.team_inputs, a.input_size)
    if not 1 <= a.batch_min <= a.batch_max:
        fail(2, f"need 1 <= batch-min ({a.batch_min}) <= batch-max ({a.batch_max})")
    if a.threads < 1:
        fail(2, "threads must be at least 1")
    if not a.map_only and not a.out:
        fail(2, "--out is required unless --map-only")
    if a.check_eager and not a.eval:
        fail(2, "--check-eager needs --eval: dropout and batch statistics make train() outputs differ")
    return a


def main(argv: list[str] | None = None) -> int:
    # Only the JSON line may reach stdout: until then fd 1 (ours and the C++ compiler's
    # that Inductor runs) is stderr.
    stdout = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    a = parse_args(argv)
    if a.team_source is not None:
        return main_team(a, stdout)
    lo = 32 if a.model in models.IMAGE_MODELS else 1
    if not lo <= a.input_size <= models.INPUT_SIZES[a.model][1]:
        fail(2, f"input size {a.input_size} out of range for {a.model}: {lo}..={models.INPUT_SIZES[a.model][1]}")

    # Before building anything: Inductor bakes the thread count into the CPU kernels.
    torch.set_num_threads(a.threads)
    module, mapped = build_and_load(a.model, a.input_size, a.weights)
    if a.map_only:
        print(json.dumps({"weights_mapped": mapped}), file=stdout, flush=True)
        return 0
    if a.device == "cuda" and not torch.cuda.is_available():
        fail(2, "--device cuda, but torch sees no CUDA device")
    device, dtype = torch.device(a.device), models.WEIGHT_DTYPES[a.dtype]
    module = module.train(not a.eval).to(device, dtype)

    # Export treats a Dim's min of 1 as 2 (it specialises sizes 0 and 1), yet the package
    # runs batch 1; the example input must lie inside the range, so at least 2 when it can.
    example = min(max(2, a.batch_min), a.batch_max)
    x = torch.zeros(models.input_shape(a.model, example, a.input_size), device=device, dtype=dtype)
    # A one-size range is a static shape (export refuses a Dim with min == max).
    dynamic = ({0: Dim("batch", min=a.batch_min, max=a.batch_max)},) if a.batch_min < a.batch_max else None
    shape = ["batch"] + models.input_shape(a.model, 1, a.input_size)[1:]
    export_s, compile_s, build_s = export_and_compile(a, module, (x,), dynamic, a.model, shape)

    report = {
        "export_s": round(export_s, 3),
        "compile_s": round(compile_s, 3),
        "build_s": round(build_s, 3),
        "package_bytes": os.path.getsize(a.out),
        "torch_version": torch.__version__,
        "inputs": [[None] + shape[1:]],
        "weights_mapped": mapped,
    }
    if a.check_eager:
        report.update(check_eager(a, module, device, dtype))
    print(json.dumps(report), file=stdout, flush=True)
    return 0


def time_cpp_builds():
    """Times every C++ compile and link Inductor runs in this process (`CppBuilder.build`:
    the wrapper, the CPU kernels, the shared library), so that the report can split the C++
    build from Inductor's own lowering and code generation (on a GPU the Triton kernels'
    compile stays with Inductor). Returns a function that reads the seconds so far."""
    from torch._inductor import cpp_builder

    spent = [0.0]
    original = cpp_builder.CppBuilder.build

    def build(self, *args, **kwargs):
        if spent[0] == 0.0:
            phase("c++ build")
        t0 = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - t0

    cpp_builder.CppBuilder.build = build
    return lambda: spent[0]


def export_and_compile(a, module, example: tuple, dynamic, model: str, input_shape) -> tuple[float, float, float]:
    """Exports `module` on `example` and packages it at --out; the seconds the export, the
    whole compile and the C++ build within it took."""
    phase("export")
    t0 = time.perf_counter()
    try:
        ep = torch.export.export(module, example, dynamic_shapes=dynamic)
    except Exception as e:  # noqa: BLE001 - any export failure is reported the same way
        fail(3, f"export failed: {first_line(e)}")
    export_s = time.perf_counter() - t0

    # Read back with the package (AOTIModelPackageLoader::get_metadata); strings only.
    metadata = {f"gradless.{k}": str(v) for k, v in {
        "model": model, "input_shape": json.dumps(input_shape), "batch_min": a.batch_min, "batch_max": a.batch_max,
        "threads": a.threads, "dtype": a.dtype, "mode": "eval" if a.eval else "train"}.items()}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    built = time_cpp_builds()
    phase("inductor")
    t0 = time.perf_counter()
    try:
        torch._inductor.aoti_compile_and_package(
            ep, package_path=a.out, inductor_configs={"aot_inductor.metadata": metadata}
        )
    except Exception as e:  # noqa: BLE001
        fail(4, f"compile failed: {first_line(e)}")
    return export_s, time.perf_counter() - t0, built()


def check_eager(a, module, device, dtype) -> dict:
    """The package against the eager module on one deterministic input at --batch-max."""
    try:
        runner = torch._inductor.aoti_load_package(a.out)
    except Exception as e:  # noqa: BLE001
        fail(4, f"cannot load the package: {first_line(e)}")
    shape = models.input_shape(a.model, a.batch_max, a.input_size)
    n = torch.Size(shape).numel()
    x = torch.sin(torch.arange(n, dtype=torch.float64) * 0.001).view(shape).to(device, dtype)
    with torch.no_grad():
        want, got = module(x), runner(x)
    diff = (got.double() - want.double()).abs().max().item()
    return {"max_abs_diff": diff, "bitwise_equal": bool(torch.equal(got, want))}


# --- Team models -------------------------------------------------------------------------

TEAM_DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
               "bfloat16": torch.bfloat16, "int64": torch.int64, "int32": torch.int32, "bool": torch.bool}


def parse_team_inputs(text: str, size: int | None) -> list[dict]:
    """--team-inputs (the sidecar's `inputs`), each with its shape at batch "batch" and the
    size resolved: [{"shape": [..., "batch", ...], "dtype", "high"?, "fill"?, "name"?}]."""
    try:
        inputs = json.loads(text)
    except ValueError as e:
        fail(2, f"--team-inputs is not JSON: {first_line(e)}")
    if not isinstance(inputs, list) or not inputs:
        fail(2, "--team-inputs must be the sidecar's `inputs`: a list of one or more inputs")
    resolved = []
    for i, spec in enumerate(inputs):
        if not isinstance(spec, dict) or not isinstance(spec.get("shape"), list):
            fail(2, f"--team-inputs: input {i} has no `shape` list")
        dtype = spec.get("dtype", "float32")
        if dtype not in TEAM_DTYPES:
            fail(2, f"--team-inputs: input {i} has dtype `{dtype}`, not one of {', '.join(TEAM_DTYPES)}")
        shape = []
        for d in spec["shape"]:
            if d == "size":
                if size is None:
                    fail(2, f'--team-inputs: input {i}\'s shape uses "size": give --input-size')
                if size < 1:
                    fail(2, f"--input-size must be at least 1, not {size}")
                d = size
            elif d != "batch" and (isinstance(d, bool) or not isinstance(d, int) or d < 0):
                fail(2, f"--team-inputs: input {i}'s shape {spec['shape']} holds `{d}`: numbers, \"batch\" and \"size\" only")
            shape.append(d)
        if shape.count("batch") != 1:
            fail(2, f'--team-inputs: input {i}\'s shape {spec["shape"]} needs "batch" exactly once')
        resolved.append({**spec, "shape": shape, "dtype": dtype})
    return resolved


def team_tensor(spec: dict, batch: int, device, float_dtype, deterministic: bool = False) -> torch.Tensor:
    """One team input at `batch`, as Gradless makes it (engine/src/models/scripted.rs,
    `input`): `high` draws from 0..high, `fill` fills, a float is random normal; integer and
    bool inputs with neither are zeros. fp16/bf16 weights cast the floating-point inputs (as
    a run does), integer and bool ones keep their dtype. `deterministic` (for --check-eager):
    a float is sin(0.001 i), an integer i % high."""
    dims = [batch if d == "batch" else d for d in spec["shape"]]
    dtype = TEAM_DTYPES[spec["dtype"]]
    if dtype.is_floating_point and float_dtype != torch.float32:
        dtype = float_dtype
    n = torch.Size(dims).numel()
    if spec.get("high") is not None:
        t = (torch.arange(n) % spec["high"]).view(dims) if deterministic else torch.randint(0, spec["high"], dims)
    elif spec.get("fill") is not None:
        fill = spec["fill"] if dtype.is_floating_point else int(spec["fill"])
        t = torch.full(dims, fill)
    elif dtype.is_floating_point:
        t = torch.sin(torch.arange(n, dtype=torch.float64) * 0.001).view(dims) if deterministic else torch.randn(dims)
    else:
        t = torch.zeros(dims)
    return t.to(device, dtype)


def team_dynamic(a):
    """export's dynamic_shapes: one batch Dim shared by every input, at its "batch" axis;
    None (static) when the range is one batch."""
    if a.batch_min == a.batch_max:
        return None
    batch = Dim("batch", min=a.batch_min, max=a.batch_max)
    return tuple({spec["shape"].index("batch"): batch} for spec in a.team_inputs)


def build_team(source: str):
    """The module a sidecar's `source` names: FILE.py:NAME (a class, or a function returning
    the module, called with no arguments) or torchvision:NAME (random weights)."""
    path, colon, name = source.rpartition(":")
    if not colon or not path or not name:
        fail(2, f"--team-source `{source}` needs FILE.py:NAME or torchvision:NAME")
    if path == "torchvision":
        try:
            import torchvision
        except Exception as e:  # noqa: BLE001
            fail(2, f"--team-source {source}: cannot import torchvision: {first_line(e)}")
        if not hasattr(torchvision.models, name):
            fail(2, f"--team-source {source}: torchvision.models has no `{name}`")
        make, where = getattr(torchvision.models, name), "torchvision.models"
        call = lambda: make(weights=None)  # noqa: E731
    else:
        if not os.path.isfile(path):
            fail(2, f"--team-source {source}: no file {path}")
        try:
            spec = importlib.util.spec_from_file_location("gradless_team_source", path)
            if spec is None or spec.loader is None:
                raise ImportError(f"{path} is not a Python file")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        except Exception as e:  # noqa: BLE001
            fail(2, f"--team-source {source}: cannot import {path}: {first_line(e)}")
        if not hasattr(module, name):
            fail(2, f"--team-source {source}: {path} defines no `{name}`")
        make, where = getattr(module, name), path
        call = make
    try:
        built = call()
    except Exception as e:  # noqa: BLE001
        fail(2, f"--team-source {source}: calling {where}'s `{name}` raised {first_line(e)}")
    if not isinstance(built, torch.nn.Module):
        fail(2, f"--team-source {source}: `{name}` returned a value of type {type(built).__name__}, not a torch.nn.Module")
    return built


def load_team_weights(module, weights: str, source: str) -> int:
    """Fills `module` with the TorchScript file's state_dict: every tensor must have the
    same name and shape in both. Returns the number of tensors loaded."""
    try:
        scripted = torch.jit.load(weights, map_location="cpu")
        tensors = scripted.state_dict()
    except Exception as e:  # noqa: BLE001
        fail(2, f"cannot read weights {weights}: {first_line(e)}")
    # Parameters and every buffer: TorchScript keeps a non-persistent buffer in its
    # state_dict too (the eager module leaves it out of its own).
    own = {**dict(module.named_parameters(remove_duplicate=False)), **dict(module.named_buffers(remove_duplicate=False))}
    for key, t in tensors.items():
        if key not in own:
            fail(2, f"{weights}'s tensor `{key}` has no place in {source}")
        if tuple(t.shape) != tuple(own[key].shape):
            fail(2, f"{weights}'s tensor `{key}` has shape {list(t.shape)}, {source}'s needs {list(own[key].shape)}")
    persistent = set(module.state_dict())
    missing = [k for k in own if k not in tensors and k in persistent]
    if missing:
        fail(2, f"{weights} fills not every tensor of {source}: {len(missing)} missing, first `{missing[0]}`")
    with torch.no_grad():
        for key, t in tensors.items():
            own[key].copy_(t)
    return len(tensors)


def main_team(a, stdout) -> int:
    # Before building anything: Inductor bakes the thread count into the CPU kernels.
    torch.set_num_threads(a.threads)
    module = build_team(a.team_source)
    mapped = load_team_weights(module, a.team_weights, a.team_source)
    if a.map_only:
        print(json.dumps({"weights_mapped": mapped}), file=stdout, flush=True)
        return 0
    if a.device == "cuda" and not torch.cuda.is_available():
        fail(2, "--device cuda, but torch sees no CUDA device")
    device, dtype = torch.device(a.device), models.WEIGHT_DTYPES[a.dtype]
    module = module.train(not a.eval).to(device, dtype)

    # As in the built-in mode: export takes a Dim's min of 1 as 2.
    batch = min(max(2, a.batch_min), a.batch_max)
    example = tuple(team_tensor(spec, batch, device, dtype) for spec in a.team_inputs)
    shapes = [spec["shape"] for spec in a.team_inputs]
    export_s, compile_s, build_s = export_and_compile(a, module, example, team_dynamic(a), a.team_name, shapes)

    report = {
        "export_s": round(export_s, 3),
        "compile_s": round(compile_s, 3),
        "build_s": round(build_s, 3),
        "package_bytes": os.path.getsize(a.out),
        "torch_version": torch.__version__,
        "inputs": [[None if d == "batch" else d for d in shape] for shape in shapes],
        "weights_mapped": mapped,
    }
    if a.check_eager:
        report.update(check_team(a, device, dtype))
    print(json.dumps(report), file=stdout, flush=True)
    return 0


def check_team(a, device, dtype) -> dict:
    """The package against the TorchScript module itself, in eval(), on one deterministic
    input at --batch-max."""
    try:
        runner = torch._inductor.aoti_load_package(a.out)
    except Exception as e:  # noqa: BLE001
        fail(4, f"cannot load the package: {first_line(e)}")
    scripted = torch.jit.load(a.team_weights, map_location=device).eval().to(device, dtype)
    x = tuple(team_tensor(spec, a.batch_max, device, dtype, deterministic=True) for spec in a.team_inputs)
    with torch.no_grad():
        want, got = scripted(*x), runner(*x)
    want, got = torch.utils._pytree.tree_leaves(want), torch.utils._pytree.tree_leaves(got)
    pairs = [(w, g) for w, g in zip(want, got) if isinstance(w, torch.Tensor) and isinstance(g, torch.Tensor)]
    if len(want) != len(got) or not pairs:
        fail(4, f"the package returned {len(got)} outputs, the TorchScript module {len(want)}")
    diff = max((g.double() - w.double()).abs().max().item() if w.numel() else 0.0 for w, g in pairs)
    return {"max_abs_diff": diff, "bitwise_equal": all(torch.equal(g, w) for w, g in pairs)}


if __name__ == "__main__":
    sys.exit(main())
