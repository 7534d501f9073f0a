//! Weight-only quantization of a decoder's linear layers (`generate.quant`: int8 per
//! output channel, int4 group-wise), what it reports (the weights split into the quantized
//! linear layers and the rest, the memory split into weights / KV cache / activations, the
//! drift from the unquantized model), and the byte formulas the reports are checked against.
//!
//! Only the linear layers of the decoder's blocks (q, k, v, o, gate, up, down; every
//! expert's gate, up and down in a mixture of experts) are quantized; the embedding table,
//! the norms, the biases, the routers and the LM head stay in the activation dtype, as
//! gpt-fast does. The kernels are PyTorch's own:
//! `torch._weight_int8pack_mm` (int8 weights, one scale per output channel) and
//! `torch._convert_weight_to_int4pack(_for_cpu)` + `torch._weight_int4pack_mm(_for_cpu)`
//! (4-bit weights packed two to a byte, a scale and a zero point per group of
//! `group_size` input columns and output channel).

use crate::settings::SettingId;
use serde::{Deserialize, Serialize};
use strum::{EnumString, IntoStaticStr, VariantArray, VariantNames};

use crate::decoder::DecoderConfig;
use crate::SpecError;

/// What the decoder's linear layers are stored as.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, EnumString, IntoStaticStr, VariantArray, VariantNames)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case", parse_err_ty = String, parse_err_fn = crate::words::unknown::<Self>)]
pub enum WeightQuant {
    /// In the weights' dtype (`advanced.dtype`), unquantized.
    #[default]
    None,
    /// int8, one scale per output channel (`torch._weight_int8pack_mm`).
    Int8,
    /// 4-bit, packed two per byte, a scale and a zero point per group of `group_size` input
    /// columns (`torch._weight_int4pack_mm`).
    Int4,
}

impl WeightQuant {
    pub fn is_none(&self) -> bool {
        *self == WeightQuant::None
    }
}

/// The dtype the KV cache stores its keys and values in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, EnumString, IntoStaticStr, VariantArray, VariantNames)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case", parse_err_ty = String, parse_err_fn = crate::words::unknown::<Self>)]
pub enum KvDtype {
    /// The keys' dtype, as transformers' caches keep it (the activations').
    #[default]
    AsActivations,
    /// bf16, cast on the way in and back to the activations' dtype for attention.
    Bf16,
    /// fp16, the same way.
    Fp16,
    /// fp8 e4m3 with a per-tensor scale for each layer's keys and values (set from the
    /// prefill): CUDA devices that have fp8 (compute capability 8.9 or later); not
    /// applicable on a CPU.
    Fp8E4m3,
}

impl KvDtype {
    /// What the cache stores its elements as, with activations in `activations`.
    pub fn element(self, activations: crate::WeightsDtype) -> crate::Element {
        match self {
            KvDtype::AsActivations => activations.element(),
            KvDtype::Bf16 => crate::Element::Bf16,
            KvDtype::Fp16 => crate::Element::F16,
            KvDtype::Fp8E4m3 => crate::Element::F8E4m3,
        }
    }

    pub fn is_default(&self) -> bool {
        *self == KvDtype::AsActivations
    }
}

/// The group sizes int4 takes (gpt-fast's and torchao's).
pub const GROUP_SIZES: [u32; 3] = [32, 64, 128];

/// int4's group size when the spec names none.
pub const DEFAULT_GROUP_SIZE: u32 = 64;

/// The most numbers `generate.prefill_logits` returns (batch × vocab): 16 MiB of fp32.
pub const MAX_PREFILL_LOGITS: u64 = 1 << 22;

/// The quantization a decoder is built with, resolved: int4 always carries its group size,
/// and nothing else has one. What the model cache keys a quantized model by. The spec's
/// two fields (`quant`, `group_size`) become this once ([`crate::GenerateSpec::quant`],
/// [`check_quant`]); a report or a quality row reads them back from it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LinearQuant {
    #[default]
    None,
    /// One scale per output channel.
    Int8,
    /// A scale and a zero point per group of `group_size` input columns.
    Int4 { group_size: u32 },
}

impl LinearQuant {
    pub const NONE: LinearQuant = LinearQuant::None;

    pub fn is_none(&self) -> bool {
        *self == LinearQuant::None
    }

    /// The kind, as the spec's `quant` names it.
    pub fn kind(&self) -> WeightQuant {
        match self {
            LinearQuant::None => WeightQuant::None,
            LinearQuant::Int8 => WeightQuant::Int8,
            LinearQuant::Int4 { .. } => WeightQuant::Int4,
        }
    }

    /// int4's group size; `None` for every other kind, as the spec's `group_size`.
    pub fn group_size(&self) -> Option<u32> {
        match self {
            LinearQuant::Int4 { group_size } => Some(*group_size),
            _ => None,
        }
    }
}

/// The input widths of the decoder's linear layers (q/k/v/gate/up read the hidden size, o
/// the attention heads' width, down the MLP's): every one must split into whole groups.
pub fn linear_input_widths(c: &DecoderConfig) -> Vec<(&'static str, u32)> {
    let mut widths = vec![
        ("hidden_size", c.hidden_size),
        ("num_attention_heads × head_dim", c.num_attention_heads * c.head_dim),
    ];
    // A mixture of experts' down projections read the experts' width; the dense MLP's only
    // where a layer has one.
    if c.moe_layers() < c.num_hidden_layers {
        widths.push(("intermediate_size", c.intermediate_size));
    }
    if let Some(m) = &c.moe {
        widths.push(("the experts' intermediate size", m.expert_intermediate_size));
    }
    widths
}

/// The structural checks of `weights` and `group_size` on a decoder of config `c`: int4
/// needs a group size of 32, 64 or 128 that divides every linear layer's input width;
/// int8 has no groups.
pub fn check_quant(
    weights: WeightQuant,
    group_size: Option<u32>,
    c: &DecoderConfig,
) -> Result<LinearQuant, SpecError> {
    let err = |field: SettingId, message: String| SpecError {
        field: field.into(),
        message,
    };
    match weights {
        WeightQuant::None | WeightQuant::Int8 => {
            if let Some(g) = group_size {
                return Err(err(
                    SettingId::GroupSize,
                    format!(
                        "group_size {g} applies to int4 (generate.quant) only; {} linear layers have {}",
                        weights.as_str(),
                        match weights {
                            WeightQuant::Int8 => "one scale per output channel, no groups",
                            _ => "no quantization",
                        }
                    ),
                ));
            }
            Ok(match weights {
                WeightQuant::Int8 => LinearQuant::Int8,
                _ => LinearQuant::None,
            })
        }
        WeightQuant::Int4 => {
            let g = group_size.unwrap_or(DEFAULT_GROUP_SIZE);
            if !GROUP_SIZES.contains(&g) {
                return Err(err(
                    SettingId::GroupSize,
                    format!("int4's group size must be 32, 64 or 128 (PyTorch's int4 kernels), not {g}"),
                ));
            }
            for (name, width) in linear_input_widths(c) {
                if width % g != 0 {
                    let fits: Vec<String> = GROUP_SIZES
                        .iter()
                        .filter(|&&s| linear_input_widths(c).iter().all(|(_, w)| w % s == 0))
                        .map(|s| s.to_string())
                        .collect();
                    return Err(err(
                        SettingId::GroupSize,
                        format!(
                            "group size {g} does not divide {name} = {width} (a group is {g} input columns of a linear layer, so every input width must split into whole groups){}",
                            match fits.is_empty() {
                                true => "; no int4 group size fits this decoder".to_string(),
                                false => format!("; this decoder takes {}", fits.join(" or ")),
                            }
                        ),
                    ));
                }
            }
            Ok(LinearQuant::Int4 { group_size: g })
        }
    }
}

/// The weight bytes of the quantized linear layers (each layer's weight and its scales,
/// and zeros) and of everything else (embedding, norms, biases, LM head), from the config's
/// shapes. `act_bytes`: bytes per element of the activation dtype (the scales', zeros' and
/// the unquantized tensors' dtype).
///
/// - unquantized: `N × K × act` per linear layer;
/// - int8: `N × K × 1 + N × act` (one scale per output channel);
/// - int4: `N × K / 2 + (K / group) × N × 2 × act` (a scale and a zero per group).
pub fn weights_formula(c: &DecoderConfig, q: LinearQuant, act_bytes: u64) -> WeightsBreakdown {
    // (out N, in K, how many) of the blocks' linear layers, experts included.
    let shapes = c.linear_shapes();
    let linear_one = |n: u64, k: u64| match q {
        LinearQuant::None => n * k * act_bytes,
        LinearQuant::Int8 => n * k + n * act_bytes,
        LinearQuant::Int4 { group_size } => n * k / 2 + (k / group_size as u64) * n * 2 * act_bytes,
    };
    let linear: u64 = shapes.iter().map(|&(n, k, count)| count * linear_one(n, k)).sum();
    let dense: u64 = shapes.iter().map(|&(n, k, count)| count * n * k).sum::<u64>() * act_bytes;
    let other = c.other_parameters() * act_bytes;
    WeightsBreakdown {
        linear_bytes: linear,
        other_bytes: other,
        linear_unquantized_bytes: dense,
    }
}

/// The weight bytes one decode step reads, of `resident` held: every weight once, but of an
/// embedding table apart from the LM head only the rows of the tokens fed (one per
/// sequence); a table tied to the head is read whole by the head. `act_bytes`: the table's
/// bytes per element.
pub fn decode_weight_bytes(c: &DecoderConfig, resident: u64, batch: u64, act_bytes: u64) -> u64 {
    if c.tie_word_embeddings {
        return resident;
    }
    let (vocab, h) = (c.vocab_size as u64, c.hidden_size as u64);
    resident.saturating_sub(vocab * h * act_bytes) + batch.min(vocab) * h * act_bytes
}

/// A decoder's weights split into the linear layers of its blocks and the rest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WeightsBreakdown {
    /// The blocks' linear layers (q, k, v, o, gate, up, down, the experts'): quantized, their packed
    /// weights with the scales (and zeros); otherwise the weights as stored.
    pub linear_bytes: u64,
    /// Everything else, in the activation dtype: the embedding table, the norms, the
    /// biases, the LM head (none when tied to the embedding).
    pub other_bytes: u64,
    /// The same linear layers unquantized, in the activation dtype: what quantizing saved
    /// is `linear_unquantized_bytes − linear_bytes`.
    pub linear_unquantized_bytes: u64,
}

/// Memory at one moment of a generation, split by what holds it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MemorySplit {
    /// The model's weights (what building it added to the device's memory).
    pub weights_bytes: u64,
    /// The KV cache's tensors, measured from them.
    pub kv_cache_bytes: u64,
    /// The rest: the step's activations and logits at a peak; after a step, the prompt,
    /// the tokens so far and whatever else the step left allocated.
    pub activations_bytes: u64,
}

/// How far a quantized (or reduced-precision cache) generation drifted from the same
/// decoder unquantized, on the same prompt.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Drift {
    /// max |Δ logit| over the vocabulary and the batch at the prefill's last position
    /// (the logits that pick the first new token).
    pub max_abs_logit_delta: f64,
    /// The largest |logit| of the unquantized prefill there, for scale.
    pub max_abs_logit: f64,
    /// Share (0 to 1) of the generated tokens the unquantized model also picks greedily
    /// when fed the same prefix (teacher-forced: one pass over prompt + generated tokens).
    pub greedy_agreement: f64,
    /// Tokens compared (batch × new tokens).
    pub tokens_compared: u32,
    /// Share (0 to 1) of the compared positions where the unquantized model's top-1 margin
    /// (its best logit minus its second best) is below `max_abs_logit_delta`: the tokens a
    /// perturbation of that size can flip. Random weights leave most margins small, so
    /// their agreement says little about a trained model's. `None` in records written
    /// before it was reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub low_margin_share: Option<f64>,
    /// What the reference was ("the same weights in bf16, unquantized, dense KV cache").
    pub reference: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> DecoderConfig {
        crate::decoder::preset(crate::decoder::CPU_PRESET).unwrap().config.clone()
    }

    #[test]
    fn int4_group_sizes_must_divide_every_input_width() {
        let c = tiny();
        // 704 = 11 × 64: 128 does not divide the MLP's width.
        let e = check_quant(WeightQuant::Int4, Some(128), &c).unwrap_err();
        assert_eq!(e.field, "generate.group_size");
        assert!(e.message.contains("704") && e.message.contains("32 or 64"), "{e}");
        let e = check_quant(WeightQuant::Int4, Some(48), &c).unwrap_err();
        assert!(e.message.contains("32, 64 or 128"), "{e}");
        assert_eq!(check_quant(WeightQuant::Int4, None, &c).unwrap().group_size(), Some(64));
        let e = check_quant(WeightQuant::Int8, Some(64), &c).unwrap_err();
        assert_eq!(e.field, "generate.group_size");
    }

    #[test]
    fn a_spec_with_malformed_weights_is_refused_naming_the_field() {
        // int3 does not read: serde names the variant, the API's reader the field.
        let e = serde_json::from_str::<crate::RunSpec>(
            r#"{"model": "llama_tiny", "generate": {"quant": "int3"}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("int3") && e.contains("int8") && e.contains("int4"), "{e}");
        let spec = |json: &str| -> crate::RunSpec { serde_json::from_str(json).unwrap() };
        let limits = crate::Limits::default();
        let e = spec(r#"{"model": "llama_tiny", "generate": {"quant": "int4", "group_size": 128}}"#)
            .check(&crate::Catalog::built_in(), &limits)
            .unwrap_err();
        assert_eq!(e.field, "generate.group_size");
        let e = spec(r#"{"model": "llama_tiny", "autocast": "bf16", "generate": {"quant": "int8"}}"#)
            .check(&crate::Catalog::built_in(), &limits)
            .unwrap_err();
        assert_eq!(e.field, "generate.quant");
        assert!(e.message.contains("autocast"), "{e}");
        let ok = spec(r#"{"model": "llama_tiny", "generate": {"quant": "int4", "group_size": 32}}"#);
        ok.check(&crate::Catalog::built_in(), &limits).unwrap();
        assert!(ok.label().contains("int4 linear layers · group 32"), "{}", ok.label());
        // The old name of the field still reads, as the same spec.
        assert_eq!(spec(r#"{"model": "llama_tiny", "generate": {"weights": "int4", "group_size": 32}}"#), ok);
        let e = spec(r#"{"model": "llama_tiny", "generate": {"cache": "off", "kv_dtype": "bf16"}}"#)
            .check(&crate::Catalog::built_in(), &limits)
            .unwrap_err();
        assert_eq!(e.field, "generate.kv_dtype");
        // Unquantized specs serialise as they did before the field existed.
        let plain = serde_json::to_string(&crate::GenerateSpec::default()).unwrap();
        assert!(!plain.contains("quant") && !plain.contains("group_size") && !plain.contains("kv_dtype"), "{plain}");
    }

    #[test]
    fn quantized_linear_bytes_shrink_by_the_element_ratio() {
        let c = tiny();
        let fp32 = weights_formula(&c, LinearQuant::NONE, 4);
        assert_eq!(fp32.linear_bytes, fp32.linear_unquantized_bytes);
        let int8 = weights_formula(&c, LinearQuant::Int8, 4);
        let int4 = weights_formula(&c, LinearQuant::Int4 { group_size: 64 }, 4);
        // The rest is untouched; the linear layers fall under 0.3× (int8) and 0.2× (int4).
        assert_eq!(int8.other_bytes, fp32.other_bytes);
        assert_eq!(int4.other_bytes, fp32.other_bytes);
        assert!((int8.linear_bytes as f64) < 0.3 * fp32.linear_bytes as f64);
        assert!((int4.linear_bytes as f64) < 0.2 * fp32.linear_bytes as f64);
        // Everything together is the parameter count in fp32.
        assert_eq!(fp32.linear_bytes + fp32.other_bytes, 4 * c.parameters());
    }
}
