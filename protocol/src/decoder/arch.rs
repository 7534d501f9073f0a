//! The families' tables: the Hugging Face architectures Gradless builds (their class,
//! config class and `model_type`), a layer's kind (full or sliding attention), Llama 3's
//! RoPE scaling and a mixture of experts' shape.

use serde::{Deserialize, Serialize};


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
