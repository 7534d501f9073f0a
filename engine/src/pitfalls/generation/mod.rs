//! The generation cards: what a team serving decoder LLMs gets wrong, each decided by a
//! live generate run on a decoder (the CPU preset on a CPU, the Llama-3.2-1B shape on a
//! GPU). Every rule is a pure function of the measured figures ([`rules`]), tested against
//! CPU-like and CUDA-like figures; the experiments gather those figures: `memory` (what the
//! cache and the graph hold), `speed` (what the steps cost), the settings LLM teams choose
//! today, one file each: `quantized` (quantized weights and their kernels), `kv_dtype` (the
//! cache's dtype), `overflow` (fp16's range), `attention` (the attention kernel), `quality`
//! (int4 on a trained model), and `families` (the decoder families teams serve now: a sliding
//! window's cache, a mixture of experts' memory and reads), one card family each.

pub mod attention;
pub mod families;
pub mod kv_dtype;
pub mod memory;
pub mod overflow;
pub mod quality;
pub mod quantized;
pub mod speed;

pub use families::{MOE_BATCH_READS, MOE_MEMORY, SLIDING_WINDOW_KV};
pub use quality::INT4_ON_A_TRAINED_MODEL;
pub use memory::{GENERATE_NO_GRAD, GQA, INFERENCE_TENSOR_CACHE, KV_CACHE_SIZE, LEFT_PADDED_BATCH, STATIC_CACHE};
pub use attention::SDPA_BACKEND;
pub use kv_dtype::KV_DTYPE;
pub use overflow::FP16_AND_BF16_RANGE;
pub use quantized::{INT8_DECODE_SPEED, INT4_AND_THE_KV_CACHE};
pub use speed::{AUTOCAST_DECODE, DECODER_TABLE, DECODE_BATCH, PREFILL_VS_DECODE, USE_CACHE_OFF};

use protocol::{GenPhase, GenerateSpec, GenerationReport, GradMode, KvCacheKind, KvDtype, ModelId, Report, RunFailure, RunSpec};

use super::kit::{measure, Ctx};
use crate::lab::Lab;
use crate::torch_call::failure;

/// The card's decoder: the CPU preset, or a 1B shape on a GPU.
fn decoder(ctx: &Ctx, cpu: &str, cuda: &str) -> ModelId {
    let name = if ctx.cuda() { cuda } else { cpu };
    ctx.model(name.parse().unwrap_or(ModelId::TinyMlp))
}

fn gen_spec(ctx: &Ctx, model: ModelId, batch: u32, prompt: u32, new_tokens: u32, cache: KvCacheKind, grad: GradMode) -> RunSpec {
    RunSpec {
        input_size: Some(prompt),
        generate: Some(GenerateSpec { new_tokens, cache, ..Default::default() }),
        ..ctx.spec(model, batch, true, grad)
    }
}

/// One generation, measured as the Generate page measures it.
fn generate(lab: &mut Lab, ctx: &Ctx, spec: RunSpec) -> Result<(Report, GenerationReport), RunFailure> {
    let report = measure(lab, ctx, spec)?;
    let g = report
        .generation
        .clone()
        .ok_or_else(|| failure(protocol::FailureKind::Internal, "a generate run without its generation"))?;
    Ok((report, g))
}

/// "Tiny Llama ..., batch 1, prompt 32 + 24 new tokens, dynamic cache".
fn setup(spec: &RunSpec) -> String {
    let g = spec.generate.clone().unwrap_or_default();
    format!(
        "{}, batch {}, prompt {} + {} new tokens, {} cache",
        spec.model.display_name(),
        spec.batch,
        spec.resolved_input_size(),
        g.new_tokens,
        g.cache.as_str()
    )
}

/// The same generation with another cache.
fn with_cache(spec: &RunSpec, cache: KvCacheKind) -> RunSpec {
    let mut s = spec.clone();
    if let Some(g) = s.generate.as_mut() {
        g.cache = cache;
    }
    s
}

/// "Tiny Llama ...: 4 layers, 8 query heads, 2 KV heads, head_dim 32, hidden size 256,
/// MLP 704, vocabulary 8192": the decoder's shape, read from its config.
fn shape(model: ModelId) -> String {
    match model.decoder() {
        Some(d) => {
            let c = &d.config;
            format!(
                "{}: {} layers, {} query heads, {} KV heads, head_dim {}, hidden size {}, MLP {}, vocabulary {}, {:.2} M parameters",
                model.display_name(),
                c.num_hidden_layers,
                c.num_attention_heads,
                c.num_key_value_heads,
                c.head_dim,
                c.hidden_size,
                c.intermediate_size,
                c.vocab_size,
                c.parameters() as f64 / 1e6
            )
        }
        None => format!("{}: not a decoder", model.display_name()),
    }
}

/// The weights' dtype of a spec and its bytes per element: "fp32", 4.
fn weights_dtype(spec: &RunSpec) -> (&'static str, u64) {
    let e = spec.advanced.weights.element();
    (e.name(), e.bytes())
}

/// The KV cache's dtype of a spec and its bytes per element: the activations' unless the
/// spec stores the cache in another.
fn cache_dtype(spec: &RunSpec) -> (&'static str, u64) {
    let kv = spec.generate.as_ref().map_or(KvDtype::AsActivations, |g| g.kv_dtype);
    let e = kv.element(spec.advanced.weights);
    (e.name(), e.bytes())
}

/// Positions a generation's cache holds per sequence after its last step: the prompt and
/// every new token but the last (whose keys and values are never computed).
fn held_positions(spec: &RunSpec) -> u64 {
    let g = spec.generate.clone().unwrap_or_default();
    (spec.resolved_input_size() + g.new_tokens).saturating_sub(1) as u64
}

/// "fp32 weights and KV cache (4 bytes per element)": what a generate spec stores.
fn dtypes(spec: &RunSpec) -> String {
    let (w, wb) = weights_dtype(spec);
    let (c, cb) = cache_dtype(spec);
    if w == c {
        format!("{w} weights and KV cache ({wb} bytes per element)")
    } else {
        format!("{w} weights ({wb} bytes per element), {c} KV cache ({cb} bytes per element)")
    }
}

fn decode_ms(g: &GenerationReport) -> Vec<f64> {
    g.steps.iter().filter(|s| s.phase == GenPhase::Decode).map(|s| s.latency_ms).collect()
}

fn positions(g: &GenerationReport) -> Vec<String> {
    g.steps.iter().map(|s| s.position.to_string()).collect()
}

/// The rules, as pure functions of the figures.
pub mod rules {
    /// Spearman's rank correlation of `ys` against their order.
    pub fn rank_correlation(ys: &[f64]) -> f64 {
        let n = ys.len();
        if n < 3 {
            return 0.0;
        }
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| ys[a].total_cmp(&ys[b]));
        let mut rank = vec![0.0; n];
        for (r, &i) in order.iter().enumerate() {
            rank[i] = r as f64;
        }
        let mean = (n as f64 - 1.0) / 2.0;
        let (mut num, mut dx, mut dy) = (0.0, 0.0, 0.0);
        for (i, r) in rank.iter().enumerate() {
            let (a, b) = (i as f64 - mean, r - mean);
            num += a * b;
            dx += a * a;
            dy += b * b;
        }
        num / (dx * dy).sqrt()
    }

    pub fn median(v: &[f64]) -> f64 {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        if v.is_empty() {
            0.0
        } else {
            v[v.len() / 2]
        }
    }

    /// `generate-no-grad`: with grad the graph's bytes (allocated beyond the weights, the
    /// prompt, the cache and the tokens) rise at every step and by more per step in the
    /// second half than in the first (superlinear), while no_grad holds none beyond
    /// `slack` (allocator rounding on CUDA), and both return to the baseline.
    pub fn graph_grows(grad_graph: &[u64], no_grad_graph: &[u64], grad_leaked: u64, slack: u64) -> bool {
        if grad_graph.len() < 4 {
            return false;
        }
        let rises = grad_graph.windows(2).all(|w| w[1] > w[0]);
        let inc: Vec<u64> = grad_graph.windows(2).map(|w| w[1] - w[0]).collect();
        let half = inc.len() / 2;
        let first: u64 = inc[..half].iter().sum();
        let second: u64 = inc[inc.len() - half..].iter().sum();
        rises && second > first && no_grad_graph.iter().all(|&g| g <= slack) && grad_leaked == 0
    }

    /// `use-cache-off`: without the cache the decode steps' time rises with the position
    /// (rank correlation above 0.5), its last steps take more than twice the cached ones',
    /// the tokens are the same and it holds less memory after the last step.
    pub fn recompute_costs(off_ms: &[f64], cached_ms: &[f64], same_tokens: bool, off_held: u64, cached_held: u64) -> (bool, f64, f64) {
        let rho = rank_correlation(off_ms);
        let tail = 8.min(off_ms.len()).min(cached_ms.len()).max(1);
        let ratio = median(&off_ms[off_ms.len().saturating_sub(tail)..])
            / median(&cached_ms[cached_ms.len().saturating_sub(tail)..]).max(1e-9);
        (rho > 0.5 && ratio > 2.0 && same_tokens && off_held < cached_held, rho, ratio)
    }

    /// How far two peaks of the same tensors may differ on `device` by its allocator's
    /// rounding alone: 0 on the CPU (its counter sees the bytes asked for); on CUDA one
    /// unsplit tail (under [`crate::device::CUDA_LARGE_TAIL_BYTES`]) for each of the
    /// [`LAYER_LARGE_TEMPORARIES`] largest temporaries a layer holds at its peak.
    pub fn peak_rounding(device: protocol::DeviceKind) -> u64 {
        match device {
            protocol::DeviceKind::Cpu => 0,
            protocol::DeviceKind::Cuda => LAYER_LARGE_TEMPORARIES * crate::device::CUDA_LARGE_TAIL_BYTES,
        }
    }

    /// The MLP's gate, up and product and the hidden state: a layer's large temporaries.
    pub const LAYER_LARGE_TEMPORARIES: u64 = 4;

    /// `decode-batch`: total tokens/s at the largest batch is at least `min_gain` times
    /// batch 1's while the per-token latency grows by less than `max_slowdown` times.
    pub fn batching_pays(tokens_per_s: &[f64], per_token_ms: &[f64], batches: &[u32], min_gain: f64, max_slowdown: f64) -> bool {
        let (Some(t0), Some(tn), Some(l0), Some(ln)) = (tokens_per_s.first(), tokens_per_s.last(), per_token_ms.first(), per_token_ms.last()) else {
            return false;
        };
        let growth = *batches.last().unwrap_or(&1) as f64 / *batches.first().unwrap_or(&1) as f64;
        growth > 1.0 && tn / t0 >= min_gain && ln / l0 < max_slowdown
    }

    /// The batch after which total tokens/s gains less than 20%, if the sweep reached one.
    pub fn knee(batches: &[u32], tokens_per_s: &[f64]) -> Option<u32> {
        tokens_per_s
            .windows(2)
            .position(|w| w[1] < 1.2 * w[0])
            .map(|i| batches[i])
    }

    /// `prefill-vs-decode`: prefill computes at several times decode's FLOP/s, and decode's
    /// arithmetic intensity is low (under 4 FLOPs per byte read).
    pub fn phases_differ(prefill_tflops: f64, decode_tflops: f64, decode_intensity: f64) -> bool {
        prefill_tflops > 4.0 * decode_tflops && decode_intensity < 4.0
    }
}

#[cfg(test)]
mod tests {
    use super::rules::*;

    #[test]
    fn the_graph_rule_wants_superlinear_growth_and_a_clean_no_grad() {
        // CPU-like: exact counts, growth per step rising.
        let grad: Vec<u64> = (0..10).map(|t| 1000 * t + 10 * t * t).collect();
        assert!(graph_grows(&grad, &[0; 10], 0, 64 << 10));
        // Linear growth only (no attention saving the cache): refuted.
        let linear: Vec<u64> = (0..10).map(|t| 1000 * t + 5).collect();
        assert!(!graph_grows(&linear, &[0; 10], 0, 64 << 10));
        // CUDA-like: no_grad shows block rounding under the slack; a leak refutes.
        assert!(graph_grows(&grad, &[512; 10], 0, 64 << 10));
        assert!(!graph_grows(&grad, &[0; 10], 4096, 64 << 10));
        assert!(!graph_grows(&grad, &[1 << 20; 10], 0, 64 << 10));
    }

    #[test]
    fn the_recompute_rule_wants_rising_steps_and_a_clear_gap() {
        let off: Vec<f64> = (0..32).map(|i| 1.0 + i as f64 * 0.2).collect();
        let cached = vec![0.5; 32];
        let (ok, rho, ratio) = recompute_costs(&off, &cached, true, 10, 20);
        assert!(ok && rho > 0.99 && ratio > 10.0);
        assert!(!recompute_costs(&off, &cached, false, 10, 20).0, "different tokens");
        let flat = vec![1.0; 32];
        assert!(!recompute_costs(&flat, &cached, true, 10, 20).0, "no rise");
    }

    #[test]
    fn the_batch_rule_and_its_knee() {
        let batches = [1, 2, 4, 8];
        // CPU-like: dispatch-bound, nearly free batching.
        assert!(batching_pays(&[100.0, 195.0, 380.0, 700.0], &[10.0, 10.2, 10.5, 11.4], &batches, 2.0, 3.0));
        assert_eq!(knee(&batches, &[100.0, 195.0, 380.0, 700.0]), None);
        // CUDA-like past the knee: throughput flattens at 16.
        assert_eq!(knee(&[1, 4, 16, 64], &[50.0, 195.0, 700.0, 760.0]), Some(16));
        // Compute-bound from the start: per-token latency grows with the batch.
        assert!(!batching_pays(&[100.0, 110.0, 120.0, 130.0], &[10.0, 18.0, 33.0, 61.0], &batches, 2.0, 3.0));
    }

    #[test]
    fn the_phase_rule() {
        assert!(phases_differ(0.5, 0.01, 0.5));
        assert!(!phases_differ(0.5, 0.4, 0.5));
        assert!(!phases_differ(0.5, 0.01, 50.0));
    }

    #[test]
    fn rank_correlation_reads_order() {
        assert!((rank_correlation(&[1.0, 2.0, 3.0, 4.0]) - 1.0).abs() < 1e-12);
        assert!((rank_correlation(&[4.0, 3.0, 2.0, 1.0]) + 1.0).abs() < 1e-12);
    }
}
