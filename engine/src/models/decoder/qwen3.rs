//! Qwen3 (`Qwen3ForCausalLM`): Llama's block with an RMSNorm over each head's query and key
//! (`self_attn.q_norm`, `k_norm`, `head_dim` wide) before RoPE, and `head_dim` read from the
//! config (128 when it is left out, transformers' default: not hidden_size / heads).
//! Sliding layers as Qwen2's.

use protocol::decoder::{Architecture, DecoderConfig, LayerType};
use serde_json::{Map, Value};

use super::family::{self, hf_config, Defaults, Family};

hf_config! {
    /// `Qwen3Config`'s fields.
    Qwen3Config {
        #[serde(default)]
        rope_theta: Option<f64>,
        #[serde(default)]
        rope_scaling: Option<Value>,
        #[serde(default)]
        rope_parameters: Option<Value>,
        #[serde(default)]
        attention_bias: Option<bool>,
        #[serde(default)]
        use_sliding_window: Option<bool>,
        #[serde(default)]
        sliding_window: Option<u32>,
        #[serde(default)]
        max_window_layers: Option<u32>,
        #[serde(default)]
        layer_types: Option<Vec<LayerType>>,
    }
}

pub struct Qwen3;

impl Family for Qwen3 {
    fn architecture(&self) -> Architecture {
        Architecture::Qwen3
    }

    fn read(&self, fields: Map<String, Value>) -> Result<DecoderConfig, String> {
        let a = self.architecture();
        let c: Qwen3Config = family::parse(a, fields)?;
        family::check_activation("hidden_act", c.hidden_act.as_deref(), &["silu"])?;
        let mut d = family::shape(
            a,
            c.core(),
            Defaults {
                max_position_embeddings: 32_768,
                rms_norm_eps: 1e-6,
                tie_word_embeddings: false,
                head_dim: Some(128),
            },
        )?;
        let (field, rope) = family::rope_object(c.rope_parameters, c.rope_scaling)?;
        let rope = family::rope(field, c.rope_theta, family::rope_params(field, rope)?, 10_000.0)?;
        family::set_rope(&mut d, rope);
        d.attention_bias = c.attention_bias.unwrap_or(false);
        d.qk_norm = true;
        family::qwen_layer_types(&mut d, c.use_sliding_window, c.sliding_window, c.max_window_layers, c.layer_types)?;
        Ok(d)
    }
}
