//! The model zoo: architectures with random weights (weights change neither memory nor
//! latency), built with tch on the device that will run them.
//!
//! The forward passes are written statement by statement so that every intermediate tensor
//! is freed exactly when PyTorch frees it: a Rust method chain keeps all its temporaries
//! alive to the end of the statement, where Python drops each one as soon as the next op has
//! consumed it. ResNet and MobileNet-V2 follow torchvision 0.26 line for line (in-place
//! ReLUs and residual additions included), so peak memory matches PyTorch's; the MLP and
//! the transformer are mirrored in `python/gradless/models.py`.
//!
//! Every variable is named as the PyTorch module's `state_dict` names it (torchvision's for
//! ResNet and MobileNet-V2, `gradless.models`'s for the MLP and the encoder), so the weights
//! Gradless saves load into the Python side by name (the ahead-of-time compile does;
//! `engine/tests/python_package.rs` checks every name and shape against Python's).
//!
//! Every forward pass takes a [`Probe`] and marks it after each module (names follow
//! torchvision's module paths, so `layer2.1.conv2` means what it means there). The timed
//! iterations pass [`Probe::off`], which makes each mark a no-op; the traced pass records
//! (see `crate::trace`).

use protocol::ModelId;
use tch::nn::{self, ModuleT};
use tch::{Device, Kind, Tensor};

use crate::input::Input;
use crate::trace::Probe;


/// A network whose forward pass reports to a probe at its module boundaries. The default
/// marks nothing: a network that cannot be looked inside (a team's TorchScript module, see
/// `scripted`) has no trace, and so no FLOP count, rather than a single point that would
/// read as zero FLOPs.
pub trait Net: ModuleT {
    fn forward_probed(&self, input: &Tensor, train: bool, _probe: &mut Probe<'_>) -> Tensor {
        self.forward_t(input, train)
    }

    /// The forward pass on all of the run's inputs. The built-in models take one; a team
    /// model's module takes every input its sidecar lists.
    fn forward_inputs(&self, inputs: &Input, train: bool, probe: &mut Probe<'_>) -> Tensor {
        self.forward_probed(inputs.first(), train, probe)
    }

    /// The decoder behind this network, for generate runs (which call its forward pass
    /// step by step with a cache); `None` for every other family.
    fn as_decoder(&self) -> Option<&decoder::Decoder> {
        None
    }

    /// The same, to quantize its linear layers once after building.
    fn as_decoder_mut(&mut self) -> Option<&mut decoder::Decoder> {
        None
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

// After the macro: the families' files use it (macro_rules scope is textual).
pub mod decoder;
mod encoder;
mod mlp;
mod mobilenet;
mod resnet;
pub mod scripted;

pub use encoder::D_MODEL;
use encoder::Transformer;
use mlp::Mlp;
use mobilenet::MobileNetV2;
use resnet::ResNet;

/// The classifiers' head width (ImageNet's classes).
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
    /// A decoder's linear layers' quantization (none when built; see [`Model::quantize`]).
    pub quant: protocol::LinearQuant,
}

impl Model {
    /// Builds `id` with random weights on `device`. `input_size` matters only for the MLP.
    pub fn build(id: ModelId, device: Device, input_size: u32) -> Model {
        Model::build_in(id, device, input_size, protocol::WeightsDtype::Fp32)
    }

    /// [`Model::build`], a decoder's weights made directly in `weights` (no fp32 copy to
    /// cast from: an 8B decoder in bf16 never holds its 30 GiB fp32 transient); other
    /// models are built in fp32 and cast by the caller.
    pub fn build_in(id: ModelId, device: Device, input_size: u32, weights: protocol::WeightsDtype) -> Model {
        let mut vs = nn::VarStore::new(device);
        let direct = matches!(id, ModelId::Decoder(_));
        if direct {
            vs.set_kind(match weights {
                protocol::WeightsDtype::Fp32 => tch::Kind::Float,
                protocol::WeightsDtype::Fp16 => tch::Kind::Half,
                protocol::WeightsDtype::Bf16 => tch::Kind::BFloat16,
            });
        }
        let root = vs.root();
        let (net, input_width): (Box<dyn Net>, u32) = match id {
            ModelId::TinyMlp => (Box::new(Mlp::new(&root, input_size as i64)), input_size),
            ModelId::Resnet18 => (Box::new(ResNet::new(&root, false, [2, 2, 2, 2])), 0),
            ModelId::Resnet50 => (Box::new(ResNet::new(&root, true, [3, 4, 6, 3])), 0),
            ModelId::MobilenetV2 => (Box::new(MobileNetV2::new(&root)), 0),
            ModelId::Transformer => (Box::new(Transformer::new(&root)), 0),
            ModelId::Team(m) => (scripted::build(m, &vs), 0),
            ModelId::Decoder(d) => (decoder::build(d, &vs), 0),
            // The lab runs checked specs, whose models are resolved: a name here was never
            // served (caught as a run failure by the lab's `catch_torch`).
            ModelId::Named(name) => panic!("the model `{name}` is not served here"),
        };
        let mut model = Model {
            id,
            vs,
            net,
            input_width,
            held_bytes: 0,
            weights: if direct { weights } else { protocol::WeightsDtype::Fp32 },
            format: protocol::MemoryFormat::Contiguous,
            quant: protocol::LinearQuant::NONE,
        };
        model.held_bytes = model.resident_bytes();
        model
    }

    /// Quantizes a decoder's linear layers (in place, once; see
    /// `decoder::Decoder::quantize`). Other models are left as they are.
    pub fn quantize(&mut self, q: protocol::LinearQuant) {
        if q.is_none() || !self.quant.is_none() {
            return;
        }
        if let Some(d) = self.net.as_decoder_mut() {
            d.quantize(&self.vs, q);
            self.quant = q;
        }
    }

    /// Lays a decoder's weights out for a run with autocast on or off
    /// (`decoder::WeightLayout::for_run`); other models keep theirs.
    pub fn lay_out_for_run(&mut self, autocast: bool) {
        if let Some(d) = self.net.as_decoder_mut() {
            d.lay_out_for_run(autocast);
        }
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

    /// A random input batch for this model on `device` (a team model's: every input its
    /// sidecar lists).
    pub fn input(&self, batch: u32, input_size: u32, device: Device) -> Input {
        let b = batch as i64;
        let s = input_size as i64;
        let shape: Vec<i64> = match self.id {
            ModelId::TinyMlp => vec![b, s],
            ModelId::Resnet18 | ModelId::Resnet50 | ModelId::MobilenetV2 => vec![b, 3, s, s],
            ModelId::Transformer => vec![b, s, D_MODEL],
            ModelId::Team(_) | ModelId::Named(_) => match self.id.team() {
                Some(m) => return scripted::input(&m.sidecar, batch, input_size, device),
                None => panic!("{} is not served here", self.id),
            },
            ModelId::Decoder(_) => match self.id.decoder() {
                // Random token ids: what the prompt says does not change memory or latency.
                Some(d) => {
                    return Input::one(Tensor::randint(
                        d.config.vocab_size as i64,
                        [b, s],
                        (Kind::Int64, device),
                    ))
                }
                None => panic!("{} is not served here", self.id),
            },
        };
        Input::one(Tensor::randn(shape, (Kind::Float, device)))
    }

    /// Whether a cached model can serve a run with this input size.
    pub fn fits(&self, input_size: u32) -> bool {
        self.id != ModelId::TinyMlp || self.input_width == input_size
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

    /// Every variable of every built-in model has the name and shape of a tensor in the
    /// state_dict of `python/gradless/models.py`'s module, and every tensor there (but the
    /// BatchNorms' `num_batches_tracked`, which tch does not keep) a variable; for the image
    /// models the same holds against torchvision's own module. The ahead-of-time compile
    /// loads Gradless's weights by these names. Needs `GRADLESS_PYTHON` (scripts/test.sh sets
    /// it) with torch and torchvision.
    #[test]
    fn variable_names_are_the_python_modules_state_dict_names() {
        let Some(python) = std::env::var_os("GRADLESS_PYTHON") else {
            eprintln!("GRADLESS_PYTHON is not set: the names were not compared with Python's");
            return;
        };
        const SIZE: u32 = 64;
        let ours: std::collections::BTreeMap<String, std::collections::BTreeMap<String, Vec<i64>>> = [
            ModelId::TinyMlp,
            ModelId::Resnet18,
            ModelId::Resnet50,
            ModelId::MobilenetV2,
            ModelId::Transformer,
        ]
        .into_iter()
        .map(|id| {
            let m = Model::build(id, Device::Cpu, SIZE);
            let vars = m.vs.variables().into_iter().map(|(name, t)| (name, t.size())).collect();
            (id.as_str().to_string(), vars)
        })
        .collect();
        let script = format!(
            "import json\nimport torchvision\nfrom gradless import models\n\
             def names(m):\n    return {{k: list(v.shape) for k, v in m.state_dict().items() if not k.endswith('num_batches_tracked')}}\n\
             out = {{name: names(models.build(name, {SIZE})) for name in models.MODELS}}\n\
             out.update({{'torchvision ' + name: names(getattr(torchvision.models, name)()) for name in models.IMAGE_MODELS}})\n\
             print(json.dumps(out))\n"
        );
        let out = std::process::Command::new(&python)
            .args(["-c", &script])
            .env("PYTHONPATH", concat!(env!("CARGO_MANIFEST_DIR"), "/../python"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let theirs: std::collections::BTreeMap<String, std::collections::BTreeMap<String, Vec<i64>>> =
            serde_json::from_slice(&out.stdout).unwrap();
        for (name, vars) in &ours {
            assert!(!vars.is_empty(), "{name}");
            assert_eq!(Some(vars), theirs.get(name), "{name}: Gradless's variables against gradless.models's state_dict");
            if let Some(tv) = theirs.get(&format!("torchvision {name}")) {
                assert_eq!(vars, tv, "{name}: Gradless's variables against torchvision's state_dict");
            }
        }
        assert_eq!(theirs.keys().filter(|k| k.starts_with("torchvision ")).count(), 3, "{:?}", theirs.keys());
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
            let y = tch::no_grad(|| model.net.forward_t(x.first(), false));
            assert_eq!(y.size()[0], 2, "{id}");
        }
    }
}
