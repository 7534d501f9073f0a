//! Gemma 3's text model (`Gemma3ForCausalLM`, `model_type: gemma3_text`):
//!
//! - sliding and full layers as `layer_types` lists them, or as the older
//!   `sliding_window_pattern` sets them (every pattern-th layer full, the others sliding
//!   over `sliding_window` positions);
//! - a RoPE base per layer type: the full layers' (`rope_theta`, with linear scaling from
//!   4B up) and the sliding layers' local one (`rope_local_base_freq`);
//! - RMSNorm over each head's query and key before RoPE;
//! - norms before and after attention, and before and after the MLP; every RMSNorm scales
//!   by `1 + weight`, in fp32;
//! - GeGLU: the gated MLP with tanh-approximated GELU (`gelu_pytorch_tanh`);
//! - embeddings multiplied by √hidden_size (in the weights' dtype);
//! - attention scores scaled by `query_pre_attn_scalar^-0.5`.
//!
//! What Gemma 2 had and Gemma 3 dropped (soft-capping of the attention scores and the
//! logits) is refused when a config sets it.

use protocol::decoder::{Architecture, DecoderConfig, LayerType};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::family::{self, hf_config, Defaults, Family};

hf_config! {
    /// `Gemma3TextConfig`'s fields.
    Gemma3TextConfig {
        #[serde(default)]
        hidden_activation: Option<String>,
        #[serde(default)]
        query_pre_attn_scalar: Option<f64>,
        /// Absent: transformers' 4096.
        #[serde(default, deserialize_with = "family::present")]
        sliding_window: Option<Option<u32>>,
        #[serde(default)]
        sliding_window_pattern: Option<u32>,
        /// transformers 5 writes the pattern it was built with beside `layer_types`.
        #[serde(default, rename = "_sliding_window_pattern")]
        written_pattern: Option<u32>,
        #[serde(default)]
        layer_types: Option<Vec<LayerType>>,
        #[serde(default)]
        rope_theta: Option<f64>,
        #[serde(default)]
        rope_local_base_freq: Option<f64>,
        #[serde(default)]
        rope_scaling: Option<Value>,
        #[serde(default)]
        rope_parameters: Option<Value>,
        #[serde(default)]
        final_logit_softcapping: Option<f64>,
        #[serde(default)]
        attn_logit_softcapping: Option<f64>,
        #[serde(default)]
        use_bidirectional_attention: Option<bool>,
        #[serde(default)]
        attention_bias: Option<bool>,
    }
}

/// transformers 5's RoPE settings for Gemma 3: one per layer type.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PerLayerType {
    #[serde(default)]
    full_attention: Option<Value>,
    #[serde(default)]
    sliding_attention: Option<Value>,
}

pub struct Gemma3;

impl Family for Gemma3 {
    fn architecture(&self) -> Architecture {
        Architecture::Gemma3
    }

    fn read(&self, fields: Map<String, Value>) -> Result<DecoderConfig, String> {
        let a = self.architecture();
        let c: Gemma3TextConfig = family::parse(a, fields)?;
        for (field, act) in [("hidden_activation", &c.hidden_activation), ("hidden_act", &c.hidden_act)] {
            family::check_activation(field, act.as_deref(), &["gelu_pytorch_tanh", "gelu_tanh"])?;
        }
        for (field, cap) in [
            ("final_logit_softcapping", c.final_logit_softcapping),
            ("attn_logit_softcapping", c.attn_logit_softcapping),
        ] {
            if let Some(cap) = cap {
                return Err(format!("`{field}` ({cap}): soft-capping is not implemented (Gemma 3 does not use it: null)"));
            }
        }
        if c.use_bidirectional_attention == Some(true) {
            return Err("`use_bidirectional_attention`: true is not implemented (a causal decoder attends only backwards)".into());
        }
        if c.attention_bias == Some(true) {
            return Err("`attention_bias`: true is not implemented for Gemma 3 (its projections have no bias)".into());
        }
        let mut d = family::shape(
            a,
            c.core(),
            Defaults {
                max_position_embeddings: 131_072,
                rms_norm_eps: 1e-6,
                tie_word_embeddings: true,
                head_dim: Some(256),
            },
        )?;
        // transformers' Gemma3TextConfig checks this even when head_dim is given.
        if d.hidden_size % d.num_attention_heads != 0 {
            return Err(format!(
                "`num_attention_heads` ({}) must divide hidden_size ({}), as transformers' Gemma3TextConfig requires",
                d.num_attention_heads, d.hidden_size
            ));
        }
        d.qk_norm = true;
        let scalar = c.query_pre_attn_scalar.unwrap_or(256.0);
        if !(scalar > 0.0) {
            return Err(format!("`query_pre_attn_scalar` must be positive, not {scalar}"));
        }
        d.query_pre_attn_scalar = Some(scalar);

        // RoPE: transformers 5 writes one object per layer type; 4.x a global base
        // (`rope_theta`, scaled by `rope_scaling`) and a local one.
        let (full, sliding) = match c.rope_parameters.filter(|v| !v.is_null()) {
            Some(v) => {
                if c.rope_scaling.as_ref().is_some_and(|s| !s.is_null()) {
                    return Err("`rope_scaling` and `rope_parameters` are both given: transformers 5 writes `rope_parameters`, 4.x `rope_scaling`; give one".into());
                }
                let per: PerLayerType = serde_path_to_error::deserialize(v)
                    .map_err(|e| format!("`rope_parameters.{}`: {} (Gemma 3's holds one object per layer type)", e.path(), e.inner()))?;
                (
                    family::rope_params("rope_parameters.full_attention", per.full_attention)?,
                    family::rope_params("rope_parameters.sliding_attention", per.sliding_attention)?,
                )
            }
            None => (family::rope_params("rope_scaling", c.rope_scaling)?, None),
        };
        let full = family::rope("rope_parameters.full_attention", c.rope_theta, full, 1_000_000.0)?;
        let local = family::rope("rope_parameters.sliding_attention", c.rope_local_base_freq, sliding, 10_000.0)?;
        if full.llama3.is_some() || local.llama3.is_some() || local.linear.is_some() {
            return Err("`rope_parameters`: Gemma 3 scales only its full layers' RoPE, linearly; this scaling is not implemented".into());
        }
        family::set_rope(&mut d, full);

        let window = family::check_window(c.sliding_window.unwrap_or(Some(4096)))?;
        let pattern = |field: &str, p: u32| match p {
            0 => Err(format!("`{field}` must be at least 1 (every pattern-th layer is a full one)")),
            p => Ok((0..d.num_hidden_layers)
                .map(|i| if (i + 1) % p == 0 { LayerType::Full } else { LayerType::Sliding })
                .collect::<Vec<_>>()),
        };
        let types = match (c.layer_types, c.sliding_window_pattern) {
            (Some(given), Some(p)) => {
                if pattern("sliding_window_pattern", p)? != given {
                    return Err(format!(
                        "`sliding_window_pattern` ({p}) contradicts `layer_types`: give one"
                    ));
                }
                given
            }
            (Some(given), None) => given,
            (None, Some(p)) => pattern("sliding_window_pattern", p)?,
            (None, None) => pattern("_sliding_window_pattern", c.written_pattern.unwrap_or(6))?,
        };
        family::set_layer_types(&mut d, types, window)?;
        if d.layers_of(LayerType::Sliding) > 0 {
            d.rope_local_theta = Some(local.theta);
        }
        Ok(d)
    }
}
