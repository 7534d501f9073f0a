//! torchvision's ResNet (v1.5), line for line (in-place ReLUs and residual additions
//! included), and the Conv → BatchNorm pair MobileNet-V2 shares. Variables are named as
//! torchvision's state_dict names them (`layer2.0.conv1.weight`, `layer2.0.downsample.1.
//! running_mean`).

use tch::nn::{self, ModuleT};
use tch::Tensor;

use super::Net;
use crate::trace::{conv_flops, linear_flops, Probe};

use super::CLASSES;

/// Convolution without bias followed by BatchNorm, as torchvision pairs them.
#[derive(Debug)]
pub(super) struct ConvBn {
    conv: nn::Conv2D,
    bn: nn::BatchNorm,
    /// The probe's name for this convolution (its BatchNorm and activation included).
    name: String,
}

impl ConvBn {
    /// The convolution's variables under `conv`, the BatchNorm's under `bn` (torchvision's
    /// names for the pair differ by where it sits).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        conv: &nn::Path,
        bn: &nn::Path,
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
            conv: nn::conv2d(conv, cin, cout, k, config),
            bn: nn::batch_norm2d(bn, cout, Default::default()),
            name: String::new(),
        }
    }

    /// The pair as an nn.Sequential holds it (torchvision's `downsample` and
    /// Conv2dNormActivation): the convolution at `p.0`, the BatchNorm at `p.1`.
    pub(super) fn sequential(p: &nn::Path, cin: i64, cout: i64, k: i64, stride: i64, padding: i64, groups: i64) -> ConvBn {
        ConvBn::new(&(p / "0"), &(p / "1"), cin, cout, k, stride, padding, groups)
    }

    pub(super) fn named(mut self, name: String) -> ConvBn {
        self.name = name;
        self
    }

    pub(super) fn forward(&self, x: &Tensor, train: bool) -> Tensor {
        let y = x.apply(&self.conv);
        y.apply_t(&self.bn, train)
    }

    /// Marks this convolution's end; `out` has the convolution's output shape.
    pub(super) fn mark(&self, probe: &mut Probe<'_>, out: &Tensor) {
        probe.mark(&self.name, out, || conv_flops(&self.conv, out));
    }
}

/// torchvision's BasicBlock (ResNet-18/34) or Bottleneck (ResNet-50+, stride on the 3×3).
#[derive(Debug)]
pub(super) struct Block {
    convs: Vec<ConvBn>,
    downsample: Option<ConvBn>,
    /// The probe's name for the residual addition (and the downsample, when there is one).
    add: String,
}

impl Block {
    pub(super) fn new(
        p: &nn::Path,
        name: &str,
        bottleneck: bool,
        cin: i64,
        planes: i64,
        stride: i64,
    ) -> Block {
        // torchvision's conv{k}, bn{k}.
        let pair = |k: usize, cin, cout, size, stride, padding| {
            ConvBn::new(&(p / format!("conv{k}")), &(p / format!("bn{k}")), cin, cout, size, stride, padding, 1)
        };
        let (convs, cout) = if bottleneck {
            let out = planes * 4;
            (
                vec![
                    pair(1, cin, planes, 1, 1, 0),
                    pair(2, planes, planes, 3, stride, 1),
                    pair(3, planes, out, 1, 1, 0),
                ],
                out,
            )
        } else {
            (
                vec![
                    pair(1, cin, planes, 3, stride, 1),
                    pair(2, planes, planes, 3, 1, 1),
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
            .then(|| ConvBn::sequential(&(p / "downsample"), cin, cout, 1, stride, 0, 1));
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
pub(super) struct ResNet {
    stem: ConvBn,
    blocks: Vec<Block>,
    fc: nn::Linear,
}

impl ResNet {
    pub(super) fn new(p: &nn::Path, bottleneck: bool, depths: [usize; 4]) -> ResNet {
        let stem = ConvBn::new(&(p / "conv1"), &(p / "bn1"), 3, 64, 7, 2, 3, 1).named("conv1".into());
        let expansion = if bottleneck { 4 } else { 1 };
        let mut blocks = Vec::new();
        let mut cin = 64;
        for (stage, (planes, depth)) in [64, 128, 256, 512].into_iter().zip(depths).enumerate() {
            for i in 0..depth {
                let stride = if stage > 0 && i == 0 { 2 } else { 1 };
                blocks.push(Block::new(
                    &(p / format!("layer{}", stage + 1) / i.to_string()),
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
