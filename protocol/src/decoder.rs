//! Decoder LLMs: the shape of a Llama-style causal language model ([`DecoderConfig`], read
//! from a Hugging Face `config.json`), the built-in presets that copy well-known models'
//! shapes, the registry of the team decoders this process serves, and the arithmetic every
//! page and report shares: parameter count, weight bytes, and the KV cache's formula.
//!
//! A [`crate::ModelId::Decoder`] is a name; what it is lives here, so a decoder goes
//! wherever a model goes (specs, records, permalinks, snippets) with one identity type.

use serde::{Deserialize, Serialize};
use std::sync::RwLock;

/// The Hugging Face architectures whose shape Gradless builds (`architectures[0]` of a
/// `config.json`). Mistral is Llama's shape with a sliding window; Qwen2 adds biases to the
/// query, key and value projections.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Architecture {
    #[serde(rename = "LlamaForCausalLM")]
    Llama,
    #[serde(rename = "Qwen2ForCausalLM")]
    Qwen2,
    #[serde(rename = "MistralForCausalLM")]
    Mistral,
}

impl Architecture {
    pub const ALL: [Architecture; 3] = [Architecture::Llama, Architecture::Qwen2, Architecture::Mistral];

    /// The class name, as transformers spells it.
    pub fn class_name(self) -> &'static str {
        match self {
            Architecture::Llama => "LlamaForCausalLM",
            Architecture::Qwen2 => "Qwen2ForCausalLM",
            Architecture::Mistral => "MistralForCausalLM",
        }
    }

    /// transformers' config class for it.
    pub fn config_class(self) -> &'static str {
        match self {
            Architecture::Llama => "LlamaConfig",
            Architecture::Qwen2 => "Qwen2Config",
            Architecture::Mistral => "MistralConfig",
        }
    }
}

/// Llama 3's frequency-dependent RoPE scaling (`rope_type: "llama3"`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Llama3Rope {
    pub factor: f64,
    pub low_freq_factor: f64,
    pub high_freq_factor: f64,
    pub original_max_position_embeddings: u32,
}

/// The shape of a decoder: the fields of a Hugging Face `config.json` that decide its
/// weights, its KV cache and its arithmetic.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct DecoderConfig {
    pub architecture: Architecture,
    pub hidden_size: u32,
    pub intermediate_size: u32,
    pub num_hidden_layers: u32,
    pub num_attention_heads: u32,
    pub num_key_value_heads: u32,
    pub head_dim: u32,
    pub vocab_size: u32,
    pub max_position_embeddings: u32,
    pub rope_theta: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_llama3: Option<Llama3Rope>,
    pub rms_norm_eps: f64,
    pub tie_word_embeddings: bool,
    /// Bias on the q/k/v projections (Qwen2 always; Llama when `attention_bias`).
    pub attention_bias: bool,
    pub attention_dropout: f64,
    /// Mistral's sliding attention window, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sliding_window: Option<u32>,
    /// The standard deviation of the random initial weights (transformers'
    /// `initializer_range`).
    pub initializer_range: f64,
}

impl DecoderConfig {
    /// Reads a Hugging Face `config.json`. An architecture Gradless does not build, a
    /// missing required field or a field of the wrong type is an error naming it.
    pub fn from_hf_json(text: &str) -> Result<DecoderConfig, String> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("config.json is not JSON: {e}"))?;
        let obj = v
            .as_object()
            .ok_or("config.json must be a JSON object")?;
        let arch_name = obj
            .get("architectures")
            .and_then(|a| a.as_array())
            .and_then(|a| a.first())
            .and_then(|a| a.as_str())
            .ok_or("config.json has no `architectures` list naming the model class")?;
        let architecture = Architecture::ALL
            .into_iter()
            .find(|a| a.class_name() == arch_name)
            .ok_or_else(|| {
                let known: Vec<_> = Architecture::ALL.iter().map(|a| a.class_name()).collect();
                format!(
                    "architecture `{arch_name}` is not one Gradless builds; supported: {}",
                    known.join(", ")
                )
            })?;
        let uint = |name: &str| -> Result<Option<u32>, String> {
            match obj.get(name) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(x) => x
                    .as_u64()
                    .filter(|&n| n > 0 && n <= u32::MAX as u64)
                    .map(|n| Some(n as u32))
                    .ok_or_else(|| format!("`{name}` must be a positive integer, not {x}")),
            }
        };
        let required = |name: &str| -> Result<u32, String> {
            uint(name)?.ok_or_else(|| format!("config.json lacks the required field `{name}`"))
        };
        let float = |name: &str| -> Result<Option<f64>, String> {
            match obj.get(name) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(x) => x
                    .as_f64()
                    .map(Some)
                    .ok_or_else(|| format!("`{name}` must be a number, not {x}")),
            }
        };
        let boolean = |name: &str| -> Result<Option<bool>, String> {
            match obj.get(name) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(x) => x
                    .as_bool()
                    .map(Some)
                    .ok_or_else(|| format!("`{name}` must be true or false, not {x}")),
            }
        };
        // What Gradless's decoder does not build is refused, never silently changed.
        if let Some(act) = obj.get("hidden_act").and_then(|a| a.as_str()) {
            if act != "silu" {
                return Err(format!("hidden_act `{act}` is not implemented (the SwiGLU MLP uses silu)"));
            }
        }
        if boolean("mlp_bias")? == Some(true) {
            return Err("mlp_bias: true is not implemented (the MLP's projections have no bias)".into());
        }
        let hidden_size = required("hidden_size")?;
        let heads = required("num_attention_heads")?;
        // transformers' own defaults where a config leaves a field out.
        let kv_heads = uint("num_key_value_heads")?.unwrap_or(heads);
        if heads % kv_heads != 0 {
            return Err(format!(
                "num_attention_heads ({heads}) must be a multiple of num_key_value_heads ({kv_heads})"
            ));
        }
        let head_dim = match uint("head_dim")? {
            Some(d) => d,
            None if hidden_size % heads == 0 => hidden_size / heads,
            None => {
                return Err(format!(
                    "hidden_size ({hidden_size}) is not a multiple of num_attention_heads ({heads}): give `head_dim`"
                ))
            }
        };
        if head_dim % 2 != 0 {
            return Err(format!("head_dim ({head_dim}) must be even for rotary embeddings"));
        }
        // transformers 5 writes the RoPE settings as `rope_parameters`; 4.x as `rope_theta`
        // and `rope_scaling`.
        let rope = obj
            .get("rope_parameters")
            .or_else(|| obj.get("rope_scaling"))
            .filter(|r| !r.is_null());
        let rope_field = |name: &str| rope.and_then(|r| r.get(name)).and_then(|x| x.as_f64());
        let rope_theta = match float("rope_theta")? {
            Some(t) => t,
            None => rope_field("rope_theta").unwrap_or(10_000.0),
        };
        let rope_type = rope
            .and_then(|r| r.get("rope_type").or_else(|| r.get("type")))
            .and_then(|t| t.as_str())
            .unwrap_or("default");
        let rope_llama3 = match rope_type {
            "default" => None,
            "llama3" => Some(Llama3Rope {
                factor: rope_field("factor").ok_or("llama3 RoPE scaling lacks `factor`")?,
                low_freq_factor: rope_field("low_freq_factor").unwrap_or(1.0),
                high_freq_factor: rope_field("high_freq_factor").unwrap_or(4.0),
                original_max_position_embeddings: rope_field("original_max_position_embeddings")
                    .map(|x| x as u32)
                    .unwrap_or(8192),
            }),
            other => {
                return Err(format!(
                    "RoPE type `{other}` is not implemented (supported: default, llama3)"
                ))
            }
        };
        let config = DecoderConfig {
            architecture,
            hidden_size,
            intermediate_size: required("intermediate_size")?,
            num_hidden_layers: required("num_hidden_layers")?,
            num_attention_heads: heads,
            num_key_value_heads: kv_heads,
            head_dim,
            vocab_size: required("vocab_size")?,
            max_position_embeddings: uint("max_position_embeddings")?.unwrap_or(2048),
            rope_theta,
            rope_llama3,
            rms_norm_eps: float("rms_norm_eps")?.unwrap_or(1e-6),
            tie_word_embeddings: boolean("tie_word_embeddings")?.unwrap_or(false),
            attention_bias: architecture == Architecture::Qwen2
                || boolean("attention_bias")?.unwrap_or(false),
            attention_dropout: float("attention_dropout")?.unwrap_or(0.0),
            sliding_window: if architecture == Architecture::Mistral {
                uint("sliding_window")?
            } else {
                None
            },
            initializer_range: float("initializer_range")?.unwrap_or(0.02),
        };
        if !(0.0..1.0).contains(&config.attention_dropout) {
            return Err(format!(
                "attention_dropout ({}) must be in [0, 1)",
                config.attention_dropout
            ));
        }
        Ok(config)
    }

    /// Parameters, as `sum(p.numel() for p in model.parameters())` counts them (a tied LM
    /// head shares the embedding's).
    pub fn parameters(&self) -> u64 {
        let h = self.hidden_size as u64;
        let q = (self.num_attention_heads * self.head_dim) as u64;
        let kv = (self.num_key_value_heads * self.head_dim) as u64;
        let i = self.intermediate_size as u64;
        let v = self.vocab_size as u64;
        let bias = if self.attention_bias { q + 2 * kv } else { 0 };
        let layer = h * q + 2 * h * kv + q * h + bias + 3 * h * i + 2 * h;
        let head = if self.tie_word_embeddings { 0 } else { v * h };
        v * h + self.num_hidden_layers as u64 * layer + h + head
    }

    /// The parameters that take part in each token's matmuls (everything but the embedding
    /// table, which is only indexed): `2 ×` this is a token's linear FLOPs.
    pub fn matmul_parameters(&self) -> u64 {
        let h = self.hidden_size as u64;
        let q = (self.num_attention_heads * self.head_dim) as u64;
        let kv = (self.num_key_value_heads * self.head_dim) as u64;
        let i = self.intermediate_size as u64;
        let layer = h * q + 2 * h * kv + q * h + 3 * h * i;
        self.num_hidden_layers as u64 * layer + self.vocab_size as u64 * h
    }

    /// The KV cache for `tokens` positions of `batch` sequences at `bytes_per_element`:
    /// 2 (keys and values) × layers × kv_heads × head_dim × tokens × batch × bytes.
    pub fn kv_cache_bytes(&self, tokens: u64, batch: u64, bytes_per_element: u64) -> u64 {
        2 * self.num_hidden_layers as u64
            * self.num_key_value_heads as u64
            * self.head_dim as u64
            * tokens
            * batch
            * bytes_per_element
    }

    /// The same formula written out, for pages and reports.
    pub fn kv_cache_formula(&self, tokens: u64, batch: u64, bytes_per_element: u64) -> String {
        format!(
            "2 × {} layers × {} kv_heads × {} head_dim × {tokens} tokens × {batch} batch × {bytes_per_element} B = {}",
            self.num_hidden_layers,
            self.num_key_value_heads,
            self.head_dim,
            crate::format_bytes(self.kv_cache_bytes(tokens, batch, bytes_per_element))
        )
    }

    /// FLOPs of one forward pass over `tokens` new positions per sequence that attend to
    /// `context` positions each (prefill: tokens = context = prompt), with logits for
    /// `logit_positions` positions: 2 × matmul parameters per token (the LM head only where
    /// logits are computed) plus attention's two matmuls (2 × 2 × heads × head_dim per
    /// query-key pair; the kernels compute every pair of the square, masked or not).
    pub fn forward_flops(&self, batch: u64, tokens: u64, context: u64, logit_positions: u64) -> u64 {
        let head = self.vocab_size as u64 * self.hidden_size as u64;
        let body = self.matmul_parameters() - head;
        let attn = 4
            * self.num_hidden_layers as u64
            * self.num_attention_heads as u64
            * self.head_dim as u64
            * tokens
            * context;
        batch * (2 * body * tokens + 2 * head * logit_positions + attn)
    }

    /// The transformers expression that builds this shape with random weights (offline: a
    /// config object, never a Hub download).
    pub fn python_config(&self) -> String {
        let mut fields = vec![
            format!("vocab_size={}", self.vocab_size),
            format!("hidden_size={}", self.hidden_size),
            format!("intermediate_size={}", self.intermediate_size),
            format!("num_hidden_layers={}", self.num_hidden_layers),
            format!("num_attention_heads={}", self.num_attention_heads),
            format!("num_key_value_heads={}", self.num_key_value_heads),
            format!("head_dim={}", self.head_dim),
            format!("max_position_embeddings={}", self.max_position_embeddings),
            format!("rope_theta={:?}", self.rope_theta),
            format!("rms_norm_eps={:e}", self.rms_norm_eps),
            format!(
                "tie_word_embeddings={}",
                if self.tie_word_embeddings { "True" } else { "False" }
            ),
            format!("attention_dropout={:?}", self.attention_dropout),
        ];
        if self.architecture == Architecture::Llama && self.attention_bias {
            fields.push("attention_bias=True".into());
        }
        if let Some(r) = self.rope_llama3 {
            fields.push(format!(
                "rope_scaling={{\"rope_type\": \"llama3\", \"factor\": {:?}, \"low_freq_factor\": {:?}, \"high_freq_factor\": {:?}, \"original_max_position_embeddings\": {}}}",
                r.factor, r.low_freq_factor, r.high_freq_factor, r.original_max_position_embeddings
            ));
        }
        format!(
            "transformers.{}(transformers.{}(\n    {},\n))",
            self.architecture.class_name(),
            self.architecture.config_class(),
            fields.join(",\n    ")
        )
    }
}

/// Where a served decoder comes from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DecoderSource {
    /// A built-in shape with random seeded weights; `copies` names the model whose shape it
    /// copies.
    Preset { copies: String },
    /// A folder in the models directory: its `config.json`, and its `model.safetensors`
    /// weights when `weights` is true (random seeded weights otherwise).
    Team { folder: String, weights: bool },
}

/// A decoder this process serves.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DecoderModel {
    pub name: String,
    pub display_name: String,
    pub source: DecoderSource,
    pub config: DecoderConfig,
}

impl DecoderModel {
    /// Whether its weights are random (every preset; a team folder without safetensors).
    pub fn random_weights(&self) -> bool {
        !matches!(self.source, DecoderSource::Team { weights: true, .. })
    }

    /// One line on where the shape and the weights come from, for pages and reports.
    pub fn provenance(&self) -> String {
        match &self.source {
            DecoderSource::Preset { copies } => format!(
                "the shape of {copies}, random seeded weights: real memory and latency, meaningless text"
            ),
            DecoderSource::Team { folder, weights: true } => {
                format!("config.json and model.safetensors from the models directory's `{folder}`")
            }
            DecoderSource::Team { folder, weights: false } => format!(
                "config.json from the models directory's `{folder}`, random seeded weights (no model.safetensors): real memory and latency, meaningless text"
            ),
        }
    }
}

fn preset(
    name: &str,
    display: &str,
    copies: &str,
    config: DecoderConfig,
) -> DecoderModel {
    DecoderModel {
        name: name.into(),
        display_name: display.into(),
        source: DecoderSource::Preset {
            copies: copies.into(),
        },
        config,
    }
}

/// The preset sized for a 2-core CPU (the CPU default): a whole default generation takes
/// about a second there.
pub const CPU_PRESET: &str = "llama_tiny";

/// The built-in decoder shapes, smallest first. Their configs copy the named models'
/// `config.json` (shape fields only).
pub fn presets() -> &'static [DecoderModel] {
    static PRESETS: std::sync::OnceLock<Vec<DecoderModel>> = std::sync::OnceLock::new();
    PRESETS.get_or_init(|| {
        let llama = |h, i, l, heads, kv, hd, vocab, max_pos, theta, eps, tie| DecoderConfig {
            architecture: Architecture::Llama,
            hidden_size: h,
            intermediate_size: i,
            num_hidden_layers: l,
            num_attention_heads: heads,
            num_key_value_heads: kv,
            head_dim: hd,
            vocab_size: vocab,
            max_position_embeddings: max_pos,
            rope_theta: theta,
            rope_llama3: None,
            rms_norm_eps: eps,
            tie_word_embeddings: tie,
            attention_bias: false,
            attention_dropout: 0.0,
            sliding_window: None,
            initializer_range: 0.02,
        };
        let llama3_rope = |factor| {
            Some(Llama3Rope {
                factor,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position_embeddings: 8192,
            })
        };
        vec![
            preset(
                CPU_PRESET,
                "Tiny Llama (4 layers, 256 wide, GQA 8/2, attention dropout 0.1)",
                "a 4-layer Llama sized for a 2-core CPU",
                DecoderConfig {
                    attention_dropout: 0.1,
                    // Wider random weights than transformers' 0.02: greedy decoding then
                    // picks varied tokens, so token-for-token comparisons mean something.
                    initializer_range: 0.2,
                    ..llama(256, 704, 4, 8, 2, 32, 8192, 2048, 10_000.0, 1e-5, false)
                },
            ),
            preset(
                "llama_tiny_mha",
                "Tiny Llama without GQA (8 KV heads, for the gqa card)",
                "the tiny Llama with one KV head per query head",
                DecoderConfig {
                    attention_dropout: 0.1,
                    initializer_range: 0.2,
                    ..llama(256, 704, 4, 8, 8, 32, 8192, 2048, 10_000.0, 1e-5, false)
                },
            ),
            preset(
                "smollm2_135m",
                "SmolLM2-135M shape",
                "HuggingFaceTB/SmolLM2-135M",
                llama(576, 1536, 30, 9, 3, 64, 49152, 8192, 100_000.0, 1e-5, true),
            ),
            preset(
                "qwen2_5_0_5b",
                "Qwen2.5-0.5B shape",
                "Qwen/Qwen2.5-0.5B",
                DecoderConfig {
                    architecture: Architecture::Qwen2,
                    attention_bias: true,
                    ..llama(896, 4864, 24, 14, 2, 64, 151_936, 32_768, 1_000_000.0, 1e-6, true)
                },
            ),
            preset(
                "llama_3_2_1b",
                "Llama-3.2-1B shape",
                "meta-llama/Llama-3.2-1B",
                DecoderConfig {
                    rope_llama3: llama3_rope(32.0),
                    ..llama(2048, 8192, 16, 32, 8, 64, 128_256, 131_072, 500_000.0, 1e-5, true)
                },
            ),
            preset(
                "llama_3_1_8b",
                "Llama-3.1-8B shape",
                "meta-llama/Llama-3.1-8B",
                DecoderConfig {
                    rope_llama3: llama3_rope(8.0),
                    ..llama(4096, 14_336, 32, 32, 8, 128, 128_256, 131_072, 500_000.0, 1e-5, false)
                },
            ),
        ]
    })
}

static TEAM: RwLock<Vec<&'static DecoderModel>> = RwLock::new(Vec::new());

/// Makes `models` the team decoders this process serves (the server and the CLI call it
/// with what they found in the models directory; the browser with what `/api/info` lists).
/// Registration leaks one small entry per model, once per process.
pub fn register(models: Vec<DecoderModel>) {
    let mut reg = TEAM.write().unwrap_or_else(|e| e.into_inner());
    let mut served = Vec::with_capacity(models.len());
    for m in models {
        if presets().iter().any(|p| p.name == m.name) {
            continue;
        }
        match reg.iter().find(|old| ***old == m) {
            Some(old) => served.push(*old),
            None => served.push(&*Box::leak(Box::new(m))),
        }
    }
    *reg = served;
}

/// The served decoder called `name`: a preset or a registered team decoder.
pub fn lookup(name: &str) -> Option<&'static DecoderModel> {
    presets().iter().find(|m| m.name == name).or_else(|| {
        TEAM.read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|m| m.name == name)
            .copied()
    })
}

/// Every decoder this process serves: the presets, then the team's.
pub fn served() -> Vec<&'static DecoderModel> {
    let team = TEAM.read().unwrap_or_else(|e| e.into_inner()).clone();
    presets().iter().chain(team).collect()
}

/// Team decoders only (what `/api/info` lists for the browser to register).
pub fn team_served() -> Vec<DecoderModel> {
    TEAM.read()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|m| (*m).clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preset_parameter_counts_match_the_models_they_copy() {
        // The published sizes (rounded in the names) of the models whose shapes the
        // presets copy: a wrong field would move the count far from them.
        let near = |name: &str, want: f64| {
            let got = lookup(name).unwrap().config.parameters() as f64;
            assert!((got / want - 1.0).abs() < 0.03, "{name}: {got} vs {want}");
        };
        near("smollm2_135m", 134.5e6);
        near("qwen2_5_0_5b", 494.0e6);
        near("llama_3_2_1b", 1.236e9);
        near("llama_3_1_8b", 8.03e9);
    }

    #[test]
    fn hf_configs_read_with_transformers_defaults_and_name_what_is_wrong() {
        let c = DecoderConfig::from_hf_json(
            r#"{"architectures": ["Qwen2ForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
                "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                "vocab_size": 100, "rope_parameters": {"rope_theta": 5000.0, "rope_type": "default"}}"#,
        )
        .unwrap();
        assert_eq!(c.head_dim, 16);
        assert!(c.attention_bias, "Qwen2 always has q/k/v biases");
        assert_eq!(c.rope_theta, 5000.0);
        let e = DecoderConfig::from_hf_json(r#"{"architectures": ["GPT2LMHeadModel"]}"#).unwrap_err();
        assert!(e.contains("GPT2LMHeadModel") && e.contains("LlamaForCausalLM"), "{e}");
        let e = DecoderConfig::from_hf_json(
            r#"{"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_attention_heads": 4,
                "num_hidden_layers": 2, "vocab_size": 100}"#,
        )
        .unwrap_err();
        assert!(e.contains("intermediate_size"), "{e}");
        let e = DecoderConfig::from_hf_json(
            r#"{"architectures": ["LlamaForCausalLM"], "hidden_size": "wide"}"#,
        )
        .unwrap_err();
        assert!(e.contains("hidden_size"), "{e}");
    }

    #[test]
    fn the_kv_formula_is_linear_in_tokens_and_batch() {
        let c = &lookup(CPU_PRESET).unwrap().config;
        let one = c.kv_cache_bytes(1, 1, 4);
        assert_eq!(c.kv_cache_bytes(95, 3, 4), one * 95 * 3);
        assert_eq!(one, 2 * 4 * 2 * 32 * 4);
        assert!(c.kv_cache_formula(95, 3, 4).contains("95 tokens"));
    }
}
