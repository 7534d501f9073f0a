//! The models a run can name: [`ModelId`] (the built-in architectures, the decoder presets
//! and the team's models), their families, inputs and facts, and how a model is spelled in
//! JSON, URLs and on the command line.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The longest model name: a hub repository's `ORG/NAME` ([`crate::team::MAX_HUB_NAME_LEN`]).
pub const MAX_MODEL_NAME: usize = 128;

/// A name that is not built in, held inline: owned, `Copy`, no allocation. Reading one (a
/// request, a record) has no side effect; what it names is looked up in a
/// [`crate::Catalog`] when it is used, and a record of a model no longer served still reads
/// and says so.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ModelName {
    len: u8,
    bytes: [u8; MAX_MODEL_NAME],
}

impl ModelName {
    /// `name` when it fits ([`MAX_MODEL_NAME`] bytes, not empty).
    pub fn new(name: &str) -> Option<ModelName> {
        if name.is_empty() || name.len() > MAX_MODEL_NAME {
            return None;
        }
        let mut bytes = [0; MAX_MODEL_NAME];
        bytes[..name.len()].copy_from_slice(name.as_bytes());
        Some(ModelName { len: name.len() as u8, bytes })
    }

    pub fn as_str(&self) -> &str {
        // Built from a &str in `new`, never changed after.
        std::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or_default()
    }
}

impl std::ops::Deref for ModelName {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Debug for ModelName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for ModelName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for ModelName {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// The models a run can use: the built-in architectures (random weights: weights do not
/// change memory or latency), the decoders and the team models of the server's models
/// directory ([`crate::team`]), as a [`crate::Catalog`] serves them. In JSON, URLs and on
/// the command line a model is its name; two ids are equal when their names are.
#[derive(Clone, Copy)]
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
    /// A TorchScript module from the operator's models directory (named by its file's
    /// stem), as the catalog that resolved it serves it.
    Team(&'static crate::team::TeamModel),
    /// A Llama-style decoder LLM: a built-in preset or a team folder with a `config.json`.
    Decoder(&'static crate::decoder::DecoderModel),
    /// A name read without a catalog (a request body, a record) that is neither a built-in
    /// model nor a preset: a team model or decoder, or one no longer served.
    /// [`crate::Catalog::resolve`] turns it into what it names; the spec's check refuses
    /// one that stays a name (not served here).
    Named(ModelName),
}

impl PartialEq for ModelId {
    fn eq(&self, other: &ModelId) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for ModelId {}

impl std::hash::Hash for ModelId {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.as_str().hash(h)
    }
}

impl fmt::Debug for ModelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelId::Team(m) => write!(f, "Team({:?})", m.name),
            ModelId::Decoder(m) => write!(f, "Decoder({:?})", m.name),
            ModelId::Named(n) => write!(f, "Named({n:?})"),
            _ => f.write_str(self.as_str()),
        }
    }
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
    /// The built-in models (with the decoders and team models: [`crate::Catalog::models`]).
    pub const ALL: [ModelId; 5] = [
        ModelId::TinyMlp,
        ModelId::Resnet18,
        ModelId::Resnet50,
        ModelId::MobilenetV2,
        ModelId::Transformer,
    ];

    /// The identifier used in JSON, URLs and on the command line.
    pub fn as_str(&self) -> &str {
        match self {
            ModelId::TinyMlp => "tiny_mlp",
            ModelId::Resnet18 => "resnet18",
            ModelId::Resnet50 => "resnet50",
            ModelId::MobilenetV2 => "mobilenet_v2",
            ModelId::Transformer => "transformer",
            ModelId::Team(m) => &m.name,
            ModelId::Decoder(m) => &m.name,
            ModelId::Named(name) => name.as_str(),
        }
    }

    /// A built-in model or decoder preset by name: what needs no catalog.
    pub fn built_in(name: &str) -> Option<ModelId> {
        ModelId::ALL
            .into_iter()
            .find(|m| m.as_str() == name)
            .or_else(|| crate::decoder::preset(name).map(ModelId::Decoder))
    }

    /// The decoder behind this id, when it is one.
    pub fn decoder(self) -> Option<&'static crate::decoder::DecoderModel> {
        match self {
            ModelId::Decoder(m) => Some(m),
            _ => None,
        }
    }

    /// Whether this is a decoder LLM (generate runs need one).
    pub fn is_decoder(self) -> bool {
        matches!(self, ModelId::Decoder(_))
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
            ModelId::Decoder(d) => f(Family::Decoder, InputKind::TokenIds, d.config.attention_dropout > 0.0, false),
            // Measured at load: train-mode randomness, and a deterministic train/eval
            // difference (BatchNorm-like). A name not served is a team model's as far as
            // anything can say (what a record of a removed one reads as).
            ModelId::Team(m) => f(
                Family::TorchScript,
                InputKind::Sidecar,
                m.training.random_in_train,
                !m.training.random_in_train && m.training.train_differs_from_eval,
            ),
            ModelId::Named(_) => f(Family::TorchScript, InputKind::Sidecar, false, false),
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

    /// The team model behind this id, when it is one.
    pub fn team(self) -> Option<&'static crate::team::TeamModel> {
        match self {
            ModelId::Team(m) => Some(m),
            _ => None,
        }
    }

    pub fn display_name(self) -> String {
        match self {
            ModelId::TinyMlp => "Tiny MLP (BatchNorm + Dropout)".into(),
            ModelId::Resnet18 => "ResNet-18".into(),
            ModelId::Resnet50 => "ResNet-50".into(),
            ModelId::MobilenetV2 => "MobileNet-V2".into(),
            ModelId::Transformer => "Transformer encoder (Dropout + LayerNorm)".into(),
            ModelId::Team(m) => m.sidecar.display_name.clone(),
            ModelId::Decoder(m) => m.display_name.clone(),
            ModelId::Named(name) => name.to_string(),
        }
    }

    /// What `input_size` means for this model, and its default.
    pub fn input(self) -> InputShape {
        match self {
            ModelId::TinyMlp => InputShape {
                meaning: "features per sample".into(),
                default: 512,
                max: 65_536,
            },
            ModelId::Resnet18 | ModelId::Resnet50 | ModelId::MobilenetV2 => InputShape {
                meaning: "image side in pixels (3×N×N)".into(),
                default: 224,
                max: 1024,
            },
            ModelId::Transformer => InputShape {
                meaning: "sequence length in tokens".into(),
                default: 128,
                max: 4096,
            },
            ModelId::Decoder(d) => InputShape {
                meaning: "prompt length in tokens".into(),
                default: 32,
                max: d.config.max_position_embeddings.min(32_768),
            },
            // A fixed-shape (or no longer served) team model has no adjustable size: 0.
            ModelId::Team(m) => InputShape {
                meaning: m.input_meaning.clone().into(),
                default: m.sidecar.size.as_ref().map_or(0, |s| s.default),
                max: m.sidecar.size.as_ref().map_or(0, |s| s.max),
            },
            ModelId::Named(_) => InputShape {
                meaning: "a team model this server does not serve".into(),
                default: 0,
                max: 0,
            },
        }
    }

    /// The smallest `input_size` this model accepts.
    pub fn min_input_size(self) -> u32 {
        match self {
            ModelId::Team(m) => m.sidecar.size.as_ref().map_or(0, |s| s.min),
            ModelId::Named(_) => 0,
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
            // layer out op by op, as python/gradless/models.py's EncoderLayer does).
            ModelId::Transformer => "nn.TransformerEncoder(\n    nn.TransformerEncoderLayer(256, 4, 1024, 0.1, batch_first=True),\n    num_layers=4,\n    enable_nested_tensor=False,\n)",
            ModelId::Team(_) | ModelId::Named(_) => {
                return format!("torch.jit.load(\"{self}.pt\", map_location=device)")
            }
            ModelId::Decoder(d) => return d.config.python_config(),
        };
        builtin.to_string()
    }
}

impl fmt::Display for ModelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
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

/// Parsing a name is reading it (see the `Deserialize` impl below): a built-in's or a
/// preset's name is that model, any other possible name is a [`ModelId::Named`] to resolve
/// with [`crate::Catalog::resolve`] (or parse with [`crate::Catalog::parse`], which refuses
/// what is not served).
impl std::str::FromStr for ModelId {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        serde_json::from_value(serde_json::Value::String(s.into())).map_err(|e| e.to_string())
    }
}

/// Reading needs no catalog: a built-in model's or a preset's name reads as that model; any
/// other name that could be a team model's or a decoder's (a request, a record of a model
/// the operator has since removed) is held inline as [`ModelId::Named`], nothing is
/// registered, and [`crate::Catalog::resolve`] finds what it names ([`RunSpec::check`]
/// refuses it when nothing: not served).
impl<'de> Deserialize<'de> for ModelId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = std::borrow::Cow::<'de, str>::deserialize(d)?;
        if let Some(m) = ModelId::built_in(&name) {
            return Ok(m);
        }
        Some(&*name)
            .filter(|n| crate::team::valid_name(n) || crate::team::valid_hub_name(n))
            .and_then(ModelName::new)
            .map(ModelId::Named)
            .ok_or_else(|| serde::de::Error::custom(crate::Catalog::built_in().unknown_message(&name)))
    }
}

impl ModelId {
    /// `self`, or `resolved` when that is the same model already resolved in a catalog:
    /// read back from JSON (a report of a run this page submitted), a team model's id is
    /// its name again.
    pub fn or_resolved(self, resolved: ModelId) -> ModelId {
        if self == resolved { resolved } else { self }
    }
}

/// The meaning, default and upper bound of a model's `input_size`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputShape {
    pub meaning: std::borrow::Cow<'static, str>,
    pub default: u32,
    pub max: u32,
}

#[cfg(test)]
mod name_tests {
    use super::*;

    /// Reading a name has no side effect: a record of a model no longer served reads (its
    /// name kept whole, a hub repository's `ORG/NAME` included) as often as it is read, the
    /// served list never grows, and running it is refused saying it is not served.
    #[test]
    fn a_name_that_is_not_served_reads_without_registering_anything() {
        let catalog = crate::Catalog::built_in();
        let served = catalog.models().len();
        for i in 0..1000 {
            let name = format!("gone_model_{i}");
            let id: ModelId = serde_json::from_value(serde_json::json!(name)).unwrap();
            assert_eq!(id.as_str(), name);
            assert!(id.team().is_none() && id.decoder().is_none());
        }
        let hub: ModelId = serde_json::from_str("\"some-org/some.model-7B\"").unwrap();
        assert_eq!(hub.to_string(), "some-org/some.model-7B");
        assert_eq!(serde_json::to_string(&hub).unwrap(), "\"some-org/some.model-7B\"");
        assert_eq!(catalog.models().len(), served, "reading names registered nothing");
        assert_eq!(catalog.resolve(hub).team(), None, "a name not served stays a name");
        let spec = crate::RunSpec { model: hub, ..crate::RunSpec::default() };
        let e = spec.check(&catalog, &crate::Limits::default()).unwrap_err();
        assert_eq!(e.field, "model");
        assert!(e.message.contains("not served"), "{}", e.message);
        // What cannot be a model's name is refused in the reading, naming why.
        for bad in ["\"../etc\"", "\"a b\"", &format!("\"{}\"", "x".repeat(MAX_MODEL_NAME + 1))] {
            assert!(serde_json::from_str::<ModelId>(bad).is_err(), "{bad}");
        }
    }
}
