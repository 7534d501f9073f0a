//! A decoder block's linear layer: dense (`x @ W.T`), or weight-only quantized and run by
//! PyTorch's own packed kernels, quantized as gpt-fast quantizes (`quantize.py`):
//!
//! - int8, per output channel: `scale = max(|min(w, 0)|, max(w, 0)) / 127.5` (at least
//!   fp32's eps), `q = clamp(round(w / scale), -128, 127)`; run by
//!   `torch._weight_int8pack_mm(x, q, scale)`;
//! - int4, per group of `group` input columns: `scale = max(max - min, 1e-6) / 15`,
//!   `zero = min + 8 × scale`, `q = clamp(round((w − (zero − 8 × scale)) / scale), 0, 15)`,
//!   so `w ≈ (q − 8) × scale + zero`; packed two to a byte by
//!   `torch._convert_weight_to_int4pack_for_cpu` (CUDA: `_convert_weight_to_int4pack` from
//!   the nibbles packed into uint8) and run by `torch._weight_int4pack_mm(_for_cpu)`, with
//!   the scales and zeros as one `[K / group, N, 2]` tensor.
//!
//! The statistics are computed in fp32 from the weight as stored; the scales and zeros are
//! kept in the activation dtype (the weight's), which the kernels require of them.

use protocol::LinearQuant;
use tch::{Device, Kind, Tensor};

/// One linear layer's weight, as its forward pass reads it.
#[derive(Debug)]
pub enum Linear {
    /// `[out, in]` in the activation dtype.
    Dense(Tensor),
    /// int8 `[out, in]` and one scale per output channel `[out]`.
    Int8 { weight: Tensor, scales: Tensor },
    /// The packed 4-bit weight (`[out, in / 2]` uint8 on the CPU), the scales and zeros
    /// `[in / group, out, 2]`, the group size and the output width.
    Int4 {
        packed: Tensor,
        scales_zeros: Tensor,
        group: i64,
        out: i64,
    },
}

impl Linear {
    /// `x @ W.T (+ bias)` for `x` of any leading shape `[..., in]`.
    pub fn apply(&self, x: &Tensor, bias: Option<&Tensor>) -> Tensor {
        let (weight, scales) = match self {
            Linear::Dense(w) => return x.linear(w, bias),
            Linear::Int8 { weight, scales } => (weight, scales),
            Linear::Int4 { packed, scales_zeros, .. } => (packed, scales_zeros),
        };
        let mut shape = x.size();
        let k = shape[shape.len() - 1];
        let x2 = x.reshape([-1, k]);
        let (y, n) = match self {
            Linear::Int4 { group, out, .. } => match x.device() {
                Device::Cpu => (x2.internal_weight_int4pack_mm_for_cpu(weight, *group, scales), *out),
                _ => (x2.internal_weight_int4pack_mm(weight, *group, scales), *out),
            },
            _ => (x2.internal_weight_int8pack_mm(weight, scales), weight.size()[0]),
        };
        let last = shape.len() - 1;
        shape[last] = n;
        let y = y.view(shape.as_slice());
        match bias {
            Some(b) => y + b,
            None => y,
        }
    }

    /// The tensors it holds, with the names they take in the model's VarStore beside
    /// `prefix` (`model.layers.0.self_attn.q_proj`).
    pub fn named(&self, prefix: &str) -> Vec<(String, &Tensor)> {
        match self {
            Linear::Dense(w) => vec![(format!("{prefix}.weight"), w)],
            Linear::Int8 { weight, scales } => vec![
                (format!("{prefix}.weight_int8"), weight),
                (format!("{prefix}.scales"), scales),
            ],
            Linear::Int4 { packed, scales_zeros, .. } => vec![
                (format!("{prefix}.weight_int4pack"), packed),
                (format!("{prefix}.scales_and_zeros"), scales_zeros),
            ],
        }
    }

    /// Bytes of its tensors.
    pub fn bytes(&self) -> u64 {
        self.named("")
            .iter()
            .map(|(_, t)| t.numel() as u64 * t.kind().elt_size_in_bytes() as u64)
            .sum()
    }

    /// The dense weight (`None` once quantized).
    pub fn dense(&self) -> Option<&Tensor> {
        match self {
            Linear::Dense(w) => Some(w),
            _ => None,
        }
    }
}

/// int4's packing tile along the input width: the largest of 8, 4, 2 that divides
/// `in / 16` (CUDA's tinygemm needs `in % (tiles × 16) == 0`; the CPU kernel ignores it).
pub fn inner_k_tiles(k: i64) -> i64 {
    [8, 4, 2].into_iter().find(|t| k % (t * 16) == 0).unwrap_or(1)
}

/// `w` quantized as `q` says and dequantized again, in `w`'s dtype: the values the packed
/// kernels multiply by (int8: `q × scale`; int4: `(q − 8) × scale + zero`), for a pass that
/// runs them through a dense matmul. The quality measurement's long passes use it: the
/// packed kernels are built for decode's few rows, and on a CPU they take tens of times
/// fp32's time for a 64 KiB slice. Equal to the kernels' product up to rounding order (a
/// test compares the two).
pub fn dequantized(w: &Tensor, q: LinearQuant) -> Tensor {
    let _no_grad = tch::no_grad_guard();
    let act = w.kind();
    match quantize(w, q) {
        Linear::Dense(d) => d,
        Linear::Int8 { weight, scales } => (weight.to_kind(Kind::Float) * scales.to_kind(Kind::Float).unsqueeze(1)).to_kind(act),
        Linear::Int4 { .. } => {
            // The same statistics and rounding as `quantize`'s int4 arm, kept unpacked.
            let LinearQuant::Int4 { group_size } = q else { unreachable!("only int4 packs as int4") };
            let w32 = w.detach().to_kind(Kind::Float);
            let (n, k) = (w.size()[0], w.size()[1]);
            let g = group_size as i64;
            let groups = w32.reshape([n, k / g, g]);
            let hi = groups.amax(2, true);
            let lo = groups.amin(2, true);
            let scales = ((&hi - &lo).clamp_min(1e-6) / 15.0).to_kind(act).to_kind(Kind::Float);
            let zeros = (&lo + &scales * 8.0).to_kind(act).to_kind(Kind::Float);
            let min = &zeros - &scales * 8.0;
            let ints = ((&groups - &min) / &scales).round().clamp(0.0, 15.0);
            ((ints - 8.0) * &scales + &zeros).reshape([n, k]).to_kind(act)
        }
    }
}

/// `w` (`[out, in]`, the activation dtype) quantized as `q` says.
pub fn quantize(weight: &Tensor, q: LinearQuant) -> Linear {
    let _no_grad = tch::no_grad_guard();
    if q.is_none() {
        return Linear::Dense(weight.shallow_clone());
    }
    // The packing ops take row-major `[out, in]` (a CPU run in fp32 lays a decoder's dense
    // weights out column-major: `super::WeightLayout`).
    let w = &weight.contiguous();
    let act = w.kind();
    let w32 = w.detach().to_kind(Kind::Float);
    match q {
        LinearQuant::None => unreachable!("returned above"),
        LinearQuant::Int8 => {
            let zero = Tensor::zeros([1], (Kind::Float, w.device()));
            let lo = w32.amin(1, false).minimum(&zero);
            let hi = w32.amax(1, false).maximum(&zero);
            let scales = (lo.neg().maximum(&hi) / 127.5)
                .clamp_min(f32::EPSILON as f64)
                .to_kind(act);
            let weight = (&w32 / scales.to_kind(Kind::Float).unsqueeze(1))
                .round()
                .clamp(-128.0, 127.0)
                .to_kind(Kind::Int8);
            Linear::Int8 { weight, scales }
        }
        LinearQuant::Int4 { group_size } => {
            let (n, k) = (w.size()[0], w.size()[1]);
            let g = group_size as i64;
            let groups = w32.reshape([n, k / g, g]);
            let hi = groups.amax(2, true);
            let lo = groups.amin(2, true);
            let scales = ((&hi - &lo).clamp_min(1e-6) / 15.0).to_kind(act);
            let zeros = (&lo + scales.to_kind(Kind::Float) * 8.0).to_kind(act);
            let (s32, z32) = (scales.to_kind(Kind::Float), zeros.to_kind(Kind::Float));
            let min = &z32 - &s32 * 8.0;
            let ints = ((&groups - &min) / &s32)
                .round()
                .clamp(0.0, 15.0)
                .to_kind(Kind::Int)
                .reshape([n, k]);
            let tiles = inner_k_tiles(k);
            let packed = match w.device() {
                Device::Cpu => ints.internal_convert_weight_to_int4pack_for_cpu(tiles),
                _ => {
                    // Two nibbles per byte, the even column high (what the CUDA op takes).
                    let even = ints.slice(1, 0, k, 2);
                    let odd = ints.slice(1, 1, k, 2);
                    let bytes = (even * 16 + odd).to_kind(Kind::Uint8);
                    bytes.internal_convert_weight_to_int4pack(tiles)
                }
            };
            // [n, k/g, 1] each → [n, k/g, 2] → [k/g, n, 2].
            let scales_zeros = Tensor::cat(&[scales, zeros], 2).transpose(0, 1).contiguous();
            Linear::Int4 {
                packed,
                scales_zeros,
                group: g,
                out: n,
            }
        }
    }
}
