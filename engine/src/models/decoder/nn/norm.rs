//! RMSNorm, the two ways the decoder families scale it: `weight × normed` (transformers'
//! LlamaRMSNorm: normalise in fp32, cast back, then scale) and `(1 + weight) × normed` in
//! fp32 (Gemma's), with the CPU's one-op kernel where it applies.

use tch::nn;
use tch::{Device, Kind, Tensor};

use super::weights::tensor_bytes;

/// An RMSNorm's weight and how it scales.
#[derive(Debug)]
pub(crate) struct Norm {
    pub weight: Tensor,
    eps: f64,
    /// Scale by `1 + weight` in fp32, then cast back (Gemma's); else transformers'
    /// LlamaRMSNorm.
    gemma: bool,
}

impl Norm {
    /// A norm of `width` under `p`; `one_plus`: the scale is `1 + weight` in fp32, as
    /// Gemma's is (its weight then starts at 0, as transformers initialises it; at 1
    /// otherwise).
    pub fn new(p: nn::Path, width: i64, eps: f64, one_plus: bool) -> Norm {
        let init = nn::Init::Const(if one_plus { 0.0 } else { 1.0 });
        Norm {
            weight: p.var("weight", &[width], init),
            eps,
            gemma: one_plus,
        }
    }

    pub fn apply(&self, x: &Tensor) -> Tensor {
        match self.in_one_op(x, None) {
            Some(y) => y,
            None => self.normalize(x, &self.weight),
        }
    }

    /// fp32 on the CPU with no gradient recorded: the extension's one-op RMSNorm
    /// ([`crate::torch_ext::rms_norm_f32`]), where libtorch's composite dispatches a dozen
    /// ops; `None` elsewhere. `second`: another norm's weight for the heads from `split` on,
    /// of `heads` per row group.
    fn in_one_op(&self, x: &Tensor, second: Option<(&Tensor, i64, i64)>) -> Option<Tensor> {
        let one_op = x.kind() == Kind::Float
            && self.weight.kind() == Kind::Float
            && x.device() == Device::Cpu
            && !crate::torch_ext::grad_enabled();
        one_op
            .then(|| crate::torch_ext::rms_norm_f32(x, &self.weight, second, self.eps, self.gemma).ok())
            .flatten()
    }

    /// The queries' and the keys' norms over `x` `[batch, tokens, heads + kv_heads,
    /// head_dim]` (the query heads first) in one pass: the same products as `q_norm` on the
    /// query heads and `k_norm` on the key heads, each head normalised on its own, with the
    /// two weights stacked per head (`[heads + kv_heads, head_dim]`). One norm instead of
    /// two, which a decode step at batch 1 pays per op, twice per layer.
    pub fn apply_heads(q_norm: &Norm, k_norm: &Norm, x: &Tensor, heads: i64) -> Tensor {
        let (n, d) = (x.size()[2], x.size()[3]);
        if let Some(y) = q_norm.in_one_op(x, Some((&k_norm.weight, heads, n))) {
            return y;
        }
        let weight = Tensor::cat(
            &[q_norm.weight.expand([heads, d], false), k_norm.weight.expand([n - heads, d], false)],
            0,
        );
        q_norm.normalize(x, &weight)
    }

    /// Normalises `x` over its last dimension and scales by `weight` (`[width]`, or any
    /// shape that broadcasts against `x`), in this norm's style.
    fn normalize(&self, x: &Tensor, weight: &Tensor) -> Tensor {
        let kind = x.kind();
        if kind == Kind::Float && weight.kind() == Kind::Float {
            // fp32: no casts, so the six ops of libtorch's own rms_norm (`x * rsqrt(mean(x²)
            // + eps)`, then the scale), the same products to the bit, without the casts
            // and copies its composite dispatches around them (3% of a decode step on
            // qwen3_tiny: 1.61 → 1.56 ms p50, interleaved). Gemma's scale is `1 + weight`.
            let scale = match self.gemma {
                true => weight + 1.0,
                false => weight.shallow_clone(),
            };
            let inv = (x.square().mean_dim(-1, true, None) + self.eps).rsqrt();
            return x * inv * scale;
        }
        let x32 = x.to_kind(Kind::Float);
        let inv = (x32.square().mean_dim(-1, true, Kind::Float) + self.eps).rsqrt();
        let normed = x32 * inv;
        match self.gemma {
            true => (normed * (weight.to_kind(Kind::Float) + 1.0)).to_kind(kind),
            // transformers' LlamaRMSNorm: normalise in fp32, cast back, then scale.
            false => weight * normed.to_kind(kind),
        }
    }

    pub fn bytes(&self) -> u64 {
        tensor_bytes(&self.weight)
    }
}
