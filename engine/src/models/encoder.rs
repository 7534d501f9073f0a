//! The transformer encoder (Dropout + LayerNorm), written op by op as
//! `python/gradless/models.py`'s EncoderLayer is. Its variables are named as that file's
//! nn.Sequential of EncoderLayers names them (`{layer}.in_proj.weight`, ...).

use tch::nn::{self, ModuleT};
use tch::Tensor;

use super::Net;
use crate::trace::{attention_flops, linear_flops, Probe};

/// Width of the transformer's token embeddings (its input is `[batch, seq, D_MODEL]`).
pub const D_MODEL: i64 = 256;
const HEADS: i64 = 4;
const FF: i64 = 1024;
const LAYERS: i64 = 4;
const DROPOUT: f64 = 0.1;

/// `nn.TransformerEncoder(nn.TransformerEncoderLayer(256, 4, 1024, 0.1, batch_first=True), 4)`
/// in its post-norm form, written out so that every op is visible to the measurement.
#[derive(Debug)]
pub(super) struct Transformer {
    layers: Vec<EncoderLayer>,
}

impl Transformer {
    pub(super) fn new(p: &nn::Path) -> Transformer {
        let layers = (0..LAYERS)
            .map(|i| EncoderLayer::new(&(p / i.to_string()), i))
            .collect();
        Transformer { layers }
    }
}

impl Net for Transformer {
    fn forward_probed(&self, input: &Tensor, train: bool, probe: &mut Probe<'_>) -> Tensor {
        let mut x = input.shallow_clone();
        for layer in &self.layers {
            x = layer.forward(&x, train, probe);
        }
        x
    }
}
module_via_net!(Transformer);

#[derive(Debug)]
pub(super) struct EncoderLayer {
    in_proj: nn::Linear,
    out_proj: nn::Linear,
    linear1: nn::Linear,
    linear2: nn::Linear,
    norm1: nn::LayerNorm,
    norm2: nn::LayerNorm,
    /// The probe's names for this layer's modules, in execution order.
    names: [String; 7],
}

impl EncoderLayer {
    pub(super) fn new(p: &nn::Path, index: i64) -> Self {
        let ln = || nn::LayerNormConfig::default();
        let names = [
            "self_attn.in_proj",
            "self_attn.sdpa",
            "self_attn.out_proj",
            "norm1",
            "linear1",
            "linear2",
            "norm2",
        ]
        .map(|m| format!("layers.{index}.{m}"));
        EncoderLayer {
            in_proj: nn::linear(p / "in_proj", D_MODEL, 3 * D_MODEL, Default::default()),
            out_proj: nn::linear(p / "out_proj", D_MODEL, D_MODEL, Default::default()),
            linear1: nn::linear(p / "linear1", D_MODEL, FF, Default::default()),
            linear2: nn::linear(p / "linear2", FF, D_MODEL, Default::default()),
            norm1: nn::layer_norm(p / "norm1", vec![D_MODEL], ln()),
            norm2: nn::layer_norm(p / "norm2", vec![D_MODEL], ln()),
            names,
        }
    }
}

impl EncoderLayer {
    // Mirrors gradless.models's EncoderLayer.forward; see the module docs for why each
    // intermediate gets its own statement.
    fn forward(&self, input: &Tensor, train: bool, probe: &mut Probe<'_>) -> Tensor {
        let (b, s, d) = input
            .size3()
            .expect("transformer input is [batch, seq, d_model]");
        let [in_proj, sdpa, out_proj, norm1, linear1, linear2, norm2] = &self.names;
        let projected = input.apply(&self.in_proj);
        probe.mark(in_proj, &projected, || {
            linear_flops(&self.in_proj, &projected)
        });
        let qkv = projected
            .view([b, s, 3, HEADS, d / HEADS])
            .permute([2, 0, 3, 1, 4]);
        drop(projected);
        let (q, k, v) = (qkv.get(0), qkv.get(1), qkv.get(2));
        // Attention dropout, like nn.MultiheadAttention's, only in training.
        let p = if train { DROPOUT } else { 0.0 };
        let mut attn =
            Tensor::scaled_dot_product_attention(&q, &k, &v, None::<Tensor>, p, false, None, false);
        probe.mark(sdpa, &attn, || attention_flops(&q, &k));
        attn = {
            let merged = attn.transpose(1, 2).reshape([b, s, d]);
            merged.apply(&self.out_proj)
        };
        probe.mark(out_proj, &attn, || linear_flops(&self.out_proj, &attn));
        let x = {
            let dropped = attn.dropout(DROPOUT, train);
            let sum = input + &dropped;
            drop(dropped);
            sum.apply(&self.norm1)
        };
        probe.mark(norm1, &x, || 0);
        let ff = {
            let hidden = x.apply(&self.linear1);
            let activated = hidden.relu();
            drop(hidden);
            let dropped = activated.dropout(DROPOUT, train);
            drop(activated);
            probe.mark(linear1, &dropped, || linear_flops(&self.linear1, &dropped));
            dropped.apply(&self.linear2)
        };
        probe.mark(linear2, &ff, || linear_flops(&self.linear2, &ff));
        let sum = &x + ff.dropout(DROPOUT, train);
        let out = sum.apply(&self.norm2);
        drop(sum);
        probe.mark(norm2, &out, || 0);
        out
    }
}
