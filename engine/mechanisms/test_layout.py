"""Memory layout and cudnn.benchmark, observed in the PyTorch Gradless links (run by
scripts/test.sh).

The channels-last and cudnn-benchmark cards' statements name these tests. CPU only:
channels_last is a stride layout every device shares, and a CPU's convolutions (oneDNN)
keep it through the network as cuDNN's do on a GPU; cudnn.benchmark's switch and its limit
are plain flags of ATen's global context (aten/src/ATen/Context.h), read without a GPU,
while what the autotuner does with them (aten/src/ATen/native/cudnn/Conv_v8.cpp) needs one.
"""
import json
import subprocess
import sys
import unittest

import torch
import torch.nn.functional as F

CL = torch.channels_last


def in_a_fresh_process(code):
    """What `code` prints (JSON) in a new interpreter: the defaults, untouched by any test."""
    out = subprocess.run([sys.executable, "-c", "import json, torch\n" + code], check=True, capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout.strip().splitlines()[-1])


class ChannelsLast(unittest.TestCase):
    def test_channels_last_changes_strides_not_shapes_or_values(self):
        torch.manual_seed(0)
        conv = torch.nn.Conv2d(3, 8, 3)
        before = conv.weight.detach().clone()
        conv.to(memory_format=CL)
        w = conv.weight
        # Same (N, C, H, W) shape and values; NHWC strides: channels innermost.
        self.assertEqual(tuple(w.shape), (8, 3, 3, 3))
        self.assertTrue(torch.equal(w, before))
        self.assertEqual(w.stride(), (27, 1, 9, 3))
        self.assertTrue(w.is_contiguous(memory_format=CL))
        self.assertFalse(w.is_contiguous())
        # 1-D parameters (the bias) have no layout to change.
        self.assertEqual(conv.bias.stride(), (1,))
        x = torch.randn(2, 3, 16, 16)
        xc = x.to(memory_format=CL)
        self.assertEqual(tuple(xc.shape), (2, 3, 16, 16))
        self.assertEqual(xc.stride(), (768, 1, 48, 3))
        self.assertTrue(torch.equal(xc, x))

    def test_a_convolution_on_channels_last_returns_channels_last(self):
        torch.manual_seed(0)
        conv = torch.nn.Conv2d(8, 16, 3, padding=1)
        x = torch.randn(4, 8, 32, 32)
        with torch.no_grad():
            reference = conv(x)
            conv.to(memory_format=CL)
            y = conv(x.to(memory_format=CL))
        # The output is NHWC too, so the next layer gets NHWC without a conversion.
        self.assertTrue(y.is_contiguous(memory_format=CL))
        self.assertFalse(reference.is_contiguous(memory_format=CL))
        # The same values, up to float rounding.
        torch.testing.assert_close(y, reference, rtol=1e-5, atol=1e-5)


class CudnnBenchmark(unittest.TestCase):
    def test_cudnn_benchmark_is_off_and_times_at_most_ten_candidates_by_default(self):
        d = in_a_fresh_process(
            "print(json.dumps({'benchmark': torch.backends.cudnn.benchmark, 'limit': torch.backends.cudnn.benchmark_limit}))"
        )
        self.assertIs(d["benchmark"], False)
        # Conv_v8.cpp's get_plans_from_find times at most this many candidate plans per
        # convolution configuration (0 would mean all of them).
        self.assertEqual(d["limit"], 10)


if __name__ == "__main__":
    unittest.main()
