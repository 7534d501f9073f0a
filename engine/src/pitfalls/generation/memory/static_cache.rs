//! The `static-cache` card ([`STATIC_CACHE`]): A static cache is allocated once and never grows

use super::*;

pub const STATIC_CACHE_AFTER_THE_PREFILL: FigureName = FigureName::new("static cache after the prefill", Unit::Bytes);
pub const STATIC_CACHE_AFTER_THE_LAST_STEP: FigureName = FigureName::new("static cache after the last step", Unit::Bytes);
pub const DYNAMIC_CACHE_AFTER_THE_PREFILL: FigureName = FigureName::new("dynamic cache after the prefill", Unit::Bytes);
pub const DYNAMIC_CACHE_GROWTH_PER_STEP: FigureName = FigureName::new("dynamic cache growth per step", Unit::Bytes);
pub const DYNAMIC_CACHE_AFTER_THE_LAST_STEP: FigureName = FigureName::new("dynamic cache after the last step", Unit::Bytes);
pub const STATIC_CACHE_LARGEST_CHANGE_BETWEEN_STEPS: FigureName = FigureName::new("static cache: largest change between steps", Unit::Bytes);
pub const ONE_POSITIONS_KEYS_AND_VALUES: FigureName = FigureName::new("one position's keys and values", Unit::Bytes);
pub const STATIC_KV_CACHE: FigureName = FigureName::new("static: KV cache", Unit::Mib);
pub const DYNAMIC_KV_CACHE: FigureName = FigureName::new("dynamic: KV cache", Unit::Mib);

pub const STATIC_CACHE: Card = Card {
    id: "static-cache",
    title: "A static cache is allocated once and never grows",
    asks: "How do a dynamic and a static KV cache's bytes evolve over a generation, and which is larger at its end?",
    labels: ["generate() with the default dynamic cache", "generate() with cache_implementation=\"static\""],
    setup: static_cache_setup,
    needs: Needs::Any,
    claim: "A static cache allocates its whole capacity at the first step and never grows: it holds its full size from the prefill on, where a dynamic cache grows one position per step, and sized exactly for prompt + new tokens (its best case) it still ends one position larger. On CUDA its tensors never move, which (with a step that attends to the whole capacity under a mask) lets the decode step be captured once and replayed as a CUDA graph.",
    statements: &[
        Said::torch("A growing cache (torch.cat, as a dynamic cache does) allocates new tensors one position longer at every step; a preallocated cache is written in place and keeps its storage and its shape.", "test_generation.py::test_cat_allocates_new_storage_and_copy_writes_in_place"),
        Said::run("Here the static cache held the same bytes from the prefill to the last token: its whole capacity, allocated at the first step.", &[STATIC_CACHE_AFTER_THE_PREFILL, STATIC_CACHE_AFTER_THE_LAST_STEP, STATIC_CACHE_LARGEST_CHANGE_BETWEEN_STEPS]),
        Said::run("The dynamic cache held the prompt's positions after the prefill and grew by one position's keys and values per step.", &[DYNAMIC_CACHE_AFTER_THE_PREFILL, DYNAMIC_CACHE_GROWTH_PER_STEP, ONE_POSITIONS_KEYS_AND_VALUES]),
        Said::run("After the last token the dynamic cache holds prompt + new tokens − 1 positions (the last token's keys and values are never computed), the static one its capacity, prompt + new tokens: sized exactly, as here, the static cache ends one position larger.", &[DYNAMIC_CACHE_AFTER_THE_LAST_STEP, STATIC_CACHE_AFTER_THE_LAST_STEP, ONE_POSITIONS_KEYS_AND_VALUES]),
        Said::source("A CUDA graph replays the kernels it captured on the addresses they used: the static cache's tensors never move, so its decode step can be captured once and replayed (the replayed step attends to the whole capacity under a mask, so that its shapes never change either); on CUDA this run replays it beside eager decoding.", "aten/src/ATen/cuda/CUDAGraph.cpp", "CUDAGraph::replay", "cards"),
    ],
    source: "https://huggingface.co/docs/transformers/main/en/llm_optims#static-kv-cache-and-torchcompile",
    pitfall: "out = model.generate(ids, max_new_tokens=256)  # DynamicCache, the default",
    fix: "out = model.generate(ids, max_new_tokens=256, cache_implementation=\"static\")",
    threshold: "confirmed when the static cache's bytes are the same at every step and equal the formula for prompt + new tokens, while the dynamic one's grow by exactly one position's bytes per step. On CUDA the static cache's decode step is also captured once and replayed as a CUDA graph (the whole capacity attended under a mask), its per-token p50 reported beside eager's with the same tokens; that part decides nothing. Regime: any device (graph replay: CUDA only)",
    question: crate::pitfalls::ratio("The setup's decoder, same prompt and tokens: the static cache's bytes (sized for prompt + new tokens) as a multiple of the dynamic cache's after the last token?", STATIC_CACHE_AFTER_THE_LAST_STEP, DYNAMIC_CACHE_AFTER_THE_LAST_STEP, crate::pitfalls::Ask::LogScale { min: 0.1, max: 10.0, within: 1.25 }),
    experiment: static_cache,
};

/// What static-cache runs: the static-cache generation (the dynamic one differs only in its
/// cache).
pub(super) fn static_cache_plan(ctx: &Ctx) -> RunSpec {
    let model = decoder(ctx, protocol::decoder::CPU_PRESET, "llama_3_2_1b");
    gen_spec(ctx, model, 1, 16, 24, KvCacheKind::Static, GradMode::NoGrad)
}

pub(super) fn static_cache_setup(ctx: &Ctx) -> Vec<String> {
    let spec = static_cache_plan(ctx);
    let g = spec.generate.clone().unwrap_or_default();
    let capacity = spec.resolved_input_size() + g.new_tokens;
    vec![
        setup(&spec),
        crate::pitfalls::kit::arms("the dynamic cache (transformers' DynamicCache), the same prompt and tokens", format!("the static cache, sized for {} + {} = {capacity} positions", spec.resolved_input_size(), g.new_tokens)),
        shape(spec.model),
        format!("{}, no_grad, greedy decoding", dtypes(&spec)),
        "Measured: each cache's bytes from its tensors, after every step".into(),
    ]
}

pub(super) fn static_cache(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let spec = static_cache_plan(ctx);
    let model = spec.model;
    let (prompt, n) = (spec.resolved_input_size(), spec.generate.as_ref().map_or(0, |g| g.new_tokens));
    let (_, st) = generate(lab, ctx, spec.clone())?;
    ctx.check()?;
    let (_, dy) = generate(lab, ctx, with_cache(&spec, KvCacheKind::Dynamic))?;
    let config = model.decoder().map(|d| d.config.clone()).ok_or_else(|| failure(protocol::FailureKind::Internal, "no decoder"))?;
    let elt = st.kv_cache_element_bytes as u64;
    let full = config.kv_cache_bytes((prompt + n) as u64, 1, elt);
    let one = config.kv_cache_bytes(1, 1, elt);
    let static_flat = st.steps.iter().all(|s| s.kv_cache_bytes == full);
    let dynamic_steps = dy.steps.windows(2).all(|w| w[1].kv_cache_bytes.checked_sub(w[0].kv_cache_bytes) == Some(one));
    let first = |g: &GenerationReport| g.steps.first().map_or(0, |s| s.kv_cache_bytes);
    let static_sizes = st.steps.iter().map(|s| s.kv_cache_bytes);
    let static_change = static_sizes.clone().max().unwrap_or(0) - static_sizes.min().unwrap_or(0);
    let dynamic_growth = dy.kv_cache_bytes.saturating_sub(first(&dy)) as f64 / dy.steps.len().saturating_sub(1).max(1) as f64;
    // Graph replay of the same static-cache decode, where a GPU and this build have it.
    let replay = match (ctx.cuda(), crate::torch_ext::cuda_graphs_built()) {
        (true, Ok(())) => {
            ctx.check()?;
            let graph_spec = RunSpec { advanced: protocol::Advanced { cuda_graph: true, ..Default::default() }, ..spec.clone() };
            let (_, gr) = generate(lab, ctx, graph_spec)?;
            let p50 = |g: &GenerationReport| g.decode_ms_per_token.as_ref().map_or(0.0, |d| d.p50);
            format!(
                " CUDA graph replay of the decode step: {:.3} ms per token against eager's {:.3} ms, tokens {}.",
                p50(&gr),
                p50(&st),
                if gr.tokens == st.tokens { "identical" } else { "differ" }
            )
        }
        (true, Err(why)) => format!(" CUDA graph replay: not in this build ({why})."),
        (false, _) => " CUDA graph replay of the decode step: CUDA only.".to_string(),
    };
    let decision = Decision::rule(
        static_flat && dynamic_steps,
        format!("The static cache held {} from the prefill to the last step; the dynamic one grew by {} per step to {}.{replay}", protocol::format_bytes(full), protocol::format_bytes(one), protocol::format_bytes(dy.kv_cache_bytes)),
        format!("Static steps {:?}, dynamic growth per step not {one} B.", st.steps.iter().map(|s| s.kv_cache_bytes).collect::<Vec<_>>()),
    );
    let x = positions(&st);
    Ok(Outcome::new(decision, setup(&spec), ChartKind::Line)
        .figures(vec![
            fig(STATIC_CACHE_AFTER_THE_PREFILL, first(&st) as f64),
            fig(STATIC_CACHE_AFTER_THE_LAST_STEP, st.kv_cache_bytes as f64),
            fig(STATIC_CACHE_LARGEST_CHANGE_BETWEEN_STEPS, static_change as f64),
            fig(DYNAMIC_CACHE_AFTER_THE_PREFILL, first(&dy) as f64),
            fig(DYNAMIC_CACHE_AFTER_THE_LAST_STEP, dy.kv_cache_bytes as f64),
            fig(DYNAMIC_CACHE_GROWTH_PER_STEP, dynamic_growth),
            fig(ONE_POSITIONS_KEYS_AND_VALUES, one as f64),
        ])
        .series(vec![
            series(STATIC_KV_CACHE, x.clone(), st.steps.iter().map(|s| mib(s.kv_cache_bytes)).collect()),
            series(DYNAMIC_KV_CACHE, x, dy.steps.iter().map(|s| mib(s.kv_cache_bytes)).collect()),
        ])
        .notes(vec![
            "CUDA graph replay (advanced.cuda_graph with the static cache) attends to the cache's whole capacity under a mask, so every step has the same shapes and addresses; the eager static cache attends to the positions filled so far.".into(),
            "A static cache sized for more positions than a generation uses (a server's max_cache_len) holds the difference for the whole generation.".into(),
        ]))
}
