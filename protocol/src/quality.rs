//! A model's quality, measured on text it never saw ([`Quality`]): bits per byte of the
//! trained model's held-out slice, or of the operator's text for a model with a tokenizer,
//! under each setting a generation can change, beside baselines computed on the same bytes. Bits per byte is what torchao and gpt-fast judge a
//! quantization by (as perplexity); for a byte-level model it needs no tokenizer to compare.

use serde::{Deserialize, Serialize};

use crate::{KvDtype, WeightQuant, WeightsDtype};

/// One setting's bits per byte.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QualityRow {
    /// The setting as the Generate page says it ("fp32", "int4, groups of 32").
    pub setting: String,
    pub weights: WeightsDtype,
    pub quant: WeightQuant,
    /// int4's group size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_size: Option<u32>,
    pub kv_dtype: KvDtype,
    /// Σ −log₂ p(unit) over the text (bytes, or a tokenizer's tokens), divided by its
    /// bytes (summed in float64): comparable across tokenizers.
    pub bits_per_byte: f64,
    /// For a tokenized model: exp of the mean negative log-likelihood per token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub perplexity: Option<f64>,
    /// Quantized rows: the slice's passes multiply the quantized values, dequantized, by
    /// a dense matmul (the packed kernels are built for decode's few rows and take tens of
    /// times longer on a long slice); this is the largest |Δ logit| between that and the
    /// packed kernels on the slice's first chunk, measured in the same run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_max_abs_logit_delta: Option<f64>,
    /// Wall time of this row's evaluation, model build included.
    pub seconds: f64,
    /// Whether this row's setting is the run's own.
    pub this_run: bool,
}

/// What a generation's quality measurement will score (`GET /api/quality-plan`), asked by
/// the Generate page when the measurement is switched on, so that its time is shown before
/// it runs: the settings (rows) and the units of the text each one scores.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QualityPlan {
    /// The settings measured, one pass over the text each (the rows the table will have).
    pub settings: u32,
    /// The units each setting scores: the text's tokens (bytes for a byte-level model).
    pub tokens: u64,
    /// The text as the report names it (its file and SHA-256, or the trained model's
    /// held-out slice).
    pub text: String,
    pub text_bytes: u64,
}

impl QualityPlan {
    /// Its time at `tokens_per_s`, a prefill rate the run measured: every setting scores
    /// every unit once. An estimate, not a measurement: the passes run chunks of up to
    /// 1,024 units, each row builds its model first, and quantized rows run other kernels.
    pub fn estimate_ms(&self, tokens_per_s: f64) -> Option<f64> {
        (tokens_per_s.is_finite() && tokens_per_s > 0.0).then(|| 1000.0 * self.settings as f64 * self.tokens as f64 / tokens_per_s)
    }
}

/// The quality block of a generation ([`crate::GenerationReport::quality`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Quality {
    /// What the held-out text is ("64 KiB of torch/fx, PyTorch 2.11.0's source").
    pub text: String,
    pub bytes: u64,
    /// SHA-256 of the held-out bytes, as the model's manifest lists it.
    pub sha256: String,
    /// How the bytes are scored: chunks of the model's context, each fed as [BOS] + chunk
    /// minus its last byte, every byte scored once.
    pub method: String,
    pub rows: Vec<QualityRow>,
    /// DEFLATE at level 9 in a gzip stream (`gzip -9`'s format and level), in bits per byte.
    pub gzip_bits_per_byte: f64,
    /// The cross-entropy of the text under the trained model's training byte frequencies
    /// (add-one smoothing), in bits per byte: on its held-out slice only (absent for an
    /// operator's text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unigram_bits_per_byte: Option<f64>,
    /// For a tokenized model: the tokens its tokenizer made of the text (each scored once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Why some settings a page offers are not rows here (fp8 KV off CUDA).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_measured: Vec<String>,
}

impl Quality {
    /// The row of the model as it is: fp32 weights, no quantization, the cache as the
    /// activations.
    pub fn baseline(&self) -> Option<&QualityRow> {
        self.rows.iter().find(|r| r.weights == WeightsDtype::Fp32 && r.quant.is_none() && r.kv_dtype == KvDtype::AsActivations)
    }

    /// The run's own row.
    pub fn this_run(&self) -> Option<&QualityRow> {
        self.rows.iter().find(|r| r.this_run)
    }
}
