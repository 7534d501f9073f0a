//! What a run asks for: the devices, modes and the [`RunSpec`] with its structural checks
//! against the server's [`Limits`]. The models it names are in `model.rs`.

use serde::{Deserialize, Serialize};
use strum::{EnumString, IntoStaticStr, VariantArray, VariantNames};
use std::fmt;

use crate::settings::SettingId;
use crate::{Advanced, ModelId};

/// Which device a run asks for. `auto` means CUDA when the server has it, else the CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, EnumString, IntoStaticStr, VariantArray, VariantNames)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case", parse_err_ty = String, parse_err_fn = crate::words::unknown::<Self>)]
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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, EnumString, IntoStaticStr, VariantArray, VariantNames)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case", parse_err_ty = String, parse_err_fn = crate::words::unknown::<Self>)]
pub enum GradMode {
    /// PyTorch's default: every op on a tensor that requires grad records the graph.
    #[default]
    Enabled,
    /// `with torch.no_grad():`
    NoGrad,
    /// `with torch.inference_mode():`
    InferenceMode,
}

/// Automatic mixed precision around the forward pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, EnumString, IntoStaticStr, VariantArray, VariantNames)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case", parse_err_ty = String, parse_err_fn = crate::words::unknown::<Self>)]
pub enum Autocast {
    #[default]
    Off,
    Fp16,
    Bf16,
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
    /// Forward runs only: a generation warms up with one short generation of its own.
    pub warmup: u32,
    /// Timed iterations. Forward runs only: a generation times its prefill and each of its
    /// `generate.new_tokens` steps, once.
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
    pub field: FieldName,
    pub message: String,
}

impl SpecError {
    /// A refusal of setting `id`.
    pub fn at(id: SettingId, message: impl Into<String>) -> SpecError {
        SpecError { field: FieldName::Setting(id), message: message.into() }
    }
}

/// What a refusal names: a setting of the spec, or another part of a request (a
/// prediction, a path's step, a record's format). On the wire it is the name alone
/// (`generate.group_size`, `prediction`), as it always was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldName {
    Setting(SettingId),
    Other(String),
}

impl FieldName {
    pub fn as_str(&self) -> &str {
        match self {
            FieldName::Setting(id) => id.as_str(),
            FieldName::Other(name) => name,
        }
    }

    /// The setting it names, if it names one.
    pub fn setting(&self) -> Option<SettingId> {
        match self {
            FieldName::Setting(id) => Some(*id),
            FieldName::Other(_) => None,
        }
    }
}

impl From<SettingId> for FieldName {
    fn from(id: SettingId) -> FieldName {
        FieldName::Setting(id)
    }
}

/// A name as written: a setting's when it is one.
impl From<&str> for FieldName {
    fn from(name: &str) -> FieldName {
        SettingId::from_name(name).map_or_else(|| FieldName::Other(name.to_string()), FieldName::Setting)
    }
}

impl From<String> for FieldName {
    fn from(name: String) -> FieldName {
        FieldName::from(name.as_str())
    }
}

impl PartialEq<&str> for FieldName {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<SettingId> for FieldName {
    fn eq(&self, other: &SettingId) -> bool {
        self.setting() == Some(*other)
    }
}

impl fmt::Display for FieldName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for FieldName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for FieldName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(FieldName::from(String::deserialize(d)?))
    }
}

/// The name of the field at fault: a setting's place in the spec's JSON
/// (`generate.group_size`), or another part of the request.
#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for FieldName {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new().schema_type(utoipa::openapi::schema::Type::String).into()
    }
}
#[cfg(feature = "openapi")]
impl utoipa::ToSchema for FieldName {}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for SpecError {}

impl RunSpec {
    /// The input size this spec will use.
    pub fn resolved_input_size(&self) -> u32 {
        if let Some(text) = self.generate.as_ref().and_then(|g| g.prompt_text.as_ref()) {
            // A byte model's prompt is [BOS] + its bytes; a tokenized one's length is what
            // its tokenizer makes of it, which the engine sets as `input_size`.
            if self.model.decoder().and_then(|d| d.byte_bos()).is_some() {
                return text.len() as u32 + 1;
            }
        }
        self.input_size.unwrap_or(self.model.input().default)
    }

    /// Checks the rules that need no device, against what `catalog` serves (the model is
    /// resolved first: [`crate::Catalog::resolve`]; one that is still a name is not served).
    /// The engine adds the device-dependent ones.
    pub fn check(&self, catalog: &crate::Catalog, limits: &Limits) -> Result<(), SpecError> {
        let err = |field: SettingId, message: String| {
            Err(SpecError {
                field: field.into(),
                message,
            })
        };
        if self.batch == 0 {
            return err(SettingId::Batch, "batch must be at least 1".into());
        }
        if self.batch > limits.max_batch {
            return err(
                SettingId::Batch,
                format!(
                    "batch {} is above this server's limit of {}",
                    self.batch, limits.max_batch
                ),
            );
        }
        if let ModelId::Named(name) = self.model {
            return err(SettingId::Model, catalog.unknown_message(&name));
        }
        if let Some(size) = self.input_size {
            let shape = self.model.input();
            let min = self.model.min_input_size();
            if shape.max == 0 && size != 0 {
                return err(
                    SettingId::InputSize,
                    format!(
                        "{} has a fixed input shape: leave input_size out",
                        self.model
                    ),
                );
            }
            if shape.max > 0 && (size < min || size > shape.max) {
                return err(
                    SettingId::InputSize,
                    format!(
                        "input_size {size} is out of range for {} ({}): allowed {min}..={}",
                        self.model, shape.meaning, shape.max
                    ),
                );
            }
        }
        if self.iters == 0 {
            return err(SettingId::Iters, "at least one timed iteration is needed".into());
        }
        if self.iters > limits.max_iters {
            return err(
                SettingId::Iters,
                format!(
                    "iters {} is above the limit of {}",
                    self.iters, limits.max_iters
                ),
            );
        }
        if self.warmup > limits.max_warmup {
            return err(
                SettingId::Warmup,
                format!(
                    "warmup {} is above the limit of {}",
                    self.warmup, limits.max_warmup
                ),
            );
        }
        self.advanced.check_format(self.model)?;
        if let Some(message) = crate::compiled_refusal(self) {
            return err(SettingId::Compiled, message);
        }
        self.advanced.check_graph()?;
        self.check_generate(catalog)?;
        if let Some(t) = self.threads {
            if t == 0 || t > limits.max_threads {
                return err(
                    SettingId::Threads,
                    format!("threads must be between 1 and {}", limits.max_threads),
                );
            }
        }
        Ok(())
    }

    /// A text prompt and a quality measurement: a text prompt for a model that reads text
    /// (the byte model, a team folder with a tokenizer), not empty, within its byte bound
    /// and, for the byte model, the prompt's length its own; quality for the trained model.
    fn check_prompt_text(&self, g: &crate::GenerateSpec, decoder: &crate::decoder::DecoderModel) -> Result<(), SpecError> {
        use crate::decoder::TextVocab;
        let err = |field: SettingId, message: String| {
            Err(SpecError {
                field: field.into(),
                message,
            })
        };
        if g.quality && !decoder.takes_text() {
            return err(
                SettingId::Quality,
                format!(
                    "{} reads no text (neither a byte vocabulary nor a tokenizer.json), so there is no text to measure its quality on; the trained model `{}` and a team folder with its tokenizer can",
                    self.model,
                    crate::decoder::TRAINED_PRESET
                ),
            );
        }
        let Some(text) = &g.prompt_text else {
            return Ok(());
        };
        let Some(vocab) = decoder.text_vocab() else {
            return err(
                SettingId::PromptText,
                format!(
                    "{} has neither a byte vocabulary nor a tokenizer.json in its folder, so its prompt is random token ids (input_size); a text prompt needs a model that reads text, such as `{}` or a team folder with its tokenizer",
                    self.model,
                    crate::decoder::TRAINED_PRESET
                ),
            );
        };
        if text.is_empty() {
            return err(SettingId::PromptText, "the prompt text is empty: give at least one character".into());
        }
        let bytes = text.len() as u32;
        let max = match vocab {
            TextVocab::Bytes { .. } => crate::MAX_PROMPT_TEXT_BYTES,
            TextVocab::Tokenizer(_) => crate::MAX_TOKENIZED_TEXT_BYTES,
        };
        if bytes > max {
            return err(
                SettingId::PromptText,
                format!("the prompt text is {bytes} bytes of UTF-8, above the {max} a prompt may have here"),
            );
        }
        // A tokenized prompt's length is counted in tokens by the engine's check, which
        // holds the tokenizer.
        if let (TextVocab::Bytes { .. }, Some(n)) = (vocab, self.input_size.filter(|n| *n != bytes + 1)) {
            return err(
                SettingId::InputSize,
                format!("the prompt text sets the prompt's length ([BOS] + {bytes} bytes = {}), not {n}: leave input_size out", bytes + 1),
            );
        }
        Ok(())
    }

    /// The generate run's own rules: a decoder, a length within its context, a cache that
    /// CUDA graph replay can capture.
    fn check_generate(&self, catalog: &crate::Catalog) -> Result<(), SpecError> {
        let err = |field: SettingId, message: String| {
            Err(SpecError {
                field: field.into(),
                message,
            })
        };
        let Some(g) = &self.generate else {
            return Ok(());
        };
        let Some(decoder) = self.model.decoder() else {
            let decoders: Vec<_> = catalog.decoders().map(|d| d.name.clone()).collect();
            return err(
                SettingId::Model,
                format!(
                    "{} is not a decoder LLM, so it cannot generate; decoders: {}",
                    self.model,
                    decoders.join(", ")
                ),
            );
        };
        if g.new_tokens == 0 || g.new_tokens > crate::MAX_NEW_TOKENS {
            return err(
                SettingId::NewTokens,
                format!(
                    "new_tokens must be between 1 and {}, not {}",
                    crate::MAX_NEW_TOKENS,
                    g.new_tokens
                ),
            );
        }
        self.check_prompt_text(g, &decoder)?;
        let prompt = self.resolved_input_size();
        let total = prompt as u64 + g.new_tokens as u64;
        let max = decoder.config.max_position_embeddings as u64;
        if total > max {
            return err(
                SettingId::NewTokens,
                format!(
                    "prompt {prompt} + {} new tokens = {total} positions, beyond {}'s max_position_embeddings of {max}",
                    g.new_tokens, self.model
                ),
            );
        }
        crate::check_quant(g.weights, g.group_size, &decoder.config)?;
        let logits = self.batch as u64 * decoder.config.vocab_size as u64;
        if g.prefill_logits && logits > crate::MAX_PREFILL_LOGITS {
            return err(
                SettingId::PrefillLogits,
                format!(
                    "prefill_logits would return batch {} × vocab {} = {logits} numbers, above the {} this server returns; use a smaller batch",
                    self.batch,
                    decoder.config.vocab_size,
                    crate::MAX_PREFILL_LOGITS
                ),
            );
        }
        if g.kv_dtype != crate::KvDtype::AsActivations && g.cache == crate::KvCacheKind::Off {
            return err(
                SettingId::KvDtype,
                format!("kv_dtype {} sets the KV cache's dtype, and this run keeps no cache (cache off)", g.kv_dtype.as_str()),
            );
        }
        if g.kv_dtype != crate::KvDtype::AsActivations && self.advanced.cuda_graph {
            return err(
                SettingId::KvDtype,
                "a cache in another dtype than the activations is not captured in CUDA graphs here; turn advanced.cuda_graph off".into(),
            );
        }
        if !g.weights.is_none() && self.autocast != Autocast::Off {
            return err(
                SettingId::Quant,
                format!(
                    "{} linear layers run PyTorch's packed kernels in the weights' dtype (advanced.dtype), which autocast does not cast into; turn autocast off and set advanced.dtype to fp16 or bf16 for half-precision activations",
                    g.weights.as_str()
                ),
            );
        }
        if self.advanced.cuda_graph && decoder.config.moe.is_some() {
            return err(
                SettingId::CudaGraph,
                format!(
                    "{} is a mixture of experts: each step's router picks its experts on the host (which tokens go to which expert decides the kernels), and a CUDA graph replays fixed kernels; turn advanced.cuda_graph off",
                    self.model
                ),
            );
        }
        if self.advanced.cuda_graph && g.cache != crate::KvCacheKind::Static {
            return err(
                SettingId::CudaGraph,
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
}
