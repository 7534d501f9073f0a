//! The `sliding-window-kv` card ([`SLIDING_WINDOW_KV`]): A sliding-window decoder's cache stops growing in its sliding layers: the every-layer formula over-counts it

use super::*;

// The figures this file's cards report, each defined once (see `kit::figure`).
pub const POSITIONS_HELD_BY_A_SLIDING_LAYER_LONGEST_CONTEXT: FigureName = FigureName::new("positions held by a sliding layer, longest context", Unit::Count);
pub const MEASURED_KV_CACHE_LONGEST_CONTEXT: FigureName = FigureName::new("measured KV cache, longest context", Unit::Bytes);
pub const EVERY_LAYER_FORMULA_LONGEST_CONTEXT: FigureName = FigureName::new("every-layer formula, longest context", Unit::Bytes);
pub const SLIDING_LAYERS: FigureName = FigureName::new("sliding layers", Unit::Count);
pub const GEMMA_3_1B_SHAPE_32_768_TOKENS_BF16_EVERY_LAYER_FORMULA: FigureName = FigureName::new("Gemma-3-1B shape, 32,768 tokens, bf16: every-layer formula", Unit::Bytes);
pub const EVERY_LAYER_FORMULA: FigureName = FigureName::new("every-layer formula", Unit::Kib);
pub const POSITIONS_HELD_BY_A_FULL_LAYER_LONGEST_CONTEXT: FigureName = FigureName::new("positions held by a full layer, longest context", Unit::Count);
pub const WINDOW: FigureName = FigureName::new("window", Unit::Count);
pub const FULL_LAYERS: FigureName = FigureName::new("full layers", Unit::Count);
pub const LARGEST_DIFFERENCE_FROM_THE_PER_LAYER_TYPE_FORMULA: FigureName = FigureName::new("largest difference from the per-layer-type formula", Unit::Bytes);
pub const GEMMA_3_1B_SHAPE_32_768_TOKENS_BF16_HELD: FigureName = FigureName::new("Gemma-3-1B shape, 32,768 tokens, bf16: held", Unit::Bytes);
pub const MEASURED_KV_CACHE: FigureName = FigureName::new("measured KV cache", Unit::Kib);

pub const SLIDING_WINDOW_KV: Card = Card {
    id: "sliding-window-kv",
    title: "A sliding-window decoder's cache stops growing in its sliding layers: the every-layer formula over-counts it",
    asks: "On a decoder whose layers mostly attend to a sliding window of recent positions, how many bytes does the KV cache hold at a long context, against 2 × layers × kv_heads × head_dim × tokens × batch × bytes?",
    labels: ["cache bytes from the every-layer formula", "cache bytes measured from the cache's tensors"],
    setup: sliding_window_kv_setup,
    needs: Needs::Any,
    claim: "In a sliding-window decoder only the full layers' cache grows with the context: a sliding layer keeps at most its window, so the formula that counts every layer at full length over-counts, by up to layers / full layers at long contexts (6.5× for Gemma-3-1B's 26 layers, 4 of them full).",
    statements: &[
        Said::run("A sliding layer's token attends only to the last window positions, itself included, so its cache keeps at most those: here each sliding layer held window − 1 positions between steps once the context passed the window (the next token's own key and value join at attention time).", &[POSITIONS_HELD_BY_A_SLIDING_LAYER_LONGEST_CONTEXT, WINDOW]),
        Said::run("A full layer held every position fed.", &[POSITIONS_HELD_BY_A_FULL_LAYER_LONGEST_CONTEXT]),
        Said::run("At every length the cache measured from its tensors equalled the per-layer-type formula to the byte: full layers × positions plus sliding layers × min(positions, window − 1).", &[LARGEST_DIFFERENCE_FROM_THE_PER_LAYER_TYPE_FORMULA]),
        Said::run("So at the longest context it was a fraction of the every-layer formula, which counts every layer at full length; past the window only the full layers grow, so the formula's excess rises with the context towards layers / full layers.", &[MEASURED_KV_CACHE_LONGEST_CONTEXT, EVERY_LAYER_FORMULA_LONGEST_CONTEXT, SLIDING_LAYERS, FULL_LAYERS]),
        Said::run("For the Gemma-3-1B shape at 32,768 tokens in bf16 (22 sliding layers over 512 positions, 4 full), computed from the same formulas: 872 MB by the every-layer formula, 146 MB held.", &[GEMMA_3_1B_SHAPE_32_768_TOKENS_BF16_EVERY_LAYER_FORMULA, GEMMA_3_1B_SHAPE_32_768_TOKENS_BF16_HELD]),
    ],
    source: "https://huggingface.co/docs/transformers/main/en/kv_cache",
    pitfall: "kv = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * tokens * batch * 2",
    fix: "cache = DynamicCache(config=model.config)\nmodel.generate(ids, max_new_tokens=n, past_key_values=cache)\nkv = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)",
    threshold: "confirmed when, at every length, the cache measured from its tensors equals the per-layer-type formula to the byte and the sliding layers hold min(positions, window − 1) (flat once the context passes the window), while at the longest context the measured cache is below the every-layer formula. Regime: any device",
    question: crate::pitfalls::ratio(
        "The setup's sliding-window decoder at its longest context: the KV cache measured from its tensors, as a multiple of the formula that counts every layer at full length?",
        MEASURED_KV_CACHE_LONGEST_CONTEXT,
        EVERY_LAYER_FORMULA_LONGEST_CONTEXT,
        Ask::LogScale { min: 0.01, max: 10.0, within: 1.5 },
    ),
    experiment: sliding_window_kv,
};

/// What sliding-window-kv runs: one sliding-window decoder at five lengths, from below its
/// window to several windows past it (the tiny Gemma 3 on a CPU, the Gemma-3-1B shape on a
/// GPU), batch 1, dynamic cache, no_grad.
pub(super) fn sliding_window_kv_plan(ctx: &Ctx) -> Vec<RunSpec> {
    let model = decoder(ctx, "gemma3_tiny", "gemma3_1b");
    let window = model.decoder().and_then(|d| d.config.sliding_window).unwrap_or(32);
    let n = 9;
    // Held positions: prompt + 8. Half a window, one, two, four and eight.
    [window / 2, window, 2 * window, 4 * window, 8 * window]
        .into_iter()
        .map(|held| gen_spec(ctx, model, 1, held.saturating_sub(n - 1).max(1), n, KvCacheKind::Dynamic, GradMode::NoGrad))
        .collect()
}

pub(super) fn sliding_window_kv_describe(specs: &[RunSpec]) -> String {
    let model = specs.first().map_or_else(|| "?".to_string(), |s| s.model.display_name());
    let prompts: Vec<String> = specs.iter().map(|s| s.resolved_input_size().to_string()).collect();
    format!("{model}, batch 1, prompts of {} + 9 new tokens, dynamic cache, no_grad", prompts.join(", "))
}

/// "6 layers: 5 sliding over 32 positions, 1 full; 1 KV head of 64": the layers by type.
pub(super) fn layer_line(c: &DecoderConfig) -> String {
    let (full, sliding) = (c.layers_of(LayerType::Full), c.layers_of(LayerType::Sliding));
    format!(
        "{} layers: {sliding} sliding over the last {} positions, {full} full; {} KV heads of head_dim {}",
        c.num_hidden_layers,
        c.sliding_window.unwrap_or(0),
        c.num_key_value_heads,
        c.head_dim
    )
}

pub(super) fn sliding_window_kv_setup(ctx: &Ctx) -> Vec<String> {
    let specs = sliding_window_kv_plan(ctx);
    let mut lines = vec![sliding_window_kv_describe(&specs)];
    if let Some(s) = specs.first() {
        lines.push(super::super::shape(s.model));
        if let Some(d) = s.model.decoder() {
            lines.push(layer_line(&d.config));
        }
        let (dtype, elt) = cache_dtype(s);
        lines.push(format!("KV cache in {dtype}: {elt} bytes per element, keys and values"));
    }
    let held: Vec<String> = specs.iter().map(|s| super::super::held_positions(s).to_string()).collect();
    lines.push(format!(
        "After the last token each sequence has fed {} positions. Measured: each layer's cache from its tensors, beside the formula that counts every layer at full length",
        held.join(", ")
    ));
    lines
}

pub(super) fn sliding_window_kv(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
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
        let positions = super::super::held_positions(spec);
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
        fig(MEASURED_KV_CACHE_LONGEST_CONTEXT, measured[last] as f64),
        fig(EVERY_LAYER_FORMULA_LONGEST_CONTEXT, naive[last] as f64),
        fig(POSITIONS_HELD_BY_A_SLIDING_LAYER_LONGEST_CONTEXT, sliding_last as f64),
        fig(POSITIONS_HELD_BY_A_FULL_LAYER_LONGEST_CONTEXT, full_last as f64),
        fig(WINDOW, window as f64),
        fig(SLIDING_LAYERS, c.layers_of(LayerType::Sliding) as f64),
        fig(FULL_LAYERS, c.layers_of(LayerType::Full) as f64),
        fig(LARGEST_DIFFERENCE_FROM_THE_PER_LAYER_TYPE_FORMULA, largest_difference as f64),
    ];
    if let Some(g) = &gemma {
        figures.push(fig(GEMMA_3_1B_SHAPE_32_768_TOKENS_BF16_EVERY_LAYER_FORMULA, g.kv_cache_bytes(gemma_t, 1, 2) as f64));
        figures.push(fig(GEMMA_3_1B_SHAPE_32_768_TOKENS_BF16_HELD, g.kv_cache_held_bytes(gemma_t, 1, 2, SlidingHold::Rolled) as f64));
    }
    Ok(Outcome::new(decision, sliding_window_kv_describe(&specs), ChartKind::Line)
        .figures(figures)
        .series(vec![
            series(MEASURED_KV_CACHE, x.clone(), kib(&measured)),
            series(EVERY_LAYER_FORMULA, x, kib(&naive)),
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
