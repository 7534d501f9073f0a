"""Writes what Gradless needs to measure the model's quality at run time, into the model's
folder, from the installed torch 2.11.0 (the same bytes corpus.py reads):

- `heldout.txt`: the 64 KiB held-out slice of torch/fx (its SHA-256 is the manifest's
  `heldout.sha256`; the script checks it);
- `train_byte_counts.json`: how often each of the 256 byte values occurs in the training
  text, for the unigram baseline (its SHA-256 is the manifest's `train.sha256`);
- `LICENSE-pytorch`: PyTorch's own copyright and BSD-3-Clause terms, which the slice's text
  is under (the first section of the package's LICENSE file).

    /root/.cache/gradless/venv/bin/python bench/train_bytes/export_eval.py models/torch_bytes
"""

import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import corpus  # noqa: E402


def main():
    folder = pathlib.Path(sys.argv[1])
    c = corpus.load()
    manifest = json.loads((folder / "manifest.json").read_text())
    for name, data in (("heldout", c.heldout), ("train", c.train)):
        if corpus.sha256(data) != manifest[name]["sha256"]:
            sys.exit(f"error: the {name} text's SHA-256 differs from the manifest's")
    (folder / "heldout.txt").write_bytes(c.heldout)
    counts = corpus._byte_counts(c.train)
    (folder / "train_byte_counts.json").write_text(json.dumps({
        "about": "occurrences of each byte value 0..255 in the training text (manifest.json: train)",
        "train_sha256": manifest["train"]["sha256"],
        "counts": counts,
    }) + "\n")
    licence = pathlib.Path(corpus.torch_root()).parent / f"torch-{corpus.TORCH_VERSION}.dist-info" / "licenses" / "LICENSE"
    text = licence.read_text()
    own = text.split("The PyTorch repository and source distributions bundle")[0].rstrip() + "\n"
    (folder / "LICENSE-pytorch").write_text(own)
    print(f"wrote heldout.txt ({len(c.heldout)} bytes), train_byte_counts.json, LICENSE-pytorch ({len(own)} bytes)")


if __name__ == "__main__":
    main()
