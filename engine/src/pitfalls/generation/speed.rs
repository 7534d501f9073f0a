//! The generation cards about time: recomputing without a cache (`use-cache-off`), the two
//! phases (`prefill-vs-decode`), batching (`decode-batch`), autocast in the loop
//! (`autocast-decode`) and the classic table on a decoder (`decoder-table`).

use protocol::{
    Autocast, ChartKind, GenPhase, GenerationReport, GradMode, KvCacheKind, RunFailure,
    RunSpec, Table, WeightsDtype,
};

use super::super::kit::{fig, interval_figures, mib, series, Ctx, Decision, Outcome, Shift};
use super::super::{Card, Needs};
use super::{decode_ms, decoder, dtypes, gen_spec, generate, rules, setup, shape, with_cache};
use crate::lab::Lab;
use crate::torch_call::failure;

pub const USE_CACHE_OFF: Card = Card {
    id: "use-cache-off",
    title: "use_cache=False recomputes the whole prefix every step",
    asks: "What does turning the KV cache off (use_cache=False) do to a generation's time, its tokens and its memory?",
    labels: ["generate(use_cache=False)", "generate() with the default KV cache"],
    setup: use_cache_off_setup,
    needs: Needs::Any,
    claim: "Without the KV cache every step recomputes the whole prefix: per-step time grows with the position and the total roughly quadratically, while the memory held is lower.",
    why: "The cache exists so that a decode step feeds one token and attends to stored keys and values. Without it step t runs the full forward pass over t tokens again; the generated tokens are the same.",
    statements: &[],
    source: "https://huggingface.co/docs/transformers/main/en/kv_cache",
    pitfall: "out = model.generate(ids, max_new_tokens=256, use_cache=False)",
    fix: "out = model.generate(ids, max_new_tokens=256)  # use_cache=True is the default",
    threshold: "confirmed when the uncached decode steps' latency rises with the position (rank correlation above 0.5), the median of its last 8 steps is more than twice the cached run's, the greedy tokens are identical, and it holds less memory after the last step (no cache). Regime: an uncached step must be compute-bound for its time to follow the position. On a CPU: batch 1, prompt 8 + 96 new tokens (9 to 103 rows per step, the prefix grows twelvefold). On a GPU: the 1B shape in fp32 at batch 8, prompt 128 + 64 new tokens, so each uncached step multiplies 1,032 to 1,528 token rows, compute-bound on a big GPU; at batch 1 and 257–383 positions a 132-SM H200 is launch- and bandwidth-bound and the steps read as flat, which would decide nothing",
    question: crate::pitfalls::ratio("The setup's decoder, same prompt and tokens: A's total generation time (use_cache=False) as a multiple of B's (the KV cache)?", "uncached: total", "cached: total", crate::pitfalls::Ask::LogScale { min: 0.1, max: 100.0, within: 1.5 }),
    experiment: use_cache_off,
};

/// What use-cache-off runs: the uncached generation (the cached one differs only in its
/// cache).
fn use_cache_off_plan(ctx: &Ctx) -> RunSpec {
    let model = decoder(ctx, protocol::decoder::CPU_PRESET, "llama_3_2_1b");
    // From 9 to 103 tokens per uncached step on a CPU: compute, not per-op dispatch, then
    // decides a step's time, so its growth stands out of a busy machine's noise.
    // On a GPU the batch multiplies the rows of every uncached step so that compute, not
    // launches, sets its time (see the card's regime).
    let (batch, prompt, n) = if ctx.cuda() { (8, 128, 64) } else { (1, 8, 96) };
    gen_spec(ctx, model, batch, prompt, n, KvCacheKind::Off, GradMode::NoGrad)
}

fn use_cache_off_setup(ctx: &Ctx) -> Vec<String> {
    let spec = use_cache_off_plan(ctx);
    vec![
        setup(&spec),
        "A: use_cache=False, each step feeds the whole sequence so far; B: the dynamic KV cache, each step after the prompt feeds one new token per sequence".into(),
        shape(spec.model),
        format!("{}, no_grad, greedy decoding", dtypes(&spec)),
        "Time: the sum of every step's latency, the prompt's pass included; memory: allocated after the last step".into(),
    ]
}

fn use_cache_off(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let off_spec = use_cache_off_plan(ctx);
    let (_, off) = generate(lab, ctx, off_spec.clone())?;
    ctx.check()?;
    let (_, cached) = generate(lab, ctx, with_cache(&off_spec, KvCacheKind::Dynamic))?;
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
    asks: "What FLOP/s do a generation's prefill (the whole prompt in one pass) and its decode steps (one token each) reach?",
    labels: ["decode speed estimated from the device's peak FLOP/s", "decode speed estimated from its memory bandwidth"],
    setup: prefill_vs_decode_setup,
    needs: Needs::Any,
    claim: "Prefill is compute-bound; decode at small batch is bound by reading the weights: decode's arithmetic intensity is about 1 FLOP per byte in fp16 (2 FLOPs per weight per token, 2 bytes per weight).",
    why: "The prefill multiplies every weight matrix by the whole prompt at once; a decode step multiplies it by one token per sequence, so the step time is the time to stream all the weights (and the cache) from memory.",
    statements: &[],
    source: "https://arxiv.org/abs/2402.16363",
    pitfall: "# tokens per second from the device's peak FLOP/s\ntokens_per_s = peak_flops / (2 * n_params)",
    fix: "# tokens per second from the bytes each step reads, at batch b\ntokens_per_s = b * bandwidth / (weights_bytes + kv_bytes)",
    threshold: "confirmed when the prefill's achieved FLOP/s is more than 4× the decode steps' and decode's arithmetic intensity (FLOPs per step / weights + KV bytes read) is under 4 FLOPs per byte. Both are placed against the device's peak (datasheet on a known GPU, measured on a CPU). Regime: any device; batch 1",
    question: crate::pitfalls::ratio("The setup's decoder at batch 1: the decode steps' achieved FLOP/s as a multiple of the prefill's?", "decode", "prefill", crate::pitfalls::Ask::LogScale { min: 0.0001, max: 10.0, within: 2.0 }),
    experiment: prefill_vs_decode,
};

/// What prefill-vs-decode runs: one generation.
fn prefill_vs_decode_plan(ctx: &Ctx) -> RunSpec {
    let model = decoder(ctx, protocol::decoder::CPU_PRESET, "llama_3_2_1b");
    let (prompt, n) = if ctx.cuda() { (1024, 64) } else { (128, 24) };
    gen_spec(ctx, model, 1, prompt, n, KvCacheKind::Dynamic, GradMode::NoGrad)
}

fn prefill_vs_decode_setup(ctx: &Ctx) -> Vec<String> {
    let spec = prefill_vs_decode_plan(ctx);
    let mut lines = vec![setup(&spec), shape(spec.model), format!("{}, no_grad", dtypes(&spec))];
    if let Some(d) = spec.model.decoder() {
        let (c, b) = (&d.config, spec.batch as u64);
        let prompt = spec.resolved_input_size() as u64;
        let n = spec.generate.as_ref().map_or(0, |g| g.new_tokens) as u64;
        let gflop = |f: u64| f as f64 / 1e9;
        lines.push(format!(
            "Work: the prefill is one pass over the {prompt} prompt tokens, {:.3} GFLOP (2 per weight per token, plus attention); each decode step one token, {:.4} GFLOP at the middle of the {n} new tokens",
            gflop(c.forward_flops(b, prompt, prompt, 1)),
            gflop(c.forward_flops(b, 1, prompt + n / 2, 1)),
        ));
    }
    lines.push("FLOP/s: each phase's FLOPs over its measured time (decode: the median step)".into());
    lines
}

fn prefill_vs_decode(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let spec = prefill_vs_decode_plan(ctx);
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
    asks: "What does decoding several sequences in one batch do to the total tokens per second and to each sequence's per-token latency?",
    labels: ["one request at a time", "all the prompts in one batch"],
    setup: decode_batch_setup,
    needs: Needs::Any,
    claim: "Decode reads the weights once per step for the whole batch: total tokens/s rises almost with the batch while each sequence's per-token latency barely moves, until memory or compute stops it.",
    why: "A decode step's time is mostly reading the weights; a bigger batch reuses each weight for more tokens, so the step takes about as long and yields more tokens. Past the knee the step becomes compute-bound (or the cache no longer fits).",
    statements: &[],
    source: "https://arxiv.org/abs/2309.06180",
    pitfall: "for prompt in prompts:  # one request at a time\n    model.generate(prompt, max_new_tokens=128)",
    fix: "model.generate(torch.stack(prompts), max_new_tokens=128)  # one batch",
    threshold: "confirmed when total tokens/s at the largest batch of the sweep is at least 2× batch 1's while the per-token latency grows less than 3×; the knee is the first batch after which total tokens/s gains under 20%. Regime: CPU batches 1–8 of the tiny decoder (dispatch-bound, so batching is nearly free); GPU batches 1–64 of the 1B shape",
    question: crate::pitfalls::ratio("The setup's decoder: total tokens per second at the sweep's largest batch, as a multiple of batch 1's?", "tokens/s at the largest batch", "tokens/s at batch 1", crate::pitfalls::Ask::LogScale { min: 0.1, max: 100.0, within: 1.5 }),
    experiment: decode_batch,
};

/// What decode-batch runs: one generation per batch of the sweep, smallest first.
fn decode_batch_plan(ctx: &Ctx) -> Vec<RunSpec> {
    let model = decoder(ctx, protocol::decoder::CPU_PRESET, "llama_3_2_1b");
    let batches: Vec<u32> = if ctx.cuda() { vec![1, 4, 16, 64] } else { vec![1, 2, 4, 8] };
    batches.into_iter().map(|b| gen_spec(ctx, model, b, 16, 24, KvCacheKind::Dynamic, GradMode::NoGrad)).collect()
}

/// "Tiny Llama ..., batch 1, 2, 4 and 8, prompt 16 + 24 new tokens, dynamic cache".
fn decode_batch_describe(specs: &[RunSpec]) -> String {
    let Some(last) = specs.last() else { return String::new() };
    let batches: Vec<String> = specs.iter().map(|s| s.batch.to_string()).collect();
    let (head, tail) = batches.split_at(batches.len() - 1);
    let line = setup(last);
    let listed = if head.is_empty() { tail[0].clone() } else { format!("{} and {}", head.join(", "), tail[0]) };
    line.replacen(&format!("batch {}", last.batch), &format!("batch {listed}"), 1)
}

fn decode_batch_setup(ctx: &Ctx) -> Vec<String> {
    let specs = decode_batch_plan(ctx);
    let mut lines = vec![decode_batch_describe(&specs)];
    if let (Some(first), Some(last)) = (specs.first(), specs.last()) {
        lines.push(format!("A: one sequence per generate call (batch {}); B: {} sequences in one generate call", first.batch, last.batch));
        lines.push(shape(last.model));
        lines.push(format!("{}, no_grad; the same prompt length for every sequence", dtypes(last)));
    }
    lines.push("Per-token latency: the median decode step; total tokens/s: batch × 1000 / that latency in ms".into());
    lines
}

fn decode_batch(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let specs = decode_batch_plan(ctx);
    let batches: Vec<u32> = specs.iter().map(|s| s.batch).collect();
    let (mut tps, mut lat) = (vec![], vec![]);
    for spec in &specs {
        ctx.check()?;
        let b = spec.batch;
        let (_, g) = generate(lab, ctx, spec.clone())?;
        let per_token = rules::median(&decode_ms(&g));
        lat.push(per_token);
        tps.push(b as f64 * 1000.0 / per_token.max(1e-9));
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
    Ok(Outcome::new(decision, decode_batch_describe(&specs), ChartKind::Line)
        .figures(vec![
            fig("tokens/s at batch 1", tps[0], "tokens/s"),
            fig("tokens/s at the largest batch", tps[tps.len() - 1], "tokens/s"),
        ])
        .series(vec![
            series("total tokens/s", "tokens/s", x.clone(), tps.clone()),
            series("per-token latency", "ms", x, lat.clone()),
        ]))
}

pub const AUTOCAST_DECODE: Card = Card {
    id: "autocast-decode",
    title: "Autocast in a decode loop: weights cast on the fly, not once",
    asks: "In a decode loop, how do bf16 autocast and weights cast to bf16 once compare in per-token time and in memory?",
    labels: ["bf16 autocast entered around each decode step", "weights cast to bf16 once, loop under inference_mode"],
    setup: autocast_decode_setup,
    needs: Needs::Any,
    claim: "Autocast keeps the fp32 weights and casts them as ops need them; the cast copies are cached only inside one autocast region and not in every mode (pytorch#113685, #158232), so an autocast decode loop can re-cast the weights every step and move more bytes per token than weights cast once (model.to(torch.bfloat16)).",
    why: "Autocast's weight-cast cache lives while the outermost autocast region is open and applies to leaf tensors that require grad; under inference_mode it is not used, so each matmul casts its weight again. Weights stored in low precision are read at half the bytes with no cast at all.",
    statements: &[],
    source: "https://github.com/pytorch/pytorch/issues/113685",
    pitfall: "for step in range(new_tokens):\n    with torch.autocast(\"cuda\", dtype=torch.bfloat16):  # one autocast region per step\n        logits = model(next_id, past_key_values=cache).logits",
    fix: "model = model.to(torch.bfloat16)\nwith torch.inference_mode():\n    for step in range(new_tokens):\n        logits = model(next_id, past_key_values=cache).logits",
    threshold: "per row (fp32; autocast entered per step; autocast around the whole loop; bf16 weights — each under no_grad and inference_mode) the per-token p50 and peak memory are reported; confirmed when bf16 weights decode faster per token than both autocast variants under the same grad mode and hold less peak memory than fp32. On a CPU without bf16 units autocast is many times slower than fp32, which the verdict says. Regime: a GPU with bf16 (decode reads every weight per step); a CPU answers with its own figures",
    question: crate::pitfalls::ratio("The setup's decoder under inference_mode: B's per-token decode p50 (weights cast to bf16 once) against A's (fp32 weights, bf16 autocast entered around each step)?", "bf16 weights · inference_mode: per-token p50", "autocast per step · inference_mode: per-token p50", crate::pitfalls::SAME_TIME),
    experiment: autocast_decode,
};

/// What autocast-decode runs: the fp32 generation under no_grad (every row changes its
/// weights, autocast or grad mode).
fn autocast_decode_plan(ctx: &Ctx) -> RunSpec {
    let model = decoder(ctx, protocol::decoder::CPU_PRESET, "llama_3_2_1b");
    let (prompt, n) = if ctx.cuda() { (128, 32) } else { (8, 6) };
    gen_spec(ctx, model, 1, prompt, n, KvCacheKind::Dynamic, GradMode::NoGrad)
}

/// "Tiny Llama ..., batch 1, prompt 8 + 6 new tokens, dynamic cache".
fn autocast_decode_describe(spec: &RunSpec) -> String {
    setup(spec)
}

fn autocast_decode_setup(ctx: &Ctx) -> Vec<String> {
    let spec = autocast_decode_plan(ctx);
    vec![
        autocast_decode_describe(&spec),
        "Four ways, each under no_grad and under inference_mode: fp32 weights; fp32 weights with bf16 autocast entered around each step (A); bf16 autocast around the whole loop; weights cast to bf16 once (B)".into(),
        shape(spec.model),
        "Per-token time: the median of the decode steps' latencies (the prompt's pass excluded); memory: the peak above the weights and the prompt".into(),
    ]
}

fn autocast_decode(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let plan = autocast_decode_plan(ctx);
    // bf16 on both: the comparison is with bf16 weights (fp16 autocast on a CPU is not
    // supported everywhere).
    let low = Autocast::Bf16;
    let mut rows = vec![];
    let mut cells: Vec<(String, GradMode, f64, u64)> = vec![];
    let mut samples: Vec<(String, GradMode, Vec<f64>)> = vec![];
    for grad in [GradMode::NoGrad, GradMode::InferenceMode] {
        let base = RunSpec { grad, ..plan.clone() };
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
            samples.push((name.to_string(), grad, decode_ms(g)));
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
    let mut figures: Vec<_> = cells.iter().map(|c| fig(&format!("{} · {}: per-token p50", c.0, c.1.as_str()), c.2, "ms")).collect();
    // The question's ratio (bf16 weights over autocast per step, under inference_mode) with
    // its 95% interval, from the decode steps of each.
    let steps = |name: &str| samples.iter().find(|c| c.0 == name && c.1 == GradMode::InferenceMode).map(|c| c.2.clone()).unwrap_or_default();
    figures.extend(interval_figures(&AUTOCAST_DECODE.question, &Shift::of(&steps("bf16 weights"), &steps("autocast per step"))));
    Ok(Outcome::new(decision, autocast_decode_describe(&plan), ChartKind::Bar)
        .figures(figures)
        .series(vec![series("per-token p50", "ms", x, cells.iter().map(|c| c.2).collect())])
        .table(Table { columns: vec!["variant".into(), "grad".into(), "per-token p50".into(), "peak above baseline".into()], rows }))
}

pub const DECODER_TABLE: Card = Card {
    id: "decoder-table",
    title: "The classic table, for a decoder",
    asks: "Which of the classic inference settings (eval(), no_grad, inference_mode, bf16 weights) change a decoder's memory and per-token time during a generation?",
    labels: ["model.eval() only", "bf16 weights, eval(), loop under inference_mode"],
    setup: decoder_table_setup,
    needs: Needs::Any,
    claim: "The classic rows on one generation — train, eval only, no_grad only, eval + no_grad, + inference_mode, + bf16 weights: as for ResNet-50, eval alone saves nothing and no_grad saves the graph, which in a generation grows with every token.",
    why: "The seed table's lesson carries over to decoding, with one difference: without no_grad the graph is kept through the KV cache for the whole generation, so the gap grows with the number of tokens instead of staying one forward pass wide.",
    statements: &[],
    source: "https://pytorch.org/docs/stable/notes/autograd.html#inference-mode",
    pitfall: "model.eval()\nfor step in range(new_tokens): ...",
    fix: "model = model.to(torch.bfloat16).eval()\nwith torch.inference_mode():\n    for step in range(new_tokens): ...",
    threshold: "confirmed when eval only's peak is within 10% of train's, eval + no_grad's is below train's by more than the graph train kept after its last step less 10%, and inference_mode's is no higher than no_grad's beyond the allocator's rounding: exactly on the CPU (its counter sees the bytes asked for); on CUDA within 1 MiB for each of the 4 largest temporaries of a layer at its peak (the caching allocator rounds blocks to 512 B and may leave a block above 1 MiB an unsplit tail of under 1 MiB, which differs between two runs of the same tensors). Each row's figures are printed beside the seed table's rows (ResNet-50, the seed-table card). Regime: any device",
    question: crate::pitfalls::ratio("The setup's decoder generating with autograd on in both: the peak above the weights and the prompt with model.eval() (A) against with model.train()?", "eval only: peak above baseline", "train: peak above baseline", crate::pitfalls::SAME_BYTES),
    experiment: decoder_table,
};

/// What decoder-table runs: its six rows, in order (the first is train).
fn decoder_table_plan(ctx: &Ctx) -> [(&'static str, RunSpec); 6] {
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
    [
        ("train", row(false, GradMode::Enabled, false)),
        ("eval only", row(true, GradMode::Enabled, false)),
        ("no_grad only", row(false, GradMode::NoGrad, false)),
        ("eval + no_grad", row(true, GradMode::NoGrad, false)),
        ("eval + inference_mode", row(true, GradMode::InferenceMode, false)),
        ("+ bf16 weights", row(true, GradMode::InferenceMode, true)),
    ]
}

fn decoder_table_setup(ctx: &Ctx) -> Vec<String> {
    let rows = decoder_table_plan(ctx);
    let names: Vec<&str> = rows.iter().map(|r| r.0).collect();
    vec![
        setup(&rows[0].1),
        format!("Six rows, one generation each: {}; A is eval only, B the last row", names.join("; ")),
        "train: model.train(), autograd on; eval only: model.eval(), autograd on; no_grad only: model.train() under torch.no_grad(); + bf16 weights: weights cast to bf16, eval() and inference_mode".into(),
        shape(rows[0].1.model),
        format!("Every row but the last: {}; peak: the highest allocated memory during the generation, above the weights and the prompt", dtypes(&rows[0].1)),
    ]
}

fn decoder_table(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let rows = decoder_table_plan(ctx);
    let mut results = vec![];
    for (label, spec) in rows.iter() {
        ctx.check()?;
        let (r, g) = generate(lab, ctx, spec.clone())?;
        results.push((*label, r, g));
    }
    let peak = |i: usize| results[i].1.memory.peak_above_baseline_bytes as f64;
    let p50 = |i: usize| results[i].2.decode_ms_per_token.as_ref().map_or(0.0, |d| d.p50);
    let graph = results[0].2.steps.last().map_or(0, |s| s.graph_bytes) as f64;
    let holds = rules::table_holds(peak(0), peak(1), peak(3), peak(4), graph, rules::peak_rounding(ctx.device) as f64);
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
