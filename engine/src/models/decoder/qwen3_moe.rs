//! Qwen3-MoE (`Qwen3MoeForCausalLM`): Qwen3's attention (q/k norms, `head_dim` from the
//! config), and a mixture of experts for the MLP: a router (`mlp.gate`) scores
//! `num_experts` experts per token (softmax in fp32), the top `num_experts_per_tok` run as
//! separate gated MLPs `moe_intermediate_size` wide (`mlp.experts.E.{gate,up,down}_proj`),
//! weighted by their probabilities (renormalised when `norm_topk_prob`). Layers in
//! `mlp_only_layers`, and those `decoder_sparse_step` skips, have a dense MLP instead.

use protocol::decoder::{Architecture, DecoderConfig, LayerType};
use serde_json::{Map, Value};

use super::family::{self, hf_config, Defaults, Family};

hf_config! {
    /// `Qwen3MoeConfig`'s fields.
    Qwen3MoeConfig {
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
        /// Written by Qwen's configs; Qwen3-MoE's layers do not read it.
        #[serde(default)]
        max_window_layers: Option<u32>,
        #[serde(default)]
        num_experts: Option<u32>,
        /// transformers 5's name for `num_experts`.
        #[serde(default)]
        num_local_experts: Option<u32>,
        #[serde(default)]
        num_experts_per_tok: Option<u32>,
        #[serde(default)]
        moe_intermediate_size: Option<u32>,
        #[serde(default)]
        norm_topk_prob: Option<bool>,
        #[serde(default)]
        decoder_sparse_step: Option<u32>,
        #[serde(default)]
        mlp_only_layers: Option<Vec<u32>>,
    }
}

pub struct Qwen3Moe;

impl Family for Qwen3Moe {
    fn architecture(&self) -> Architecture {
        Architecture::Qwen3Moe
    }

    fn read(&self, fields: Map<String, Value>) -> Result<DecoderConfig, String> {
        let a = self.architecture();
        let c: Qwen3MoeConfig = family::parse(a, fields)?;
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
        d.attention_bias = c.attention_bias.unwrap_or(false);
        d.qk_norm = true;
        let _ = c.max_window_layers;
        // Every layer slides when the window is on (the model's one mask).
        let window = match c.use_sliding_window.unwrap_or(false) {
            true => family::check_window(Some(c.sliding_window.unwrap_or(4096)))?,
            false => None,
        };
        let kind = if window.is_some() { LayerType::Sliding } else { LayerType::Full };
        let types = vec![kind; d.num_hidden_layers as usize];
        family::set_layer_types(&mut d, types, window)?;

        let mut moe = family::moe(
            c.num_experts,
            c.num_local_experts,
            128,
            c.num_experts_per_tok,
            8,
            c.moe_intermediate_size.unwrap_or(768),
            c.norm_topk_prob.unwrap_or(false),
        )?;
        let step = c.decoder_sparse_step.unwrap_or(1);
        if step == 0 {
            return Err("`decoder_sparse_step` must be at least 1 (every step-th layer has experts)".into());
        }
        let only = c.mlp_only_layers.unwrap_or_default();
        if let Some(bad) = only.iter().find(|&&i| i >= d.num_hidden_layers) {
            return Err(format!(
                "`mlp_only_layers` names layer {bad}, and the model has {} (0 to {})",
                d.num_hidden_layers,
                d.num_hidden_layers - 1
            ));
        }
        moe.dense_layers = (0..d.num_hidden_layers)
            .filter(|i| only.contains(i) || (i + 1) % step != 0)
            .collect();
        d.moe = Some(moe);
        Ok(d)
    }
}
