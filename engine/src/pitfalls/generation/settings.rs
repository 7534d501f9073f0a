//! The generation cards about the settings LLM teams choose today: weight-only int8 and
//! int4 (`quantized-weights-not-kv`, `int8-speed-depends`), the KV cache's dtype
//! (`kv-dtype`), fp16's range (`fp16-overflow`) and which attention kernel ran
//! (`sdpa-backend`). The first three measure generate runs as the Generate page does; the
//! last two measure passes of their own: one untimed forward pass per dtype read by a
//! values probe, and scaled_dot_product_attention on a long prompt's tensors.

use protocol::{
    ChartKind, GenerateSpec, GenerationReport, KvDtype, RunFailure, RunSpec, SdpBackend, Table, WeightQuant,
    WeightsDtype,
};
use tch::{Kind, Tensor};

use super::super::kit::{fig, interval_figures, mib, series, time_passes, Ctx, Decision, Outcome, Shift};
use super::super::{ratio, value, Ask, Card, Needs, SAME_BYTES, SAME_TIME};
use super::{decode_ms, decoder, gen_spec, generate, held_positions, setup, shape};
use crate::lab::Lab;
use crate::models::decoder::{KvCache, Logits};
use crate::models::Model;
use crate::torch_call::{catch_torch, failure, synchronize, tch_device, torch_failure};
use crate::torch_ext::{sdp_choice, SdpFlags, SdpFlagsGuard};
use crate::trace::{Probe, ValuePoint};

/// The rules, as pure functions of the figures.
pub mod rules {
    /// `quantized-weights-not-kv`: the int4 run's KV cache and its weights outside the
    /// linear layers equal the unquantized run's to the byte, while its linear layers take
    /// at most `max_share` of their unquantized bytes.
    pub fn only_the_linear_layers_shrink(plain: (u64, u64, u64), int4: (u64, u64, u64), max_share: f64) -> bool {
        let (plain_linear, plain_other, plain_kv) = plain;
        let (q_linear, q_other, q_kv) = int4;
        q_kv == plain_kv && q_other == plain_other && plain_linear > 0 && (q_linear as f64) <= max_share * plain_linear as f64
    }

    /// `kv-dtype`: each 16-bit cache holds exactly half the 32-bit cache's bytes while the
    /// weights stay the same to the byte.
    pub fn the_cache_halves_not_the_weights(full_kv: u64, half_kv: &[u64], full_weights: u64, weights: &[u64]) -> bool {
        full_kv > 0 && half_kv.iter().all(|&k| 2 * k == full_kv) && weights.iter().all(|&w| w == full_weights)
    }

    /// `fp16-overflow`: the fp32 pass reached past fp16's largest finite value (65504)
    /// with every value finite, fp16 produced non-finite values, and bf16 none.
    pub fn fp16_overflows_where_bf16_does_not(fp32_max: f64, fp32_non_finite: u64, fp16_non_finite: u64, bf16_non_finite: u64) -> bool {
        fp32_max > FP16_MAX && fp32_non_finite == 0 && fp16_non_finite > 0 && bf16_non_finite == 0
    }

    /// fp16's largest finite value.
    pub const FP16_MAX: f64 = 65504.0;

    /// `sdpa-backend`: the math kernel held at least the score matrix above its inputs
    /// (it materialises `[batch, heads, queries, keys]`), the default kernel under a
    /// quarter of it (tiled: no score matrix).
    pub fn math_materialises_the_scores(math_peak: u64, default_peak: u64, scores: u64) -> bool {
        math_peak >= scores && 4 * default_peak < scores
    }
}

/// The weights the cards decode with: fp32 on a CPU (its fast path), bf16 on a GPU (what a
/// team serves).
fn activations(ctx: &Ctx) -> WeightsDtype {
    if ctx.cuda() {
        WeightsDtype::Bf16
    } else {
        WeightsDtype::Fp32
    }
}

/// A generate spec with the decoder settings `f` makes.
fn with(mut spec: RunSpec, weights: WeightsDtype, f: impl FnOnce(&mut GenerateSpec)) -> RunSpec {
    spec.advanced.weights = weights;
    if let Some(g) = spec.generate.as_mut() {
        f(g);
    }
    spec
}

/// The report's split of the weights (linear layers, the rest) and its KV cache.
fn split(g: &GenerationReport) -> Result<(u64, u64, u64), RunFailure> {
    let w = g
        .weights_breakdown
        .as_ref()
        .ok_or_else(|| failure(protocol::FailureKind::Internal, "a generation without its weights split"))?;
    Ok((w.linear_bytes, w.other_bytes, g.kv_cache_bytes))
}

fn activations_at_peak(g: &GenerationReport) -> u64 {
    g.memory_peak.map_or(0, |m| m.activations_bytes)
}

/// Tokens (one sequence) at which a cache of `per_token` bytes passes `weights` bytes.
fn crossover(weights: u64, per_token: u64) -> u64 {
    weights / per_token.max(1)
}

pub const QUANTIZED_WEIGHTS_NOT_KV: Card = Card {
    id: "quantized-weights-not-kv",
    title: "int4 weights shrink the weights, not the KV cache",
    asks: "What does weight-only int4 quantization shrink: the weights, the KV cache, the activations?",
    labels: ["int4 weights, then a long generation", "int4 weights, the memory budget checked with the KV cache's formula"],
    setup: quantized_weights_not_kv_setup,
    needs: Needs::Any,
    claim: "Weight-only int4 cuts the linear layers' weights about 3.5× from bf16 (7× from fp32), while the KV cache and the activations stay exactly as they were: a long context that ran out of memory still runs out, a little later.",
    why: "Weight-only quantization packs the blocks' linear weights (half a byte each, with a scale and a zero per group) and dequantizes them inside the matmul. The keys and values the cache keeps are outputs of those matmuls, in the activation dtype, and the embeddings and the LM head stay as they were. The weights are paid once; the cache grows with every token of every sequence.",
    statements: &[],
    source: "https://github.com/pytorch/ao/tree/main/torchao/quantization",
    pitfall: "quantize_(model, int4_weight_only(group_size=64))\nout = model.generate(ids, max_new_tokens=32_000)",
    fix: "quantize_(model, int4_weight_only(group_size=64))\nhead_dim = cfg.hidden_size // cfg.num_attention_heads\nkv_bytes = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * context * batch * 2\nassert weight_bytes + kv_bytes + activations < budget",
    threshold: "confirmed when, on the same prompt and tokens, the int4 run's KV cache and its weights outside the linear layers (embeddings, norms, head) equal the unquantized run's to the byte while its linear layers take at most 0.35× their unquantized bytes (int4 with groups of 64: 0.28× of bf16, 0.14× of fp32, scales and zeros included). The position at which the cache passes the weights is computed from the formula, for this shape and the Llama-3.1-8B shape. Regime: any device; bytes repeat exactly",
    question: ratio("The setup's decoder, same prompt and tokens: the KV cache of the run with int4 linear weights, against the KV cache of the run with unquantized weights?", "int4: KV cache", "unquantized: KV cache", SAME_BYTES),
    experiment: quantized_weights_not_kv,
};

/// What quantized-weights-not-kv runs: the unquantized generation, then the int4 one.
fn quantized_weights_not_kv_plan(ctx: &Ctx) -> (RunSpec, RunSpec) {
    let model = decoder(ctx, protocol::decoder::CPU_PRESET, "llama_3_2_1b");
    let (prompt, n) = if ctx.cuda() { (512, 32) } else { (32, 16) };
    let dtype = activations(ctx);
    let base = gen_spec(ctx, model, 1, prompt, n, protocol::KvCacheKind::Dynamic, protocol::GradMode::InferenceMode);
    let plain = with(base.clone(), dtype, |_| {});
    let int4 = with(base, dtype, |g| {
        g.weights = WeightQuant::Int4;
        g.group_size = Some(64);
    });
    (plain, int4)
}

/// "Tiny Llama ..., batch 1, prompt 32 + 16 new tokens, dynamic cache, fp32 activations".
fn with_activations(spec: &RunSpec) -> String {
    format!("{}, {} activations", setup(spec), spec.advanced.weights.as_str())
}

/// "the weights: 1.2 MiB in their linear layers, 8.0 MiB in the rest (embedding, norms,
/// head)", by the formula, for `spec`'s quantization.
fn weights_split(spec: &RunSpec) -> String {
    let Some(d) = spec.model.decoder() else { return String::new() };
    let act = super::weights_dtype(spec).1;
    let w = protocol::weights_formula(&d.config, spec.generate.as_ref().map_or(protocol::LinearQuant::NONE, |g| g.quant()), act);
    format!("{} in the linear layers, {} in the rest (embedding, norms, LM head)", protocol::format_bytes(w.linear_bytes), protocol::format_bytes(w.other_bytes))
}

fn quantized_weights_not_kv_setup(ctx: &Ctx) -> Vec<String> {
    let (plain, int4) = quantized_weights_not_kv_plan(ctx);
    let g = int4.generate.as_ref().map(|g| g.quant()).unwrap_or(protocol::LinearQuant::NONE);
    vec![
        with_activations(&plain),
        format!(
            "Two runs: unquantized {} weights; the blocks' linear layers quantized to weight-only int4 in groups of {} (a scale and a zero per group), dequantized inside each matmul",
            plain.advanced.weights.as_str(),
            g.group_size,
        ),
        shape(plain.model),
        format!("inference_mode, greedy decoding; after the last token each sequence holds {} positions", held_positions(&plain)),
        "Measured: the weights (linear layers and the rest), the KV cache from its tensors, and the activations at the peak".into(),
    ]
}

fn quantized_weights_not_kv(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let (plain_spec, int4_spec) = quantized_weights_not_kv_plan(ctx);
    let model = plain_spec.model;
    let dtype = plain_spec.advanced.weights;
    let (_, plain) = generate(lab, ctx, plain_spec.clone())?;
    ctx.check()?;
    let (_, int4) = generate(lab, ctx, int4_spec)?;
    let (p, q) = (split(&plain)?, split(&int4)?);
    let holds = rules::only_the_linear_layers_shrink(p, q, 0.35);
    let config = model.decoder().map(|d| d.config.clone()).ok_or_else(|| failure(protocol::FailureKind::Internal, "no decoder"))?;
    let elt = if dtype == WeightsDtype::Fp32 { 4 } else { 2 };
    let per_token = config.kv_cache_bytes(1, 1, elt);
    let (plain_w, int4_w) = (p.0 + p.1, q.0 + q.1);
    let mut notes = vec![format!(
        "{}: the cache ({} per token) passes the weights at {} tokens unquantized ({}) and at {} tokens with int4 ({}), in one sequence; with a batch of 8, at an eighth of those.",
        model.display_name(),
        protocol::format_bytes(per_token),
        crossover(plain_w, per_token),
        protocol::format_bytes(plain_w),
        crossover(int4_w, per_token),
        protocol::format_bytes(int4_w),
    )];
    if !ctx.cuda() {
        notes.push("On this small shape the embedding and the LM head are most of the weights, and int4 leaves them as they are: the whole model shrinks far less than its linear layers.".into());
    }
    if let Some(c) = protocol::decoder::lookup("llama_3_1_8b").map(|d| d.config.clone()) {
        let q = protocol::LinearQuant { weights: WeightQuant::Int4, group_size: 64 };
        let (bf16, int4) = (protocol::weights_formula(&c, protocol::LinearQuant::NONE, 2), protocol::weights_formula(&c, q, 2));
        let per = c.kv_cache_bytes(1, 1, 2);
        notes.push(format!(
            "Llama-3.1-8B shape (computed from the formula, bf16 activations and cache): {} per token; the cache passes the weights at {} tokens in bf16 ({}) and at {} with int4 ({}) — at 32k context a batch of 4 holds {} of cache either way.",
            protocol::format_bytes(per),
            crossover(bf16.linear_bytes + bf16.other_bytes, per),
            protocol::format_bytes(bf16.linear_bytes + bf16.other_bytes),
            crossover(int4.linear_bytes + int4.other_bytes, per),
            protocol::format_bytes(int4.linear_bytes + int4.other_bytes),
            protocol::format_bytes(c.kv_cache_bytes(32_768, 4, 2)),
        ));
    }
    let share = q.0 as f64 / p.0.max(1) as f64;
    let reason = format!(
        "int4 (groups of 64) took the linear layers from {} to {} ({share:.3}×) while the rest of the weights stayed at {} and {}; the KV cache held {} unquantized and {} with int4, the activations at the peak {} and {}",
        protocol::format_bytes(p.0),
        protocol::format_bytes(q.0),
        protocol::format_bytes(p.1),
        protocol::format_bytes(q.1),
        protocol::format_bytes(p.2),
        protocol::format_bytes(q.2),
        protocol::format_bytes(activations_at_peak(&plain)),
        protocol::format_bytes(activations_at_peak(&int4)),
    );
    let decision = Decision::rule(holds, format!("{reason}: only the linear layers shrank."), format!("{reason}."));
    let x = vec!["weights: linear layers".to_string(), "weights: the rest".into(), "KV cache".into(), "activations at the peak".into()];
    let bars = |s: (u64, u64, u64), g: &GenerationReport| vec![mib(s.0), mib(s.1), mib(s.2), mib(activations_at_peak(g))];
    Ok(Outcome::new(decision, with_activations(&plain_spec), ChartKind::Bar)
        .figures(vec![
            fig("unquantized: linear layers", p.0 as f64, "bytes"),
            fig("int4: linear layers", q.0 as f64, "bytes"),
            fig("unquantized: other weights", p.1 as f64, "bytes"),
            fig("int4: other weights", q.1 as f64, "bytes"),
            fig("unquantized: KV cache", p.2 as f64, "bytes"),
            fig("int4: KV cache", q.2 as f64, "bytes"),
            fig("unquantized: activations at the peak", activations_at_peak(&plain) as f64, "bytes"),
            fig("int4: activations at the peak", activations_at_peak(&int4) as f64, "bytes"),
            fig("tokens at which the cache passes the weights (int4)", crossover(int4_w, per_token) as f64, "count"),
        ])
        .series(vec![series("unquantized", "MiB", x.clone(), bars(p, &plain)), series("int4, groups of 64", "MiB", x, bars(q, &int4))])
        .notes(notes))
}

pub const INT8_SPEED_DEPENDS: Card = Card {
    id: "int8-speed-depends",
    title: "int8 weights decode faster on a GPU, and may not on a CPU",
    asks: "What does weight-only int8 quantization do to a decoder's per-token decode time?",
    labels: ["int8 weights, timed on one device", "int8 weights, timed against the unquantized weights on the serving device"],
    setup: int8_speed_depends_setup,
    needs: Needs::Any,
    claim: "Weight-only int8 speeds decoding up only where a step's time is spent reading the weights (a GPU at small batch: a quarter of fp32's bytes, half of bf16's); where the time goes to the kernel's own work or to dispatch, as on many CPUs, int8 can be slower than the weights it replaced.",
    why: "A decode step multiplies one token per sequence by every weight: a few FLOPs per byte read, so on a GPU the step waits on memory and reading half the bytes nearly halves the time. The int8 kernel dequantizes as it goes; on a CPU, where a 2-core step is bound by compute and by launching each op rather than by DRAM, that extra work is not paid back (bitsandbytes' 8-bit inference is known to run several times slower than bf16 for a similar reason).",
    statements: &[],
    source: "https://github.com/pytorch-labs/gpt-fast",
    pitfall: "model = quantize_int8(model)\n# per-token time measured on a laptop, or on another GPU than the serving one",
    fix: "# per-token decode time on the serving device, interleaved with the unquantized weights\nfor variant in (bf16_model, int8_model):\n    p50 = median(step_times(variant, new_tokens=64))",
    threshold: "per-token decode p50 over interleaved rounds of both, as a ratio with its 95% bootstrap interval. On CUDA (bf16 baseline) confirmed when unquantized / int8 lies wholly above 1.05 (int8 at least 5% faster), refuted when wholly below 1.0; on a CPU (fp32 baseline) the claim is that int8 can be slower: confirmed when int8 / unquantized lies wholly above 1.0, refuted when wholly below 0.95; inconclusive otherwise. The reason gives the bytes each step read and the bandwidth achieved, which says whether the step was bound by reading the weights. Regime: a GPU at batch 1 is memory-bound; the CPU answers for itself",
    question: ratio("The setup's decoder on this device: the int8 run's per-token decode p50 against the unquantized run's?", "int8: per-token p50", "unquantized: per-token p50", SAME_TIME),
    experiment: int8_speed_depends,
};

/// What int8-speed-depends runs: the unquantized and the int8 generation, and the rounds
/// of both.
fn int8_plan(ctx: &Ctx) -> ([RunSpec; 2], usize) {
    let model = decoder(ctx, protocol::decoder::CPU_PRESET, "llama_3_2_1b");
    let (prompt, n, rounds) = if ctx.cuda() { (128, 48, 3) } else { (16, 24, 3) };
    let dtype = activations(ctx);
    let base = gen_spec(ctx, model, 1, prompt, n, protocol::KvCacheKind::Dynamic, protocol::GradMode::InferenceMode);
    ([with(base.clone(), dtype, |_| {}), with(base, dtype, |g| g.weights = WeightQuant::Int8)], rounds)
}

/// "Tiny Llama ..., fp32 activations, 3 rounds interleaved".
fn int8_describe(specs: &[RunSpec; 2], rounds: usize) -> String {
    format!("{}, {rounds} rounds interleaved", with_activations(&specs[0]))
}

fn int8_speed_depends_setup(ctx: &Ctx) -> Vec<String> {
    let (specs, rounds) = int8_plan(ctx);
    vec![
        int8_describe(&specs, rounds),
        format!(
            "Two runs: unquantized {} weights ({}); weight-only int8 linear layers, one scale per output channel, dequantized inside each matmul ({})",
            specs[0].advanced.weights.as_str(),
            weights_split(&specs[0]),
            weights_split(&specs[1])
        ),
        shape(specs[0].model),
        format!("inference_mode, batch {}; each round generates once with each, alternating which goes first", specs[0].batch),
        "Per-token time: the median of every decode step of all rounds (the prompt's pass excluded); the ratio's 95% interval from the same steps".into(),
    ]
}

fn int8_speed_depends(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let (specs, rounds) = int8_plan(ctx);
    let dtype = specs[0].advanced.weights;
    let (mut times, mut last): ([Vec<f64>; 2], [Option<GenerationReport>; 2]) = Default::default();
    for round in 0..rounds {
        // Alternate which goes first, so neither always runs on a warmer machine.
        for i in [round % 2, 1 - round % 2] {
            ctx.check()?;
            let (_, g) = generate(lab, ctx, specs[i].clone())?;
            times[i].extend(decode_ms(&g));
            last[i] = Some(g);
        }
    }
    let (Some(plain), Some(int8)) = (last[0].take(), last[1].take()) else {
        return Err(failure(protocol::FailureKind::Internal, "no generation measured"));
    };
    let bound = |g: &GenerationReport| {
        let bw = g.decode_bandwidth_gb_s.map_or("?".to_string(), |b| format!("{b:.1} GB/s"));
        // A CPU's small model sits in its caches: a share of DRAM's bandwidth says nothing.
        let pct = match g.decode_bandwidth_percent {
            Some(p) if ctx.cuda() => format!(", {p:.0}% of the device's"),
            _ => String::new(),
        };
        format!("{} of weights per step at {bw}{pct}", protocol::format_bytes(g.weights_bytes))
    };
    let reads = format!("unquantized read {}; int8 {}", bound(&plain), bound(&int8));
    let decision = if ctx.cuda() {
        let shift = Shift::of(&times[0], &times[1]);
        Decision::latency(
            &shift,
            1.05,
            1.0,
            format!("int8 decoded {} faster than bf16 ({reads}): the step is bound by reading the weights.", shift.describe()),
            format!("int8 was not faster: bf16 / int8 = {} ({reads}).", shift.describe()),
        )
    } else {
        let shift = Shift::of(&times[1], &times[0]);
        let bound_by = "this CPU's step is bound by compute and dispatch, not by reading the weights";
        Decision::latency(
            &shift,
            1.0,
            0.95,
            format!("on this CPU int8 decoded slower than fp32: int8 / fp32 = {} ({reads}): {bound_by}, so the dequantizing kernel costs more than the bytes it saves.", shift.describe()),
            format!("on this CPU int8 decoded faster than fp32: int8 / fp32 = {} ({reads}).", shift.describe()),
        )
    };
    let p50 = |v: &[f64]| super::rules::median(v);
    let x: Vec<String> = (1..=times[0].len().min(times[1].len())).map(|i| i.to_string()).collect();
    Ok(Outcome::new(decision, int8_describe(&specs, rounds), ChartKind::Line)
        .figures(
            [
                vec![
                    fig("unquantized: per-token p50", p50(&times[0]), "ms"),
                    fig("int8: per-token p50", p50(&times[1]), "ms"),
                    fig("unquantized: weights read per step", plain.weights_bytes as f64, "bytes"),
                    fig("int8: weights read per step", int8.weights_bytes as f64, "bytes"),
                ],
                // The question's ratio, int8 over unquantized, with its 95% interval.
                interval_figures(&INT8_SPEED_DEPENDS.question, &Shift::of(&times[1], &times[0])),
            ]
            .concat(),
        )
        .series(vec![
            series(&format!("{}: decode step", dtype.as_str()), "ms", x.clone(), times[0].clone()),
            series("int8: decode step", "ms", x, times[1].clone()),
        ]))
}

pub const KV_DTYPE: Card = Card {
    id: "kv-dtype",
    title: "A 16-bit KV cache halves the cache, not the model",
    asks: "What does storing the KV cache in 16 bits, under fp32 weights, do to the cache's bytes and to the run's peak memory?",
    labels: ["the KV cache stored in fewer bits", "the KV cache's bytes computed from the config, against the rest"],
    setup: kv_dtype_setup,
    needs: Needs::Any,
    claim: "Storing the KV cache in bf16 or fp16 under fp32 weights (or in fp8 under bf16) halves the cache's bytes exactly and leaves the weights and their peak as they were: on a model whose weights dominate memory, the run's peak barely moves.",
    why: "The cache's size is 2 × layers × kv_heads × head_dim × tokens × batch × bytes per element: only the last factor changes. The weights, the embeddings and the activations keep their dtype, and every step casts what it attends to back to the activations' dtype. It pays off where the cache is the large part: long contexts, large batches.",
    statements: &[],
    source: "https://huggingface.co/docs/transformers/kv_cache",
    pitfall: "model.generate(ids, cache_implementation=\"quantized\", ...)",
    fix: "kv_bytes = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * context * batch * cache_dtype_bytes\nshare = kv_bytes / (weights_bytes + kv_bytes + activations_bytes)",
    threshold: "confirmed when, with fp32 weights on the same prompt and tokens, the bf16 and fp16 caches each hold exactly half the fp32 cache's bytes (each equal to the formula), and on a GPU with fp8 (compute capability 8.9+) an fp8 e4m3 cache exactly a quarter, while the weights are the same to the byte; the peaks and the drift from the fp32 cache (max |Δ logit| at the prefill, greedy agreement) are reported beside them. Regime: any device; bytes repeat exactly",
    question: ratio("The setup's decoder with fp32 weights, same prompt and tokens: the peak allocated memory of the run with a bf16 KV cache, against the run with an fp32 cache?", "bf16 cache: peak allocated", "fp32 cache: peak allocated", SAME_BYTES),
    experiment: kv_dtype,
};

/// What kv-dtype runs: the fp32 generation (each row changes only the cache's dtype).
fn kv_dtype_plan(ctx: &Ctx) -> RunSpec {
    let model = decoder(ctx, protocol::decoder::CPU_PRESET, "llama_3_2_1b");
    let (prompt, n) = if ctx.cuda() { (512, 32) } else { (32, 16) };
    let base = gen_spec(ctx, model, 1, prompt, n, protocol::KvCacheKind::Dynamic, protocol::GradMode::InferenceMode);
    with(base, WeightsDtype::Fp32, |_| {})
}

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
        rows.push(vec![
            format!("{name} cache"),
            protocol::format_bytes(g.kv_cache_bytes),
            protocol::format_bytes(g.weights_bytes),
            protocol::format_bytes(report.memory.peak_allocated_bytes),
            drift,
        ]);
        cells.push((name, g.kv_cache_bytes, g.weights_bytes, report.memory.peak_allocated_bytes));
    }
    let (full_kv, full_w, full_peak) = (cells[0].1, cells[0].2, cells[0].3);
    let halves: Vec<u64> = cells[1..3].iter().map(|c| c.1).collect();
    let weights: Vec<u64> = cells[1..].iter().map(|c| c.2).collect();
    // fp8: one byte, a quarter of fp32's.
    let quarter = cells.get(3).is_none_or(|c| 4 * c.1 == full_kv);
    let holds = exact && quarter && rules::the_cache_halves_not_the_weights(full_kv, &halves, full_w, &weights);
    let reason = format!(
        "the fp32 cache held {}, bf16 {} and fp16 {}; the weights {} in every run; the peak went from {} to {} ({:.3}×)",
        protocol::format_bytes(full_kv),
        protocol::format_bytes(cells[1].1),
        protocol::format_bytes(cells[2].1),
        protocol::format_bytes(full_w),
        protocol::format_bytes(full_peak),
        protocol::format_bytes(cells[1].3),
        cells[1].3 as f64 / full_peak.max(1) as f64,
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
            fig("fp32 cache: KV cache", full_kv as f64, "bytes"),
            fig("bf16 cache: KV cache", cells[1].1 as f64, "bytes"),
            fig("fp16 cache: KV cache", cells[2].1 as f64, "bytes"),
            fig("fp32 cache: peak allocated", full_peak as f64, "bytes"),
            fig("bf16 cache: peak allocated", cells[1].3 as f64, "bytes"),
            fig("fp16 cache: peak allocated", cells[2].3 as f64, "bytes"),
        ]
        .into_iter()
        .chain(cells.get(3).map(|c| fig("fp8 e4m3 cache: KV cache", c.1 as f64, "bytes")))
        .collect())
        .series(vec![
            series("KV cache", "MiB", x.clone(), cells.iter().map(|c| mib(c.1)).collect()),
            series("weights", "MiB", x, cells.iter().map(|c| mib(c.2)).collect()),
        ])
        .table(Table { columns: vec!["cache".into(), "KV cache".into(), "weights".into(), "peak allocated".into(), "drift from the fp32 cache".into()], rows })
        .notes(notes))
}

pub const FP16_OVERFLOW: Card = Card {
    id: "fp16-overflow",
    title: "fp16 overflows where bf16 does not",
    asks: "What happens to a decoder's forward pass in fp16 and in bf16 when one of its activations grows very large?",
    labels: ["weights in fp16 (model.half())", "weights in bf16, non-finite values counted per layer"],
    setup: fp16_overflow_setup,
    needs: Needs::Any,
    claim: "A decoder whose activations pass 65504 — fp16's largest value — produces inf and then NaN in fp16 (model.half() or fp16 autocast) and stays finite in bf16, whose range is fp32's; the first non-finite layer is where the activations left the range.",
    why: "fp16 has 5 exponent bits: nothing above 65504 is representable, and a sum that passes it becomes inf; RMSNorm then divides inf by inf and every later value is NaN. bf16 keeps fp32's 8 exponent bits (to 3.4e38) at the cost of precision. Trained LLMs have a few \"massive activations\" in the residual stream, thousands of times the rest (Sun et al., arXiv 2402.17762), which is why several checkpoints overflow in fp16 and are shipped for bf16.",
    statements: &[],
    source: "https://pytorch.org/docs/stable/amp.html",
    pitfall: "model = model.half()  # or torch.autocast(\"cuda\", dtype=torch.float16)\nlogits = model(ids).logits",
    fix: "model = model.to(torch.bfloat16)\n# or find the layer: count non-finite values per layer with forward hooks\nfor name, m in model.model.layers.named_children():\n    m.register_forward_hook(lambda m, i, o, n=name: print(n, (~torch.isfinite(o[0])).sum().item()))",
    threshold: "one untimed forward pass over the same prompt in fp32, fp16 and bf16 weights, each layer's output read by a probe; confirmed when the fp32 pass's largest |activation| passes 65504 with every value finite, the fp16 pass has non-finite values and the bf16 pass none. A team checkpoint is run as it is; a preset's weights are random, and the first layer's MLP (up and down projections) is scaled so that the residual stream carries one massive activation past fp16's range, as trained models do (stated in the result). Regime: any device",
    question: value("The setup's decoder and prompt with the weights in fp16 (A): does the forward pass produce any inf or NaN?", "fp16: any inf or NaN", "bool", Ask::YesNo),
    experiment: fp16_overflow,
};

/// Builds the card's decoder in `weights`, the preset's first MLP scaled by `scale` (split
/// between the up and down projections: neither weight itself leaves fp16's range).
fn overflow_model(lab: &Lab, ctx: &Ctx, model: protocol::ModelId, weights: WeightsDtype, scale: f64) -> Result<Model, RunFailure> {
    tch::manual_seed(lab.config().seed);
    let mut m = catch_torch(|| Model::build(model, tch_device(ctx.device), 0))?;
    if scale != 1.0 {
        let vars = m.vs.variables();
        for name in ["model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight"] {
            let mut w = vars.get(name).map(|w| w.shallow_clone()).ok_or_else(|| failure(protocol::FailureKind::Internal, format!("no {name}")))?;
            catch_torch(|| tch::no_grad(|| w.f_mul_scalar_(scale.sqrt()).map(drop)))?
                .map_err(|e| failure(protocol::FailureKind::Internal, e.to_string()))?;
        }
    }
    crate::lab::convert_model(&mut m, weights, protocol::MemoryFormat::Contiguous)?;
    Ok(m)
}

/// One untimed pass over `ids`, every layer's output (and the logits) read.
fn probe_values(m: &Model, ids: &Tensor) -> Result<Vec<ValuePoint>, RunFailure> {
    let d = m.net.as_decoder().ok_or_else(|| failure(protocol::FailureKind::Invalid, format!("{} is not a decoder", m.id)))?;
    catch_torch(|| {
        let _guard = tch::no_grad_guard();
        let mut probe = Probe::values();
        let mut cache = KvCache::new(protocol::KvCacheKind::Off, d.config().num_hidden_layers as usize, 0);
        // The decoder marks its LM head last: that point is the logits.
        drop(d.forward(ids, 0, &mut cache, false, Logits::All, &mut probe));
        probe.finish_values()
    })
}

/// What fp16-overflow runs: the decoder, whether it is a preset (random weights, scaled)
/// and the prompt's length.
fn fp16_overflow_plan(ctx: &Ctx) -> (protocol::ModelId, bool, i64) {
    let model = decoder(ctx, protocol::decoder::CPU_PRESET, "llama_3_2_1b");
    let preset = matches!(model.decoder().map(|d| &d.source), Some(protocol::decoder::DecoderSource::Preset { .. }));
    (model, preset, if ctx.cuda() { 128 } else { 32 })
}

/// 262016 as "262,016".
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// "Tiny Llama ..., batch 1, a prompt of 32 tokens, one pass, no_grad".
fn fp16_overflow_describe(model: protocol::ModelId, tokens: i64) -> String {
    format!("{}, batch 1, a prompt of {tokens} tokens, one pass, no_grad", model.display_name())
}

fn fp16_overflow_setup(ctx: &Ctx) -> Vec<String> {
    let (model, preset, tokens) = fp16_overflow_plan(ctx);
    vec![
        fp16_overflow_describe(model, tokens),
        "The same pass, the same random prompt, with the weights in fp32, in fp16 (A) and in bf16 (B); every layer's output and the logits read for their largest |value| and their inf and NaN count".into(),
        shape(model),
        if preset {
            format!(
                "Its weights are random: before the three passes, its first layer's MLP (up and down projections) is scaled until the fp32 pass's largest |activation| passes {}, as the few massive activations of a trained model's residual stream do",
                thousands((4.0 * rules::FP16_MAX) as u64)
            )
        } else {
            "A team checkpoint: its trained weights, as they are".into()
        },
    ]
}

fn fp16_overflow(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let (model, preset, tokens) = fp16_overflow_plan(ctx);
    let config = model.decoder().map(|d| d.config.clone()).ok_or_else(|| failure(protocol::FailureKind::Invalid, format!("{model} is not a decoder")))?;
    tch::manual_seed(lab.config().seed);
    let ids = catch_torch(|| Tensor::randint(config.vocab_size as i64, [1, tokens], (Kind::Int64, tch_device(ctx.device))))?;
    let largest = |points: &[ValuePoint]| points.iter().map(|p| p.max_abs).fold(0.0, f64::max);
    let non_finite = |points: &[ValuePoint]| points.iter().map(|p| p.non_finite).sum::<u64>();
    // A preset's random weights stay far inside fp16's range: scale its first MLP until
    // the fp32 pass passes it (by a margin of 4), measured, not assumed.
    let mut scale = 1.0;
    let mut fp32 = probe_values(&overflow_model(lab, ctx, model, WeightsDtype::Fp32, scale)?, &ids)?;
    if preset {
        for _ in 0..4 {
            let reach = largest(&fp32);
            if reach > 4.0 * rules::FP16_MAX {
                break;
            }
            scale *= (8.0 * rules::FP16_MAX / reach.max(1e-6)).max(2.0);
            ctx.check()?;
            fp32 = probe_values(&overflow_model(lab, ctx, model, WeightsDtype::Fp32, scale)?, &ids)?;
        }
    }
    ctx.check()?;
    let fp16 = probe_values(&overflow_model(lab, ctx, model, WeightsDtype::Fp16, scale)?, &ids)?;
    ctx.check()?;
    let bf16 = probe_values(&overflow_model(lab, ctx, model, WeightsDtype::Bf16, scale)?, &ids)?;
    let logits_bad = |points: &[ValuePoint]| points.last().map_or(0, |p| p.non_finite);
    let holds = rules::fp16_overflows_where_bf16_does_not(largest(&fp32), non_finite(&fp32), non_finite(&fp16), non_finite(&bf16));
    let first_bad = fp16.iter().find(|p| p.non_finite > 0).map(|p| p.module.clone());
    let rows: Vec<Vec<String>> = fp32
        .iter()
        .zip(&fp16)
        .zip(&bf16)
        .map(|((a, b), c)| {
            vec![a.module.clone(), format!("{:.4e}", a.max_abs), format!("{} of {}", b.non_finite, b.elements), format!("{} of {}", c.non_finite, c.elements)]
        })
        .collect();
    let scaled = if preset && scale != 1.0 {
        format!("; its random weights, the first layer's MLP scaled by {scale:.3e} so that one activation passes fp16's range, as a trained model's massive activations do")
    } else {
        String::new()
    };
    let reason = format!(
        "the fp32 pass reached |x| = {:.4e} (fp16's largest value: 65504); fp16 produced {} non-finite values{}, {} of {} logits; bf16 produced {}",
        largest(&fp32),
        non_finite(&fp16),
        first_bad.as_ref().map_or(String::new(), |m| format!(", first in {m}")),
        logits_bad(&fp16),
        fp16.last().map_or(0, |p| p.elements),
        non_finite(&bf16),
    );
    let decision = if !preset && largest(&fp32) <= rules::FP16_MAX {
        Decision::rule(false, "", format!("{reason}: this checkpoint's activations stay inside fp16's range on this prompt, so fp16 is safe for it here."))
    } else {
        Decision::rule(holds, format!("{reason}: the range, not the precision, failed."), format!("{reason}."))
    };
    let x: Vec<String> = fp32.iter().map(|p| p.module.clone()).collect();
    let log = |points: &[ValuePoint]| points.iter().map(|p| (1.0 + p.max_abs).log10()).collect::<Vec<_>>();
    Ok(Outcome::new(decision, format!("{}{scaled}", fp16_overflow_describe(model, tokens)), ChartKind::Line)
        .figures(vec![
            fig("fp32: largest |activation|", largest(&fp32), "magnitude"),
            fig("fp16: any inf or NaN", f64::from(u8::from(non_finite(&fp16) > 0)), "bool"),
            fig("fp16: non-finite values", non_finite(&fp16) as f64, "count"),
            fig("bf16: non-finite values", non_finite(&bf16) as f64, "count"),
            fig("fp16: non-finite values in the logits", logits_bad(&fp16) as f64, "count"),
            fig("bf16: non-finite values in the logits", logits_bad(&bf16) as f64, "count"),
        ])
        .series(vec![
            series("fp32: log10(1 + largest |x|)", "log10", x.clone(), log(&fp32)),
            series("bf16: log10(1 + largest |x|)", "log10", x.clone(), log(&bf16)),
            series("fp16: non-finite values", "count", x, fp16.iter().map(|p| p.non_finite as f64).collect()),
        ])
        .table(Table { columns: vec!["output of".into(), "fp32: largest |x|".into(), "fp16: non-finite".into(), "bf16: non-finite".into()], rows }))
}

pub const SDPA_BACKEND: Card = Card {
    id: "sdpa-backend",
    title: "Which attention kernel ran, and what the math kernel costs",
    asks: "Which kernel does scaled_dot_product_attention run on a long causal prompt, and what does each kernel hold in memory?",
    labels: ["an explicit boolean causal mask", "is_causal=True, then the kernel pinned to FlashAttention"],
    setup: sdpa_backend_setup,
    needs: Needs::Any,
    claim: "scaled_dot_product_attention picks its kernel from the tensors and flags it gets: with is_causal it runs a tiled kernel (FlashAttention on a GPU, libtorch's flash kernel on a CPU) that never holds the score matrix; the math fallback materialises batch × heads × tokens² scores, and an explicit attention mask can rule FlashAttention out without a word.",
    why: "The tiled kernels stream keys and values through on-chip memory and keep one running softmax per query; the math kernel computes q·kᵀ whole, then its softmax, in memory. FlashAttention takes no arbitrary mask, so passing one (transformers does whenever it builds a 4-D mask, huggingface/transformers#30010) selects the memory-efficient or the math kernel instead, silently.",
    statements: &[],
    source: "https://pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention.html",
    pitfall: "mask = torch.ones(t, t, dtype=torch.bool).tril()\nout = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)",
    fix: "out = F.scaled_dot_product_attention(q, k, v, is_causal=True)\n# check which kernel runs:\nwith torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):\n    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # FlashAttention only",
    threshold: "on one long prompt's query, key and value (CPU: 8 heads × 1,024 tokens × 64, fp32; CUDA: 32 heads × 4,096 × 128, bf16), three calls — is_causal (libtorch's default choice), an explicit boolean causal mask, and the math kernel alone — each with the backend libtorch names for it, its peak above the inputs and its time over interleaved rounds; confirmed when the math kernel's peak is at least the score matrix's bytes (batch × heads × tokens² × element size) and the default's under a quarter of it. The times are reported with their noise and do not decide. Regime: any device",
    question: ratio("The setup's query, key and value: the peak above the inputs of the call restricted to the math kernel, as a multiple of the is_causal call's (libtorch's own choice of kernel)?", "math only: peak above the inputs", "is_causal: peak above the inputs", Ask::LogScale { min: 0.1, max: 10_000.0, within: 2.0 }),
    experiment: sdpa_backend,
};

/// What sdpa-backend runs: heads, tokens, head dim, dtype and the timed rounds.
fn sdpa_plan(ctx: &Ctx) -> (i64, i64, i64, Kind, usize) {
    if ctx.cuda() {
        (32, 4096, 128, Kind::BFloat16, 20)
    } else {
        (8, 1024, 64, Kind::Float, 8)
    }
}

fn sdpa_describe(ctx: &Ctx) -> String {
    let (heads, tokens, dim, kind, rounds) = sdpa_plan(ctx);
    let fmt = if kind == Kind::BFloat16 { "bf16" } else { "fp32" };
    format!("batch 1, {heads} heads × {tokens} tokens × {dim}, {fmt}, no_grad, {rounds} rounds interleaved")
}

fn sdpa_backend_setup(ctx: &Ctx) -> Vec<String> {
    let (heads, tokens, dim, kind, _) = sdpa_plan(ctx);
    let elt = kind.elt_size_in_bytes() as u64;
    vec![
        sdpa_describe(ctx),
        "Three calls of scaled_dot_product_attention on the same query, key and value: is_causal=True with libtorch's default choice of kernel; an explicit boolean causal mask (A); is_causal=True with only the math kernel enabled".into(),
        format!(
            "{elt} bytes per element: query, key and value {} each; the boolean mask {}",
            protocol::format_bytes((heads * tokens * dim) as u64 * elt),
            protocol::format_bytes((tokens * tokens) as u64)
        ),
        "Measured per call: the kernel libtorch names for it, the peak allocated memory above the inputs (after one unmeasured call), and the time over interleaved rounds".into(),
    ]
}

fn sdpa_backend(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let (heads, tokens, dim, kind, rounds) = sdpa_plan(ctx);
    let dev = tch_device(ctx.device);
    tch::manual_seed(lab.config().seed);
    let (q, k, v, mask) = catch_torch(|| {
        let make = || Tensor::randn([1, heads, tokens, dim], (kind, dev));
        (make(), make(), make(), Tensor::ones([tokens, tokens], (Kind::Bool, dev)).tril(0))
    })?;
    let flags = SdpFlags::read().map_err(|e| failure(protocol::FailureKind::Internal, e.0))?;
    let math_only = SdpFlags { flash: false, mem_efficient: false, cudnn: false, math: true };
    let names = ["is_causal", "explicit mask", "math only"];
    let attend = |i: usize| -> Result<(Tensor, Option<SdpBackend>), RunFailure> {
        // Variant i: (mask, causal, switches).
        let (m, causal, switches) = match i {
            0 => (None, true, flags),
            1 => (Some(&mask), false, flags),
            _ => (None, true, math_only),
        };
        let _g = SdpFlagsGuard::enter(switches).map_err(|e| failure(protocol::FailureKind::Internal, e.0))?;
        let backend = sdp_choice(&q, &k, &v, m, 0.0, causal, false).map_err(|e| failure(protocol::FailureKind::Internal, e.0))?;
        let out = catch_torch(|| tch::no_grad(|| Tensor::scaled_dot_product_attention(&q, &k, &v, m, 0.0, causal, None, false)))?;
        Ok((out, backend))
    };
    let meter = lab.meter(ctx.device);
    let mut peaks = vec![];
    let mut backends = vec![];
    for i in 0..3 {
        ctx.check()?;
        drop(attend(i)?); // once unmeasured: one-time workspaces out of the way
        synchronize(ctx.device)?;
        let before = meter.read().map_err(torch_failure)?.allocated;
        meter.reset_peak().map_err(torch_failure)?;
        let (out, backend) = attend(i)?;
        synchronize(ctx.device)?;
        let r = meter.read().map_err(torch_failure)?;
        drop(out);
        peaks.push(r.peak_allocated.max(r.allocated).saturating_sub(before));
        backends.push(backend);
    }
    let times = time_passes(ctx, rounds, 3, |i, _| attend(i).map(|(out, _)| out))?;
    let scores = (heads * tokens * tokens) as u64 * kind.elt_size_in_bytes() as u64;
    let holds = rules::math_materialises_the_scores(peaks[2], peaks[0], scores);
    let label = |b: Option<SdpBackend>| b.map_or("none (the call would fail)".to_string(), |b| b.label(ctx.device).to_string());
    let rows: Vec<Vec<String>> = (0..3)
        .map(|i| vec![names[i].to_string(), label(backends[i]), protocol::format_bytes(peaks[i]), format!("{:.3} ms", super::rules::median(&times[i]))])
        .collect();
    let math_time = Shift::of(&times[2], &times[0]);
    let mask_time = Shift::of(&times[1], &times[0]);
    let reason = format!(
        "is_causal ran {} and held {} above its inputs; the explicit mask ran {} ({}); the math kernel held {} against a score matrix of {} and took {} the default's time; the mask {}",
        label(backends[0]),
        protocol::format_bytes(peaks[0]),
        label(backends[1]),
        protocol::format_bytes(peaks[1]),
        protocol::format_bytes(peaks[2]),
        protocol::format_bytes(scores),
        math_time.describe(),
        mask_time.describe(),
    );
    let mut notes = vec![];
    if backends[1] != backends[0] {
        notes.push(format!("The explicit mask changed the kernel from {} to {}, with no warning.", label(backends[0]), label(backends[1])));
    } else {
        notes.push(format!("On this device the kernel taking is_causal also takes a mask ({}): the mask cost its own {} and the time above, not a kernel switch. On CUDA FlashAttention takes no mask, and the same call falls back.", label(backends[1]), protocol::format_bytes(mask.numel() as u64)));
    }
    let decision = Decision::rule(holds, format!("{reason}."), format!("{reason}."));
    let x: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    Ok(Outcome::new(decision, sdpa_describe(ctx), ChartKind::Bar)
        .figures(vec![
            fig("is_causal: peak above the inputs", peaks[0] as f64, "bytes"),
            fig("explicit mask: peak above the inputs", peaks[1] as f64, "bytes"),
            fig("math only: peak above the inputs", peaks[2] as f64, "bytes"),
            fig("score matrix", scores as f64, "bytes"),
            fig("is_causal: p50", super::rules::median(&times[0]), "ms"),
            fig("explicit mask: p50", super::rules::median(&times[1]), "ms"),
            fig("math only: p50", super::rules::median(&times[2]), "ms"),
        ])
        .series(vec![
            series("peak above the inputs", "MiB", x.clone(), peaks.iter().map(|&b| mib(b)).collect()),
            series("p50", "ms", x, times.iter().map(|t| super::rules::median(t)).collect()),
        ])
        .table(Table { columns: vec!["call".into(), "kernel".into(), "peak above the inputs".into(), "p50".into()], rows })
        .notes(notes))
}

#[cfg(test)]
mod tests {
    use super::rules::*;

    #[test]
    fn only_the_linear_layers_may_shrink() {
        // fp32 → int4 (groups of 64): 0.156× of the linear bytes, the rest equal.
        assert!(only_the_linear_layers_shrink((1000, 500, 64), (156, 500, 64), 0.35));
        // A cache one byte different refutes: the claim is exact.
        assert!(!only_the_linear_layers_shrink((1000, 500, 64), (156, 500, 65), 0.35));
        // The embeddings quantized too: refuted (they were to stay).
        assert!(!only_the_linear_layers_shrink((1000, 500, 64), (156, 250, 64), 0.35));
        // Not quantized enough.
        assert!(!only_the_linear_layers_shrink((1000, 500, 64), (400, 500, 64), 0.35));
    }

    #[test]
    fn a_half_cache_halves_exactly() {
        assert!(the_cache_halves_not_the_weights(1024, &[512, 512], 9, &[9, 9]));
        assert!(!the_cache_halves_not_the_weights(1024, &[513, 512], 9, &[9, 9]));
        assert!(!the_cache_halves_not_the_weights(1024, &[512, 512], 9, &[9, 10]));
        assert!(!the_cache_halves_not_the_weights(0, &[0], 9, &[9]));
    }

    #[test]
    fn overflow_needs_the_range_reached_and_bf16_clean() {
        assert!(fp16_overflows_where_bf16_does_not(3e5, 0, 12, 0));
        assert!(!fp16_overflows_where_bf16_does_not(3e4, 0, 12, 0), "never left fp16's range");
        assert!(!fp16_overflows_where_bf16_does_not(3e5, 0, 0, 0), "fp16 stayed finite");
        assert!(!fp16_overflows_where_bf16_does_not(3e5, 0, 12, 1), "bf16 overflowed too");
        assert!(!fp16_overflows_where_bf16_does_not(3e5, 4, 12, 0), "fp32 itself was not finite");
    }

    #[test]
    fn the_math_kernel_must_hold_the_scores() {
        let scores = 32 << 20;
        assert!(math_materialises_the_scores(2 * scores, 1 << 20, scores));
        assert!(!math_materialises_the_scores(scores / 2, 1 << 20, scores));
        assert!(!math_materialises_the_scores(2 * scores, scores / 2, scores), "the default held scores too");
    }
}
