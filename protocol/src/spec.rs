//! What a run asks for: the models, devices, modes and the [`RunSpec`] with its
//! structural checks against the server's [`Limits`].

use serde::{Deserialize, Serialize};
use std::fmt;

use crate::Advanced;

/// The models a run can use: the built-in architectures (random weights: weights do not
/// change memory or latency) and the team models of the server's models directory
/// ([`crate::team`]). In JSON, URLs and on the command line a model is its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
    /// A TorchScript module from the operator's models directory, by name (its file's
    /// stem). What it is lives in the registry of [`crate::team`].
    Team(&'static str),
    /// A Llama-style decoder LLM by name: a built-in preset or a team folder with a
    /// `config.json`. What it is lives in [`crate::decoder`].
    Decoder(&'static str),
}

/// Which family of network a model is: what it is built from and what its input is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Family {
    Mlp,
    ResNet,
    MobileNet,
    Encoder,
    Decoder,
    TorchScript,
}

/// What a model's input is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum InputKind {
    /// `[batch, features]` floats.
    Features,
    /// `[batch, 3, size, size]` images.
    Image,
    /// `[batch, tokens, width]` embeddings (the encoder).
    Embeddings,
    /// `[batch, tokens]` token ids (a decoder's prompt).
    TokenIds,
    /// Whatever a team model's sidecar lists.
    Sidecar,
}

/// The facts about a model that every consumer reads (checks, snippets, texts, the
/// experiments), from one table: [`ModelId::facts`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelFacts {
    pub family: Family,
    pub input: InputKind,
    /// Whether train mode adds randomness (Dropout, attention dropout).
    pub dropout: bool,
    /// Whether train mode uses batch statistics (BatchNorm).
    pub batchnorm: bool,
}

impl ModelId {
    /// The built-in models (team models: [`ModelId::served`]).
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
            ModelId::Team(name) | ModelId::Decoder(name) => name,
        }
    }

    /// Every model this process serves: the built-in ones, the decoders, then the team's.
    pub fn served() -> Vec<ModelId> {
        let decoders = crate::decoder::served()
            .into_iter()
            .map(|m| ModelId::Decoder(&m.name));
        let team = crate::team::served()
            .into_iter()
            .map(|m| ModelId::Team(&m.name));
        ModelId::ALL.into_iter().chain(decoders).chain(team).collect()
    }

    /// The decoder behind this id, when it is one and it is served here.
    pub fn decoder(self) -> Option<&'static crate::decoder::DecoderModel> {
        match self {
            ModelId::Decoder(name) => crate::decoder::lookup(name),
            _ => None,
        }
    }

    /// Whether this is a decoder LLM (generate runs need one).
    pub fn is_decoder(self) -> bool {
        self.facts().family == Family::Decoder
    }

    /// The one table of model facts. A new family is a new arm here, and nothing else can
    /// answer for it: there is no fallback arm.
    pub fn facts(self) -> ModelFacts {
        let f = |family, input, dropout, batchnorm| ModelFacts {
            family,
            input,
            dropout,
            batchnorm,
        };
        match self {
            ModelId::TinyMlp => f(Family::Mlp, InputKind::Features, true, true),
            ModelId::Resnet18 | ModelId::Resnet50 => f(Family::ResNet, InputKind::Image, false, true),
            ModelId::MobilenetV2 => f(Family::MobileNet, InputKind::Image, true, true),
            ModelId::Transformer => f(Family::Encoder, InputKind::Embeddings, true, false),
            ModelId::Decoder(_) => f(
                Family::Decoder,
                InputKind::TokenIds,
                self.decoder().is_some_and(|d| d.config.attention_dropout > 0.0),
                false,
            ),
            // Measured at load: train-mode randomness, and a deterministic train/eval
            // difference (BatchNorm-like).
            ModelId::Team(_) => {
                let t = self.team().map(|m| m.training);
                f(
                    Family::TorchScript,
                    InputKind::Sidecar,
                    t.is_some_and(|t| t.random_in_train),
                    t.is_some_and(|t| !t.random_in_train && t.train_differs_from_eval),
                )
            }
        }
    }

    /// What one sample of the input is, in words, at `size` (e.g. "64 tokens").
    pub fn describe_sample(self, size: u32) -> String {
        match self.facts().input {
            InputKind::Features => format!("{size} features"),
            InputKind::Image => format!("3×{size}×{size} images"),
            InputKind::Embeddings => format!("{size} tokens"),
            InputKind::TokenIds => format!("{size}-token prompts"),
            InputKind::Sidecar => match self.team() {
                Some(m) => m.sidecar.describe_inputs(),
                None => "inputs of a team model this server does not serve".into(),
            },
        }
    }

    /// The team model behind this id, when it is one and it is served here.
    pub fn team(self) -> Option<&'static crate::team::TeamModel> {
        match self {
            ModelId::Team(name) => crate::team::lookup(name),
            _ => None,
        }
    }

    pub fn display_name(self) -> &'static str {
        match self {
            ModelId::TinyMlp => "Tiny MLP (BatchNorm + Dropout)",
            ModelId::Resnet18 => "ResNet-18",
            ModelId::Resnet50 => "ResNet-50",
            ModelId::MobilenetV2 => "MobileNet-V2",
            ModelId::Transformer => "Transformer encoder (Dropout + LayerNorm)",
            ModelId::Team(name) => self
                .team()
                .map(|m| m.sidecar.display_name.as_str())
                .unwrap_or(name),
            ModelId::Decoder(name) => self
                .decoder()
                .map(|m| m.display_name.as_str())
                .unwrap_or(name),
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
            ModelId::Decoder(_) => InputShape {
                meaning: "prompt length in tokens",
                default: 32,
                max: self
                    .decoder()
                    .map_or(0, |d| d.config.max_position_embeddings.min(32_768)),
            },
            // A fixed-shape (or no longer served) team model has no adjustable size: 0.
            ModelId::Team(_) => match self.team() {
                Some(m) => InputShape {
                    meaning: m.input_meaning.as_str(),
                    default: m.sidecar.size.as_ref().map_or(0, |s| s.default),
                    max: m.sidecar.size.as_ref().map_or(0, |s| s.max),
                },
                None => InputShape {
                    meaning: "a team model this server does not serve",
                    default: 0,
                    max: 0,
                },
            },
        }
    }

    /// The smallest `input_size` this model accepts.
    pub fn min_input_size(self) -> u32 {
        match self {
            ModelId::Team(_) => self
                .team()
                .and_then(|m| m.sidecar.size.as_ref())
                .map_or(0, |s| s.min),
            ModelId::TinyMlp | ModelId::Transformer | ModelId::Decoder(_) => 1,
            ModelId::Resnet18 | ModelId::Resnet50 | ModelId::MobilenetV2 => 32,
        }
    }

    /// Whether the input is an image batch `[batch, 3, size, size]` (the torchvision
    /// models): the one list of image models, used by the checks, the snippets and the
    /// experiments that pick smaller images on a CPU.
    pub fn is_image(self) -> bool {
        self.facts().input == InputKind::Image
    }

    /// The built-in convolution models (the ones channels_last applies to).
    pub fn is_conv(self) -> bool {
        self.is_image()
    }

    /// Train-mode randomness (Dropout); for a team model measured at load, not read from
    /// layers.
    pub fn has_dropout(self) -> bool {
        self.facts().dropout
    }

    /// Train-mode batch statistics (BatchNorm); for a team model measured at load.
    pub fn has_batchnorm(self) -> bool {
        self.facts().batchnorm
    }

    /// The PyTorch expression that builds the same architecture, for snippets and peers
    /// (a team model is loaded from its file with `torch.jit.load`).
    pub fn python_constructor(self) -> String {
        let builtin = match self {
            // The same layers as the engine's tiny MLP (engine/src/models.rs), so the snippet
            // runs as copied.
            ModelId::TinyMlp => "nn.Sequential(\n    nn.Linear(features, 512), nn.BatchNorm1d(512), nn.ReLU(), nn.Dropout(0.5),\n    nn.Linear(512, 512), nn.BatchNorm1d(512), nn.ReLU(), nn.Dropout(0.5),\n    nn.Linear(512, 10),\n)",
            ModelId::Resnet18 => "torchvision.models.resnet18()",
            ModelId::Resnet50 => "torchvision.models.resnet50()",
            ModelId::MobilenetV2 => "torchvision.models.mobilenet_v2()",
            // PyTorch's own layer, configured like the engine's encoder (which writes the same
            // layer out op by op, as bench/peer.py's EncoderLayer does).
            ModelId::Transformer => "nn.TransformerEncoder(\n    nn.TransformerEncoderLayer(256, 4, 1024, 0.1, batch_first=True),\n    num_layers=4,\n    enable_nested_tensor=False,\n)",
            ModelId::Team(name) => {
                return format!("torch.jit.load(\"{name}.pt\", map_location=device)")
            }
            ModelId::Decoder(name) => {
                return match self.decoder() {
                    Some(d) => d.config.python_config(),
                    None => format!("# the decoder `{name}` is not served here"),
                }
            }
        };
        builtin.to_string()
    }
}

impl fmt::Display for ModelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl ModelId {
    /// "unknown model `x`; known models: ..." (the served ones, team models included), or,
    /// for a file of the models directory that was refused at start-up, why: "team model
    /// `x` is not served: x.pt: does not load as TorchScript: ...".
    pub fn unknown_message(name: &str) -> String {
        if let Some(why) = crate::team::refusal(name) {
            return format!("team model `{name}` is not served: {why}");
        }
        let known: Vec<_> = ModelId::served().iter().map(|m| m.as_str()).collect();
        format!("unknown model `{name}`; known models: {}", known.join(", "))
    }
}

/// Only served models parse: the command line and URLs name what can run.
impl std::str::FromStr for ModelId {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        ModelId::served()
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| ModelId::unknown_message(s))
    }
}

impl Serialize for ModelId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A model is named by a string: a built-in's, a decoder preset's or a team model's (the
/// names this server serves are in `GET /api/info`).
#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for ModelId {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .description(Some(
                "a served model's name (built-in, decoder preset or team model; see GET /api/info)",
            ))
            .examples([serde_json::json!("resnet18")])
            .into()
    }
}
#[cfg(feature = "openapi")]
impl utoipa::ToSchema for ModelId {}

/// A name that is not served still reads when it could be a team model's (a record of a
/// model the operator has since removed); [`RunSpec::check`] refuses to run it.
impl<'de> Deserialize<'de> for ModelId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = std::borrow::Cow::<'de, str>::deserialize(d)?;
        if let Some(m) = ModelId::ALL.into_iter().find(|m| m.as_str() == name) {
            return Ok(m);
        }
        if let Some(d) = crate::decoder::lookup(&name) {
            return Ok(ModelId::Decoder(&d.name));
        }
        crate::team::intern(&name)
            .map(ModelId::Team)
            .ok_or_else(|| serde::de::Error::custom(ModelId::unknown_message(&name)))
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// Set for a generate run on a decoder (the prompt length is `input_size`); absent for
    /// a forward run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generate: Option<crate::GenerateSpec>,
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
            generate: None,
        }
    }
}

/// Server-side bounds on a spec; the browser receives them to validate before sending.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
        if let ModelId::Team(name) = self.model {
            if self.model.team().is_none() {
                return err("model", ModelId::unknown_message(name));
            }
        }
        if let Some(size) = self.input_size {
            let shape = self.model.input();
            let min = self.model.min_input_size();
            if shape.max == 0 && size != 0 {
                return err(
                    "input_size",
                    format!(
                        "{} has a fixed input shape: leave input_size out",
                        self.model
                    ),
                );
            }
            if shape.max > 0 && (size < min || size > shape.max) {
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
        self.check_generate()?;
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

    /// The generate run's own rules: a decoder, a length within its context, a cache that
    /// CUDA graph replay can capture.
    fn check_generate(&self) -> Result<(), SpecError> {
        let err = |field: &str, message: String| {
            Err(SpecError {
                field: field.into(),
                message,
            })
        };
        if let ModelId::Decoder(name) = self.model {
            if self.model.decoder().is_none() {
                return err("model", ModelId::unknown_message(name));
            }
        }
        let Some(g) = &self.generate else {
            return Ok(());
        };
        let Some(decoder) = self.model.decoder() else {
            let decoders: Vec<_> = crate::decoder::served().iter().map(|d| d.name.as_str()).collect();
            return err(
                "model",
                format!(
                    "{} is not a decoder LLM, so it cannot generate; decoders: {}",
                    self.model,
                    decoders.join(", ")
                ),
            );
        };
        if g.new_tokens == 0 || g.new_tokens > crate::MAX_NEW_TOKENS {
            return err(
                "generate.new_tokens",
                format!(
                    "new_tokens must be between 1 and {}, not {}",
                    crate::MAX_NEW_TOKENS,
                    g.new_tokens
                ),
            );
        }
        let prompt = self.resolved_input_size();
        let total = prompt as u64 + g.new_tokens as u64;
        let max = decoder.config.max_position_embeddings as u64;
        if total > max {
            return err(
                "generate.new_tokens",
                format!(
                    "prompt {prompt} + {} new tokens = {total} positions, beyond {}'s max_position_embeddings of {max}",
                    g.new_tokens, self.model
                ),
            );
        }
        if let Some(w) = decoder.config.sliding_window {
            if (w as u64) < total {
                return err(
                    "generate.new_tokens",
                    format!(
                        "{}'s sliding window ({w}) is shorter than this run ({total} positions); Gradless attends to every position, so it would not match the model: shorten the run to {w}",
                        self.model
                    ),
                );
            }
        }
        if self.advanced.cuda_graph && g.cache != crate::KvCacheKind::Static {
            return err(
                "advanced.cuda_graph",
                format!(
                    "CUDA graph replay of the decode step needs the static cache (a {} cache changes its shapes every step, and a graph replays fixed shapes)",
                    g.cache.as_str()
                ),
            );
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
        if let Some(g) = &self.generate {
            parts.push(format!(
                "prompt {} + {} new · {} cache",
                self.resolved_input_size(),
                g.new_tokens,
                g.cache.as_str()
            ));
        }
        parts.join(" · ")
    }
}
