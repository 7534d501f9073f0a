//! Qwen2 (`Qwen2ForCausalLM`): Llama's block with biases on the query, key and value
//! projections; sliding layers only with `use_sliding_window` (from `max_window_layers`
//! on, or as `layer_types` lists them).

use protocol::decoder::{Architecture, DecoderConfig, LayerType};
use serde_json::{Map, Value};

use super::family::{self, hf_config, Defaults, Family};

hf_config! {
    /// `Qwen2Config`'s fields.
    Qwen2Config {
        #[serde(default)]
        rope_theta: Option<f64>,
        #[serde(default)]
        rope_scaling: Option<Value>,
        #[serde(default)]
        rope_parameters: Option<Value>,
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

pub struct Qwen2;

impl Family for Qwen2 {
    fn architecture(&self) -> Architecture {
        Architecture::Qwen2
    }

    fn read(&self, fields: Map<String, Value>) -> Result<DecoderConfig, String> {
        let a = self.architecture();
        let c: Qwen2Config = family::parse(a, fields)?;
        family::check_activation("hidden_act", c.hidden_act.as_deref(), &["silu"])?;
        let mut d = family::shape(
            a,
            c.core(),
            Defaults {
                max_position_embeddings: 32_768,
                rms_norm_eps: 1e-6,
                tie_word_embeddings: false,
                head_dim: None,
            },
        )?;
        let (field, rope) = family::rope_object(c.rope_parameters, c.rope_scaling)?;
        let rope = family::rope(field, c.rope_theta, family::rope_params(field, rope)?, 10_000.0)?;
        family::set_rope(&mut d, rope);
        d.attention_bias = true;
        family::qwen_layer_types(&mut d, c.use_sliding_window, c.sliding_window, c.max_window_layers, c.layer_types)?;
        Ok(d)
    }
}
