//! The transformers expression that builds a [`DecoderConfig`]'s shape: what snippets,
//! exported scripts and the peers run (offline: a config object, never a Hub download).

use super::{Architecture, DecoderConfig, LayerType};

impl DecoderConfig {
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
