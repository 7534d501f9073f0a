//! The `left-padded-batch` card ([`LEFT_PADDED_BATCH`]): Left-padding a batch pays for the padding

use super::*;

pub const PADDED_BATCH_PROMPT_POSITIONS_FED: FigureName = FigureName::new("padded batch: prompt positions fed", Unit::Count);
pub const PADDED_BATCH_BEYOND_ONE_BY_ONE_KV_CACHE: FigureName = FigureName::new("padded batch beyond one by one: KV cache", Unit::Bytes);
pub const ONE_BY_ONE_KV_CACHES: FigureName = FigureName::new("one by one: KV caches", Unit::Bytes);
pub const PADDED_BATCH_KV_CACHE: FigureName = FigureName::new("padded batch: KV cache", Unit::Bytes);
pub const PADDING_POSITIONS_KEYS_AND_VALUES: FigureName = FigureName::new("padding positions' keys and values", Unit::Bytes);
pub const ONE_BY_ONE_PROMPT_POSITIONS_FED: FigureName = FigureName::new("one by one: prompt positions fed", Unit::Count);
pub const PADDED_BATCH_TIME: FigureName = FigureName::new("padded batch: time", Unit::Ms);
pub const ONE_BY_ONE_TIME: FigureName = FigureName::new("one by one: time", Unit::Ms);

pub const LEFT_PADDED_BATCH: Card = Card {
    id: "left-padded-batch",
    title: "Left-padding a batch pays for the padding",
    asks: "What does generating prompts of different lengths as one left-padded batch do to the KV cache's bytes, against generating them one by one?",
    labels: ["prompts left-padded into one batch", "each prompt generated on its own"],
    setup: left_padded_batch_setup,
    needs: Needs::Any,
    claim: "A batch of prompts of different lengths, left-padded to the longest, computes and caches every padding position like a real one: the cache holds exactly the padding positions' keys and values more than the prompts generated one by one. One by one pays no padding, but gives up what a batch shares (see decode-batch).",
    statements: &[
        Said::run("Left-padding makes every prompt as long as the longest: the padded batch's prefill fed 4 × 32 = 128 prompt positions where the four prompts have 80.", &[PADDED_BATCH_PROMPT_POSITIONS_FED, ONE_BY_ONE_PROMPT_POSITIONS_FED]),
        Said::run("Each padding position is computed and cached like a real one: the padded batch's cache exceeded the four caches generated one by one by exactly the 48 padding positions' keys and values.", &[PADDED_BATCH_BEYOND_ONE_BY_ONE_KV_CACHE, PADDING_POSITIONS_KEYS_AND_VALUES]),
        Said::torch("An attention mask only hides padded positions from the real ones' attention: their keys and values are still computed and kept in the cache.", "test_generation.py::test_a_mask_hides_padded_keys_that_are_still_there"),
    ],
    source: "https://huggingface.co/docs/transformers/main/en/llm_tutorial#wrong-padding-side",
    pitfall: "tokenizer.padding_side = \"left\"\nbatch = tokenizer(prompts, padding=True, return_tensors=\"pt\")  # every prompt as long as the longest\nmodel.generate(**batch, max_new_tokens=8)",
    fix: "# each prompt in its own call\nfor prompt in prompts:\n    batch = tokenizer([prompt], return_tensors=\"pt\")\n    model.generate(**batch, max_new_tokens=8)",
    threshold: "confirmed when the padded batch's measured cache exceeds the four prompts' caches generated one by one by exactly the padding positions' bytes (the formula at 48 padding positions). The times of both ways are reported; they decide nothing (on a CPU a batch can be faster in total even with its waste). The padded rows run without an attention mask here: the cost is what padding costs, their tokens are not compared. Regime: any device",
    question: crate::pitfalls::ratio("The setup's decoder and prompts: the padded batch's cache bytes minus the four one-by-one caches' bytes together, as a multiple of the four one-by-one caches' bytes together?", PADDED_BATCH_BEYOND_ONE_BY_ONE_KV_CACHE, ONE_BY_ONE_KV_CACHES, crate::pitfalls::Ask::LogScale { min: 0.01, max: 10.0, within: 1.5 }),
    experiment: left_padded_batch,
};

/// What left-padded-batch runs: the decoder, the prompts' lengths and the new tokens of each.
pub(super) fn left_padded_batch_plan(ctx: &Ctx) -> (ModelId, [u32; 4], u32) {
    (decoder(ctx, protocol::decoder::CPU_PRESET, "llama_3_2_1b"), [8, 16, 24, 32], 8)
}

pub(super) fn left_padded_batch_describe(model: ModelId, lengths: &[u32], n: u32) -> String {
    format!("{}, batch {} (padded) against batch 1 (one by one), prompts of {lengths:?} tokens + {n} new each, dynamic cache, no_grad", model.display_name(), lengths.len())
}

pub(super) fn left_padded_batch_setup(ctx: &Ctx) -> Vec<String> {
    let (model, lengths, n) = left_padded_batch_plan(ctx);
    let longest = lengths.iter().max().copied().unwrap_or(0);
    let spec = gen_spec(ctx, model, 1, longest, n, KvCacheKind::Dynamic, GradMode::NoGrad);
    vec![
        left_padded_batch_describe(model, &lengths, n),
        crate::pitfalls::kit::arms(format!("the {} prompts left-padded to {longest} tokens, generated as one batch of {}, no attention mask", lengths.len(), lengths.len()), "each prompt generated alone at batch 1"),
        shape(model),
        format!("{}; the cache holds the keys and values of every position a generation fed the model, the last new token excepted", dtypes(&spec)),
        "Measured: each cache's bytes from its tensors after the last token, and each way's total time".into(),
    ]
}

pub(super) fn left_padded_batch(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let (model, lengths, n) = left_padded_batch_plan(ctx);
    let longest = *lengths.iter().max().unwrap_or(&32);
    let padded_spec = gen_spec(ctx, model, lengths.len() as u32, longest, n, KvCacheKind::Dynamic, GradMode::NoGrad);
    let (_, padded) = generate(lab, ctx, padded_spec.clone())?;
    let mut one_by_one_bytes = 0;
    let mut one_by_one_ms = 0.0;
    let mut one_by_one_fed = 0u64;
    for &len in &lengths {
        ctx.check()?;
        let (_, g) = generate(lab, ctx, gen_spec(ctx, model, 1, len, n, KvCacheKind::Dynamic, GradMode::NoGrad))?;
        one_by_one_bytes += g.kv_cache_bytes;
        one_by_one_ms += g.steps.iter().map(|s| s.latency_ms).sum::<f64>();
        one_by_one_fed += g.steps.first().map_or(0, |s| s.tokens_in as u64);
    }
    let padded_fed = padded.steps.first().map_or(0, |s| s.tokens_in as u64) * lengths.len() as u64;
    let config = model.decoder().map(|d| d.config.clone()).ok_or_else(|| failure(protocol::FailureKind::Internal, "no decoder"))?;
    let pad_positions: u64 = lengths.iter().map(|&l| (longest - l) as u64).sum();
    let waste_formula = config.kv_cache_bytes(pad_positions, 1, padded.kv_cache_element_bytes as u64);
    let waste = padded.kv_cache_bytes.saturating_sub(one_by_one_bytes);
    let padded_ms: f64 = padded.steps.iter().map(|s| s.latency_ms).sum();
    let decision = Decision::rule(
        waste == waste_formula && waste > 0,
        format!("The padded batch cached {} against {} one by one — {} of padding ({} padding positions), exactly the formula. Time: {padded_ms:.1} ms batched, {one_by_one_ms:.1} ms one by one.", protocol::format_bytes(padded.kv_cache_bytes), protocol::format_bytes(one_by_one_bytes), protocol::format_bytes(waste), pad_positions),
        format!("Waste {waste} B against the formula's {waste_formula} B."),
    );
    Ok(Outcome::new(decision, left_padded_batch_describe(model, &lengths, n), ChartKind::Bar)
        .figures(vec![
            fig(PADDED_BATCH_KV_CACHE, padded.kv_cache_bytes as f64),
            fig(ONE_BY_ONE_KV_CACHES, one_by_one_bytes as f64),
            fig(PADDED_BATCH_BEYOND_ONE_BY_ONE_KV_CACHE, waste as f64),
            fig(PADDING_POSITIONS_KEYS_AND_VALUES, waste_formula as f64),
            fig(PADDED_BATCH_PROMPT_POSITIONS_FED, padded_fed as f64),
            fig(ONE_BY_ONE_PROMPT_POSITIONS_FED, one_by_one_fed as f64),
            fig(PADDED_BATCH_TIME, padded_ms),
            fig(ONE_BY_ONE_TIME, one_by_one_ms),
        ])
        .series(vec![series(KV_CACHE_MIB, vec!["padded batch".into(), "one by one".into()], vec![mib(padded.kv_cache_bytes), mib(one_by_one_bytes)])])
        .notes(vec!["One by one pays no padding, but each prompt's decode steps then read the weights for one sequence instead of four (see decode-batch); grouping prompts of similar length, or a server that packs sequences without padding, keeps the batch and drops most of the padding.".into()]))
}
