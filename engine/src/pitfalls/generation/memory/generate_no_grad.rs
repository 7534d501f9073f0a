//! The `generate-no-grad` card ([`GENERATE_NO_GRAD`]): A generation loop without no_grad keeps every step's graph

use super::*;

pub const GRAPH_GROWTH_FIRST_HALF_OF_THE_STEPS_GRAD: FigureName = FigureName::new("graph growth, first half of the steps (grad)", Unit::Bytes);
pub const GRAPH_AFTER_THE_LAST_STEP_NO_GRAD: FigureName = FigureName::new("graph after the last step (no_grad)", Unit::Bytes);
pub const NO_GRAD_ALLOCATED_AFTER_THE_LAST_STEP: FigureName = FigureName::new("no_grad: allocated after the last step", Unit::Bytes);
pub const GRAD_ALLOCATED_AFTER_THE_LAST_STEP: FigureName = FigureName::new("grad: allocated after the last step", Unit::Bytes);
pub const GRAPH_AFTER_THE_LAST_STEP_GRAD: FigureName = FigureName::new("graph after the last step (grad)", Unit::Bytes);
pub const KV_CACHE_BYTES: FigureName = FigureName::new("KV cache", Unit::Bytes);
pub const GRAPH_GROWTH_SECOND_HALF_OF_THE_STEPS_GRAD: FigureName = FigureName::new("graph growth, second half of the steps (grad)", Unit::Bytes);
pub const GRAD_LEFT_AFTER_THE_RUN: FigureName = FigureName::new("grad: left after the run", Unit::Bytes);
pub const GRAD_ENABLED_ALLOCATED: FigureName = FigureName::new("grad enabled: allocated", Unit::Mib);
pub const NO_GRAD_ALLOCATED: FigureName = FigureName::new("no_grad: allocated", Unit::Mib);
pub const GRAD_GRAPH_BEYOND_THE_CACHE: FigureName = FigureName::new("grad: graph beyond the cache", Unit::Mib);

pub const GENERATE_NO_GRAD: Card = Card {
    id: "generate-no-grad",
    title: "A generation loop without no_grad keeps every step's graph",
    asks: "What does memory hold, step after step, when an eval() model generates tokens in its own loop with autograd on?",
    labels: ["eval(), generation loop with autograd on", "eval(), generation loop under torch.no_grad()"],
    setup: generate_no_grad_setup,
    needs: Needs::Any,
    claim: "A hand-written generation loop without torch.no_grad() keeps the steps' autograd graphs alive through the KV cache: each step's attention saves the whole cache as it stood, so memory beyond the cache grows faster with every step, and model.eval() does not stop it. Under no_grad nothing is kept but the cache.",
    statements: &[
        Said::torch("With autograd on, the keys and values a step writes to the cache are outputs of the model's projections and carry their graph (a grad_fn); under torch.no_grad() nothing is recorded.", "test_generation.py::test_with_autograd_on_the_cache_carries_a_graph_and_no_grad_records_none"),
        Said::torch("Attention saves the whole cache it attended to for its backward, at every step: each step saves one more position than the step before.", "test_generation.py::test_attention_saves_the_whole_cache_at_every_step"),
        Said::torch("A later layer's keys reach an earlier layer's attention through their graph, so the cache keeps those saved versions alive, every past one, until the cache itself is dropped.", "test_generation.py::test_with_autograd_on_every_past_cache_stays_alive"),
        Said::run("Here, with autograd on, memory after the last token held a graph beyond the weights, the prompt, the KV cache and the tokens.", &[GRAPH_AFTER_THE_LAST_STEP_GRAD]),
        Said::run("It grew by more per step in the second half of the generation than in the first: each step's attention saved a longer cache.", &[GRAPH_GROWTH_FIRST_HALF_OF_THE_STEPS_GRAD, GRAPH_GROWTH_SECOND_HALF_OF_THE_STEPS_GRAD]),
        Said::torch("model.eval() does not turn autograd off: both loops here ran in eval() mode.", "test_generation.py::test_eval_leaves_autograd_on"),
        Said::run("Under torch.no_grad() memory after the last token held the weights, the prompt, the KV cache and the tokens, and no graph (up to the CUDA allocator's rounding on a GPU).", &[GRAPH_AFTER_THE_LAST_STEP_NO_GRAD, NO_GRAD_ALLOCATED_AFTER_THE_LAST_STEP, KV_CACHE_BYTES]),
        Said::run("The graph was freed, to the byte, once the generation's cache and outputs were dropped.", &[GRAD_LEFT_AFTER_THE_RUN]),
    ],
    source: "https://pytorch.org/docs/stable/generated/torch.no_grad.html",
    pitfall: "model.eval()\ncache = DynamicCache(config=model.config)\nfor step in range(new_tokens):\n    logits = model(ids, past_key_values=cache).logits",
    fix: "model.eval()\ncache = DynamicCache(config=model.config)\nwith torch.no_grad():  # or torch.inference_mode()\n    for step in range(new_tokens):\n        logits = model(ids, past_key_values=cache).logits",
    threshold: "confirmed when, in eval mode with a dynamic cache, grad-enabled memory beyond the weights, prompt, KV cache and tokens rises at every step and by more in the second half of the steps than in the first (superlinear: each step's attention saves the whole cache as it stood), no_grad holds none beyond 64 KiB (CUDA block rounding), and memory returns to the baseline after the run. Regime: any device; the CPU counts allocations exactly",
    question: crate::pitfalls::value("The setup's decoder generating in eval() with autograd on: after the last token, how many bytes does memory hold beyond the weights, the prompt, the KV cache and the tokens?", GRAPH_AFTER_THE_LAST_STEP_GRAD, crate::pitfalls::BYTES),
    experiment: generate_no_grad,
};

/// What generate-no-grad runs: the grad-enabled generation (the no_grad one differs only in
/// its grad mode).
pub(super) fn generate_no_grad_plan(ctx: &Ctx) -> RunSpec {
    let model = decoder(ctx, protocol::decoder::CPU_PRESET, "llama_3_2_1b");
    let (prompt, n) = if ctx.cuda() { (128, 48) } else { (16, 24) };
    gen_spec(ctx, model, 1, prompt, n, KvCacheKind::Dynamic, GradMode::Enabled)
}

/// "KV cache after the last token (39 positions): 2 × 4 layers × ... = 39.0 KiB".
pub(super) fn cache_after(spec: &RunSpec) -> String {
    let elt = super::super::cache_dtype(spec).1;
    let positions = held_positions(spec);
    spec.model.decoder().map_or_else(String::new, |d| {
        format!("KV cache after the last token ({positions} positions per sequence): {}", d.config.kv_cache_formula(positions, spec.batch as u64, elt))
    })
}

pub(super) fn generate_no_grad_setup(ctx: &Ctx) -> Vec<String> {
    let spec = generate_no_grad_plan(ctx);
    vec![
        setup(&spec),
        crate::pitfalls::kit::arms("model.eval(), one forward pass per new token with autograd on", "model.eval(), one forward pass per new token under torch.no_grad()"),
        shape(spec.model),
        format!("{}, greedy decoding", dtypes(&spec)),
        cache_after(&spec),
        "With autograd on, each op keeps the inputs its backward would read (a matmul its input, attention its queries and the keys and values it attended to) for as long as something holds its output".into(),
        "Memory is read after every step: allocated bytes beyond the weights, the prompt, the KV cache and the tokens generated so far".into(),
    ]
}

pub(super) fn generate_no_grad(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let grad_spec = generate_no_grad_plan(ctx);
    let (grad_r, grad) = generate(lab, ctx, grad_spec.clone())?;
    ctx.check()?;
    let (_, no_grad) = generate(lab, ctx, RunSpec { grad: GradMode::NoGrad, ..grad_spec.clone() })?;
    let n = grad_spec.generate.as_ref().map_or(0, |g| g.new_tokens);
    let gg: Vec<u64> = grad.steps.iter().map(|s| s.graph_bytes).collect();
    let ng: Vec<u64> = no_grad.steps.iter().map(|s| s.graph_bytes).collect();
    let holds = rules::graph_grows(&gg, &ng, grad_r.memory.leaked_bytes, 64 << 10);
    let last = |g: &GenerationReport| g.steps.last().map_or(0, |s| s.allocated_bytes);
    let kv = no_grad.kv_cache_bytes;
    let reason = format!(
        "after {n} tokens grad holds {:.2} MiB against no_grad's {:.2} MiB, whose excess over the weights is the KV cache ({:.3} MiB); the graph grew from {:.3} MiB after the prefill to {:.3} MiB",
        mib(last(&grad)),
        mib(last(&no_grad)),
        mib(kv),
        mib(*gg.first().unwrap_or(&0)),
        mib(*gg.last().unwrap_or(&0))
    );
    let decision = Decision::rule(
        holds,
        format!("{reason}, more per step as the cache grew; all of it was freed when the generation's outputs were dropped."),
        format!("{reason}."),
    );
    let x = positions(&grad);
    // The graph's growth per step in each half of the steps (the rule's halves).
    let inc: Vec<u64> = gg.windows(2).map(|w| w[1].saturating_sub(w[0])).collect();
    let half = inc.len() / 2;
    let per_step = |v: &[u64]| v.iter().sum::<u64>() as f64 / v.len().max(1) as f64;
    Ok(Outcome::new(decision, setup(&grad_spec), ChartKind::Line)
        .figures(vec![
            fig(GRAD_ALLOCATED_AFTER_THE_LAST_STEP, last(&grad) as f64),
            fig(NO_GRAD_ALLOCATED_AFTER_THE_LAST_STEP, last(&no_grad) as f64),
            fig(KV_CACHE_BYTES, kv as f64),
            fig(GRAPH_AFTER_THE_LAST_STEP_GRAD, *gg.last().unwrap_or(&0) as f64),
            fig(GRAPH_AFTER_THE_LAST_STEP_NO_GRAD, *ng.last().unwrap_or(&0) as f64),
            fig(GRAPH_GROWTH_FIRST_HALF_OF_THE_STEPS_GRAD, per_step(&inc[..half])),
            fig(GRAPH_GROWTH_SECOND_HALF_OF_THE_STEPS_GRAD, per_step(&inc[inc.len() - half..])),
            fig(GRAD_LEFT_AFTER_THE_RUN, grad_r.memory.leaked_bytes as f64),
        ])
        .series(vec![
            series(GRAD_ENABLED_ALLOCATED, x.clone(), grad.steps.iter().map(|s| mib(s.allocated_bytes)).collect()),
            series(NO_GRAD_ALLOCATED, x.clone(), no_grad.steps.iter().map(|s| mib(s.allocated_bytes)).collect()),
            series(GRAD_GRAPH_BEYOND_THE_CACHE, x, gg.iter().map(|&b| mib(b)).collect()),
        ]))
}
