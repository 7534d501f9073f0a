//! torchvision's MobileNet-V2, line for line. Variables are named as torchvision's
//! state_dict names them: `features.0` the first Conv2dNormActivation (`.0` its convolution,
//! `.1` its BatchNorm), `features.{j+1}.conv` block j's Sequential ([expand], depthwise,
//! project convolution, project BatchNorm), `features.18` the last, `classifier.1` the
//! linear layer (after the Dropout at `classifier.0`).

use tch::nn::{self, ModuleT};
use tch::Tensor;

use super::Net;
use crate::trace::{linear_flops, Probe};

use super::resnet::ConvBn;
use super::CLASSES;

/// Conv → BatchNorm → ReLU6 (in place), torchvision's Conv2dNormActivation.
#[derive(Debug)]
pub(super) struct ConvBnRelu6(ConvBn);

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
pub(super) struct InvertedResidual {
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
pub(super) struct MobileNetV2 {
    first: ConvBnRelu6,
    blocks: Vec<InvertedResidual>,
    last: ConvBnRelu6,
    classifier: nn::Linear,
}

impl MobileNetV2 {
    pub(super) fn new(p: &nn::Path) -> MobileNetV2 {
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
        let features = p / "features";
        let first = ConvBnRelu6(ConvBn::sequential(&(&features / "0"), 3, 32, 3, 2, 1, 1).named("features.0".into()));
        let mut blocks = Vec::new();
        let mut cin = 32;
        for (t, c, n, s) in SETTINGS {
            for i in 0..n {
                let stride = if i == 0 { s } else { 1 };
                let hidden = cin * t;
                // torchvision's path: features.0 is the first convolution.
                let index = blocks.len() + 1;
                let name = format!("features.{index}");
                let q = &features / index.to_string() / "conv";
                // The block's Sequential: [expand,] depthwise, project conv, project bn.
                let at = |i: usize| &q / i.to_string();
                let dw = usize::from(t != 1);
                blocks.push(InvertedResidual {
                    expand: (t != 1).then(|| {
                        ConvBnRelu6(ConvBn::sequential(&at(0), cin, hidden, 1, 1, 0, 1).named(format!("{name}.expand")))
                    }),
                    depthwise: ConvBnRelu6(
                        ConvBn::sequential(&at(dw), hidden, hidden, 3, stride, 1, hidden).named(format!("{name}.dw")),
                    ),
                    project: ConvBn::new(&at(dw + 1), &at(dw + 2), hidden, c, 1, 1, 0, 1).named(format!("{name}.project")),
                    residual: (stride == 1 && cin == c).then(|| format!("{name}.add")),
                });
                cin = c;
            }
        }
        let last_index = (blocks.len() + 1).to_string();
        let last = ConvBnRelu6(
            ConvBn::sequential(&(&features / last_index.as_str()), cin, 1280, 1, 1, 0, 1)
                .named(format!("features.{last_index}")),
        );
        let classifier = nn::linear(p / "classifier" / "1", 1280, CLASSES, Default::default());
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
