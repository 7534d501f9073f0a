//! Phi-3 (`Phi3ForCausalLM`): Llama's block with its projections fused, as its checkpoints
//! store them: `self_attn.qkv_proj` (the queries' rows, then the keys', then the values')
//! and `mlp.gate_up_proj` (the gate's rows, then the up's), split after one matmul each; the
//! same sums as separate projections. Every layer slides when `sliding_window` is set
//! (Phi-3-mini-4k: 2047), as Mistral's. Refused by name: `longrope` RoPE (the 128k
//! variants), a `partial_rotary_factor` below 1, residual dropout.

use protocol::decoder::{Architecture, DecoderConfig, LayerType};
use serde_json::{Map, Value};

use super::family::{self, hf_config, Defaults, Family, Layout};

hf_config! {
    /// `Phi3Config`'s fields.
    Phi3Config {
        #[serde(default)]
        rope_theta: Option<f64>,
        #[serde(default)]
        rope_scaling: Option<Value>,
        #[serde(default)]
        rope_parameters: Option<Value>,
        #[serde(default)]
        partial_rotary_factor: Option<f64>,
        #[serde(default)]
        original_max_position_embeddings: Option<u32>,
        #[serde(default)]
        sliding_window: Option<u32>,
        #[serde(default)]
        resid_pdrop: Option<f64>,
        /// Read by Phi3Config, used by none of its layers.
        #[serde(default)]
        embd_pdrop: Option<f64>,
    }
}

pub struct Phi3;

impl Family for Phi3 {
    fn architecture(&self) -> Architecture {
        Architecture::Phi3
    }

    fn layout(&self) -> Layout {
        Layout {
            fused: true,
            ..Layout::LLAMA
        }
    }

    fn read(&self, mut fields: Map<String, Value>) -> Result<DecoderConfig, String> {
        let a = self.architecture();
        // transformers 5 writes `partial_rotary_factor` inside `rope_parameters`.
        let nested_partial = ["rope_parameters", "rope_scaling"]
            .into_iter()
            .find_map(|k| fields.get_mut(k).and_then(|r| r.as_object_mut()).and_then(|r| r.remove("partial_rotary_factor")));
        let c: Phi3Config = family::parse(a, fields)?;
        family::check_activation("hidden_act", c.hidden_act.as_deref(), &["silu"])?;
        let partial = c.partial_rotary_factor.or(nested_partial.and_then(|v| v.as_f64())).unwrap_or(1.0);
        if partial != 1.0 {
            return Err(format!(
                "`partial_rotary_factor` ({partial}): rotary embeddings over part of each head are not implemented"
            ));
        }
        if let Some(p) = c.resid_pdrop.filter(|p| *p != 0.0) {
            return Err(format!("`resid_pdrop` ({p}): residual dropout is not implemented (0 for inference)"));
        }
        let _ = (c.embd_pdrop, c.original_max_position_embeddings);
        let mut d = family::shape(
            a,
            c.core(),
            Defaults {
                max_position_embeddings: 4096,
                rms_norm_eps: 1e-5,
                tie_word_embeddings: false,
                head_dim: None,
            },
        )?;
        let (field, rope) = family::rope_object(c.rope_parameters, c.rope_scaling)?;
        let rope = family::rope(field, c.rope_theta, family::rope_params(field, rope)?, 10_000.0)?;
        if rope.llama3.is_some() || rope.linear.is_some() {
            return Err(format!("`{field}`: Phi-3 takes default or longrope RoPE; this scaling is not implemented"));
        }
        family::set_rope(&mut d, rope);
        let window = family::check_window(c.sliding_window)?;
        let kind = if window.is_some() { LayerType::Sliding } else { LayerType::Full };
        let types = vec![kind; d.num_hidden_layers as usize];
        family::set_layer_types(&mut d, types, window)?;
        Ok(d)
    }
}
