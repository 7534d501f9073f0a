"""What train()/eval(), grad mode, inference_mode, requires_grad_(False) and autocast each
do, observed in PyTorch itself (run by scripts/test.sh).

The statements of the cards eval-and-autograd, nograd-and-dropout, inference-vs-nograd,
autocast, output-lifetime and freeze-vs-nograd name these tests; when a PyTorch upgrade
changes a mechanism, a test here fails instead of a lesson silently turning false. CPU
only, deterministic: what autograd saves for backward is counted with
torch.autograd.graph.saved_tensors_hooks (every tensor a graph keeps passes through the
pack hook), and the rest are tensor flags, dispatch keys, dtypes and the errors raised.
"""
import unittest

import torch
from torch import nn

DispatchKey = torch._C.DispatchKey


def saved_during(fn):
    """Runs fn() under a pack hook; returns (fn's result, the tensors saved for backward)."""
    saved = []

    def pack(t):
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, saved


def mlp():
    """Linear -> BatchNorm -> ReLU -> Dropout -> Linear, as the Tiny MLP's first half."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 4))


class EvalLeavesAutogradOn(unittest.TestCase):
    """model.eval() changes Dropout and BatchNorm, not whether a graph is recorded."""

    def test_eval_leaves_grad_mode_on(self):
        model = mlp().eval()
        self.assertTrue(all(not m.training for m in model.modules()))
        self.assertTrue(torch.is_grad_enabled())
        y = model(torch.randn(8, 16))
        # The parameters require grad, so the output carries a graph.
        self.assertTrue(y.requires_grad)
        self.assertIsNotNone(y.grad_fn)

    def test_an_eval_model_saves_activations_for_backward(self):
        model = mlp().eval()
        x = torch.randn(8, 16)
        _, saved = saved_during(lambda: model(x))
        params = {p.data_ptr() for p in model.parameters()} | {b.data_ptr() for b in model.buffers()}
        activations = [t for t in saved if t.data_ptr() not in params and t.data_ptr() != x.data_ptr()]
        # The hidden activations (8 x 32) are among what the graph keeps.
        self.assertTrue(any(t.shape == (8, 32) for t in activations), [t.shape for t in saved])

    def test_no_grad_saves_nothing(self):
        model = mlp().eval()
        with torch.no_grad():
            y, saved = saved_during(lambda: model(torch.randn(8, 16)))
        self.assertEqual(saved, [])
        self.assertFalse(y.requires_grad)
        self.assertIsNone(y.grad_fn)


class NoGradLeavesTrainingOn(unittest.TestCase):
    """torch.no_grad() stops graph recording only; Dropout and BatchNorm read module.training."""

    def test_no_grad_leaves_train_mode_on(self):
        model = mlp().train()
        with torch.no_grad():
            self.assertTrue(all(m.training for m in model.modules()))
            model(torch.randn(8, 16))
        self.assertTrue(model.training)

    def test_dropout_stays_random_under_no_grad_in_train(self):
        drop = nn.Dropout(0.5).train()
        x = torch.ones(1000)
        torch.manual_seed(0)
        with torch.no_grad():
            a, b = drop(x), drop(x)
        self.assertFalse(torch.equal(a, b))
        self.assertTrue((a == 0).any())
        # Survivors are scaled by 1/(1-p) in train mode.
        self.assertTrue(torch.all((a == 0) | (a == 2.0)))
        drop.eval()
        with torch.no_grad():
            self.assertTrue(torch.equal(drop(x), x))

    def test_batchnorm_uses_the_batch_and_updates_its_running_stats_under_no_grad(self):
        torch.manual_seed(0)
        bn = nn.BatchNorm1d(4).train()
        x = torch.randn(8, 4)
        mates = x.clone()
        mates[1:] = torch.randn(7, 4)
        before = bn.running_mean.clone()
        with torch.no_grad():
            a, b = bn(x)[0], bn(mates)[0]
        # Sample 0's output depends on its batch-mates, and the running mean moved.
        self.assertFalse(torch.allclose(a, b))
        self.assertFalse(torch.equal(bn.running_mean, before))
        bn.eval()
        frozen = bn.running_mean.clone()
        with torch.no_grad():
            a, b = bn(x)[0], bn(mates)[0]
        self.assertTrue(torch.equal(a, b))
        self.assertTrue(torch.equal(bn.running_mean, frozen))


class InferenceMode(unittest.TestCase):
    """inference_mode records no graph, as no_grad does, and also skips autograd's
    dispatch entirely: the tensors it makes are 'inference tensors', with no version
    counter and no view tracking, which autograd refuses to save."""

    def test_inference_mode_saves_nothing_like_no_grad(self):
        model = mlp().eval()
        x = torch.randn(8, 16)
        with torch.no_grad():
            a, saved_ng = saved_during(lambda: model(x))
        with torch.inference_mode():
            b, saved_im = saved_during(lambda: model(x))
        self.assertEqual(saved_ng, [])
        self.assertEqual(saved_im, [])
        self.assertTrue(torch.equal(a, b))
        self.assertIsNone(b.grad_fn)

    def test_inference_mode_makes_inference_tensors(self):
        x = torch.randn(2, 2)
        with torch.no_grad():
            a = x * 2
        with torch.inference_mode():
            b = x * 2
        self.assertFalse(a.is_inference())
        self.assertTrue(b.is_inference())

    def test_inference_mode_skips_autograds_dispatch_and_no_grad_does_not(self):
        # Under no_grad every op still passes through autograd's kernel (which then records
        # nothing); inference_mode excludes autograd's dispatch keys for every op, and a
        # tensor it makes carries none.
        excluded = lambda: torch._C._dispatch_tls_is_dispatch_key_excluded(DispatchKey.AutogradFunctionality)
        x = torch.randn(2, 2)
        with torch.no_grad():
            self.assertFalse(excluded())
            a = x * 2
        with torch.inference_mode():
            self.assertTrue(excluded())
            b = x * 2
        self.assertIn("AutogradCPU", str(torch._C._dispatch_keys(a)))
        self.assertIn("ADInplaceOrView", str(torch._C._dispatch_keys(a)))
        self.assertNotIn("AutogradCPU", str(torch._C._dispatch_keys(b)))
        self.assertNotIn("ADInplaceOrView", str(torch._C._dispatch_keys(b)))

    def test_inference_tensors_have_no_version_counter(self):
        x = torch.randn(2, 2)
        with torch.no_grad():
            a = x * 2
            a.add_(1)
        self.assertEqual(a._version, 1)
        with torch.inference_mode():
            b = x * 2
            b.add_(1)
        with self.assertRaisesRegex(RuntimeError, "do not track version counter"):
            b._version

    def test_views_of_inference_tensors_are_not_tracked_as_views(self):
        normal = torch.randn(4)
        with torch.inference_mode():
            made_here = torch.randn(4)
            # A view of an inference tensor is not tracked as one: no base, inside the mode...
            view = made_here.view(2, 2)
            self.assertTrue(view.is_inference())
            self.assertFalse(view._is_view())
            self.assertIsNone(view._base)
            # ... while a view of a normal tensor, made in the same mode, is tracked, and is
            # a normal tensor itself.
            tracked = normal.view(2, 2)
            self.assertTrue(tracked._is_view())
            self.assertIs(tracked._base, normal)
            self.assertFalse(tracked.is_inference())
        # ... or outside it.
        self.assertFalse(made_here.view(2, 2)._is_view())
        with torch.no_grad():
            self.assertTrue(normal.view(2, 2)._is_view())

    def test_inference_tensors_cannot_be_saved_for_backward(self):
        with torch.inference_mode():
            feats = torch.ones(2, 2) * 3
        w = torch.ones(2, 2, requires_grad=True)
        # matmul must save feats to compute w's gradient.
        with self.assertRaisesRegex(RuntimeError, "Inference tensors cannot be saved for backward"):
            feats @ w

    def test_an_op_that_saves_nothing_accepts_an_inference_tensor(self):
        with torch.inference_mode():
            feats = torch.ones(2, 2) * 3
        w = torch.ones(2, 2, requires_grad=True)
        # Addition's backward needs neither input: nothing is saved, nothing raised.
        (feats + w).sum().backward()
        self.assertTrue(torch.equal(w.grad, torch.ones(2, 2)))

    def test_a_clone_outside_the_mode_is_a_normal_tensor(self):
        with torch.inference_mode():
            feats = torch.ones(2, 2) * 3
        w = torch.ones(2, 2, requires_grad=True)
        normal = feats.clone()
        self.assertFalse(normal.is_inference())
        (normal @ w).sum().backward()
        self.assertIsNotNone(w.grad)

    def test_inplace_on_an_inference_tensor_outside_the_mode_raises(self):
        with torch.inference_mode():
            feats = torch.ones(2, 2)
        with self.assertRaisesRegex(RuntimeError, "Inplace update to inference tensor outside InferenceMode"):
            feats.add_(1)


class Freezing(unittest.TestCase):
    """requires_grad_(False) leaves grad mode on: autograd records an op when any of its
    inputs requires grad, and with nothing requiring grad it records nothing."""

    def test_every_parameter_frozen_records_no_graph(self):
        model = mlp().eval().requires_grad_(False)
        self.assertTrue(torch.is_grad_enabled())
        y, saved = saved_during(lambda: model(torch.randn(8, 16)))
        self.assertEqual(saved, [])
        self.assertIsNone(y.grad_fn)

    def test_a_partly_frozen_model_saves_only_for_its_trainable_part(self):
        model = mlp().eval()
        for p in model[0].parameters():
            p.requires_grad_(False)
        x = torch.randn(8, 16)
        y, saved = saved_during(lambda: model(x))
        self.assertIsNotNone(y.grad_fn)
        # The frozen first Linear saved nothing (not its input x); the BatchNorm after it
        # (trainable) saved its input, and the trainable head saved its own.
        self.assertFalse(any(t.data_ptr() == x.data_ptr() for t in saved))
        self.assertTrue(any(t.shape == (8, 32) for t in saved))
        frozen_saved = len(saved)
        model.requires_grad_(True)
        _, all_saved = saved_during(lambda: model(x))
        self.assertGreater(len(all_saved), frozen_saved)

    def test_a_frozen_model_records_again_for_an_input_that_requires_grad(self):
        model = mlp().eval().requires_grad_(False)
        x = torch.randn(8, 16, requires_grad=True)
        y, saved = saved_during(lambda: model(x))
        self.assertIsNotNone(y.grad_fn)
        self.assertTrue(saved)


class KeptOutputs(unittest.TestCase):
    """An output that requires grad references its graph, and the graph holds what each
    op saved for backward: the activations live as long as the output."""

    def test_a_kept_output_holds_the_activations_its_graph_saved(self):
        released = []

        class Held:
            def __init__(self, t):
                self.t = t

            def __del__(self):
                released.append(1)

        torch.manual_seed(0)
        lin1, lin2 = nn.Linear(16, 32), nn.Linear(32, 4)
        x = torch.randn(8, 16)
        held = []

        def pack(t):
            held.append(t.data_ptr())
            return Held(t)

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda h: h.t):
            h = torch.relu(lin1(x))
            y = lin2(h)
        self.assertIn(h.data_ptr(), held)
        del h
        # The activation's last name is gone; the graph still holds it.
        self.assertEqual(released, [])
        del y
        # The output went, its graph with it, and what the graph saved.
        self.assertTrue(released)

    def test_cpu_on_a_cpu_tensor_is_the_same_tensor(self):
        t = torch.randn(4)
        self.assertIs(t.cpu(), t)


class Autocast(unittest.TestCase):
    """What torch.autocast changes: the dtype of eligible ops, not the weights; which ops
    stay in the input's dtype on a CPU; how a residual sum promotes."""

    def test_autocast_runs_convolutions_and_linear_layers_low_and_keeps_fp32_weights(self):
        torch.manual_seed(0)
        conv, lin = nn.Conv2d(3, 4, 3), nn.Linear(8, 8)
        for low in (torch.float16, torch.bfloat16):
            with torch.no_grad(), torch.autocast("cpu", dtype=low):
                self.assertEqual(conv(torch.randn(1, 3, 8, 8)).dtype, low)
                self.assertEqual(lin(torch.randn(2, 8)).dtype, low)
            self.assertEqual(conv.weight.dtype, torch.float32)
            self.assertEqual(lin.weight.dtype, torch.float32)

    def test_cpu_autocast_leaves_batchnorm_layer_norm_and_softmax_in_the_input_dtype(self):
        # CPU autocast's fp32 list has no norm, softmax or sum (CUDA's has layer_norm,
        # group_norm, softmax and sum): a low-precision input stays low through them.
        torch.manual_seed(0)
        bn, ln = nn.BatchNorm2d(4).eval(), nn.LayerNorm(8)
        for low in (torch.float16, torch.bfloat16):
            with torch.no_grad(), torch.autocast("cpu", dtype=low):
                self.assertEqual(bn(torch.randn(1, 4, 3, 3, dtype=low)).dtype, low)
                self.assertEqual(ln(torch.randn(2, 8, dtype=low)).dtype, low)
                self.assertEqual(torch.softmax(torch.randn(2, 8, dtype=low), -1).dtype, low)
                self.assertEqual(torch.randn(2, 8, dtype=low).sum().dtype, low)

    def test_a_residual_sum_of_fp32_and_low_precision_is_fp32(self):
        torch.manual_seed(0)
        lin = nn.Linear(8, 8)
        x = torch.randn(2, 8)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            branch = lin(x)
            self.assertEqual(branch.dtype, torch.bfloat16)
            self.assertEqual((x + branch).dtype, torch.float32)

    def test_autocast_output_differs_a_little_from_fp32(self):
        torch.manual_seed(0)
        lin = nn.Linear(64, 64)
        x = torch.randn(8, 64)
        with torch.no_grad():
            ref = lin(x)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                low = lin(x).float()
        diff = (low - ref).abs().max().item()
        self.assertGreater(diff, 0.0)
        self.assertLess(diff, 0.1 * ref.abs().max().item())


if __name__ == "__main__":
    unittest.main()
