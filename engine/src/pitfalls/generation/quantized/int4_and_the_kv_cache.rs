//! The `int4-and-the-kv-cache` card ([`INT4_AND_THE_KV_CACHE`]): int4 weights shrink the weights, not the KV cache

use super::*;

// The figures this file's cards report, each defined once (see `kit::figure`).
pub const INT4_LINEAR_LAYERS: FigureName = FigureName::new("int4: linear layers", Unit::Bytes);
pub const INT4_OTHER_WEIGHTS: FigureName = FigureName::new("int4: other weights", Unit::Bytes);
pub const INT4_KV_CACHE: FigureName = FigureName::new("int4: KV cache", Unit::Bytes);
pub const TOKENS_AT_WHICH_THE_CACHE_PASSES_THE_WEIGHTS_INT4: FigureName = FigureName::new("tokens at which the cache passes the weights (int4)", Unit::Count);
pub const UNQUANTIZED_KV_CACHE: FigureName = FigureName::new("unquantized: KV cache", Unit::Bytes);
pub const UNQUANTIZED_LINEAR_LAYERS: FigureName = FigureName::new("unquantized: linear layers", Unit::Bytes);
pub const UNQUANTIZED_OTHER_WEIGHTS: FigureName = FigureName::new("unquantized: other weights", Unit::Bytes);
pub const UNQUANTIZED_ACTIVATIONS_AT_THE_PEAK: FigureName = FigureName::new("unquantized: activations at the peak", Unit::Bytes);
pub const INT4_ACTIVATIONS_AT_THE_PEAK: FigureName = FigureName::new("int4: activations at the peak", Unit::Bytes);
pub const TOKENS_AT_WHICH_THE_CACHE_PASSES_THE_WEIGHTS_UNQUANTIZED: FigureName = FigureName::new("tokens at which the cache passes the weights (unquantized)", Unit::Count);
pub const UNQUANTIZED: FigureName = FigureName::new("unquantized", Unit::Mib);
pub const INT4_GROUPS_OF_64: FigureName = FigureName::new("int4, groups of 64", Unit::Mib);

/// The report's split of the weights (linear layers, the rest) and its KV cache.
pub(super) fn split(g: &GenerationReport) -> Result<(u64, u64, u64), RunFailure> {
    let w = g
        .weights_breakdown
        .as_ref()
        .ok_or_else(|| failure(protocol::FailureKind::Internal, "a generation without its weights split"))?;
    Ok((w.linear_bytes, w.other_bytes, g.kv_cache_bytes))
}

pub(super) fn activations_at_peak(g: &GenerationReport) -> u64 {
    g.memory_peak.map_or(0, |m| m.activations_bytes)
}

/// Tokens (one sequence) at which a cache of `per_token` bytes passes `weights` bytes.
pub(super) fn crossover(weights: u64, per_token: u64) -> u64 {
    weights / per_token.max(1)
}

pub const INT4_AND_THE_KV_CACHE: Card = Card {
    id: "int4-and-the-kv-cache",
    title: "int4 weights shrink the weights, not the KV cache",
    asks: "What does weight-only int4 quantization shrink: the weights, the KV cache, the activations?",
    labels: ["int4 weights, then a long generation", "int4 weights, the memory budget counted with the cache's own bytes"],
    setup: int4_and_the_kv_cache_setup,
    needs: Needs::Any,
    claim: "Weight-only int4 in groups of 64 on the blocks' linear layers, as Gradless quantizes them, shrinks those layers to about 0.28× of their bf16 bytes (0.16× of fp32's) and nothing else: the KV cache holds the same bytes to the byte, and the embeddings, the norms and the LM head, left unquantized, stay as they were. A long context that ran out of memory for its cache still runs out, later only by the bytes the weights gave back.",
    statements: &[
        Said::run("int4 in groups of 64 took the blocks' linear layers to at most 0.35× their unquantized bytes: half a byte per weight, plus a scale and a zero per 64 weights in the activations' dtype (0.28× of bf16, 0.16× of fp32).", &[INT4_LINEAR_LAYERS, UNQUANTIZED_LINEAR_LAYERS]),
        Said::torch("PyTorch's int4 kernel reads its weights packed two to a byte.", "test_quant_attention.py::test_int4_packs_half_a_byte_per_weight"),
        Said::run("The embeddings, the norms and the LM head kept their bytes: Gradless quantizes only the blocks' linear layers, the layers the snippets' filter_fn selects (torchao's quantize_ without one takes every nn.Linear, the LM head included).", &[INT4_OTHER_WEIGHTS, UNQUANTIZED_OTHER_WEIGHTS]),
        Said::torch("The packed int4 matmul returns its output in the activations' dtype, so the keys and values the cache stores come out of it as they did unquantized.", "test_quant_attention.py::test_the_int4_matmul_returns_the_activations_dtype"),
        Said::source("On CUDA the int4 kernel (torch._weight_int4pack_mm, tinygemm) takes bf16 activations only, so there both runs are bf16.", "aten/src/ATen/native/cuda/int4mm.cu", "_weight_int4pack_mm_cuda", "more-cards"),
        Said::run("The KV cache held the same bytes with int4 as unquantized.", &[INT4_KV_CACHE, UNQUANTIZED_KV_CACHE]),
        Said::run("The weights are paid once while the cache grows with every token, so with int4 the cache passes the weights after fewer tokens.", &[TOKENS_AT_WHICH_THE_CACHE_PASSES_THE_WEIGHTS_INT4, TOKENS_AT_WHICH_THE_CACHE_PASSES_THE_WEIGHTS_UNQUANTIZED]),
    ],
    source: "https://github.com/pytorch/ao/tree/main/torchao/quantization",
    pitfall: "blocks = lambda m, fqn: isinstance(m, torch.nn.Linear) and \".layers.\" in fqn\nquantize_(model, int4_weight_only(group_size=64), filter_fn=blocks)\nout = model.generate(ids, max_new_tokens=32_000)",
    fix: "blocks = lambda m, fqn: isinstance(m, torch.nn.Linear) and \".layers.\" in fqn\nquantize_(model, int4_weight_only(group_size=64), filter_fn=blocks)\nout = model.generate(ids, max_new_tokens=256, return_dict_in_generate=True)\nper_token = sum(t.nbytes for layer in out.past_key_values for t in layer) / out.sequences.shape[1]\nassert weight_bytes + per_token * 32_000 + activations < budget",
    threshold: "confirmed when, on the same prompt and tokens, the int4 run's KV cache and its weights outside the linear layers (embeddings, norms, head) equal the unquantized run's to the byte while its linear layers take at most 0.35× their unquantized bytes (int4 in groups of 64, scales and zeros in the activations' dtype: 0.28× of bf16, 0.16× of fp32). The activations at the peak are reported, not judged. The position at which the cache passes the weights is computed from the formula, for this shape and the Llama-3.1-8B shape. Regime: any device (bf16 activations on CUDA, the only dtype its int4 kernel takes; fp32 on a CPU); bytes repeat exactly",
    question: ratio("The setup's decoder, same prompt and tokens: the KV cache of the run with int4 linear weights, against the KV cache of the run with unquantized weights?", INT4_KV_CACHE, UNQUANTIZED_KV_CACHE, SAME_BYTES),
    experiment: int4_and_the_kv_cache,
};

/// What int4-and-the-kv-cache runs: the unquantized generation, then the int4 one.
pub(super) fn int4_and_the_kv_cache_plan(ctx: &Ctx) -> (RunSpec, RunSpec) {
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

pub(super) fn int4_and_the_kv_cache_setup(ctx: &Ctx) -> Vec<String> {
    let (plain, int4) = int4_and_the_kv_cache_plan(ctx);
    let g = int4.generate.as_ref().map(|g| g.quant()).unwrap_or(protocol::LinearQuant::NONE);
    vec![
        with_activations(&plain),
        format!(
            "Two runs: unquantized {} weights; the blocks' linear layers quantized to weight-only int4 in groups of {} (a scale and a zero per group)",
            plain.advanced.weights.as_str(),
            g.group_size().unwrap_or(protocol::DEFAULT_GROUP_SIZE),
        ),
        shape(plain.model),
        format!("inference_mode, greedy decoding; after the last token each sequence holds {} positions", held_positions(&plain)),
        "Measured: the weights (linear layers and the rest), the KV cache from its tensors, and the activations at the peak".into(),
    ]
}

pub(super) fn int4_and_the_kv_cache(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let (plain_spec, int4_spec) = int4_and_the_kv_cache_plan(ctx);
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
        let q = protocol::LinearQuant::Int4 { group_size: 64 };
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
            fig(UNQUANTIZED_LINEAR_LAYERS, p.0 as f64),
            fig(INT4_LINEAR_LAYERS, q.0 as f64),
            fig(UNQUANTIZED_OTHER_WEIGHTS, p.1 as f64),
            fig(INT4_OTHER_WEIGHTS, q.1 as f64),
            fig(UNQUANTIZED_KV_CACHE, p.2 as f64),
            fig(INT4_KV_CACHE, q.2 as f64),
            fig(UNQUANTIZED_ACTIVATIONS_AT_THE_PEAK, activations_at_peak(&plain) as f64),
            fig(INT4_ACTIVATIONS_AT_THE_PEAK, activations_at_peak(&int4) as f64),
            fig(TOKENS_AT_WHICH_THE_CACHE_PASSES_THE_WEIGHTS_UNQUANTIZED, crossover(plain_w, per_token) as f64),
            fig(TOKENS_AT_WHICH_THE_CACHE_PASSES_THE_WEIGHTS_INT4, crossover(int4_w, per_token) as f64),
        ])
        .series(vec![series(UNQUANTIZED, x.clone(), bars(p, &plain)), series(INT4_GROUPS_OF_64, x, bars(q, &int4))])
        .notes(notes))
}
