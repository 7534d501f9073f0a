//! The model zoo: architectures with random weights (weights change neither memory nor
//! latency), built with tch on the device that will run them.
//!
//! The forward passes are written statement by statement so that every intermediate tensor
//! is freed exactly when PyTorch frees it: a Rust method chain keeps all its temporaries
//! alive to the end of the statement, where Python drops each one as soon as the next op has
//! consumed it. ResNet and MobileNet-V2 follow torchvision 0.26 line for line (in-place
//! ReLUs and residual additions included), so peak memory matches PyTorch's; the MLP and
//! the transformer are mirrored in `bench/peer.py`.
//!
//! Every forward pass takes a [`Probe`] and marks it after each module (names follow
//! torchvision's module paths, so `layer2.1.conv2` means what it means there). The timed
//! iterations pass [`Probe::off`], which makes each mark a no-op; the traced pass records
//! (see `crate::trace`).

use protocol::ModelId;
use tch::nn::{self, ModuleT};
use tch::{Device, Kind, Tensor};

use crate::trace::{attention_flops, conv_flops, linear_flops, Probe};

/// A network whose forward pass reports to a probe at its module boundaries. The default
/// marks nothing: a network that cannot be looked inside (a TorchScript model, see
/// `crate::team::TRACE_ABSENT_REASON`) has no trace, and so no FLOP count, rather than a
/// single point that would read as zero FLOPs.
pub trait Net: ModuleT {
    fn forward_probed(&self, input: &Tensor, train: bool, _probe: &mut Probe<'_>) -> Tensor {
        self.forward_t(input, train)
    }
}

/// `ModuleT` for a [`Net`]: the forward pass with the probe off.
macro_rules! module_via_net {
    ($t:ty) => {
        impl ModuleT for $t {
            fn forward_t(&self, input: &Tensor, train: bool) -> Tensor {
                self.forward_probed(input, train, &mut Probe::off())
            }
        }
    };
}

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
    pub net: Box<dyn Net>,
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
        let (net, input_width): (Box<dyn Net>, u32) = match id {
            ModelId::TinyMlp => (Box::new(Mlp::new(&root, input_size as i64)), input_size),
            ModelId::Resnet18 => (Box::new(ResNet::new(&root, false, [2, 2, 2, 2])), 0),
            ModelId::Resnet50 => (Box::new(ResNet::new(&root, true, [3, 4, 6, 3])), 0),
            ModelId::MobilenetV2 => (Box::new(MobileNetV2::new(&root)), 0),
            ModelId::Transformer => (Box::new(Transformer::new(&root)), 0),
            ModelId::Team(name) => (crate::team::build(name, &vs), 0),
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
            ModelId::Team(_) => match self.id.team() {
                Some(m) => return crate::team::input(&m.sidecar, batch, input_size, device),
                None => panic!("{} is not served here", self.id),
            },
        };
        Tensor::randn(shape, (Kind::Float, device))
    }

    /// Whether a cached model can serve a run with this input size.
    pub fn fits(&self, input_size: u32) -> bool {
        self.id != ModelId::TinyMlp || self.input_width == input_size
    }
}

/// Linear → BatchNorm → ReLU → Dropout, twice, then a linear head.
#[derive(Debug)]
struct Mlp {
    fc1: nn::Linear,
    bn1: nn::BatchNorm,
    fc2: nn::Linear,
    bn2: nn::BatchNorm,
    fc3: nn::Linear,
}

impl Mlp {
    fn new(p: &nn::Path, features: i64) -> Mlp {
        Mlp {
            fc1: nn::linear(p / "fc1", features, MLP_HIDDEN, Default::default()),
            bn1: nn::batch_norm1d(p / "bn1", MLP_HIDDEN, Default::default()),
            fc2: nn::linear(p / "fc2", MLP_HIDDEN, MLP_HIDDEN, Default::default()),
            bn2: nn::batch_norm1d(p / "bn2", MLP_HIDDEN, Default::default()),
            fc3: nn::linear(p / "fc3", MLP_HIDDEN, 10, Default::default()),
        }
    }
}

impl Net for Mlp {
    fn forward_probed(&self, input: &Tensor, train: bool, probe: &mut Probe<'_>) -> Tensor {
        let mut x = input.apply(&self.fc1);
        probe.mark("fc1", &x, || linear_flops(&self.fc1, &x));
        x = x.apply_t(&self.bn1, train);
        probe.mark("bn1", &x, || 0);
        x = x.relu();
        probe.mark("relu1", &x, || 0);
        x = x.dropout(MLP_DROPOUT, train);
        probe.mark("dropout1", &x, || 0);
        x = x.apply(&self.fc2);
        probe.mark("fc2", &x, || linear_flops(&self.fc2, &x));
        x = x.apply_t(&self.bn2, train);
        probe.mark("bn2", &x, || 0);
        x = x.relu();
        probe.mark("relu2", &x, || 0);
        x = x.dropout(MLP_DROPOUT, train);
        probe.mark("dropout2", &x, || 0);
        x = x.apply(&self.fc3);
        probe.mark("fc3", &x, || linear_flops(&self.fc3, &x));
        x
    }
}
module_via_net!(Mlp);

/// `nn.TransformerEncoder(nn.TransformerEncoderLayer(256, 4, 1024, 0.1, batch_first=True), 4)`
/// in its post-norm form, written out so that every op is visible to the measurement.
#[derive(Debug)]
struct Transformer {
    layers: Vec<EncoderLayer>,
}

impl Transformer {
    fn new(p: &nn::Path) -> Transformer {
        let layers = (0..LAYERS)
            .map(|i| EncoderLayer::new(&(p / format!("layer{i}")), i))
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
struct EncoderLayer {
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
    fn new(p: &nn::Path, index: i64) -> Self {
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
    // Mirrors bench/peer.py's EncoderLayer.forward; see the module docs for why each
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

/// Convolution without bias followed by BatchNorm, as torchvision pairs them.
#[derive(Debug)]
struct ConvBn {
    conv: nn::Conv2D,
    bn: nn::BatchNorm,
    /// The probe's name for this convolution (its BatchNorm and activation included).
    name: String,
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
            name: String::new(),
        }
    }

    fn named(mut self, name: String) -> ConvBn {
        self.name = name;
        self
    }

    fn forward(&self, x: &Tensor, train: bool) -> Tensor {
        let y = x.apply(&self.conv);
        y.apply_t(&self.bn, train)
    }

    /// Marks this convolution's end; `out` has the convolution's output shape.
    fn mark(&self, probe: &mut Probe<'_>, out: &Tensor) {
        probe.mark(&self.name, out, || conv_flops(&self.conv, out));
    }
}

/// torchvision's BasicBlock (ResNet-18/34) or Bottleneck (ResNet-50+, stride on the 3×3).
#[derive(Debug)]
struct Block {
    convs: Vec<ConvBn>,
    downsample: Option<ConvBn>,
    /// The probe's name for the residual addition (and the downsample, when there is one).
    add: String,
}

impl Block {
    fn new(
        p: &nn::Path,
        name: &str,
        bottleneck: bool,
        cin: i64,
        planes: i64,
        stride: i64,
    ) -> Block {
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
        let convs = convs
            .into_iter()
            .enumerate()
            .map(|(i, c)| c.named(format!("{name}.conv{}", i + 1)))
            .collect();
        let downsample = (stride != 1 || cin != cout)
            .then(|| ConvBn::new(&(p / "down"), cin, cout, 1, stride, 0, 1));
        // The downsample is marked together with the addition: its output only lives until
        // the addition, so a point between them would show a dip that no saved tensor makes.
        let add = match downsample {
            Some(_) => format!("{name}.downsample+add"),
            None => format!("{name}.add"),
        };
        Block {
            convs,
            downsample,
            add,
        }
    }

    fn forward(&self, x: &Tensor, train: bool, probe: &mut Probe<'_>) -> Tensor {
        let (last, first) = self.convs.split_last().expect("a block has convolutions");
        let mut out = x.shallow_clone();
        for conv in first {
            out = conv.forward(&out, train);
            let _ = out.relu_();
            conv.mark(probe, &out);
        }
        out = last.forward(&out, train);
        last.mark(probe, &out);
        let identity = self.downsample.as_ref().map(|d| d.forward(x, train));
        let _ = out.g_add_(identity.as_ref().unwrap_or(x));
        drop(identity);
        let _ = out.relu_();
        probe.mark(&self.add, &out, || {
            self.downsample
                .as_ref()
                .map_or(0, |d| conv_flops(&d.conv, &out))
        });
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
        let stem = ConvBn::new(&(p / "stem"), 3, 64, 7, 2, 3, 1).named("conv1".into());
        let expansion = if bottleneck { 4 } else { 1 };
        let mut blocks = Vec::new();
        let mut cin = 64;
        for (stage, (planes, depth)) in [64, 128, 256, 512].into_iter().zip(depths).enumerate() {
            for i in 0..depth {
                let stride = if stage > 0 && i == 0 { 2 } else { 1 };
                blocks.push(Block::new(
                    &(p / format!("layer{}_{i}", stage + 1)),
                    &format!("layer{}.{i}", stage + 1),
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

impl Net for ResNet {
    fn forward_probed(&self, input: &Tensor, train: bool, probe: &mut Probe<'_>) -> Tensor {
        let mut x = self.stem.forward(input, train);
        let _ = x.relu_();
        self.stem.mark(probe, &x);
        x = x.max_pool2d([3, 3], [2, 2], [1, 1], [1, 1], false);
        probe.mark("maxpool", &x, || 0);
        for block in &self.blocks {
            x = block.forward(&x, train, probe);
        }
        x = x.adaptive_avg_pool2d([1, 1]);
        probe.mark("avgpool", &x, || 0);
        x = x.flatten(1, -1);
        let out = x.apply(&self.fc);
        drop(x);
        probe.mark("fc", &out, || linear_flops(&self.fc, &out));
        out
    }
}
module_via_net!(ResNet);

/// Conv → BatchNorm → ReLU6 (in place), torchvision's Conv2dNormActivation.
#[derive(Debug)]
struct ConvBnRelu6(ConvBn);

impl ConvBnRelu6 {
    fn forward(&self, x: &Tensor, train: bool, probe: &mut Probe<'_>) -> Tensor {
        let mut y = self.0.forward(x, train);
        let _ = y.relu6_();
        self.0.mark(probe, &y);
        y
    }
}

/// torchvision's InvertedResidual: expand (1×1), depthwise (3×3), project (1×1, linear).
#[derive(Debug)]
struct InvertedResidual {
    expand: Option<ConvBnRelu6>,
    depthwise: ConvBnRelu6,
    project: ConvBn,
    /// The probe's name for the residual addition; `None` for a block without one.
    residual: Option<String>,
}

impl InvertedResidual {
    fn forward(&self, x: &Tensor, train: bool, probe: &mut Probe<'_>) -> Tensor {
        let mut y = match &self.expand {
            Some(e) => e.forward(x, train, probe),
            None => x.shallow_clone(),
        };
        y = self.depthwise.forward(&y, train, probe);
        y = self.project.forward(&y, train);
        self.project.mark(probe, &y);
        match &self.residual {
            Some(name) => {
                let sum = x + &y;
                drop(y);
                probe.mark(name, &sum, || 0);
                sum
            }
            None => y,
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
        let first =
            ConvBnRelu6(ConvBn::new(&(p / "first"), 3, 32, 3, 2, 1, 1).named("features.0".into()));
        let mut blocks = Vec::new();
        let mut cin = 32;
        for (t, c, n, s) in SETTINGS {
            for i in 0..n {
                let stride = if i == 0 { s } else { 1 };
                let hidden = cin * t;
                let q = p / format!("block{}", blocks.len());
                // torchvision's path: features.0 is the first convolution.
                let name = format!("features.{}", blocks.len() + 1);
                blocks.push(InvertedResidual {
                    expand: (t != 1).then(|| {
                        ConvBnRelu6(
                            ConvBn::new(&(&q / "expand"), cin, hidden, 1, 1, 0, 1)
                                .named(format!("{name}.expand")),
                        )
                    }),
                    depthwise: ConvBnRelu6(
                        ConvBn::new(&(&q / "dw"), hidden, hidden, 3, stride, 1, hidden)
                            .named(format!("{name}.dw")),
                    ),
                    project: ConvBn::new(&(&q / "project"), hidden, c, 1, 1, 0, 1)
                        .named(format!("{name}.project")),
                    residual: (stride == 1 && cin == c).then(|| format!("{name}.add")),
                });
                cin = c;
            }
        }
        let last = ConvBnRelu6(
            ConvBn::new(&(p / "last"), cin, 1280, 1, 1, 0, 1)
                .named(format!("features.{}", blocks.len() + 1)),
        );
        let classifier = nn::linear(p / "classifier", 1280, CLASSES, Default::default());
        MobileNetV2 {
            first,
            blocks,
            last,
            classifier,
        }
    }
}

impl Net for MobileNetV2 {
    fn forward_probed(&self, input: &Tensor, train: bool, probe: &mut Probe<'_>) -> Tensor {
        let mut x = self.first.forward(input, train, probe);
        for block in &self.blocks {
            x = block.forward(&x, train, probe);
        }
        x = self.last.forward(&x, train, probe);
        x = x.adaptive_avg_pool2d([1, 1]);
        probe.mark("avgpool", &x, || 0);
        x = x.flatten(1, -1);
        x = x.dropout(0.2, train);
        let out = x.apply(&self.classifier);
        drop(x);
        probe.mark("classifier", &out, || linear_flops(&self.classifier, &out));
        out
    }
}
module_via_net!(MobileNetV2);

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
