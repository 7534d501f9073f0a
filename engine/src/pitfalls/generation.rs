//! The generation cards: what a team serving decoder LLMs gets wrong, each decided by a
//! live generate run on a decoder (the CPU preset on a CPU, the Llama-3.2-1B shape on a
//! GPU). Every rule is a pure function of the measured figures ([`rules`]), tested against
//! CPU-like and CUDA-like figures; the experiments gather those figures.

use protocol::{
    Autocast, ChartKind, GenPhase, GenerateSpec, GenerationReport, GradMode, KvCacheKind,
    ModelId, Report, RunFailure, RunSpec, Table, WeightsDtype,
};

use super::kit::{fig, measure, mib, series, Ctx, Decision, Outcome};
use super::Card;
use crate::lab::Lab;
use crate::torch_call::{catch_torch, failure};

/// The card's decoder: the CPU preset, or a 1B shape on a GPU.
fn decoder(ctx: &Ctx, cpu: &str, cuda: &str) -> ModelId {
    let name = if ctx.cuda() { cuda } else { cpu };
    ctx.model(name.parse().unwrap_or(ModelId::TinyMlp))
}

fn gen_spec(ctx: &Ctx, model: ModelId, batch: u32, prompt: u32, new_tokens: u32, cache: KvCacheKind, grad: GradMode) -> RunSpec {
    RunSpec {
        input_size: Some(prompt),
        generate: Some(GenerateSpec { new_tokens, cache }),
        ..ctx.spec(model, batch, true, grad)
    }
}

/// One generation, measured as the Generate page measures it.
fn generate(lab: &mut Lab, ctx: &Ctx, spec: RunSpec) -> Result<(Report, GenerationReport), RunFailure> {
    let report = measure(lab, ctx, spec)?;
    let g = report
        .generation
        .clone()
        .ok_or_else(|| failure(protocol::FailureKind::Internal, "a generate run without its generation"))?;
    Ok((report, g))
}

/// "Tiny Llama ..., batch 1, prompt 32 + 24 new tokens, dynamic cache".
fn setup(spec: &RunSpec) -> String {
    let g = spec.generate.clone().unwrap_or_default();
    format!(
        "{}, batch {}, prompt {} + {} new tokens, {} cache",
        spec.model.display_name(),
        spec.batch,
        spec.resolved_input_size(),
        g.new_tokens,
        g.cache.as_str()
    )
}

fn decode_ms(g: &GenerationReport) -> Vec<f64> {
    g.steps.iter().filter(|s| s.phase == GenPhase::Decode).map(|s| s.latency_ms).collect()
}

fn positions(g: &GenerationReport) -> Vec<String> {
    g.steps.iter().map(|s| s.position.to_string()).collect()
}

/// The rules, as pure functions of the figures.
pub mod rules {
    /// Spearman's rank correlation of `ys` against their order.
    pub fn rank_correlation(ys: &[f64]) -> f64 {
        let n = ys.len();
        if n < 3 {
            return 0.0;
        }
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| ys[a].total_cmp(&ys[b]));
        let mut rank = vec![0.0; n];
        for (r, &i) in order.iter().enumerate() {
            rank[i] = r as f64;
        }
        let mean = (n as f64 - 1.0) / 2.0;
        let (mut num, mut dx, mut dy) = (0.0, 0.0, 0.0);
        for (i, r) in rank.iter().enumerate() {
            let (a, b) = (i as f64 - mean, r - mean);
            num += a * b;
            dx += a * a;
            dy += b * b;
        }
        num / (dx * dy).sqrt()
    }

    pub fn median(v: &[f64]) -> f64 {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        if v.is_empty() {
            0.0
        } else {
            v[v.len() / 2]
        }
    }

    /// `generate-no-grad`: with grad the graph's bytes (allocated beyond the weights, the
    /// prompt, the cache and the tokens) rise at every step and by more per step in the
    /// second half than in the first (superlinear), while no_grad holds none beyond
    /// `slack` (allocator rounding on CUDA), and both return to the baseline.
    pub fn graph_grows(grad_graph: &[u64], no_grad_graph: &[u64], grad_leaked: u64, slack: u64) -> bool {
        if grad_graph.len() < 4 {
            return false;
        }
        let rises = grad_graph.windows(2).all(|w| w[1] > w[0]);
        let inc: Vec<u64> = grad_graph.windows(2).map(|w| w[1] - w[0]).collect();
        let half = inc.len() / 2;
        let first: u64 = inc[..half].iter().sum();
        let second: u64 = inc[inc.len() - half..].iter().sum();
        rises && second > first && no_grad_graph.iter().all(|&g| g <= slack) && grad_leaked == 0
    }

    /// `use-cache-off`: without the cache the decode steps' time rises with the position
    /// (rank correlation above 0.5), its last steps take more than twice the cached ones',
    /// the tokens are the same and it holds less memory after the last step.
    pub fn recompute_costs(off_ms: &[f64], cached_ms: &[f64], same_tokens: bool, off_held: u64, cached_held: u64) -> (bool, f64, f64) {
        let rho = rank_correlation(off_ms);
        let tail = 8.min(off_ms.len()).min(cached_ms.len()).max(1);
        let ratio = median(&off_ms[off_ms.len().saturating_sub(tail)..])
            / median(&cached_ms[cached_ms.len().saturating_sub(tail)..]).max(1e-9);
        (rho > 0.5 && ratio > 2.0 && same_tokens && off_held < cached_held, rho, ratio)
    }

    /// `decode-batch`: total tokens/s at the largest batch is at least `min_gain` times
    /// batch 1's while the per-token latency grows by less than `max_slowdown` times.
    pub fn batching_pays(tokens_per_s: &[f64], per_token_ms: &[f64], batches: &[u32], min_gain: f64, max_slowdown: f64) -> bool {
        let (Some(t0), Some(tn), Some(l0), Some(ln)) = (tokens_per_s.first(), tokens_per_s.last(), per_token_ms.first(), per_token_ms.last()) else {
            return false;
        };
        let growth = *batches.last().unwrap_or(&1) as f64 / *batches.first().unwrap_or(&1) as f64;
        growth > 1.0 && tn / t0 >= min_gain && ln / l0 < max_slowdown
    }

    /// The batch after which total tokens/s gains less than 20%, if the sweep reached one.
    pub fn knee(batches: &[u32], tokens_per_s: &[f64]) -> Option<u32> {
        tokens_per_s
            .windows(2)
            .position(|w| w[1] < 1.2 * w[0])
            .map(|i| batches[i])
    }

    /// `prefill-vs-decode`: prefill computes at several times decode's FLOP/s, and decode's
    /// arithmetic intensity is low (under 4 FLOPs per byte read).
    pub fn phases_differ(prefill_tflops: f64, decode_tflops: f64, decode_intensity: f64) -> bool {
        prefill_tflops > 4.0 * decode_tflops && decode_intensity < 4.0
    }
}

pub const GENERATE_NO_GRAD: Card = Card {
    id: "generate-no-grad",
    title: "A generation loop without no_grad keeps every step's graph",
    claim: "A hand-written generation loop without torch.no_grad() keeps every step's autograd graph alive through the KV cache: memory grows faster than the cache, step after step, and model.eval() does not stop it.",
    why: "The cache's keys and values are outputs of the attention projections; with grad enabled each carries its grad_fn, which holds the step's saved activations (and, through the attention, the whole cache as it stood). Nothing is freed until the cache and the outputs are dropped. eval() only switches dropout off. (allenai/OLMo#164: a loop grew from 4 GB to 24 GB in 100 steps and ran out of memory at 200.)",
    source: "https://pytorch.org/docs/stable/generated/torch.no_grad.html",
    pitfall: "model.eval()\ncache = DynamicCache(config=model.config)\nfor step in range(new_tokens):\n    logits = model(ids, past_key_values=cache).logits  # graph kept through the cache",
    fix: "model.eval()\nwith torch.inference_mode():  # or torch.no_grad(); model.generate() does this itself\n    for step in range(new_tokens):\n        logits = model(ids, past_key_values=cache).logits",
    threshold: "confirmed when, in eval mode with a dynamic cache, grad-enabled memory beyond the weights, prompt, KV cache and tokens rises at every step and by more in the second half of the steps than in the first (superlinear: each step's attention saves the whole cache as it stood), no_grad holds none beyond 64 KiB (CUDA block rounding), and memory returns to the baseline after the run. Regime: any device; the CPU counts allocations exactly",
    question: super::value("Generating with autograd on: how many bytes does the graph hold after the last token?", "graph after the last step (grad)", "bytes", super::BYTES),
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
    question: super::value("How many bytes does the KV cache take per token, per sequence?", "KV cache per token per sequence", "bytes", super::BYTES),
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
    let mut notes = vec![format!(
        "{}: the cache passes the weights ({}) at {} tokens in one sequence (fp32), or {} tokens each across a batch of 8.",
        model.display_name(),
        protocol::format_bytes(config.parameters() * 4),
        crossover(&config, 4),
        crossover(&config, 4) / 8
    )];
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
        .series(vec![series(
            "measured KV cache",
            "MiB",
            vec!["b1·24".into(), "b1·48".into(), "b2·24".into(), "b2·48".into()],
            measured.iter().map(|&b| mib(b)).collect(),
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
    question: super::ratio("With 2 KV heads instead of 8, the KV cache as a multiple of the 8-head one?", "KV cache, 2 KV heads", "KV cache, 8 KV heads", super::Ask::LogScale { min: 0.01, max: 10.0, within: 1.5 }),
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

pub const USE_CACHE_OFF: Card = Card {
    id: "use-cache-off",
    title: "use_cache=False recomputes the whole prefix every step",
    claim: "Without the KV cache every step recomputes the whole prefix: per-step time grows with the position and the total roughly quadratically, while the memory held is lower.",
    why: "The cache exists so that a decode step feeds one token and attends to stored keys and values. Without it step t runs the full forward pass over t tokens again; the generated tokens are the same.",
    source: "https://huggingface.co/docs/transformers/main/en/kv_cache",
    pitfall: "out = model.generate(ids, max_new_tokens=256, use_cache=False)",
    fix: "out = model.generate(ids, max_new_tokens=256)  # use_cache=True is the default",
    threshold: "confirmed when the uncached decode steps' latency rises with the position (rank correlation above 0.5), the median of its last 8 steps is more than twice the cached run's, the greedy tokens are identical, and it holds less memory after the last step (no cache). Regime: any device; prompt 8 + 96 new tokens on a CPU (the prefix grows twelvefold), 256 + 128 on a GPU",
    question: super::ratio("Generating without the KV cache: total time as a multiple of with it?", "uncached: total", "cached: total", super::Ask::LogScale { min: 0.1, max: 100.0, within: 1.5 }),
    experiment: use_cache_off,
};

fn use_cache_off(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let model = decoder(ctx, protocol::decoder::CPU_PRESET, "llama_3_2_1b");
    // From 9 to 103 tokens per uncached step on a CPU: compute, not per-op dispatch, then
    // decides a step's time, so its growth stands out of a busy machine's noise.
    let (prompt, n) = if ctx.cuda() { (256, 128) } else { (8, 96) };
    let off_spec = gen_spec(ctx, model, 1, prompt, n, KvCacheKind::Off, GradMode::NoGrad);
    let (_, off) = generate(lab, ctx, off_spec.clone())?;
    ctx.check()?;
    let (_, cached) = generate(lab, ctx, gen_spec(ctx, model, 1, prompt, n, KvCacheKind::Dynamic, GradMode::NoGrad))?;
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
    Ok(Outcome::new(decision, setup(&off_spec), ChartKind::Line)
        .figures(vec![
            fig("uncached: total", total(&off), "ms"),
            fig("cached: total", total(&cached), "ms"),
            fig("rank correlation of uncached step time with position", rho, "ratio"),
        ])
        .series(vec![
            series("use_cache=False", "ms", x.clone(), decode_ms(&off)),
            series("dynamic cache", "ms", x, decode_ms(&cached)),
        ]))
}

pub const PREFILL_VS_DECODE: Card = Card {
    id: "prefill-vs-decode",
    title: "Prefill is compute-bound, decode reads the weights",
    claim: "Prefill is compute-bound; decode at small batch is bound by reading the weights: decode's arithmetic intensity is about 1 FLOP per byte in fp16 (2 FLOPs per weight per token, 2 bytes per weight).",
    why: "The prefill multiplies every weight matrix by the whole prompt at once; a decode step multiplies it by one token per sequence, so the step time is the time to stream all the weights (and the cache) from memory.",
    source: "https://arxiv.org/abs/2402.16363",
    pitfall: "# judging a serving GPU by its TFLOP/s\ntokens_per_s = peak_flops / (2 * n_params)",
    fix: "# decode at batch b: bounded by bandwidth\ntokens_per_s = b * bandwidth / (weights_bytes + kv_bytes)",
    threshold: "confirmed when the prefill's achieved FLOP/s is more than 4× the decode steps' and decode's arithmetic intensity (FLOPs per step / weights + KV bytes read) is under 4 FLOPs per byte. Both are placed against the device's peak (datasheet on a known GPU, measured on a CPU). Regime: any device; batch 1",
    question: super::ratio("What is decode's FLOP/s as a multiple of prefill's?", "decode", "prefill", super::Ask::LogScale { min: 0.0001, max: 10.0, within: 2.0 }),
    experiment: prefill_vs_decode,
};

fn prefill_vs_decode(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let model = decoder(ctx, protocol::decoder::CPU_PRESET, "llama_3_2_1b");
    let (prompt, n) = if ctx.cuda() { (1024, 64) } else { (128, 24) };
    let spec = gen_spec(ctx, model, 1, prompt, n, KvCacheKind::Dynamic, GradMode::NoGrad);
    let (_, g) = generate(lab, ctx, spec.clone())?;
    let decode_mean = rules::median(&decode_ms(&g));
    let decode_tflops = g.decode_flops_per_step as f64 / (decode_mean.max(1e-9) * 1e9);
    let holds = rules::phases_differ(g.prefill_tflops, decode_tflops, g.decode_intensity_flops_per_byte);
    let reason = format!(
        "prefill {:.3} TFLOP/s{}, decode {:.4} TFLOP/s at {:.2} FLOP/byte, reading {}",
        g.prefill_tflops,
        g.prefill_percent_of_peak.map(|p| format!(" ({p:.1}% of peak)")).unwrap_or_default(),
        decode_tflops,
        g.decode_intensity_flops_per_byte,
        g.decode_bandwidth_gb_s
            .map(|b| format!("{b:.1} GB/s{}", g.decode_bandwidth_percent.map(|p| format!(" ({p:.1}% of the device's)")).unwrap_or_default()))
            .unwrap_or_default()
    );
    let decision = Decision::rule(holds, format!("{reason}."), format!("{reason}."));
    let mut notes = vec![];
    if let Some(src) = &g.bandwidth_source {
        notes.push(format!("Peaks: {src}."));
    }
    Ok(Outcome::new(decision, setup(&spec), ChartKind::Bar)
        .figures(vec![
            fig("prefill", g.prefill_tflops * 1000.0, "GFLOP/s"),
            fig("decode", decode_tflops * 1000.0, "GFLOP/s"),
            fig("decode arithmetic intensity", g.decode_intensity_flops_per_byte, "FLOP/byte"),
            fig("decode bandwidth", g.decode_bandwidth_gb_s.unwrap_or(0.0), "GB/s"),
        ])
        .series(vec![series("achieved", "GFLOP/s", vec!["prefill".into(), "decode".into()], vec![g.prefill_tflops * 1000.0, decode_tflops * 1000.0])])
        .notes(notes))
}

pub const DECODE_BATCH: Card = Card {
    id: "decode-batch",
    title: "Batching decode: more tokens per second for the same step",
    claim: "Decode reads the weights once per step for the whole batch: total tokens/s rises almost with the batch while each sequence's per-token latency barely moves, until memory or compute stops it.",
    why: "A decode step's time is mostly reading the weights; a bigger batch reuses each weight for more tokens, so the step takes about as long and yields more tokens. Past the knee the step becomes compute-bound (or the cache no longer fits).",
    source: "https://arxiv.org/abs/2309.06180",
    pitfall: "for prompt in prompts:  # one request at a time\n    model.generate(prompt, max_new_tokens=128)",
    fix: "model.generate(torch.stack(prompts), max_new_tokens=128)  # one batch, the weights read once per step",
    threshold: "confirmed when total tokens/s at the largest batch of the sweep is at least 2× batch 1's while the per-token latency grows less than 3×; the knee is the first batch after which total tokens/s gains under 20%. Regime: CPU batches 1–8 of the tiny decoder (dispatch-bound, so batching is nearly free); GPU batches 1–64 of the 1B shape",
    question: super::ratio("Tokens per second at the largest batch, as a multiple of batch 1?", "tokens/s at the largest batch", "tokens/s at batch 1", super::Ask::LogScale { min: 0.1, max: 100.0, within: 1.5 }),
    experiment: decode_batch,
};

fn decode_batch(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let model = decoder(ctx, protocol::decoder::CPU_PRESET, "llama_3_2_1b");
    let batches: Vec<u32> = if ctx.cuda() { vec![1, 4, 16, 64] } else { vec![1, 2, 4, 8] };
    let (mut tps, mut lat) = (vec![], vec![]);
    let mut last_spec = None;
    for &b in &batches {
        ctx.check()?;
        let spec = gen_spec(ctx, model, b, 16, 24, KvCacheKind::Dynamic, GradMode::NoGrad);
        let (_, g) = generate(lab, ctx, spec.clone())?;
        let per_token = rules::median(&decode_ms(&g));
        lat.push(per_token);
        tps.push(b as f64 * 1000.0 / per_token.max(1e-9));
        last_spec = Some(spec);
    }
    let holds = rules::batching_pays(&tps, &lat, &batches, 2.0, 3.0);
    let knee = rules::knee(&batches, &tps);
    let reason = format!(
        "batch {} → {}: total {:.0} → {:.0} tokens/s ({:.1}×), per-token {:.2} → {:.2} ms{}",
        batches[0],
        batches[batches.len() - 1],
        tps[0],
        tps[tps.len() - 1],
        tps[tps.len() - 1] / tps[0],
        lat[0],
        lat[lat.len() - 1],
        knee.map(|k| format!("; gains fell under 20% after batch {k}")).unwrap_or_else(|| "; no knee within the sweep".into())
    );
    let decision = Decision::rule(
        holds,
        format!("{reason}."),
        format!("{reason}. The step is already compute-bound at these batches on this device: the weights are small enough to stay in cache, so a bigger batch costs time instead of reusing reads."),
    );
    let x: Vec<String> = batches.iter().map(|b| b.to_string()).collect();
    Ok(Outcome::new(decision, last_spec.map(|s| setup(&s)).unwrap_or_default(), ChartKind::Line)
        .figures(vec![
            fig("tokens/s at batch 1", tps[0], "tokens/s"),
            fig("tokens/s at the largest batch", tps[tps.len() - 1], "tokens/s"),
        ])
        .series(vec![
            series("total tokens/s", "tokens/s", x.clone(), tps.clone()),
            series("per-token latency", "ms", x, lat.clone()),
        ]))
}

pub const STATIC_CACHE: Card = Card {
    id: "static-cache",
    title: "A static cache is allocated once and never grows",
    claim: "A static cache allocates its whole length up front and never grows; on CUDA its fixed shapes are what let the decode step be captured and replayed as a CUDA graph.",
    why: "A dynamic cache concatenates one more position per step, allocating new tensors each time; a static one (transformers' StaticCache, gpt-fast) writes each step's keys and values in place into tensors sized for prompt + new tokens. A CUDA graph replays fixed addresses and shapes, which only the static layout has.",
    source: "https://huggingface.co/docs/transformers/main/en/llm_optims#static-kv-cache-and-torchcompile",
    pitfall: "out = model.generate(ids, max_new_tokens=256)  # DynamicCache: new tensors every step",
    fix: "out = model.generate(ids, max_new_tokens=256, cache_implementation=\"static\")",
    threshold: "confirmed when the static cache's bytes are the same at every step and equal the formula for prompt + new tokens, while the dynamic one's grow by exactly one position's bytes per step. The CUDA graph replay of the decode step is not yet captured by Gradless (its forward-pass graphs are): on any device that part is reported absent, not guessed. Regime: any device",
    question: super::ratio("The static cache's bytes as a multiple of the dynamic cache's after the last step?", "static cache (every step)", "dynamic cache after the last step", super::Ask::LogScale { min: 0.1, max: 10.0, within: 1.25 }),
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
    let decision = Decision::rule(
        static_flat && dynamic_steps,
        format!("The static cache held {} from the prefill to the last step; the dynamic one grew by {} per step to {}. (CUDA graph replay of the decode step: not measured by Gradless yet.)", protocol::format_bytes(full), protocol::format_bytes(one), protocol::format_bytes(dy.kv_cache_bytes)),
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
        .notes(vec!["CUDA graph replay of the decode step (per-token latency eager vs replay) is not implemented in Gradless's generate loop yet; its forward-pass runs can replay graphs (the cuda-graphs card). Absent, not estimated.".into()]))
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
    question: super::ratio("The bytes wasted on padding, as a multiple of the caches needed one by one?", "wasted on padding", "one by one: KV caches", super::Ask::LogScale { min: 0.01, max: 10.0, within: 1.5 }),
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
    question: super::value("Does writing into a cache made under inference_mode, outside it, raise an error?", "error raised", "bool", super::Ask::YesNo),
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

pub const AUTOCAST_DECODE: Card = Card {
    id: "autocast-decode",
    title: "Autocast in a decode loop: weights cast on the fly, not once",
    claim: "Autocast keeps the fp32 weights and casts them as ops need them; the cast copies are cached only inside one autocast region and not in every mode (pytorch#113685, #158232), so an autocast decode loop can re-cast the weights every step and move more bytes per token than weights cast once (model.to(torch.bfloat16)).",
    why: "Autocast's weight-cast cache lives while the outermost autocast region is open and applies to leaf tensors that require grad; under inference_mode it is not used, so each matmul casts its weight again. Weights stored in low precision are read at half the bytes with no cast at all.",
    source: "https://github.com/pytorch/pytorch/issues/113685",
    pitfall: "for step in range(new_tokens):\n    with torch.autocast(\"cuda\", dtype=torch.bfloat16):  # region per step: the casts are redone\n        logits = model(next_id, past_key_values=cache).logits",
    fix: "model = model.to(torch.bfloat16)  # cast once\nwith torch.inference_mode():\n    for step in range(new_tokens):\n        logits = model(next_id, past_key_values=cache).logits",
    threshold: "per row (fp32; autocast entered per step; autocast around the whole loop; bf16 weights — each under no_grad and inference_mode) the per-token p50 and peak memory are reported; confirmed when bf16 weights decode faster per token than both autocast variants under the same grad mode and hold less peak memory than fp32. On a CPU without bf16 units autocast is many times slower than fp32, which the verdict says. Regime: a GPU with bf16 (decode reads every weight per step); a CPU answers with its own figures",
    question: super::ratio("Under inference_mode, bf16 weights' per-token p50 against autocast entered per step?", "bf16 weights · inference_mode: per-token p50", "autocast per step · inference_mode: per-token p50", super::SAME_TIME),
    experiment: autocast_decode,
};

fn autocast_decode(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let model = decoder(ctx, protocol::decoder::CPU_PRESET, "llama_3_2_1b");
    let (prompt, n) = if ctx.cuda() { (128, 32) } else { (8, 6) };
    // bf16 on both: the comparison is with bf16 weights (fp16 autocast on a CPU is not
    // supported everywhere).
    let low = Autocast::Bf16;
    let mut rows = vec![];
    let mut cells: Vec<(String, GradMode, f64, u64)> = vec![];
    for grad in [GradMode::NoGrad, GradMode::InferenceMode] {
        let base = gen_spec(ctx, model, 1, prompt, n, KvCacheKind::Dynamic, grad);
        let variants: [(&str, RunSpec, bool); 4] = [
            ("fp32", base.clone(), false),
            ("autocast per step", RunSpec { autocast: low, ..base.clone() }, true),
            ("autocast around the loop", RunSpec { autocast: low, ..base.clone() }, false),
            ("bf16 weights", RunSpec { advanced: protocol::Advanced { weights: WeightsDtype::Bf16, ..Default::default() }, ..base.clone() }, false),
        ];
        for (name, spec, per_step) in variants {
            ctx.check()?;
            let checked = crate::spec::check_spec(spec, &protocol::Limits::default(), lab.machine())
                .map_err(|e| failure(protocol::FailureKind::Invalid, e.to_string()))?;
            let report = if per_step {
                lab.measure_autocast_per_step(&checked, ctx.control)?
            } else {
                lab.measure(&checked, ctx.control, &mut |_| {})?
            };
            let g = report.generation.as_ref().ok_or_else(|| failure(protocol::FailureKind::Internal, "no generation"))?;
            let p50 = g.decode_ms_per_token.as_ref().map_or(0.0, |d| d.p50);
            rows.push(vec![name.to_string(), grad.as_str().to_string(), format!("{p50:.3} ms"), protocol::format_bytes(report.memory.peak_above_baseline_bytes)]);
            cells.push((name.to_string(), grad, p50, report.memory.peak_allocated_bytes));
        }
    }
    let get = |name: &str, grad: GradMode| cells.iter().find(|c| c.0 == name && c.1 == grad).map(|c| (c.2, c.3)).unwrap_or((0.0, 0));
    let mut holds = true;
    let mut lines = vec![];
    for grad in [GradMode::NoGrad, GradMode::InferenceMode] {
        let (w, wm) = get("bf16 weights", grad);
        let (a1, _) = get("autocast per step", grad);
        let (a2, _) = get("autocast around the loop", grad);
        let (f, fm) = get("fp32", grad);
        let ok = w < a1 && w < a2 && wm < fm;
        holds &= ok;
        lines.push(format!(
            "{}: fp32 {f:.2} ms, autocast per step {a1:.2} ms, around the loop {a2:.2} ms, bf16 weights {w:.2} ms ({})",
            grad.as_str(),
            if ok { "held" } else { "did not hold" }
        ));
    }
    let cpu_note = if ctx.cuda() { String::new() } else { " On this CPU bf16 has no fast units: autocast is far slower than fp32 here, which is this device's answer, not a GPU's.".into() };
    let decision = Decision::rule(holds, format!("{}.{cpu_note}", lines.join("; ")), format!("{}.{cpu_note}", lines.join("; ")));
    let x: Vec<String> = cells.iter().map(|c| format!("{} · {}", c.0, c.1.as_str())).collect();
    let figures = cells.iter().map(|c| fig(&format!("{} · {}: per-token p50", c.0, c.1.as_str()), c.2, "ms")).collect();
    Ok(Outcome::new(decision, format!("{}, batch 1, prompt {prompt} + {n} new tokens, dynamic cache", model.display_name()), ChartKind::Bar)
        .figures(figures)
        .series(vec![series("per-token p50", "ms", x, cells.iter().map(|c| c.2).collect())])
        .table(Table { columns: vec!["variant".into(), "grad".into(), "per-token p50".into(), "peak above baseline".into()], rows }))
}

pub const DECODER_TABLE: Card = Card {
    id: "decoder-table",
    title: "The classic table, for a decoder",
    claim: "The classic rows on one generation — train, eval only, no_grad only, eval + no_grad, + inference_mode, + bf16 weights: as for ResNet-50, eval alone saves nothing and no_grad saves the graph, which in a generation grows with every token.",
    why: "The seed table's lesson carries over to decoding, with one difference: without no_grad the graph is kept through the KV cache for the whole generation, so the gap grows with the number of tokens instead of staying one forward pass wide.",
    source: "https://pytorch.org/docs/stable/notes/autograd.html#inference-mode",
    pitfall: "model.eval()  # \"inference mode on\"\nfor step in range(new_tokens): ...",
    fix: "model = model.to(torch.bfloat16).eval()\nwith torch.inference_mode():\n    for step in range(new_tokens): ...",
    threshold: "confirmed when eval only's peak is within 10% of train's, eval + no_grad's is below train's by more than the graph train kept after its last step less 10%, and inference_mode's is no higher than no_grad's. Each row's figures are printed beside the seed table's rows (ResNet-50, the seed-table card). Regime: any device",
    question: super::ratio("eval() alone in a generation: its peak above the weights and prompt against train()'s?", "eval only: peak above baseline", "train: peak above baseline", super::SAME_BYTES),
    experiment: decoder_table,
};

fn decoder_table(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let model = decoder(ctx, protocol::decoder::CPU_PRESET, "llama_3_2_1b");
    let (prompt, n) = if ctx.cuda() { (128, 64) } else { (16, 24) };
    let row = |eval: bool, grad: GradMode, bf16: bool| RunSpec {
        eval,
        advanced: protocol::Advanced {
            weights: if bf16 { WeightsDtype::Bf16 } else { WeightsDtype::Fp32 },
            ..Default::default()
        },
        ..gen_spec(ctx, model, 1, prompt, n, KvCacheKind::Dynamic, grad)
    };
    let rows = [
        ("train", row(false, GradMode::Enabled, false)),
        ("eval only", row(true, GradMode::Enabled, false)),
        ("no_grad only", row(false, GradMode::NoGrad, false)),
        ("eval + no_grad", row(true, GradMode::NoGrad, false)),
        ("eval + inference_mode", row(true, GradMode::InferenceMode, false)),
        ("+ bf16 weights", row(true, GradMode::InferenceMode, true)),
    ];
    let mut results = vec![];
    for (label, spec) in rows.iter() {
        ctx.check()?;
        let (r, g) = generate(lab, ctx, spec.clone())?;
        results.push((*label, r, g));
    }
    let peak = |i: usize| results[i].1.memory.peak_above_baseline_bytes as f64;
    let p50 = |i: usize| results[i].2.decode_ms_per_token.as_ref().map_or(0.0, |d| d.p50);
    let graph = results[0].2.steps.last().map_or(0, |s| s.graph_bytes) as f64;
    let holds = (peak(1) - peak(0)).abs() <= 0.1 * peak(0)
        && peak(0) - peak(3) > 0.9 * graph
        && peak(4) <= peak(3);
    let table = Table {
        columns: ["setting", "peak above weights + prompt", "vs train", "decode p50 per token", "KV cache"].map(String::from).to_vec(),
        rows: results
            .iter()
            .enumerate()
            .map(|(i, (label, r, g))| {
                vec![
                    label.to_string(),
                    protocol::format_bytes(r.memory.peak_above_baseline_bytes),
                    format!("{:+.0}%", 100.0 * (peak(i) - peak(0)) / peak(0).max(1.0)),
                    format!("{:.2} ms", p50(i)),
                    protocol::format_bytes(g.kv_cache_bytes),
                ]
            })
            .collect(),
    };
    let reason = format!(
        "eval only {:.0}% of train's peak; eval + no_grad {:.0}% (train kept a {} graph after its last token); inference_mode {}; bf16 weights {:.2} ms per token against fp32's {:.2} ms",
        100.0 * peak(1) / peak(0).max(1.0),
        100.0 * peak(3) / peak(0).max(1.0),
        protocol::format_bytes(graph as u64),
        protocol::format_bytes(peak(4) as u64),
        p50(5),
        p50(4)
    );
    let decision = Decision::rule(holds, format!("{reason}."), format!("{reason}."));
    let labels: Vec<String> = results.iter().map(|r| r.0.to_string()).collect();
    let figures = results
        .iter()
        .enumerate()
        .flat_map(|(i, (label, ..))| [fig(&format!("{label}: peak above baseline"), peak(i), "bytes"), fig(&format!("{label}: decode p50 per token"), p50(i), "ms")])
        .collect();
    Ok(Outcome::new(decision, setup(&rows[0].1), ChartKind::Bar)
        .figures(figures)
        .table(table)
        .series(vec![
            series("peak above baseline", "MiB", labels.clone(), (0..results.len()).map(|i| mib(peak(i) as u64)).collect()),
            series("decode p50 per token", "ms", labels, (0..results.len()).map(p50).collect()),
        ])
        .notes(vec!["The seed-table card runs the same rows on ResNet-50 (batch 32 on a GPU): read the two side by side.".into()]))
}

/// Every generation card, in tour order.
pub const CARDS: [&Card; 11] = [
    &GENERATE_NO_GRAD,
    &KV_CACHE_SIZE,
    &GQA,
    &USE_CACHE_OFF,
    &PREFILL_VS_DECODE,
    &DECODE_BATCH,
    &STATIC_CACHE,
    &PADDING_WASTE,
    &INFERENCE_TENSOR_CACHE,
    &AUTOCAST_DECODE,
    &DECODER_TABLE,
];

#[cfg(test)]
mod tests {
    use super::rules::*;

    #[test]
    fn the_graph_rule_wants_superlinear_growth_and_a_clean_no_grad() {
        // CPU-like: exact counts, growth per step rising.
        let grad: Vec<u64> = (0..10).map(|t| 1000 * t + 10 * t * t).collect();
        assert!(graph_grows(&grad, &[0; 10], 0, 64 << 10));
        // Linear growth only (no attention saving the cache): refuted.
        let linear: Vec<u64> = (0..10).map(|t| 1000 * t + 5).collect();
        assert!(!graph_grows(&linear, &[0; 10], 0, 64 << 10));
        // CUDA-like: no_grad shows block rounding under the slack; a leak refutes.
        assert!(graph_grows(&grad, &[512; 10], 0, 64 << 10));
        assert!(!graph_grows(&grad, &[0; 10], 4096, 64 << 10));
        assert!(!graph_grows(&grad, &[1 << 20; 10], 0, 64 << 10));
    }

    #[test]
    fn the_recompute_rule_wants_rising_steps_and_a_clear_gap() {
        let off: Vec<f64> = (0..32).map(|i| 1.0 + i as f64 * 0.2).collect();
        let cached = vec![0.5; 32];
        let (ok, rho, ratio) = recompute_costs(&off, &cached, true, 10, 20);
        assert!(ok && rho > 0.99 && ratio > 10.0);
        assert!(!recompute_costs(&off, &cached, false, 10, 20).0, "different tokens");
        let flat = vec![1.0; 32];
        assert!(!recompute_costs(&flat, &cached, true, 10, 20).0, "no rise");
    }

    #[test]
    fn the_batch_rule_and_its_knee() {
        let batches = [1, 2, 4, 8];
        // CPU-like: dispatch-bound, nearly free batching.
        assert!(batching_pays(&[100.0, 195.0, 380.0, 700.0], &[10.0, 10.2, 10.5, 11.4], &batches, 2.0, 3.0));
        assert_eq!(knee(&batches, &[100.0, 195.0, 380.0, 700.0]), None);
        // CUDA-like past the knee: throughput flattens at 16.
        assert_eq!(knee(&[1, 4, 16, 64], &[50.0, 195.0, 700.0, 760.0]), Some(16));
        // Compute-bound from the start: per-token latency grows with the batch.
        assert!(!batching_pays(&[100.0, 110.0, 120.0, 130.0], &[10.0, 18.0, 33.0, 61.0], &batches, 2.0, 3.0));
    }

    #[test]
    fn the_phase_rule() {
        assert!(phases_differ(0.5, 0.01, 0.5));
        assert!(!phases_differ(0.5, 0.4, 0.5));
        assert!(!phases_differ(0.5, 0.01, 50.0));
    }

    #[test]
    fn rank_correlation_reads_order() {
        assert!((rank_correlation(&[1.0, 2.0, 3.0, 4.0]) - 1.0).abs() < 1e-12);
        assert!((rank_correlation(&[4.0, 3.0, 2.0, 1.0]) + 1.0).abs() < 1e-12);
    }
}
