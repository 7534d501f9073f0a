//! The `autocast-decode` card ([`AUTOCAST_DECODE`]): Autocast in a decode loop: weights cast on the fly, not once

use super::*;

pub const FP32_WEIGHTS: FigureName = FigureName::new("fp32: weights", Unit::Bytes);
pub const PER_TOKEN_P50: FigureName = FigureName::new("per-token p50", Unit::Ms);
pub const CELL_PER_TOKEN_P50: FigureName = FigureName::new("{} · {}: per-token p50", Unit::Ms);
pub const CELL_PEAK_ABOVE_BASELINE: FigureName = FigureName::new("{} · {}: peak above baseline", Unit::Bytes);
pub const BF16_WEIGHTS_WEIGHTS: FigureName = FigureName::new("bf16 weights: weights", Unit::Bytes);
pub const BF16_WEIGHTS_INFERENCE_MODE_PER_TOKEN_P50: FigureName = CELL_PER_TOKEN_P50.instance("bf16 weights · inference_mode: per-token p50");
pub const AUTOCAST_PER_STEP_INFERENCE_MODE_PER_TOKEN_P50: FigureName = CELL_PER_TOKEN_P50.instance("autocast per step · inference_mode: per-token p50");

pub const AUTOCAST_DECODE: Card = Card {
    id: "autocast-decode",
    title: "Autocast in a decode loop: weights cast on the fly, not once",
    asks: "In a decode loop, how do bf16 autocast and weights cast to bf16 once compare in per-token time and in memory?",
    labels: ["fp32 weights, bf16 autocast entered around each decode step, loop under inference_mode", "weights cast to bf16 once, loop under inference_mode"],
    setup: autocast_decode_setup,
    needs: Needs::Any,
    claim: "Autocast keeps the fp32 weights and casts each to bf16 when an op uses it. With autograd on or under no_grad it caches a weight's bf16 copy until the autocast region ends, so one region around the whole loop casts each weight once and holds the copies, while a region entered per step casts every weight at every step; under inference_mode it skips the cache, so every step casts every weight whatever the region. Weights cast once (model.to(torch.bfloat16)) take half the fp32 bytes and need no cast: on a GPU, where a decode step reads every weight, their step beats autocast's per step under inference_mode; on a CPU running the tiny decoder a step is mostly per-op cost, and the run's own figures decide.",
    statements: &[
        Said::torch("Autocast keeps the fp32 weights and casts an eligible op's inputs, its weight included, to bf16 when the op runs.", "test_autocast.py::test_matmuls_run_low_and_the_parameters_stay_fp32"),
        Said::torch("With autograd on or under no_grad it caches each weight's bf16 copy until the autocast region ends: one region around the whole loop casts each weight once and holds the copies for the whole loop.", "test_generation.py::test_one_region_around_the_loop_casts_the_weights_once_under_no_grad"),
        Said::torch("A region entered around each step empties that cache at the end of the step: every step casts every weight again.", "test_generation.py::test_a_region_per_step_casts_the_weights_at_every_step"),
        Said::torch("Under inference_mode autocast skips the cache: every step casts every weight again, whatever the region.", "test_generation.py::test_under_inference_mode_every_step_casts_the_weights_whatever_the_region"),
        Said::torch("The cache keeps only weights that require grad: after model.requires_grad_(False) every call casts again, under no_grad too.", "test_generation.py::test_weights_that_do_not_require_grad_are_cast_at_every_call"),
        Said::torch("Weights cast once to bf16 need no cast at all.", "test_generation.py::test_weights_cast_once_need_no_cast"),
        Said::run("They take half the fp32 weights' bytes.", &[FP32_WEIGHTS, BF16_WEIGHTS_WEIGHTS]),
        Said::source("On a GPU, where a decode step reads every weight, weights cast once make the step faster than autocast entered per step under inference_mode: each step's casts read 4 bytes and write 2 per weight before the matmul reads the 2-byte copy.", "aten/src/ATen/autocast_mode.cpp", "cached_cast", "more-cards"),
    ],
    source: "https://github.com/pytorch/pytorch/pull/165068",
    pitfall: "with torch.inference_mode():\n    for step in range(new_tokens):\n        with torch.autocast(\"cuda\", dtype=torch.bfloat16):  # one autocast region per step\n            logits = model(next_id, past_key_values=cache).logits",
    fix: "model = model.to(torch.bfloat16)\nwith torch.inference_mode():\n    for step in range(new_tokens):\n        logits = model(next_id, past_key_values=cache).logits",
    threshold: "per row (fp32; autocast entered per step; autocast around the whole loop; bf16 weights — each under no_grad and inference_mode) the per-token p50 and the peak above the baseline are reported. Confirmed when the bf16 model's weights take exactly half the fp32 model's bytes and, under inference_mode, the 95% bootstrap interval of the ratio of the decode steps' times (autocast per step over bf16 weights) lies wholly above 1; refuted when it lies wholly below 1, or the bytes are not half; inconclusive otherwise. Regime: a GPU with bf16, where a decode step reads every weight and a cast reads 4 bytes and writes 2 per weight; a CPU answers with its own figures (the tiny decoder's step is mostly per-op cost, and a CPU without AVX512-BF16 or AMX emulates bf16)",
    question: crate::pitfalls::ratio("The setup's decoder under inference_mode: the per-token decode p50 with the weights cast to bf16 once, against the p50 with fp32 weights and bf16 autocast entered around each step? (Partly a knowledge check.)", BF16_WEIGHTS_INFERENCE_MODE_PER_TOKEN_P50, AUTOCAST_PER_STEP_INFERENCE_MODE_PER_TOKEN_P50, crate::pitfalls::SAME_TIME),
    experiment: autocast_decode,
};

/// What autocast-decode runs: the fp32 generation under no_grad (every row changes its
/// weights, autocast or grad mode).
pub(super) fn autocast_decode_plan(ctx: &Ctx) -> RunSpec {
    let model = decoder(ctx, protocol::decoder::CPU_PRESET, "llama_3_2_1b");
    // Enough decode steps on either device for the question's 95% interval to mean something.
    let (prompt, n) = if ctx.cuda() { (128, 32) } else { (8, 24) };
    gen_spec(ctx, model, 1, prompt, n, KvCacheKind::Dynamic, GradMode::NoGrad)
}

/// "Tiny Llama ..., batch 1, prompt 8 + 24 new tokens, dynamic cache".
pub(super) fn autocast_decode_describe(spec: &RunSpec) -> String {
    setup(spec)
}

pub(super) fn autocast_decode_setup(ctx: &Ctx) -> Vec<String> {
    let spec = autocast_decode_plan(ctx);
    let mut lines = vec![
        autocast_decode_describe(&spec),
        "Four ways, each under no_grad and under inference_mode: fp32 weights; fp32 weights with bf16 autocast entered around each step; bf16 autocast around the whole loop; weights cast to bf16 once".into(),
        shape(spec.model),
    ];
    if let Some(d) = spec.model.decoder() {
        let p = d.config.parameters();
        lines.push(format!(
            "Weights: {:.2} M parameters, {} in fp32 (4 bytes each), {} in bf16 (2 bytes each)",
            p as f64 / 1e6,
            protocol::format_bytes(p * 4),
            protocol::format_bytes(p * 2)
        ));
    }
    lines.push("Per-token time: the median of the decode steps' latencies (the prompt's pass excluded); memory: the peak above the weights and the prompt".into());
    lines
}

pub(super) fn autocast_decode(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let plan = autocast_decode_plan(ctx);
    // bf16 on both: the comparison is with bf16 weights (fp16 autocast on a CPU is not
    // supported everywhere).
    let low = Autocast::Bf16;
    let mut rows = vec![];
    let mut cells: Vec<(String, GradMode, f64, u64)> = vec![];
    let mut samples: Vec<(String, GradMode, Vec<f64>)> = vec![];
    let mut weights_bytes: Vec<(String, u64)> = vec![];
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
            let checked = crate::spec::check_spec(spec, &protocol::Catalog::built_in(), &protocol::Limits::default(), lab.machine())
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
            cells.push((name.to_string(), grad, p50, report.memory.peak_above_baseline_bytes));
            if grad == GradMode::InferenceMode {
                weights_bytes.push((name.to_string(), g.weights_breakdown.map_or(0, |w| w.linear_bytes + w.other_bytes)));
            }
        }
    }
    let get = |name: &str, grad: GradMode| cells.iter().find(|c| c.0 == name && c.1 == grad).map(|c| c.2).unwrap_or(0.0);
    let weights_of = |name: &str| weights_bytes.iter().find(|w| w.0 == name).map_or(0, |w| w.1);
    let steps = |name: &str| samples.iter().find(|c| c.0 == name && c.1 == GradMode::InferenceMode).map(|c| c.2.clone()).unwrap_or_default();
    let lines: Vec<String> = [GradMode::NoGrad, GradMode::InferenceMode]
        .iter()
        .map(|&grad| {
            format!(
                "{}: fp32 {:.2} ms, autocast per step {:.2} ms, around the loop {:.2} ms, bf16 weights {:.2} ms per token",
                grad.as_str(),
                get("fp32", grad),
                get("autocast per step", grad),
                get("autocast around the loop", grad),
                get("bf16 weights", grad)
            )
        })
        .collect();
    // The question's comparison, under inference_mode: autocast per step over bf16 weights.
    let shift = Shift::of(&steps("autocast per step"), &steps("bf16 weights"));
    let (fp32_bytes, bf16_bytes) = (weights_of("fp32"), weights_of("bf16 weights"));
    let half = bf16_bytes > 0 && 2 * bf16_bytes == fp32_bytes;
    let emulated = match ctx.device {
        protocol::DeviceKind::Cpu => lab
            .machine()
            .autocast_support(protocol::DeviceKind::Cpu)
            .into_iter()
            .find(|a| a.autocast == Autocast::Bf16)
            .map(|a| a.note)
            .filter(|n| !n.is_empty()),
        protocol::DeviceKind::Cuda => None,
    };
    let cpu_note = match ctx.device {
        protocol::DeviceKind::Cpu => format!(
            " On a CPU the tiny decoder's step is mostly per-op cost rather than weight reads, so the casts' bytes need not decide it{}: these figures answer for this device, not for a GPU.",
            emulated.map(|n| format!(", and {n}")).unwrap_or_default()
        ),
        protocol::DeviceKind::Cuda => String::new(),
    };
    let weights_line = format!("weights {} in bf16 against {} in fp32", protocol::format_bytes(bf16_bytes), protocol::format_bytes(fp32_bytes));
    let figures_line = format!("{}; {weights_line}.", lines.join("; "));
    let decision = if !half {
        Decision::rule(false, "", format!("The bf16 model's weights are not half the fp32 model's: {figures_line}{cpu_note}"))
    } else {
        Decision::latency(
            &shift,
            1.0,
            1.0,
            format!("Under inference_mode autocast per step took {} the bf16 weights' time per token. {figures_line}{cpu_note}", shift.describe()),
            format!("Under inference_mode autocast per step took {} the bf16 weights' time per token: not slower here. {figures_line}{cpu_note}", shift.describe()),
        )
    };
    let decision = match decision.verdict {
        protocol::Verdict::Inconclusive => Decision::inconclusive(format!("{} {figures_line}{cpu_note}", decision.reason)),
        _ => decision,
    };
    let x: Vec<String> = cells.iter().map(|c| format!("{} · {}", c.0, c.1.as_str())).collect();
    let mut figures: Vec<_> = cells.iter().map(|c| fig_of(CELL_PER_TOKEN_P50, &[&c.0, &c.1.as_str()], c.2)).collect();
    figures.extend(cells.iter().map(|c| fig_of(CELL_PEAK_ABOVE_BASELINE, &[&c.0, &c.1.as_str()], c.3 as f64)));
    figures.push(fig(FP32_WEIGHTS, fp32_bytes as f64));
    figures.push(fig(BF16_WEIGHTS_WEIGHTS, bf16_bytes as f64));
    // The question's ratio (bf16 weights over autocast per step, under inference_mode) with
    // its 95% interval, from the decode steps of each.
    figures.extend(interval_figures(&AUTOCAST_DECODE.question, &Shift::of(&steps("bf16 weights"), &steps("autocast per step"))));
    Ok(Outcome::new(decision, autocast_decode_describe(&plan), ChartKind::Bar)
        .figures(figures)
        .series(vec![series(PER_TOKEN_P50, x, cells.iter().map(|c| c.2).collect())])
        .table(Table { columns: vec!["variant".into(), "grad".into(), "per-token p50".into(), "peak above baseline".into()], rows })
        .notes(vec!["In this engine, where no gradient is recorded, each layer's q/k/v weights and its gate/up weights run as one stacked tensor each, which does not require grad: autocast casts those at every step even inside one region around the loop under no_grad (the output projections, the down projections and the LM head are cast once there). transformers' separate nn.Linear weights would all be cast once.".into()]))
}
