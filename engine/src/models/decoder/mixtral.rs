//! Mixtral (`MixtralForCausalLM`): Mistral's attention (a sliding window when
//! `sliding_window` is set) and a mixture of experts for every layer's MLP: a router
//! (`block_sparse_moe.gate`) picks the top `num_experts_per_tok` of `num_local_experts`
//! experts per token (softmax in fp32, the top-k renormalised to sum to 1), each a gated
//! MLP `intermediate_size` wide (`block_sparse_moe.experts.E.w1` gate, `w3` up, `w2`
//! down); the routing weights stay fp32 until the experts' sum is cast back.

use protocol::decoder::{Architecture, DecoderConfig, LayerType};
use serde_json::{Map, Value};

use super::family::{self, hf_config, Defaults, Family, Layout};

hf_config! {
    /// `MixtralConfig`'s fields.
    MixtralConfig {
        #[serde(default)]
        rope_theta: Option<f64>,
        #[serde(default)]
        rope_scaling: Option<Value>,
        #[serde(default)]
        rope_parameters: Option<Value>,
        #[serde(default)]
        sliding_window: Option<u32>,
        #[serde(default)]
        num_local_experts: Option<u32>,
        #[serde(default)]
        num_experts: Option<u32>,
        #[serde(default)]
        num_experts_per_tok: Option<u32>,
        #[serde(default)]
        router_jitter_noise: Option<f64>,
    }
}

pub struct Mixtral;

impl Family for Mixtral {
    fn architecture(&self) -> Architecture {
        Architecture::Mixtral
    }

    fn layout(&self) -> Layout {
        Layout {
            mlp: "block_sparse_moe",
            expert: ["w1", "w3", "w2"],
            router: "gate",
            fused: false,
        }
    }

    fn read(&self, fields: Map<String, Value>) -> Result<DecoderConfig, String> {
        let a = self.architecture();
        let c: MixtralConfig = family::parse(a, fields)?;
        family::check_activation("hidden_act", c.hidden_act.as_deref(), &["silu"])?;
        if let Some(noise) = c.router_jitter_noise.filter(|n| *n != 0.0) {
            return Err(format!(
                "`router_jitter_noise` ({noise}): the router's training-time noise is not implemented (0 for inference)"
            ));
        }
        let mut d = family::shape(
            a,
            c.core(),
            Defaults {
                max_position_embeddings: 4096 * 32,
                rms_norm_eps: 1e-5,
                tie_word_embeddings: false,
                head_dim: None,
            },
        )?;
        let (field, rope) = family::rope_object(c.rope_parameters, c.rope_scaling)?;
        let rope = family::rope(field, c.rope_theta, family::rope_params(field, rope)?, 1_000_000.0)?;
        family::set_rope(&mut d, rope);
        let window = family::check_window(c.sliding_window)?;
        let kind = if window.is_some() { LayerType::Sliding } else { LayerType::Full };
        let types = vec![kind; d.num_hidden_layers as usize];
        family::set_layer_types(&mut d, types, window)?;
        d.moe = Some(family::moe(
            c.num_experts,
            c.num_local_experts,
            8,
            c.num_experts_per_tok,
            2,
            d.intermediate_size,
            true,
        )?);
        Ok(d)
    }
}
