"""TF32's switches, observed in the PyTorch Gradless links (run by scripts/test.sh).

The tf32 card's statements name these tests. What they pin down is CPU-observable: the
switches are plain flags of ATen's global context (aten/src/ATen/Context.cpp), read and set
without a GPU. PyTorch 2.11 has two spellings of them: the old booleans
(torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
torch.set_float32_matmul_precision) and the per-backend, per-op fp32_precision settings
(torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision, ...).
Context.cpp keeps both in one state: Context::setAllowTF32CuBLAS writes the old matmul
precision and the new CUDA matmul setting ("tf32" or "ieee"); Context::setAllowTF32CuDNN
writes the new CUDA conv and rnn settings ("tf32" or "none") and its own boolean;
Context::allowTF32CuBLAS and Context::allowTF32CuDNN (what the old switches read) raise
when the two spellings disagree. The kernels read the new settings: cuBLAS's handle gets
its TF32 math mode from the CUDA matmul setting (CublasHandlePool.cpp), and a convolution
hands cuDNN allowTF32CuDNN(CONV), the CUDA conv setting (Convolution.cpp). What they do
with them needs a GPU: the tf32 card measures the matmul there.
"""
import json
import subprocess
import sys
import unittest

import torch

B = torch.backends


def in_a_fresh_process(code):
    """What `code` prints (JSON) in a new interpreter: the defaults, untouched by any test."""
    out = subprocess.run([sys.executable, "-c", "import json, torch\n" + code], check=True, capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout.strip().splitlines()[-1])


SWITCHES = """
B = torch.backends
print(json.dumps({
    "matmul.allow_tf32": B.cuda.matmul.allow_tf32,
    "cudnn.allow_tf32": B.cudnn.allow_tf32,
    "matmul.fp32_precision": B.cuda.matmul.fp32_precision,
    "conv.fp32_precision": B.cudnn.conv.fp32_precision,
    "rnn.fp32_precision": B.cudnn.rnn.fp32_precision,
    "cuda.all.fp32_precision": B.cudnn.fp32_precision,
    "generic.fp32_precision": B.fp32_precision,
    "float32_matmul_precision": torch.get_float32_matmul_precision(),
}))
"""


def restore_defaults():
    """Back to the state a fresh process starts in (as the defaults test reads it)."""
    torch.set_float32_matmul_precision("highest")
    B.cuda.matmul.fp32_precision = "none"
    B.mkldnn.matmul.fp32_precision = "none"
    B.cudnn.allow_tf32 = True


class Defaults(unittest.TestCase):
    def test_tf32_is_off_for_matmuls_and_on_for_convolutions_by_default(self):
        d = in_a_fresh_process(SWITCHES)
        # The old spelling.
        self.assertIs(d["matmul.allow_tf32"], False)
        self.assertEqual(d["float32_matmul_precision"], "highest")
        self.assertIs(d["cudnn.allow_tf32"], True)
        # The new spelling of the same: "none" defers to the parent setting (cuda, then
        # generic), which is "none" too: no TF32; cuDNN's convolutions and RNNs: "tf32".
        self.assertEqual(d["matmul.fp32_precision"], "none")
        self.assertEqual(d["cuda.all.fp32_precision"], "none")
        self.assertEqual(d["generic.fp32_precision"], "none")
        self.assertEqual(d["conv.fp32_precision"], "tf32")
        self.assertEqual(d["rnn.fp32_precision"], "tf32")


class OneState(unittest.TestCase):
    def setUp(self):
        restore_defaults()
        self.addCleanup(restore_defaults)

    def test_the_old_switches_write_the_new_settings(self):
        B.cuda.matmul.allow_tf32 = True
        self.assertEqual(B.cuda.matmul.fp32_precision, "tf32")
        self.assertEqual(torch.get_float32_matmul_precision(), "high")
        B.cuda.matmul.allow_tf32 = False
        self.assertEqual(B.cuda.matmul.fp32_precision, "ieee")
        self.assertEqual(torch.get_float32_matmul_precision(), "highest")
        # set_float32_matmul_precision("high") is the same switch, and reaches oneDNN's
        # matmuls too.
        torch.set_float32_matmul_precision("high")
        self.assertIs(B.cuda.matmul.allow_tf32, True)
        self.assertEqual(B.cuda.matmul.fp32_precision, "tf32")
        self.assertEqual(B.mkldnn.matmul.fp32_precision, "tf32")
        # cuDNN's switch writes its convolutions' and RNNs' settings.
        B.cudnn.allow_tf32 = False
        self.assertEqual((B.cudnn.conv.fp32_precision, B.cudnn.rnn.fp32_precision), ("none", "none"))
        B.cudnn.allow_tf32 = True
        self.assertEqual((B.cudnn.conv.fp32_precision, B.cudnn.rnn.fp32_precision), ("tf32", "tf32"))

    def test_mixing_the_two_spellings_can_raise(self):
        # Matmuls: the new setting alone leaves the old matmul precision at "highest", and
        # Context::allowTF32CuBLAS refuses to answer for two states that disagree...
        B.cuda.matmul.fp32_precision = "tf32"
        with self.assertRaises(RuntimeError):
            B.cuda.matmul.allow_tf32
        # ... while "ieee" agrees with "highest": no TF32 either way.
        B.cuda.matmul.fp32_precision = "ieee"
        self.assertIs(B.cuda.matmul.allow_tf32, False)
        # cuDNN: Context::allowTF32CuDNN answers only while the conv and rnn settings and
        # the old boolean (which only allow_tf32 writes) agree: the new settings alone,
        # even both turned off, leave the old switch unreadable.
        B.cudnn.conv.fp32_precision = "ieee"
        B.cudnn.rnn.fp32_precision = "ieee"
        with self.assertRaises(RuntimeError):
            B.cudnn.allow_tf32

if __name__ == "__main__":
    unittest.main()
