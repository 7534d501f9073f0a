//! timing-gpu-work: on a GPU model(x) returns once its kernels are queued, so a timer must
//! synchronise before it stops.

use protocol::{ChartKind, DeviceKind, GradMode, ModelId, RunFailure};

use super::super::kit::{describe, element_cap, fig, numbered, p, series, time_passes, Ctx, Decision, Outcome, Setup, Shift};
use super::super::python::{self, beside};
use super::super::{Card, Needs, Said};
use super::from_rust;
use crate::lab::{forward, Lab};
use crate::models::Model;
use crate::pitfalls::kit::FigureName;
use protocol::Unit;

// The figures this file's cards report, each defined once (see `kit::figure`).
pub const NAIVE_P50: FigureName = FigureName::new("naive p50", Unit::Ms);
pub const SYNCHRONISED_P50: FigureName = FigureName::new("synchronised p50", Unit::Ms);
pub const NAIVE_OVER_SYNCHRONISED: FigureName = FigureName::new("naive / synchronised", Unit::Ratio);
pub const SYNCHRONISED_OVER_NAIVE_CI_LOW: FigureName = FigureName::new("synchronised / naive, 95% interval low", Unit::Ratio);
pub const SYNCHRONISED_P50_AT_BATCH_1: FigureName = FigureName::new("synchronised p50 at batch 1", Unit::Ms);
pub const SYNCHRONISED_OVER_NAIVE_CI_HIGH: FigureName = FigureName::new("synchronised / naive, 95% interval high", Unit::Ratio);
pub const NAIVE_TIMER_MS: FigureName = FigureName::new("naive timer (ms)", Unit::Ms);
pub const SYNCHRONISED_TIMER_MS: FigureName = FigureName::new("synchronised timer (ms)", Unit::Ms);

pub const TIMING_GPU_WORK: Card = Card {
    id: "timing-gpu-work",
    title: "CUDA is asynchronous: synchronise before you stop the clock",
    asks: "What does a timer around model(x) read on a GPU, with and without torch.cuda.synchronize() before it stops?",
    labels: ["clock stopped right after model(x)", "torch.cuda.synchronize() before the clock stops"],
    setup: timing_gpu_work_setup,
    needs: Needs::Cuda("torch.cuda.synchronize() waits on a CUDA device, and this server runs the card on its CPU."),
    claim: "On a GPU, model(x) returns once its kernels are queued: a timer stopped right after it measures the CPU issuing the ops, not the GPU's work, and reads a fraction of the true time where that work dominates. Gradless issues the ops from Rust through libtorch, with no Python interpreter per op, so its naive timer reads PyTorch's C++ dispatch and the launches alone; from Python, as a team's code runs, each op also pays the interpreter, and where this server has a Python its two timers are shown beside.",
    statements: &[
        Said::torch("ResNet-18's forward pass calls 69 operators (20 convolutions, 20 batch norms, 17 ReLUs, 8 residual additions, two poolings, a flatten, one linear layer), which the CPU issues one after another.", "test_runtime.py::test_resnet18_forward_calls_69_operators"),
        Said::run("A timer stopped right after model(x) returned read less than half the synchronised time: on a GPU the pass returns once its kernels are queued, before they have run.", &[NAIVE_P50, SYNCHRONISED_P50, NAIVE_OVER_SYNCHRONISED, SYNCHRONISED_OVER_NAIVE_CI_LOW, SYNCHRONISED_OVER_NAIVE_CI_HIGH]),
        Said::source("torch.cuda.synchronize() waits until every kernel queued on the device has finished (cudaDeviceSynchronize).", "c10/cuda/CUDAFunctions.cpp", "device_synchronize", "cards"),
        Said::source("Reading a value back to the host waits too: .item() copies it and synchronises the stream.", "aten/src/ATen/native/cuda/CUDAScalar.cu", "_local_scalar_dense_cuda", "cards"),
        Said::run("The batch was doubled until a synchronised pass took at least 5× a pass at batch 1, so the GPU's work, not the launches, set the synchronised time.", &[SYNCHRONISED_P50_AT_BATCH_1, SYNCHRONISED_P50]),
    ],
    source: "https://pytorch.org/docs/stable/notes/cuda.html#asynchronous-execution",
    pitfall: "t0 = time.time(); y = model(x); dt = time.time() - t0",
    fix: "t0 = time.time(); y = model(x); torch.cuda.synchronize(); dt = time.time() - t0",
    threshold: "CUDA: over 20 alternating passes per timer, confirmed when the 95% bootstrap interval of synchronised p50 / naive p50 lies wholly above 2 (the naive timer reads less than half), refuted when it lies wholly below 2, inconclusive when it contains 2. Regime: the GPU's work must dominate the launches, or there is nothing for a naive timer to miss. It is checked without the naive timer: a synchronised pass at the chosen batch must take at least 5× a synchronised pass at batch 1 (which cannot be shorter than its launches); the batch doubles until it does (up to 1024, below 2³¹ elements per tensor), and if it never does the verdict is not_applicable (launch-bound). Gradless issues the ops from Rust through libtorch: the naive timer reads PyTorch's C++ dispatch and the kernel launches alone. From Python each op also pays the interpreter, so a naive Python timer reads more, yet still not the GPU's work: where the server has a Python, the same alternating passes are also timed from it at the same batch (figures \"Python: …\", and \"Python / Gradless: …\", Python's time over Gradless's; the naive timer only on CUDA), what a team's code sees; they do not decide the verdict. On a CPU ops are synchronous: not_applicable, after checking that both timers agree within 25%",
    question: super::super::ratio("ResNet-18 on a GPU, at a batch where a synchronised pass takes at least 5× one at batch 1: the p50 read by the timer stopped right after model(x), as a multiple of the p50 read with torch.cuda.synchronize() before the clock stops?", NAIVE_P50, SYNCHRONISED_P50, super::super::Ask::LogScale { min: 0.001, max: 10.0, within: 2.0 }),
    experiment: timing_gpu_work,
};

/// How many times the batch-1 pass the chosen batch's pass must take (see the threshold).
const GPU_BOUND: f64 = 5.0;

/// The timing-gpu-work rule. `launch_floor_ms`: the synchronised p50 at batch 1 (CUDA only).
pub fn timing_gpu_work_rule(
    device: DeviceKind,
    launch_floor_ms: Option<f64>,
    naive: &[f64],
    synced: &[f64],
) -> Decision {
    let (n, s) = (p(naive, 50.0), p(synced, 50.0));
    let ratio = n / s;
    if device == DeviceKind::Cpu {
        return if (ratio - 1.0).abs() <= 0.25 {
            Decision::not_applicable(format!("CPU ops are synchronous: both timers agree ({n:.3} vs {s:.3} ms). The pitfall needs an asynchronous device such as a CUDA GPU."))
        } else {
            Decision::rule(false, "", format!("On this CPU the two timers disagreed: {n:.3} vs {s:.3} ms — more than noise should allow."))
        };
    }
    if let Some(floor) = launch_floor_ms.filter(|f| s < GPU_BOUND * f) {
        return Decision::not_applicable(format!("Launch-bound: a synchronised pass took {s:.3} ms, less than {GPU_BOUND}× a batch-1 pass ({floor:.3} ms), at the largest batch tried. Nothing queued for a naive timer to miss."));
    }
    let shift = Shift::of(synced, naive);
    Decision::latency(
        &shift,
        2.0,
        2.0,
        format!("The naive timer read {n:.3} ms, the synchronised one {s:.3} ms (synchronised / naive {}): it measured only the launches.", shift.describe()),
        format!("The naive timer read {n:.3} ms against {s:.3} ms synchronised (synchronised / naive {}): close, on this GPU and model.", shift.describe()),
    )
}

fn synced_p50(ctx: &Ctx, model: &Model, setup: &Setup) -> Result<f64, RunFailure> {
    let x = setup.input(model, ctx)?;
    let times = time_passes(ctx, 5, 1, |_, _| {
        forward(model, &x, &setup.spec, ctx.device)
    })?;
    Ok(p(&times[0], 50.0))
}

/// The passes per timer timing-gpu-work alternates.
const SYNC_ROUNDS: usize = 20;

/// What timing-gpu-work starts from, the largest batch it may double to on a GPU, and the line
/// its report is measured on (on a GPU, the batch range; the batch chosen follows it).
fn sync_plan(ctx: &Ctx) -> (Setup, u32, String) {
    let setup = Setup::new(ctx, ModelId::Resnet18, (4, 64), GradMode::NoGrad);
    let cap = element_cap(setup.model, setup.size).min(1024);
    let line = if ctx.cuda() {
        describe(
            setup.model,
            format!("{} to {cap} (doubled until a synchronised pass takes at least {GPU_BOUND}× one at batch 1)", setup.batch),
            setup.size,
        )
    } else {
        setup.describe()
    };
    (setup, cap, line)
}

fn timing_gpu_work_setup(ctx: &Ctx) -> Vec<String> {
    let (s, _, line) = sync_plan(ctx);
    vec![
        line,
        crate::pitfalls::kit::arms("the clock stops right after model(x) returns", "the device is synchronised (torch.cuda.synchronize() on a GPU) before the clock stops"),
        format!("{SYNC_ROUNDS} passes per timer, alternating, on the same model and input (eval(), torch.no_grad(), fp32)"),
        from_rust(s.model),
        python::SETUP.into(),
    ]
}

fn timing_gpu_work(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let (mut setup, cap, measured_on) = sync_plan(ctx);
    let i = setup.cached(lab, ctx)?;
    let model = lab.model(i);
    let mut notes = vec!["The two timers alternate on the same model and input.".to_string()];
    let mut floor = None;
    if ctx.cuda() {
        let one = Setup::with_batch(ctx, setup.model, 1, GradMode::NoGrad);
        let f = synced_p50(ctx, model, &one)?;
        while synced_p50(ctx, model, &setup)? < GPU_BOUND * f && setup.batch * 2 <= cap {
            setup = Setup::with_batch(ctx, setup.model, setup.batch * 2, GradMode::NoGrad);
        }
        notes.push(format!("Batch chosen so the GPU's work dominates: a synchronised pass at batch 1 takes {f:.3} ms."));
        floor = Some(f);
    }
    let x = setup.input(model, ctx)?;
    let rounds = SYNC_ROUNDS;
    let times = time_passes(ctx, rounds, 2, |variant, clock| {
        let out = forward(model, &x, &setup.spec, ctx.device)?;
        if variant == 0 {
            // The naive timer stops before the device has finished.
            clock.stop();
        }
        Ok(out)
    })?;
    let (naive, synced) = (&times[0], &times[1]);
    let (n, s) = (p(naive, 50.0), p(synced, 50.0));
    let mut figures = vec![
        fig(NAIVE_P50, n),
        fig(SYNCHRONISED_P50, s),
        fig(NAIVE_OVER_SYNCHRONISED, n / s),
    ];
    let (lo, hi) = Shift::of(synced, naive).bounds();
    figures.push(fig(SYNCHRONISED_OVER_NAIVE_CI_LOW, lo));
    figures.push(fig(SYNCHRONISED_OVER_NAIVE_CI_HIGH, hi));
    if let Some(f) = floor {
        figures.push(fig(SYNCHRONISED_P50_AT_BATCH_1, f));
    }
    // The same alternating passes from Python, at the batch chosen here: beside, never
    // deciding. Its naive timer runs on CUDA only.
    let request = python::request(
        TIMING_GPU_WORK.id,
        ctx.device,
        lab.config().threads,
        lab.config().seed,
        serde_json::json!({
            "model": setup.model.as_str(),
            "size": setup.size,
            "batch": setup.batch,
            "rounds": rounds,
            "warmup": if ctx.cuda() { 5 } else { 1 },
        }),
    );
    if let Some(t) = python::ask(ctx.python, ctx.control, &request, &mut notes)? {
        let mut from_python = vec![];
        let py_synced = t.arm("synchronised").map(|v| p(v, 50.0));
        let py_naive = t.arm("naive").map(|v| p(v, 50.0));
        if let Some(pn) = py_naive {
            from_python.extend(beside(&figures, "naive p50", pn, "ms"));
        }
        if let Some(ps) = py_synced {
            from_python.extend(beside(&figures, "synchronised p50", ps, "ms"));
        }
        if let (Some(pn), Some(ps)) = (py_naive, py_synced) {
            from_python.extend(beside(&figures, "naive / synchronised", pn / ps, "ratio"));
            notes.push(format!("From Python: the naive timer read {pn:.3} ms ({:.2}× Gradless's {n:.3} ms: each op also pays the interpreter), the synchronised one {ps:.3} ms ({:.2}× Gradless's).", pn / n, ps / s));
        } else if let Some(ps) = py_synced {
            notes.push(format!("From Python: a synchronised pass took {ps:.3} ms, {:.2}× Gradless's {s:.3} ms.", ps / s));
        }
        figures.extend(from_python);
    }
    Ok(Outcome::new(
        timing_gpu_work_rule(ctx.device, floor, naive, synced),
        if ctx.cuda() {
            format!("{measured_on}: batch {} here, {rounds} passes per timer", setup.batch)
        } else {
            format!("{measured_on}, {rounds} passes per timer")
        },
        ChartKind::Line,
    )
    .figures(figures)
    .series(vec![
        series(
            NAIVE_TIMER_MS,
            numbered(naive.len()),
            naive.clone(),
        ),
        series(
            SYNCHRONISED_TIMER_MS,
            numbered(synced.len()),
            synced.clone(),
        ),
    ])
    .notes(notes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use super::super::around;
    use protocol::Verdict;

    #[test]
    fn timing_gpu_work_is_not_applicable_on_a_synchronous_cpu_and_decided_on_cuda() {
        use DeviceKind::*;
        // CPU: the timers agree → not applicable; they disagree → refuted, never confirmed.
        assert_eq!(
            timing_gpu_work_rule(Cpu, None, &around(10.0), &around(10.2)).verdict,
            Verdict::NotApplicable
        );
        assert_eq!(
            timing_gpu_work_rule(Cpu, None, &around(1.0), &around(10.0)).verdict,
            Verdict::Refuted
        );
        // CUDA, GPU-bound: a naive timer reading launches only → confirmed.
        assert_eq!(
            timing_gpu_work_rule(Cuda, Some(0.5), &around(0.4), &around(8.0)).verdict,
            Verdict::Confirmed
        );
        // CUDA, GPU-bound, but the pass synchronises inside → refuted.
        assert_eq!(
            timing_gpu_work_rule(Cuda, Some(0.5), &around(7.9), &around(8.0)).verdict,
            Verdict::Refuted
        );
        // CUDA, a ratio near 2 within wide noise → inconclusive, with what would decide it.
        let wide = |x: f64| -> Vec<f64> { (0..20).map(|i| x * (0.6 + (i % 7) as f64 * 0.15)).collect() };
        let d = timing_gpu_work_rule(Cuda, Some(0.5), &wide(4.0), &wide(8.4));
        assert_eq!(d.verdict, Verdict::Inconclusive, "{}", d.reason);
        assert!(d.reason.contains("more iterations"), "{}", d.reason);
        // CUDA, launch-bound → not applicable, whatever the timers say.
        assert_eq!(
            timing_gpu_work_rule(Cuda, Some(0.5), &around(0.4), &around(1.0)).verdict,
            Verdict::NotApplicable
        );
    }
}
