"""What a generation loop meets in PyTorch, observed in the Gradless links (run by scripts/test.sh).

The generation cards' statements (generate-no-grad, static-cache, left-padded-batch, gqa,
inference-tensor-cache, decode-batch, prefill-vs-decode, autocast-decode, decoder-table)
name these tests; when a PyTorch upgrade changes a mechanism, a test here fails instead of
a lesson silently turning false. CPU only, deterministic, a few seconds in all.
"""
import unittest
import weakref

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile



def toy_generation(grad_mode, steps=6, heads=2, head_dim=16):
    """A two-layer toy decoder's loop with a growing cache per layer (torch.cat, as
    DynamicCache does): each layer projects the hidden state to keys and values
    `[batch, heads, positions, head_dim]`, appends them to its cache and attends to the
    whole cache; the next step's input does not depend on this step's output (greedy
    decoding's argmax returns integers). Returns a weak reference to each layer's first
    keys and each layer's last cache."""
    torch.manual_seed(0)
    width = heads * head_dim
    layers = [torch.nn.Linear(width, 2 * width) for _ in range(2)]
    caches = [None, None]
    first = []
    with grad_mode():
        for step in range(steps):
            h = torch.randn(1, 1, width)
            for i, proj in enumerate(layers):
                k, v = proj(h).view(1, 1, 2 * heads, head_dim).transpose(1, 2).split(heads, 1)
                if caches[i] is None:
                    caches[i] = (k.contiguous(), v.contiguous())
                else:
                    caches[i] = (torch.cat([caches[i][0], k], 2), torch.cat([caches[i][1], v], 2))
                if step == 0:
                    first.append(weakref.ref(caches[i][0]))
                q = h.view(1, 1, heads, head_dim).transpose(1, 2)
                a = F.scaled_dot_product_attention(q, *caches[i])
                h = h + a.transpose(1, 2).reshape(1, 1, width)
            del h, a
    return first, caches


def saved_bytes(fn):
    """Bytes of the tensors autograd saves for the backward while `fn` runs."""
    total = [0]

    def pack(t):
        total[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return total[0]


class GraphThroughTheCache(unittest.TestCase):
    """With autograd on, the cache's keys and values carry the graph of the step that made
    them, and attention saves the whole cache it attended to: every past version of the
    cache stays alive. Under no_grad nothing is recorded."""

    def test_with_autograd_on_the_cache_carries_a_graph_and_no_grad_records_none(self):
        _, caches = toy_generation(torch.enable_grad)
        self.assertIsNotNone(caches[1][0].grad_fn)
        self.assertTrue(caches[1][0].requires_grad)
        _, caches = toy_generation(torch.no_grad)
        self.assertIsNone(caches[1][0].grad_fn)
        self.assertFalse(caches[1][0].requires_grad)

    def test_with_autograd_on_every_past_cache_stays_alive(self):
        # The first layer's first keys (one position) were replaced five times; with
        # autograd on the attention that read them saved them, and the second layer's cache
        # reaches that attention through its keys' graph: they are still alive.
        first, caches = toy_generation(torch.enable_grad)
        self.assertIsNotNone(first[0]())
        self.assertEqual(first[0]().shape[2], 1)
        del caches
        # Dropping the caches frees the whole graph, and with it the old cache.
        self.assertIsNone(first[0]())
        first, _ = toy_generation(torch.no_grad)
        self.assertIsNone(first[0]())

    def test_attention_saves_the_whole_cache_at_every_step(self):
        torch.manual_seed(0)
        proj = torch.nn.Linear(32, 64)
        cache = None
        per_step = []
        for _ in range(4):
            h = torch.randn(1, 1, 32)

            def step():
                nonlocal cache
                k, v = proj(h).view(1, 1, 4, 16).transpose(1, 2).split(2, 1)
                cache = (k, v) if cache is None else (torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2))
                F.scaled_dot_product_attention(h.view(1, 1, 2, 16).transpose(1, 2), *cache)

            per_step.append(saved_bytes(step))
        # Each step saves at least one more position's keys and values (2 heads x 16 fp32
        # values each) than the one before: the whole cache as it stood.
        one_position = 2 * 2 * 16 * 4
        grows = [b - a for a, b in zip(per_step, per_step[1:])]
        self.assertEqual(len(set(grows)), 1)
        self.assertGreaterEqual(grows[0], one_position)
        with torch.no_grad():
            self.assertEqual(saved_bytes(lambda: proj(torch.randn(1, 1, 32))), 0)

    def test_eval_leaves_autograd_on(self):
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.1)).eval()
        self.assertTrue(torch.is_grad_enabled())
        out = model(torch.randn(2, 8))
        self.assertTrue(out.requires_grad)
        self.assertIsNotNone(out.grad_fn)


class EvalAndDropout(unittest.TestCase):
    """eval() switches dropout (and batch norm's statistics) off, nothing else; with autograd
    on, attention with dropout saves more for its backward than without."""

    def test_eval_turns_dropout_off(self):
        torch.manual_seed(0)
        drop = torch.nn.Dropout(0.1)
        x = torch.ones(1000)
        self.assertFalse(torch.equal(drop(x), x))
        self.assertTrue(torch.equal(drop.eval()(x), x))

    def test_attention_dropout_saves_more_for_the_backward(self):
        torch.manual_seed(0)
        q = torch.randn(1, 8, 1, 32, requires_grad=True)
        k = torch.randn(1, 8, 40, 32, requires_grad=True)
        v = torch.randn(1, 8, 40, 32, requires_grad=True)
        without = saved_bytes(lambda: F.scaled_dot_product_attention(q, k, v, dropout_p=0.0))
        with_dropout = saved_bytes(lambda: F.scaled_dot_product_attention(q, k, v, dropout_p=0.1))
        self.assertGreater(with_dropout, without)
        # A little: the scores' probabilities and the dropout mask, one row per head.
        self.assertLess(with_dropout, 1.1 * without)


class CacheGrowth(unittest.TestCase):
    """A growing cache allocates new tensors at every step; a preallocated one is written
    in place and keeps its storage."""

    def test_cat_allocates_new_storage_and_copy_writes_in_place(self):
        old = torch.zeros(1, 2, 5, 8)
        new = torch.ones(1, 2, 1, 8)
        grown = torch.cat([old, new], 2)
        self.assertNotEqual(grown.data_ptr(), old.data_ptr())
        self.assertEqual(grown.shape[2], 6)
        static = torch.zeros(1, 2, 6, 8)
        ptr = static.data_ptr()
        static[:, :, 5:6].copy_(new)
        self.assertEqual((static.data_ptr(), static.shape[2]), (ptr, 6))
        self.assertTrue(torch.equal(static[:, :, 5:6], new))


class Padding(unittest.TestCase):
    """A mask hides padded positions from attention; their keys and values are still
    computed and stored like the others."""

    def test_a_mask_hides_padded_keys_that_are_still_there(self):
        torch.manual_seed(0)
        emb = torch.nn.Embedding(10, 32)
        proj = torch.nn.Linear(32, 64)  # keys and values: 2 heads x 16 each
        # Left padding: the first 2 of 6 positions hold the pad id, 0.
        ids = torch.tensor([[0, 0, 3, 4, 5, 6]])
        mask = ids != 0
        with torch.no_grad():
            k, v = proj(emb(ids)).view(1, 6, 4, 16).transpose(1, 2).split(2, 1)
            cache = [torch.cat([torch.empty(1, 2, 0, 16), t], 2) for t in (k, v)]
            # The projection computed the padded positions' keys and values as it did the
            # real ones' (the pad token's), and the cache keeps all 6 positions.
            pad_kv = proj(emb(torch.tensor([0]))).view(4, 16)
            torch.testing.assert_close(cache[0][0, :, 0], pad_kv[:2])
            torch.testing.assert_close(cache[1][0, :, 1], pad_kv[2:])
            self.assertEqual([t.shape[2] for t in cache], [6, 6])
            self.assertEqual(sum(t.nbytes for t in cache), 6 * 2 * 2 * 16 * 4)
            # The mask hides them from the real positions' attention: whatever they hold,
            # the output is the same.
            q = torch.randn(1, 2, 1, 16)
            out = F.scaled_dot_product_attention(q, *cache, attn_mask=mask)
            k2, v2 = cache[0].clone(), cache[1].clone()
            k2[:, :, :2] = 100.0
            v2[:, :, :2] = -100.0
            torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k2, v2, attn_mask=mask))


class GroupedQueryAttention(unittest.TestCase):
    """With grouped-query attention each key/value head serves a group of query heads: the
    keys and values (the cache) have num_key_value_heads heads, the queries
    num_attention_heads."""

    def test_each_kv_head_serves_a_group_of_query_heads(self):
        torch.manual_seed(0)
        q = torch.randn(1, 8, 1, 32)
        k = torch.randn(1, 2, 10, 32)
        v = torch.randn(1, 2, 10, 32)
        grouped = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        repeated = F.scaled_dot_product_attention(q, k.repeat_interleave(4, 1), v.repeat_interleave(4, 1))
        self.assertEqual(grouped.shape, (1, 8, 1, 32))
        self.assertTrue(torch.allclose(grouped, repeated))


class InferenceTensors(unittest.TestCase):
    """A tensor made under inference_mode is an inference tensor: no version counter, and no
    in-place update outside inference_mode, under no_grad included."""

    def test_a_tensor_made_under_inference_mode_is_an_inference_tensor(self):
        with torch.inference_mode():
            cache = torch.zeros(1, 2, 16, 32)
        self.assertTrue(cache.is_inference())
        with self.assertRaisesRegex(RuntimeError, "version counter"):
            cache._version
        with torch.no_grad():
            self.assertFalse(torch.zeros(1).is_inference())

    def test_writing_it_in_place_outside_inference_mode_raises(self):
        with torch.inference_mode():
            cache = torch.zeros(1, 2, 16, 32)
        with torch.no_grad():
            with self.assertRaisesRegex(RuntimeError, "Inplace update to inference tensor outside InferenceMode"):
                cache[:, :, 0:1].copy_(torch.ones(1, 2, 1, 32))

    def test_writing_it_in_the_mode_it_was_made_in_works(self):
        with torch.inference_mode():
            cache = torch.zeros(1, 2, 16, 32)
            cache[:, :, 0:1].copy_(torch.ones(1, 2, 1, 32))
        with torch.no_grad():
            plain = torch.zeros(1, 2, 16, 32)
            plain[:, :, 0:1].copy_(torch.ones(1, 2, 1, 32))
        self.assertEqual(cache.sum().item(), plain.sum().item())


def casts(grad_mode, region_per_call=False, requires_grad=True, cast_model=False, calls=3):
    """aten::_to_copy calls in `calls` calls of one Linear (weight and bias) under bf16
    autocast: one region around all calls, or one per call; `cast_model`: the Linear and
    its input cast to bf16 once, no autocast."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 64).requires_grad_(requires_grad)
    x = torch.randn(8, 64)
    if cast_model:
        lin, x = lin.to(torch.bfloat16), x.to(torch.bfloat16)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with grad_mode():
            if cast_model:
                for _ in range(calls):
                    lin(x)
            elif region_per_call:
                for _ in range(calls):
                    with torch.autocast("cpu", dtype=torch.bfloat16):
                        lin(x)
            else:
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    for _ in range(calls):
                        lin(x)
    return sum(e.count for e in prof.key_averages() if e.key == "aten::_to_copy")


class AutocastInADecodeLoop(unittest.TestCase):
    """Three decode steps of one Linear under bf16 autocast (3 input casts, and the weight
    and bias: 2 per cast of the layer)."""

    def test_one_region_around_the_loop_casts_the_weights_once_under_no_grad(self):
        self.assertEqual(casts(torch.no_grad), 3 + 2)

    def test_a_region_per_step_casts_the_weights_at_every_step(self):
        self.assertEqual(casts(torch.no_grad, region_per_call=True), 3 + 3 * 2)

    def test_under_inference_mode_every_step_casts_the_weights_whatever_the_region(self):
        self.assertEqual(casts(torch.inference_mode), 3 + 3 * 2)

    def test_weights_that_do_not_require_grad_are_cast_at_every_call(self):
        # The cache keeps only leaves that require grad: requires_grad_(False) turns it off.
        self.assertEqual(casts(torch.no_grad, requires_grad=False), 3 + 3 * 2)

    def test_weights_cast_once_need_no_cast(self):
        self.assertEqual(casts(torch.inference_mode, cast_model=True), 0)


def mm_flops(rows):
    """FLOPs the profiler counts for one bias-free Linear (256 -> 704) over `rows` rows."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(256, 704, bias=False)
    x = torch.randn(rows, 256)
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
        lin(x)
    return sum(e.flops for e in prof.key_averages() if e.flops), lin.weight.numel()


class WorkPerWeight(unittest.TestCase):
    """A matmul does 2 FLOPs per weight per row: a step over b rows (a batch of b decode
    tokens, or a prompt of b tokens) does b times the work on the same weights."""

    def test_a_matmul_does_two_flops_per_weight_per_row(self):
        one, weights = mm_flops(1)
        eight, same = mm_flops(8)
        self.assertEqual(one, 2 * weights)
        self.assertEqual(eight, 8 * one)
        self.assertEqual(same, weights)


class Defaults(unittest.TestCase):
    """PyTorch's defaults for fp32 matmuls (read on any machine: they are the global
    context's settings, which CUDA's matmuls obey)."""

    def test_tf32_is_off_for_fp32_matmuls_by_default(self):
        self.assertFalse(torch.backends.cuda.matmul.allow_tf32)
        self.assertEqual(torch.get_float32_matmul_precision(), "highest")


if __name__ == "__main__":
    unittest.main()
