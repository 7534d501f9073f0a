"""What the compiled-model lessons say of PyTorch, observed in PyTorch itself (run by
scripts/test.sh).

The cards about a model compiled ahead of time (compiled-first-call, compiled-settings,
compiled-shapes) contrast AOTInductor's package, which Gradless runs and measures, with two
things it is not: the exported program before compilation, and torch.compile's just-in-time
path. These tests observe both in the venv's PyTorch. They never run Inductor: torch.export
alone, and torch.compile with a counting backend (Dynamo's guards and recompiles are decided
before any backend runs), so they take seconds on a CPU.
"""
import unittest

import torch
import torch._dynamo
from torch._dynamo.testing import CompileCounter
from torch.export import Dim


def mlp():
    """Linear, ReLU, Dropout, Linear: the shape of Gradless's Tiny MLP, small."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Dropout(0.5), torch.nn.Linear(16, 4)
    )


class ExportFreezesTheMode(unittest.TestCase):
    """torch.export records the graph the module runs in its mode at export time."""

    def test_a_train_mode_export_keeps_dropout_and_refuses_eval(self):
        x = torch.randn(4, 16)
        f = torch.export.export(mlp().train(), (x,)).module()
        # Dropout is in the graph, live: two calls on the same input differ.
        self.assertFalse(torch.equal(f(x), f(x)))
        # And the exported module cannot be switched: eval() is refused, not obeyed.
        with self.assertRaises(NotImplementedError):
            f.eval()

    def test_an_eval_mode_export_is_deterministic_and_refuses_train(self):
        x = torch.randn(4, 16)
        f = torch.export.export(mlp().eval(), (x,)).module()
        self.assertTrue(torch.equal(f(x), f(x)))
        with self.assertRaises(NotImplementedError):
            f.train()

    def test_the_exported_program_in_python_guards_its_batch_range(self):
        # Before compilation, the exported module checks a dynamic dimension's range (in
        # Python); the AOTInductor package compiled from it does not, unless its process
        # sets AOTI_RUNTIME_CHECK_INPUTS (the compiled-shapes card measures the package).
        x = torch.randn(4, 16)
        ep = torch.export.export(mlp().eval(), (x,), dynamic_shapes=({0: Dim("batch", min=1, max=8)},))
        f = ep.module()
        self.assertEqual(tuple(f(torch.randn(8, 16)).shape), (8, 4))
        with self.assertRaisesRegex(Exception, "8"):
            f(torch.randn(16, 16))

    def test_export_keeps_a_dynamic_batchs_range_from_1_and_runs_batch_1(self):
        # The range the exported program records for the batch is the one it was given,
        # 1 to 64, and its module runs batch 1: a refusal of batch 1 comes from the compiled
        # package's own input check, not from the export.
        x = torch.randn(8, 16)
        ep = torch.export.export(mlp().eval(), (x,), dynamic_shapes=({0: Dim("batch", min=1, max=64)},))
        (name,) = ep.graph_signature.user_inputs
        (batch,) = [n.meta["val"].shape[0] for n in ep.graph.nodes if n.name == name]
        bounds = ep.range_constraints[batch.node.expr]
        self.assertEqual((int(bounds.lower), int(bounds.upper)), (1, 64))
        self.assertEqual(tuple(ep.module()(torch.randn(1, 16)).shape), (1, 4))


class FloatOrder(unittest.TestCase):
    """Why a compiled kernel's output differs from eager's in the last bits."""

    def test_fp32_sums_depend_on_their_order(self):
        torch.manual_seed(0)
        x = torch.randn(4096, dtype=torch.float32)
        forward = torch.zeros((), dtype=torch.float32)
        for v in x:
            forward += v
        backward = torch.zeros((), dtype=torch.float32)
        for v in x.flip(0):
            backward += v
        # The same numbers, added one by one in two orders: two fp32 sums, both within
        # rounding of the exact (fp64) one.
        self.assertNotEqual(forward.item(), backward.item())
        exact = x.double().sum().item()
        for s in (forward.item(), backward.item()):
            self.assertLess(abs(s - exact), 1e-3)


class JustInTime(unittest.TestCase):
    """torch.compile guards what it compiled for and compiles again when a guard fails."""

    def setUp(self):
        torch._dynamo.reset()

    def frames(self, calls, **options):
        counter = CompileCounter()
        compiled = torch.compile(mlp().eval(), backend=counter, **options)
        with torch.no_grad():
            for batch in calls:
                compiled(torch.randn(batch, 16))
        return counter.frame_count

    def test_a_static_compile_recompiles_for_every_new_batch(self):
        self.assertEqual(self.frames([2, 3, 4, 2, 5], dynamic=False), 4)

    def test_by_default_the_second_batch_recompiles_once_as_dynamic(self):
        # Automatic dynamic shapes: the first call specialises on its batch, the second
        # batch seen recompiles with the batch symbolic, and later batches reuse it.
        self.assertEqual(self.frames([2, 3, 4, 2, 5]), 2)

    def test_it_compiles_at_the_first_call_once_more_at_a_second_batch_and_at_a_mode_switch(self):
        # Dynamo's frames compiled after each call: three batches, then the same batch in
        # train(). Automatic dynamic shapes: the second batch recompiles with the batch
        # symbolic, and the third reuses that graph; the mode's guard fails at train().
        counter = CompileCounter()
        module = mlp().eval()
        compiled = torch.compile(module, backend=counter)
        after = []
        for batch in (2, 3, 4):
            compiled(torch.randn(batch, 16))
            after.append(counter.frame_count)
        module.train()
        compiled(torch.randn(4, 16))
        after.append(counter.frame_count)
        self.assertEqual(after, [1, 2, 2, 3])

    def test_switching_to_train_recompiles(self):
        counter = CompileCounter()
        module = mlp().eval()
        compiled = torch.compile(module, backend=counter)
        x = torch.randn(4, 16)
        compiled(x)
        module.train()
        compiled(x)
        self.assertEqual(counter.frame_count, 2)


if __name__ == "__main__":
    unittest.main()
