"""The corpus of the byte-level model: the Python source of the installed PyTorch 2.11.0
package (BSD-3-Clause), read from disk, so every machine that ran scripts/setup.sh has it.

- Training text: every ``.py`` file under ``torch/nn``, ``torch/optim`` and ``torch/utils``,
  sorted by path, concatenated as raw bytes.
- Held-out text (the quality figure): the first 64 KiB of the ``.py`` files under
  ``torch/fx``, sorted by path and concatenated (a directory training never reads).
- Monitor text: the same 64 KiB cut of ``torch/distributions``, the held-out curve logged
  during training (and a second held-out figure: see models/torch_bytes/README.md).

Also the byte vocabulary and the bits-per-byte figure shared by ``train.py`` and ``eval.py``.
"""

import gzip
import hashlib
import math
import pathlib
import sys

TORCH_VERSION = "2.11.0"
TRAIN_DIRS = ("nn", "optim", "utils")
HELDOUT_DIR = "fx"
MONITOR_DIR = "distributions"
HELDOUT_BYTES = 64 * 1024

# The vocabulary: ids 0..255 are the bytes themselves; then three special ids.
BOS, EOS, PAD = 256, 257, 258
VOCAB = 259


def torch_root() -> pathlib.Path:
    """The installed torch package, refused unless it is 2.11.0 (the corpus is its source)."""
    import torch

    base = torch.__version__.split("+")[0]
    if base != TORCH_VERSION:
        sys.exit(
            f"error: this corpus is the source of torch {TORCH_VERSION}; the installed torch "
            f"is {torch.__version__}. Run scripts/setup.sh (it installs {TORCH_VERSION}) and "
            f"use its Python: /root/.cache/gradless/venv/bin/python"
        )
    return pathlib.Path(torch.__file__).resolve().parent


def _py_files(root: pathlib.Path, sub: str) -> list[pathlib.Path]:
    return sorted((root / sub).rglob("*.py"), key=lambda p: p.relative_to(root).as_posix())


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Corpus:
    """The training bytes, the held-out slice, the monitor slice and the manifest listing
    every file read, its size and SHA-256, and the hashes of the texts."""

    def __init__(self, train, heldout, monitor, manifest):
        self.train, self.heldout, self.monitor, self.manifest = train, heldout, monitor, manifest


def _slice(root: pathlib.Path, sub: str):
    """The first HELDOUT_BYTES of `sub`'s sorted .py files, concatenated, and its listing."""
    parts, listing, have = [], [], 0
    for p in _py_files(root, sub):
        if have >= HELDOUT_BYTES:
            break
        data = p.read_bytes()
        used = data[: HELDOUT_BYTES - have]
        parts.append(used)
        have += len(used)
        listing.append({"path": "torch/" + p.relative_to(root).as_posix(),
                        "bytes": len(data), "bytes_used": len(used), "sha256": sha256(data)})
    text = b"".join(parts)
    if len(text) != HELDOUT_BYTES:
        sys.exit(f"error: torch/{sub} holds fewer than {HELDOUT_BYTES} bytes of source")
    entry = {"dir": f"torch/{sub}", "files": len(listing), "bytes": len(text),
             "sha256": sha256(text), "list": listing}
    return text, entry


def load() -> Corpus:
    root = torch_root()
    train_files = [p for d in TRAIN_DIRS for p in _py_files(root, d)]
    train_files.sort(key=lambda p: p.relative_to(root).as_posix())
    parts, listing = [], []
    for p in train_files:
        data = p.read_bytes()
        parts.append(data)
        listing.append({"path": "torch/" + p.relative_to(root).as_posix(),
                        "bytes": len(data), "sha256": sha256(data)})
    train = b"".join(parts)
    heldout, held_entry = _slice(root, HELDOUT_DIR)
    monitor, monitor_entry = _slice(root, MONITOR_DIR)

    import torch

    manifest = {
        "corpus": f"the Python source of the torch {torch.__version__} package (BSD-3-Clause, PyTorch)",
        "train": {"dirs": [f"torch/{d}" for d in TRAIN_DIRS], "files": len(listing),
                  "bytes": len(train), "sha256": sha256(train), "list": listing},
        "heldout": held_entry,
        "monitor": monitor_entry,
    }
    return Corpus(train, heldout, monitor, manifest)


def gzip_bpb(data: bytes) -> float:
    """gzip -9 on the bytes (mtime 0, no name), in bits per byte."""
    return 8 * len(gzip.compress(data, compresslevel=9, mtime=0)) / len(data)


def unigram_bpb(train: bytes, heldout: bytes) -> float:
    """Cross-entropy of the held-out bytes under the training bytes' distribution (add-one
    smoothing over the 256 byte values, so a byte unseen in training costs finite bits)."""
    counts = [1] * 256
    for b, n in enumerate(_byte_counts(train)):
        counts[b] += n
    total = sum(counts)
    held = _byte_counts(heldout)
    bits = -sum(n * math.log2(counts[b] / total) for b, n in enumerate(held) if n)
    return bits / len(heldout)


def _byte_counts(data: bytes) -> list[int]:
    import collections

    c = collections.Counter(data)
    return [c.get(b, 0) for b in range(256)]


def bits_per_byte(model, data: bytes, context: int, batch: int = 8) -> float:
    """The model's bits per byte on `data`, read in non-overlapping chunks of `context` bytes:
    each chunk is fed as [BOS] + chunk[:-1] and every byte of the chunk is scored (so every
    byte of `data` counts once, its context the chunk before it). len(data) must be a
    multiple of `context`. Summed in float64."""
    import torch

    assert len(data) % context == 0, (len(data), context)
    ids = torch.tensor(list(data), dtype=torch.long).view(-1, context)
    inputs = torch.cat([torch.full((ids.shape[0], 1), BOS, dtype=torch.long), ids[:, :-1]], 1)
    device = next(model.parameters()).device
    nll = 0.0
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for i in range(0, ids.shape[0], batch):
            x, y = inputs[i:i + batch].to(device), ids[i:i + batch].to(device)
            logits = model(input_ids=x).logits.float()
            lp = torch.log_softmax(logits, -1).gather(-1, y.unsqueeze(-1))
            nll -= lp.double().sum().item()
    model.train(was_training)
    return nll / math.log(2) / len(data)
