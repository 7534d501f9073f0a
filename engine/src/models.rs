//! The model zoo: architectures with random weights (weights change neither memory nor
//! latency), built with tch on the device that will run them. The torchvision ones come
//! from `tch::vision` and have exactly torchvision's parameter counts; the MLP and the
//! transformer are defined here and mirrored in `bench/peer.py`.

use protocol::ModelId;
use tch::nn::{self, ModuleT};
use tch::{Device, Kind, Tensor};

/// Width of the transformer's token embeddings (its input is `[batch, seq, D_MODEL]`).
pub const D_MODEL: i64 = 256;
const HEADS: i64 = 4;
const FF: i64 = 1024;
const LAYERS: i64 = 4;
const DROPOUT: f64 = 0.1;
const MLP_HIDDEN: i64 = 512;
const MLP_DROPOUT: f64 = 0.5;
const CLASSES: i64 = 1000;

/// A built model: its variables (weights and buffers) and its forward function.
pub struct Model {
    pub id: ModelId,
    pub vs: nn::VarStore,
    pub net: Box<dyn ModuleT>,
    /// For the MLP the input width is part of the weights; for the others 0.
    pub input_width: u32,
}

impl Model {
    /// Builds `id` with random weights on `device`. `input_size` matters only for the MLP.
    pub fn build(id: ModelId, device: Device, input_size: u32) -> Model {
        let vs = nn::VarStore::new(device);
        let root = vs.root();
        let (net, input_width): (Box<dyn ModuleT>, u32) = match id {
            ModelId::TinyMlp => (Box::new(tiny_mlp(&root, input_size as i64)), input_size),
            ModelId::Resnet18 => (Box::new(tch::vision::resnet::resnet18(&root, CLASSES)), 0),
            ModelId::Resnet50 => (Box::new(tch::vision::resnet::resnet50(&root, CLASSES)), 0),
            ModelId::MobilenetV2 => (Box::new(tch::vision::mobilenet::v2(&root, CLASSES)), 0),
            ModelId::Transformer => (Box::new(transformer(&root)), 0),
        };
        Model { id, vs, net, input_width }
    }

    /// Trainable parameters, as `sum(p.numel() for p in model.parameters())` counts them.
    pub fn parameters(&self) -> u64 {
        self.vs.trainable_variables().iter().map(|t| t.numel() as u64).sum()
    }

    /// A random input batch for this model on `device`.
    pub fn input(&self, batch: u32, input_size: u32, device: Device) -> Tensor {
        let b = batch as i64;
        let s = input_size as i64;
        let shape: Vec<i64> = match self.id {
            ModelId::TinyMlp => vec![b, s],
            ModelId::Resnet18 | ModelId::Resnet50 | ModelId::MobilenetV2 => vec![b, 3, s, s],
            ModelId::Transformer => vec![b, s, D_MODEL],
        };
        Tensor::randn(shape, (Kind::Float, device))
    }

    /// Whether a cached model can serve a run with this input size.
    pub fn fits(&self, input_size: u32) -> bool {
        self.id != ModelId::TinyMlp || self.input_width == input_size
    }
}

/// Linear → BatchNorm → ReLU → Dropout, twice, then a linear head.
fn tiny_mlp(p: &nn::Path, features: i64) -> nn::SequentialT {
    nn::seq_t()
        .add(nn::linear(p / "fc1", features, MLP_HIDDEN, Default::default()))
        .add(nn::batch_norm1d(p / "bn1", MLP_HIDDEN, Default::default()))
        .add_fn(|x| x.relu())
        .add_fn_t(|x, train| x.dropout(MLP_DROPOUT, train))
        .add(nn::linear(p / "fc2", MLP_HIDDEN, MLP_HIDDEN, Default::default()))
        .add(nn::batch_norm1d(p / "bn2", MLP_HIDDEN, Default::default()))
        .add_fn(|x| x.relu())
        .add_fn_t(|x, train| x.dropout(MLP_DROPOUT, train))
        .add(nn::linear(p / "fc3", MLP_HIDDEN, 10, Default::default()))
}

/// `nn.TransformerEncoder(nn.TransformerEncoderLayer(256, 4, 1024, 0.1, batch_first=True), 4)`
/// in its post-norm form, written out so that every op is visible to the measurement.
fn transformer(p: &nn::Path) -> nn::SequentialT {
    let mut seq = nn::seq_t();
    for i in 0..LAYERS {
        seq = seq.add(EncoderLayer::new(&(p / format!("layer{i}"))));
    }
    seq
}

#[derive(Debug)]
struct EncoderLayer {
    in_proj: nn::Linear,
    out_proj: nn::Linear,
    linear1: nn::Linear,
    linear2: nn::Linear,
    norm1: nn::LayerNorm,
    norm2: nn::LayerNorm,
}

impl EncoderLayer {
    fn new(p: &nn::Path) -> Self {
        let ln = || nn::LayerNormConfig::default();
        EncoderLayer {
            in_proj: nn::linear(p / "in_proj", D_MODEL, 3 * D_MODEL, Default::default()),
            out_proj: nn::linear(p / "out_proj", D_MODEL, D_MODEL, Default::default()),
            linear1: nn::linear(p / "linear1", D_MODEL, FF, Default::default()),
            linear2: nn::linear(p / "linear2", FF, D_MODEL, Default::default()),
            norm1: nn::layer_norm(p / "norm1", vec![D_MODEL], ln()),
            norm2: nn::layer_norm(p / "norm2", vec![D_MODEL], ln()),
        }
    }
}

impl ModuleT for EncoderLayer {
    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        let (b, s, d) = x.size3().expect("transformer input is [batch, seq, d_model]");
        let qkv = x.apply(&self.in_proj).view([b, s, 3, HEADS, d / HEADS]).permute([2, 0, 3, 1, 4]);
        let (q, k, v) = (qkv.get(0), qkv.get(1), qkv.get(2));
        // Attention dropout, like nn.MultiheadAttention's, only in training.
        let p = if train { DROPOUT } else { 0.0 };
        let attn = Tensor::scaled_dot_product_attention(&q, &k, &v, None::<Tensor>, p, false, None, false);
        let attn = attn.transpose(1, 2).reshape([b, s, d]).apply(&self.out_proj);
        let x = (x + attn.dropout(DROPOUT, train)).apply(&self.norm1);
        let ff = x.apply(&self.linear1).relu().dropout(DROPOUT, train).apply(&self.linear2);
        (&x + ff.dropout(DROPOUT, train)).apply(&self.norm2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torchvision_architectures_have_torchvision_parameter_counts() {
        // The counts torchvision prints for these architectures (1000 classes).
        let count = |id| Model::build(id, Device::Cpu, 224).parameters();
        assert_eq!(count(ModelId::Resnet18), 11_689_512);
        assert_eq!(count(ModelId::MobilenetV2), 3_504_872);
    }

    #[test]
    fn every_model_runs_a_forward_pass_with_the_expected_batch() {
        for id in ModelId::ALL {
            if id == ModelId::Resnet50 {
                continue; // covered by the measurement tests; slow to build on 2 cores
            }
            let size = if matches!(id, ModelId::Resnet18 | ModelId::MobilenetV2) { 64 } else { id.input().default };
            let model = Model::build(id, Device::Cpu, size);
            let x = model.input(2, size, Device::Cpu);
            let y = tch::no_grad(|| model.net.forward_t(&x, false));
            assert_eq!(y.size()[0], 2, "{id}");
        }
    }
}
