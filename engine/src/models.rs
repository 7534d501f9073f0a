//! The model zoo: architectures with random weights (weights change neither memory nor
//! latency), built with tch on the device that will run them.
//!
//! The forward passes are written statement by statement so that every intermediate tensor
//! is freed exactly when PyTorch frees it: a Rust method chain keeps all its temporaries
//! alive to the end of the statement, where Python drops each one as soon as the next op has
//! consumed it. ResNet and MobileNet-V2 follow torchvision 0.26 line for line (in-place
//! ReLUs and residual additions included), so peak memory matches PyTorch's; the MLP and
//! the transformer are mirrored in `bench/peer.py`.

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
    /// What building the model added to its device's allocated memory, as the device's
    /// meter counts it (on CUDA whole allocator blocks, not element bytes). The lab records
    /// it at build time; the leak check and the run's baseline use it. Until then it is
    /// [`Model::resident_bytes`].
    pub held_bytes: u64,
    /// The dtype and memory format of the weights (fp32, contiguous when built; see
    /// [`crate::lab::convert_model`]).
    pub weights: protocol::WeightsDtype,
    pub format: protocol::MemoryFormat,
}

impl Model {
    /// Builds `id` with random weights on `device`. `input_size` matters only for the MLP.
    pub fn build(id: ModelId, device: Device, input_size: u32) -> Model {
        let vs = nn::VarStore::new(device);
        let root = vs.root();
        let (net, input_width): (Box<dyn ModuleT>, u32) = match id {
            ModelId::TinyMlp => (Box::new(tiny_mlp(&root, input_size as i64)), input_size),
            ModelId::Resnet18 => (Box::new(ResNet::new(&root, false, [2, 2, 2, 2])), 0),
            ModelId::Resnet50 => (Box::new(ResNet::new(&root, true, [3, 4, 6, 3])), 0),
            ModelId::MobilenetV2 => (Box::new(MobileNetV2::new(&root)), 0),
            ModelId::Transformer => (Box::new(transformer(&root)), 0),
        };
        let mut model = Model {
            id,
            vs,
            net,
            input_width,
            held_bytes: 0,
            weights: protocol::WeightsDtype::Fp32,
            format: protocol::MemoryFormat::Contiguous,
        };
        model.held_bytes = model.resident_bytes();
        model
    }

    /// Trainable parameters, as `sum(p.numel() for p in model.parameters())` counts them.
    pub fn parameters(&self) -> u64 {
        self.vs
            .trainable_variables()
            .iter()
            .map(|t| t.numel() as u64)
            .sum()
    }

    /// Bytes of every weight and buffer (BatchNorm running statistics included): what the
    /// model holds on its device while it sits in the cache.
    pub fn resident_bytes(&self) -> u64 {
        self.vs
            .variables()
            .values()
            .map(|t| t.numel() as u64 * t.kind().elt_size_in_bytes() as u64)
            .sum()
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
        .add(nn::linear(
            p / "fc1",
            features,
            MLP_HIDDEN,
            Default::default(),
        ))
        .add(nn::batch_norm1d(p / "bn1", MLP_HIDDEN, Default::default()))
        .add_fn(|x| x.relu())
        .add_fn_t(|x, train| x.dropout(MLP_DROPOUT, train))
        .add(nn::linear(
            p / "fc2",
            MLP_HIDDEN,
            MLP_HIDDEN,
            Default::default(),
        ))
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
    // Mirrors bench/peer.py's EncoderLayer.forward; see the module docs for why each
    // intermediate gets its own statement.
    fn forward_t(&self, input: &Tensor, train: bool) -> Tensor {
        let (b, s, d) = input
            .size3()
            .expect("transformer input is [batch, seq, d_model]");
        let qkv = input
            .apply(&self.in_proj)
            .view([b, s, 3, HEADS, d / HEADS])
            .permute([2, 0, 3, 1, 4]);
        let (q, k, v) = (qkv.get(0), qkv.get(1), qkv.get(2));
        // Attention dropout, like nn.MultiheadAttention's, only in training.
        let p = if train { DROPOUT } else { 0.0 };
        let mut attn =
            Tensor::scaled_dot_product_attention(&q, &k, &v, None::<Tensor>, p, false, None, false);
        attn = {
            let merged = attn.transpose(1, 2).reshape([b, s, d]);
            merged.apply(&self.out_proj)
        };
        let x = {
            let dropped = attn.dropout(DROPOUT, train);
            let sum = input + &dropped;
            drop(dropped);
            sum.apply(&self.norm1)
        };
        let ff = {
            let hidden = x.apply(&self.linear1);
            let activated = hidden.relu();
            drop(hidden);
            let dropped = activated.dropout(DROPOUT, train);
            drop(activated);
            dropped.apply(&self.linear2)
        };
        let sum = &x + ff.dropout(DROPOUT, train);
        sum.apply(&self.norm2)
    }
}

/// Convolution without bias followed by BatchNorm, as torchvision pairs them.
#[derive(Debug)]
struct ConvBn {
    conv: nn::Conv2D,
    bn: nn::BatchNorm,
}

impl ConvBn {
    #[allow(clippy::too_many_arguments)]
    fn new(
        p: &nn::Path,
        cin: i64,
        cout: i64,
        k: i64,
        stride: i64,
        padding: i64,
        groups: i64,
    ) -> ConvBn {
        let config = nn::ConvConfig {
            stride,
            padding,
            groups,
            bias: false,
            ..Default::default()
        };
        ConvBn {
            conv: nn::conv2d(p / "conv", cin, cout, k, config),
            bn: nn::batch_norm2d(p / "bn", cout, Default::default()),
        }
    }

    fn forward(&self, x: &Tensor, train: bool) -> Tensor {
        let y = x.apply(&self.conv);
        y.apply_t(&self.bn, train)
    }
}

/// torchvision's BasicBlock (ResNet-18/34) or Bottleneck (ResNet-50+, stride on the 3×3).
#[derive(Debug)]
struct Block {
    convs: Vec<ConvBn>,
    downsample: Option<ConvBn>,
}

impl Block {
    fn new(p: &nn::Path, bottleneck: bool, cin: i64, planes: i64, stride: i64) -> Block {
        let (convs, cout) = if bottleneck {
            let out = planes * 4;
            (
                vec![
                    ConvBn::new(&(p / "c1"), cin, planes, 1, 1, 0, 1),
                    ConvBn::new(&(p / "c2"), planes, planes, 3, stride, 1, 1),
                    ConvBn::new(&(p / "c3"), planes, out, 1, 1, 0, 1),
                ],
                out,
            )
        } else {
            (
                vec![
                    ConvBn::new(&(p / "c1"), cin, planes, 3, stride, 1, 1),
                    ConvBn::new(&(p / "c2"), planes, planes, 3, 1, 1, 1),
                ],
                planes,
            )
        };
        let downsample = (stride != 1 || cin != cout)
            .then(|| ConvBn::new(&(p / "down"), cin, cout, 1, stride, 0, 1));
        Block { convs, downsample }
    }

    fn forward(&self, x: &Tensor, train: bool) -> Tensor {
        let (last, first) = self.convs.split_last().expect("a block has convolutions");
        let mut out = x.shallow_clone();
        for conv in first {
            out = conv.forward(&out, train);
            let _ = out.relu_();
        }
        out = last.forward(&out, train);
        let identity = self.downsample.as_ref().map(|d| d.forward(x, train));
        let _ = out.g_add_(identity.as_ref().unwrap_or(x));
        drop(identity);
        let _ = out.relu_();
        out
    }
}

/// torchvision's ResNet (v1.5): stem, four stages, global average pool, classifier.
#[derive(Debug)]
struct ResNet {
    stem: ConvBn,
    blocks: Vec<Block>,
    fc: nn::Linear,
}

impl ResNet {
    fn new(p: &nn::Path, bottleneck: bool, depths: [usize; 4]) -> ResNet {
        let stem = ConvBn::new(&(p / "stem"), 3, 64, 7, 2, 3, 1);
        let expansion = if bottleneck { 4 } else { 1 };
        let mut blocks = Vec::new();
        let mut cin = 64;
        for (stage, (planes, depth)) in [64, 128, 256, 512].into_iter().zip(depths).enumerate() {
            for i in 0..depth {
                let stride = if stage > 0 && i == 0 { 2 } else { 1 };
                blocks.push(Block::new(
                    &(p / format!("layer{}_{i}", stage + 1)),
                    bottleneck,
                    cin,
                    planes,
                    stride,
                ));
                cin = planes * expansion;
            }
        }
        let fc = nn::linear(p / "fc", cin, CLASSES, Default::default());
        ResNet { stem, blocks, fc }
    }
}

impl ModuleT for ResNet {
    fn forward_t(&self, input: &Tensor, train: bool) -> Tensor {
        let mut x = self.stem.forward(input, train);
        let _ = x.relu_();
        x = x.max_pool2d([3, 3], [2, 2], [1, 1], [1, 1], false);
        for block in &self.blocks {
            x = block.forward(&x, train);
        }
        x = x.adaptive_avg_pool2d([1, 1]);
        x = x.flatten(1, -1);
        x.apply(&self.fc)
    }
}

/// Conv → BatchNorm → ReLU6 (in place), torchvision's Conv2dNormActivation.
#[derive(Debug)]
struct ConvBnRelu6(ConvBn);

impl ConvBnRelu6 {
    fn forward(&self, x: &Tensor, train: bool) -> Tensor {
        let mut y = self.0.forward(x, train);
        let _ = y.relu6_();
        y
    }
}

/// torchvision's InvertedResidual: expand (1×1), depthwise (3×3), project (1×1, linear).
#[derive(Debug)]
struct InvertedResidual {
    expand: Option<ConvBnRelu6>,
    depthwise: ConvBnRelu6,
    project: ConvBn,
    residual: bool,
}

impl InvertedResidual {
    fn forward(&self, x: &Tensor, train: bool) -> Tensor {
        let mut y = match &self.expand {
            Some(e) => e.forward(x, train),
            None => x.shallow_clone(),
        };
        y = self.depthwise.forward(&y, train);
        y = self.project.forward(&y, train);
        if self.residual {
            x + &y
        } else {
            y
        }
    }
}

#[derive(Debug)]
struct MobileNetV2 {
    first: ConvBnRelu6,
    blocks: Vec<InvertedResidual>,
    last: ConvBnRelu6,
    classifier: nn::Linear,
}

impl MobileNetV2 {
    fn new(p: &nn::Path) -> MobileNetV2 {
        // (expansion t, output channels c, repeats n, first stride s), torchvision's table.
        const SETTINGS: [(i64, i64, usize, i64); 7] = [
            (1, 16, 1, 1),
            (6, 24, 2, 2),
            (6, 32, 3, 2),
            (6, 64, 4, 2),
            (6, 96, 3, 1),
            (6, 160, 3, 2),
            (6, 320, 1, 1),
        ];
        let first = ConvBnRelu6(ConvBn::new(&(p / "first"), 3, 32, 3, 2, 1, 1));
        let mut blocks = Vec::new();
        let mut cin = 32;
        for (t, c, n, s) in SETTINGS {
            for i in 0..n {
                let stride = if i == 0 { s } else { 1 };
                let hidden = cin * t;
                let q = p / format!("block{}", blocks.len());
                blocks.push(InvertedResidual {
                    expand: (t != 1).then(|| {
                        ConvBnRelu6(ConvBn::new(&(&q / "expand"), cin, hidden, 1, 1, 0, 1))
                    }),
                    depthwise: ConvBnRelu6(ConvBn::new(
                        &(&q / "dw"),
                        hidden,
                        hidden,
                        3,
                        stride,
                        1,
                        hidden,
                    )),
                    project: ConvBn::new(&(&q / "project"), hidden, c, 1, 1, 0, 1),
                    residual: stride == 1 && cin == c,
                });
                cin = c;
            }
        }
        let last = ConvBnRelu6(ConvBn::new(&(p / "last"), cin, 1280, 1, 1, 0, 1));
        let classifier = nn::linear(p / "classifier", 1280, CLASSES, Default::default());
        MobileNetV2 {
            first,
            blocks,
            last,
            classifier,
        }
    }
}

impl ModuleT for MobileNetV2 {
    fn forward_t(&self, input: &Tensor, train: bool) -> Tensor {
        let mut x = self.first.forward(input, train);
        for block in &self.blocks {
            x = block.forward(&x, train);
        }
        x = self.last.forward(&x, train);
        x = x.adaptive_avg_pool2d([1, 1]);
        x = x.flatten(1, -1);
        x = x.dropout(0.2, train);
        x.apply(&self.classifier)
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
        assert_eq!(count(ModelId::Resnet50), 25_557_032);
    }

    #[test]
    fn every_model_runs_a_forward_pass_with_the_expected_batch() {
        for id in ModelId::ALL {
            let size = if matches!(id, ModelId::Resnet18 | ModelId::MobilenetV2) {
                64
            } else {
                id.input().default
            };
            let model = Model::build(id, Device::Cpu, size);
            let x = model.input(2, size, Device::Cpu);
            let y = tch::no_grad(|| model.net.forward_t(&x, false));
            assert_eq!(y.size()[0], 2, "{id}");
        }
    }
}
