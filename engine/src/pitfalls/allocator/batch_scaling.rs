//! The `batch-scaling` card ([`BATCH_SCALING`]): Memory grows with the batch; grad mode moves the ceiling

use super::*;

// The figures this file's cards report, each defined once (see `kit::figure`).
pub const MEMORY_BUDGET: FigureName = FigureName::new("memory budget", Unit::Bytes);
pub const EACH_LARGEST_BATCH_WITHIN_BUDGET: FigureName = FigureName::new("{}: largest batch within budget", Unit::Count);
pub const EACH_MEMORY_PER_SAMPLE_SLOPE: FigureName = FigureName::new("{}: memory per sample (slope)", Unit::Bytes);
pub const EACH_LINEARITY_R2: FigureName = FigureName::new("{}: linearity R²", Unit::Ratio);
pub const EACH_PEAK_ALLOCATED_MIB: FigureName = FigureName::new("{}: peak allocated (MiB)", Unit::Mib);
pub const EACH_MS_PER_SAMPLE: FigureName = FigureName::new("{}: ms per sample", Unit::Ms);
pub const MEMORY_BUDGET_MIB: FigureName = FigureName::new("memory budget (MiB)", Unit::Mib);
pub const GRAD_ENABLED_LINEARITY_R2: FigureName = EACH_LINEARITY_R2.instance("grad enabled: linearity R²");
pub const GRAD_ENABLED_MEMORY_PER_SAMPLE_SLOPE: FigureName = EACH_MEMORY_PER_SAMPLE_SLOPE.instance("grad enabled: memory per sample (slope)");
pub const GRAD_ENABLED_LARGEST_BATCH_WITHIN_BUDGET: FigureName = EACH_LARGEST_BATCH_WITHIN_BUDGET.instance("grad enabled: largest batch within budget");
pub const NO_GRAD_LARGEST_BATCH_WITHIN_BUDGET: FigureName = EACH_LARGEST_BATCH_WITHIN_BUDGET.instance("no_grad: largest batch within budget");
pub const NO_GRAD_LINEARITY_R2: FigureName = EACH_LINEARITY_R2.instance("no_grad: linearity R²");
pub const NO_GRAD_MEMORY_PER_SAMPLE_SLOPE: FigureName = EACH_MEMORY_PER_SAMPLE_SLOPE.instance("no_grad: memory per sample (slope)");

pub const BATCH_SCALING: Card = Card {
    id: "batch-scaling",
    title: "Memory grows with the batch; grad mode moves the ceiling",
    asks: "How does memory grow with the batch, and how large a batch fits a memory budget, with autograd on and under torch.no_grad()?",
    labels: ["forward pass with autograd on", "forward pass under torch.no_grad()"],
    setup: batch_scaling_setup,
    needs: Needs::Any,
    claim: "Activation memory grows linearly with the batch in both modes, and each sample costs more with autograd on, which keeps the activations backward would need until the output is freed: within the same memory budget, torch.no_grad() fits a larger batch.",
    statements: &[
        Said::run("The peak above the baseline grows linearly with the batch, with autograd on and under torch.no_grad() alike.", &[GRAD_ENABLED_LINEARITY_R2, NO_GRAD_LINEARITY_R2]),
        Said::torch("With autograd on, the forward pass saves for backward the activations of every sample: doubling the batch doubles their bytes exactly.", "test_runtime.py::test_with_grad_the_saved_activations_double_with_the_batch"),
        Said::torch("They stay alive as long as the output does: every convolution's output is still held when the pass returns, and all are freed with the output.", "test_runtime.py::test_with_grad_activations_live_as_long_as_the_output"),
        Said::torch("Under torch.no_grad() nothing is saved and no convolution's output outlives the pass: each is freed once the layers after it have used it.", "test_runtime.py::test_under_no_grad_no_activation_outlives_the_pass"),
        Said::run("So each sample costs more memory with autograd on than under torch.no_grad(): compare the slopes of the two lines.", &[GRAD_ENABLED_MEMORY_PER_SAMPLE_SLOPE, NO_GRAD_MEMORY_PER_SAMPLE_SLOPE]),
        Said::run("Within the same budget, the largest batch that fits is larger under torch.no_grad().", &[MEMORY_BUDGET, GRAD_ENABLED_LARGEST_BATCH_WITHIN_BUDGET, NO_GRAD_LARGEST_BATCH_WITHIN_BUDGET]),
    ],
    source: "https://pytorch.org/docs/stable/notes/cuda.html#memory-management",
    pitfall: "y = model(big_batch)  # autograd on",
    fix: "with torch.no_grad():\n    y = model(big_batch)",
    threshold: "confirmed when the peak above baseline is linear in the batch for both modes (R² > 0.95 over the measured powers of two) and the largest batch within the budget is larger under no_grad than with grad. Each sweep doubles the batch until the peak allocated (weights and input included) passes the budget, the device fails (out of memory or any other error, once one batch has run: the reason says which), or the next batch would pass the sweep's largest: 256 on a CPU (to answer in seconds), on a GPU 4096 or the largest batch whose biggest tensor stays below 2³¹ elements, whichever is smaller. Regime: the budget, not the device, must end the sweep: on a GPU it is 16 GiB unless chosen (not the free memory: an H200's 139 GB would let both modes reach the largest batch and tie), on a CPU 160 MiB. By PyTorch's own profiler on a CPU, ResNet-18's peak grows by about 20 MiB per sample with grad and about 6 MiB under no_grad at 224² (about 3.8 and 1.1 MiB at the CPU's 96²), so with grad several hundred samples fit in 16 GiB, and under no_grad the stem output's 2³¹-element cap (batch 2048 at 224²) may end the sweep first. The latency per sample is plotted, not judged",
    question: super::super::ratio("ResNet-18 in eval(), the same memory budget for both, the batch doubled from 1: the largest batch that fits under torch.no_grad() as a multiple of the largest that fits with autograd on? (Both are powers of two; a judgment of what one sample costs in each mode.)", NO_GRAD_LARGEST_BATCH_WITHIN_BUDGET, GRAD_ENABLED_LARGEST_BATCH_WITHIN_BUDGET, super::super::Ask::LogScale { min: 0.1, max: 100.0, within: 2.0 }),
    experiment: batch_scaling,
};

/// Why one sweep stopped, in words.
pub(super) fn ended(name: &str, b: u32, why: &str) -> String {
    format!("{name}: stopped at batch {b}: {why}")
}

/// What batch-scaling sweeps: the model, the memory budget, the largest batch tried, and
/// the line its report is measured on.
pub(super) struct BatchPlan {
    model: ModelId,
    budget: u64,
    max_batch: u32,
    line: String,
}

/// Each batch of the sweep is one run of this many warm-up and timed iterations.
pub(super) const SWEEP_WARMUP: u32 = 1;
pub(super) const SWEEP_ITERS: u32 = 2;

pub(super) fn batch_plan(ctx: &Ctx) -> BatchPlan {
    let model = ctx.model(ModelId::Resnet18);
    let budget = ctx.opts.budget_bytes.unwrap_or(if ctx.cuda() {
        DEFAULT_CUDA_BUDGET_BYTES
    } else {
        DEFAULT_CPU_BUDGET_BYTES
    });
    let size = ctx
        .spec(model, 1, true, GradMode::NoGrad)
        .resolved_input_size();
    let max_batch = (if ctx.cuda() { 4096 } else { 256 }).min(element_cap(model, size));
    let line = describe(model, format!("1 to {max_batch} (powers of two)"), size);
    BatchPlan { model, budget, max_batch, line }
}

/// Why the sweep's largest batch is what it is on this device, in words.
pub(super) fn sweep_limit(ctx: &Ctx, model: ModelId, max_batch: u32) -> &'static str {
    let size = ctx.spec(model, 1, true, GradMode::NoGrad).resolved_input_size();
    if max_batch == element_cap(model, size) {
        "the largest batch whose biggest tensor stays below 2³¹ elements"
    } else if ctx.cuda() {
        "the sweep's largest on a GPU"
    } else {
        "the sweep's largest on a CPU, which keeps the card to seconds"
    }
}

pub(super) fn batch_scaling_setup(ctx: &Ctx) -> Vec<String> {
    let plan = batch_plan(ctx);
    let weights = if plan.model == ModelId::Resnet18 {
        "ResNet-18's weights: 11.7 million parameters, about 45 MiB in fp32, held throughout and counted in the budget".to_string()
    } else {
        format!("{}'s weights are held throughout and counted in the budget", plan.model.display_name())
    };
    let size = ctx.spec(plan.model, 1, true, GradMode::NoGrad).resolved_input_size();
    let mut lines = vec![
        plan.line.clone(),
        crate::pitfalls::kit::arms("forward passes with autograd on", "forward passes under torch.no_grad()"),
        "Both in eval(), fp32 (4 bytes an element)".into(),
        weights,
        format!(
            "Memory budget: {} ({} bytes) of peak allocated memory, weights and input included",
            protocol::format_bytes(plan.budget),
            plan.budget
        ),
        format!("Each sweep doubles the batch from 1 until the peak passes the budget, the device fails, or the next batch would pass {} ({}); each batch is one run of {SWEEP_WARMUP} warm-up and {SWEEP_ITERS} timed iterations", plan.max_batch, sweep_limit(ctx, plan.model, plan.max_batch)),
    ];
    lines.extend(super::super::memory::architecture(plan.model, size));
    lines
}

pub(super) fn batch_scaling(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let BatchPlan { model, budget, max_batch, line } = batch_plan(ctx);
    let mut labels: Vec<String> = vec![];
    let mut series_out = vec![];
    let mut figures = vec![fig(MEMORY_BUDGET, budget as f64)];
    let mut fits = vec![];
    let mut linear = true;
    let mut notes = vec![];
    for (name, grad) in [
        ("grad enabled", GradMode::Enabled),
        ("no_grad", GradMode::NoGrad),
    ] {
        let (mut xs, mut peaks, mut totals, mut per_sample) = (vec![], vec![], vec![], vec![]);
        let mut largest = 0u32;
        let mut b = 1u32;
        let mut end = None;
        while b <= max_batch {
            let mut spec = ctx.spec(model, b, true, grad);
            spec.iters = SWEEP_ITERS;
            spec.warmup = SWEEP_WARMUP;
            match measure(lab, ctx, spec) {
                Ok(r) => {
                    let total = r.memory.peak_allocated_bytes;
                    xs.push(b as f64);
                    peaks.push(r.memory.peak_above_baseline_bytes as f64);
                    totals.push(mib(total));
                    per_sample.push(r.latency_ms.p50 / b as f64);
                    if total > budget {
                        let why = format!("needs {:.1} MiB, above the budget", mib(total));
                        end = Some(ended(name, b, &why));
                        break;
                    }
                    largest = b;
                }
                // Stopping the experiment is never a data point.
                Err(f) if matches!(f.kind, FailureKind::Cancelled | FailureKind::Timeout) => {
                    return Err(f)
                }
                // Not even batch 1 ran: nothing was measured, the card fails.
                Err(f) if xs.is_empty() => return Err(f),
                Err(f) => {
                    let why = match f.kind {
                        FailureKind::OutOfMemory => {
                            format!("out of memory — a data point, not a crash ({})", f.message)
                        }
                        _ => format!("the device failed ({}) — the sweep ends there", f.message),
                    };
                    end = Some(ended(name, b, &why));
                    break;
                }
            }
            b *= 2;
        }
        notes.push(end.unwrap_or_else(|| {
            format!("{name}: stopped after batch {largest}: the next power of two is above the sweep's largest batch on this device ({max_batch}: {})", sweep_limit(ctx, model, max_batch))
        }));
        let (slope, r2) = linear_fit(&xs, &peaks);
        linear &= r2 > 0.95;
        fits.push(largest);
        figures.push(fig_of(
            EACH_LARGEST_BATCH_WITHIN_BUDGET, &[&name],
            largest as f64,
        ));
        figures.push(fig_of(
            EACH_MEMORY_PER_SAMPLE_SLOPE, &[&name],
            slope,
        ));
        figures.push(fig_of(EACH_LINEARITY_R2, &[&name], r2));
        if xs.len() > labels.len() {
            labels = xs.iter().map(|x| format!("{x}")).collect();
        }
        // Total allocated, so that it compares with the budget line.
        series_out.push(series_of(
            EACH_PEAK_ALLOCATED_MIB, &[&name],
            vec![],
            totals,
        ));
        series_out.push(series_of(
            EACH_MS_PER_SAMPLE, &[&name],
            vec![],
            per_sample,
        ));
    }
    series_out.push(series(
        MEMORY_BUDGET_MIB,
        vec![],
        vec![mib(budget); labels.len()],
    ));
    for s in &mut series_out {
        s.x = labels.clone();
        s.y.resize(labels.len(), None);
    }
    let figures_text = format!(
        "Largest batch within {:.0} MiB: {} with grad, {} with no_grad; memory {} linear in the batch.",
        mib(budget),
        fits[0],
        fits[1],
        if linear { "is" } else { "is not" }
    );
    Ok(Outcome::new(
        Decision::rule(
            linear && fits[1] > fits[0],
            figures_text.clone(),
            figures_text,
        ),
        line,
        ChartKind::Line,
    )
    .figures(figures)
    .series(series_out)
    .notes(notes))
}
