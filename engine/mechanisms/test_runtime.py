"""What the runtime lessons say of PyTorch, observed in PyTorch itself (run by scripts/test.sh).

The cards about budgets, warm-up, synchronisation and CUDA graphs (batch-scaling, warm-up,
timing-gpu-work, item-per-batch, cuda-graphs) name these tests; when a PyTorch upgrade changes the
mechanism, a test here fails instead of a lesson silently turning false. CPU only: what only
a GPU shows (the caching allocator, cuDNN's plans, asynchronous launches) the cards cite in
PyTorch's source instead, and the GPU check measures.

ResNet-18 is torchvision's, which Gradless's Rust model reproduces line for line.
"""
import collections
import gc
import os
import subprocess
import sys
import textwrap
import unittest
import weakref

import torch
import torchvision
from torch.profiler import ProfilerActivity, profile


def resnet18():
    torch.manual_seed(0)
    return torchvision.models.resnet18(weights=None).eval()


def op_counts(fn):
    """How many times each aten operator ran in fn(), by the profiler."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return {e.key: e.count for e in prof.key_averages()}


def top_level_ops(fn):
    """How many times each operator was called from Python in fn(): the profiler's events
    that no other operator called (an operator's own calls, aten::convolution under
    aten::conv2d for one, are left out)."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return collections.Counter(e.name for e in prof.events() if e.cpu_parent is None)


class Operators(unittest.TestCase):
    """What one forward pass asks of the CPU: the operators it dispatches, one by one."""

    def test_resnet18_forward_calls_69_operators(self):
        m = resnet18()
        x = torch.randn(2, 3, 32, 32)
        with torch.no_grad():
            counts = top_level_ops(lambda: m(x))
        # Every operator the forward pass called, by kind, as the profiler counted them.
        self.assertEqual(
            dict(counts),
            {
                "aten::conv2d": 20,
                "aten::batch_norm": 20,
                "aten::relu_": 17,
                "aten::add_": 8,
                "aten::max_pool2d": 1,
                "aten::adaptive_avg_pool2d": 1,
                "aten::flatten": 1,
                "aten::linear": 1,
            },
        )
        self.assertEqual(sum(counts.values()), 69)


class OneDnn(unittest.TestCase):
    """On a CPU, fp32 convolutions on a batch above one run through oneDNN, which creates a
    primitive per shape on its first call and keeps it in a cache for the next calls."""

    def test_cpu_convolutions_run_through_onednn(self):
        m = resnet18()
        x = torch.randn(2, 3, 32, 32)
        with torch.no_grad():
            counts = op_counts(lambda: m(x))
        self.assertEqual(counts.get("aten::mkldnn_convolution"), 20)

    def test_onednn_creates_a_convolution_primitive_per_new_shape(self):
        # oneDNN reports each primitive creation (a cache miss or hit) on stdout; a child
        # process keeps that output apart. Batch 2, batch 2 again, then batch 3.
        script = textwrap.dedent(
            """
            import torch
            torch.manual_seed(0)
            conv = torch.nn.Conv2d(8, 8, 3, padding=1).eval()
            with torch.no_grad():
                for batch in (2, 2, 3):
                    with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON_CREATION):
                        conv(torch.randn(batch, 8, 16, 16))
            """
        )
        env = dict(os.environ, ONEDNN_PRIMITIVE_CACHE_CAPACITY="1024")
        out = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True
        ).stdout
        creations = [
            line.split(",")[3]
            for line in out.splitlines()
            if line.startswith("onednn_verbose") and ",primitive,create:" in line and ",convolution," in line
        ]
        self.assertEqual(creations, ["create:cache_miss", "create:cache_hit", "create:cache_miss"])


def saved_activation_bytes(model, batch, grad_mode):
    """Bytes of the distinct storages autograd saves for backward in one forward pass, the
    parameters, buffers and input left out: the activations the graph keeps alive."""
    x = torch.randn(batch, 3, 32, 32)
    held = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers(), x]}
    saved = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in held:
            saved[ptr] = t.untyped_storage().nbytes()
        return t

    with grad_mode(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = model(x)
    del y
    return sum(saved.values())


def conv_outputs_alive(model, grad_mode):
    """How many of the convolutions' outputs are alive when the forward pass returns, and
    how many once its output is freed."""
    refs = []
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    hooks = [c.register_forward_hook(lambda mod, i, o: refs.append(weakref.ref(o))) for c in convs]
    try:
        with grad_mode():
            y = model(torch.randn(2, 3, 32, 32))
    finally:
        for h in hooks:
            h.remove()
    gc.collect()
    alive = sum(r() is not None for r in refs)
    del y
    gc.collect()
    return len(refs), alive, sum(r() is not None for r in refs)


class SavedActivations(unittest.TestCase):
    """With autograd on, the forward pass keeps each sample's activations for backward until
    the output is freed; under no_grad it keeps none."""

    def test_with_grad_the_saved_activations_double_with_the_batch(self):
        m = resnet18()
        two = saved_activation_bytes(m, 2, torch.enable_grad)
        four = saved_activation_bytes(m, 4, torch.enable_grad)
        self.assertGreater(two, 0)
        self.assertEqual(four, 2 * two)

    def test_with_grad_activations_live_as_long_as_the_output(self):
        convs, alive, after = conv_outputs_alive(resnet18(), torch.enable_grad)
        self.assertEqual((convs, alive, after), (20, 20, 0))

    def test_under_no_grad_no_activation_outlives_the_pass(self):
        m = resnet18()
        self.assertEqual(saved_activation_bytes(m, 4, torch.no_grad), 0)
        self.assertEqual(conv_outputs_alive(m, torch.no_grad), (20, 0, 0))


class Item(unittest.TestCase):
    """.item() reads one element back to the host through aten::_local_scalar_dense (on a
    GPU, aten/src/ATen/native/cuda/CUDAScalar.cu: a copy that synchronises the stream)."""

    def test_item_reads_the_value_through_local_scalar_dense(self):
        x = torch.randn(16)
        counts = op_counts(lambda: x.mean().item())
        self.assertEqual(counts.get("aten::item"), 1)
        self.assertEqual(counts.get("aten::_local_scalar_dense"), 1)


if __name__ == "__main__":
    unittest.main()
