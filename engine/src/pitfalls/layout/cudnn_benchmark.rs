//! The `cudnn-benchmark` card ([`CUDNN_BENCHMARK`]): cudnn.benchmark: slow first passes, at every new shape

use super::*;

pub const FIRST_PASS_FIRST_SHAPE: FigureName = FigureName::new("first pass, first shape", Unit::Ms);
pub const FIRST_PASS_SECOND_SHAPE: FigureName = FigureName::new("first pass, second shape", Unit::Ms);
pub const STEADY_P50: FigureName = FigureName::new("steady p50", Unit::Ms);
pub const LATENCY_PER_PASS_MS: FigureName = FigureName::new("latency per pass (ms)", Unit::Ms);

pub const CUDNN_BENCHMARK: Card = Card {
    id: "cudnn-benchmark",
    title: "cudnn.benchmark: slow first passes, at every new shape",
    asks: "With torch.backends.cudnn.benchmark = True, how do pass times behave when the input shape changes?",
    labels: ["benchmark on, the batch size changes after 10 passes", "benchmark on, every pass at one batch size"],
    setup: cudnn_benchmark_setup,
    needs: Needs::Cuda("cudnn.benchmark chooses among cuDNN's GPU convolution algorithms; a CPU does not use cuDNN."),
    claim: "With torch.backends.cudnn.benchmark = True, the first pass at an input shape new to the process times candidate algorithms (up to torch.backends.cudnn.benchmark_limit, 10 by default) for each convolution configuration it has not run, and is slow; the fastest is cached per configuration, so later passes at that shape skip the search. Every new shape pays it again.",
    statements: &[
        Said::torch("cudnn.benchmark is off by default, and torch.backends.cudnn.benchmark_limit, the most candidate algorithms it times for one convolution configuration, is 10.", "test_layout.py::test_cudnn_benchmark_is_off_and_times_at_most_ten_candidates_by_default"),
        Said::source("With benchmark on, the first call of a convolution configuration (input and weight sizes and strides, dtype, layout, padding, stride, dilation, groups) that the thread has not run builds cuDNN's candidate plans and times up to benchmark_limit of them on the real tensors.", "aten/src/ATen/native/cudnn/Conv_v8.cpp", "get_plans_from_find", "cards"),
        Said::source("The fastest plan is cached per configuration: a later call with the same configuration runs it without a search, and a new batch size is a new configuration, searched again.", "aten/src/ATen/native/cudnn/Conv_v8.cpp", "run_single_conv", "cards"),
        Said::run("In this run the first pass at each new batch size is far slower than the steady passes at the first.", &[FIRST_PASS_FIRST_SHAPE, FIRST_PASS_SECOND_SHAPE, STEADY_P50]),
    ],
    source: "https://pytorch.org/docs/stable/backends.html#torch.backends.cudnn.benchmark",
    pitfall: "torch.backends.cudnn.benchmark = True\nfor x in [x_a] * 10 + [x_b] * 10:  # x_b: one image more than x_a\n    y = model(x)",
    fix: "torch.backends.cudnn.benchmark = True\nfor x in [x_a] * 10:  # one batch size for every pass (batches padded or bucketed to it)\n    y = model(x)",
    threshold: "CUDA: with benchmark on, ResNet-18 runs 10 passes at a batch this process has not seen, then 10 at another new batch (a shape change midway). Confirmed when, at both shapes, the first pass is above 1.5× the steady passes' median even at their own spread (the warm-up rule); refuted when it is below 1.5× at their spread at both; inconclusive otherwise. Not applicable on a CPU (no cuDNN)",
    question: super::super::ratio("ResNet-18 with cudnn.benchmark on, after a change of batch size: the first pass at the new size as a multiple of the p50 of passes 3–10 at the first size?", FIRST_PASS_SECOND_SHAPE, STEADY_P50, super::super::Ask::LogScale { min: 0.5, max: 1000.0, within: 2.0 }),
    experiment: cudnn_benchmark,
};

/// The first batch size cudnn-benchmark may use, how many pairs of new sizes it cycles
/// through (one pair per call), and its passes per size.
pub(super) const BENCH_FIRST: u32 = 100;
pub(super) const BENCH_PAIRS: u32 = 50;
pub(super) const BENCH_PASSES: usize = 10;

/// The line cudnn-benchmark's report is measured on: its model and the range its two batch
/// sizes are drawn from (the sizes follow it).
pub(super) fn cudnn_benchmark_line(ctx: &Ctx) -> String {
    let model = ctx.model(ModelId::Resnet18);
    let size = Setup::with_batch(ctx, model, BENCH_FIRST, GradMode::NoGrad).size;
    let range = format!(
        "{BENCH_FIRST}–{} (two sizes new to this process, one after the other)",
        BENCH_FIRST + 2 * BENCH_PAIRS - 1
    );
    super::super::kit::describe(model, range, size)
}

pub(super) fn cudnn_benchmark_setup(ctx: &Ctx) -> Vec<String> {
    let mut lines = vec![
        cudnn_benchmark_line(ctx),
        format!("torch.backends.cudnn.benchmark = True; {BENCH_PASSES} forward passes at the first size, then {BENCH_PASSES} at the next, each timed on its own (eval(), torch.no_grad(), fp32)"),
    ];
    if ctx.model(ModelId::Resnet18) == ModelId::Resnet18 {
        lines.push("ResNet-18 has 20 convolutions in 11 distinct configurations (kernel, stride, channels, image size); a new batch size makes all 11 new".into());
    }
    lines.push("A judgment of what dominates the first pass at a new size: the search (cuDNN's candidate plans built, and up to torch.backends.cudnn.benchmark_limit = 10 of them timed, per configuration) against one steady pass".into());
    lines
}

pub(super) fn cudnn_benchmark(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    if !ctx.cuda() {
        return Ok(Outcome::new(
            Decision::not_applicable(format!("Not on a CPU: {}.", cpu_reason(protocol::settings::SettingId::CudnnBenchmark))),
            String::new(),
            ChartKind::Line,
        ));
    }
    use std::sync::atomic::{AtomicU32, Ordering};
    static CALLS: AtomicU32 = AtomicU32::new(0);
    let offset = BENCH_FIRST + 2 * (CALLS.fetch_add(1, Ordering::Relaxed) % BENCH_PAIRS);
    let bench = Advanced { cudnn_benchmark: true, ..Advanced::default() };
    let mut all = vec![];
    let mut decisions = vec![];
    let mut texts = vec![];
    let model_id = ctx.model(ModelId::Resnet18);
    for batch in [offset, offset + 1] {
        let setup = Setup::with_batch(ctx, model_id, batch, GradMode::NoGrad);
        let spec = RunSpec { advanced: bench, ..setup.spec.clone() };
        let i = setup.cached(lab, ctx)?;
        let model = lab.model(i);
        let x = setup.input(model, ctx)?;
        let times = time_passes(ctx, BENCH_PASSES, 1, |_, _| forward(model, &x, &spec, ctx.device))?.remove(0);
        let d = warm_up_rule(times[0], &times[2..]);
        texts.push(format!("batch {batch}: {}", d.reason));
        decisions.push(d.verdict);
        all.extend(times);
    }
    use protocol::Verdict::*;
    let text = texts.join(" ");
    let decision = if decisions.iter().all(|v| *v == Confirmed) {
        Decision::rule(true, text, "")
    } else if decisions.iter().all(|v| *v == Refuted) {
        Decision::rule(false, "", text)
    } else {
        Decision::inconclusive(text)
    };
    let measured_on = format!("{}: batches {offset} then {} this time, benchmark on", cudnn_benchmark_line(ctx), offset + 1);
    Ok(Outcome::new(decision, measured_on, ChartKind::Line)
        .figures(vec![
            fig(FIRST_PASS_FIRST_SHAPE, all[0]),
            fig(FIRST_PASS_SECOND_SHAPE, all[BENCH_PASSES]),
            fig(STEADY_P50, p(&all[2..BENCH_PASSES], 50.0)),
        ])
        .series(vec![series(LATENCY_PER_PASS_MS, numbered(all.len()), all)]))
}
