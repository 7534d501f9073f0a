//! [`DecoderConfig`], the shape of a causal language model, and the arithmetic every page
//! and report shares: parameter counts (total and active per token), weight bytes, FLOPs,
//! and the KV cache's formula per layer type.

use serde::{Deserialize, Serialize};

use super::{Architecture, LayerType, Llama3Rope, MoeConfig};

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
}
