//! The generation cards about weight-only quantization: what int4 shrinks and what it
//! leaves as it was (`quantized-weights-not-kv`), and what int8 does to a decode step's time
//! (`int8-speed-depends`). Both measure generate runs as the Generate page does; this file
//! also owns the helpers the decode-settings cards share (the activations' dtype a card
//! decodes in, a spec with its decoder settings changed, the weights' split by the formula).

use protocol::{ChartKind, GenerateSpec, GenerationReport, RunFailure, RunSpec, WeightQuant, WeightsDtype};

use super::super::kit::{bytes_compared, fig, interval_figures, mib, series, Ctx, Decision, Outcome, Shift};
use super::super::{ratio, Card, Needs, Said, SAME_BYTES, SAME_TIME};
use super::{decode_ms, decoder, gen_spec, generate, held_positions, setup, shape};
use crate::lab::Lab;
use crate::torch_call::failure;

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
}

/// The weights the cards decode with: fp32 on a CPU (its fast path), bf16 on a GPU (what a
/// team serves, and the only dtype CUDA's int4 kernel takes).
fn activations(ctx: &Ctx) -> WeightsDtype {
    if ctx.cuda() {
        WeightsDtype::Bf16
    } else {
        WeightsDtype::Fp32
    }
}

/// A generate spec with the decoder settings `f` makes.
pub(super) fn with(mut spec: RunSpec, weights: WeightsDtype, f: impl FnOnce(&mut GenerateSpec)) -> RunSpec {
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

/// "Tiny Llama ..., batch 1, prompt 32 + 16 new tokens, dynamic cache, fp32 activations".
fn with_activations(spec: &RunSpec) -> String {
    format!("{}, {} activations", setup(spec), spec.advanced.weights.as_str())
}

/// "1.2 MiB in the linear layers, 8.0 MiB in the rest (embedding, norms, LM head)", by the
/// formula, for `spec`'s quantization.
pub(super) fn weights_split(spec: &RunSpec) -> String {
    let Some(d) = spec.model.decoder() else { return String::new() };
    let act = super::weights_dtype(spec).1;
    let w = protocol::weights_formula(&d.config, spec.generate.as_ref().map_or(protocol::LinearQuant::NONE, |g| g.quant()), act);
    format!("{} in the linear layers, {} in the rest (embedding, norms, LM head)", protocol::format_bytes(w.linear_bytes), protocol::format_bytes(w.other_bytes))
}

pub const QUANTIZED_WEIGHTS_NOT_KV: Card = Card {
    id: "quantized-weights-not-kv",
    title: "int4 weights shrink the weights, not the KV cache",
    asks: "What does weight-only int4 quantization shrink: the weights, the KV cache, the activations?",
    labels: ["int4 weights, then a long generation", "int4 weights, the memory budget counted with the cache's own bytes"],
    setup: quantized_weights_not_kv_setup,
    needs: Needs::Any,
    claim: "Weight-only int4 in groups of 64 on the blocks' linear layers, as Gradless quantizes them, shrinks those layers to about 0.28× of their bf16 bytes (0.16× of fp32's) and nothing else: the KV cache holds the same bytes to the byte, and the embeddings, the norms and the LM head, left unquantized, stay as they were. A long context that ran out of memory for its cache still runs out, later only by the bytes the weights gave back.",
    statements: &[
        Said::run("int4 in groups of 64 took the blocks' linear layers to at most 0.35× their unquantized bytes: half a byte per weight, plus a scale and a zero per 64 weights in the activations' dtype (0.28× of bf16, 0.16× of fp32).", &["int4: linear layers", "unquantized: linear layers"]),
        Said::torch("PyTorch's int4 kernel reads its weights packed two to a byte.", "test_quant_attention.py::test_int4_packs_half_a_byte_per_weight"),
        Said::run("The embeddings, the norms and the LM head kept their bytes: Gradless quantizes only the blocks' linear layers, the layers the snippets' filter_fn selects (torchao's quantize_ without one takes every nn.Linear, the LM head included).", &["int4: other weights", "unquantized: other weights"]),
        Said::torch("The packed int4 matmul returns its output in the activations' dtype, so the keys and values the cache stores come out of it as they did unquantized.", "test_quant_attention.py::test_the_int4_matmul_returns_the_activations_dtype"),
        Said::source("On CUDA the int4 kernel (torch._weight_int4pack_mm, tinygemm) takes bf16 activations only, so there both runs are bf16.", "aten/src/ATen/native/cuda/int4mm.cu", "_weight_int4pack_mm_cuda", "more-cards"),
        Said::run("The KV cache held the same bytes with int4 as unquantized.", &["int4: KV cache", "unquantized: KV cache"]),
        Said::run("The weights are paid once while the cache grows with every token, so with int4 the cache passes the weights after fewer tokens.", &["tokens at which the cache passes the weights (int4)", "tokens at which the cache passes the weights (unquantized)"]),
    ],
    source: "https://github.com/pytorch/ao/tree/main/torchao/quantization",
    pitfall: "blocks = lambda m, fqn: isinstance(m, torch.nn.Linear) and \".layers.\" in fqn\nquantize_(model, int4_weight_only(group_size=64), filter_fn=blocks)\nout = model.generate(ids, max_new_tokens=32_000)",
    fix: "blocks = lambda m, fqn: isinstance(m, torch.nn.Linear) and \".layers.\" in fqn\nquantize_(model, int4_weight_only(group_size=64), filter_fn=blocks)\nout = model.generate(ids, max_new_tokens=256, return_dict_in_generate=True)\nper_token = sum(t.nbytes for layer in out.past_key_values for t in layer) / out.sequences.shape[1]\nassert weight_bytes + per_token * 32_000 + activations < budget",
    threshold: "confirmed when, on the same prompt and tokens, the int4 run's KV cache and its weights outside the linear layers (embeddings, norms, head) equal the unquantized run's to the byte while its linear layers take at most 0.35× their unquantized bytes (int4 in groups of 64, scales and zeros in the activations' dtype: 0.28× of bf16, 0.16× of fp32). The activations at the peak are reported, not judged. The position at which the cache passes the weights is computed from the formula, for this shape and the Llama-3.1-8B shape. Regime: any device (bf16 activations on CUDA, the only dtype its int4 kernel takes; fp32 on a CPU); bytes repeat exactly",
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
    if let Some(c) = protocol::decoder::preset("llama_3_1_8b").map(|d| d.config.clone()) {
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
    // The question's comparison, in the words of the rule that grades it.
    let (_, kv_words) = bytes_compared(q.2 as f64, p.2 as f64);
    let reason = format!(
        "int4 (groups of 64) took the linear layers from {} to {} ({share:.3}×) while the rest of the weights stayed at {} and {}; the KV cache with int4 against unquantized: {kv_words}; the activations at the peak {} unquantized and {} with int4",
        protocol::format_bytes(p.0),
        protocol::format_bytes(q.0),
        protocol::format_bytes(p.1),
        protocol::format_bytes(q.1),
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
            fig("tokens at which the cache passes the weights (unquantized)", crossover(plain_w, per_token) as f64, "count"),
            fig("tokens at which the cache passes the weights (int4)", crossover(int4_w, per_token) as f64, "count"),
        ])
        .series(vec![series("unquantized", "MiB", x.clone(), bars(p, &plain)), series("int4, groups of 64", "MiB", x, bars(q, &int4))])
        .notes(notes))
}

pub const INT8_SPEED_DEPENDS: Card = Card {
    id: "int8-speed-depends",
    title: "int8 weights read fewer bytes; the kernel decides whether decoding gets faster",
    asks: "What does weight-only int8 quantization do to a decoder's per-token decode time?",
    labels: ["int8 weights, timed on one device", "int8 weights, timed against the unquantized weights on the serving device"],
    setup: int8_speed_depends_setup,
    needs: Needs::Any,
    claim: "Weight-only int8 reads fewer bytes per decode step than the weights it replaces (one byte a weight, against bf16's two and fp32's four), but a step's time follows the kernel that reads them, not the bytes: with PyTorch 2.11's own int8 matmul (torch._weight_int8pack_mm), whose CUDA kernel is one thread per output element in fp32, a decode step can be slower than with the unquantized weights. Time int8 against the unquantized weights on the serving device, with the kernel that will serve.",
    statements: &[
        Said::run("The int8 layers hold one byte per weight and a scale per output channel, so an int8 step read fewer weight bytes than an unquantized one.", &["int8: weights read per step", "unquantized: weights read per step"]),
        Said::torch("torch._weight_int8pack_mm dequantizes inside the matmul, by one scale per output channel, and returns the activations' dtype.", "test_quant_attention.py::test_the_int8_matmul_dequantizes_inside_and_returns_the_activations_dtype"),
        Said::source("On CUDA, PyTorch 2.11's torch._weight_int8pack_mm casts the activations and the scales to fp32 and runs one thread per output element, each walking its weight row one byte at a time: a simple kernel, not one built to read the weights at the GPU's bandwidth.", "aten/src/ATen/native/cuda/int8mm.cu", "_weight_int8pack_mm_cuda", "cards"),
        Said::run("On this device the int8 step took longer than the unquantized step, though it read fewer bytes: the time followed the kernel, not the bytes.", &["int8: per-token p50", "unquantized: per-token p50", "int8: per-token p50 / unquantized: per-token p50, 95% interval low", "int8: per-token p50 / unquantized: per-token p50, 95% interval high"]),
    ],
    source: "https://github.com/pytorch-labs/gpt-fast",
    pitfall: "model = quantize_int8(model)\n# per-token time measured on a laptop, or on another GPU than the serving one",
    fix: "# per-token decode time on the serving device, interleaved with the unquantized weights\nfor variant in (bf16_model, int8_model):\n    p50 = median(step_times(variant, new_tokens=64))",
    threshold: "per-token decode p50 over interleaved rounds of both (unquantized: fp32 on a CPU, bf16 on CUDA), as the ratio int8 / unquantized with its 95% bootstrap interval: confirmed when the interval lies wholly above 1 (int8 slower though it reads fewer bytes), refuted when it lies wholly below 1 (int8 faster), inconclusive otherwise. The reason gives the bytes each step read and the bandwidth achieved. Regime: batch 1, PyTorch 2.11's own int8 kernel (torch._weight_int8pack_mm) on either device; a fused int8 kernel (torch.compile's, torchao's) is another kernel and may give another answer",
    question: ratio("The setup's decoder on this device: the int8 run's per-token decode p50 against the unquantized run's? (A judgment about the kernels: both runs use PyTorch's own matmuls, int8's being torch._weight_int8pack_mm.)", "int8: per-token p50", "unquantized: per-token p50", SAME_TIME),
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
    let act = specs[0].advanced.weights.as_str();
    vec![
        int8_describe(&specs, rounds),
        format!(
            "Two runs: unquantized {act} weights ({}); weight-only int8 linear layers, one scale per output channel, dequantized inside each matmul ({})",
            weights_split(&specs[0]),
            weights_split(&specs[1])
        ),
        format!(
            "The int8 layers run torch._weight_int8pack_mm with {act} activations; the unquantized ones a dense {act} matmul ({})",
            if ctx.cuda() { "cuBLAS" } else { "BLAS" }
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
    let (device, name) = (if ctx.cuda() { "CUDA device" } else { "CPU" }, dtype.as_str());
    // The question's ratio, int8 over unquantized.
    let shift = Shift::of(&times[1], &times[0]);
    let decision = Decision::latency(
        &shift,
        1.0,
        1.0,
        format!("on this {device} int8 decoded slower than {name}: int8 / {name} = {} ({reads}): the int8 kernel cost more than the bytes it saved.", shift.describe()),
        format!("on this {device} int8 decoded faster than {name}: int8 / {name} = {} ({reads}): here the int8 kernel paid the bytes back.", shift.describe()),
    );
    let mut notes = vec![];
    if ctx.cuda() {
        notes.push("PyTorch 2.11's CUDA torch._weight_int8pack_mm casts the activations and the scales to fp32, runs one thread per output element over its whole weight row, and casts the output back (aten/src/ATen/native/cuda/int8mm.cu).".into());
    } else if cfg!(target_arch = "x86_64") && dtype == WeightsDtype::Fp32 {
        notes.push("On an x86 CPU, torch._weight_int8pack_mm has vectorised kernels for bf16 activations only (aten/src/ATen/native/cpu/int8mm_kernel.cpp); fp32 activations, as here, take its scalar loop.".into());
    }
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
                interval_figures(&INT8_SPEED_DEPENDS.question, &shift),
            ]
            .concat(),
        )
        .series(vec![
            series(&format!("{}: decode step", dtype.as_str()), "ms", x.clone(), times[0].clone()),
            series("int8: decode step", "ms", x, times[1].clone()),
        ])
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
    fn the_interval_figures_carry_the_names_the_statement_cites() {
        let q = &super::INT8_SPEED_DEPENDS.question;
        let (lo, hi) = q.interval_names();
        for name in [lo, hi] {
            assert!(super::INT8_SPEED_DEPENDS.statements.iter().any(|s| matches!(s.known, crate::pitfalls::How::Run(f) if f.contains(&name.as_str()))), "{name}");
        }
    }
}
