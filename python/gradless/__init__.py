"""Gradless's Python side, one package (python/gradless/).

- `models`: the built-in forward models in PyTorch, the architectures Gradless builds with
  tch, whose state_dict names are Gradless's variable names; every other module builds them
  from here.
- `peer`: the PyTorch peer of `gradless measure` (bench/compare.py runs it; a recorded run
  exports it as a standalone script).
- `card_peer`: the Python side of the per-call-overhead cards.
- `aoti_compile`: the ahead-of-time compile of a built-in or team model (`advanced.compiled`).

Each runs as `python -m gradless.NAME` with PYTHONPATH=python, or as a file
(`python python/gradless/NAME.py`). The engine runs `card_peer` and `aoti_compile` from the
sources compiled into its binary (engine/src/python_package.rs), so a server needs no
checkout. Python 3 and PyTorch; safetensors for `aoti_compile`.
"""
