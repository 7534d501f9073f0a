"""What weight-only quantization, a 16-bit KV cache, fp16's range and SDPA's kernel choice
do, observed in the PyTorch Gradless links (run by scripts/test.sh).

The statements of the cards int4-and-the-kv-cache, int8-decode-speed, kv-dtype,
fp16-and-bf16-range and sdpa-backend name these tests; when a PyTorch upgrade changes one of these
mechanisms, a test here fails instead of a lesson silently turning false. CPU only: the
CUDA halves of these facts (CUDA's int8 and int4 kernels, SDPA's CUDA priority order) are
cited from PyTorch's source on the cards and measured by the GPU check.
"""
import unittest

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode


def int4_packed(n, k, group, dtype):
    """A random [n, k] weight quantized to int4 in groups of `group` as the engine packs it
    for the CPU (engine/src/models/decoder/linear.rs): the packed weight and the scales and
    zeros, `[k / group, n, 2]` in the activations' dtype."""
    torch.manual_seed(0)
    ints = torch.randint(0, 16, (n, k), dtype=torch.int32)
    packed = torch._convert_weight_to_int4pack_for_cpu(ints, 2)
    scales = torch.rand(k // group, n, 1) * 0.01 + 0.001
    zeros = torch.randn(k // group, n, 1) * 0.01
    return packed, torch.cat([scales, zeros], 2).to(dtype)


class WeightOnlyQuantization(unittest.TestCase):
    """PyTorch's packed weight-only kernels read small integers and return the activations'
    dtype: quantizing the weights changes what a matmul reads, not what it produces."""

    def test_int4_packs_half_a_byte_per_weight(self):
        packed, _ = int4_packed(64, 128, 32, torch.float32)
        self.assertEqual(packed.numel() * packed.element_size(), 64 * 128 // 2)

    def test_the_int4_matmul_returns_the_activations_dtype(self):
        for dtype in (torch.float32, torch.bfloat16):
            packed, sz = int4_packed(64, 128, 32, dtype)
            x = torch.randn(3, 128).to(dtype)
            y = torch._weight_int4pack_mm_for_cpu(x, packed, 32, sz)
            self.assertEqual((y.dtype, tuple(y.shape)), (dtype, (3, 64)))

    def test_the_int8_matmul_dequantizes_inside_and_returns_the_activations_dtype(self):
        torch.manual_seed(0)
        w = torch.randint(-128, 128, (64, 128), dtype=torch.int8)
        self.assertEqual(w.element_size(), 1)
        scales = torch.rand(64) * 0.01 + 0.001
        x = torch.randn(3, 128)
        for dtype in (torch.float32, torch.bfloat16):
            y = torch._weight_int8pack_mm(x.to(dtype), w, scales.to(dtype))
            self.assertEqual(y.dtype, dtype)
        # The same product as the dequantized weight's: one scale per output channel.
        y = torch._weight_int8pack_mm(x, w, scales)
        torch.testing.assert_close(y, x @ (w.float() * scales[:, None]).T, rtol=1e-4, atol=1e-4)


class CacheDtypes(unittest.TestCase):
    """What a KV cache's dtype changes: the bytes per element, and nothing attention takes."""

    def test_bytes_per_element(self):
        sizes = {d: torch.empty(0, dtype=d).element_size() for d in (torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn)}
        self.assertEqual(sizes, {torch.float32: 4, torch.bfloat16: 2, torch.float16: 2, torch.float8_e4m3fn: 1})
        self.assertEqual(torch.finfo(torch.float8_e4m3fn).max, 448.0)

    def test_attention_takes_one_dtype(self):
        # A cache stored in bf16 under fp32 activations must be cast back before attention.
        q = torch.randn(1, 2, 4, 8)
        kv = torch.randn(1, 2, 4, 8, dtype=torch.bfloat16)
        with self.assertRaises(RuntimeError):
            F.scaled_dot_product_attention(q, kv, kv)
        self.assertEqual(F.scaled_dot_product_attention(q, kv.float(), kv.float()).dtype, torch.float32)


class Ranges(unittest.TestCase):
    """fp16's range against bf16's, and what an inf does once it exists."""

    def test_fp16_ends_at_65504(self):
        self.assertEqual(torch.finfo(torch.float16).max, 65504.0)
        half = torch.tensor([60000.0, 70000.0]).half()
        self.assertTrue(torch.isfinite(half[0]) and torch.isinf(half[1]))
        # A sum past the range is inf, though both terms are finite.
        self.assertTrue(torch.isinf(half[:1] + torch.tensor([10000.0]).half()).all())

    def test_bf16_keeps_fp32s_range_with_fewer_bits(self):
        self.assertGreater(torch.finfo(torch.bfloat16).max, 3.3e38)
        self.assertEqual(torch.finfo(torch.bfloat16).bits, 16)
        self.assertTrue(torch.isfinite(torch.tensor([70000.0, 1e30]).bfloat16()).all())
        # The cost is precision: 8 significant bits against fp16's 11.
        self.assertEqual(torch.finfo(torch.bfloat16).eps, 2.0 ** -7)
        self.assertEqual(torch.finfo(torch.float16).eps, 2.0 ** -10)

    def test_an_inf_through_rms_norm_is_nan(self):
        row = torch.tensor([[float("inf"), 1.0, 2.0]], dtype=torch.float16)
        self.assertTrue(torch.isnan(F.rms_norm(row, (3,))).any())
        # As transformers' LlamaRMSNorm computes it, in fp32.
        x = row.float()
        self.assertTrue(torch.isnan(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)).any())


class Fp16Autocast(unittest.TestCase):
    """fp16 autocast is not model.half(): the weights stay fp32, matmuls run in fp16, an op
    its lists do not name runs in its inputs' dtype (fp16 after a matmul), and an add follows
    type promotion, so a residual stream that starts in fp32 stays fp32."""

    def linear_of_ones(self):
        lin = torch.nn.Linear(4, 4, bias=False)
        with torch.no_grad():
            lin.weight.fill_(1.0)
        return lin

    def test_a_linear_under_fp16_autocast_overflows_in_its_output(self):
        lin = self.linear_of_ones()
        x = torch.full((1, 4), 20000.0)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.float16):
            y = lin(x)
        self.assertEqual((y.dtype, lin.weight.dtype), (torch.float16, torch.float32))
        self.assertTrue(torch.isinf(y).all())

    def test_an_elementwise_op_on_fp16_autocast_outputs_overflows_too(self):
        # A gated MLP's SiLU(gate) * up: both linear layers run in fp16 and stay inside its
        # range (300 each); the elementwise ops after them are not on autocast's lists, so
        # they run in their inputs' dtype, fp16, and the product, 90,000, is inf.
        gate, up = self.linear_of_ones(), self.linear_of_ones()
        x = torch.full((1, 4), 75.0)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.float16):
            g, u = gate(x), up(x)
            act = F.silu(g)
            h = act * u
        self.assertEqual((g.dtype, u.dtype, act.dtype, h.dtype), (torch.float16,) * 4)
        self.assertTrue(torch.isfinite(g).all() and torch.isfinite(u).all() and torch.isfinite(act).all())
        self.assertTrue(torch.isinf(h).all())

    def test_autocast_leaves_the_residual_add_to_type_promotion(self):
        lin = self.linear_of_ones()
        emb = torch.nn.Embedding(8, 4)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.float16):
            h = emb(torch.tensor([[1]]))
            self.assertEqual(h.dtype, torch.float32)
            # An fp32 stream plus a 16-bit output: fp32, so the sum may pass 65504.
            stream = torch.full((1, 4), 60000.0) + lin(torch.full((1, 4), 2500.0))
        self.assertEqual(stream.dtype, torch.float32)
        self.assertTrue(torch.isfinite(stream).all() and (stream > 65504).all())

    def test_after_half_the_residual_stream_is_fp16(self):
        lin = self.linear_of_ones().half()
        emb = torch.nn.Embedding(8, 4).half()
        with torch.no_grad():
            self.assertEqual(emb(torch.tensor([[1]])).dtype, torch.float16)
            stream = torch.full((1, 4), 60000.0).half() + lin(torch.full((1, 4), 2500.0).half())
        self.assertEqual(stream.dtype, torch.float16)
        self.assertTrue(torch.isinf(stream).all())


class AttentionKernels(unittest.TestCase):
    """Which kernel scaled_dot_product_attention picks for given tensors on the CPU: libtorch
    answers with torch._fused_sdp_choice, the op SDPA itself consults."""

    def qkv(self):
        torch.manual_seed(0)
        return [torch.randn(1, 4, 256, 32) for _ in range(3)]

    def test_the_default_priority_order(self):
        # CUDA starts from this order; a Hopper GPU's first SDPA call puts cuDNN first.
        order = [SDPBackend(i) for i in torch._C._get_sdp_priority_order()]
        self.assertEqual(order[:4], [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH, SDPBackend.CUDNN_ATTENTION])

    def test_the_cpu_runs_its_flash_kernel_for_is_causal_and_for_a_boolean_mask(self):
        q, k, v = self.qkv()
        mask = torch.ones(256, 256, dtype=torch.bool).tril()
        self.assertEqual(SDPBackend(torch._fused_sdp_choice(q, k, v, None, 0.0, True)), SDPBackend.FLASH_ATTENTION)
        self.assertEqual(SDPBackend(torch._fused_sdp_choice(q, k, v, mask, 0.0, False)), SDPBackend.FLASH_ATTENTION)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            torch.testing.assert_close(F.scaled_dot_product_attention(q, k, v, attn_mask=mask), F.scaled_dot_product_attention(q, k, v, is_causal=True))

    def test_the_math_kernel_runs_when_it_is_the_only_one_enabled(self):
        q, k, v = self.qkv()
        with sdpa_kernel(SDPBackend.MATH):
            self.assertEqual(SDPBackend(torch._fused_sdp_choice(q, k, v, None, 0.0, True)), SDPBackend.MATH)

    def test_the_math_kernel_computes_the_scores_of_16_bit_inputs_in_fp32(self):
        # The dtype of the score matrix ([batch, heads, tokens, tokens], from the matmul
        # q @ k^T) and of its softmax, as the math kernel's own ops produce them, for bf16
        # query, key and value. By default it casts them to fp32 first; the switch
        # torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True) keeps them in bf16.
        class Scores(TorchDispatchMode):
            def __init__(self):
                super().__init__()
                self.dtypes = {}

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                name = func.overloadpacket.__name__
                if name in ("bmm", "_safe_softmax") and out.shape[-2:] == (256, 256):
                    self.dtypes[name] = out.dtype
                return out

        q, k, v = (t.to(torch.bfloat16) for t in self.qkv())

        def scores():
            seen = Scores()
            with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), seen:
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return seen.dtypes, out.dtype

        default = torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
        self.assertFalse(default)
        self.assertEqual(scores(), ({"bmm": torch.float32, "_safe_softmax": torch.float32}, torch.bfloat16))
        self.assertEqual(torch.finfo(torch.float32).bits, 2 * torch.finfo(torch.bfloat16).bits)
        try:
            torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)
            self.assertEqual(scores(), ({"bmm": torch.bfloat16, "_safe_softmax": torch.bfloat16}, torch.bfloat16))
        finally:
            torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(default)


if __name__ == "__main__":
    unittest.main()
