//! The `gqa` card ([`GQA`]): Grouped-query attention shrinks the cache, hardly the model

use super::*;

pub const GQA_KV_CACHE: FigureName = FigureName::new("GQA: KV cache", Unit::Bytes);
pub const GQA_PARAMETERS: FigureName = FigureName::new("GQA: parameters", Unit::Count);
pub const WITHOUT_GQA_KV_CACHE: FigureName = FigureName::new("without GQA: KV cache", Unit::Bytes);
pub const WITHOUT_GQA_PARAMETERS: FigureName = FigureName::new("without GQA: parameters", Unit::Count);

pub const GQA: Card = Card {
    id: "gqa",
    title: "Grouped-query attention shrinks the cache, hardly the model",
    asks: "What does grouped-query attention (fewer KV heads than query heads) change: the KV cache, the weights, or both?",
    labels: ["cache bytes from num_attention_heads", "cache bytes from num_key_value_heads"],
    setup: gqa_setup,
    needs: Needs::Any,
    claim: "Grouped-query attention shrinks the KV cache by num_attention_heads / num_key_value_heads against the same shape with one KV head per query head, while the weights shrink only by the key and value projections' share: a few percent here.",
    statements: &[
        Said::torch("With grouped-query attention each key/value head serves a group of query heads: attention reads num_key_value_heads heads of keys and values for num_attention_heads heads of queries.", "test_generation.py::test_each_kv_head_serves_a_group_of_query_heads"),
        Said::run("So the cache stores num_key_value_heads heads per layer: for the same prompt and tokens, the model with 2 KV heads held exactly a quarter of the bytes the one with 8 held.", &[GQA_KV_CACHE, WITHOUT_GQA_KV_CACHE]),
        Said::run("Only the key and value projections shrink with the KV heads (the queries, the output projection, the MLP and the embeddings do not), so the two models' parameter counts differ by a few percent.", &[GQA_PARAMETERS, WITHOUT_GQA_PARAMETERS]),
    ],
    source: "https://arxiv.org/abs/2305.13245",
    pitfall: "kv = 2 * layers * cfg.num_attention_heads * head_dim * tokens * batch * 2",
    fix: "kv = 2 * layers * cfg.num_key_value_heads * head_dim * tokens * batch * 2",
    threshold: "confirmed when the same shape with 8 KV heads and with 2 measures caches in exactly the ratio 8 / 2 = 4 while the parameter counts differ by under 15%. Regime: any device",
    question: crate::pitfalls::ratio("Same prompt and tokens: the GQA model's KV cache, as a multiple of the cache of the same shape without GQA? (The setup gives both shapes: layers, query heads, KV heads, head_dim.)", GQA_KV_CACHE, WITHOUT_GQA_KV_CACHE, crate::pitfalls::Ask::LogScale { min: 0.01, max: 10.0, within: 1.5 }),
    experiment: gqa,
};

/// What gqa runs: the 8-KV-head shape's generation, then the 2-KV-head one's.
pub(super) fn gqa_plan(ctx: &Ctx) -> Result<(RunSpec, RunSpec), RunFailure> {
    let gqa: ModelId = protocol::decoder::CPU_PRESET.parse().map_err(|e: String| failure(protocol::FailureKind::Internal, e))?;
    let mha: ModelId = "llama_tiny_mha".parse().map_err(|e: String| failure(protocol::FailureKind::Internal, e))?;
    Ok((
        gen_spec(ctx, mha, 1, 16, 9, KvCacheKind::Dynamic, GradMode::NoGrad),
        gen_spec(ctx, gqa, 1, 16, 9, KvCacheKind::Dynamic, GradMode::NoGrad),
    ))
}

pub(super) fn gqa_heads(m: ModelId) -> (u32, u32) {
    m.decoder().map_or((1, 1), |d| (d.config.num_attention_heads, d.config.num_key_value_heads))
}

/// "the tiny Llama shape with 8 query heads, 8 vs 2 KV heads, batch 1, prompt 16 + 9 new tokens".
pub(super) fn gqa_describe(mha: &RunSpec, gqa: &RunSpec) -> String {
    let g = gqa.generate.clone().unwrap_or_default();
    format!(
        "the tiny Llama shape with {} query heads, {} vs {} KV heads, batch {}, prompt {} + {} new tokens",
        gqa_heads(gqa.model).0,
        gqa_heads(mha.model).1,
        gqa_heads(gqa.model).1,
        gqa.batch,
        gqa.resolved_input_size(),
        g.new_tokens
    )
}

pub(super) fn gqa_setup(ctx: &Ctx) -> Vec<String> {
    match gqa_plan(ctx) {
        Ok((mha, gqa)) => vec![
            gqa_describe(&mha, &gqa),
            shape(mha.model),
            shape(gqa.model),
            format!("{}, dynamic cache, no_grad; after the last token each sequence holds {} positions", dtypes(&gqa), held_positions(&gqa)),
            "Measured: each generation's KV cache, from its tensors, and each model's parameter count".into(),
        ],
        Err(e) => vec![e.message],
    }
}

pub(super) fn gqa(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let (mha_spec, gqa_spec) = gqa_plan(ctx)?;
    let (mha, gqa) = (mha_spec.model, gqa_spec.model);
    let (_, a) = generate(lab, ctx, mha_spec.clone())?;
    ctx.check()?;
    let (_, b) = generate(lab, ctx, gqa_spec.clone())?;
    let params = |m: ModelId| m.decoder().map_or(0, |d| d.config.parameters());
    let heads = gqa_heads;
    let ratio = a.kv_cache_bytes as f64 / b.kv_cache_bytes.max(1) as f64;
    let want = heads(mha).1 as f64 / heads(gqa).1 as f64;
    let param_change = params(mha) as f64 / params(gqa) as f64 - 1.0;
    let decision = Decision::rule(
        a.kv_cache_bytes * heads(gqa).1 as u64 == b.kv_cache_bytes * heads(mha).1 as u64 && param_change.abs() < 0.15,
        format!("{} KV heads hold {} and {} hold {} — exactly {want:.0}× — while the weights differ by {:.1}%.", heads(mha).1, protocol::format_bytes(a.kv_cache_bytes), heads(gqa).1, protocol::format_bytes(b.kv_cache_bytes), param_change * 100.0),
        format!("Cache ratio {ratio:.3} (expected {want:.0}), parameters differ by {:.1}%.", param_change * 100.0),
    );
    Ok(Outcome::new(decision, gqa_describe(&mha_spec, &gqa_spec), ChartKind::Bar)
        .figures(vec![
            fig(WITHOUT_GQA_KV_CACHE, a.kv_cache_bytes as f64),
            fig(GQA_KV_CACHE, b.kv_cache_bytes as f64),
            fig(WITHOUT_GQA_PARAMETERS, params(mha) as f64),
            fig(GQA_PARAMETERS, params(gqa) as f64),
        ])
        .series(vec![series(KV_CACHE_MIB, vec![format!("{} KV heads", heads(mha).1), format!("{} KV heads", heads(gqa).1)], vec![mib(a.kv_cache_bytes), mib(b.kv_cache_bytes)])]))
}
