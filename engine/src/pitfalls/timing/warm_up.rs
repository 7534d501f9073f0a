//! warm-up: the first passes on a new input shape pay one-time costs (oneDNN's primitives
//! on a CPU; cuDNN's plans, kernels loaded at their first launch and the caching allocator's
//! cudaMalloc calls on a GPU), so they are not representative.

use std::sync::atomic::{AtomicU32, Ordering};

use protocol::{ChartKind, DeviceKind, GradMode, ModelId, RunFailure};

use super::super::kit::{describe, fig, numbered, p, series, time_passes, Ctx, Decision, Outcome, Setup};
use super::super::python::{self, beside};
use super::super::{Card, Needs, Said};
use crate::lab::{forward, Lab};
use crate::pitfalls::kit::FigureName;
use protocol::Unit;

// The figures this file's cards report, each defined once (see `kit::figure`).
pub const FIRST_ITERATION: FigureName = FigureName::new("first iteration", Unit::Ms);
pub const MEDIAN_OF_ITERATIONS_6_15: FigureName = FigureName::new("median of iterations 6-15", Unit::Ms);
pub const FIRST_OVER_STEADY_RATIO: FigureName = FigureName::new("first / steady", Unit::Ratio);
pub const LATENCY_MS: FigureName = FigureName::new("latency (ms)", Unit::Ms);

pub const WARM_UP: Card = Card {
    id: "warm-up",
    title: "The first iterations are not representative",
    asks: "How does the time of a freshly built model's first forward pass compare with the passes after it?",
    labels: ["time one call", "three calls first, then time many"],
    setup: warm_up_setup,
    needs: Needs::Any,
    claim: "The first pass on a new input shape pays one-time costs the passes after it do not: on a CPU, oneDNN creating a primitive for each convolution shape; on a GPU, cuDNN choosing and building a plan for each convolution shape, kernels loaded on their first launch, and the caching allocator's first cudaMalloc calls. Timing it skews the statistics. Gradless times these passes from Rust through libtorch, with no Python interpreter per op; a team's Python code adds the interpreter's cost to every pass, first or not, and where this server has a Python the same passes timed from it are shown beside.",
    statements: &[
        Said::run("The first pass on a batch size this process had not run took more than 1.5× the median of the steady passes (iterations 6–15), beyond their spread.", &[FIRST_ITERATION, MEDIAN_OF_ITERATIONS_6_15, FIRST_OVER_STEADY_RATIO]),
        Said::torch("On a CPU, PyTorch runs these fp32 convolutions through oneDNN.", "test_runtime.py::test_cpu_convolutions_run_through_onednn"),
        Said::torch("oneDNN creates a convolution primitive on the first call with each new input shape, and takes it from its cache on later calls with that shape.", "test_runtime.py::test_onednn_creates_a_convolution_primitive_per_new_shape"),
        Said::source("On a GPU, cuDNN chooses and builds an execution plan for each new convolution configuration (a new batch size is one) on its first call, from its heuristics, or by timing the candidates under torch.backends.cudnn.benchmark (off here, as by default); later calls reuse the cached plan.", "aten/src/ATen/native/cudnn/Conv_v8.cpp", "run_single_conv", "more-cards"),
        Said::source("CUDA loads each kernel on its first launch: lazy loading is CUDA's own default on Linux since CUDA 12.2 (CUDA_MODULE_LOADING unset reads as LAZY), and PyTorch 2.11's CUDA start-up leaves the variable as it finds it (earlier versions set it to LAZY there).", "aten/src/ATen/cuda/detail/CUDAHooks.cpp", "CUDAHooks::init", "more-cards"),
        Said::source("On a GPU the caching allocator, emptied before every card, gets the first pass's blocks from the driver with cudaMalloc; later passes reuse them from its pool.", "c10/cuda/CUDACachingAllocator.cpp", "alloc_block", "more-cards"),
    ],
    source: "https://pytorch.org/tutorials/recipes/recipes/benchmark.html",
    pitfall: "t0 = time.perf_counter(); model(x)  # on a GPU, then torch.cuda.synchronize()\nprint(time.perf_counter() - t0)",
    fix: "for _ in range(3): model(x)  # untimed calls, then time many runs",
    threshold: "confirmed when the first iteration of a freshly built model on an input shape this process has not run takes more than 1.5× the median of iterations 6–15 even at the steady passes' own spread (first / p90 of iterations 6–15 above 1.5); refuted when it stays below 1.5× even at their spread (first / p10 below 1.5); inconclusive in between, where the machine's noise cannot tell. The device is synchronised after the model and input are built, so their kernels never count as the first iteration. Gradless times libtorch from Rust: no pass pays Python's per-op cost, which in Python would add the same to every pass, first or not. Where the server has a Python, the same passes are also timed from it (figures \"Python: …\", and \"Python / Gradless: …\", Python's time over Gradless's), after one untimed pass at another batch so that its new process's own start-up is not counted: what a team's code sees; they do not decide the verdict. Regime: any. On a GPU (ResNet-18, batch 33–96, 224²) the first pass on a new shape pays for cuDNN's plan for each convolution configuration, any kernel not launched before, and the allocator's cudaMalloc of its blocks, not for the CUDA context or the cuBLAS handles and workspaces, which the worker made at start. On a CPU (96², batch 5–68) it pays for oneDNN's primitives, a few milliseconds against a pass of tens, which a busy machine's noise can hide",
    question: super::super::ratio("ResNet-18, built fresh, on a batch size this process has not run: the first iteration's time as a multiple of the median of iterations 6–15? (A judgment of the one-time costs of a new shape on this device against a steady pass.)", FIRST_ITERATION, MEDIAN_OF_ITERATIONS_6_15, super::super::Ask::LogScale { min: 0.1, max: 1000.0, within: 2.0 }),
    experiment: warm_up,
};

/// How much slower than steady the first pass must be (see the threshold).
const FIRST_OVER_STEADY: f64 = 1.5;

/// The warm-up rule: `first` is the first pass, `steady` the passes after the fifth. One
/// first pass has no spread of its own, so it is given the steady passes' (p10 and p90
/// over their median): the ratio's interval is what it would read had the first pass been
/// as noisy as they are.
pub fn warm_up_rule(first: f64, steady: &[f64]) -> Decision {
    let median = p(steady, 50.0);
    let ratio = first / median;
    let (lo, hi) = (ratio * median / p(steady, 90.0), ratio * median / p(steady, 10.0));
    let figures = format!(
        "First iteration {first:.3} ms, median of the steady iterations {median:.3} ms: {ratio:.2}× ({lo:.2}–{hi:.2} with the steady passes' own spread, p10–p90)."
    );
    if lo > FIRST_OVER_STEADY {
        Decision::rule(true, figures, "")
    } else if hi < FIRST_OVER_STEADY {
        Decision::rule(false, "", figures)
    } else {
        Decision::inconclusive(format!("{figures} The interval contains {FIRST_OVER_STEADY}: the steady passes vary too much to tell. More iterations would not help (there is one first pass); rerun when the machine is quieter."))
    }
}

/// What a warm-up verdict needs said beside its figures: what this experiment's first
/// iterations showed, which first-pass costs belong to the device (so a refutation on a CPU
/// says nothing about a GPU), and why the Lab keeps discarding warm-up whatever the verdict.
pub fn warm_up_context(device: DeviceKind, first: &[f64], steady_median: f64) -> String {
    let shown: Vec<String> = first
        .iter()
        .enumerate()
        .map(|(i, ms)| format!("pass {} {ms:.3} ms ({:.2}×)", i + 1, ms / steady_median))
        .collect();
    let here = format!(
        "This run's first passes: {}, against a steady median of {steady_median:.3} ms.",
        shown.join(", ")
    );
    let device_part = match device {
        DeviceKind::Cpu => "On a CPU the first pass on a new shape pays mainly for oneDNN creating a primitive for each convolution shape, which can be small against a pass. On a GPU it also pays for what this CPU does not have: lazy initialisation (the cuDNN handle at a process's first convolution, each kernel loaded at its first launch), cuDNN choosing and building a plan for each new convolution configuration (from its heuristics; with cudnn.benchmark, by timing the candidates), and the caching allocator getting its blocks from the driver with cudaMalloc; creating the CUDA context and the cuBLAS handles, a process's first CUDA calls, this worker does at start. A verdict here says nothing about a GPU.",
        DeviceKind::Cuda => "On a GPU the first pass on a new shape pays for cuDNN choosing and building a plan for each new convolution configuration (from its heuristics here; with cudnn.benchmark, by timing the candidates), lazy initialisation (each kernel loaded at its first launch, the cuDNN handle at a process's first convolution), and the caching allocator, emptied before the card, getting its blocks from the driver with cudaMalloc; creating the CUDA context and the cuBLAS handles and workspaces, a process's first CUDA calls, this worker did at start.",
    };
    format!(
        "{here} {device_part} The Lab still keeps its warm-up iterations out of the statistics on every device: what the first passes cost depends on the device and on what this process ran before (a shape already seen starts warm), so one method measures every run the same way, and a warm-up pass slow for any reason (another process, a page fault) never moves a median."
    )
}

/// How many batch sizes warm-up cycles through, one per call, after its base batch.
const NEW_SHAPES: u32 = 64;
/// The passes warm-up times.
const WARM_UP_PASSES: usize = 15;

/// What warm-up runs: its base setup (the batch it starts counting from) and the line its
/// report is measured on, which names the range its batch is drawn from.
fn warm_up_plan(ctx: &Ctx) -> (Setup, String) {
    let base = Setup::new(ctx, ModelId::Resnet18, (4, 32), GradMode::NoGrad);
    let range = format!(
        "{}–{} (a size this process has not run)",
        base.batch + 1,
        base.batch + NEW_SHAPES
    );
    let line = describe(base.model, range, base.size);
    (base, line)
}

fn warm_up_setup(ctx: &Ctx) -> Vec<String> {
    let before = if ctx.cuda() {
        "Before the card the worker drops its cached models and empties the CUDA cache; it made the CUDA context and the cuBLAS handles and workspaces at start. cudnn.benchmark is off, as by default"
    } else {
        "Before the card the worker drops its cached models"
    };
    vec![
        warm_up_plan(ctx).1,
        format!("The model is built fresh for the experiment and the device synchronised; then {WARM_UP_PASSES} forward passes in a row, each timed on its own (eval(), torch.no_grad(), fp32)"),
        "Read: the first pass's time, and the median of passes 6 to 15".into(),
        before.into(),
        "Timed from Rust through libtorch: no pass pays a Python interpreter's cost per op".into(),
        python::SETUP.into(),
    ]
}

fn warm_up(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    // What a new process pays: a freshly built model and an input shape this process has not
    // run yet (oneDNN and cuDNN create and cache their kernels per shape, so a shape seen
    // before would start warm). Each call takes the next batch size.
    static CALLS: AtomicU32 = AtomicU32::new(0);
    let (base, measured_on) = warm_up_plan(ctx);
    let batch = base.batch + 1 + CALLS.fetch_add(1, Ordering::Relaxed) % NEW_SHAPES;
    let setup = Setup::with_batch(ctx, base.model, batch, GradMode::NoGrad);
    let model = setup.fresh(lab, ctx)?;
    let x = setup.input(&model, ctx)?;
    let times = time_passes(ctx, WARM_UP_PASSES, 1, |_, _| {
        forward(&model, &x, &setup.spec, ctx.device)
    })?
    .remove(0);
    let median = p(&times[5..], 50.0);
    let ratio = times[0] / median;
    let mut decision = warm_up_rule(times[0], &times[5..]);
    decision.reason = format!("{} {}", decision.reason, warm_up_context(ctx.device, &times[..3], median));
    let mut figures = vec![
        fig(FIRST_ITERATION, times[0]),
        fig(MEDIAN_OF_ITERATIONS_6_15, median),
        fig(FIRST_OVER_STEADY_RATIO, ratio),
    ];
    // The same passes from Python, on the same new batch: beside, never deciding.
    let mut notes = vec![];
    let request = python::request(
        WARM_UP.id,
        ctx.device,
        lab.config().threads,
        lab.config().seed,
        serde_json::json!({
            "model": setup.model.as_str(),
            "size": setup.size,
            "batch": batch,
            "prewarm_batch": base.batch,
            "passes": WARM_UP_PASSES,
        }),
    );
    if let Some(t) = python::ask(ctx.python, ctx.control, &request, &mut notes)? {
        if let Some(passes) = t.arm("passes").filter(|ps| ps.len() > 5) {
            let steady = p(&passes[5..], 50.0);
            let mut from_python = beside(&figures, "first iteration", passes[0], "ms");
            from_python.extend(beside(&figures, "median of iterations 6-15", steady, "ms"));
            from_python.extend(beside(&figures, "first / steady", passes[0] / steady, "ratio"));
            notes.push(format!(
                "From Python: first pass {:.3} ms, steady median {steady:.3} ms ({:.2}×); a steady pass took {:.2}× Gradless's. Python's per-op cost adds about the same to every pass, first or not, so from Python the first pass stands out less.",
                passes[0],
                passes[0] / steady,
                steady / median
            ));
            figures.extend(from_python);
        }
    }
    Ok(Outcome::new(
        decision,
        format!("{measured_on}: batch {batch} this time, built fresh for this experiment"),
        ChartKind::Line,
    )
    .figures(figures)
    .notes(notes)
    .series(vec![series(
        LATENCY_MS,
        numbered(times.len()),
        times,
    )]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use super::super::around;
    use protocol::Verdict;

    #[test]
    fn warm_up_is_decided_only_outside_the_steady_passes_spread() {
        let steady = around(10.0);
        assert_eq!(warm_up_rule(30.0, &steady).verdict, Verdict::Confirmed);
        assert_eq!(warm_up_rule(10.5, &steady).verdict, Verdict::Refuted);
        // A busy machine: steady passes spread ±40%; a 1.5× first pass cannot be told.
        let busy: Vec<f64> = (0..10).map(|i| 10.0 * (0.6 + i as f64 * 0.09)).collect();
        let d = warm_up_rule(15.0, &busy);
        assert_eq!(d.verdict, Verdict::Inconclusive, "{}", d.reason);
        assert!(d.reason.contains("quieter"));
    }

    #[test]
    fn a_warm_up_verdict_says_what_its_first_passes_showed_and_what_belongs_to_the_device() {
        let cpu = warm_up_context(DeviceKind::Cpu, &[10.1, 10.0, 30.0], 10.0);
        // This run's figures, each against the steady median.
        assert!(cpu.contains("pass 1 10.100 ms (1.01×)") && cpu.contains("pass 3 30.000 ms (3.00×)"), "{cpu}");
        // What the CPU lacks is named, so a refutation here is not read as one on a GPU.
        for cost in ["CUDA context", "cuDNN", "caching allocator", "lazy initialisation"] {
            assert!(cpu.contains(cost), "{cost}: {cpu}");
        }
        assert!(cpu.contains("says nothing about a GPU"));
        // Why the Lab still drops warm-up, on either device.
        for text in [&cpu, &warm_up_context(DeviceKind::Cuda, &[50.0, 11.0, 10.0], 10.0)] {
            assert!(text.contains("The Lab still keeps its warm-up iterations out of the statistics"), "{text}");
        }
    }
}
