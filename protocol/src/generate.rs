//! A generate run: what it asks for beyond a forward run ([`GenerateSpec`]: new tokens and
//! the KV cache), what it streams per step ([`GenStep`]) and what it reports
//! ([`GenerationReport`]). A generate run is a [`crate::RunSpec`] on a decoder with
//! `generate` set; the prompt length is its `input_size`, the batch its `batch`, and the five
//! switches mean what they mean for a forward run.

use serde::{Deserialize, Serialize};
use strum::{EnumString, IntoStaticStr, VariantArray, VariantNames};

use crate::{Drift, KvDtype, LatencyStats, LinearQuant, MemorySplit, WeightQuant, WeightsBreakdown};

/// How the keys and values of past positions are kept between decode steps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, EnumString, IntoStaticStr, VariantArray, VariantNames)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case", parse_err_ty = String, parse_err_fn = crate::words::unknown::<Self>)]
pub enum KvCacheKind {
    /// Grows by concatenation each step, as transformers' `DynamicCache`.
    #[default]
    Dynamic,
    /// Allocated once for prompt + new tokens and written in place, as `StaticCache` and
    /// gpt-fast.
    Static,
    /// No cache: every step recomputes the whole prefix (`use_cache=False`).
    Off,
}

/// The most new tokens one generate run may ask for.
pub const MAX_NEW_TOKENS: u32 = 4096;

/// What a generate run asks for beyond a forward run's settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, default)]
pub struct GenerateSpec {
    /// Tokens generated per sequence (greedy, fixed length: no end-of-sequence stop).
    pub new_tokens: u32,
    pub cache: KvCacheKind,
    /// Weight-only quantization of the decoder's linear layers (none, int8, int4); the
    /// embedding, norms and LM head stay in the weights' dtype (`advanced.dtype`). `quant`
    /// in the JSON, the URL and the CLI (`weights` in records and clients from before it
    /// had its own name: still read). Left out when none.
    #[serde(rename = "quant", alias = "weights", skip_serializing_if = "WeightQuant::is_none")]
    pub weights: WeightQuant,
    /// int4's group size (32, 64 or 128; 64 when absent). Only with int4.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_size: Option<u32>,
    /// The KV cache's dtype (as the activations, bf16, fp16; fp8_e4m3 refused here). Left
    /// out when as the activations.
    #[serde(skip_serializing_if = "KvDtype::is_default")]
    pub kv_dtype: KvDtype,
    /// Report the prefill's last-position logits (`generation.prefill_logits`, batch ×
    /// vocab in fp32), to compare a run with a peer's number for number. Off by default:
    /// for a real vocabulary they are megabytes (batch × vocab is capped at
    /// [`crate::MAX_PREFILL_LOGITS`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub prefill_logits: bool,
    /// For a model that reads text: the prompt as text. The byte model (the trained preset)
    /// is fed [BOS] + its UTF-8 bytes, at most [`MAX_PROMPT_TEXT_BYTES`]; a team folder
    /// with a `tokenizer.json` what `tokenizer(text)` gives, at most
    /// [`MAX_TOKENIZED_TEXT_BYTES`] and as many tokens as its context leaves beside
    /// `new_tokens`. It sets the prompt's length (`input_size` left out, or equal to it).
    /// Absent: random seeded prompt ids, as for every model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_text: Option<String>,
    /// Measure the trained model's quality after the run: bits per byte on its held-out
    /// text under each weights dtype, quantization and KV cache dtype the page offers,
    /// beside gzip -9 and a unigram byte model (`generation.quality`). Only for a model
    /// shipped with held-out text.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub quality: bool,
}

/// The longest prompt text, in UTF-8 bytes: the trained model's context is 256 positions,
/// and a prompt leaves room for [BOS] and some new tokens.
pub const MAX_PROMPT_TEXT_BYTES: u32 = 192;

/// The longest prompt text for a tokenized model, in UTF-8 bytes: a bound on what a request
/// makes the tokenizer read. Its length in tokens is checked against the model's context.
pub const MAX_TOKENIZED_TEXT_BYTES: u32 = 16_384;

impl Default for GenerateSpec {
    fn default() -> Self {
        GenerateSpec {
            new_tokens: 64,
            cache: KvCacheKind::Dynamic,
            weights: WeightQuant::None,
            group_size: None,
            kv_dtype: KvDtype::AsActivations,
            prefill_logits: false,
            prompt_text: None,
            quality: false,
        }
    }
}

impl GenerateSpec {
    /// The quantization the decoder is built with (int4's group size resolved); none when
    /// the spec asks for none or its group size is invalid (the spec check refuses that).
    pub fn quant(&self) -> LinearQuant {
        match self.weights {
            WeightQuant::None => LinearQuant::None,
            WeightQuant::Int8 => LinearQuant::Int8,
            WeightQuant::Int4 => LinearQuant::Int4 {
                group_size: self.group_size.unwrap_or(crate::DEFAULT_GROUP_SIZE),
            },
        }
    }
}

/// Whether a step processed the prompt or produced one more token from the last.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum GenPhase {
    Prefill,
    Decode,
}

/// One step of a generation: the prefill (step 0, which yields the first new token) or one
/// decode step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GenStep {
    /// 0 for the prefill, then 1, 2, ...: the step that produced new token `step + 1`.
    pub step: u32,
    pub phase: GenPhase,
    /// Position of the last token this step fed the model (prompt − 1 for the prefill).
    pub position: u32,
    /// Tokens fed to the model this step, per sequence (the prompt for the prefill, 1 for a
    /// cached decode step, the whole prefix without a cache).
    pub tokens_in: u32,
    /// Synchronised wall time of the step.
    pub latency_ms: f64,
    /// Allocated after the step (the step's logits dropped), as the run's memory source
    /// counts it, with other cached models left out.
    pub allocated_bytes: u64,
    /// Highest allocated during the step.
    pub peak_bytes: u64,
    /// Bytes of the KV cache's tensors after the step, measured from the tensors.
    pub kv_cache_bytes: u64,
    /// Allocated after the step beyond the weights, the prompt, the KV cache and the tokens
    /// generated so far: what autograd's graph holds when grad is enabled (0 otherwise, up
    /// to allocator rounding).
    pub graph_bytes: u64,
    /// The token this step produced for the first sequence (none in records written
    /// before steps carried it): a page shows a byte model's text as it is generated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<i64>,
    /// The text that token adds, for a model that writes text (empty while a character is
    /// split across tokens; nothing after EOS): what a page shows as it decodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// A backend of `scaled_dot_product_attention` (`sdp::SDPBackend` in libtorch).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum SdpBackend {
    /// The reference kernel: materialises the scores `[batch, heads, queries, keys]`.
    Math,
    /// FlashAttention on CUDA; on the CPU, libtorch's own tiled (flash) kernel.
    Flash,
    /// xFormers' memory-efficient kernel (CUDA).
    MemoryEfficient,
    /// cuDNN's attention (CUDA): a plan built per shape.
    Cudnn,
    /// A backend registered by an out-of-tree device.
    Overrideable,
}

impl SdpBackend {
    /// From libtorch's number (math 0, flash 1, memory-efficient 2, cuDNN 3, overrideable 4).
    pub fn from_index(i: i64) -> Option<SdpBackend> {
        Some(match i {
            0 => SdpBackend::Math,
            1 => SdpBackend::Flash,
            2 => SdpBackend::MemoryEfficient,
            3 => SdpBackend::Cudnn,
            4 => SdpBackend::Overrideable,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SdpBackend::Math => "math",
            SdpBackend::Flash => "flash",
            SdpBackend::MemoryEfficient => "memory_efficient",
            SdpBackend::Cudnn => "cudnn",
            SdpBackend::Overrideable => "overrideable",
        }
    }

    /// For people, on `device` (the CPU's flash is libtorch's CPU kernel, not FlashAttention).
    pub fn label(self, device: crate::DeviceKind) -> &'static str {
        match (self, device) {
            (SdpBackend::Math, _) => "math (scores materialised)",
            (SdpBackend::Flash, crate::DeviceKind::Cpu) => "the CPU flash kernel",
            (SdpBackend::Flash, crate::DeviceKind::Cuda) => "FlashAttention",
            (SdpBackend::MemoryEfficient, _) => "memory-efficient",
            (SdpBackend::Cudnn, _) => "cuDNN attention",
            (SdpBackend::Overrideable, _) => "a device's own backend",
        }
    }

    /// Whether the kernel materialises the attention scores (only math does).
    pub fn materialises_scores(self) -> bool {
        self == SdpBackend::Math
    }
}

/// Which SDPA backend a generation's attention ran, per phase, as libtorch chose it for the
/// phase's own query, key and value (the first layer's; every layer has the same shapes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AttentionBackends {
    pub prefill: SdpBackend,
    /// `None` with one new token (no decode step).
    pub decode: Option<SdpBackend>,
    /// Why, when Gradless narrowed the choice (e.g. cuDNN attention switched off for the
    /// decode steps on CUDA: it builds a plan for every new key length).
    #[serde(default)]
    pub note: String,
}

impl AttentionBackends {
    /// "prefill: FlashAttention; decode: memory-efficient (note)", for pages and the CLI.
    pub fn describe(&self, device: crate::DeviceKind) -> String {
        let mut text = format!("prefill: {}", self.prefill.label(device));
        if let Some(d) = self.decode {
            text.push_str(&format!("; decode: {}", d.label(device)));
        }
        if !self.note.is_empty() {
            text.push_str(&format!(" ({})", self.note));
        }
        text
    }
}

/// What a generation measured (the report's `generation` section).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GenerationReport {
    pub cache: KvCacheKind,
    pub prompt_len: u32,
    pub new_tokens: u32,
    pub batch: u32,
    /// Time to first token: the prefill step.
    pub prefill_ms: f64,
    /// Every step, the prefill first.
    pub steps: Vec<GenStep>,
    /// Bytes of the KV cache's tensors after the last step (0 without a cache).
    pub kv_cache_bytes: u64,
    /// The formula for the positions the cache holds, per layer type: 2 × layers × kv_heads
    /// × head_dim × positions × batch × bytes per element, a sliding layer's positions
    /// capped by its window (see `kv_cache_by_layer_type`).
    pub kv_cache_formula_bytes: u64,
    /// The naive formula: every layer holding as many positions as the full layers
    /// (`kv_cache_tokens`). Equal to `kv_cache_formula_bytes` without sliding layers; 0 in
    /// records written before it was reported.
    #[serde(default)]
    pub kv_cache_naive_bytes: u64,
    /// The cache after the last step by layer type (full, sliding): layers, positions each
    /// holds, bytes measured from the tensors and the formula's. Empty without a cache and
    /// in records written before it was reported.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kv_cache_by_layer_type: Vec<crate::decoder::KvLayerSplit>,
    /// A mixture of experts' figures: total against active parameters, every expert's bytes
    /// held, and the distinct experts and expert bytes each decode step read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe: Option<crate::decoder::MoeFigures>,
    /// Positions the cache's tensors hold per sequence (dynamic: prompt + new − 1; the last
    /// token's keys and values are never needed. Static: its whole allocated length).
    pub kv_cache_tokens: u32,
    /// Bytes per element of the cache's keys.
    pub kv_cache_element_bytes: u32,
    /// Bytes per element of the cache's values: the keys' (the cache stores both in the
    /// keys' dtype, as transformers' caches do; under autocast with fp32 weights that is
    /// fp32, from RoPE's fp32 cos and sin, though the value projection ran in bf16). 0 in
    /// records written before it was reported.
    #[serde(default)]
    pub kv_cache_value_element_bytes: u32,
    /// Which scaled_dot_product_attention backend the prefill and the decode steps ran, as
    /// libtorch chose it for their tensors. `None` in records written before it was
    /// reported.
    #[serde(default)]
    pub attention: Option<AttentionBackends>,
    /// Whether the decode steps replayed a captured CUDA graph (static cache, attending to
    /// the cache's whole capacity with a mask).
    #[serde(default)]
    pub decode_graph: bool,
    /// Where the model's weights came from, as the server that ran it said: the files with
    /// their bytes, the dtype as stored and a content hash, or "random, seeded: no weights
    /// in this folder" ([`crate::decoder::DecoderModel::provenance`]). Kept in the record, so
    /// it reads the same after the model is no longer served. `None` in records written
    /// before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights_source: Option<String>,
    /// Decode steps' latency (every step but the prefill); `None` with one new token.
    pub decode_ms_per_token: Option<LatencyStats>,
    /// Tokens per second per sequence over the decode steps (1000 / mean step time).
    pub tokens_per_s: f64,
    /// The same for the whole batch.
    pub tokens_per_s_total: f64,
    /// Bytes of the weights each decode step reads: every weight, but one embedding row
    /// per sequence of an untied table ([`crate::decode_weight_bytes`]).
    pub weights_bytes: u64,
    /// Decode's achieved memory bandwidth: (weights + KV cache bytes read) / step time,
    /// summed over the decode steps, in GB/s.
    pub decode_bandwidth_gb_s: Option<f64>,
    /// That bandwidth as % of the device's (`bandwidth_source` says whose figure).
    pub decode_bandwidth_percent: Option<f64>,
    pub bandwidth_source: Option<String>,
    /// FLOPs of the prefill (counted from the config: see `DecoderConfig::forward_flops`).
    pub prefill_flops: u64,
    pub prefill_tflops: f64,
    pub prefill_percent_of_peak: Option<f64>,
    /// FLOPs per decode step and its arithmetic intensity (FLOPs / bytes read).
    pub decode_flops_per_step: u64,
    pub decode_intensity_flops_per_byte: f64,
    /// The warm-up generation before the measured one (few tokens, never in the figures).
    pub warmup_ms: f64,
    /// The prompt's token ids (random, seeded), per sequence.
    pub prompt_tokens: Vec<Vec<i64>>,
    /// The generated token ids, per sequence.
    pub tokens: Vec<Vec<i64>>,
    /// The weights split into the blocks' linear layers (quantized or not) and the rest,
    /// measured from the tensors. `None` in records written before it was reported.
    #[serde(default)]
    pub weights_breakdown: Option<WeightsBreakdown>,
    /// The same split from the config's shapes (`quant::weights_formula`).
    #[serde(default)]
    pub weights_formula: Option<WeightsBreakdown>,
    /// At the step with the highest peak: weights, KV cache, activations.
    #[serde(default)]
    pub memory_peak: Option<MemorySplit>,
    /// After the last step: weights, KV cache, the rest.
    #[serde(default)]
    pub memory_steady: Option<MemorySplit>,
    /// With quantized weights: how far the run drifted from the same decoder unquantized.
    #[serde(default)]
    pub drift: Option<Drift>,
    /// The prefill's last-position logits per sequence (fp32), when the spec asked for
    /// them: one prefill pass of the run's model (eval, no grad, a fresh cache of the
    /// run's kind and dtype, no autocast) after the run, outside its figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_logits: Option<Vec<Vec<f32>>>,
    /// For a byte-level model: the prompt and each sequence's generated bytes as text
    /// (UTF-8; a byte sequence that is not valid UTF-8 shows U+FFFD, and the special ids
    /// are left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<GeneratedText>,
    /// When the spec asked for it: the model's bits per byte on held-out text under each
    /// setting, and two baselines on the same bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quality: Option<crate::Quality>,
}

/// A text model's prompt and continuations, as text (the byte model's bytes, or a
/// tokenizer's decoding).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GeneratedText {
    pub prompt: String,
    /// One per sequence (greedy decoding on the same prompt gives each the same text),
    /// special tokens left out, ending before the first EOS.
    pub generated: Vec<String>,
    /// The new token at which each sequence wrote EOS, if it did (transformers' `generate`
    /// stops there; Gradless decodes on, to measure the steps asked).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub eos_at: Vec<Option<u32>>,
}

/// `ids` of a byte-level model as text: bytes below 256 decoded as UTF-8 (lossy), other
/// ids (BOS, EOS, padding) left out.
pub fn bytes_text(ids: &[i64]) -> String {
    let bytes: Vec<u8> = ids.iter().filter(|&&t| (0..256).contains(&t)).map(|&t| t as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GradMode, Limits, RunSpec};

    fn on(model: &str, g: GenerateSpec) -> RunSpec {
        RunSpec {
            model: model.parse().unwrap(),
            batch: 1,
            grad: GradMode::NoGrad,
            generate: Some(g),
            ..RunSpec::default()
        }
    }

    fn text(t: &str) -> GenerateSpec {
        GenerateSpec { prompt_text: Some(t.into()), ..GenerateSpec::default() }
    }

    #[test]
    fn a_text_prompt_sets_the_prompt_length_and_is_refused_where_it_cannot_apply() {
        let trained = crate::decoder::TRAINED_PRESET;
        let ok = on(trained, text("def forward(self, x):"));
        ok.check(&crate::Catalog::built_in(), &Limits::default()).unwrap();
        assert_eq!(ok.resolved_input_size(), 1 + 21);
        // Each refusal names its field.
        let field = |s: RunSpec| s.check(&crate::Catalog::built_in(), &Limits::default()).unwrap_err().field;
        assert_eq!(field(on(trained, text(""))), "generate.prompt_text");
        assert_eq!(field(on(trained, text(&"x".repeat(MAX_PROMPT_TEXT_BYTES as usize + 1)))), "generate.prompt_text");
        // The cap counts UTF-8 bytes, not characters: 97 × "é" is 194 bytes.
        assert_eq!(field(on(trained, text(&"é".repeat(97)))), "generate.prompt_text");
        assert_eq!(field(on(crate::decoder::CPU_PRESET, text("hi"))), "generate.prompt_text");
        assert_eq!(field(RunSpec { input_size: Some(5), ..ok.clone() }), "input_size");
        assert_eq!(field(on(crate::decoder::CPU_PRESET, GenerateSpec { quality: true, ..GenerateSpec::default() })), "generate.quality");
        // The context bounds a text prompt too.
        let long = on(trained, GenerateSpec { new_tokens: 250, ..text("def forward(self, x):") });
        assert_eq!(field(long), "generate.new_tokens");
    }

    #[test]
    fn invalid_utf8_in_a_json_prompt_is_an_error_at_that_field() {
        let body = br#"{"model": "torch_bytes", "generate": {"prompt_text": "\ud800"}}"#;
        let mut de = serde_json::Deserializer::from_slice(body);
        let e = serde_path_to_error::deserialize::<_, RunSpec>(&mut de).unwrap_err();
        assert_eq!(e.path().to_string(), "generate.prompt_text", "{e}");
        let raw = b"{\"model\": \"torch_bytes\", \"generate\": {\"prompt_text\": \"\xff\"}}";
        let mut de = serde_json::Deserializer::from_slice(raw);
        let e = serde_path_to_error::deserialize::<_, RunSpec>(&mut de).unwrap_err();
        assert_eq!(e.path().to_string(), "generate.prompt_text", "{e}");
    }

    #[test]
    fn byte_ids_read_as_text_without_the_special_ids() {
        let ids: Vec<i64> = [256].into_iter().chain("def f(x):\n é".bytes().map(i64::from)).chain([257, 258]).collect();
        assert_eq!(bytes_text(&ids), "def f(x):\n é");
        // A cut multi-byte character shows U+FFFD.
        assert_eq!(bytes_text(&[0xc3]), "\u{fffd}");
    }
}
