//! The `compiled-batch` card ([`COMPILED_BATCH`]): Compiled, a large batch runs faster in less memory; batch 1 is the device's answer

use super::*;

pub const PACKAGE_BATCH_RANGE_MAX: FigureName = FigureName::new("package batch range, max", Unit::Count);
pub const BATCH_P50_COMPILED: FigureName = FigureName::new("batch {}: p50 compiled", Unit::Ms);
pub const BATCH_EAGER_OVER_COMPILED_CI_LOW: FigureName = FigureName::new("batch {}: eager / compiled, 95% interval low", Unit::Ratio);
pub const BATCH_EAGER_OVER_COMPILED_CI_HIGH: FigureName = FigureName::new("batch {}: eager / compiled, 95% interval high", Unit::Ratio);
pub const BATCH_PEAK_ABOVE_BASELINE_EAGER: FigureName = FigureName::new("batch {}: peak above baseline, eager", Unit::Bytes);
pub const BATCH_PEAK_ABOVE_BASELINE_COMPILED: FigureName = FigureName::new("batch {}: peak above baseline, compiled", Unit::Bytes);
pub const BATCH_32_P50_EAGER: FigureName = BATCH_P50_EAGER.instance("batch 32: p50 eager");
pub const BATCH_32_P50_COMPILED: FigureName = BATCH_P50_COMPILED.instance("batch 32: p50 compiled");
pub const BATCH_32_EAGER_OVER_COMPILED_CI_LOW: FigureName = BATCH_EAGER_OVER_COMPILED_CI_LOW.instance("batch 32: eager / compiled, 95% interval low");
pub const BATCH_32_PEAK_ABOVE_BASELINE_EAGER: FigureName = BATCH_PEAK_ABOVE_BASELINE_EAGER.instance("batch 32: peak above baseline, eager");
pub const BATCH_1_P50_COMPILED: FigureName = BATCH_P50_COMPILED.instance("batch 1: p50 compiled");
pub const BATCH_32_EAGER_OVER_COMPILED_CI_HIGH: FigureName = BATCH_EAGER_OVER_COMPILED_CI_HIGH.instance("batch 32: eager / compiled, 95% interval high");
pub const BATCH_32_PEAK_ABOVE_BASELINE_COMPILED: FigureName = BATCH_PEAK_ABOVE_BASELINE_COMPILED.instance("batch 32: peak above baseline, compiled");

/// What one call held, by the run's memory source: after one unmeasured call, the highest
/// allocation during the next above what was allocated before it, and what stays allocated
/// while its output lives.
pub(super) fn call_memory(lab: &Lab, ctx: &Ctx, mut call: impl FnMut() -> Result<tch::Tensor, RunFailure>) -> Result<(u64, u64), RunFailure> {
    ctx.check()?;
    drop(call()?);
    let meter = lab.meter(ctx.device);
    synchronize(ctx.device)?;
    let before = meter.read().map_err(torch_failure)?.allocated;
    meter.reset_peak().map_err(torch_failure)?;
    let out = call()?;
    synchronize(ctx.device)?;
    let r = meter.read().map_err(torch_failure)?;
    drop(out);
    Ok((r.peak_allocated.saturating_sub(before), r.allocated.saturating_sub(before)))
}

// ---------------------------------------------------------------------------------------
// Batch 1 and a large batch.

/// The batches compiled-batch compares at.
pub(super) const BATCHES: [u32; 2] = [1, 32];

pub const COMPILED_BATCH: Card = Card {
    id: "compiled-batch",
    title: "Compiled, a large batch runs faster in less memory; batch 1 is the device's answer",
    asks: "How does a model compiled ahead of time compare with the eager model per pass, at batch 1 and at batch 32: time and peak memory?",
    labels: ["the eager model", "the model compiled ahead of time (AOTInductor)"],
    setup: batch_setup,
    needs: Needs::Any,
    claim: "At batch 32 the compiled pass is faster than the eager one and its peak memory above the baseline is lower: Inductor fuses the elementwise work around the convolutions and matrix products (BatchNorm, ReLU, the residual adds) into fewer kernels that keep fewer intermediate tensors, and plans its buffers so later ones reuse earlier ones. At batch 1 the gain depends on the device: the figures say what this one does.",
    statements: &[
        Said::run("At batch 32 the compiled pass was faster than the eager one: the 95% interval of eager / compiled lies above 1.", &[BATCH_32_P50_EAGER, BATCH_32_P50_COMPILED, BATCH_32_EAGER_OVER_COMPILED_CI_LOW, BATCH_32_EAGER_OVER_COMPILED_CI_HIGH]),
        Said::run("Its peak memory above the baseline was lower than the eager pass's.", &[BATCH_32_PEAK_ABOVE_BASELINE_EAGER, BATCH_32_PEAK_ABOVE_BASELINE_COMPILED]),
        Said::run("At batch 1 the two p50s and their interval are this device's answer.", &[BATCH_1_P50_EAGER, BATCH_1_P50_COMPILED]),
        Said::run("Both ran the same exported package, compiled once for batches 1 to 64.", &[PACKAGE_BATCH_RANGE_MAX]),
    ],
    source: "https://pytorch.org/docs/stable/torch.compiler_aot_inductor.html",
    pitfall: "with torch.no_grad():\n    y = model(x)",
    fix: "runner = torch._inductor.aoti_load_package(path)\nwith torch.no_grad():\n    y = runner(x)",
    threshold: "At batch 32: confirmed when the 95% bootstrap interval of the p50 ratio eager / compiled lies wholly above 1 and the compiled pass's peak above the baseline is lower than eager's beyond 1%; refuted when that interval lies wholly below 1 or the compiled peak is not lower; inconclusive otherwise. Batch 1 is reported, not judged. The passes alternate on the same input, one untimed of each first (12 of each on a CPU, 30 on a GPU); each peak is the highest allocation during one call above what was allocated before it, by the run's memory source",
    question: super::super::ratio("ResNet-18 at batch 1: the p50 of the compiled pass as a multiple of the eager pass's?", BATCH_1_P50_COMPILED, BATCH_1_P50_EAGER, super::super::SAME_TIME),
    experiment: batch,
};

pub(super) fn batch_plan(ctx: &Ctx) -> (ModelId, usize) {
    (ctx.model(ModelId::Resnet18), if ctx.cuda() { 30 } else { 12 })
}

pub(super) fn batch_line(ctx: &Ctx) -> String {
    let (model, rounds) = batch_plan(ctx);
    let size = Setup::with_batch(ctx, model, 1, GradMode::NoGrad).size;
    let [a, b] = BATCHES;
    format!("{}, batches {a} and {b}, {}, eval(), torch.no_grad(), fp32, {rounds} passes of each, alternating", model.display_name(), model.describe_sample(size))
}

pub(super) fn batch_setup(ctx: &Ctx) -> Vec<String> {
    vec![
        batch_line(ctx),
        how_compiled(ctx),
        "Timed: the eager and the compiled pass alternating at each batch; also read: each one's peak memory above what was allocated before the call".into(),
    ]
}

pub(super) fn batch(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let python = match python_or_absent(lab) {
        Ok(p) => p,
        Err(absent) => return Ok(absent),
    };
    let (model_id, rounds) = batch_plan(ctx);
    let range = protocol::compiled_batch_range(BATCHES[1]);
    let mut figures = vec![fig(PACKAGE_BATCH_RANGE_MAX, range.1 as f64)];
    let (mut labels, mut p50s) = (vec![], vec![]);
    let mut texts = vec![];
    let mut at_large = None;
    // One package serves both batches.
    let (i, c) = package(lab, ctx, &Setup::with_batch(ctx, model_id, BATCHES[1], GradMode::NoGrad), &python, range)?;
    for b in BATCHES {
        let setup = Setup::with_batch(ctx, model_id, b, GradMode::NoGrad);
        let model = lab.model(i);
        let input = setup.input(model, ctx)?;
        let spec = &setup.spec;
        let (eager_peak, _) = call_memory(lab, ctx, || forward(model, &input, spec, ctx.device))?;
        let (compiled_peak, _) = call_memory(lab, ctx, || c.forward(&input, spec, ctx.device))?;
        let times = time_passes(ctx, rounds, 2, |v, _| match v {
            0 => forward(model, &input, spec, ctx.device),
            _ => c.forward(&input, spec, ctx.device),
        })?;
        let shift = Shift::of(&times[0], &times[1]);
        figures.extend([
            fig_of(BATCH_P50_EAGER, &[&b], shift.slow_p50),
            fig_of(BATCH_P50_COMPILED, &[&b], shift.fast_p50),
            fig_of(BATCH_EAGER_OVER_COMPILED_CI_LOW, &[&b], shift.bounds().0),
            fig_of(BATCH_EAGER_OVER_COMPILED_CI_HIGH, &[&b], shift.bounds().1),
            fig_of(BATCH_PEAK_ABOVE_BASELINE_EAGER, &[&b], eager_peak as f64),
            fig_of(BATCH_PEAK_ABOVE_BASELINE_COMPILED, &[&b], compiled_peak as f64),
        ]);
        if b == BATCHES[0] {
            figures.extend(interval_figures(&COMPILED_BATCH.question, &Shift::of(&times[1], &times[0])));
        }
        labels.extend([format!("eager, batch {b}"), format!("compiled, batch {b}")]);
        p50s.extend([shift.slow_p50, shift.fast_p50]);
        let (_, memory) = super::super::kit::bytes_compared(compiled_peak as f64, eager_peak as f64);
        texts.push(format!("Batch {b}: eager / compiled {}; peak above baseline, compiled against eager: {memory}.", shift.describe()));
        if b == BATCHES[1] {
            at_large = Some((shift, compiled_peak, eager_peak));
        }
    }
    let text = texts.join(" ");
    let (shift, compiled_peak, eager_peak) = at_large.expect("the large batch was measured");
    let lower = super::super::kit::bytes_compared(compiled_peak as f64, eager_peak as f64).0 == protocol::Choice::Lower;
    let decision = match (Decision::latency(&shift, 1.0, 1.0, "", "").verdict, lower) {
        (protocol::Verdict::Confirmed, true) => Decision::rule(true, text, ""),
        (protocol::Verdict::Refuted, _) | (_, false) => Decision::rule(false, "", text),
        _ => Decision::inconclusive(format!("{text} At batch 32 the time ratio's interval straddles 1: {}.", shift.more(&[1.0]))),
    };
    Ok(Outcome::new(decision, batch_line(ctx), ChartKind::Bar)
        .figures(figures.clone())
        .series(vec![
            series(P50_LATENCY_MS, labels.clone(), p50s),
            series(
                PEAK_ABOVE_BASELINE_MIB,
                labels,
                BATCHES
                    .iter()
                    .flat_map(|b| {
                        let get = |n: FigureName| figures.iter().find(|f| f.name == n.label(&[b])).map_or(0.0, |f| mib(f.value as u64));
                        [get(BATCH_PEAK_ABOVE_BASELINE_EAGER), get(BATCH_PEAK_ABOVE_BASELINE_COMPILED)]
                    })
                    .collect(),
            ),
        ]))
}
