//! The `use-cache-off` card ([`USE_CACHE_OFF`]): use_cache=False recomputes the whole prefix every step

use super::*;

pub const UNCACHED_POSITIONS_FED_IN_THE_LAST_STEP: FigureName = FigureName::new("uncached: positions fed in the last step", Unit::Count);
pub const CACHED_POSITIONS_FED_IN_THE_LAST_STEP: FigureName = FigureName::new("cached: positions fed in the last step", Unit::Count);
pub const UNCACHED_OVER_CACHED_MEDIAN_OF_THE_LAST_8_DECODE_STEPS: FigureName = FigureName::new("uncached / cached: median of the last 8 decode steps", Unit::Ratio);
pub const UNCACHED_TOTAL: FigureName = FigureName::new("uncached: total", Unit::Ms);
pub const CACHED_TOTAL: FigureName = FigureName::new("cached: total", Unit::Ms);
pub const UNCACHED_HELD_AFTER_THE_LAST_STEP: FigureName = FigureName::new("uncached: held after the last step", Unit::Bytes);
pub const CACHED_HELD_AFTER_THE_LAST_STEP: FigureName = FigureName::new("cached: held after the last step", Unit::Bytes);
pub const UNCACHED_PEAK_ABOVE_BASELINE: FigureName = FigureName::new("uncached: peak above baseline", Unit::Bytes);
pub const CACHED_PEAK_ABOVE_BASELINE: FigureName = FigureName::new("cached: peak above baseline", Unit::Bytes);
pub const RANK_CORRELATION_OF_UNCACHED_STEP_TIME_WITH_POSITION: FigureName = FigureName::new("rank correlation of uncached step time with position", Unit::Ratio);
pub const SAME_TOKENS: FigureName = FigureName::new("same tokens", Unit::Bool);
pub const CACHED_KV_CACHE_AFTER_THE_LAST_STEP: FigureName = FigureName::new("cached: KV cache after the last step", Unit::Bytes);
pub const USE_CACHE_FALSE: FigureName = FigureName::new("use_cache=False", Unit::Ms);
pub const DYNAMIC_CACHE: FigureName = FigureName::new("dynamic cache", Unit::Ms);

pub const USE_CACHE_OFF: Card = Card {
    id: "use-cache-off",
    title: "use_cache=False recomputes the whole prefix every step",
    asks: "What does turning the KV cache off (use_cache=False) do to a generation's time, its tokens and its memory?",
    labels: ["generate(use_cache=False)", "generate() with the default KV cache"],
    setup: use_cache_off_setup,
    needs: Needs::Any,
    claim: "Without the KV cache every step recomputes the keys and values of the whole sequence so far: its time rises with the position and the generation takes a multiple of the cached one's time, for the same tokens. It keeps less memory between steps (no cache, only the token ids), while each step's activations span the whole sequence.",
    statements: &[
        Said::run("Without the cache each step feeds the whole sequence so far: the last uncached step fed every position again, where a cached decode step feeds one new token per sequence.", &[UNCACHED_POSITIONS_FED_IN_THE_LAST_STEP, CACHED_POSITIONS_FED_IN_THE_LAST_STEP]),
        Said::run("So the uncached step's time rose with the position.", &[RANK_CORRELATION_OF_UNCACHED_STEP_TIME_WITH_POSITION]),
        Said::run("Its last steps took more than twice the cached ones', and the whole generation a multiple of the cached one's time.", &[UNCACHED_OVER_CACHED_MEDIAN_OF_THE_LAST_8_DECODE_STEPS, UNCACHED_TOTAL, CACHED_TOTAL]),
        Said::run("Both produced the same greedy tokens: the cache only keeps keys and values that would otherwise be computed again.", &[SAME_TOKENS]),
        Said::run("Without a cache nothing is kept between steps but the token ids, so less memory was held after the last step.", &[UNCACHED_HELD_AFTER_THE_LAST_STEP, CACHED_HELD_AFTER_THE_LAST_STEP]),
        Said::run("Its peak during a step is another matter: each uncached step holds activations for every position at once, so its peak is not lower by the cache's bytes (both peaks are reported, with the cache).", &[UNCACHED_PEAK_ABOVE_BASELINE, CACHED_PEAK_ABOVE_BASELINE, CACHED_KV_CACHE_AFTER_THE_LAST_STEP]),
    ],
    source: "https://huggingface.co/docs/transformers/main/en/kv_cache",
    pitfall: "out = model.generate(ids, max_new_tokens=256, use_cache=False)",
    fix: "out = model.generate(ids, max_new_tokens=256)  # use_cache=True is the default",
    threshold: "confirmed when the uncached decode steps' latency rises with the position (rank correlation above 0.5), the median of its last 8 steps is more than twice the cached run's, the greedy tokens are identical, and it holds less memory after the last step (no cache). Regime: an uncached step must be compute-bound for its time to follow the position. On a CPU: batch 1, prompt 8 + 96 new tokens (9 to 103 rows per step, the prefix grows twelvefold). On a GPU: the 1B shape in fp32 at batch 8, prompt 128 + 64 new tokens, so each uncached step multiplies 1,032 to 1,528 token rows, compute-bound on a big GPU; at batch 1 and 257–383 positions a 132-SM H200 is launch- and bandwidth-bound and the steps read as flat, which would decide nothing",
    question: crate::pitfalls::ratio("The setup's decoder, same prompt and tokens: the total generation time with use_cache=False as a multiple of the time with the KV cache? (A judgment: how much of a step's time is work on its positions, and how much a fixed cost per op, on this device.)", UNCACHED_TOTAL, CACHED_TOTAL, crate::pitfalls::Ask::LogScale { min: 0.1, max: 100.0, within: 1.5 }),
    experiment: use_cache_off,
};

/// What use-cache-off runs: the uncached generation (the cached one differs only in its
/// cache).
pub(super) fn use_cache_off_plan(ctx: &Ctx) -> RunSpec {
    let model = decoder(ctx, protocol::decoder::CPU_PRESET, "llama_3_2_1b");
    // From 9 to 103 tokens per uncached step on a CPU: compute, not per-op dispatch, then
    // decides a step's time, so its growth stands out of a busy machine's noise.
    // On a GPU the batch multiplies the rows of every uncached step so that compute, not
    // launches, sets its time (see the card's regime).
    let (batch, prompt, n) = if ctx.cuda() { (8, 128, 64) } else { (1, 8, 96) };
    gen_spec(ctx, model, batch, prompt, n, KvCacheKind::Off, GradMode::NoGrad)
}

pub(super) fn use_cache_off_setup(ctx: &Ctx) -> Vec<String> {
    let spec = use_cache_off_plan(ctx);
    let prompt = spec.resolved_input_size();
    let n = spec.generate.as_ref().map_or(0, |g| g.new_tokens);
    vec![
        setup(&spec),
        crate::pitfalls::kit::arms("use_cache=False, each step feeds the whole sequence so far", "the dynamic KV cache, each step after the prompt feeds one new token per sequence"),
        shape(spec.model),
        format!("{}, no_grad, greedy decoding", dtypes(&spec)),
        format!(
            "Positions each step feeds per sequence: the prompt's pass {prompt} in both; then {} to {} with use_cache=False, 1 with the cache",
            prompt + 1,
            prompt + n.saturating_sub(1)
        ),
        "Time: the sum of every step's latency, the prompt's pass included; memory: allocated after the last step".into(),
    ]
}

pub(super) fn use_cache_off(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let off_spec = use_cache_off_plan(ctx);
    let (off_r, off) = generate(lab, ctx, off_spec.clone())?;
    ctx.check()?;
    let (cached_r, cached) = generate(lab, ctx, with_cache(&off_spec, KvCacheKind::Dynamic))?;
    let held = |g: &GenerationReport| g.steps.last().map_or(0, |s| s.allocated_bytes);
    let (holds, rho, ratio) = rules::recompute_costs(&decode_ms(&off), &decode_ms(&cached), off.tokens == cached.tokens, held(&off), held(&cached));
    let total = |g: &GenerationReport| g.steps.iter().map(|s| s.latency_ms).sum::<f64>();
    let reason = format!(
        "uncached step time against position has rank correlation {rho:.2}; its last steps take {ratio:.1}× the cached ones; {} in total against {:.1} ms; tokens {}; held after the last step {} vs {}",
        format!("{:.1} ms", total(&off)),
        total(&cached),
        if off.tokens == cached.tokens { "identical" } else { "differ" },
        protocol::format_bytes(held(&off)),
        protocol::format_bytes(held(&cached))
    );
    let decision = Decision::rule(holds, format!("{reason}."), format!("{reason}."));
    let x: Vec<String> = off.steps.iter().filter(|s| s.phase == GenPhase::Decode).map(|s| s.position.to_string()).collect();
    let fed_last = |g: &GenerationReport| g.steps.last().map_or(0, |s| s.tokens_in) as f64;
    Ok(Outcome::new(decision, setup(&off_spec), ChartKind::Line)
        .figures(vec![
            fig(UNCACHED_TOTAL, total(&off)),
            fig(CACHED_TOTAL, total(&cached)),
            fig(RANK_CORRELATION_OF_UNCACHED_STEP_TIME_WITH_POSITION, rho),
            fig(UNCACHED_OVER_CACHED_MEDIAN_OF_THE_LAST_8_DECODE_STEPS, ratio),
            fig(SAME_TOKENS, if off.tokens == cached.tokens { 1.0 } else { 0.0 }),
            fig(UNCACHED_POSITIONS_FED_IN_THE_LAST_STEP, fed_last(&off)),
            fig(CACHED_POSITIONS_FED_IN_THE_LAST_STEP, fed_last(&cached)),
            fig(UNCACHED_HELD_AFTER_THE_LAST_STEP, held(&off) as f64),
            fig(CACHED_HELD_AFTER_THE_LAST_STEP, held(&cached) as f64),
            fig(UNCACHED_PEAK_ABOVE_BASELINE, off_r.memory.peak_above_baseline_bytes as f64),
            fig(CACHED_PEAK_ABOVE_BASELINE, cached_r.memory.peak_above_baseline_bytes as f64),
            fig(CACHED_KV_CACHE_AFTER_THE_LAST_STEP, cached.kv_cache_bytes as f64),
        ])
        .series(vec![
            series(USE_CACHE_FALSE, x.clone(), decode_ms(&off)),
            series(DYNAMIC_CACHE, x, decode_ms(&cached)),
        ]))
}
