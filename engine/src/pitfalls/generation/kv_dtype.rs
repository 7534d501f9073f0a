//! The generation card about the KV cache's dtype (`kv-dtype`): the same fp32-weights
//! generation with its cache stored in fp32, bf16 and fp16 (and fp8 e4m3 on a GPU that has
//! it), each run's cache, weights and peak, and the drift a narrower cache leaves.

use protocol::{ChartKind, KvDtype, RunFailure, RunSpec, Table, WeightsDtype};

use super::super::kit::{bytes_compared, fig, mib, series, Ctx, Decision, Outcome};
use super::super::{ratio, Card, Needs, Said, SAME_BYTES};
use super::quantized::{weights_split, with};
use super::{decoder, gen_spec, generate, held_positions, setup, shape};
use crate::lab::Lab;
use crate::pitfalls::figures::{KV_CACHE_MIB, WEIGHTS_MIB};
use crate::pitfalls::kit::FigureName;
use protocol::Unit;

// The figures this file's cards report, each defined once (see `kit::figure`).
pub const BF16_CACHE_KV_CACHE: FigureName = FigureName::new("bf16 cache: KV cache", Unit::Bytes);
pub const FP16_CACHE_KV_CACHE: FigureName = FigureName::new("fp16 cache: KV cache", Unit::Bytes);
pub const FP32_CACHE_WEIGHTS: FigureName = FigureName::new("fp32 cache: weights", Unit::Bytes);
pub const BF16_CACHE_WEIGHTS: FigureName = FigureName::new("bf16 cache: weights", Unit::Bytes);
pub const BF16_CACHE_PEAK_ALLOCATED: FigureName = FigureName::new("bf16 cache: peak allocated", Unit::Bytes);
pub const FP16_CACHE_PEAK_ALLOCATED: FigureName = FigureName::new("fp16 cache: peak allocated", Unit::Bytes);
pub const FP32_CACHE_PEAK_ALLOCATED: FigureName = FigureName::new("fp32 cache: peak allocated", Unit::Bytes);
pub const FP32_CACHE_KV_CACHE: FigureName = FigureName::new("fp32 cache: KV cache", Unit::Bytes);
pub const FP16_CACHE_WEIGHTS: FigureName = FigureName::new("fp16 cache: weights", Unit::Bytes);
pub const FP8_E4M3_CACHE_KV_CACHE: FigureName = FigureName::new("fp8 e4m3 cache: KV cache", Unit::Bytes);

/// The rules, as pure functions of the figures.
pub mod rules {
    /// `kv-dtype`: each 16-bit cache holds exactly half the 32-bit cache's bytes while the
    /// weights stay the same to the byte.
    pub fn the_cache_halves_not_the_weights(full_kv: u64, half_kv: &[u64], full_weights: u64, weights: &[u64]) -> bool {
        full_kv > 0 && half_kv.iter().all(|&k| 2 * k == full_kv) && weights.iter().all(|&w| w == full_weights)
    }

    /// `kv-dtype`: each 16-bit cache's peak differs from the fp32 cache's by less than the
    /// fp32 cache's own bytes (beyond `slack`, the allocator's rounding): the cache is all
    /// that changed (its bytes, and the copy of a layer cast back to fp32 for attention).
    pub fn the_peak_moves_less_than_the_cache(full_peak: u64, peaks: &[u64], full_kv: u64, slack: u64) -> bool {
        peaks.iter().all(|&p| p.abs_diff(full_peak) <= full_kv + slack)
    }
}

/// What kv-dtype runs: the fp32 generation (each row changes only the cache's dtype).
fn kv_dtype_plan(ctx: &Ctx) -> RunSpec {
    let model = decoder(ctx, protocol::decoder::CPU_PRESET, "llama_3_2_1b");
    let (prompt, n) = if ctx.cuda() { (512, 32) } else { (32, 16) };
    let base = gen_spec(ctx, model, 1, prompt, n, protocol::KvCacheKind::Dynamic, protocol::GradMode::InferenceMode);
    with(base, WeightsDtype::Fp32, |_| {})
}

pub const KV_DTYPE: Card = Card {
    id: "kv-dtype",
    title: "A 16-bit KV cache halves the cache, not the model",
    asks: "What does storing the KV cache in 16 bits, under fp32 weights, do to the cache's bytes and to the run's peak memory?",
    labels: ["the KV cache stored in fewer bits", "the KV cache's bytes computed from the config, against the rest"],
    setup: kv_dtype_setup,
    needs: Needs::Any,
    claim: "Storing the KV cache in bf16 or fp16 under fp32 weights halves the cache's bytes exactly and leaves the weights as they were, so the run's peak moves by less than the fp32 cache's own bytes (each step also casts the layer it attends to back to fp32). Where the weights dominate memory, as on this setup, the peak stays within 1%; a 16-bit cache pays off where the cache is the large part: long contexts, large batches.",
    statements: &[
        Said::torch("bf16 and fp16 take two bytes an element, fp32 four, fp8 e4m3 one.", "test_quant_attention.py::test_bytes_per_element"),
        Said::run("The bf16 and the fp16 cache each held exactly half the fp32 cache's bytes: the cache holds 2 × layers × KV heads × head_dim × positions × batch elements, and only the bytes per element changed.", &[BF16_CACHE_KV_CACHE, FP16_CACHE_KV_CACHE, FP32_CACHE_KV_CACHE]),
        Said::run("The weights held the same bytes in every run.", &[FP32_CACHE_WEIGHTS, BF16_CACHE_WEIGHTS, FP16_CACHE_WEIGHTS]),
        Said::torch("Attention takes its query, keys and values in one dtype, so every step casts the 16-bit cache it attends to back to the activations' fp32.", "test_quant_attention.py::test_attention_takes_one_dtype"),
        Said::run("The run's peak moved by less than the fp32 cache's own bytes.", &[BF16_CACHE_PEAK_ALLOCATED, FP16_CACHE_PEAK_ALLOCATED, FP32_CACHE_PEAK_ALLOCATED, FP32_CACHE_KV_CACHE]),
        Said::run("Here the fp32 cache was under 1% of the run's peak, so the peak with a bf16 cache stayed within 1% of the fp32 cache's.", &[BF16_CACHE_PEAK_ALLOCATED, FP32_CACHE_PEAK_ALLOCATED, FP32_CACHE_KV_CACHE]),
    ],
    source: "https://huggingface.co/docs/transformers/kv_cache",
    pitfall: "model = model.float()\ncache = [(k.to(torch.bfloat16), v.to(torch.bfloat16)) for k, v in cache]",
    fix: "kv_bytes = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * context * batch * cache_dtype_bytes\nshare = kv_bytes / (weights_bytes + kv_bytes + activations_bytes)",
    threshold: "confirmed when, with fp32 weights on the same prompt and tokens, the bf16 and fp16 caches each hold exactly half the fp32 cache's bytes (each equal to the formula), and on a GPU with fp8 (compute capability 8.9+) an fp8 e4m3 cache exactly a quarter, while the weights are the same to the byte and each 16-bit run's peak differs from the fp32 run's by less than the fp32 cache's bytes (on CUDA, beyond the allocator's rounding); where the fp32 cache is under 1% of the peak, the bf16 run's peak must also be within 1% of the fp32 run's, the band the question is graded by. The drift from the fp32 cache (max |Δ logit| at the prefill, greedy agreement) is reported beside them. Regime: any device; bytes repeat exactly",
    question: ratio("The setup's decoder with fp32 weights, same prompt and tokens: the peak allocated memory of the run with a bf16 KV cache, against the run with an fp32 cache?", BF16_CACHE_PEAK_ALLOCATED, FP32_CACHE_PEAK_ALLOCATED, SAME_BYTES),
    experiment: kv_dtype,
};

fn kv_dtype_setup(ctx: &Ctx) -> Vec<String> {
    let base = kv_dtype_plan(ctx);
    let mut lines = vec![format!("{}, fp32 weights", setup(&base)), shape(base.model)];
    let positions = held_positions(&base);
    let cache = |kv: KvDtype| {
        let spec = with(base.clone(), WeightsDtype::Fp32, |g| g.kv_dtype = kv);
        let (name, elt) = super::cache_dtype(&spec);
        let bytes = spec.model.decoder().map_or(0, |d| d.config.kv_cache_bytes(positions, spec.batch as u64, elt));
        format!("{name} ({elt} B per element): {}", protocol::format_bytes(bytes))
    };
    lines.push(format!(
        "Runs: the cache in {}, {} and {}; on a GPU with fp8 (compute capability 8.9 or later) also {} — by the formula, after the last token ({positions} positions)",
        cache(KvDtype::AsActivations),
        cache(KvDtype::Bf16),
        cache(KvDtype::Fp16),
        cache(KvDtype::Fp8E4m3),
    ));
    lines.push(format!("inference_mode, greedy decoding; the fp32 weights: {}", weights_split(&base)));
    lines.push("Measured: each run's KV cache from its tensors, its weights, and its peak allocated memory (weights, cache and activations together)".into());
    lines
}

fn kv_dtype(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let base = kv_dtype_plan(ctx);
    let mut rows = vec![];
    let mut cells: Vec<(&str, u64, u64, u64)> = vec![];
    let mut exact = true;
    let mut drifts = vec![];
    let fp8 = ctx.cuda() && lab.machine().compute_capability().is_some_and(|cc| cc >= 89);
    let mut variants = vec![("fp32", KvDtype::AsActivations), ("bf16", KvDtype::Bf16), ("fp16", KvDtype::Fp16)];
    if fp8 {
        variants.push(("fp8 e4m3", KvDtype::Fp8E4m3));
    }
    for (name, kv) in variants {
        ctx.check()?;
        let (report, g) = generate(lab, ctx, with(base.clone(), WeightsDtype::Fp32, |s| s.kv_dtype = kv))?;
        exact &= g.kv_cache_bytes == g.kv_cache_formula_bytes;
        let drift = g.drift.as_ref().map_or("—".to_string(), |d| {
            format!("max |Δ logit| {:.2e}, {:.0}% of greedy tokens agree", d.max_abs_logit_delta, 100.0 * d.greedy_agreement)
        });
        if let Some(d) = &g.drift {
            drifts.push(format!("{name} cache: max |Δ logit| {:.2e} against logits up to {:.2}, {:.0}% of greedy tokens agree", d.max_abs_logit_delta, d.max_abs_logit, 100.0 * d.greedy_agreement));
        }
        // The weights held (every parameter), not `weights_bytes`, which counts what a decode
        // step reads (one embedding row, not the table).
        let held = g.weights_breakdown.map_or(g.weights_bytes, |w| w.linear_bytes + w.other_bytes);
        rows.push(vec![
            format!("{name} cache"),
            protocol::format_bytes(g.kv_cache_bytes),
            protocol::format_bytes(held),
            protocol::format_bytes(report.memory.peak_allocated_bytes),
            drift,
        ]);
        cells.push((name, g.kv_cache_bytes, held, report.memory.peak_allocated_bytes));
    }
    let (full_kv, full_w, full_peak) = (cells[0].1, cells[0].2, cells[0].3);
    let halves: Vec<u64> = cells[1..3].iter().map(|c| c.1).collect();
    let weights: Vec<u64> = cells[1..].iter().map(|c| c.2).collect();
    let peaks: Vec<u64> = cells[1..3].iter().map(|c| c.3).collect();
    // fp8: one byte, a quarter of fp32's.
    let quarter = cells.get(3).is_none_or(|c| 4 * c.1 == full_kv);
    let slack = super::rules::peak_rounding(ctx.device);
    // The question's comparison, in the words of the rule that grades it.
    let (band, peak_words) = bytes_compared(cells[1].3 as f64, full_peak as f64);
    let small_cache = (full_kv as f64) < protocol::SAME_BYTES_WITHIN * full_peak as f64;
    let holds = exact
        && quarter
        && rules::the_cache_halves_not_the_weights(full_kv, &halves, full_w, &weights)
        && rules::the_peak_moves_less_than_the_cache(full_peak, &peaks, full_kv, slack)
        && (!small_cache || band == protocol::Choice::Same);
    let reason = format!(
        "the fp32 cache held {}, bf16 {} and fp16 {}; the weights {} in every run; the fp32 cache was {:.2}% of the fp32 run's peak, and the peak with a bf16 cache against the fp32 cache's: {peak_words}",
        protocol::format_bytes(full_kv),
        protocol::format_bytes(cells[1].1),
        protocol::format_bytes(cells[2].1),
        protocol::format_bytes(full_w),
        100.0 * full_kv as f64 / full_peak.max(1) as f64,
    );
    let mut notes = drifts;
    if let Some(c) = cells.get(3) {
        notes.push(format!("The fp8 e4m3 cache (one byte, a scale per layer's keys and values set by the prefill) held {}: a quarter of fp32's.", protocol::format_bytes(c.1)));
    } else {
        notes.push("An fp8 e4m3 cache (one byte per element) halves a 16-bit cache again; it needs a CUDA device with fp8 (compute capability 8.9 or later), so it is not measured here.".into());
    }
    let decision = Decision::rule(holds, format!("{reason}: only the cache halved."), format!("{reason}."));
    let x: Vec<String> = cells.iter().map(|c| format!("{} cache", c.0)).collect();
    Ok(Outcome::new(decision, format!("{}, fp32 weights", setup(&base)), ChartKind::Bar)
        .figures(vec![
            fig(FP32_CACHE_KV_CACHE, full_kv as f64),
            fig(BF16_CACHE_KV_CACHE, cells[1].1 as f64),
            fig(FP16_CACHE_KV_CACHE, cells[2].1 as f64),
            fig(FP32_CACHE_WEIGHTS, full_w as f64),
            fig(BF16_CACHE_WEIGHTS, cells[1].2 as f64),
            fig(FP16_CACHE_WEIGHTS, cells[2].2 as f64),
            fig(FP32_CACHE_PEAK_ALLOCATED, full_peak as f64),
            fig(BF16_CACHE_PEAK_ALLOCATED, cells[1].3 as f64),
            fig(FP16_CACHE_PEAK_ALLOCATED, cells[2].3 as f64),
        ]
        .into_iter()
        .chain(cells.get(3).map(|c| fig(FP8_E4M3_CACHE_KV_CACHE, c.1 as f64)))
        .collect())
        .series(vec![
            series(KV_CACHE_MIB, x.clone(), cells.iter().map(|c| mib(c.1)).collect()),
            series(WEIGHTS_MIB, x, cells.iter().map(|c| mib(c.2)).collect()),
        ])
        .table(Table { columns: vec!["cache".into(), "KV cache".into(), "weights".into(), "peak allocated".into(), "drift from the fp32 cache".into()], rows })
        .notes(notes))
}

#[cfg(test)]
mod tests {
    use super::rules::*;

    #[test]
    fn a_half_cache_halves_exactly() {
        assert!(the_cache_halves_not_the_weights(1024, &[512, 512], 9, &[9, 9]));
        assert!(!the_cache_halves_not_the_weights(1024, &[513, 512], 9, &[9, 9]));
        assert!(!the_cache_halves_not_the_weights(1024, &[512, 512], 9, &[9, 10]));
        assert!(!the_cache_halves_not_the_weights(0, &[0], 9, &[9]));
    }

    #[test]
    fn the_peak_may_move_by_less_than_the_cache() {
        // Half the cache saved, a layer's fp32 copy added back: well inside the cache.
        assert!(the_peak_moves_less_than_the_cache(10_000, &[9_700, 9_700], 1_000, 0));
        // A copy of a layer larger than the saving raises the peak, still by less.
        assert!(the_peak_moves_less_than_the_cache(10_000, &[10_400], 1_000, 0));
        // Moved by more than the whole cache: something else changed.
        assert!(!the_peak_moves_less_than_the_cache(10_000, &[8_000], 1_000, 0));
        assert!(the_peak_moves_less_than_the_cache(10_000, &[8_000], 1_000, 1_000));
    }
}
