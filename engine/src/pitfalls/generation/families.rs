//! The generation cards about the decoder families teams serve now: a sliding-window
//! model's cache (`sliding-window-kv`), a mixture of experts' memory (`moe-memory-is-total`)
//! and what its decode steps read as the batch grows (`moe-batch-reads-more`).

use protocol::decoder::{DecoderConfig, LayerType, SlidingHold};
use protocol::{ChartKind, GenerationReport, GradMode, KvCacheKind, ModelId, RunFailure, RunSpec, Table};

use super::super::kit::{fig, series, Ctx, Decision, Outcome};
use super::super::{Ask, Card, Needs, Said};
use super::{cache_dtype, decoder, dtypes, gen_spec, generate, rules, weights_dtype};
use crate::lab::Lab;
use crate::torch_call::failure;

/// The decoder's config, or a failure naming the model.
fn config_of(model: ModelId) -> Result<DecoderConfig, RunFailure> {
    model
        .decoder()
        .map(|d| d.config.clone())
        .ok_or_else(|| failure(protocol::FailureKind::Invalid, format!("{model} is not a decoder")))
}

/// "98,304", "1.4 M", "30.53 B": a parameter count for a sentence.
fn count(n: u64) -> String {
    match n {
        1_000_000_000.. => format!("{:.2} B", n as f64 / 1e9),
        1_000_000.. => format!("{:.1} M", n as f64 / 1e6),
        _ => {
            let s = n.to_string();
            let mut out = String::new();
            for (i, c) in s.chars().enumerate() {
                if i > 0 && (s.len() - i) % 3 == 0 {
                    out.push(',');
                }
                out.push(c);
            }
            out
        }
    }
}

pub const SLIDING_WINDOW_KV: Card = Card {
    id: "sliding-window-kv",
    title: "A sliding-window decoder's cache stops growing in its sliding layers: the every-layer formula over-counts it",
    asks: "On a decoder whose layers mostly attend to a sliding window of recent positions, how many bytes does the KV cache hold at a long context, against 2 × layers × kv_heads × head_dim × tokens × batch × bytes?",
    labels: ["cache bytes from the every-layer formula", "cache bytes measured from the cache's tensors"],
    setup: sliding_window_kv_setup,
    needs: Needs::Any,
    claim: "In a sliding-window decoder only the full layers' cache grows with the context: a sliding layer keeps at most its window, so the formula that counts every layer at full length over-counts, by up to layers / full layers at long contexts (6.5× for Gemma-3-1B's 26 layers, 4 of them full).",
    statements: &[
        Said::run("A sliding layer's token attends only to the last window positions, itself included, so its cache keeps at most those: here each sliding layer held window − 1 positions between steps once the context passed the window (the next token's own key and value join at attention time).", &["positions held by a sliding layer, longest context", "window"]),
        Said::run("A full layer held every position fed.", &["positions held by a full layer, longest context"]),
        Said::run("At every length the cache measured from its tensors equalled the per-layer-type formula to the byte: full layers × positions plus sliding layers × min(positions, window − 1).", &["largest difference from the per-layer-type formula"]),
        Said::run("So at the longest context it was a fraction of the every-layer formula, which counts every layer at full length; past the window only the full layers grow, so the formula's excess rises with the context towards layers / full layers.", &["measured KV cache, longest context", "every-layer formula, longest context", "sliding layers", "full layers"]),
        Said::run("For the Gemma-3-1B shape at 32,768 tokens in bf16 (22 sliding layers over 512 positions, 4 full), computed from the same formulas: 872 MB by the every-layer formula, 146 MB held.", &["Gemma-3-1B shape, 32,768 tokens, bf16: every-layer formula", "Gemma-3-1B shape, 32,768 tokens, bf16: held"]),
    ],
    source: "https://huggingface.co/docs/transformers/main/en/kv_cache",
    pitfall: "kv = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * tokens * batch * 2",
    fix: "cache = DynamicCache(config=model.config)\nmodel.generate(ids, max_new_tokens=n, past_key_values=cache)\nkv = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)",
    threshold: "confirmed when, at every length, the cache measured from its tensors equals the per-layer-type formula to the byte and the sliding layers hold min(positions, window − 1) (flat once the context passes the window), while at the longest context the measured cache is below the every-layer formula. Regime: any device",
    question: crate::pitfalls::ratio(
        "The setup's sliding-window decoder at its longest context: the KV cache measured from its tensors, as a multiple of the formula that counts every layer at full length?",
        "measured KV cache, longest context",
        "every-layer formula, longest context",
        Ask::LogScale { min: 0.01, max: 10.0, within: 1.5 },
    ),
    experiment: sliding_window_kv,
};

/// What sliding-window-kv runs: one sliding-window decoder at five lengths, from below its
/// window to several windows past it (the tiny Gemma 3 on a CPU, the Gemma-3-1B shape on a
/// GPU), batch 1, dynamic cache, no_grad.
fn sliding_window_kv_plan(ctx: &Ctx) -> Vec<RunSpec> {
    let model = decoder(ctx, "gemma3_tiny", "gemma3_1b");
    let window = model.decoder().and_then(|d| d.config.sliding_window).unwrap_or(32);
    let n = 9;
    // Held positions: prompt + 8. Half a window, one, two, four and eight.
    [window / 2, window, 2 * window, 4 * window, 8 * window]
        .into_iter()
        .map(|held| gen_spec(ctx, model, 1, held.saturating_sub(n - 1).max(1), n, KvCacheKind::Dynamic, GradMode::NoGrad))
        .collect()
}

fn sliding_window_kv_describe(specs: &[RunSpec]) -> String {
    let model = specs.first().map_or_else(|| "?".to_string(), |s| s.model.display_name());
    let prompts: Vec<String> = specs.iter().map(|s| s.resolved_input_size().to_string()).collect();
    format!("{model}, batch 1, prompts of {} + 9 new tokens, dynamic cache, no_grad", prompts.join(", "))
}

/// "6 layers: 5 sliding over 32 positions, 1 full; 1 KV head of 64": the layers by type.
fn layer_line(c: &DecoderConfig) -> String {
    let (full, sliding) = (c.layers_of(LayerType::Full), c.layers_of(LayerType::Sliding));
    format!(
        "{} layers: {sliding} sliding over the last {} positions, {full} full; {} KV heads of head_dim {}",
        c.num_hidden_layers,
        c.sliding_window.unwrap_or(0),
        c.num_key_value_heads,
        c.head_dim
    )
}

fn sliding_window_kv_setup(ctx: &Ctx) -> Vec<String> {
    let specs = sliding_window_kv_plan(ctx);
    let mut lines = vec![sliding_window_kv_describe(&specs)];
    if let Some(s) = specs.first() {
        lines.push(super::shape(s.model));
        if let Some(d) = s.model.decoder() {
            lines.push(layer_line(&d.config));
        }
        let (dtype, elt) = cache_dtype(s);
        lines.push(format!("KV cache in {dtype}: {elt} bytes per element, keys and values"));
    }
    let held: Vec<String> = specs.iter().map(|s| super::held_positions(s).to_string()).collect();
    lines.push(format!(
        "After the last token each sequence has fed {} positions. Measured: each layer's cache from its tensors, beside the formula that counts every layer at full length",
        held.join(", ")
    ));
    lines
}

fn sliding_window_kv(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let specs = sliding_window_kv_plan(ctx);
    let model = specs[0].model;
    let c = config_of(model)?;
    let window = c.sliding_window.unwrap_or(0) as u64;
    let elt = cache_dtype(&specs[0]).1;
    let (mut rows, mut measured, mut naive, mut held) = (vec![], vec![], vec![], vec![]);
    // The positions a sliding and a full layer held at the last length, measured.
    let mut held_by_type = (0u64, 0u64);
    let mut exact = true;
    let mut largest_difference = 0u64;
    for spec in &specs {
        ctx.check()?;
        let (_, g) = generate(lab, ctx, spec.clone())?;
        let positions = super::held_positions(spec);
        let of = |t: LayerType| g.kv_cache_by_layer_type.iter().find(|s| s.layer_type == t);
        let sliding = of(LayerType::Sliding).map_or(0, |s| s.positions);
        let full = of(LayerType::Full).map_or(0, |s| s.positions);
        let formula = c.kv_cache_held_bytes(positions, 1, elt, SlidingHold::Trimmed);
        largest_difference = largest_difference.max(g.kv_cache_bytes.abs_diff(formula));
        exact &= g.kv_cache_bytes == formula
            && g.kv_cache_by_layer_type.iter().all(|s| s.bytes == s.formula_bytes)
            && sliding == positions.min(window.saturating_sub(1))
            && g.kv_cache_naive_bytes == c.kv_cache_bytes(positions, 1, elt);
        rows.push(vec![
            positions.to_string(),
            full.to_string(),
            sliding.to_string(),
            protocol::format_bytes(g.kv_cache_bytes),
            protocol::format_bytes(formula),
            protocol::format_bytes(g.kv_cache_naive_bytes),
        ]);
        measured.push(g.kv_cache_bytes);
        naive.push(g.kv_cache_naive_bytes);
        held.push(positions);
        held_by_type = (sliding, full);
    }
    let (sliding_last, full_last) = held_by_type;
    let last = measured.len() - 1;
    let below = measured[last] < naive[last];
    let ratio = measured[last] as f64 / naive[last].max(1) as f64;
    let decision = Decision::rule(
        exact && below,
        format!(
            "At {} positions the cache holds {} against the every-layer formula's {} (×{ratio:.2}): its {} sliding layers stopped at {} positions (window − 1) once the context passed the window of {window}, and every length's cache equals the per-layer-type formula to the byte.",
            held[last],
            protocol::format_bytes(measured[last]),
            protocol::format_bytes(naive[last]),
            c.layers_of(LayerType::Sliding),
            window.saturating_sub(1)
        ),
        format!("Measured {measured:?} against the every-layer formula's {naive:?} (see the table)."),
    );
    let mut notes = vec![format!(
        "Crossover: below the window ({window} positions) every layer grows with the context and the two formulas agree; past it only the {} full layer(s) grow, so the every-layer formula's excess rises with the context towards layers / full layers = ×{:.1}.",
        c.layers_of(LayerType::Full),
        c.num_hidden_layers as f64 / c.layers_of(LayerType::Full).max(1) as f64
    )];
    notes.push("A growing cache keeps window − 1 positions in a sliding layer between steps (the next token's own key and value join at attention time), as transformers' DynamicSlidingWindowLayer does; a static one allocates the window and rolls it.".into());
    let gemma = protocol::decoder::preset("gemma3_1b").map(|d| d.config.clone());
    let gemma_t = 32_768;
    if let Some(g) = &gemma {
        notes.push(format!(
            "Gemma-3-1B shape at {gemma_t} tokens in bf16 (computed from the formulas): every-layer formula {}, held {} (4 full layers at {gemma_t} positions, 22 sliding at their window of 512).",
            protocol::format_bytes(g.kv_cache_bytes(gemma_t, 1, 2)),
            protocol::format_bytes(g.kv_cache_held_bytes(gemma_t, 1, 2, SlidingHold::Rolled))
        ));
    }
    let x: Vec<String> = held.iter().map(|p| p.to_string()).collect();
    let kib = |v: &[u64]| v.iter().map(|&b| b as f64 / 1024.0).collect::<Vec<_>>();
    let mut figures = vec![
        fig("measured KV cache, longest context", measured[last] as f64, "bytes"),
        fig("every-layer formula, longest context", naive[last] as f64, "bytes"),
        fig("positions held by a sliding layer, longest context", sliding_last as f64, "count"),
        fig("positions held by a full layer, longest context", full_last as f64, "count"),
        fig("window", window as f64, "count"),
        fig("sliding layers", c.layers_of(LayerType::Sliding) as f64, "count"),
        fig("full layers", c.layers_of(LayerType::Full) as f64, "count"),
        fig("largest difference from the per-layer-type formula", largest_difference as f64, "bytes"),
    ];
    if let Some(g) = &gemma {
        figures.push(fig("Gemma-3-1B shape, 32,768 tokens, bf16: every-layer formula", g.kv_cache_bytes(gemma_t, 1, 2) as f64, "bytes"));
        figures.push(fig("Gemma-3-1B shape, 32,768 tokens, bf16: held", g.kv_cache_held_bytes(gemma_t, 1, 2, SlidingHold::Rolled) as f64, "bytes"));
    }
    Ok(Outcome::new(decision, sliding_window_kv_describe(&specs), ChartKind::Line)
        .figures(figures)
        .series(vec![
            series("measured KV cache", "KiB", x.clone(), kib(&measured)),
            series("every-layer formula", "KiB", x, kib(&naive)),
        ])
        .table(Table {
            columns: vec![
                "positions fed".into(),
                "full layer holds".into(),
                "sliding layer holds".into(),
                "measured".into(),
                "per-layer-type formula".into(),
                "every-layer formula".into(),
            ],
            rows,
        })
        .notes(notes))
}

pub const MOE_MEMORY_IS_TOTAL: Card = Card {
    id: "moe-memory-is-total",
    title: "A mixture of experts holds every expert: its memory follows the total parameters, not the active ones",
    asks: "How many bytes does a mixture-of-experts decoder's weights take in memory, against the bytes of the parameters one token uses (its active parameters)?",
    labels: ["memory from the active parameters' bytes", "memory from every parameter's bytes"],
    setup: moe_memory_setup,
    needs: Needs::Any,
    claim: "A mixture of experts keeps every expert's weights in memory whatever the router picks: its weights take its total parameters' bytes, several times its active parameters' (the Qwen3-30B-A3B shape: 30.5 B parameters held for 3.35 B active per token).",
    statements: &[
        Said::run("Every expert of every layer is held in memory: the weights measured from the model's tensors equal every parameter's bytes, to the byte.", &["weights in memory", "every parameter's bytes", "every expert's bytes"]),
        Said::run("A token uses only the router's top-k experts in each MoE layer besides the dense parts: its active parameters.", &["active parameters", "one token's experts' bytes"]),
        Said::run("So the weights take several times the active parameters' bytes: memory follows the total parameters, the work per token the active ones.", &["weights in memory", "active parameters' bytes"]),
        Said::run("For the Qwen3-30B-A3B shape (computed from its config): about 30.5 B parameters held for about 3.35 B active per token.", &["Qwen3-30B-A3B shape: parameters", "Qwen3-30B-A3B shape: active parameters"]),
        Said::run("For the Mixtral-8x7B shape: about 46.7 B held for about 12.9 B active.", &["Mixtral-8x7B shape: parameters", "Mixtral-8x7B shape: active parameters"]),
    ],
    source: "https://arxiv.org/abs/2401.04088",
    pitfall: "params = cfg_active_params\nneed_bytes = params * bytes_per_param",
    fix: "params = sum(p.numel() for p in model.parameters())\nneed_bytes = params * bytes_per_param",
    threshold: "confirmed when the weights measured in memory equal every parameter's bytes to the byte (every expert held) and exceed the active parameters' bytes by more than 1.5×. Regime: any device",
    question: crate::pitfalls::ratio(
        "The setup's mixture of experts: the bytes its weights take in memory, as a multiple of the bytes of its active parameters (the parameters one token uses)?",
        "weights in memory",
        "active parameters' bytes",
        Ask::LogScale { min: 0.1, max: 100.0, within: 1.5 },
    ),
    experiment: moe_memory,
};

/// What moe-memory-is-total runs: one generation on the tiny Qwen3-MoE (batch 1, prompt 16
/// + 9 new tokens, dynamic cache, no_grad).
fn moe_memory_plan(ctx: &Ctx) -> RunSpec {
    let model = decoder(ctx, "qwen3_moe_tiny", "qwen3_moe_tiny");
    gen_spec(ctx, model, 1, 16, 9, KvCacheKind::Dynamic, GradMode::NoGrad)
}

/// "16 experts per layer 128 wide, top 2 per token, in 4 layers": the mixture's shape.
fn moe_line(c: &DecoderConfig) -> String {
    match &c.moe {
        Some(m) => format!(
            "{} experts per layer, each a gated MLP {} wide ({} parameters); the router picks {} per token, in {} layers",
            m.num_experts,
            m.expert_intermediate_size,
            count(c.expert_parameters()),
            m.num_experts_per_tok,
            c.moe_layers()
        ),
        None => "not a mixture of experts".into(),
    }
}

fn moe_memory_setup(ctx: &Ctx) -> Vec<String> {
    let s = moe_memory_plan(ctx);
    let mut lines = vec![super::setup(&s), super::shape(s.model)];
    if let Some(d) = s.model.decoder() {
        lines.push(moe_line(&d.config));
    }
    lines.push(format!(
        "{}; measured: the weights' bytes in memory, from the model's tensors, beside the parameters one token uses",
        dtypes(&s)
    ));
    lines
}

fn moe_memory(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let spec = moe_memory_plan(ctx);
    let (_, elt) = weights_dtype(&spec);
    let (_, g) = generate(lab, ctx, spec.clone())?;
    let m = g
        .moe
        .clone()
        .ok_or_else(|| failure(protocol::FailureKind::Internal, "a mixture of experts without its figures"))?;
    // Measured from the model's tensors (the report's `weights_bytes` is what a decode step
    // reads: one embedding row per token, not the table).
    let held = g.weights_breakdown.map_or(0, |w| w.linear_bytes + w.other_bytes);
    let total = m.total_parameters * elt;
    let active = m.active_parameters * elt;
    let ratio = held as f64 / active.max(1) as f64;
    let decision = Decision::rule(
        held == total && ratio > 1.5,
        format!(
            "Its weights take {} in memory, every parameter's bytes to the byte ({} parameters), ×{ratio:.2} the {} of the {} parameters one token uses: all {} experts of every layer are held, {} of them.",
            protocol::format_bytes(held),
            count(m.total_parameters),
            protocol::format_bytes(active),
            count(m.active_parameters),
            m.num_experts,
            protocol::format_bytes(m.experts_bytes)
        ),
        format!(
            "Weights in memory {} against every parameter's {} and the active parameters' {}.",
            protocol::format_bytes(held),
            protocol::format_bytes(total),
            protocol::format_bytes(active)
        ),
    );
    let mut notes = vec![format!(
        "Each token reads {} of expert weights (its top {} in each of {} layers) of the {} held.",
        protocol::format_bytes(m.active_expert_bytes),
        m.num_experts_per_tok,
        m.moe_layers,
        protocol::format_bytes(m.experts_bytes)
    )];
    let mut shapes = vec![];
    for (name, label) in [("qwen3_30b_a3b", "Qwen3-30B-A3B shape"), ("mixtral_8x7b", "Mixtral-8x7B shape")] {
        if let Some(d) = protocol::decoder::preset(name) {
            let p = &d.config;
            shapes.push(fig(&format!("{label}: parameters"), p.parameters() as f64, "count"));
            shapes.push(fig(&format!("{label}: active parameters"), p.active_parameters() as f64, "count"));
            notes.push(format!(
                "{} (computed from its config, bf16): {} parameters held, {}; {} active per token, {} — ×{:.1}.",
                d.display_name,
                count(p.parameters()),
                protocol::format_bytes(p.parameters() * 2),
                count(p.active_parameters()),
                protocol::format_bytes(p.active_parameters() * 2),
                p.parameters() as f64 / p.active_parameters() as f64
            ));
        }
    }
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let mut figures = vec![
        fig("weights in memory", held as f64, "bytes"),
        fig("active parameters' bytes", active as f64, "bytes"),
        fig("every parameter's bytes", total as f64, "bytes"),
        fig("every expert's bytes", m.experts_bytes as f64, "bytes"),
        fig("one token's experts' bytes", m.active_expert_bytes as f64, "bytes"),
        fig("parameters", m.total_parameters as f64, "count"),
        fig("active parameters", m.active_parameters as f64, "count"),
    ];
    figures.extend(shapes);
    Ok(Outcome::new(decision, super::setup(&spec), ChartKind::Bar)
        .figures(figures)
        .series(vec![series(
            "bytes",
            "MiB",
            vec!["weights in memory".into(), "active parameters".into(), "every expert".into(), "one token's experts".into()],
            vec![mib(held), mib(active), mib(m.experts_bytes), mib(m.active_expert_bytes)],
        )])
        .notes(notes))
}

pub const MOE_BATCH_READS_MORE: Card = Card {
    id: "moe-batch-reads-more",
    title: "A batch reads more experts per decode step: the active-parameters bandwidth estimate holds at batch 1 only",
    asks: "As the batch grows, how many distinct experts does each decode step of a mixture of experts read per layer, and how many bytes of expert weights?",
    labels: ["bytes per step from one token's top-k experts", "bytes per step from the distinct experts the batch's tokens chose"],
    setup: moe_batch_setup,
    needs: Needs::Any,
    claim: "At batch 1 a decode step runs only the top-k experts of each layer; a batch routes its tokens to more and more distinct experts, so a step reads more expert bytes as the batch grows, towards every expert: an estimate from the active parameters' bytes holds at batch 1 only.",
    statements: &[
        Said::run("At batch 1 a decode step ran exactly the router's top-k experts in each MoE layer.", &["distinct experts per layer per step, batch 1"]),
        Said::run("Each token of a batch picks its own top-k and the step runs every expert any of them picked: at the largest batch a step ran several times as many distinct experts per layer, out of the layer's experts.", &["distinct experts per layer per step, largest batch", "experts per layer"]),
        Said::run("Were the picks uniformly random, the largest batch would touch experts × (1 − (1 − k / experts)^batch) of them per layer: the measured count is reported beside it.", &["distinct experts per layer per step, largest batch, uniform random picks"]),
        Said::run("So the expert bytes a step reads grew with the batch, towards every expert's bytes: an estimate from the active parameters' bytes holds at batch 1 only.", &["expert bytes read per step, batch 1", "expert bytes read per step, largest batch"]),
    ],
    source: "https://arxiv.org/abs/2401.04088",
    pitfall: "bytes_per_step = active_params * bytes_per_param\ntok_s = bandwidth / bytes_per_step * batch",
    fix: "experts = distinct_experts_per_layer(batch)\nbytes_per_step = (dense_params + experts * expert_params * moe_layers) * bytes_per_param\ntok_s = bandwidth / bytes_per_step * batch",
    threshold: "confirmed when a decode step at batch 1 reads exactly top-k experts per layer, and at the largest batch more than twice as many distinct experts and expert bytes (counted from the router's choices, the bytes measured from the experts' tensors). Step time is reported, not judged: at this size a step is mostly per-op cost on any device. Regime: any device",
    question: crate::pitfalls::ratio(
        "The setup's mixture of experts: the expert bytes a decode step reads at the largest batch, as a multiple of batch 1's?",
        "expert bytes read per step, largest batch",
        "expert bytes read per step, batch 1",
        Ask::LogScale { min: 0.5, max: 100.0, within: 1.5 },
    ),
    experiment: moe_batch,
};

/// The batches moe-batch-reads-more sweeps.
const MOE_BATCHES: [u32; 5] = [1, 2, 4, 8, 16];

/// What moe-batch-reads-more runs: the tiny Qwen3-MoE at five batches (prompt 8 + 9 new
/// tokens, dynamic cache, no_grad).
fn moe_batch_plan(ctx: &Ctx) -> Vec<RunSpec> {
    let model = decoder(ctx, "qwen3_moe_tiny", "qwen3_moe_tiny");
    MOE_BATCHES
        .into_iter()
        .map(|b| gen_spec(ctx, model, b, 8, 9, KvCacheKind::Dynamic, GradMode::NoGrad))
        .collect()
}

fn moe_batch_describe(specs: &[RunSpec]) -> String {
    let model = specs.first().map_or_else(|| "?".to_string(), |s| s.model.display_name());
    let batches: Vec<String> = specs.iter().map(|s| s.batch.to_string()).collect();
    format!("{model}, batches {}, prompt 8 + 9 new tokens, dynamic cache, no_grad", batches.join(", "))
}

fn moe_batch_setup(ctx: &Ctx) -> Vec<String> {
    let specs = moe_batch_plan(ctx);
    let mut lines = vec![moe_batch_describe(&specs)];
    if let Some(s) = specs.first() {
        lines.push(super::shape(s.model));
        if let Some(d) = s.model.decoder() {
            lines.push(moe_line(&d.config));
        }
        lines.push(dtypes(s));
    }
    lines.push("Measured per decode step: the distinct experts the batch's tokens were routed to in each layer (from the router's choices), their bytes (from the experts' tensors), and the step's time".into());
    lines
}

fn moe_batch(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let specs = moe_batch_plan(ctx);
    let c = config_of(specs[0].model)?;
    let top_k = c.moe.as_ref().map_or(0, |m| m.num_experts_per_tok);
    let experts = c.moe.as_ref().map_or(0, |m| m.num_experts);
    let (mut rows, mut distinct, mut bytes, mut ms) = (vec![], vec![], vec![], vec![]);
    for spec in &specs {
        ctx.check()?;
        let (_, g): (_, GenerationReport) = generate(lab, ctx, spec.clone())?;
        let m = g
            .moe
            .clone()
            .ok_or_else(|| failure(protocol::FailureKind::Internal, "a mixture of experts without its figures"))?;
        let step_ms = rules::median(&super::decode_ms(&g));
        rows.push(vec![
            spec.batch.to_string(),
            format!("{:.2}", m.distinct_experts_mean),
            m.distinct_experts_max.to_string(),
            protocol::format_bytes(m.expert_bytes_read_mean as u64),
            format!("{step_ms:.2}"),
        ]);
        distinct.push(m.distinct_experts_mean);
        bytes.push(m.expert_bytes_read_mean);
        ms.push(step_ms);
    }
    let last = distinct.len() - 1;
    let at_one = (distinct[0] - top_k as f64).abs() < 1e-9;
    let grows = distinct[last] > 2.0 * distinct[0] && bytes[last] > 2.0 * bytes[0];
    let decision = Decision::rule(
        at_one && grows,
        format!(
            "At batch 1 each step read exactly {top_k} experts per layer ({}); at batch {} it read {:.1} of {experts} on average ({}), ×{:.1} the bytes.",
            protocol::format_bytes(bytes[0] as u64),
            MOE_BATCHES[last],
            distinct[last],
            protocol::format_bytes(bytes[last] as u64),
            bytes[last] / bytes[0].max(1.0)
        ),
        format!("Distinct experts per layer per step {distinct:?} over batches {MOE_BATCHES:?}, expected {top_k} at batch 1 and more than twice that at the largest."),
    );
    let x: Vec<String> = MOE_BATCHES.iter().map(|b| b.to_string()).collect();
    let kib: Vec<f64> = bytes.iter().map(|b| b / 1024.0).collect();
    let mut figures = vec![
        fig("expert bytes read per step, batch 1", bytes[0], "bytes"),
        fig("expert bytes read per step, largest batch", bytes[last], "bytes"),
        fig("distinct experts per layer per step, batch 1", distinct[0], "count"),
        fig("distinct experts per layer per step, largest batch", distinct[last], "count"),
        fig("experts per layer", experts as f64, "count"),
    ];
    let largest = MOE_BATCHES[last] as f64;
    let uniform = experts as f64 * (1.0 - (1.0 - top_k as f64 / experts.max(1) as f64).powf(largest));
    figures.push(fig("distinct experts per layer per step, largest batch, uniform random picks", uniform, "count"));
    figures.push(fig("decode step, batch 1", ms[0], "ms"));
    figures.push(fig("decode step, largest batch", ms[last], "ms"));
    Ok(Outcome::new(decision, moe_batch_describe(&specs), ChartKind::Line)
        .figures(figures)
        .series(vec![
            series("distinct experts per layer per step", "count", x.clone(), distinct.clone()),
            series("expert bytes read per step", "KiB", x, kib),
        ])
        .table(Table {
            columns: vec![
                "batch".into(),
                "distinct experts per layer (mean)".into(),
                "max in a layer".into(),
                "expert bytes read per step".into(),
                "decode step (ms, median)".into(),
            ],
            rows,
        })
        .notes(vec![format!(
            "Step time is the device's to decide: where a step is bound by reading its weights (a GPU at a real shape) its time follows its bytes; at this size a step is mostly per-op cost on any device, so its time moves less ({:.2} ms at batch 1, {:.2} ms at batch {}).",
            ms[0],
            ms[last],
            MOE_BATCHES[last]
        )]))
}
