//! The generation cards about memory: what the cache and the graph hold
//! (`generate-no-grad`, `kv-cache-size`, `gqa`, `static-cache`, `padding-waste`) and the
//! inference-tensor trap of a cache made in one mode and written in another.

use protocol::{
    ChartKind, GenerationReport, GradMode, KvCacheKind, ModelId, RunFailure, RunSpec, Table,
};

use super::super::kit::{fig, mib, series, Ctx, Decision, Outcome};
use super::super::{Card, Needs, Said};
use super::{decoder, dtypes, gen_spec, generate, held_positions, positions, rules, setup, shape, with_cache};
use crate::lab::Lab;
use crate::torch_call::{catch_torch, failure};

pub const GENERATE_NO_GRAD: Card = Card {
    id: "generate-no-grad",
    title: "A generation loop without no_grad keeps every step's graph",
    asks: "What does memory hold, step after step, when an eval() model generates tokens in its own loop with autograd on?",
    labels: ["eval(), generation loop with autograd on", "eval(), the same loop under torch.no_grad()"],
    setup: generate_no_grad_setup,
    needs: Needs::Any,
    claim: "A hand-written generation loop without torch.no_grad() keeps the steps' autograd graphs alive through the KV cache: each step's attention saves the whole cache as it stood, so memory beyond the cache grows faster with every step, and model.eval() does not stop it. Under no_grad nothing is kept but the cache.",
    statements: &[
        Said::torch("With autograd on, the keys and values a step writes to the cache are outputs of the model's projections and carry their graph (a grad_fn); under torch.no_grad() nothing is recorded.", "test_generation.py::test_with_autograd_on_the_cache_carries_a_graph_and_no_grad_records_none"),
        Said::torch("Attention saves the whole cache it attended to for its backward, at every step: each step saves one more position than the step before.", "test_generation.py::test_attention_saves_the_whole_cache_at_every_step"),
        Said::torch("A later layer's keys reach an earlier layer's attention through their graph, so the cache keeps those saved versions alive, every past one, until the cache itself is dropped.", "test_generation.py::test_with_autograd_on_every_past_cache_stays_alive"),
        Said::run("Here, with autograd on, memory after the last token held a graph beyond the weights, the prompt, the KV cache and the tokens.", &["graph after the last step (grad)"]),
        Said::run("It grew by more per step in the second half of the generation than in the first: each step's attention saved a longer cache.", &["graph growth, first half of the steps (grad)", "graph growth, second half of the steps (grad)"]),
        Said::torch("model.eval() does not turn autograd off: both loops here ran in eval() mode.", "test_generation.py::test_eval_leaves_autograd_on"),
        Said::run("Under torch.no_grad() memory after the last token held the weights, the prompt, the KV cache and the tokens, and no graph (up to the CUDA allocator's rounding on a GPU).", &["graph after the last step (no_grad)", "no_grad: allocated after the last step", "KV cache"]),
        Said::run("The graph was freed, to the byte, once the generation's cache and outputs were dropped.", &["grad: left after the run"]),
    ],
    source: "https://pytorch.org/docs/stable/generated/torch.no_grad.html",
    pitfall: "model.eval()\ncache = DynamicCache(config=model.config)\nfor step in range(new_tokens):\n    logits = model(ids, past_key_values=cache).logits",
    fix: "model.eval()\ncache = DynamicCache(config=model.config)\nwith torch.no_grad():  # or torch.inference_mode()\n    for step in range(new_tokens):\n        logits = model(ids, past_key_values=cache).logits",
    threshold: "confirmed when, in eval mode with a dynamic cache, grad-enabled memory beyond the weights, prompt, KV cache and tokens rises at every step and by more in the second half of the steps than in the first (superlinear: each step's attention saves the whole cache as it stood), no_grad holds none beyond 64 KiB (CUDA block rounding), and memory returns to the baseline after the run. Regime: any device; the CPU counts allocations exactly",
    question: crate::pitfalls::value("The setup's decoder generating in A (eval(), autograd on): after the last token, how many bytes does memory hold beyond the weights, the prompt, the KV cache and the tokens?", "graph after the last step (grad)", "bytes", crate::pitfalls::BYTES),
    experiment: generate_no_grad,
};

/// What generate-no-grad runs: the grad-enabled generation (the no_grad one differs only in
/// its grad mode).
fn generate_no_grad_plan(ctx: &Ctx) -> RunSpec {
    let model = decoder(ctx, protocol::decoder::CPU_PRESET, "llama_3_2_1b");
    let (prompt, n) = if ctx.cuda() { (128, 48) } else { (16, 24) };
    gen_spec(ctx, model, 1, prompt, n, KvCacheKind::Dynamic, GradMode::Enabled)
}

/// "KV cache after the last token (39 positions): 2 × 4 layers × ... = 39.0 KiB".
fn cache_after(spec: &RunSpec) -> String {
    let elt = super::cache_dtype(spec).1;
    let positions = held_positions(spec);
    spec.model.decoder().map_or_else(String::new, |d| {
        format!("KV cache after the last token ({positions} positions per sequence): {}", d.config.kv_cache_formula(positions, spec.batch as u64, elt))
    })
}

fn generate_no_grad_setup(ctx: &Ctx) -> Vec<String> {
    let spec = generate_no_grad_plan(ctx);
    vec![
        setup(&spec),
        "A: model.eval(), one forward pass per new token with autograd on; B: model.eval(), the same loop under torch.no_grad()".into(),
        shape(spec.model),
        format!("{}, greedy decoding", dtypes(&spec)),
        cache_after(&spec),
        "With autograd on, each op keeps the inputs its backward would read (a matmul its input, attention its queries and the keys and values it attended to) for as long as something holds its output".into(),
        "Memory is read after every step: allocated bytes beyond the weights, the prompt, the KV cache and the tokens generated so far".into(),
    ]
}

fn generate_no_grad(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
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
            fig("grad: allocated after the last step", last(&grad) as f64, "bytes"),
            fig("no_grad: allocated after the last step", last(&no_grad) as f64, "bytes"),
            fig("KV cache", kv as f64, "bytes"),
            fig("graph after the last step (grad)", *gg.last().unwrap_or(&0) as f64, "bytes"),
            fig("graph after the last step (no_grad)", *ng.last().unwrap_or(&0) as f64, "bytes"),
            fig("graph growth, first half of the steps (grad)", per_step(&inc[..half]), "bytes"),
            fig("graph growth, second half of the steps (grad)", per_step(&inc[inc.len() - half..]), "bytes"),
            fig("grad: left after the run", grad_r.memory.leaked_bytes as f64, "bytes"),
        ])
        .series(vec![
            series("grad enabled: allocated", "MiB", x.clone(), grad.steps.iter().map(|s| mib(s.allocated_bytes)).collect()),
            series("no_grad: allocated", "MiB", x.clone(), no_grad.steps.iter().map(|s| mib(s.allocated_bytes)).collect()),
            series("grad: graph beyond the cache", "MiB", x, gg.iter().map(|&b| mib(b)).collect()),
        ]))
}

pub const KV_CACHE_SIZE: Card = Card {
    id: "kv-cache-size",
    title: "The KV cache: 2 × layers × kv_heads × head_dim × tokens × batch × bytes",
    asks: "How many bytes does a decoder's KV cache take, and how does that grow with the context and the batch?",
    labels: ["memory budget from the weights' bytes", "memory budget from the weights' and the KV cache's bytes"],
    setup: kv_cache_size_setup,
    needs: Needs::Any,
    claim: "The KV cache is 2 × layers × kv_heads × head_dim × tokens × batch × bytes per element: linear in tokens and in batch, and at long contexts or large batches larger than the weights (for the Llama-3.1-8B shape in bf16, past about 122,500 tokens in all).",
    statements: &[
        Said::run("Measured from its tensors, the cache held exactly the formula's bytes at 24 and 48 positions, at batch 1 and 2: 2 (keys and values) × layers × KV heads × head_dim × positions × batch × bytes per element.", &["largest difference from the formula", "KV cache, batch 1 × 24 positions", "KV cache, batch 2 × 48 positions"]),
        Said::run("So doubling the positions or the batch doubled the cache exactly: it is linear in both.", &["KV cache, batch 1 × 24 positions", "KV cache, batch 1 × 48 positions", "KV cache, batch 2 × 24 positions", "KV cache, batch 2 × 48 positions"]),
        Said::run("One token of one sequence takes 2 × layers × KV heads × head_dim × bytes per element, over all the layers.", &["KV cache per token per sequence"]),
        Said::run("The cache passes the weights' bytes once batch × positions reaches the weights' bytes over one token's cache bytes.", &["weights", "KV cache per token per sequence", "tokens at which the cache passes the weights (batch 1)"]),
        Said::run("For the Llama-3.1-8B shape in bf16, computed from the same formula, one token takes 128 KiB and the cache passes the 16 GB of weights at about 122,500 tokens: within one 128k-token sequence, or a batch of 16 at 8k.", &["Llama-3.1-8B shape, bf16: KV cache per token", "Llama-3.1-8B shape, bf16: weights", "Llama-3.1-8B shape, bf16: tokens at which the cache passes the weights"]),
    ],
    source: "https://arxiv.org/abs/2309.06180",
    pitfall: "batch = 64; context = 8192\nassert weights_bytes < budget",
    fix: "batch = 64; context = 8192\nkv_bytes = kv_bytes_per_token(cfg, dtype) * context * batch\nassert weights_bytes + kv_bytes < budget",
    threshold: "confirmed when the cache bytes measured from its tensors equal the formula to the byte at two lengths and two batches (so doubling either doubles the cache exactly). The context at which the cache passes the weights is computed from the formula, for this shape and the Llama-3.1-8B shape. Regime: any device",
    question: crate::pitfalls::value("The setup's decoder, its cache in the dtype the setup gives: how many bytes do the keys and values of one token of one sequence take, over all its layers?", "KV cache per token per sequence", "bytes", crate::pitfalls::BYTES),
    experiment: kv_cache_size,
};

/// What kv-cache-size runs: four generations (batch 1 and 2, two lengths), in order.
fn kv_cache_size_plan(ctx: &Ctx) -> Vec<RunSpec> {
    let model = decoder(ctx, protocol::decoder::CPU_PRESET, "llama_3_2_1b");
    [(1, 16, 9), (1, 32, 17), (2, 16, 9), (2, 32, 17)]
        .into_iter()
        .map(|(batch, prompt, n)| gen_spec(ctx, model, batch, prompt, n, KvCacheKind::Dynamic, GradMode::NoGrad))
        .collect()
}

/// "Tiny Llama ..., batch 1 and 2, prompt 16 and 32 + 9 and 17 new tokens, dynamic cache, no_grad".
fn kv_cache_size_describe(specs: &[RunSpec]) -> String {
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

fn kv_cache_size_setup(ctx: &Ctx) -> Vec<String> {
    let specs = kv_cache_size_plan(ctx);
    let mut lines = vec![kv_cache_size_describe(&specs)];
    if let Some(s) = specs.first() {
        let (dtype, elt) = super::cache_dtype(s);
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

fn kv_cache_size(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let specs = kv_cache_size_plan(ctx);
    let model = specs[0].model;
    let elt = super::cache_dtype(&specs[0]).1;
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
    let (unit, scale) = if largest >= 4 << 20 { ("MiB", 1024.0 * 1024.0) } else { ("KiB", 1024.0) };
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
        fig("KV cache per token per sequence", measured[0] as f64 / (specs[0].batch as u64 * held_positions(&specs[0])).max(1) as f64, "bytes"),
        fig("weights", (config.parameters() * elt) as f64, "bytes"),
        fig("tokens at which the cache passes the weights (batch 1)", crossover(&config, elt) as f64, "count"),
        fig("largest difference from the formula", largest_difference as f64, "bytes"),
    ];
    for (spec, bytes) in specs.iter().zip(&measured) {
        figures.push(fig(&format!("KV cache, batch {} × {} positions", spec.batch, held_positions(spec)), *bytes as f64, "bytes"));
    }
    if let Some(c) = &eight_b {
        figures.push(fig("Llama-3.1-8B shape, bf16: KV cache per token", c.kv_cache_bytes(1, 1, 2) as f64, "bytes"));
        figures.push(fig("Llama-3.1-8B shape, bf16: weights", (c.parameters() * 2) as f64, "bytes"));
        figures.push(fig("Llama-3.1-8B shape, bf16: tokens at which the cache passes the weights", crossover(c, 2) as f64, "count"));
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
            "measured KV cache",
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
        Said::run("So the cache stores num_key_value_heads heads per layer: for the same prompt and tokens, the model with 2 KV heads held exactly a quarter of the bytes the one with 8 held.", &["GQA: KV cache", "without GQA: KV cache"]),
        Said::run("Only the key and value projections shrink with the KV heads (the queries, the output projection, the MLP and the embeddings do not), so the two models' parameter counts differ by a few percent.", &["GQA: parameters", "without GQA: parameters"]),
    ],
    source: "https://arxiv.org/abs/2305.13245",
    pitfall: "kv = 2 * layers * cfg.num_attention_heads * head_dim * tokens * batch * 2",
    fix: "kv = 2 * layers * cfg.num_key_value_heads * head_dim * tokens * batch * 2",
    threshold: "confirmed when the same shape with 8 KV heads and with 2 measures caches in exactly the ratio 8 / 2 = 4 while the parameter counts differ by under 15%. Regime: any device",
    question: crate::pitfalls::ratio("Same prompt and tokens: the GQA model's KV cache, as a multiple of the cache of the same shape without GQA? (The setup gives both shapes: layers, query heads, KV heads, head_dim.)", "GQA: KV cache", "without GQA: KV cache", crate::pitfalls::Ask::LogScale { min: 0.01, max: 10.0, within: 1.5 }),
    experiment: gqa,
};

/// What gqa runs: the 8-KV-head shape's generation, then the 2-KV-head one's.
fn gqa_plan(ctx: &Ctx) -> Result<(RunSpec, RunSpec), RunFailure> {
    let gqa: ModelId = protocol::decoder::CPU_PRESET.parse().map_err(|e: String| failure(protocol::FailureKind::Internal, e))?;
    let mha: ModelId = "llama_tiny_mha".parse().map_err(|e: String| failure(protocol::FailureKind::Internal, e))?;
    Ok((
        gen_spec(ctx, mha, 1, 16, 9, KvCacheKind::Dynamic, GradMode::NoGrad),
        gen_spec(ctx, gqa, 1, 16, 9, KvCacheKind::Dynamic, GradMode::NoGrad),
    ))
}

fn gqa_heads(m: ModelId) -> (u32, u32) {
    m.decoder().map_or((1, 1), |d| (d.config.num_attention_heads, d.config.num_key_value_heads))
}

/// "the tiny Llama shape with 8 query heads, 8 vs 2 KV heads, batch 1, prompt 16 + 9 new tokens".
fn gqa_describe(mha: &RunSpec, gqa: &RunSpec) -> String {
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

fn gqa_setup(ctx: &Ctx) -> Vec<String> {
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

fn gqa(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
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
            fig("without GQA: KV cache", a.kv_cache_bytes as f64, "bytes"),
            fig("GQA: KV cache", b.kv_cache_bytes as f64, "bytes"),
            fig("without GQA: parameters", params(mha) as f64, "count"),
            fig("GQA: parameters", params(gqa) as f64, "count"),
        ])
        .series(vec![series("KV cache", "MiB", vec![format!("{} KV heads", heads(mha).1), format!("{} KV heads", heads(gqa).1)], vec![mib(a.kv_cache_bytes), mib(b.kv_cache_bytes)])]))
}

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
        Said::run("Here the static cache held the same bytes from the prefill to the last token: its whole capacity, allocated at the first step.", &["static cache after the prefill", "static cache after the last step", "static cache: largest change between steps"]),
        Said::run("The dynamic cache held the prompt's positions after the prefill and grew by one position's keys and values per step.", &["dynamic cache after the prefill", "dynamic cache growth per step", "one position's keys and values"]),
        Said::run("After the last token the dynamic cache holds prompt + new tokens − 1 positions (the last token's keys and values are never computed), the static one its capacity, prompt + new tokens: sized exactly, as here, the static cache ends one position larger.", &["dynamic cache after the last step", "static cache after the last step", "one position's keys and values"]),
        Said::source("A CUDA graph replays the kernels it captured on the addresses they used: the static cache's tensors never move, so its decode step can be captured once and replayed (the replayed step attends to the whole capacity under a mask, so that its shapes never change either); on CUDA this run replays it beside eager decoding.", "aten/src/ATen/cuda/CUDAGraph.cpp", "CUDAGraph::replay", "cards"),
    ],
    source: "https://huggingface.co/docs/transformers/main/en/llm_optims#static-kv-cache-and-torchcompile",
    pitfall: "out = model.generate(ids, max_new_tokens=256)  # DynamicCache, the default",
    fix: "out = model.generate(ids, max_new_tokens=256, cache_implementation=\"static\")",
    threshold: "confirmed when the static cache's bytes are the same at every step and equal the formula for prompt + new tokens, while the dynamic one's grow by exactly one position's bytes per step. On CUDA the static cache's decode step is also captured once and replayed as a CUDA graph (the whole capacity attended under a mask), its per-token p50 reported beside eager's with the same tokens; that part decides nothing. Regime: any device (graph replay: CUDA only)",
    question: crate::pitfalls::ratio("The setup's decoder, same prompt and tokens: B's cache bytes (static cache, sized for prompt + new tokens) as a multiple of A's (dynamic cache) after the last token?", "static cache after the last step", "dynamic cache after the last step", crate::pitfalls::Ask::LogScale { min: 0.1, max: 10.0, within: 1.25 }),
    experiment: static_cache,
};

/// What static-cache runs: the static-cache generation (the dynamic one differs only in its
/// cache).
fn static_cache_plan(ctx: &Ctx) -> RunSpec {
    let model = decoder(ctx, protocol::decoder::CPU_PRESET, "llama_3_2_1b");
    gen_spec(ctx, model, 1, 16, 24, KvCacheKind::Static, GradMode::NoGrad)
}

fn static_cache_setup(ctx: &Ctx) -> Vec<String> {
    let spec = static_cache_plan(ctx);
    let g = spec.generate.clone().unwrap_or_default();
    let capacity = spec.resolved_input_size() + g.new_tokens;
    vec![
        setup(&spec),
        format!("A: the dynamic cache (transformers' DynamicCache), the same prompt and tokens; B: the static cache, sized for {} + {} = {capacity} positions", spec.resolved_input_size(), g.new_tokens),
        shape(spec.model),
        format!("{}, no_grad, greedy decoding", dtypes(&spec)),
        "Measured: each cache's bytes from its tensors, after every step".into(),
    ]
}

fn static_cache(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
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
            fig("static cache after the prefill", first(&st) as f64, "bytes"),
            fig("static cache after the last step", st.kv_cache_bytes as f64, "bytes"),
            fig("static cache: largest change between steps", static_change as f64, "bytes"),
            fig("dynamic cache after the prefill", first(&dy) as f64, "bytes"),
            fig("dynamic cache after the last step", dy.kv_cache_bytes as f64, "bytes"),
            fig("dynamic cache growth per step", dynamic_growth, "bytes"),
            fig("one position's keys and values", one as f64, "bytes"),
        ])
        .series(vec![
            series("static: KV cache", "MiB", x.clone(), st.steps.iter().map(|s| mib(s.kv_cache_bytes)).collect()),
            series("dynamic: KV cache", "MiB", x, dy.steps.iter().map(|s| mib(s.kv_cache_bytes)).collect()),
        ])
        .notes(vec![
            "CUDA graph replay (advanced.cuda_graph with the static cache) attends to the cache's whole capacity under a mask, so every step has the same shapes and addresses; the eager static cache attends to the positions filled so far.".into(),
            "A static cache sized for more positions than a generation uses (a server's max_cache_len) holds the difference for the whole generation.".into(),
        ]))
}

pub const PADDING_WASTE: Card = Card {
    id: "padding-waste",
    title: "Left-padding a batch pays for the padding",
    asks: "What does generating prompts of different lengths as one left-padded batch do to the KV cache's bytes, against generating them one by one?",
    labels: ["prompts left-padded into one batch", "each prompt generated on its own"],
    setup: padding_waste_setup,
    needs: Needs::Any,
    claim: "A batch of prompts of different lengths, left-padded to the longest, computes and caches every padding position like a real one: the cache holds exactly the padding positions' keys and values more than the prompts generated one by one. One by one pays no padding, but gives up what a batch shares (see decode-batch).",
    statements: &[
        Said::run("Left-padding makes every prompt as long as the longest: the padded batch's prefill fed 4 × 32 = 128 prompt positions where the four prompts have 80.", &["padded batch: prompt positions fed", "one by one: prompt positions fed"]),
        Said::run("Each padding position is computed and cached like a real one: the padded batch's cache exceeded the four caches generated one by one by exactly the 48 padding positions' keys and values.", &["padded batch beyond one by one: KV cache", "padding positions' keys and values"]),
        Said::torch("An attention mask only hides padded positions from the real ones' attention: their keys and values are still computed and kept in the cache.", "test_generation.py::test_a_mask_hides_padded_keys_that_are_still_there"),
    ],
    source: "https://huggingface.co/docs/transformers/main/en/llm_tutorial#wrong-padding-side",
    pitfall: "tokenizer.padding_side = \"left\"\nbatch = tokenizer(prompts, padding=True, return_tensors=\"pt\")  # every prompt as long as the longest\nmodel.generate(**batch, max_new_tokens=8)",
    fix: "# each prompt in its own call\nfor prompt in prompts:\n    batch = tokenizer([prompt], return_tensors=\"pt\")\n    model.generate(**batch, max_new_tokens=8)",
    threshold: "confirmed when the padded batch's measured cache exceeds the four prompts' caches generated one by one by exactly the padding positions' bytes (the formula at 48 padding positions). The times of both ways are reported; they decide nothing (on a CPU a batch can be faster in total even with its waste). The padded rows run without an attention mask here: the cost is what padding costs, their tokens are not compared. Regime: any device",
    question: crate::pitfalls::ratio("The setup's decoder and prompts: the bytes A's cache (the padded batch) holds beyond B's four caches together, as a multiple of B's four caches together?", "padded batch beyond one by one: KV cache", "one by one: KV caches", crate::pitfalls::Ask::LogScale { min: 0.01, max: 10.0, within: 1.5 }),
    experiment: padding_waste,
};

/// What padding-waste runs: the decoder, the prompts' lengths and the new tokens of each.
fn padding_waste_plan(ctx: &Ctx) -> (ModelId, [u32; 4], u32) {
    (decoder(ctx, protocol::decoder::CPU_PRESET, "llama_3_2_1b"), [8, 16, 24, 32], 8)
}

fn padding_waste_describe(model: ModelId, lengths: &[u32], n: u32) -> String {
    format!("{}, batch {} (padded) against batch 1 (one by one), prompts of {lengths:?} tokens + {n} new each, dynamic cache, no_grad", model.display_name(), lengths.len())
}

fn padding_waste_setup(ctx: &Ctx) -> Vec<String> {
    let (model, lengths, n) = padding_waste_plan(ctx);
    let longest = lengths.iter().max().copied().unwrap_or(0);
    let spec = gen_spec(ctx, model, 1, longest, n, KvCacheKind::Dynamic, GradMode::NoGrad);
    vec![
        padding_waste_describe(model, &lengths, n),
        format!("A: the {} prompts left-padded to {longest} tokens, generated as one batch of {}, no attention mask; B: each prompt generated alone at batch 1", lengths.len(), lengths.len()),
        shape(model),
        format!("{}; after the last token each sequence's cache holds its prompt (padding included) and every new token but the last", dtypes(&spec)),
        "Measured: each cache's bytes from its tensors after the last token, and each way's total time".into(),
    ]
}

fn padding_waste(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let (model, lengths, n) = padding_waste_plan(ctx);
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
    Ok(Outcome::new(decision, padding_waste_describe(model, &lengths, n), ChartKind::Bar)
        .figures(vec![
            fig("padded batch: KV cache", padded.kv_cache_bytes as f64, "bytes"),
            fig("one by one: KV caches", one_by_one_bytes as f64, "bytes"),
            fig("padded batch beyond one by one: KV cache", waste as f64, "bytes"),
            fig("padding positions' keys and values", waste_formula as f64, "bytes"),
            fig("padded batch: prompt positions fed", padded_fed as f64, "count"),
            fig("one by one: prompt positions fed", one_by_one_fed as f64, "count"),
            fig("padded batch: time", padded_ms, "ms"),
            fig("one by one: time", one_by_one_ms, "ms"),
        ])
        .series(vec![series("KV cache", "MiB", vec!["padded batch".into(), "one by one".into()], vec![mib(padded.kv_cache_bytes), mib(one_by_one_bytes)])])
        .notes(vec!["One by one pays no padding, but each prompt's decode steps then read the weights for one sequence instead of four (see decode-batch); grouping prompts of similar length, or a server that packs sequences without padding, keeps the batch and drops most of the padding.".into()]))
}

pub const INFERENCE_TENSOR_CACHE: Card = Card {
    id: "inference-tensor-cache",
    title: "A cache made under inference_mode cannot be updated outside it",
    asks: "What happens when a cache tensor allocated under torch.inference_mode() is written in place outside it, under torch.no_grad()?",
    labels: ["allocated under inference_mode, written under no_grad", "allocated and written under inference_mode"],
    setup: inference_tensor_cache_setup,
    needs: Needs::Any,
    claim: "A cache allocated under torch.inference_mode() cannot be updated in place outside it, under torch.no_grad() included: allocate and write it under the same mode.",
    statements: &[
        Said::torch("A tensor created under torch.inference_mode() is an inference tensor: it has no version counter, the counter autograd reads to detect in-place changes.", "test_generation.py::test_a_tensor_made_under_inference_mode_is_an_inference_tensor"),
        Said::torch("So PyTorch refuses an in-place update to it outside inference_mode, under torch.no_grad() too: \"Inplace update to inference tensor outside InferenceMode is not allowed\".", "test_generation.py::test_writing_it_in_place_outside_inference_mode_raises"),
        Said::run("Here libtorch raised that error when the cache tensor made under inference_mode was written under no_grad.", &["error raised"]),
        Said::torch("Written in the mode it was made in (inference_mode for both, or no_grad for both), the same update works.", "test_generation.py::test_writing_it_in_the_mode_it_was_made_in_works"),
        Said::run("Here both ways worked.", &["fix: same mode", "fix: no_grad for both"]),
    ],
    source: "https://pytorch.org/docs/stable/generated/torch.autograd.grad_mode.inference_mode.html",
    pitfall: "with torch.inference_mode():\n    cache = StaticCache(config=model.config, max_cache_len=1024)\nwith torch.no_grad():\n    model(ids, past_key_values=cache)  # writes the new keys and values into the cache",
    fix: "with torch.inference_mode():  # allocated and written under inference_mode\n    cache = StaticCache(config=model.config, max_cache_len=1024)\n    model(ids, past_key_values=cache)",
    threshold: "confirmed when libtorch raises its error for the in-place write to a cache tensor made under inference_mode from outside it, and both fixes (allocate and update under inference_mode; no_grad for both) succeed. Regime: any device",
    question: crate::pitfalls::value("In A (a cache tensor allocated under inference_mode, then one position written into it in place under no_grad), does libtorch raise an error? (A knowledge check: what PyTorch allows a tensor made under inference_mode.)", "error raised", "bool", crate::pitfalls::Ask::YesNo),
    experiment: inference_tensor_cache,
};

/// The cache tensor inference-tensor-cache writes into: batch, KV heads, positions, head_dim.
const CACHE_SHAPE: [i64; 4] = [1, 2, 16, 32];

fn inference_tensor_cache_describe() -> String {
    let [b, h, t, d] = CACHE_SHAPE;
    format!("a cache tensor of batch {b}, {h} KV heads, {t} positions, head_dim {d}")
}

fn inference_tensor_cache_setup(_ctx: &Ctx) -> Vec<String> {
    vec![
        inference_tensor_cache_describe(),
        "A: the tensor allocated (zeros) under torch.inference_mode(), then its first position overwritten in place under torch.no_grad(); B: allocated and overwritten under torch.inference_mode(); also measured: allocated and overwritten under torch.no_grad()".into(),
        "fp32; one in-place copy of one position's keys per way".into(),
    ]
}

fn inference_tensor_cache(_lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    use crate::torch_ext::InferenceModeGuard;
    use tch::{Kind, Tensor};
    let device = crate::torch_call::tch_device(ctx.device);
    let shape = CACHE_SHAPE;
    let enter = || InferenceModeGuard::enter().map_err(crate::torch_call::torch_failure);
    let new_kv = || Tensor::randn([shape[0], shape[1], 1, shape[3]], (Kind::Float, device));
    // The pitfall: made inside, written outside (under no_grad, as a decode loop would).
    let cache = {
        let _im = enter()?;
        catch_torch(|| Tensor::zeros(shape, (Kind::Float, device)))?
    };
    let is_inference = cache.is_inference();
    let error = {
        let _ng = tch::no_grad_guard();
        let kv = new_kv();
        catch_torch(|| cache.narrow(2, 0, 1).copy_(&kv)).err().map(|f| f.message)
    };
    // Fix 1: allocate and update under the same mode.
    let same_mode = {
        let _im = enter()?;
        catch_torch(|| {
            let c = Tensor::zeros(shape, (Kind::Float, device));
            c.narrow(2, 0, 1).copy_(&new_kv());
        })
        .is_ok()
    };
    // Fix 2: no_grad for both.
    let no_grad = {
        let _ng = tch::no_grad_guard();
        catch_torch(|| {
            let c = Tensor::zeros(shape, (Kind::Float, device));
            c.narrow(2, 0, 1).copy_(&new_kv());
        })
        .is_ok()
    };
    let raised = error.as_ref().is_some_and(|e| e.to_lowercase().contains("inference tensor"));
    let decision = Decision::rule(
        is_inference && raised && same_mode && no_grad,
        format!("libtorch refused the write: \"{}\"; allocating and updating under inference_mode, or using no_grad for both, worked.", error.clone().unwrap_or_default()),
        format!("Error {:?}, same-mode fix {same_mode}, no_grad fix {no_grad}.", error),
    );
    Ok(Outcome::new(decision, inference_tensor_cache_describe(), ChartKind::Bar)
        .figures(vec![
            fig("error raised", if raised { 1.0 } else { 0.0 }, "bool"),
            fig("fix: same mode", if same_mode { 1.0 } else { 0.0 }, "bool"),
            fig("fix: no_grad for both", if no_grad { 1.0 } else { 0.0 }, "bool"),
        ])
        .notes(error.map(|e| vec![format!("libtorch: {e}")]).unwrap_or_default()))
}
