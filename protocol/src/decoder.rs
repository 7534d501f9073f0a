//! Decoder LLMs: the shape of a causal language model ([`DecoderConfig`], read from a
//! Hugging Face `config.json` by the engine's family readers), the built-in presets that copy
//! well-known models' shapes, the registry of the team decoders this process serves, and the
//! arithmetic every page and report shares: parameter counts (total and active per token),
//! weight bytes, and the KV cache's formula per layer type.
//!
//! A [`crate::ModelId::Decoder`] is a name; what it is lives here, so a decoder goes
//! wherever a model goes (specs, records, permalinks, snippets) with one identity type.
//!
//! The families (one architecture each): Llama, Mistral and Qwen2 (Llama's block; Mistral
//! with a sliding window, Qwen2 with q/k/v biases), Qwen3 (RMSNorm over each head's query
//! and key), Gemma 3 (sliding and full layers, two RoPE bases, norms before and after
//! attention and the MLP, GeGLU, embeddings × √hidden) and the mixtures of experts Qwen3-MoE
//! and Mixtral (a router picking the top k of `num_experts` gated MLPs per token), and Phi-3
//! (Llama's block with its q/k/v and gate/up projections fused).

use serde::{Deserialize, Serialize};
use std::sync::RwLock;

/// The Hugging Face architectures whose shape Gradless builds (`architectures[0]` of a
/// `config.json`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Architecture {
    #[serde(rename = "LlamaForCausalLM")]
    Llama,
    #[serde(rename = "Qwen2ForCausalLM")]
    Qwen2,
    #[serde(rename = "MistralForCausalLM")]
    Mistral,
    #[serde(rename = "Qwen3ForCausalLM")]
    Qwen3,
    #[serde(rename = "Gemma3ForCausalLM")]
    Gemma3,
    #[serde(rename = "Qwen3MoeForCausalLM")]
    Qwen3Moe,
    #[serde(rename = "MixtralForCausalLM")]
    Mixtral,
    #[serde(rename = "Phi3ForCausalLM")]
    Phi3,
}

impl Architecture {
    pub const ALL: [Architecture; 8] = [
        Architecture::Llama,
        Architecture::Qwen2,
        Architecture::Mistral,
        Architecture::Qwen3,
        Architecture::Gemma3,
        Architecture::Qwen3Moe,
        Architecture::Mixtral,
        Architecture::Phi3,
    ];

    /// The class name, as transformers spells it.
    pub fn class_name(self) -> &'static str {
        match self {
            Architecture::Llama => "LlamaForCausalLM",
            Architecture::Qwen2 => "Qwen2ForCausalLM",
            Architecture::Mistral => "MistralForCausalLM",
            Architecture::Qwen3 => "Qwen3ForCausalLM",
            Architecture::Gemma3 => "Gemma3ForCausalLM",
            Architecture::Qwen3Moe => "Qwen3MoeForCausalLM",
            Architecture::Mixtral => "MixtralForCausalLM",
            Architecture::Phi3 => "Phi3ForCausalLM",
        }
    }

    /// transformers' config class for it.
    pub fn config_class(self) -> &'static str {
        match self {
            Architecture::Llama => "LlamaConfig",
            Architecture::Qwen2 => "Qwen2Config",
            Architecture::Mistral => "MistralConfig",
            Architecture::Qwen3 => "Qwen3Config",
            Architecture::Gemma3 => "Gemma3TextConfig",
            Architecture::Qwen3Moe => "Qwen3MoeConfig",
            Architecture::Mixtral => "MixtralConfig",
            Architecture::Phi3 => "Phi3Config",
        }
    }

    /// The `model_type` transformers writes for it.
    pub fn model_type(self) -> &'static str {
        match self {
            Architecture::Llama => "llama",
            Architecture::Qwen2 => "qwen2",
            Architecture::Mistral => "mistral",
            Architecture::Qwen3 => "qwen3",
            Architecture::Gemma3 => "gemma3_text",
            Architecture::Qwen3Moe => "qwen3_moe",
            Architecture::Mixtral => "mixtral",
            Architecture::Phi3 => "phi3",
        }
    }

    /// The family's name for people ("Qwen3-MoE").
    pub fn family(self) -> &'static str {
        match self {
            Architecture::Llama => "Llama",
            Architecture::Qwen2 => "Qwen2",
            Architecture::Mistral => "Mistral",
            Architecture::Qwen3 => "Qwen3",
            Architecture::Gemma3 => "Gemma 3",
            Architecture::Qwen3Moe => "Qwen3-MoE",
            Architecture::Mixtral => "Mixtral",
            Architecture::Phi3 => "Phi-3",
        }
    }

    /// Whether its blocks are Gemma's: RMSNorms that scale by `1 + weight` in fp32, a norm
    /// after attention and on both sides of the MLP, GeGLU with tanh-GELU, and embeddings
    /// multiplied by √hidden.
    pub fn gemma_style(self) -> bool {
        self == Architecture::Gemma3
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

/// What a layer's attention sees: every earlier position, or the last `sliding_window`
/// (itself included), as transformers' `layer_types` name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum LayerType {
    #[serde(rename = "full_attention")]
    Full,
    #[serde(rename = "sliding_attention")]
    Sliding,
}

impl LayerType {
    pub const ALL: [LayerType; 2] = [LayerType::Full, LayerType::Sliding];

    /// As config.json spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            LayerType::Full => "full_attention",
            LayerType::Sliding => "sliding_attention",
        }
    }

    /// For people: "full", "sliding".
    pub fn label(self) -> &'static str {
        match self {
            LayerType::Full => "full",
            LayerType::Sliding => "sliding",
        }
    }
}

/// A mixture of experts' MLP: a router (`[num_experts, hidden]`, no bias) scores every
/// expert for each token, softmax in fp32, the top `num_experts_per_tok` run, and their
/// outputs are summed weighted by those probabilities (renormalised to sum to 1 when
/// `norm_topk_prob`). Each expert is a gated MLP `expert_intermediate_size` wide.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct MoeConfig {
    pub num_experts: u32,
    pub num_experts_per_tok: u32,
    /// Each expert's gated-MLP width (Qwen3-MoE's `moe_intermediate_size`, Mixtral's
    /// `intermediate_size`).
    pub expert_intermediate_size: u32,
    /// Whether the top-k probabilities are renormalised to sum to 1 (Mixtral always;
    /// Qwen3-MoE's `norm_topk_prob`).
    pub norm_topk_prob: bool,
    /// Layers whose MLP is a dense one `intermediate_size` wide instead of experts
    /// (Qwen3-MoE's `mlp_only_layers` and `decoder_sparse_step`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dense_layers: Vec<u32>,
}

/// The shape of a decoder: the fields of a Hugging Face `config.json` that decide its
/// weights, its KV cache and its arithmetic. The engine's family readers
/// (`engine/src/models/decoder/<family>.rs`) fill it from a config.json.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct DecoderConfig {
    pub architecture: Architecture,
    pub hidden_size: u32,
    /// The dense MLP's width (a mixture of experts' dense layers, if any; Mixtral's experts).
    pub intermediate_size: u32,
    pub num_hidden_layers: u32,
    pub num_attention_heads: u32,
    pub num_key_value_heads: u32,
    pub head_dim: u32,
    pub vocab_size: u32,
    pub max_position_embeddings: u32,
    /// The RoPE base (of the full layers when the sliding ones have their own).
    pub rope_theta: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_llama3: Option<Llama3Rope>,
    pub rms_norm_eps: f64,
    pub tie_word_embeddings: bool,
    /// Bias on the q/k/v projections (Qwen2 always; Llama when `attention_bias`).
    pub attention_bias: bool,
    pub attention_dropout: f64,
    /// The window of the sliding layers ([`LayerType::Sliding`]), in positions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sliding_window: Option<u32>,
    /// The standard deviation of the random initial weights (transformers'
    /// `initializer_range`).
    pub initializer_range: f64,
    /// Each layer's attention. Empty: every layer sliding when `sliding_window` is set
    /// (Mistral's, Mixtral's), full otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layer_types: Vec<LayerType>,
    /// RMSNorm over each head's query and key before RoPE (Qwen3, Qwen3-MoE, Gemma 3).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub qk_norm: bool,
    /// The sliding layers' own RoPE base (Gemma 3's `rope_local_base_freq`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_local_theta: Option<f64>,
    /// Linear RoPE scaling of the full layers: frequencies divided by it (Gemma 3 4B and up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_linear_factor: Option<f64>,
    /// Attention scores scaled by `query_pre_attn_scalar^-0.5` instead of `head_dim^-0.5`
    /// (Gemma).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_pre_attn_scalar: Option<f64>,
    /// The mixture of experts, for Qwen3-MoE and Mixtral.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe: Option<MoeConfig>,
}

/// How a cache holds a sliding layer's positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum SlidingHold {
    /// A growing (dynamic) cache after a step: trimmed to the last `window − 1` positions,
    /// as transformers' `DynamicSlidingWindowLayer` keeps them (the next token's own key
    /// and value join at attention time, making `window`).
    Trimmed,
    /// A static cache: `min(capacity, window)` positions allocated once; when full, each
    /// new position shifts the others down one and takes the last slot (transformers'
    /// `StaticSlidingWindowLayer` rolls the same way).
    Rolled,
}

/// One layer type's share of a KV cache.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KvLayerSplit {
    pub layer_type: LayerType,
    /// Layers of this type.
    pub layers: u32,
    /// Positions each of these layers holds per sequence.
    pub positions: u64,
    /// Bytes of these layers' keys and values, measured from the tensors (in a formula-only
    /// estimate: the formula's).
    pub bytes: u64,
    /// 2 × layers × kv_heads × head_dim × positions × batch × bytes per element.
    pub formula_bytes: u64,
}

/// A mixture of experts' figures in a generate run: what it holds against what a token
/// uses, and what each decode step read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MoeFigures {
    pub num_experts: u32,
    pub num_experts_per_tok: u32,
    /// Layers whose MLP is a mixture of experts.
    pub moe_layers: u32,
    /// Every parameter (`DecoderConfig::parameters`).
    pub total_parameters: u64,
    /// The parameters one token's forward pass uses: all but the experts the router did
    /// not pick (`DecoderConfig::active_parameters`).
    pub active_parameters: u64,
    /// Every expert's weights, measured from the tensors (as stored: quantized or not):
    /// memory holds all of them whatever the router picks.
    pub experts_bytes: u64,
    /// One expert's weights (gate, up and down), measured.
    pub expert_bytes: u64,
    /// What one token's routed experts weigh: top-k × moe layers × one expert.
    pub active_expert_bytes: u64,
    /// Per decode step: the distinct experts the batch's tokens were routed to in each MoE
    /// layer (mean and max over the layers) and the bytes of those experts.
    pub steps: Vec<MoeStep>,
    /// Over the decode steps: the mean of the per-layer mean, and the largest per-layer
    /// count.
    pub distinct_experts_mean: f64,
    pub distinct_experts_max: u32,
    /// Over the decode steps: expert bytes read per step, mean.
    pub expert_bytes_read_mean: f64,
}

/// One decode step's expert reads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MoeStep {
    pub step: u32,
    /// Distinct experts touched per MoE layer: mean and max over the layers.
    pub distinct_mean: f64,
    pub distinct_max: u32,
    /// Bytes of the distinct experts touched, summed over the layers.
    pub expert_bytes_read: u64,
}

impl DecoderConfig {
    /// Layer `i`'s attention (see [`DecoderConfig::layer_types`]).
    pub fn layer_type(&self, i: usize) -> LayerType {
        match self.layer_types.get(i) {
            Some(t) => *t,
            None if self.layer_types.is_empty() && self.sliding_window.is_some() => LayerType::Sliding,
            None => LayerType::Full,
        }
    }

    /// Layer `i`'s window, when it is a sliding layer.
    pub fn window(&self, i: usize) -> Option<u32> {
        match self.layer_type(i) {
            LayerType::Sliding => self.sliding_window,
            LayerType::Full => None,
        }
    }

    /// Layers of `t`.
    pub fn layers_of(&self, t: LayerType) -> u32 {
        (0..self.num_hidden_layers as usize).filter(|&i| self.layer_type(i) == t).count() as u32
    }

    /// Whether layer `i`'s MLP is a mixture of experts.
    pub fn is_moe_layer(&self, i: usize) -> bool {
        self.moe.as_ref().is_some_and(|m| !m.dense_layers.contains(&(i as u32)))
    }

    /// Layers whose MLP is a mixture of experts.
    pub fn moe_layers(&self) -> u32 {
        (0..self.num_hidden_layers as usize).filter(|&i| self.is_moe_layer(i)).count() as u32
    }

    /// RMSNorms per block: 2 (before attention and before the MLP), Gemma's 4.
    fn norms_per_layer(&self) -> u64 {
        if self.architecture.gemma_style() {
            4
        } else {
            2
        }
    }

    /// The blocks' linear layers, as `(out, in, how many)` over the whole model: what
    /// weight quantization quantizes (attention's q, k, v, o; every dense MLP's and every
    /// expert's gate, up, down). The routers stay in the weights' dtype.
    pub fn linear_shapes(&self) -> Vec<(u64, u64, u64)> {
        let h = self.hidden_size as u64;
        let q = (self.num_attention_heads * self.head_dim) as u64;
        let kv = (self.num_key_value_heads * self.head_dim) as u64;
        let layers = self.num_hidden_layers as u64;
        let mut shapes = vec![(q, h, layers), (kv, h, 2 * layers), (h, q, layers)];
        let moe = self.moe_layers() as u64;
        let dense = layers - moe;
        if dense > 0 {
            let i = self.intermediate_size as u64;
            shapes.extend([(i, h, 2 * dense), (h, i, dense)]);
        }
        if let Some(m) = &self.moe {
            let (e, i) = (m.num_experts as u64, m.expert_intermediate_size as u64);
            shapes.extend([(i, h, 2 * e * moe), (h, i, e * moe)]);
        }
        shapes
    }

    /// Parameters, as `sum(p.numel() for p in model.parameters())` counts them (a tied LM
    /// head shares the embedding's).
    pub fn parameters(&self) -> u64 {
        let linear: u64 = self.linear_shapes().iter().map(|&(n, k, c)| n * k * c).sum();
        linear + self.other_parameters()
    }

    /// The parameters outside the blocks' linear layers: the embedding, the norms (q/k
    /// norms included), the biases, the routers and the LM head when not tied.
    pub fn other_parameters(&self) -> u64 {
        let h = self.hidden_size as u64;
        let q = (self.num_attention_heads * self.head_dim) as u64;
        let kv = (self.num_key_value_heads * self.head_dim) as u64;
        let v = self.vocab_size as u64;
        let layers = self.num_hidden_layers as u64;
        let bias = if self.attention_bias { q + 2 * kv } else { 0 };
        let qk_norm = if self.qk_norm { 2 * self.head_dim as u64 } else { 0 };
        let routers = self.moe.as_ref().map_or(0, |m| m.num_experts as u64 * h) * self.moe_layers() as u64;
        let head = if self.tie_word_embeddings { 0 } else { v * h };
        v * h + layers * (bias + qk_norm + self.norms_per_layer() * h) + routers + h + head
    }

    /// One expert's parameters (its gate, up and down projections); 0 without experts.
    pub fn expert_parameters(&self) -> u64 {
        self.moe.as_ref().map_or(0, |m| 3 * self.hidden_size as u64 * m.expert_intermediate_size as u64)
    }

    /// The parameters one token uses: all but the experts its router did not pick
    /// (`(num_experts − top-k) × one expert` per MoE layer). Equal to
    /// [`DecoderConfig::parameters`] for a dense decoder. The embedding table counts whole,
    /// as model cards count "active parameters".
    pub fn active_parameters(&self) -> u64 {
        let idle = self
            .moe
            .as_ref()
            .map_or(0, |m| (m.num_experts - m.num_experts_per_tok.min(m.num_experts)) as u64);
        self.parameters() - idle * self.expert_parameters() * self.moe_layers() as u64
    }

    /// The parameters that take part in each token's matmuls (everything a token uses but
    /// the embedding table, which is only indexed; a mixture's routers and its top-k
    /// experts): `2 ×` this is a token's linear FLOPs.
    pub fn matmul_parameters(&self) -> u64 {
        let h = self.hidden_size as u64;
        let q = (self.num_attention_heads * self.head_dim) as u64;
        let kv = (self.num_key_value_heads * self.head_dim) as u64;
        let layers = self.num_hidden_layers as u64;
        let moe = self.moe_layers() as u64;
        let dense_mlp = (layers - moe) * 3 * h * self.intermediate_size as u64;
        let moe_mlp = self.moe.as_ref().map_or(0, |m| {
            moe * (m.num_experts_per_tok as u64 * self.expert_parameters() + m.num_experts as u64 * h)
        });
        layers * (2 * h * q + 2 * h * kv) + dense_mlp + moe_mlp + self.vocab_size as u64 * h
    }

    /// The naive KV formula, every layer at full length: 2 (keys and values) × layers ×
    /// kv_heads × head_dim × tokens × batch × bytes. What a sliding-window model's cache
    /// holds is [`DecoderConfig::kv_cache_held_bytes`].
    pub fn kv_cache_bytes(&self, tokens: u64, batch: u64, bytes_per_element: u64) -> u64 {
        self.kv_layers_bytes(self.num_hidden_layers as u64, tokens, batch, bytes_per_element)
    }

    fn kv_layers_bytes(&self, layers: u64, tokens: u64, batch: u64, bytes_per_element: u64) -> u64 {
        2 * layers
            * self.num_key_value_heads as u64
            * self.head_dim as u64
            * tokens
            * batch
            * bytes_per_element
    }

    /// Positions a sliding layer holds when the full layers hold `tokens`.
    pub fn sliding_positions(&self, tokens: u64, hold: SlidingHold) -> u64 {
        let w = self.sliding_window.unwrap_or(u32::MAX) as u64;
        match hold {
            SlidingHold::Trimmed => tokens.min(w.saturating_sub(1)),
            SlidingHold::Rolled => tokens.min(w),
        }
    }

    /// The cache by layer type when the full layers hold `tokens` positions per sequence
    /// (the formula's figures in `bytes` too); layer types the decoder does not have are
    /// left out.
    pub fn kv_cache_split(&self, tokens: u64, batch: u64, bytes_per_element: u64, hold: SlidingHold) -> Vec<KvLayerSplit> {
        LayerType::ALL
            .into_iter()
            .filter_map(|t| {
                let layers = self.layers_of(t);
                if layers == 0 {
                    return None;
                }
                let positions = match t {
                    LayerType::Full => tokens,
                    LayerType::Sliding => self.sliding_positions(tokens, hold),
                };
                let bytes = self.kv_layers_bytes(layers as u64, positions, batch, bytes_per_element);
                Some(KvLayerSplit {
                    layer_type: t,
                    layers,
                    positions,
                    bytes,
                    formula_bytes: bytes,
                })
            })
            .collect()
    }

    /// What the cache holds when the full layers hold `tokens` positions: the sum of
    /// [`DecoderConfig::kv_cache_split`]. Equal to the naive formula without sliding layers.
    pub fn kv_cache_held_bytes(&self, tokens: u64, batch: u64, bytes_per_element: u64, hold: SlidingHold) -> u64 {
        self.kv_cache_split(tokens, batch, bytes_per_element, hold).iter().map(|s| s.formula_bytes).sum()
    }

    /// The naive formula written out, for pages and reports.
    pub fn kv_cache_formula(&self, tokens: u64, batch: u64, bytes_per_element: u64) -> String {
        format!(
            "2 × {} layers × {} kv_heads × {} head_dim × {tokens} tokens × {batch} batch × {bytes_per_element} B = {}",
            self.num_hidden_layers,
            self.num_key_value_heads,
            self.head_dim,
            crate::format_bytes(self.kv_cache_bytes(tokens, batch, bytes_per_element))
        )
    }

    /// The formula per layer type written out ("full: 2 × 1 layers × … ; sliding: …").
    pub fn kv_cache_split_formula(&self, tokens: u64, batch: u64, bytes_per_element: u64, hold: SlidingHold) -> String {
        self.kv_cache_split(tokens, batch, bytes_per_element, hold)
            .iter()
            .map(|s| {
                format!(
                    "{}: 2 × {} layers × {} kv_heads × {} head_dim × {} positions × {batch} batch × {bytes_per_element} B = {}",
                    s.layer_type.label(),
                    s.layers,
                    self.num_key_value_heads,
                    self.head_dim,
                    s.positions,
                    crate::format_bytes(s.formula_bytes)
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// FLOPs of one forward pass over `tokens` new positions per sequence that attend to
    /// `context` positions each (prefill: tokens = context = prompt), with logits for
    /// `logit_positions` positions: 2 × matmul parameters per token (the LM head only where
    /// logits are computed) plus attention's two matmuls (2 × 2 × heads × head_dim per
    /// query-key pair; the kernels compute every pair of the square, masked or not; a
    /// sliding layer's keys are at most its window plus the new tokens).
    pub fn forward_flops(&self, batch: u64, tokens: u64, context: u64, logit_positions: u64) -> u64 {
        let head = self.vocab_size as u64 * self.hidden_size as u64;
        let body = self.matmul_parameters() - head;
        let per_pair = 4 * self.num_attention_heads as u64 * self.head_dim as u64 * tokens;
        let attn: u64 = LayerType::ALL
            .into_iter()
            .map(|t| {
                let keys = match t {
                    LayerType::Full => context,
                    LayerType::Sliding if tokens > 1 => context,
                    LayerType::Sliding => context.min(self.sliding_window.unwrap_or(u32::MAX) as u64),
                };
                self.layers_of(t) as u64 * per_pair * keys
            })
            .sum();
        batch * (2 * body * tokens + 2 * head * logit_positions + attn)
    }

    /// What sets this shape apart from a plain Llama's, for pages: its family, its sliding
    /// layers, its experts ("Gemma 3 · 5 sliding layers (window 32) + 1 full"). Empty for
    /// a Llama without either.
    pub fn family_notes(&self) -> String {
        let mut notes = Vec::new();
        if self.architecture != Architecture::Llama {
            notes.push(self.architecture.family().to_string());
        }
        let sliding = self.layers_of(LayerType::Sliding);
        if let (true, Some(w)) = (sliding > 0, self.sliding_window) {
            let full = self.layers_of(LayerType::Full);
            notes.push(match full {
                0 => format!("every layer slides over {w} positions"),
                _ => format!("{sliding} sliding layers (window {w}) + {full} full"),
            });
        }
        if let Some(m) = &self.moe {
            let count = |n: u64| match n >= 1_000_000_000 {
                true => format!("{:.2} B", n as f64 / 1e9),
                false => format!("{:.1} M", n as f64 / 1e6),
            };
            notes.push(format!(
                "{} experts, top {} per token: {} of {} parameters active",
                m.num_experts,
                m.num_experts_per_tok,
                count(self.active_parameters()),
                count(self.parameters())
            ));
        }
        notes.join(" · ")
    }

    /// The transformers expression that builds this shape with random weights (offline: a
    /// config object, never a Hub download).
    pub fn python_config(&self) -> String {
        let py_bool = |b: bool| if b { "True" } else { "False" };
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
            format!("tie_word_embeddings={}", py_bool(self.tie_word_embeddings)),
            format!("attention_dropout={:?}", self.attention_dropout),
        ];
        let a = self.architecture;
        if matches!(a, Architecture::Llama | Architecture::Qwen3 | Architecture::Qwen3Moe) && self.attention_bias {
            fields.push("attention_bias=True".into());
        }
        if let Some(r) = self.rope_llama3 {
            fields.push(format!(
                "rope_scaling={{\"rope_type\": \"llama3\", \"factor\": {:?}, \"low_freq_factor\": {:?}, \"high_freq_factor\": {:?}, \"original_max_position_embeddings\": {}}}",
                r.factor, r.low_freq_factor, r.high_freq_factor, r.original_max_position_embeddings
            ));
        }
        let layer_types = || {
            let types: Vec<String> = (0..self.num_hidden_layers as usize)
                .map(|i| format!("\"{}\"", self.layer_type(i).as_str()))
                .collect();
            format!("layer_types=[{}]", types.join(", "))
        };
        match a {
            Architecture::Mistral | Architecture::Mixtral | Architecture::Qwen3Moe | Architecture::Phi3 => {
                if let Some(w) = self.sliding_window {
                    fields.push(format!("sliding_window={w}"));
                    if a == Architecture::Qwen3Moe {
                        fields.push("use_sliding_window=True".into());
                    }
                }
            }
            Architecture::Qwen2 | Architecture::Qwen3 => {
                if let Some(w) = self.sliding_window.filter(|_| self.layers_of(LayerType::Sliding) > 0) {
                    fields.push(format!("use_sliding_window=True, sliding_window={w}"));
                    fields.push(layer_types());
                }
            }
            Architecture::Gemma3 => {
                fields.push("hidden_activation=\"gelu_pytorch_tanh\"".into());
                if let Some(w) = self.sliding_window {
                    fields.push(format!("sliding_window={w}"));
                }
                fields.push(layer_types());
                if let Some(t) = self.rope_local_theta {
                    fields.push(format!("rope_local_base_freq={t:?}"));
                }
                if let Some(f) = self.rope_linear_factor {
                    fields.push(format!("rope_scaling={{\"rope_type\": \"linear\", \"factor\": {f:?}}}"));
                }
                if let Some(s) = self.query_pre_attn_scalar {
                    // transformers types it as an int.
                    match s.fract() == 0.0 {
                        true => fields.push(format!("query_pre_attn_scalar={}", s as i64)),
                        false => fields.push(format!("query_pre_attn_scalar={s:?}")),
                    }
                }
            }
            Architecture::Llama => {}
        }
        if a == Architecture::Phi3 && self.vocab_size <= 32_000 {
            // Phi3Config's default pad and eos ids (32000) lie past a smaller vocabulary.
            fields.push("pad_token_id=None, eos_token_id=None".into());
        }
        if let Some(m) = &self.moe {
            match a {
                Architecture::Mixtral => fields.push(format!(
                    "num_local_experts={}, num_experts_per_tok={}",
                    m.num_experts, m.num_experts_per_tok
                )),
                _ => {
                    fields.push(format!(
                        "num_experts={}, num_experts_per_tok={}, moe_intermediate_size={}, norm_topk_prob={}",
                        m.num_experts,
                        m.num_experts_per_tok,
                        m.expert_intermediate_size,
                        py_bool(m.norm_topk_prob)
                    ));
                    if !m.dense_layers.is_empty() {
                        fields.push(format!("mlp_only_layers={:?}", m.dense_layers));
                    }
                }
            }
        }
        format!(
            "transformers.{}(transformers.{}(\n    {},\n))",
            a.class_name(),
            a.config_class(),
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
    /// A folder in the models directory: its `config.json`, and its weights when `weights`
    /// is true (`model.safetensors`, or `model.safetensors.index.json` and its shards, as
    /// `stored` describes them); random seeded weights otherwise.
    Team {
        folder: String,
        weights: bool,
        /// The files the weights are read from (absent in records made before it was kept).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stored: Option<StoredWeights>,
        /// config.json's fields read past: a tool's metadata (`unsloth_version`), and fields
        /// set to what Gradless builds anyway (`attention_bias: false`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        read_past: Vec<String>,
    },
    /// A model trained by this project, shipped in the repository's `models/{folder}`
    /// (`config.json`, `model.safetensors`, the held-out text its quality is measured on).
    /// Its vocabulary is bytes: id *b* is byte *b*, `bos` starts every sequence.
    Trained { folder: String, corpus: String, bos: u32 },
}

/// A checkpoint's weights as they sit on disk: what every report says they came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StoredWeights {
    /// Each file with its bytes: the index first for a sharded checkpoint, then the shards.
    pub files: Vec<(String, u64)>,
    /// The dtype as stored (`bf16`; `fp32 + bf16` when a checkpoint mixes them).
    pub dtype: String,
    /// SHA-256 of `hashed`: the index of a sharded checkpoint (it names every shard), or the
    /// single file.
    pub sha256: String,
    pub hashed: String,
}

impl StoredWeights {
    /// The bytes of every file.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|(_, b)| b).sum()
    }

    /// "6 shards + model.safetensors.index.json, 1.2 MiB, bf16 as stored, sha256 3f2a…"
    pub fn describe(&self) -> String {
        let shards = self.files.iter().filter(|(n, _)| n.ends_with(".safetensors")).count();
        let what = if self.files.len() > shards {
            format!("{shards} safetensors shards + {}", self.hashed)
        } else {
            self.hashed.clone()
        };
        format!(
            "{what}, {}, {} as stored, sha256 of {} {}",
            crate::format_bytes(self.bytes()),
            self.dtype,
            self.hashed,
            &self.sha256[..self.sha256.len().min(12)]
        )
    }
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
        !matches!(self.source, DecoderSource::Team { weights: true, .. } | DecoderSource::Trained { .. })
    }

    /// The id that starts a sequence, for a model whose vocabulary is bytes (id *b* is byte
    /// *b*): its prompt can be text, its tokens read as text.
    pub fn byte_bos(&self) -> Option<u32> {
        match self.source {
            DecoderSource::Trained { bos, .. } => Some(bos),
            _ => None,
        }
    }

    /// One line on where the shape and the weights come from, for pages and reports.
    pub fn provenance(&self) -> String {
        let line = self.weights_line();
        match &self.source {
            DecoderSource::Team { read_past, .. } if !read_past.is_empty() => {
                format!("{line}; config.json's fields read past (of no effect on what Gradless builds): {}", read_past.join(", "))
            }
            _ => line,
        }
    }

    fn weights_line(&self) -> String {
        match &self.source {
            DecoderSource::Preset { copies } => format!(
                "the shape of {copies}, random seeded weights: real memory and latency, meaningless text"
            ),
            DecoderSource::Team { folder, weights: true, stored, .. } => match stored {
                Some(s) => format!("config.json and weights from the models directory's `{folder}`: {}", s.describe()),
                None => format!("config.json and model.safetensors from the models directory's `{folder}`"),
            },
            DecoderSource::Trained { folder, corpus, .. } => {
                format!("trained by this project on {corpus} (models/{folder}): its text is learned, not random")
            }
            DecoderSource::Team { folder, weights: false, .. } => format!(
                "config.json from the models directory's `{folder}`, random, seeded: no weights in this folder (no model.safetensors or model.safetensors.index.json): real memory and latency, meaningless text"
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

/// The model trained by this project (`models/torch_bytes`): bytes in, bytes out.
pub const TRAINED_PRESET: &str = "torch_bytes";

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
            layer_types: vec![],
            qk_norm: false,
            rope_local_theta: None,
            rope_linear_factor: None,
            query_pre_attn_scalar: None,
            moe: None,
        };
        let moe = |experts, top_k, width, norm| {
            Some(MoeConfig {
                num_experts: experts,
                num_experts_per_tok: top_k,
                expert_intermediate_size: width,
                norm_topk_prob: norm,
                dense_layers: vec![],
            })
        };
        // Gemma 3's layers: five sliding, then one full, repeated (`sliding_window_pattern` 6).
        let gemma_layers = |l: u32| {
            (0..l)
                .map(|i| if (i + 1) % 6 == 0 { LayerType::Full } else { LayerType::Sliding })
                .collect::<Vec<_>>()
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
            DecoderModel {
                name: TRAINED_PRESET.into(),
                display_name: "Trained on PyTorch's source (byte-level Llama, 3 layers, 1.8 M parameters)".into(),
                source: DecoderSource::Trained {
                    folder: TRAINED_PRESET.into(),
                    corpus: "the Python source of PyTorch 2.11.0 (torch/nn, torch/optim, torch/utils)".into(),
                    bos: 256,
                },
                // models/torch_bytes/config.json; the engine's tests read that file and
                // compare it with this.
                config: DecoderConfig {
                    initializer_range: 0.02,
                    ..llama(256, 512, 3, 4, 2, 64, 259, 256, 10_000.0, 1e-5, true)
                },
            },
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
                "qwen3_tiny",
                "Tiny Qwen3 (4 layers, 256 wide, head_dim 64, q/k norm)",
                "a 4-layer Qwen3 sized for a 2-core CPU",
                DecoderConfig {
                    architecture: Architecture::Qwen3,
                    qk_norm: true,
                    initializer_range: 0.2,
                    ..llama(256, 704, 4, 8, 2, 64, 8192, 2048, 1_000_000.0, 1e-6, false)
                },
            ),
            preset(
                "gemma3_tiny",
                "Tiny Gemma 3 (6 layers: 5 sliding over 32 positions, 1 full)",
                "a 6-layer Gemma 3 sized for a 2-core CPU",
                DecoderConfig {
                    architecture: Architecture::Gemma3,
                    qk_norm: true,
                    sliding_window: Some(32),
                    layer_types: gemma_layers(6),
                    rope_local_theta: Some(10_000.0),
                    query_pre_attn_scalar: Some(64.0),
                    // transformers' 0.02: with the head tied to the embedding (× √hidden),
                    // wider random weights make greedy decoding repeat one token.
                    ..llama(256, 704, 6, 4, 1, 64, 8192, 2048, 1_000_000.0, 1e-6, true)
                },
            ),
            preset(
                "qwen3_moe_tiny",
                "Tiny Qwen3-MoE (4 layers, 16 experts, top 2)",
                "a 4-layer Qwen3-MoE sized for a 2-core CPU",
                // The experts hold most of the weights, as in the models it copies (a
                // smaller vocabulary than the other tiny presets': its embedding and head
                // would outweigh the experts).
                DecoderConfig {
                    architecture: Architecture::Qwen3Moe,
                    qk_norm: true,
                    moe: moe(16, 2, 128, true),
                    initializer_range: 0.2,
                    ..llama(256, 704, 4, 8, 2, 32, 4096, 2048, 1_000_000.0, 1e-6, false)
                },
            ),
            preset(
                "mixtral_tiny",
                "Tiny Mixtral (4 layers, 8 experts, top 2)",
                "a 4-layer Mixtral sized for a 2-core CPU",
                DecoderConfig {
                    architecture: Architecture::Mixtral,
                    moe: moe(8, 2, 256, true),
                    initializer_range: 0.2,
                    ..llama(256, 256, 4, 8, 2, 32, 8192, 2048, 1_000_000.0, 1e-5, false)
                },
            ),
            preset(
                "phi3_tiny",
                "Tiny Phi-3 (4 layers, fused q/k/v and gate/up)",
                "a 4-layer Phi-3 sized for a 2-core CPU",
                DecoderConfig {
                    architecture: Architecture::Phi3,
                    initializer_range: 0.2,
                    ..llama(256, 704, 4, 8, 2, 32, 8192, 2048, 10_000.0, 1e-5, false)
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
                "gemma3_1b",
                "Gemma-3-1B shape",
                "google/gemma-3-1b-pt",
                DecoderConfig {
                    architecture: Architecture::Gemma3,
                    qk_norm: true,
                    sliding_window: Some(512),
                    layer_types: gemma_layers(26),
                    rope_local_theta: Some(10_000.0),
                    query_pre_attn_scalar: Some(256.0),
                    ..llama(1152, 6912, 26, 4, 1, 256, 262_144, 32_768, 1_000_000.0, 1e-6, true)
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
                "phi3_mini",
                "Phi-3-mini-4k shape (every layer slides over 2047 positions)",
                "microsoft/Phi-3-mini-4k-instruct",
                DecoderConfig {
                    architecture: Architecture::Phi3,
                    sliding_window: Some(2047),
                    ..llama(3072, 8192, 32, 32, 32, 96, 32_064, 4096, 10_000.0, 1e-5, false)
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
            preset(
                "qwen3_8b",
                "Qwen3-8B shape",
                "Qwen/Qwen3-8B",
                DecoderConfig {
                    architecture: Architecture::Qwen3,
                    qk_norm: true,
                    ..llama(4096, 12_288, 36, 32, 8, 128, 151_936, 40_960, 1_000_000.0, 1e-6, false)
                },
            ),
            preset(
                "qwen3_30b_a3b",
                "Qwen3-30B-A3B shape (128 experts, top 8)",
                "Qwen/Qwen3-30B-A3B",
                DecoderConfig {
                    architecture: Architecture::Qwen3Moe,
                    qk_norm: true,
                    moe: moe(128, 8, 768, true),
                    ..llama(2048, 6144, 48, 32, 4, 128, 151_936, 40_960, 1_000_000.0, 1e-6, false)
                },
            ),
            preset(
                "mixtral_8x7b",
                "Mixtral-8x7B shape (8 experts, top 2)",
                "mistralai/Mixtral-8x7B-v0.1",
                DecoderConfig {
                    architecture: Architecture::Mixtral,
                    moe: moe(8, 2, 14_336, true),
                    ..llama(4096, 14_336, 32, 32, 8, 128, 32_000, 32_768, 1_000_000.0, 1e-5, false)
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
        near("gemma3_1b", 1.0e9);
        near("qwen3_8b", 8.2e9);
        near("qwen3_30b_a3b", 30.5e9);
        near("mixtral_8x7b", 46.7e9);
        near("phi3_mini", 3.82e9);
    }

    #[test]
    fn active_parameters_leave_out_the_experts_a_token_does_not_use() {
        // The model cards' "A3B" and "12.9B active": (experts − top-k) idle experts per layer.
        let active = |name: &str| lookup(name).unwrap().config.active_parameters() as f64;
        assert!((active("qwen3_30b_a3b") / 3.3e9 - 1.0).abs() < 0.03, "{}", active("qwen3_30b_a3b"));
        assert!((active("mixtral_8x7b") / 12.9e9 - 1.0).abs() < 0.03, "{}", active("mixtral_8x7b"));
        let dense = &lookup("qwen3_8b").unwrap().config;
        assert_eq!(dense.active_parameters(), dense.parameters());
        let c = &lookup("mixtral_tiny").unwrap().config;
        let expert = 3 * 256 * 256;
        assert_eq!(c.expert_parameters(), expert);
        assert_eq!(c.parameters() - c.active_parameters(), 4 * 6 * expert);
    }

    #[test]
    fn a_sliding_window_shape_holds_far_less_than_the_naive_formula() {
        // Gemma-3-1B at 32k tokens in bf16: 26 layers, 1 KV head of 256; 4 full layers, 22
        // sliding over 512 positions.
        let c = &lookup("gemma3_1b").unwrap().config;
        assert_eq!((c.layers_of(LayerType::Full), c.layers_of(LayerType::Sliding)), (4, 22));
        let tokens = 32_768;
        let naive = c.kv_cache_bytes(tokens, 1, 2);
        assert_eq!(naive, 2 * 26 * 256 * tokens * 2);
        let split = c.kv_cache_split(tokens, 1, 2, SlidingHold::Rolled);
        assert_eq!(split[0].positions, tokens);
        assert_eq!(split[1].positions, 512);
        let held = c.kv_cache_held_bytes(tokens, 1, 2, SlidingHold::Rolled);
        assert_eq!(held, 2 * 256 * 2 * (4 * tokens + 22 * 512));
        assert!(naive > 5 * held, "{naive} vs {held}");
        // A growing cache keeps one position fewer in its sliding layers (window − 1).
        assert_eq!(c.sliding_positions(tokens, SlidingHold::Trimmed), 511);
        assert_eq!(c.sliding_positions(100, SlidingHold::Trimmed), 100);
        // Without sliding layers the two formulas agree.
        let l = &lookup(CPU_PRESET).unwrap().config;
        assert_eq!(l.kv_cache_held_bytes(95, 2, 4, SlidingHold::Trimmed), l.kv_cache_bytes(95, 2, 4));
        assert!(c.kv_cache_split_formula(tokens, 1, 2, SlidingHold::Rolled).contains("sliding: 2 × 22 layers"));
    }

    #[test]
    fn a_shape_says_what_sets_its_family_apart() {
        let notes = |name: &str| lookup(name).unwrap().config.family_notes();
        assert_eq!(notes(CPU_PRESET), "");
        assert_eq!(notes("gemma3_1b"), "Gemma 3 · 22 sliding layers (window 512) + 4 full");
        assert_eq!(notes("qwen3_30b_a3b"), "Qwen3-MoE · 128 experts, top 8 per token: 3.35 B of 30.53 B parameters active");
        assert_eq!(notes("qwen3_moe_tiny"), "Qwen3-MoE · 16 experts, top 2 per token: 3.6 M of 9.1 M parameters active");
    }

    #[test]
    fn linear_shapes_and_the_rest_add_up_to_the_parameters() {
        for m in presets() {
            let c = &m.config;
            let linear: u64 = c.linear_shapes().iter().map(|&(n, k, count)| n * k * count).sum();
            assert_eq!(linear + c.other_parameters(), c.parameters(), "{}", m.name);
        }
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
