"""What autocast does, observed in the PyTorch Gradless links (run by scripts/test.sh).

The cards' statements about autocast (half-weights, autocast, autocast-decode, seed-table,
fp16-and-bf16-range) name these tests; when a PyTorch upgrade changes the mechanism, a test here
fails instead of a lesson silently turning false. CPU only: autocast's CPU path shares its
cast cache and its op lists' policy with CUDA's (aten/src/ATen/autocast_mode.cpp).
"""
import unittest

import torch
from torch.profiler import ProfilerActivity, profile


def casts_in_three_calls(grad_mode):
    """aten::_to_copy calls in three forward calls of one Linear under bf16 autocast."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 64)
    x = torch.randn(8, 64)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with grad_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            for _ in range(3):
                lin(x)
    return sum(e.count for e in prof.key_averages() if e.key == "aten::_to_copy")


class CastCache(unittest.TestCase):
    """Autocast caches the low-precision copy of a leaf that requires grad (a weight) for
    the rest of the autocast region, unless inference_mode is on: with grad and under
    no_grad each weight is cast once, under inference_mode every call casts again."""

    def test_weights_are_cast_once_with_grad_and_under_no_grad(self):
        # 3 input casts + 2 weight casts (weight and bias, cached): 5.
        self.assertEqual(casts_in_three_calls(torch.enable_grad), 5)
        self.assertEqual(casts_in_three_calls(torch.no_grad), 5)

    def test_inference_mode_skips_the_cast_cache(self):
        # 3 input casts + 3 x 2 weight casts: nothing is cached.
        self.assertEqual(casts_in_three_calls(torch.inference_mode), 9)

    def test_the_cache_is_emptied_when_the_region_ends(self):
        # Two autocast regions of one call each: the weights are cast in each region, so
        # the cached copies live exactly as long as the region (and are held that long).
        torch.manual_seed(0)
        lin = torch.nn.Linear(64, 64)
        x = torch.randn(8, 64)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(2):
                with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
                    lin(x)
        casts = sum(e.count for e in prof.key_averages() if e.key == "aten::_to_copy")
        self.assertEqual(casts, 2 * (1 + 2))


class Policy(unittest.TestCase):
    """Which ops autocast runs in low precision and which it keeps in fp32."""

    def test_matmuls_run_low_and_the_parameters_stay_fp32(self):
        lin = torch.nn.Linear(16, 16)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            self.assertEqual(lin(torch.randn(2, 16)).dtype, torch.bfloat16)
        self.assertEqual(lin.weight.dtype, torch.float32)


    def test_a_model_cast_once_refuses_an_fp32_input(self):
        lin = torch.nn.Linear(16, 16).to(torch.bfloat16)
        with torch.no_grad():
            with self.assertRaises(RuntimeError):
                lin(torch.randn(2, 16))
            self.assertEqual(lin(torch.randn(2, 16).to(torch.bfloat16)).dtype, torch.bfloat16)


if __name__ == "__main__":
    unittest.main()
