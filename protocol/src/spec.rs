//! What a run asks for: the models, devices, modes and the [`RunSpec`] with its
//! structural checks against the server's [`Limits`].

use serde::{Deserialize, Serialize};
use std::fmt;

use crate::Advanced;

/// The models a run can use. Weights are random: weights do not change memory or latency.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelId {
    /// A three-layer MLP with BatchNorm and Dropout: the fast CPU default.
    TinyMlp,
    /// torchvision's ResNet-18 architecture (BatchNorm, no Dropout).
    Resnet18,
    /// torchvision's ResNet-50 architecture (BatchNorm, no Dropout).
    Resnet50,
    /// torchvision's MobileNet-V2 architecture (BatchNorm and one Dropout).
    MobilenetV2,
    /// A small transformer encoder with Dropout and LayerNorm.
    Transformer,
}

impl ModelId {
    pub const ALL: [ModelId; 5] = [
        ModelId::TinyMlp,
        ModelId::Resnet18,
        ModelId::Resnet50,
        ModelId::MobilenetV2,
        ModelId::Transformer,
    ];

    /// The identifier used in JSON, URLs and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            ModelId::TinyMlp => "tiny_mlp",
            ModelId::Resnet18 => "resnet18",
            ModelId::Resnet50 => "resnet50",
            ModelId::MobilenetV2 => "mobilenet_v2",
            ModelId::Transformer => "transformer",
        }
    }

    pub fn display_name(self) -> &'static str {
        match self {
            ModelId::TinyMlp => "Tiny MLP (BatchNorm + Dropout)",
            ModelId::Resnet18 => "ResNet-18",
            ModelId::Resnet50 => "ResNet-50",
            ModelId::MobilenetV2 => "MobileNet-V2",
            ModelId::Transformer => "Transformer encoder (Dropout + LayerNorm)",
        }
    }

    /// What `input_size` means for this model, and its default.
    pub fn input(self) -> InputShape {
        match self {
            ModelId::TinyMlp => InputShape {
                meaning: "features per sample",
                default: 512,
                max: 65_536,
            },
            ModelId::Resnet18 | ModelId::Resnet50 | ModelId::MobilenetV2 => InputShape {
                meaning: "image side in pixels (3×N×N)",
                default: 224,
                max: 1024,
            },
            ModelId::Transformer => InputShape {
                meaning: "sequence length in tokens",
                default: 128,
                max: 4096,
            },
        }
    }

    pub fn has_dropout(self) -> bool {
        matches!(
            self,
            ModelId::TinyMlp | ModelId::MobilenetV2 | ModelId::Transformer
        )
    }

    /// Image models built of convolutions (the ones channels_last applies to).
    pub fn is_conv(self) -> bool {
        matches!(
            self,
            ModelId::Resnet18 | ModelId::Resnet50 | ModelId::MobilenetV2
        )
    }

    pub fn has_batchnorm(self) -> bool {
        !matches!(self, ModelId::Transformer)
    }

    /// The PyTorch expression that builds the same architecture, for snippets and peers.
    pub fn python_constructor(self) -> &'static str {
        match self {
            // The same layers as the engine's tiny MLP (engine/src/models.rs), so the snippet
            // runs as copied.
            ModelId::TinyMlp => "nn.Sequential(\n    nn.Linear(features, 512), nn.BatchNorm1d(512), nn.ReLU(), nn.Dropout(0.5),\n    nn.Linear(512, 512), nn.BatchNorm1d(512), nn.ReLU(), nn.Dropout(0.5),\n    nn.Linear(512, 10),\n)",
            ModelId::Resnet18 => "torchvision.models.resnet18()",
            ModelId::Resnet50 => "torchvision.models.resnet50()",
            ModelId::MobilenetV2 => "torchvision.models.mobilenet_v2()",
            // PyTorch's own layer, configured like the engine's encoder (which writes the same
            // layer out op by op, as bench/peer.py's EncoderLayer does).
            ModelId::Transformer => "nn.TransformerEncoder(\n    nn.TransformerEncoderLayer(256, 4, 1024, 0.1, batch_first=True),\n    num_layers=4,\n    enable_nested_tensor=False,\n)",
        }
    }
}

impl fmt::Display for ModelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ModelId {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        ModelId::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                let known: Vec<_> = ModelId::ALL.iter().map(|m| m.as_str()).collect();
                format!("unknown model `{s}`; known models: {}", known.join(", "))
            })
    }
}

/// The meaning, default and upper bound of a model's `input_size`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InputShape {
    pub meaning: &'static str,
    pub default: u32,
    pub max: u32,
}

/// Which device a run asks for. `auto` means CUDA when the server has it, else the CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceChoice {
    #[default]
    Auto,
    Cpu,
    Cuda,
}

impl DeviceChoice {
    /// The device this choice runs on, on a server with or without CUDA; `None` when it
    /// asks for CUDA where there is none. The one place `auto` is resolved.
    pub fn resolve(self, has_cuda: bool) -> Option<DeviceKind> {
        match self {
            DeviceChoice::Cpu => Some(DeviceKind::Cpu),
            DeviceChoice::Cuda | DeviceChoice::Auto if has_cuda => Some(DeviceKind::Cuda),
            DeviceChoice::Cuda => None,
            DeviceChoice::Auto => Some(DeviceKind::Cpu),
        }
    }
}

/// The device a run actually used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceKind {
    Cpu,
    Cuda,
}

impl DeviceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Cuda => "cuda",
        }
    }
}

/// How autograd is configured around the forward pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GradMode {
    /// PyTorch's default: every op on a tensor that requires grad records the graph.
    #[default]
    Enabled,
    /// `with torch.no_grad():`
    NoGrad,
    /// `with torch.inference_mode():`
    InferenceMode,
}

impl GradMode {
    pub const ALL: [GradMode; 3] = [GradMode::Enabled, GradMode::NoGrad, GradMode::InferenceMode];
    pub fn as_str(self) -> &'static str {
        match self {
            GradMode::Enabled => "enabled",
            GradMode::NoGrad => "no_grad",
            GradMode::InferenceMode => "inference_mode",
        }
    }
}

/// Automatic mixed precision around the forward pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Autocast {
    #[default]
    Off,
    Fp16,
    Bf16,
}

impl Autocast {
    pub const ALL: [Autocast; 3] = [Autocast::Off, Autocast::Fp16, Autocast::Bf16];
    pub fn as_str(self) -> &'static str {
        match self {
            Autocast::Off => "off",
            Autocast::Fp16 => "fp16",
            Autocast::Bf16 => "bf16",
        }
    }
}

macro_rules! from_str_via_all {
    ($t:ty, $what:literal) => {
        impl std::str::FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                <$t>::ALL
                    .into_iter()
                    .find(|v| v.as_str() == s)
                    .ok_or_else(|| {
                        let known: Vec<_> = <$t>::ALL.iter().map(|v| v.as_str()).collect();
                        format!(
                            concat!("unknown ", $what, " `{}`; expected one of: {}"),
                            s,
                            known.join(", ")
                        )
                    })
            }
        }
    };
}
from_str_via_all!(GradMode, "grad mode");
from_str_via_all!(Autocast, "autocast setting");

impl std::str::FromStr for DeviceChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(DeviceChoice::Auto),
            "cpu" => Ok(DeviceChoice::Cpu),
            "cuda" => Ok(DeviceChoice::Cuda),
            _ => Err(format!(
                "unknown device `{s}`; expected one of: auto, cpu, cuda"
            )),
        }
    }
}

/// One measurement request. Every field has a default, so `{}` is a valid spec.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunSpec {
    pub model: ModelId,
    pub device: DeviceChoice,
    /// Samples per forward pass.
    pub batch: u32,
    /// Model-specific size of one sample (see [`ModelId::input`]); `None` takes the default.
    pub input_size: Option<u32>,
    /// `model.eval()` when true, `model.train()` when false.
    pub eval: bool,
    pub grad: GradMode,
    pub autocast: Autocast,
    /// Iterations run before timing starts; reported apart, never in the statistics.
    pub warmup: u32,
    /// Timed iterations.
    pub iters: u32,
    /// CPU threads for libtorch's intra-op pool; `None` keeps the server's setting.
    pub threads: Option<u32>,
    /// The settings beyond the five switches (weights dtype, memory format, input source,
    /// CUDA switches); left out of the JSON at their defaults.
    #[serde(default, skip_serializing_if = "Advanced::is_default")]
    pub advanced: Advanced,
}

impl Default for RunSpec {
    fn default() -> Self {
        RunSpec {
            model: ModelId::TinyMlp,
            device: DeviceChoice::Auto,
            batch: 32,
            input_size: None,
            eval: true,
            grad: GradMode::Enabled,
            autocast: Autocast::Off,
            warmup: 3,
            iters: 20,
            threads: None,
            advanced: Advanced::default(),
        }
    }
}

/// Server-side bounds on a spec; the browser receives them to validate before sending.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    pub max_batch: u32,
    pub max_warmup: u32,
    pub max_iters: u32,
    pub max_threads: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_batch: 4096,
            max_warmup: 100,
            max_iters: 1000,
            max_threads: 256,
        }
    }
}

/// A spec that breaks a rule, with the field at fault.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecError {
    pub field: String,
    pub message: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for SpecError {}

impl RunSpec {
    /// The input size this spec will use.
    pub fn resolved_input_size(&self) -> u32 {
        self.input_size.unwrap_or(self.model.input().default)
    }

    /// Checks the rules that need no device. The engine adds the device-dependent ones.
    pub fn check(&self, limits: &Limits) -> Result<(), SpecError> {
        let err = |field: &str, message: String| {
            Err(SpecError {
                field: field.into(),
                message,
            })
        };
        if self.batch == 0 {
            return err("batch", "batch must be at least 1".into());
        }
        if self.batch > limits.max_batch {
            return err(
                "batch",
                format!(
                    "batch {} is above this server's limit of {}",
                    self.batch, limits.max_batch
                ),
            );
        }
        if let Some(size) = self.input_size {
            let shape = self.model.input();
            let min = if matches!(
                self.model,
                ModelId::Resnet18 | ModelId::Resnet50 | ModelId::MobilenetV2
            ) {
                32
            } else {
                1
            };
            if size < min || size > shape.max {
                return err(
                    "input_size",
                    format!(
                        "input_size {size} is out of range for {} ({}): allowed {min}..={}",
                        self.model, shape.meaning, shape.max
                    ),
                );
            }
        }
        if self.iters == 0 {
            return err("iters", "at least one timed iteration is needed".into());
        }
        if self.iters > limits.max_iters {
            return err(
                "iters",
                format!(
                    "iters {} is above the limit of {}",
                    self.iters, limits.max_iters
                ),
            );
        }
        if self.warmup > limits.max_warmup {
            return err(
                "warmup",
                format!(
                    "warmup {} is above the limit of {}",
                    self.warmup, limits.max_warmup
                ),
            );
        }
        self.advanced.check(self.model)?;
        if let Some(t) = self.threads {
            if t == 0 || t > limits.max_threads {
                return err(
                    "threads",
                    format!("threads must be between 1 and {}", limits.max_threads),
                );
            }
        }
        Ok(())
    }

    /// The classic comparison for this spec's model and batch: every combination people
    /// confuse (train+grad, eval+grad, train+no_grad, eval+no_grad, eval+inference_mode),
    /// then eval+no_grad under fp16 and bf16 autocast. Callers drop the rows their device
    /// cannot run.
    pub fn classic_modes(&self) -> Vec<RunSpec> {
        let row = |eval, grad, autocast| RunSpec {
            eval,
            grad,
            autocast,
            ..self.clone()
        };
        vec![
            row(false, GradMode::Enabled, Autocast::Off),
            row(true, GradMode::Enabled, Autocast::Off),
            row(false, GradMode::NoGrad, Autocast::Off),
            row(true, GradMode::NoGrad, Autocast::Off),
            row(true, GradMode::InferenceMode, Autocast::Off),
            row(true, GradMode::NoGrad, Autocast::Fp16),
            row(true, GradMode::NoGrad, Autocast::Bf16),
        ]
    }

    /// A short human label of the settings, e.g. `eval · no_grad · fp16 · batch 32`.
    pub fn label(&self) -> String {
        let mut parts = vec![
            if self.eval { "eval" } else { "train" }.to_string(),
            self.grad.as_str().to_string(),
        ];
        if self.autocast != Autocast::Off {
            parts.push(self.autocast.as_str().to_string());
        }
        parts.extend(self.advanced.label_parts());
        parts.push(format!("batch {}", self.batch));
        parts.join(" · ")
    }
}
