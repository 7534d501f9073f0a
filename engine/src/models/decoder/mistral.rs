//! Mistral (`MistralForCausalLM`): Llama's block, every layer attending to a sliding window
//! of `sliding_window` positions (4096 when the config leaves it out, as transformers'
//! default; `null`: every position).

use protocol::decoder::{Architecture, DecoderConfig, LayerType};
use serde_json::{Map, Value};

use super::family::{self, hf_config, Defaults, Family};

hf_config! {
    /// `MistralConfig`'s fields.
    MistralConfig {
        #[serde(default)]
        rope_theta: Option<f64>,
        #[serde(default)]
        rope_scaling: Option<Value>,
        #[serde(default)]
        rope_parameters: Option<Value>,
        /// Absent: transformers' 4096; `null`: no window.
        #[serde(default, deserialize_with = "family::present")]
        sliding_window: Option<Option<u32>>,
    }
}

pub struct Mistral;

impl Family for Mistral {
    fn architecture(&self) -> Architecture {
        Architecture::Mistral
    }

    fn read(&self, fields: Map<String, Value>) -> Result<DecoderConfig, String> {
        let a = self.architecture();
        let c: MistralConfig = family::parse(a, fields)?;
        family::check_activation("hidden_act", c.hidden_act.as_deref(), &["silu"])?;
        let mut d = family::shape(
            a,
            c.core(),
            Defaults {
                max_position_embeddings: 4096 * 32,
                rms_norm_eps: 1e-6,
                tie_word_embeddings: false,
                head_dim: None,
            },
        )?;
        let (field, rope) = family::rope_object(c.rope_parameters, c.rope_scaling)?;
        let rope = family::rope(field, c.rope_theta, family::rope_params(field, rope)?, 10_000.0)?;
        family::set_rope(&mut d, rope);
        let window = family::check_window(c.sliding_window.unwrap_or(Some(4096)))?;
        let kind = if window.is_some() { LayerType::Sliding } else { LayerType::Full };
        let types = vec![kind; d.num_hidden_layers as usize];
        family::set_layer_types(&mut d, types, window)?;
        Ok(d)
    }
}
