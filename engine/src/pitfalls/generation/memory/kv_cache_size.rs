//! The `kv-cache-size` card ([`KV_CACHE_SIZE`]): The KV cache: 2 × layers × kv_heads × head_dim × tokens × batch × bytes

use super::*;

// The figures this file's cards report, each defined once (see `kit::figure`).
pub const MEASURED_KV_CACHE_MIB: FigureName = FigureName::new("measured KV cache", Unit::Mib);
pub const MEASURED_KV_CACHE_KIB: FigureName = FigureName::new("measured KV cache", Unit::Kib);
pub const LARGEST_DIFFERENCE_FROM_THE_FORMULA: FigureName = FigureName::new("largest difference from the formula", Unit::Bytes);
pub const WEIGHTS_BYTES: FigureName = FigureName::new("weights", Unit::Bytes);
pub const KV_CACHE_PER_TOKEN_PER_SEQUENCE: FigureName = FigureName::new("KV cache per token per sequence", Unit::Bytes);
pub const LLAMA_3_1_8B_SHAPE_BF16_KV_CACHE_PER_TOKEN: FigureName = FigureName::new("Llama-3.1-8B shape, bf16: KV cache per token", Unit::Bytes);
pub const LLAMA_3_1_8B_SHAPE_BF16_WEIGHTS: FigureName = FigureName::new("Llama-3.1-8B shape, bf16: weights", Unit::Bytes);
pub const TOKENS_AT_WHICH_THE_CACHE_PASSES_THE_WEIGHTS_BATCH_1: FigureName = FigureName::new("tokens at which the cache passes the weights (batch 1)", Unit::Count);
pub const KV_CACHE_BATCH_X_POSITIONS: FigureName = FigureName::new("KV cache, batch {} × {} positions", Unit::Bytes);
pub const LLAMA_3_1_8B_SHAPE_BF16_TOKENS_AT_WHICH_THE_CACHE_PASSES_THE_WEIGHTS: FigureName = FigureName::new("Llama-3.1-8B shape, bf16: tokens at which the cache passes the weights", Unit::Count);
pub const KV_CACHE_BATCH_1_X_24_POSITIONS: FigureName = KV_CACHE_BATCH_X_POSITIONS.instance("KV cache, batch 1 × 24 positions");
pub const KV_CACHE_BATCH_1_X_48_POSITIONS: FigureName = KV_CACHE_BATCH_X_POSITIONS.instance("KV cache, batch 1 × 48 positions");
pub const KV_CACHE_BATCH_2_X_24_POSITIONS: FigureName = KV_CACHE_BATCH_X_POSITIONS.instance("KV cache, batch 2 × 24 positions");
pub const KV_CACHE_BATCH_2_X_48_POSITIONS: FigureName = KV_CACHE_BATCH_X_POSITIONS.instance("KV cache, batch 2 × 48 positions");

pub const KV_CACHE_SIZE: Card = Card {
    id: "kv-cache-size",
    title: "The KV cache: 2 × layers × kv_heads × head_dim × tokens × batch × bytes",
    asks: "How many bytes does a decoder's KV cache take, and how does that grow with the context and the batch?",
    labels: ["memory budget from the weights' bytes", "memory budget from the weights' and the KV cache's bytes"],
    setup: kv_cache_size_setup,
    needs: Needs::Any,
    claim: "The KV cache is 2 × layers × kv_heads × head_dim × tokens × batch × bytes per element: linear in tokens and in batch, and at long contexts or large batches larger than the weights (for the Llama-3.1-8B shape in bf16, past about 122,500 tokens in all).",
    statements: &[
        Said::run("Measured from its tensors, the cache held exactly the formula's bytes at 24 and 48 positions, at batch 1 and 2: 2 (keys and values) × layers × KV heads × head_dim × positions × batch × bytes per element.", &[LARGEST_DIFFERENCE_FROM_THE_FORMULA, KV_CACHE_BATCH_1_X_24_POSITIONS, KV_CACHE_BATCH_2_X_48_POSITIONS]),
        Said::run("So doubling the positions or the batch doubled the cache exactly: it is linear in both.", &[KV_CACHE_BATCH_1_X_24_POSITIONS, KV_CACHE_BATCH_1_X_48_POSITIONS, KV_CACHE_BATCH_2_X_24_POSITIONS, KV_CACHE_BATCH_2_X_48_POSITIONS]),
        Said::run("One token of one sequence takes 2 × layers × KV heads × head_dim × bytes per element, over all the layers.", &[KV_CACHE_PER_TOKEN_PER_SEQUENCE]),
        Said::run("The cache passes the weights' bytes once batch × positions reaches the weights' bytes over one token's cache bytes.", &[WEIGHTS_BYTES, KV_CACHE_PER_TOKEN_PER_SEQUENCE, TOKENS_AT_WHICH_THE_CACHE_PASSES_THE_WEIGHTS_BATCH_1]),
        Said::run("For the Llama-3.1-8B shape in bf16, computed from the same formula, one token takes 128 KiB and the cache passes the 16 GB of weights at about 122,500 tokens: within one 128k-token sequence, or a batch of 16 at 8k.", &[LLAMA_3_1_8B_SHAPE_BF16_KV_CACHE_PER_TOKEN, LLAMA_3_1_8B_SHAPE_BF16_WEIGHTS, LLAMA_3_1_8B_SHAPE_BF16_TOKENS_AT_WHICH_THE_CACHE_PASSES_THE_WEIGHTS]),
    ],
    source: "https://arxiv.org/abs/2309.06180",
    pitfall: "batch = 64; context = 8192\nassert weights_bytes < budget",
    fix: "batch = 64; context = 8192\nkv_bytes = kv_bytes_per_token(cfg, dtype) * context * batch\nassert weights_bytes + kv_bytes < budget",
    threshold: "confirmed when the cache bytes measured from its tensors equal the formula to the byte at two lengths and two batches (so doubling either doubles the cache exactly). The context at which the cache passes the weights is computed from the formula, for this shape and the Llama-3.1-8B shape. Regime: any device",
    question: crate::pitfalls::value("The setup's decoder, its cache in the dtype the setup gives: how many bytes do the keys and values of one token of one sequence take, over all its layers?", KV_CACHE_PER_TOKEN_PER_SEQUENCE, crate::pitfalls::BYTES),
    experiment: kv_cache_size,
};

/// What kv-cache-size runs: four generations (batch 1 and 2, two lengths), in order.
pub(super) fn kv_cache_size_plan(ctx: &Ctx) -> Vec<RunSpec> {
    let model = decoder(ctx, protocol::decoder::CPU_PRESET, "llama_3_2_1b");
    [(1, 16, 9), (1, 32, 17), (2, 16, 9), (2, 32, 17)]
        .into_iter()
        .map(|(batch, prompt, n)| gen_spec(ctx, model, batch, prompt, n, KvCacheKind::Dynamic, GradMode::NoGrad))
        .collect()
}

/// "Tiny Llama ..., batch 1 and 2, prompt 16 and 32 + 9 and 17 new tokens, dynamic cache, no_grad".
pub(super) fn kv_cache_size_describe(specs: &[RunSpec]) -> String {
    let list = |f: &dyn Fn(&RunSpec) -> u32| {
        let mut v: Vec<u32> = specs.iter().map(f).collect();
        v.sort();
        v.dedup();
        v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(" and ")
    };
    let model = specs.first().map_or_else(|| "?".to_string(), |s| s.model.display_name());
    format!(
        "{model}, batch {}, prompt {} + {} new tokens, dynamic cache, no_grad",
        list(&|s| s.batch),
        list(&|s| s.resolved_input_size()),
        list(&|s| s.generate.as_ref().map_or(0, |g| g.new_tokens))
    )
}

pub(super) fn kv_cache_size_setup(ctx: &Ctx) -> Vec<String> {
    let specs = kv_cache_size_plan(ctx);
    let mut lines = vec![kv_cache_size_describe(&specs)];
    if let Some(s) = specs.first() {
        let (dtype, elt) = super::super::cache_dtype(s);
        lines.push(shape(s.model));
        lines.push(format!("KV cache in {dtype}: {elt} bytes per element"));
    }
    let runs: Vec<String> = specs.iter().map(|s| format!("batch {} × {} positions", s.batch, held_positions(s))).collect();
    lines.push(format!(
        "Four generations; after the last token each sequence holds the prompt and every new token but the last: {}. The cache is measured from its tensors",
        runs.join(", ")
    ));
    lines
}

pub(super) fn kv_cache_size(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let specs = kv_cache_size_plan(ctx);
    let model = specs[0].model;
    let elt = super::super::cache_dtype(&specs[0]).1;
    let config = model
        .decoder()
        .map(|d| d.config.clone())
        .ok_or_else(|| failure(protocol::FailureKind::Internal, "no decoder"))?;
    let mut rows = vec![];
    let mut all_equal = true;
    let mut measured = vec![];
    let mut largest_difference = 0u64;
    for spec in &specs {
        ctx.check()?;
        let batch = spec.batch;
        let (_, g) = generate(lab, ctx, spec.clone())?;
        all_equal &= g.kv_cache_bytes == g.kv_cache_formula_bytes;
        largest_difference = largest_difference.max(g.kv_cache_bytes.abs_diff(g.kv_cache_formula_bytes));
        measured.push(g.kv_cache_bytes);
        rows.push(vec![
            batch.to_string(),
            g.kv_cache_tokens.to_string(),
            protocol::format_bytes(g.kv_cache_bytes),
            protocol::format_bytes(g.kv_cache_formula_bytes),
        ]);
    }
    // (1, 24) -> (1, 48) positions and batch 1 -> 2: exact doublings.
    let linear = measured[1] == 2 * measured[0] && measured[2] == 2 * measured[0] && measured[3] == 4 * measured[0];
    let crossover = |c: &protocol::decoder::DecoderConfig, elt: u64| c.parameters() * elt / c.kv_cache_bytes(1, 1, elt).max(1);
    let eight_b = protocol::decoder::preset("llama_3_1_8b").map(|d| d.config.clone());
    let largest = measured.iter().copied().max().unwrap_or(0);
    let (unit, scale) = if largest >= 4 << 20 { (MEASURED_KV_CACHE_MIB, 1024.0 * 1024.0) } else { (MEASURED_KV_CACHE_KIB, 1024.0) };
    let at = crossover(&config, elt);
    // A crossover past the model's context limit never happens in one sequence: say so.
    let beyond = if at > config.max_position_embeddings as u64 {
        format!(
            " — past this model's limit of {} positions, so one sequence never gets there; a batch does",
            config.max_position_embeddings
        )
    } else {
        String::new()
    };
    let mut notes = vec![format!(
        "{}: the cache passes the weights ({}) at {} tokens in one sequence (fp32){beyond}, or {} tokens each across a batch of 8.",
        model.display_name(),
        protocol::format_bytes(config.parameters() * elt),
        at,
        at / 8
    )];
    notes.push(
        "Positions held: prompt + new tokens − 1 (16 + 9 − 1 = 24, 32 + 17 − 1 = 48): the last token is returned, its keys and values are never needed, so they are never computed, as in transformers' cache."
            .to_string(),
    );
    let mut figures = vec![
        // Measured: the first generation's cache over its sequences and positions.
        fig(KV_CACHE_PER_TOKEN_PER_SEQUENCE, measured[0] as f64 / (specs[0].batch as u64 * held_positions(&specs[0])).max(1) as f64),
        fig(WEIGHTS_BYTES, (config.parameters() * elt) as f64),
        fig(TOKENS_AT_WHICH_THE_CACHE_PASSES_THE_WEIGHTS_BATCH_1, crossover(&config, elt) as f64),
        fig(LARGEST_DIFFERENCE_FROM_THE_FORMULA, largest_difference as f64),
    ];
    for (spec, bytes) in specs.iter().zip(&measured) {
        figures.push(fig_of(KV_CACHE_BATCH_X_POSITIONS, &[&spec.batch, &held_positions(spec)], *bytes as f64));
    }
    if let Some(c) = &eight_b {
        figures.push(fig(LLAMA_3_1_8B_SHAPE_BF16_KV_CACHE_PER_TOKEN, c.kv_cache_bytes(1, 1, 2) as f64));
        figures.push(fig(LLAMA_3_1_8B_SHAPE_BF16_WEIGHTS, (c.parameters() * 2) as f64));
        figures.push(fig(LLAMA_3_1_8B_SHAPE_BF16_TOKENS_AT_WHICH_THE_CACHE_PASSES_THE_WEIGHTS, crossover(c, 2) as f64));
    }
    if let Some(c) = eight_b {
        notes.push(format!(
            "Llama-3.1-8B shape (computed from the formula, bf16): {} per token; the cache passes the weights' {} at {} tokens — a batch of 16 at 8k context.",
            protocol::format_bytes(c.kv_cache_bytes(1, 1, 2)),
            protocol::format_bytes(c.parameters() * 2),
            crossover(&c, 2)
        ));
    }
    let decision = Decision::rule(
        all_equal && linear,
        format!("At 24 and 48 positions, batch 1 and 2, the measured cache equals the formula to the byte ({} → {} → {}).", protocol::format_bytes(measured[0]), protocol::format_bytes(measured[1]), protocol::format_bytes(measured[3])),
        format!("Measured {measured:?} against the formula (see the table)."),
    );
    Ok(Outcome::new(decision, kv_cache_size_describe(&specs), ChartKind::Bar)
        .figures(figures)
        // In the unit the table's figures are in (the CPU shape's caches are tens of KiB).
        .series(vec![series(
            unit,
            vec!["b1·24".into(), "b1·48".into(), "b2·24".into(), "b2·48".into()],
            measured.iter().map(|&b| b as f64 / scale).collect(),
        )])
        .table(Table {
            columns: vec!["batch".into(), "positions held".into(), "measured".into(), "formula".into()],
            rows,
        })
        .notes(notes))
}
