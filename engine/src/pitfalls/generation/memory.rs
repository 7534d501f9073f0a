//! The generation cards about memory: what the cache and the graph hold
//! (`generate-no-grad`, `kv-cache-size`, `gqa`, `static-cache`, `padding-waste`) and the
//! inference-tensor trap of a cache made in one mode and written in another.

use protocol::{
    ChartKind, GenerationReport, GradMode, KvCacheKind, ModelId, RunFailure, RunSpec, Table,
};

use super::super::kit::{fig, mib, series, Ctx, Decision, Outcome};
use super::super::Card;
use super::{decoder, gen_spec, generate, positions, rules, setup};
use crate::lab::Lab;
use crate::torch_call::{catch_torch, failure};

pub const GENERATE_NO_GRAD: Card = Card {
    id: "generate-no-grad",
    title: "A generation loop without no_grad keeps every step's graph",
    claim: "A hand-written generation loop without torch.no_grad() keeps every step's autograd graph alive through the KV cache: memory grows faster than the cache, step after step, and model.eval() does not stop it.",
    why: "The cache's keys and values are outputs of the attention projections; with grad enabled each carries its grad_fn, which holds the step's saved activations (and, through the attention, the whole cache as it stood). Nothing is freed until the cache and the outputs are dropped. eval() only switches dropout off. (allenai/OLMo#164: a loop grew from 4 GB to 24 GB in 100 steps and ran out of memory at 200.)",
    source: "https://pytorch.org/docs/stable/generated/torch.no_grad.html",
    pitfall: "model.eval()\ncache = DynamicCache(config=model.config)\nfor step in range(new_tokens):\n    logits = model(ids, past_key_values=cache).logits  # graph kept through the cache",
    fix: "model.eval()\nwith torch.inference_mode():  # or torch.no_grad(); model.generate() does this itself\n    for step in range(new_tokens):\n        logits = model(ids, past_key_values=cache).logits",
    threshold: "confirmed when, in eval mode with a dynamic cache, grad-enabled memory beyond the weights, prompt, KV cache and tokens rises at every step and by more in the second half of the steps than in the first (superlinear: each step's attention saves the whole cache as it stood), no_grad holds none beyond 64 KiB (CUDA block rounding), and memory returns to the baseline after the run. Regime: any device; the CPU counts allocations exactly",
    question: crate::pitfalls::value("Generating with autograd on: how many bytes does the graph hold after the last token?", "graph after the last step (grad)", "bytes", crate::pitfalls::BYTES),
    experiment: generate_no_grad,
};

fn generate_no_grad(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let model = decoder(ctx, protocol::decoder::CPU_PRESET, "llama_3_2_1b");
    let (prompt, n) = if ctx.cuda() { (128, 48) } else { (16, 24) };
    let grad_spec = gen_spec(ctx, model, 1, prompt, n, KvCacheKind::Dynamic, GradMode::Enabled);
    let (grad_r, grad) = generate(lab, ctx, grad_spec.clone())?;
    ctx.check()?;
    let (_, no_grad) = generate(lab, ctx, gen_spec(ctx, model, 1, prompt, n, KvCacheKind::Dynamic, GradMode::NoGrad))?;
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
    Ok(Outcome::new(decision, setup(&grad_spec), ChartKind::Line)
        .figures(vec![
            fig("grad: allocated after the last step", last(&grad) as f64, "bytes"),
            fig("no_grad: allocated after the last step", last(&no_grad) as f64, "bytes"),
            fig("KV cache", kv as f64, "bytes"),
            fig("graph after the last step (grad)", *gg.last().unwrap_or(&0) as f64, "bytes"),
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
    claim: "The KV cache is 2 × layers × kv_heads × head_dim × tokens × batch × bytes per element: linear in tokens and in batch, and at long contexts often larger than the weights.",
    why: "Every layer keeps one key and one value vector per KV head for every position of every sequence. Nothing else grows with the context, so the cache, not the weights, decides how many requests fit (the PagedAttention paper, arXiv 2309.06180 §3: 800 KB per token for OPT-13B).",
    source: "https://arxiv.org/abs/2309.06180",
    pitfall: "# \"the model is 16 GB, the GPU has 80: plenty of room\"\nbatch = 64; context = 8192",
    fix: "kv_bytes = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * context * batch * dtype_bytes\nassert weights_bytes + kv_bytes < budget",
    threshold: "confirmed when the cache bytes measured from its tensors equal the formula to the byte at two lengths and two batches (so doubling either doubles the cache exactly). The context at which the cache passes the weights is computed from the formula, for this shape and the Llama-3.1-8B shape. Regime: any device",
    question: crate::pitfalls::value("How many bytes does the KV cache take per token, per sequence?", "KV cache per token per sequence", "bytes", crate::pitfalls::BYTES),
    experiment: kv_cache_size,
};

fn kv_cache_size(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let model = decoder(ctx, protocol::decoder::CPU_PRESET, "llama_3_2_1b");
    let config = model
        .decoder()
        .map(|d| d.config.clone())
        .ok_or_else(|| failure(protocol::FailureKind::Internal, "no decoder"))?;
    let mut rows = vec![];
    let mut all_equal = true;
    let mut measured = vec![];
    for (batch, prompt, n) in [(1, 16, 9), (1, 32, 17), (2, 16, 9), (2, 32, 17)] {
        ctx.check()?;
        let (_, g) = generate(lab, ctx, gen_spec(ctx, model, batch, prompt, n, KvCacheKind::Dynamic, GradMode::NoGrad))?;
        all_equal &= g.kv_cache_bytes == g.kv_cache_formula_bytes;
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
    let eight_b = protocol::decoder::lookup("llama_3_1_8b").map(|d| d.config.clone());
    let largest = measured.iter().copied().max().unwrap_or(0);
    let (unit, scale) = if largest >= 4 << 20 { ("MiB", 1024.0 * 1024.0) } else { ("KiB", 1024.0) };
    let at = crossover(&config, 4);
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
        protocol::format_bytes(config.parameters() * 4),
        at,
        at / 8
    )];
    notes.push(
        "Positions held: prompt + new tokens − 1 (16 + 9 − 1 = 24, 32 + 17 − 1 = 48): the last token is returned, its keys and values are never needed, so they are never computed, as in transformers' cache."
            .to_string(),
    );
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
    Ok(Outcome::new(decision, format!("{}, batch 1 and 2, prompt 16 and 32 + 9 and 17 new tokens, dynamic cache, no_grad", model.display_name()), ChartKind::Bar)
        .figures(vec![
            fig("KV cache per token per sequence", config.kv_cache_bytes(1, 1, 4) as f64, "bytes"),
            fig("weights", (config.parameters() * 4) as f64, "bytes"),
            fig("tokens at which the cache passes the weights (batch 1)", crossover(&config, 4) as f64, "count"),
        ])
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
    title: "Grouped-query attention shrinks the cache, not the model",
    claim: "Grouped-query attention shrinks the KV cache by num_attention_heads / num_key_value_heads without changing the weights' count much.",
    why: "With GQA several query heads share one key/value head: only the k and v projections (and what they write to the cache) shrink. Llama-3-8B has 32 query heads and 8 KV heads, a cache 4× smaller than with one KV head per query head.",
    source: "https://arxiv.org/abs/2305.13245",
    pitfall: "# assuming the cache scales with num_attention_heads\nkv = 2 * layers * cfg.num_attention_heads * head_dim * tokens * batch * 2",
    fix: "kv = 2 * layers * cfg.num_key_value_heads * head_dim * tokens * batch * 2",
    threshold: "confirmed when the same shape with 8 KV heads and with 2 measures caches in exactly the ratio 8 / 2 = 4 while the parameter counts differ by under 15%. Regime: any device",
    question: crate::pitfalls::ratio("With 2 KV heads instead of 8, the KV cache as a multiple of the 8-head one?", "KV cache, 2 KV heads", "KV cache, 8 KV heads", crate::pitfalls::Ask::LogScale { min: 0.01, max: 10.0, within: 1.5 }),
    experiment: gqa,
};

fn gqa(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let gqa: ModelId = protocol::decoder::CPU_PRESET.parse().map_err(|e: String| failure(protocol::FailureKind::Internal, e))?;
    let mha: ModelId = "llama_tiny_mha".parse().map_err(|e: String| failure(protocol::FailureKind::Internal, e))?;
    let (_, a) = generate(lab, ctx, gen_spec(ctx, mha, 1, 16, 9, KvCacheKind::Dynamic, GradMode::NoGrad))?;
    ctx.check()?;
    let (_, b) = generate(lab, ctx, gen_spec(ctx, gqa, 1, 16, 9, KvCacheKind::Dynamic, GradMode::NoGrad))?;
    let params = |m: ModelId| m.decoder().map_or(0, |d| d.config.parameters());
    let heads = |m: ModelId| m.decoder().map_or((1, 1), |d| (d.config.num_attention_heads, d.config.num_key_value_heads));
    let ratio = a.kv_cache_bytes as f64 / b.kv_cache_bytes.max(1) as f64;
    let want = heads(mha).1 as f64 / heads(gqa).1 as f64;
    let param_change = params(mha) as f64 / params(gqa) as f64 - 1.0;
    let decision = Decision::rule(
        a.kv_cache_bytes * heads(gqa).1 as u64 == b.kv_cache_bytes * heads(mha).1 as u64 && param_change.abs() < 0.15,
        format!("{} KV heads hold {} and {} hold {} — exactly {want:.0}× — while the weights differ by {:.1}%.", heads(mha).1, protocol::format_bytes(a.kv_cache_bytes), heads(gqa).1, protocol::format_bytes(b.kv_cache_bytes), param_change * 100.0),
        format!("Cache ratio {ratio:.3} (expected {want:.0}), parameters differ by {:.1}%.", param_change * 100.0),
    );
    Ok(Outcome::new(decision, format!("the tiny Llama shape with {} query heads, 8 vs 2 KV heads, batch 1, prompt 16 + 9 new tokens", heads(gqa).0), ChartKind::Bar)
        .figures(vec![
            fig("KV cache, 8 KV heads", a.kv_cache_bytes as f64, "bytes"),
            fig("KV cache, 2 KV heads", b.kv_cache_bytes as f64, "bytes"),
            fig("parameters, 8 KV heads", params(mha) as f64, "count"),
            fig("parameters, 2 KV heads", params(gqa) as f64, "count"),
        ])
        .series(vec![series("KV cache", "MiB", vec!["8 KV heads".into(), "2 KV heads".into()], vec![mib(a.kv_cache_bytes), mib(b.kv_cache_bytes)])]))
}

pub const STATIC_CACHE: Card = Card {
    id: "static-cache",
    title: "A static cache is allocated once and never grows",
    claim: "A static cache allocates its whole length up front and never grows; on CUDA its fixed shapes are what let the decode step be captured and replayed as a CUDA graph.",
    why: "A dynamic cache concatenates one more position per step, allocating new tensors each time; a static one (transformers' StaticCache, gpt-fast) writes each step's keys and values in place into tensors sized for prompt + new tokens. A CUDA graph replays fixed addresses and shapes, which only the static layout has.",
    source: "https://huggingface.co/docs/transformers/main/en/llm_optims#static-kv-cache-and-torchcompile",
    pitfall: "out = model.generate(ids, max_new_tokens=256)  # DynamicCache: new tensors every step",
    fix: "out = model.generate(ids, max_new_tokens=256, cache_implementation=\"static\")",
    threshold: "confirmed when the static cache's bytes are the same at every step and equal the formula for prompt + new tokens, while the dynamic one's grow by exactly one position's bytes per step. On CUDA the static cache's decode step is also captured once and replayed as a CUDA graph (the whole capacity attended under a mask), its per-token p50 reported beside eager's with the same tokens; that part decides nothing. Regime: any device (graph replay: CUDA only)",
    question: crate::pitfalls::ratio("The static cache's bytes as a multiple of the dynamic cache's after the last step?", "static cache (every step)", "dynamic cache after the last step", crate::pitfalls::Ask::LogScale { min: 0.1, max: 10.0, within: 1.25 }),
    experiment: static_cache,
};

fn static_cache(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let model = decoder(ctx, protocol::decoder::CPU_PRESET, "llama_3_2_1b");
    let (prompt, n) = (16, 24);
    let spec = gen_spec(ctx, model, 1, prompt, n, KvCacheKind::Static, GradMode::NoGrad);
    let (_, st) = generate(lab, ctx, spec.clone())?;
    ctx.check()?;
    let (_, dy) = generate(lab, ctx, gen_spec(ctx, model, 1, prompt, n, KvCacheKind::Dynamic, GradMode::NoGrad))?;
    let config = model.decoder().map(|d| d.config.clone()).ok_or_else(|| failure(protocol::FailureKind::Internal, "no decoder"))?;
    let elt = st.kv_cache_element_bytes as u64;
    let full = config.kv_cache_bytes((prompt + n) as u64, 1, elt);
    let one = config.kv_cache_bytes(1, 1, elt);
    let static_flat = st.steps.iter().all(|s| s.kv_cache_bytes == full);
    let dynamic_steps = dy.steps.windows(2).all(|w| w[1].kv_cache_bytes - w[0].kv_cache_bytes == one);
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
            fig("static cache (every step)", full as f64, "bytes"),
            fig("dynamic cache after the last step", dy.kv_cache_bytes as f64, "bytes"),
        ])
        .series(vec![
            series("static: KV cache", "MiB", x.clone(), st.steps.iter().map(|s| mib(s.kv_cache_bytes)).collect()),
            series("dynamic: KV cache", "MiB", x, dy.steps.iter().map(|s| mib(s.kv_cache_bytes)).collect()),
        ])
        .notes(vec!["CUDA graph replay (advanced.cuda_graph with the static cache) attends to the cache's whole capacity under a mask, so every step has the same shapes and addresses; the eager static cache attends to the positions filled so far.".into()]))
}

pub const PADDING_WASTE: Card = Card {
    id: "padding-waste",
    title: "Left-padding a batch pays for the padding",
    claim: "A batch of prompts of different lengths, left-padded to the longest, pays KV cache and compute for the padding.",
    why: "Padding positions are computed and cached like real ones; the attention mask only hides them. Four prompts of 8, 16, 24 and 32 tokens padded to 32 hold a cache for 128 prompt positions where 80 are real.",
    source: "https://huggingface.co/docs/transformers/main/en/llm_tutorial#wrong-padding-side",
    pitfall: "batch = tokenizer(prompts, padding=True, return_tensors=\"pt\")  # every prompt as long as the longest",
    fix: "# group prompts of similar length, or a server that packs them (continuous batching, PagedAttention)",
    threshold: "confirmed when the padded batch's measured cache exceeds the four prompts' caches generated one by one by exactly the padding positions' bytes (the formula at 48 padding positions). The times of both ways are reported; they decide nothing (on a CPU a batch can be faster in total even with its waste). The padded rows run without an attention mask here: the cost is what padding costs, their tokens are not compared. Regime: any device",
    question: crate::pitfalls::ratio("The bytes wasted on padding, as a multiple of the caches needed one by one?", "wasted on padding", "one by one: KV caches", crate::pitfalls::Ask::LogScale { min: 0.01, max: 10.0, within: 1.5 }),
    experiment: padding_waste,
};

fn padding_waste(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let model = decoder(ctx, protocol::decoder::CPU_PRESET, "llama_3_2_1b");
    let lengths = [8u32, 16, 24, 32];
    let n = 8;
    let longest = *lengths.iter().max().unwrap_or(&32);
    let padded_spec = gen_spec(ctx, model, lengths.len() as u32, longest, n, KvCacheKind::Dynamic, GradMode::NoGrad);
    let (_, padded) = generate(lab, ctx, padded_spec.clone())?;
    let mut one_by_one_bytes = 0;
    let mut one_by_one_ms = 0.0;
    for &len in &lengths {
        ctx.check()?;
        let (_, g) = generate(lab, ctx, gen_spec(ctx, model, 1, len, n, KvCacheKind::Dynamic, GradMode::NoGrad))?;
        one_by_one_bytes += g.kv_cache_bytes;
        one_by_one_ms += g.steps.iter().map(|s| s.latency_ms).sum::<f64>();
    }
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
    Ok(Outcome::new(decision, format!("{}, batch 4 (padded) against batch 1 (one by one), prompts of {lengths:?} tokens + {n} new each, dynamic cache, no_grad", model.display_name()), ChartKind::Bar)
        .figures(vec![
            fig("padded batch: KV cache", padded.kv_cache_bytes as f64, "bytes"),
            fig("one by one: KV caches", one_by_one_bytes as f64, "bytes"),
            fig("wasted on padding", waste as f64, "bytes"),
            fig("padded batch: time", padded_ms, "ms"),
            fig("one by one: time", one_by_one_ms, "ms"),
        ])
        .series(vec![series("KV cache", "MiB", vec!["padded batch".into(), "one by one".into()], vec![mib(padded.kv_cache_bytes), mib(one_by_one_bytes)])]))
}

pub const INFERENCE_TENSOR_CACHE: Card = Card {
    id: "inference-tensor-cache",
    title: "A cache made under inference_mode cannot be updated outside it",
    claim: "A cache allocated under torch.inference_mode() cannot be updated in place outside it.",
    why: "Tensors created in inference mode are inference tensors: they have no version counter, so autograd could not tell if they changed, and PyTorch forbids in-place updates to them outside the mode. A static cache pre-allocated in one mode and written in another trips on it.",
    source: "https://pytorch.org/docs/stable/generated/torch.autograd.grad_mode.inference_mode.html",
    pitfall: "with torch.inference_mode():\n    cache = StaticCache(config=model.config, max_cache_len=1024)\nwith torch.no_grad():\n    model(ids, past_key_values=cache)  # in-place write to an inference tensor: RuntimeError",
    fix: "with torch.inference_mode():  # allocate and update under the same mode\n    cache = StaticCache(config=model.config, max_cache_len=1024)\n    model(ids, past_key_values=cache)\n# or: torch.no_grad() for both",
    threshold: "confirmed when libtorch raises its error for the in-place write to a cache tensor made under inference_mode from outside it, and both fixes (allocate and update under inference_mode; no_grad for both) succeed. Regime: any device",
    question: crate::pitfalls::value("Does writing into a cache made under inference_mode, outside it, raise an error?", "error raised", "bool", crate::pitfalls::Ask::YesNo),
    experiment: inference_tensor_cache,
};

fn inference_tensor_cache(_lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    use crate::torch_ext::InferenceModeGuard;
    use tch::{Kind, Tensor};
    let device = crate::torch_call::tch_device(ctx.device);
    let shape = [1i64, 2, 16, 32];
    let enter = || InferenceModeGuard::enter().map_err(crate::torch_call::torch_failure);
    let new_kv = || Tensor::randn([1, 2, 1, 32], (Kind::Float, device));
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
    Ok(Outcome::new(decision, "a cache tensor of batch 1, 2 KV heads, 16 positions, head_dim 32".to_string(), ChartKind::Bar)
        .figures(vec![
            fig("error raised", if raised { 1.0 } else { 0.0 }, "bool"),
            fig("fix: same mode", if same_mode { 1.0 } else { 0.0 }, "bool"),
            fig("fix: no_grad for both", if no_grad { 1.0 } else { 0.0 }, "bool"),
        ])
        .notes(error.map(|e| vec![format!("libtorch: {e}")]).unwrap_or_default()))
}
