"""What train(), eval() and torch.no_grad() change in a forward pass, observed in the PyTorch
Gradless links (run by scripts/test.sh).

The seed-table card's statements name these tests (its autocast row's cast cache is
test_autocast.py's). CPU only: what autograd saves for a backward pass, and what eval()
switches, are the same on every device.
"""
import unittest

import torch


def conv_bn_relu():
    """Two Conv -> BatchNorm -> ReLU blocks, as a ResNet stacks them (no dropout)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1, bias=False),
        torch.nn.BatchNorm2d(16),
        torch.nn.ReLU(inplace=True),
        torch.nn.Conv2d(16, 16, 3, padding=1, bias=False),
        torch.nn.BatchNorm2d(16),
        torch.nn.ReLU(inplace=True),
    )


def saved_for_backward(net, train, grad_mode):
    """Bytes autograd saves for a backward pass during one forward pass, and the output."""
    net.train(train)
    x = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    saved = []

    def pack(t):
        saved.append(t.numel() * t.element_size())
        return t

    with grad_mode(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = net(x)
    return sum(saved), y


class TrainEvalNoGrad(unittest.TestCase):
    def test_eval_leaves_autograd_on(self):
        net = conv_bn_relu()
        net.eval()
        self.assertFalse(net.training)
        y = net(torch.randn(2, 3, 8, 8))
        # The graph is recorded as in train(): eval() is not a grad mode.
        self.assertTrue(torch.is_grad_enabled())
        self.assertTrue(y.requires_grad)
        self.assertIsNotNone(y.grad_fn)

    def test_eval_changes_batch_norm_to_its_running_statistics(self):
        bn = torch.nn.BatchNorm2d(4)
        x = torch.randn(8, 4, 5, 5) * 3 + 2
        with torch.no_grad():
            bn.eval()
            y_eval = bn(x)
            # Fresh running statistics (mean 0, variance 1): eval() leaves x as it is.
            torch.testing.assert_close(y_eval, x / (1 + bn.eps) ** 0.5)
            bn.train()
            y_train = bn(x)
        # train(): the batch's own statistics, so the output is normalised...
        self.assertLess(y_train.mean().abs().item(), 1e-5)
        # ... and the running statistics move.
        self.assertGreater(bn.running_mean.abs().sum().item(), 0)

    def test_train_and_eval_save_the_same_activations_for_backward(self):
        net = conv_bn_relu()
        train_bytes, _ = saved_for_backward(net, True, torch.enable_grad)
        eval_bytes, _ = saved_for_backward(net, False, torch.enable_grad)
        # Every convolution's and batch norm's input, every ReLU's output: over a MiB here.
        self.assertGreater(eval_bytes, 1 << 20)
        # The two differ only by batch norm's per-channel statistics: at most two fp32
        # vectors of 16 channels per batch norm (the batch's mean and inverse deviation in
        # train(), the running ones in eval()), far below 1%.
        self.assertLessEqual(abs(train_bytes - eval_bytes), 2 * 2 * 16 * 4)
        self.assertLess(abs(train_bytes - eval_bytes), 0.01 * train_bytes)

    def test_no_grad_saves_nothing_for_backward(self):
        net = conv_bn_relu()
        for train in (True, False):
            saved, y = saved_for_backward(net, train, torch.no_grad)
            self.assertEqual(saved, 0)
            self.assertFalse(y.requires_grad)
            self.assertIsNone(y.grad_fn)


class AutocastDtypes(unittest.TestCase):
    def test_autocast_defaults_to_bf16_on_a_cpu_and_fp16_on_cuda(self):
        self.assertEqual(torch.get_autocast_dtype("cpu"), torch.bfloat16)
        self.assertEqual(torch.get_autocast_dtype("cuda"), torch.float16)


if __name__ == "__main__":
    unittest.main()
