//! The decoder families: one file each (`llama.rs`, `mistral.rs`, `qwen2.rs`, `qwen3.rs`,
//! `gemma3.rs`, `qwen3_moe.rs`, `mixtral.rs`, `phi3.rs`), as candle-transformers lays them
//! out. A family
//! is a [`Family`]: its own config struct, deserialized from `config.json` with serde (an
//! unknown field, a wrong type, a missing field or two fields that contradict each other is
//! an error naming the field), turned into the [`DecoderConfig`] every page, report and the
//! decoder itself read; and the [`Layout`] of its weights in a `save_pretrained`
//! checkpoint. What differs in the forward pass (q/k norms, Gemma's norms and GeGLU, the
//! sliding layers, the experts) is read from the `DecoderConfig` by the one
//! [`super::Decoder`], so the generation loop, the CUDA-graph decode, the drift and the
//! admission estimate run every family through the same type.
//!
//! A new family: a file here with its config struct and `impl Family`, an entry in
//! [`super::FAMILIES`] and in `protocol::decoder::Architecture`, and, when its block computes
//! something no family computes yet, that computation in `super::block`, switched by a
//! `DecoderConfig` field.

use protocol::decoder::{Architecture, DecoderConfig, LayerType, Llama3Rope};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{Map, Value};


/// A decoder family: how its `config.json` reads and where its weights sit.
pub trait Family: Sync {
    /// The `architectures[0]` it reads.
    fn architecture(&self) -> Architecture;

    /// Reads `config.json` (its fields, metadata already set aside) with the family's own
    /// config struct into the shape Gradless builds.
    fn read(&self, fields: Map<String, Value>) -> Result<DecoderConfig, String>;

    /// Where its weights sit in a checkpoint.
    fn layout(&self) -> Layout {
        Layout::LLAMA
    }
}

/// Where a family's weights sit under `model.layers.N`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The MLP's module: `mlp` (Mixtral's experts: `block_sparse_moe`).
    pub mlp: &'static str,
    /// One expert's gate, up and down projections under `<mlp>.experts.E` (`gate_proj`,
    /// `up_proj`, `down_proj`; Mixtral's `w1`, `w3`, `w2`).
    pub expert: [&'static str; 3],
    /// The router under the MLP's module.
    pub router: &'static str,
    /// Phi-3's fused projections: `self_attn.qkv_proj` for q, k and v, `mlp.gate_up_proj`
    /// for the gate and up projections (the same sums as the separate ones).
    pub fused: bool,
}

impl Layout {
    pub const LLAMA: Layout = Layout {
        mlp: "mlp",
        expert: ["gate_proj", "up_proj", "down_proj"],
        router: "gate",
        fused: false,
    };
}

/// Deserializes `fields` into a family's config struct (`deny_unknown_fields`), naming the
/// field on any error.
pub(super) fn parse<T: DeserializeOwned>(a: Architecture, fields: Map<String, Value>) -> Result<T, String> {
    serde_path_to_error::deserialize(Value::Object(fields)).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.inner().to_string();
        if let Some(rest) = inner.strip_prefix("unknown field `") {
            let field = rest.split('`').next().unwrap_or(rest);
            // The path already ends with the field at the top level (`attention_bias`): name
            // the field once.
            let at = match path.strip_suffix(field).map(|p| p.trim_end_matches('.')) {
                _ if path == "." => String::new(),
                Some("") => String::new(),
                Some(parent) => format!("{parent}."),
                None => format!("{path}."),
            };
            return format!(
                "`{at}{field}` is not a config.json field Gradless reads for {}: it does not build what the field may change, so it refuses the config rather than build another model; remove the field if it has no effect",
                a.class_name()
            );
        }
        if let Some(rest) = inner.strip_prefix("missing field `") {
            let field = rest.split('`').next().unwrap_or(rest);
            return format!("config.json lacks the required field `{field}`");
        }
        format!("`{path}`: {inner}")
    })
}

/// For `Option<Option<T>>` fields: absent (`None`) apart from `null` (`Some(None)`), where
/// transformers' default differs from "none" (Mistral's `sliding_window`).
pub(super) fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

/// Declares a family's config struct: the fields every decoder's `config.json` shares, then
/// the family's own. Unknown fields are refused (`deny_unknown_fields`).
macro_rules! hf_config {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $f:ident : $t:ty,)* }) => {
        $(#[$m])*
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub(super) struct $name {
            pub vocab_size: u32,
            pub hidden_size: u32,
            pub intermediate_size: u32,
            pub num_hidden_layers: u32,
            pub num_attention_heads: u32,
            #[serde(default)]
            pub num_key_value_heads: Option<u32>,
            #[serde(default)]
            pub head_dim: Option<u32>,
            #[serde(default)]
            pub max_position_embeddings: Option<u32>,
            #[serde(default)]
            pub rms_norm_eps: Option<f64>,
            #[serde(default)]
            pub tie_word_embeddings: Option<bool>,
            #[serde(default)]
            pub attention_dropout: Option<f64>,
            #[serde(default)]
            pub initializer_range: Option<f64>,
            #[serde(default)]
            pub hidden_act: Option<String>,
            $($(#[$fm])* pub $f: $t,)*
        }

        impl $name {
            /// The fields every family shares.
            pub fn core(&self) -> $crate::models::decoder::family::Core {
                $crate::models::decoder::family::Core {
                    vocab_size: self.vocab_size,
                    hidden_size: self.hidden_size,
                    intermediate_size: self.intermediate_size,
                    num_hidden_layers: self.num_hidden_layers,
                    num_attention_heads: self.num_attention_heads,
                    num_key_value_heads: self.num_key_value_heads,
                    head_dim: self.head_dim,
                    max_position_embeddings: self.max_position_embeddings,
                    rms_norm_eps: self.rms_norm_eps,
                    tie_word_embeddings: self.tie_word_embeddings,
                    attention_dropout: self.attention_dropout,
                    initializer_range: self.initializer_range,
                }
            }
        }
    };
}
pub(super) use hf_config;

/// The fields every family shares, as read.
pub struct Core {
    pub vocab_size: u32,
    pub hidden_size: u32,
    pub intermediate_size: u32,
    pub num_hidden_layers: u32,
    pub num_attention_heads: u32,
    pub num_key_value_heads: Option<u32>,
    pub head_dim: Option<u32>,
    pub max_position_embeddings: Option<u32>,
    pub rms_norm_eps: Option<f64>,
    pub tie_word_embeddings: Option<bool>,
    pub attention_dropout: Option<f64>,
    pub initializer_range: Option<f64>,
}

/// transformers' defaults for a family's config class, where a config.json leaves a field
/// out.
pub(super) struct Defaults {
    pub max_position_embeddings: u32,
    pub rms_norm_eps: f64,
    pub tie_word_embeddings: bool,
    /// `head_dim` when absent (Qwen3's 128); `None`: hidden_size / num_attention_heads.
    pub head_dim: Option<u32>,
}

/// The shape from the shared fields, checked: the heads must group evenly over the KV
/// heads, the head width must be given or divide the hidden size, and be even (RoPE
/// rotates pairs). RoPE and the family's own fields are the family's to fill.
pub(super) fn shape(a: Architecture, c: Core, d: Defaults) -> Result<DecoderConfig, String> {
    let positive = |name: &str, v: u32| {
        if v == 0 {
            Err(format!("`{name}` must be a positive integer, not 0"))
        } else {
            Ok(v)
        }
    };
    for (name, v) in [
        ("vocab_size", c.vocab_size),
        ("hidden_size", c.hidden_size),
        ("intermediate_size", c.intermediate_size),
        ("num_hidden_layers", c.num_hidden_layers),
        ("num_attention_heads", c.num_attention_heads),
    ] {
        positive(name, v)?;
    }
    let heads = c.num_attention_heads;
    let kv_heads = positive("num_key_value_heads", c.num_key_value_heads.unwrap_or(heads))?;
    if heads % kv_heads != 0 {
        return Err(format!(
            "`num_key_value_heads` ({kv_heads}) must divide num_attention_heads ({heads}): each KV head serves a whole group of query heads"
        ));
    }
    let head_dim = match c.head_dim.or(d.head_dim) {
        Some(h) => positive("head_dim", h)?,
        None if c.hidden_size % heads == 0 => c.hidden_size / heads,
        None => {
            return Err(format!(
                "`head_dim` is not given and hidden_size ({}) does not divide into num_attention_heads ({heads}) heads: give `head_dim`",
                c.hidden_size
            ))
        }
    };
    if head_dim % 2 != 0 {
        return Err(format!("`head_dim` ({head_dim}) must be even: rotary embeddings rotate pairs of dimensions"));
    }
    let attention_dropout = c.attention_dropout.unwrap_or(0.0);
    if !(0.0..1.0).contains(&attention_dropout) {
        return Err(format!("`attention_dropout` ({attention_dropout}) must be in [0, 1)"));
    }
    Ok(DecoderConfig {
        architecture: a,
        hidden_size: c.hidden_size,
        intermediate_size: c.intermediate_size,
        num_hidden_layers: c.num_hidden_layers,
        num_attention_heads: heads,
        num_key_value_heads: kv_heads,
        head_dim,
        vocab_size: c.vocab_size,
        max_position_embeddings: positive(
            "max_position_embeddings",
            c.max_position_embeddings.unwrap_or(d.max_position_embeddings),
        )?,
        rope_theta: 10_000.0,
        rope_llama3: None,
        rms_norm_eps: c.rms_norm_eps.unwrap_or(d.rms_norm_eps),
        tie_word_embeddings: c.tie_word_embeddings.unwrap_or(d.tie_word_embeddings),
        attention_bias: false,
        attention_dropout,
        sliding_window: None,
        initializer_range: c.initializer_range.unwrap_or(0.02),
        layer_types: vec![],
        qk_norm: false,
        rope_local_theta: None,
        rope_linear_factor: None,
        query_pre_attn_scalar: None,
        moe: None,
    })
}

/// The activation a family's MLP runs: the config's `hidden_act` (or Gemma's
/// `hidden_activation`) must be `want`'s.
pub(super) fn check_activation(field: &str, given: Option<&str>, want: &[&str]) -> Result<(), String> {
    match given {
        Some(act) if !want.contains(&act) => Err(format!(
            "`{field}` `{act}` is not implemented for this family (its MLP uses {})",
            want[0]
        )),
        _ => Ok(()),
    }
}

/// RoPE's settings as transformers 5 writes them (`rope_parameters`) or 4.x
/// (`rope_scaling`): the types Gradless implements.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RopeParams {
    #[serde(default)]
    pub rope_theta: Option<f64>,
    #[serde(default)]
    pub rope_type: Option<String>,
    /// transformers 4.x's older spelling of `rope_type`.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    #[serde(default)]
    pub factor: Option<f64>,
    #[serde(default)]
    pub low_freq_factor: Option<f64>,
    #[serde(default)]
    pub high_freq_factor: Option<f64>,
    #[serde(default)]
    pub original_max_position_embeddings: Option<u32>,
}

/// What RoPE computes for one layer type: its base, and Llama 3's or linear scaling.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Rope {
    pub theta: f64,
    pub llama3: Option<Llama3Rope>,
    pub linear: Option<f64>,
}

/// Reads a RoPE settings object (`field` names it in errors) as [`RopeParams`], refusing
/// the types Gradless does not implement by name before their own fields are read.
pub(super) fn rope_params(field: &str, v: Option<Value>) -> Result<Option<RopeParams>, String> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let kind = v
        .get("rope_type")
        .or_else(|| v.get("type"))
        .and_then(|t| t.as_str())
        .unwrap_or("default");
    if !["default", "llama3", "linear"].contains(&kind) {
        return Err(format!(
            "`{field}`: RoPE type `{kind}` is not implemented (implemented: default, llama3, linear)"
        ));
    }
    serde_path_to_error::deserialize(v)
        .map(Some)
        .map_err(|e| format!("`{field}.{}`: {}", e.path(), e.inner()))
}

/// The RoPE of a layer type from the top-level `rope_theta` and the settings object,
/// `default_theta` when neither gives a base. A base given twice must agree.
pub(super) fn rope(field: &str, top_theta: Option<f64>, params: Option<RopeParams>, default_theta: f64) -> Result<Rope, String> {
    let p = params.unwrap_or_default();
    let theta = match (top_theta, p.rope_theta) {
        (Some(a), Some(b)) if a != b => {
            return Err(format!("`rope_theta` ({a}) contradicts `{field}.rope_theta` ({b})"))
        }
        (Some(t), _) | (None, Some(t)) => t,
        (None, None) => default_theta,
    };
    if !(theta > 0.0) {
        return Err(format!("`rope_theta` must be positive, not {theta}"));
    }
    let kind = p.rope_type.as_deref().or(p.kind.as_deref()).unwrap_or("default");
    let factor = |what: &str| {
        p.factor
            .filter(|f| *f > 0.0)
            .ok_or_else(|| format!("`{field}`: {what} RoPE scaling needs a positive `factor`"))
    };
    Ok(match kind {
        "llama3" => Rope {
            theta,
            llama3: Some(Llama3Rope {
                factor: factor("llama3")?,
                low_freq_factor: p.low_freq_factor.unwrap_or(1.0),
                high_freq_factor: p.high_freq_factor.unwrap_or(4.0),
                original_max_position_embeddings: p.original_max_position_embeddings.unwrap_or(8192),
            }),
            linear: None,
        },
        "linear" => Rope {
            theta,
            llama3: None,
            linear: Some(factor("linear")?),
        },
        _ => Rope {
            theta,
            llama3: None,
            linear: None,
        },
    })
}

/// Puts a RoPE on the config: Llama 3 scaling as it was; linear scaling on the full layers.
pub(super) fn set_rope(c: &mut DecoderConfig, r: Rope) {
    c.rope_theta = r.theta;
    c.rope_llama3 = r.llama3;
    c.rope_linear_factor = r.linear;
}

/// A sliding window must hold at least one position.
pub(super) fn check_window(w: Option<u32>) -> Result<Option<u32>, String> {
    match w {
        Some(0) => Err("`sliding_window` must be at least 1 (a window of 0 positions would attend to nothing)".into()),
        w => Ok(w),
    }
}

/// `layer_types` as given, checked against the layer count and the window; normalised so
/// that a decoder whose layers are all of one type lists none (see
/// `DecoderConfig::layer_types`).
pub(super) fn set_layer_types(c: &mut DecoderConfig, types: Vec<LayerType>, window: Option<u32>) -> Result<(), String> {
    let layers = c.num_hidden_layers as usize;
    if types.len() != layers {
        return Err(format!(
            "`layer_types` lists {} layers, and num_hidden_layers is {layers}",
            types.len()
        ));
    }
    let sliding = types.iter().filter(|t| **t == LayerType::Sliding).count();
    if sliding > 0 && window.is_none() {
        return Err("`layer_types` names sliding_attention layers, and the config sets no sliding window (`sliding_window`, with `use_sliding_window: true` where the family has it)".into());
    }
    if sliding == 0 {
        c.layer_types = vec![];
        c.sliding_window = None;
    } else if sliding == layers {
        c.layer_types = vec![];
        c.sliding_window = window;
    } else {
        c.layer_types = types;
        c.sliding_window = window;
    }
    Ok(())
}

/// The RoPE settings object of a config that may write it either way: transformers 5's
/// `rope_parameters` or 4.x's `rope_scaling` (not both), with the field's name for errors.
pub(super) fn rope_object(parameters: Option<Value>, scaling: Option<Value>) -> Result<(&'static str, Option<Value>), String> {
    let (p, s) = (parameters.filter(|v| !v.is_null()), scaling.filter(|v| !v.is_null()));
    match (p, s) {
        (Some(_), Some(_)) => Err("`rope_scaling` and `rope_parameters` are both given: transformers 5 writes `rope_parameters`, 4.x `rope_scaling`; give one".into()),
        (Some(p), None) => Ok(("rope_parameters", Some(p))),
        (None, s) => Ok(("rope_scaling", s)),
    }
}

/// Qwen2's and Qwen3's sliding layers: the window only when `use_sliding_window`, then the
/// layers from `max_window_layers` on slide, unless `layer_types` lists them.
pub(super) fn qwen_layer_types(
    c: &mut DecoderConfig,
    use_sliding_window: Option<bool>,
    sliding_window: Option<u32>,
    max_window_layers: Option<u32>,
    layer_types: Option<Vec<LayerType>>,
) -> Result<(), String> {
    let window = match use_sliding_window.unwrap_or(false) {
        true => check_window(Some(sliding_window.unwrap_or(4096)))?,
        false => None,
    };
    let types = match layer_types {
        Some(t) => t,
        None => {
            let from = max_window_layers.unwrap_or(28);
            (0..c.num_hidden_layers)
                .map(|i| match window.is_some() && i >= from {
                    true => LayerType::Sliding,
                    false => LayerType::Full,
                })
                .collect()
        }
    };
    set_layer_types(c, types, window)
}

/// The experts of a mixture, checked: transformers reads `num_experts` and
/// `num_local_experts` as one setting (given twice, they must agree), top-k at most the
/// experts.
pub(super) fn moe(
    num_experts: Option<u32>,
    num_local_experts: Option<u32>,
    default_experts: u32,
    top_k: Option<u32>,
    default_top_k: u32,
    width: u32,
    norm_topk_prob: bool,
) -> Result<protocol::decoder::MoeConfig, String> {
    let experts = match (num_experts, num_local_experts) {
        (Some(a), Some(b)) if a != b => {
            return Err(format!(
                "`num_experts` ({a}) contradicts `num_local_experts` ({b}): transformers reads them as one setting"
            ))
        }
        (Some(e), _) | (None, Some(e)) => e,
        (None, None) => default_experts,
    };
    if experts == 0 {
        return Err("`num_experts` must be at least 1".into());
    }
    let k = top_k.unwrap_or(default_top_k);
    if k == 0 || k > experts {
        return Err(format!(
            "`num_experts_per_tok` ({k}) must be between 1 and num_experts ({experts}): the router picks that many of the experts for each token"
        ));
    }
    if width == 0 {
        return Err("the experts' intermediate size must be a positive integer, not 0".into());
    }
    Ok(protocol::decoder::MoeConfig {
        num_experts: experts,
        num_experts_per_tok: k,
        expert_intermediate_size: width,
        norm_topk_prob,
        dense_layers: vec![],
    })
}
