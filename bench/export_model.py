#!/usr/bin/env python3
"""Write a team model for Gradless: NAME.pt (TorchScript) and NAME.json (its sidecar).

Run it with the venv's Python (the one with torch and torchvision):

    python bench/export_model.py resnet18 --out models/        # writes team_resnet18.pt + .json
    python bench/export_model.py my_nets.py:Detector --name detector \\
        --input batch,3,size,size --size "image side in pixels:256:64:1024" --out models/
    python bench/export_model.py my_nets.py:Tagger --name tagger \\
        --input ids=batch,size:int64:high=30000 --input mask=batch,size:int64:fill=1 \\
        --size "sequence length in tokens:128:1:512" --out models/

Each --input is one positional argument of forward, in order:
`[NAME=]SHAPE[:DTYPE][:high=N|:fill=V]`, where SHAPE is comma-separated with "batch" once
and "size" for the adjustable dimension, DTYPE one of float32 (the default), float64,
float16, bfloat16, int64, int32, bool, `high=N` draws integer values from 0..N (token ids:
N is the vocabulary size) and `fill=V` puts V in every element (a mask of ones). The
sidecar's fields are described in docs/operating.md ("Team models").

SOURCE is a torchvision model name (built with random weights unless --weights is given)
or `path/to/file.py:NAME`, where NAME is an nn.Module class or a function returning a
module, called with no arguments. torchvision models are traced in eval mode by default
(what most teams ship); Python files are scripted (`torch.jit.script`) by default, which
keeps Dropout's and BatchNorm's train/eval switch. Change it with --method.

The name (the files' stem, the model's name in Gradless) is --name, or by default
`team_<SOURCE>` for a torchvision model and the lower-cased NAME for a Python file. A name
built into Gradless (a built-in model's, or a decoder preset's: BUILT_IN_MODELS) is refused
before anything is written: the server would not serve the file under it, and the CLI
would not know which of the two is meant.

The sidecar also says where the module's Python definition is, `"source"`, so that the
server can compile the model ahead of time (a run's advanced.compiled: torch.export and
AOTInductor rebuild the module from it and fill it with NAME.pt's state_dict): for a
torchvision model `"torchvision:NAME"`, for a Python file `"FILE.py:NAME"`, with FILE.py
copied into --out under its own name (unless that very file is already there; a different
file of that name is replaced, and the script says so) and the path relative to it. The
copy is imported alone, so the file may import installed packages but not the files beside
it. --no-source leaves the field out (and copies nothing): such a model is served, but not
compiled.

The file is loaded back with torch.jit.load and run once on the sidecar's input before
anything is written, so a pair this writes is a pair Gradless serves.
"""

import argparse
import filecmp
import importlib.util
import json
import os
import shutil
import sys

import torch


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("source", help="torchvision model name, or path/to/file.py:NAME")
    p.add_argument("--out", required=True, help="the models directory to write into")
    p.add_argument("--name", help="the model's name (file stem); default: team_SOURCE for "
                   "torchvision, the lower-cased NAME for a Python file")
    p.add_argument("--display-name", help="shown in the Lab; default: the name")
    p.add_argument("--description", help="one or two sentences about the model")
    p.add_argument("--link", help="where the model is documented")
    p.add_argument(
        "--input", action="append", metavar="[NAME=]SHAPE[:DTYPE][:high=N|:fill=V]",
        help='one positional input of forward; repeat it for several, in order. SHAPE is '
        'comma-separated with "batch" once and "size" for the adjustable dimension; '
        "default for torchvision: batch,3,size,size",
    )
    p.add_argument("--dtype", choices=DTYPES,
                   help="the dtype of an --input that names none (default float32)")
    p.add_argument("--high", type=int,
                   help="integer inputs that give neither high nor fill: values are drawn from 0..high")
    p.add_argument(
        "--size",
        help='"meaning:default:min:max" of the adjustable dimension; default for '
        'torchvision: "image side in pixels (3×N×N):224:32:1024"',
    )
    p.add_argument("--method", choices=["trace", "script"],
                   help="default: trace for torchvision, script for Python files")
    p.add_argument("--weights", help="torchvision weights name (default: random weights)")
    p.add_argument("--no-source", dest="source_field", action="store_false",
                   help='leave "source" out of the sidecar (and copy no Python file): the '
                   "server then cannot compile the model ahead of time")
    return p.parse_args(argv)


DTYPES = ["float32", "float64", "float16", "bfloat16", "int64", "int32", "bool"]

# The names built into Gradless: the built-in models and the decoder presets
# (protocol::team::built_in_names; server/tests/team.rs checks that the two lists agree).
# A team model may not take one.
BUILT_IN_MODELS = ["tiny_mlp", "resnet18", "resnet50", "mobilenet_v2", "transformer",
                   "llama_tiny", "torch_bytes", "llama_tiny_mha", "qwen3_tiny", "gemma3_tiny",
                   "qwen3_moe_tiny", "mixtral_tiny", "phi3_tiny", "smollm2_135m", "qwen2_5_0_5b",
                   "gemma3_1b", "llama_3_2_1b", "phi3_mini", "llama_3_1_8b", "qwen3_8b",
                   "qwen3_30b_a3b", "mixtral_8x7b"]


def model_name(source, name):
    """The name the files are written under: --name, or one made from SOURCE that no
    built-in model has. Exits with the reason when the name is a built-in model's."""
    path, _, member = source.partition(":")
    if name is None:
        name = member.lower() if member else f"team_{path}"
    if name in BUILT_IN_MODELS:
        sys.exit(f"error: `{name}` is the name of a built-in Gradless model, which the server "
                 f"serves under it (a team file with that name is refused): choose another "
                 f"with --name, e.g. --name team_{name}")
    return name


def parse_input(text, dtype, high):
    """One --input: `[NAME=]SHAPE[:DTYPE][:high=N|:fill=V]` as a sidecar input."""
    name, eq, rest = text.partition("=")
    if not eq or "," in name or name in ("batch", "size"):
        name, rest = None, text
    parts = rest.split(":")
    spec = {}
    if name:
        spec["name"] = name
    spec["shape"] = parse_shape(parts[0])
    spec["dtype"] = dtype or "float32"
    for part in parts[1:]:
        key, _, value = part.partition("=")
        if key in DTYPES and not value:
            spec["dtype"] = key
        elif key == "high" and value:
            spec["high"] = int(value)
        elif key == "fill" and value:
            spec["fill"] = float(value) if "." in value else int(value)
        else:
            sys.exit(f"error: --input {text}: `{part}` is not a dtype ({', '.join(DTYPES)}), high=N or fill=V")
    if high is not None and "high" not in spec and "fill" not in spec and spec["dtype"].startswith("int"):
        spec["high"] = high
    return spec


def example_tensor(spec, batch, size):
    """The tensor Gradless makes for this sidecar input (engine/src/team/mod.rs, `input`)."""
    dims = [batch if d == "batch" else (size["default"] if d == "size" else d) for d in spec["shape"]]
    dtype = getattr(torch, spec["dtype"])
    if "high" in spec:
        return torch.randint(0, spec["high"], dims, dtype=dtype)
    if "fill" in spec:
        return torch.full(dims, spec["fill"], dtype=dtype)
    return torch.randn(dims, dtype=dtype)


def build(source, weights):
    """The module and whether it came from torchvision."""
    if is_python_source(source):
        path, _, attr = source.partition(":")
        spec = importlib.util.spec_from_file_location("team_model_source", path)
        if spec is None or spec.loader is None:
            sys.exit(f"error: cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if not attr:
            sys.exit(f"error: name the class or function in {path}, as {path}:NAME")
        if not hasattr(module, attr):
            sys.exit(f"error: {path} defines no `{attr}`")
        return getattr(module, attr)(), False
    import torchvision

    if not hasattr(torchvision.models, source):
        sys.exit(f"error: torchvision.models has no `{source}`")
    return getattr(torchvision.models, source)(weights=weights), True


def is_python_source(source):
    return source.endswith(".py") or ".py:" in source


def source_field(source):
    """The sidecar's "source" and the Python file to copy beside it (None for torchvision):
    `FILE.py:NAME` relative to the models directory, or `torchvision:NAME`."""
    if not is_python_source(source):
        return f"torchvision:{source}", None
    path, _, attr = source.partition(":")
    return f"{os.path.basename(path)}:{attr}", path


def copy_source(path, out):
    """Copies the Python file `path` into `out` under its own name, unless it is there."""
    dest = os.path.join(out, os.path.basename(path))
    if os.path.exists(dest):
        if os.path.samefile(path, dest) or filecmp.cmp(path, dest, shallow=False):
            return
        print(f"note: replacing {dest}, a different file, with {path}")
    shutil.copyfile(path, dest)


def parse_shape(text):
    dims = []
    for d in text.split(","):
        d = d.strip()
        dims.append(d if d in ("batch", "size") else int(d))
    return dims


def main(argv):
    args = parse_args(argv)
    name = model_name(args.source, args.name)
    model, from_torchvision = build(args.source, args.weights)
    input_texts = args.input or (["batch,3,size,size"] if from_torchvision else None)
    if input_texts is None:
        sys.exit("error: --input is needed for a Python file (e.g. --input batch,512)")
    inputs = [parse_input(t, args.dtype, args.high) for t in input_texts]
    size = None
    size_text = args.size or ("image side in pixels (3×N×N):224:32:1024" if from_torchvision else None)
    if any("size" in i["shape"] for i in inputs):
        if size_text is None:
            sys.exit('error: the shape uses "size": give --size "meaning:default:min:max"')
        meaning, default, lo, hi = size_text.rsplit(":", 3)
        size = {"meaning": meaning, "default": int(default), "min": int(lo), "max": int(hi)}

    sidecar = {
        "display_name": args.display_name or name,
        "inputs": inputs,
    }
    if size is not None:
        sidecar["size"] = size
    if args.description:
        sidecar["description"] = args.description
    if args.link:
        sidecar["link"] = args.link
    source_file = None
    if args.source_field:
        sidecar["source"], source_file = source_field(args.source)

    def example(batch):
        return tuple(example_tensor(i, batch, size) for i in inputs)

    method = args.method or ("trace" if from_torchvision else "script")
    model.eval()
    with torch.no_grad():
        scripted = torch.jit.trace(model, example(2)) if method == "trace" else torch.jit.script(model)

    os.makedirs(args.out, exist_ok=True)
    pt = os.path.join(args.out, f"{name}.pt")
    scripted.save(pt)
    loaded = torch.jit.load(pt)
    with torch.no_grad():
        loaded(*example(2))
    if source_file is not None:
        copy_source(source_file, args.out)
    with open(os.path.join(args.out, f"{name}.json"), "w") as f:
        json.dump(sidecar, f, indent=2, ensure_ascii=False)
        f.write("\n")
    params = sum(p.numel() for p in loaded.parameters())
    source = f", source {sidecar['source']}" if "source" in sidecar else ""
    print(f"wrote {pt} and {name}.json ({method}, {params:,} parameters{source})")


if __name__ == "__main__":
    main(sys.argv[1:])
