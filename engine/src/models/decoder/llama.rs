//! Llama (`LlamaForCausalLM`): RMSNorm → attention (RoPE, grouped-query) → residual →
//! RMSNorm → SwiGLU MLP → residual, per layer; every layer attends to every position. The
//! block Mistral, Qwen2 and Qwen3 build on. RoPE: the default, Llama 3's scaling or linear.

use protocol::decoder::{Architecture, DecoderConfig};
use serde_json::{Map, Value};

use super::family::{self, hf_config, Defaults, Family};

hf_config! {
    /// `LlamaConfig`'s fields.
    LlamaConfig {
        #[serde(default)]
        rope_theta: Option<f64>,
        #[serde(default)]
        rope_scaling: Option<Value>,
        #[serde(default)]
        rope_parameters: Option<Value>,
        #[serde(default)]
        attention_bias: Option<bool>,
        #[serde(default)]
        mlp_bias: Option<bool>,
        /// Llama 2's tensor-parallel split of the matmuls in pretraining: the same sums.
        #[serde(default)]
        pretraining_tp: Option<u32>,
    }
}

pub struct Llama;

impl Family for Llama {
    fn architecture(&self) -> Architecture {
        Architecture::Llama
    }

    fn read(&self, fields: Map<String, Value>) -> Result<DecoderConfig, String> {
        let a = self.architecture();
        let c: LlamaConfig = family::parse(a, fields)?;
        family::check_activation("hidden_act", c.hidden_act.as_deref(), &["silu"])?;
        if c.mlp_bias == Some(true) {
            return Err("`mlp_bias`: true is not implemented (the MLP's projections have no bias)".into());
        }
        let _ = c.pretraining_tp;
        let mut d = family::shape(
            a,
            c.core(),
            Defaults {
                max_position_embeddings: 2048,
                rms_norm_eps: 1e-6,
                tie_word_embeddings: false,
                head_dim: None,
            },
        )?;
        let (field, rope) = family::rope_object(c.rope_parameters, c.rope_scaling)?;
        let rope = family::rope(field, c.rope_theta, family::rope_params(field, rope)?, 10_000.0)?;
        family::set_rope(&mut d, rope);
        d.attention_bias = c.attention_bias.unwrap_or(false);
        Ok(d)
    }
}
