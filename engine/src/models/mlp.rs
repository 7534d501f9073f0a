//! The tiny MLP: Linear → BatchNorm → ReLU → Dropout, twice, then a linear head (the fast
//! CPU default, mirrored in `python/gradless/models.py`). Its variables are named as that
//! nn.Sequential's state_dict names them (the index of each module holding tensors: ReLU
//! and Dropout hold none), so the weights Gradless saves load there by name.

use tch::nn::{self, ModuleT};
use tch::Tensor;

use super::Net;
use crate::trace::{linear_flops, Probe};

const MLP_HIDDEN: i64 = 512;
const MLP_DROPOUT: f64 = 0.5;

/// Linear → BatchNorm → ReLU → Dropout, twice, then a linear head.
#[derive(Debug)]
pub(super) struct Mlp {
    fc1: nn::Linear,
    bn1: nn::BatchNorm,
    fc2: nn::Linear,
    bn2: nn::BatchNorm,
    fc3: nn::Linear,
}

impl Mlp {
    pub(super) fn new(p: &nn::Path, features: i64) -> Mlp {
        Mlp {
            fc1: nn::linear(p / "0", features, MLP_HIDDEN, Default::default()),
            bn1: nn::batch_norm1d(p / "1", MLP_HIDDEN, Default::default()),
            fc2: nn::linear(p / "4", MLP_HIDDEN, MLP_HIDDEN, Default::default()),
            bn2: nn::batch_norm1d(p / "5", MLP_HIDDEN, Default::default()),
            fc3: nn::linear(p / "8", MLP_HIDDEN, 10, Default::default()),
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
