//! The gated MLP, `down(act(gate(x)) × up(x))`, with its two activations (SwiGLU's SiLU,
//! GeGLU's tanh GELU): gate and up as separate projections, stacked into one matmul where
//! no gradient is recorded, or fused in the checkpoint (Phi-3's `gate_up_proj`).

use tch::nn;
use tch::Tensor;

use super::super::linear::Linear;
use super::super::WeightLayout;
use super::weights::{fuse, fused_in, lay_out_weight, MatrixInit};

/// The gated MLP's activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Act {
    /// SwiGLU's.
    Silu,
    /// GeGLU's: GELU with the tanh approximation (`gelu_pytorch_tanh`).
    GeluTanh,
}

impl Act {
    fn apply(self, x: Tensor) -> Tensor {
        match self {
            Act::Silu => x.silu(),
            Act::GeluTanh => x.gelu("tanh"),
        }
    }

    /// In place (no gradient may be recorded through `x`).
    fn apply_(self, mut x: Tensor) -> Tensor {
        match self {
            Act::Silu => x.silu_(),
            Act::GeluTanh => x.gelu_("tanh"),
        }
    }
}

/// `down(act(gate(x)) × up(x))`.
#[derive(Debug)]
pub(crate) struct Gated {
    /// The gate projection; with `up` absent, Phi-3's fused `gate_up_proj`
    /// (`[2 × width, hidden]`: the gate's rows, then the up's).
    pub gate: Linear,
    pub up: Option<Linear>,
    pub down: Linear,
    /// gate and up stacked (`[2 × width, hidden]`, in the run's layout) when both are
    /// dense: their variables are views of it ([`Gated::lay_out`]), so one matmul computes
    /// both where no gradient is recorded.
    pub gate_up: Option<Tensor>,
}

impl Gated {
    pub fn new(p: &nn::Path, names: [&str; 3], width: i64, h: i64, init: MatrixInit) -> Gated {
        let w = |name: &str, out: i64, inp: i64| Linear::Dense(init.var(&(p / name), "weight", &[out, inp]));
        Gated {
            gate: w(names[0], width, h),
            up: Some(w(names[1], width, h)),
            down: w(names[2], h, width),
            gate_up: None,
        }
    }

    /// Phi-3's: one `gate_up_proj` and a `down_proj`.
    pub fn fused(p: &nn::Path, width: i64, h: i64, init: MatrixInit) -> Gated {
        let w = |name: &str, out: i64, inp: i64| Linear::Dense(init.var(&(p / name), "weight", &[out, inp]));
        Gated {
            gate: w("gate_up_proj", 2 * width, h),
            up: None,
            down: w("down_proj", h, width),
            gate_up: None,
        }
    }

    pub fn apply(&self, x: &Tensor, act: Act) -> Tensor {
        // transformers' `gate, up = gate_up_proj(x).chunk(2, dim=-1)`.
        let halves = |both: Tensor| {
            let width = both.size()[both.dim() - 1] / 2;
            (both.narrow(-1, 0, width), both.narrow(-1, width, width))
        };
        let stacked = self.gate_up.as_ref().filter(|_| !crate::torch_ext::grad_enabled());
        let (gated, up) = match (stacked, &self.up) {
            // One matmul. Gate and up are halves of one tensor that lives until the
            // product, so the activation goes in place into the gate's half (no gradient
            // is recorded here): the peak is the product and the two halves, as with two
            // separate projections.
            (Some(w), _) => {
                let (gate, up) = halves(x.linear::<&Tensor>(w, None));
                (act.apply_(gate), up)
            }
            (None, Some(up)) => {
                let (gate, up) = (self.gate.apply(x, None), up.apply(x, None));
                (act.apply(gate), up)
            }
            // Phi-3's `gate_up_proj`.
            (None, None) => {
                let (gate, up) = halves(self.gate.apply(x, None));
                (act.apply(gate), up)
            }
        };
        self.down.apply(&(gated * up), None)
    }

    /// Lays the weights out (see [`lay_out_weight`]), gate and up stacked when both are
    /// dense (see [`fuse`]).
    pub fn lay_out(&mut self, layout: WeightLayout) {
        match (self.gate.dense(), self.up.as_ref().and_then(Linear::dense)) {
            (Some(g), Some(u)) => {
                let ws = [g.shallow_clone(), u.shallow_clone()];
                if !fused_in(self.gate_up.as_ref(), &ws[0], layout) {
                    self.gate_up = Some(fuse(&ws, layout));
                }
            }
            (Some(g), None) => lay_out_weight(g, layout),
            _ => {}
        }
        if let Some(w) = self.down.dense() {
            lay_out_weight(w, layout);
        }
    }

    pub fn bytes(&self) -> u64 {
        self.gate.bytes() + self.up.as_ref().map_or(0, Linear::bytes) + self.down.bytes()
    }
}
