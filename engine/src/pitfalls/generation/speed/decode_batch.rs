//! The `decode-batch` card ([`DECODE_BATCH`]): Batching decode: more tokens per second for little more time per step

use super::*;

pub const PER_TOKEN_LATENCY_AT_BATCH_1: FigureName = FigureName::new("per-token latency at batch 1", Unit::Ms);
pub const PER_TOKEN_LATENCY_AT_THE_LARGEST_BATCH: FigureName = FigureName::new("per-token latency at the largest batch", Unit::Ms);
pub const LARGEST_BATCH: FigureName = FigureName::new("largest batch", Unit::Count);
pub const TOKENS_OVER_S_AT_BATCH_1: FigureName = FigureName::new("tokens/s at batch 1", Unit::TokensPerS);
pub const TOKENS_OVER_S_AT_THE_LARGEST_BATCH: FigureName = FigureName::new("tokens/s at the largest batch", Unit::TokensPerS);
pub const TOTAL_TOKENS_OVER_S: FigureName = FigureName::new("total tokens/s", Unit::TokensPerS);
pub const PER_TOKEN_LATENCY: FigureName = FigureName::new("per-token latency", Unit::Ms);

pub const DECODE_BATCH: Card = Card {
    id: "decode-batch",
    title: "Batching decode: more tokens per second for little more time per step",
    asks: "What does decoding several sequences in one batch do to the total tokens per second and to each sequence's per-token latency?",
    labels: ["one request at a time", "all the prompts in one batch"],
    setup: decode_batch_setup,
    needs: Needs::Any,
    claim: "A decode step reads the weights once for the whole batch: while the step's time is set by those reads (or by per-op overhead) rather than by its FLOPs, a bigger batch costs the step little more time, so total tokens/s rises with the batch while each sequence's per-token latency grows far less than the batch. Past the batch where the step's FLOPs take longer than its reads it turns compute-bound and the gains flatten (the knee).",
    statements: &[
        Said::torch("A matmul over b rows does b times the FLOPs of one row on the same weights: a decode step at batch b reads each weight once for b tokens.", "test_generation.py::test_a_matmul_does_two_flops_per_weight_per_row"),
        Said::run("Here the step's time grew far less than the batch: per-token latency at the sweep's largest batch stayed under 3× batch 1's.", &[PER_TOKEN_LATENCY_AT_BATCH_1, PER_TOKEN_LATENCY_AT_THE_LARGEST_BATCH, LARGEST_BATCH]),
        Said::run("So total tokens per second rose with the batch: at least 2× batch 1's at the largest.", &[TOKENS_OVER_S_AT_BATCH_1, TOKENS_OVER_S_AT_THE_LARGEST_BATCH]),
        Said::torch("The sweep runs in fp32 with PyTorch's default for fp32 matmuls: TF32 off (float32 matmul precision \"highest\").", "test_generation.py::test_tf32_is_off_for_fp32_matmuls_by_default"),
        Said::source("So on a GPU these fp32 matmuls run without TF32 tensor cores, at the fp32 peak, many times below bf16's: a decode step's FLOPs catch up with its weight reads at a far smaller batch than they would in bf16.", "aten/src/ATen/Context.cpp", "Context::allowTF32CuBLAS", "more-cards"),
    ],
    source: "https://arxiv.org/abs/2309.06180",
    pitfall: "for prompt in prompts:  # one request at a time\n    model.generate(prompt, max_new_tokens=128)",
    fix: "model.generate(torch.stack(prompts), max_new_tokens=128)  # one batch",
    threshold: "confirmed when total tokens/s at the largest batch of the sweep is at least 2× batch 1's while the per-token latency grows less than 3×; the knee is the first batch after which total tokens/s gains under 20%. Regime: CPU batches 1–8 of the tiny decoder (a step is mostly per-op cost, which the whole batch shares); GPU batches 1–64 of the 1B shape in fp32 with TF32 off, where a step does 2 × batch FLOPs per 4-byte weight it reads: on an H100 or H200 (67 TFLOP/s fp32, 3.35–4.8 TB/s) the FLOPs catch up with the reads at a batch of a few tens, so the sweep's largest batch runs near or past that point (in bf16 on tensor cores that batch would be about seven times larger)",
    question: crate::pitfalls::ratio("The setup's decoder: total tokens per second at the sweep's largest batch, as a multiple of batch 1's? (A judgment: what sets a decode step's time on this device at these batches, its reads, its FLOPs or its per-op cost.)", TOKENS_OVER_S_AT_THE_LARGEST_BATCH, TOKENS_OVER_S_AT_BATCH_1, crate::pitfalls::Ask::LogScale { min: 0.1, max: 100.0, within: 1.5 }),
    experiment: decode_batch,
};

/// What decode-batch runs: one generation per batch of the sweep, smallest first.
pub(super) fn decode_batch_plan(ctx: &Ctx) -> Vec<RunSpec> {
    let model = decoder(ctx, protocol::decoder::CPU_PRESET, "llama_3_2_1b");
    let batches: Vec<u32> = if ctx.cuda() { vec![1, 4, 16, 64] } else { vec![1, 2, 4, 8] };
    batches.into_iter().map(|b| gen_spec(ctx, model, b, 16, 24, KvCacheKind::Dynamic, GradMode::NoGrad)).collect()
}

/// "Tiny Llama ..., batch 1, 2, 4 and 8, prompt 16 + 24 new tokens, dynamic cache".
pub(super) fn decode_batch_describe(specs: &[RunSpec]) -> String {
    let Some(last) = specs.last() else { return String::new() };
    let batches: Vec<String> = specs.iter().map(|s| s.batch.to_string()).collect();
    let (head, tail) = batches.split_at(batches.len() - 1);
    let line = setup(last);
    let listed = if head.is_empty() { tail[0].clone() } else { format!("{} and {}", head.join(", "), tail[0]) };
    line.replacen(&format!("batch {}", last.batch), &format!("batch {listed}"), 1)
}

pub(super) fn decode_batch_setup(ctx: &Ctx) -> Vec<String> {
    let specs = decode_batch_plan(ctx);
    let mut lines = vec![decode_batch_describe(&specs)];
    if let (Some(first), Some(last)) = (specs.first(), specs.last()) {
        lines.push(crate::pitfalls::kit::arms(format!("one sequence per generate call (batch {})", first.batch), format!("{} sequences in one generate call", last.batch)));
        lines.push(shape(last.model));
        lines.push(format!("{}, no_grad; the same prompt length for every sequence", dtypes(last)));
        if let Some(d) = last.model.decoder() {
            let (_, elt) = super::super::weights_dtype(last);
            let prompt = last.resolved_input_size() as u64;
            let n = last.generate.as_ref().map_or(0, |g| g.new_tokens) as u64;
            lines.push(format!(
                "Each decode step: about {:.4} GFLOP per sequence; the weights hold {}",
                d.config.forward_flops(1, 1, prompt + n / 2, 1) as f64 / 1e9,
                protocol::format_bytes(d.config.parameters() * elt)
            ));
        }
    }
    lines.push("Per-token latency: the median decode step; total tokens/s: batch × 1000 / that latency in ms".into());
    lines
}

pub(super) fn decode_batch(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
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
        format!("{reason}. A bigger batch cost the step too much time for batching to pay here: its time followed the batch's work (its FLOPs), not the weight reads or per-op cost the batch shares."),
    );
    let x: Vec<String> = batches.iter().map(|b| b.to_string()).collect();
    Ok(Outcome::new(decision, decode_batch_describe(&specs), ChartKind::Line)
        .figures(vec![
            fig(TOKENS_OVER_S_AT_BATCH_1, tps[0]),
            fig(TOKENS_OVER_S_AT_THE_LARGEST_BATCH, tps[tps.len() - 1]),
            fig(PER_TOKEN_LATENCY_AT_BATCH_1, lat[0]),
            fig(PER_TOKEN_LATENCY_AT_THE_LARGEST_BATCH, lat[lat.len() - 1]),
            fig(LARGEST_BATCH, batches[batches.len() - 1] as f64),
        ])
        .series(vec![
            series(TOTAL_TOKENS_OVER_S, x.clone(), tps.clone()),
            series(PER_TOKEN_LATENCY, x, lat.clone()),
        ]))
}
