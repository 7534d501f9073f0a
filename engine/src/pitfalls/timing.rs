//! Timing lessons: the first passes are not representative, and CUDA runs asynchronously
//! (a timer must synchronise; a sync per batch stalls the pipeline). Every pass here is
//! timed by the kit's one loop, [`time_passes`].

use std::sync::atomic::{AtomicU32, Ordering};

use protocol::{ChartKind, DeviceKind, GradMode, ModelId, RunFailure, RunSpec};
use tch::{Kind, Tensor};

use super::kit::{
    describe, element_cap, fig, numbered, p, series, time_passes, Ctx, Decision, Outcome, Setup, Shift,
};
use super::python::{self, beside};
use super::{Card, Needs, Said};
use crate::input::Input;
use crate::lab::{forward, Lab};
use crate::models::Model;
use crate::torch_call::{catch_torch, tch_device};

pub const WARM_UP: Card = Card {
    id: "warm-up",
    title: "The first iterations are not representative",
    asks: "How does the time of a freshly built model's first forward pass compare with the passes after it?",
    labels: ["time one call", "three calls first, then time many"],
    setup: warm_up_setup,
    needs: Needs::Any,
    claim: "The first pass on a new input shape pays one-time costs the passes after it do not: on a CPU, oneDNN creating a primitive for each convolution shape; on a GPU, cuDNN choosing and building a plan for each convolution shape, kernels loaded on their first launch, and the caching allocator's first cudaMalloc calls. Timing it skews the statistics. Gradless times these passes from Rust through libtorch, with no Python interpreter per op; a team's Python code adds the interpreter's cost to every pass, first or not, and where this server has a Python the same passes timed from it are shown beside.",
    statements: &[
        Said::run("The first pass on a batch size this process had not run took more than 1.5× the median of the steady passes (iterations 6–15), beyond their spread.", &["first iteration", "median of iterations 6-15", "first / steady"]),
        Said::torch("On a CPU, PyTorch runs these fp32 convolutions through oneDNN.", "test_runtime.py::test_cpu_convolutions_run_through_onednn"),
        Said::torch("oneDNN creates a convolution primitive on the first call with each new input shape, and takes it from its cache on later calls with that shape.", "test_runtime.py::test_onednn_creates_a_convolution_primitive_per_new_shape"),
        Said::source("On a GPU, cuDNN chooses and builds an execution plan for each new convolution configuration (a new batch size is one) on its first call, from its heuristics, or by timing the candidates under torch.backends.cudnn.benchmark (off here, as by default); later calls reuse the cached plan.", "aten/src/ATen/native/cudnn/Conv_v8.cpp", "run_single_conv", "more-cards"),
        Said::source("CUDA loads each kernel on its first launch: PyTorch's CUDA start-up sets CUDA_MODULE_LOADING=LAZY unless it is already set.", "aten/src/ATen/cuda/detail/CUDAHooks.cpp", "CUDAHooks::init", "more-cards"),
        Said::source("On a GPU the caching allocator, emptied before every card, gets the first pass's blocks from the driver with cudaMalloc; later passes reuse them from its pool.", "c10/cuda/CUDACachingAllocator.cpp", "alloc_block", "more-cards"),
    ],
    source: "https://pytorch.org/tutorials/recipes/recipes/benchmark.html",
    pitfall: "t0 = time.perf_counter(); model(x)  # on a GPU, then torch.cuda.synchronize()\nprint(time.perf_counter() - t0)",
    fix: "for _ in range(3): model(x)  # untimed calls, then time many runs",
    threshold: "confirmed when the first iteration of a freshly built model on an input shape this process has not run takes more than 1.5× the median of iterations 6–15 even at the steady passes' own spread (first / p90 of iterations 6–15 above 1.5); refuted when it stays below 1.5× even at their spread (first / p10 below 1.5); inconclusive in between, where the machine's noise cannot tell. The device is synchronised after the model and input are built, so their kernels never count as the first iteration. Gradless times libtorch from Rust: no pass pays Python's per-op cost, which in Python would add the same to every pass, first or not. Where the server has a Python, the same passes are also timed from it (figures \"Python: …\", and \"Python / Gradless: …\", Python's time over Gradless's), after one untimed pass at another batch so that its new process's own start-up is not counted: what a team's code sees; they do not decide the verdict. Regime: any. On a GPU (ResNet-18, batch 33–96, 224²) the first pass on a new shape pays for cuDNN's plan for each convolution configuration, any kernel not launched before, and the allocator's cudaMalloc of its blocks, not for the CUDA context or the cuBLAS handles and workspaces, which the worker made at start. On a CPU (96², batch 5–68) it pays for oneDNN's primitives, a few milliseconds against a pass of tens, which a busy machine's noise can hide",
    question: super::ratio("ResNet-18, built fresh, on a batch size this process has not run: the first iteration's time as a multiple of the median of iterations 6–15? (A judgment of the one-time costs of a new shape on this device against a steady pass.)", "first iteration", "median of iterations 6-15", super::Ask::LogScale { min: 0.1, max: 1000.0, within: 2.0 }),
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
        "A: the first pass's time; B: the median of passes 6 to 15".into(),
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
        fig("first iteration", times[0], "ms"),
        fig("median of iterations 6-15", median, "ms"),
        fig("first / steady", ratio, "ratio"),
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
        "latency (ms)",
        "ms",
        numbered(times.len()),
        times,
    )]))
}

pub const SYNC_TIMING: Card = Card {
    id: "sync-timing",
    title: "CUDA is asynchronous: synchronise before you stop the clock",
    asks: "What does a timer around model(x) read on a GPU, with and without torch.cuda.synchronize() before it stops?",
    labels: ["clock stopped right after model(x)", "torch.cuda.synchronize() before the clock stops"],
    setup: sync_timing_setup,
    needs: Needs::Cuda("On a CPU each op has finished when model(x) returns, so here the two timers measure the same thing."),
    claim: "On a GPU, model(x) returns once its kernels are queued: a timer stopped right after it measures the CPU issuing the ops, not the GPU's work, and reads a fraction of the true time where that work dominates. Gradless issues the ops from Rust through libtorch, with no Python interpreter per op, so its naive timer reads PyTorch's C++ dispatch and the launches alone; from Python, as a team's code runs, each op also pays the interpreter, and where this server has a Python its two timers are shown beside.",
    statements: &[
        Said::torch("ResNet-18's forward pass calls 68 operators (20 convolutions, 20 batch norms, 17 ReLUs, 8 residual additions, two poolings, one linear layer), which the CPU issues one after another.", "test_runtime.py::test_resnet18_forward_calls_68_operators"),
        Said::run("A timer stopped right after model(x) returned read less than half the synchronised time: on a GPU the pass returns once its kernels are queued, before they have run.", &["naive p50", "synchronised p50", "naive / synchronised", "synchronised / naive, 95% interval low", "synchronised / naive, 95% interval high"]),
        Said::source("torch.cuda.synchronize() waits until every kernel queued on the device has finished (cudaDeviceSynchronize).", "c10/cuda/CUDAFunctions.cpp", "device_synchronize", "cards"),
        Said::source("Reading a value back to the host waits too: .item() copies it and synchronises the stream.", "aten/src/ATen/native/cuda/CUDAScalar.cu", "_local_scalar_dense_cuda", "cards"),
        Said::run("The batch was doubled until a synchronised pass took at least 5× a pass at batch 1, so the GPU's work, not the launches, set the synchronised time.", &["synchronised p50 at batch 1", "synchronised p50"]),
    ],
    source: "https://pytorch.org/docs/stable/notes/cuda.html#asynchronous-execution",
    pitfall: "t0 = time.time(); y = model(x); dt = time.time() - t0",
    fix: "t0 = time.time(); y = model(x); torch.cuda.synchronize(); dt = time.time() - t0",
    threshold: "CUDA: over 20 alternating passes per timer, confirmed when the 95% bootstrap interval of synchronised p50 / naive p50 lies wholly above 2 (the naive timer reads less than half), refuted when it lies wholly below 2, inconclusive when it contains 2. Regime: the GPU's work must dominate the launches, or there is nothing for a naive timer to miss. It is checked without the naive timer: a synchronised pass at the chosen batch must take at least 5× a synchronised pass at batch 1 (which cannot be shorter than its launches); the batch doubles until it does (up to 1024, below 2³¹ elements per tensor), and if it never does the verdict is not_applicable (launch-bound). Gradless issues the ops from Rust through libtorch: the naive timer reads PyTorch's C++ dispatch and the kernel launches alone. From Python each op also pays the interpreter, so a naive Python timer reads more, yet still not the GPU's work: where the server has a Python, the same alternating passes are also timed from it at the same batch (figures \"Python: …\", and \"Python / Gradless: …\", Python's time over Gradless's; the naive timer only on CUDA), what a team's code sees; they do not decide the verdict. On a CPU ops are synchronous: not_applicable, after checking that both timers agree within 25%",
    question: super::ratio("ResNet-18 on a GPU, at a batch where a synchronised pass takes at least 5× one at batch 1: the p50 read by the timer stopped right after model(x) (A), as a multiple of the p50 read with torch.cuda.synchronize() before the clock stops (B)?", "naive p50", "synchronised p50", super::Ask::LogScale { min: 0.001, max: 10.0, within: 2.0 }),
    experiment: sync_timing,
};

/// How many times the batch-1 pass the chosen batch's pass must take (see the threshold).
const GPU_BOUND: f64 = 5.0;

/// The sync-timing rule. `launch_floor_ms`: the synchronised p50 at batch 1 (CUDA only).
pub fn sync_timing_rule(
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

/// The passes per timer sync-timing alternates.
const SYNC_ROUNDS: usize = 20;

/// What sync-timing starts from, the largest batch it may double to on a GPU, and the line
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

fn sync_timing_setup(ctx: &Ctx) -> Vec<String> {
    let (s, _, line) = sync_plan(ctx);
    vec![
        line,
        format!("A: the clock stops right after model(x) returns; B: the device is synchronised (torch.cuda.synchronize() on a GPU) before the clock stops. {SYNC_ROUNDS} passes per timer, alternating, on the same model and input (eval(), torch.no_grad(), fp32)"),
        from_rust(s.model),
        python::SETUP.into(),
    ]
}

/// What issuing a pass costs the CPU here: Gradless calls libtorch from Rust.
pub(super) fn from_rust(model: ModelId) -> String {
    let ops = match model {
        ModelId::Resnet18 => "; ResNet-18's forward pass is about 70 ops",
        _ => "",
    };
    format!("Issued from Rust through libtorch: each op costs the CPU PyTorch's C++ dispatch and its kernel launches, with no Python interpreter in between{ops}")
}

fn sync_timing(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
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
        fig("naive p50", n, "ms"),
        fig("synchronised p50", s, "ms"),
        fig("naive / synchronised", n / s, "ratio"),
    ];
    let (lo, hi) = Shift::of(synced, naive).bounds();
    figures.push(fig("synchronised / naive, 95% interval low", lo, "ratio"));
    figures.push(fig("synchronised / naive, 95% interval high", hi, "ratio"));
    if let Some(f) = floor {
        figures.push(fig("synchronised p50 at batch 1", f, "ms"));
    }
    // The same alternating passes from Python, at the batch chosen here: beside, never
    // deciding. Its naive timer runs on CUDA only.
    let request = python::request(
        SYNC_TIMING.id,
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
        sync_timing_rule(ctx.device, floor, naive, synced),
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
            "naive timer (ms)",
            "ms",
            numbered(naive.len()),
            naive.clone(),
        ),
        series(
            "synchronised timer (ms)",
            "ms",
            numbered(synced.len()),
            synced.clone(),
        ),
    ])
    .notes(notes))
}

pub const ITEM_SYNC: Card = Card {
    id: "item-sync",
    title: ".item() every batch stalls the GPU pipeline",
    asks: "What does reading loss.item() on every batch do to a validation loop's time on a GPU?",
    labels: ["total += loss.item() on every batch", "total += loss.detach() on the device, one .item() at the end"],
    setup: item_sync_setup,
    needs: Needs::Cuda("On a CPU the loss already sits in host memory, so .item() reads it without involving another device."),
    claim: "On a GPU, .item() on every batch makes the CPU wait until the GPU has finished that batch before it queues the next, so the GPU sits idle while the CPU queues each batch; accumulating on the device and reading once at the end lets the CPU queue batch i+1 while the GPU runs batch i, which is faster where the GPU has work to overlap. Gradless queues each batch from Rust through libtorch, with no Python interpreter per op; from Python, as a team's code runs, the CPU's share of each batch is larger, and where this server has a Python the same loops timed from it are shown beside.",
    statements: &[
        Said::torch(".item() runs aten::_local_scalar_dense, which copies one element to the host.", "test_runtime.py::test_item_reads_the_value_through_local_scalar_dense"),
        Said::source("On a GPU that copy synchronises the stream: it returns only once every kernel queued before it has finished.", "aten/src/ATen/native/cuda/CUDAScalar.cu", "_local_scalar_dense_cuda", "more-cards"),
        Said::run("Without a read-back, a batch's forward pass returns before the GPU has run it: issuing its ops took less than the synchronised batch.", &["one batch: launches alone (naive p50)", "one batch: synchronised p50"]),
        Said::run("The loop reading .item() on every batch took longer than the loop accumulating on the device and reading once: each read stops the CPU from queueing the next batch while the GPU works.", &["loop with .item() per batch", "loop accumulating on device", "ratio", "ratio, 95% interval low", "ratio, 95% interval high"]),
    ],
    source: "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#avoid-unnecessary-cpu-gpu-synchronization",
    pitfall: "total += loss.item()  # every batch",
    fix: "total += loss.detach()  # on the device; total.item() once",
    threshold: "CUDA: over 15 alternating loops of 20 batches each, confirmed when the 95% bootstrap interval of the p50 ratio (.item() loop / accumulating loop) lies wholly above 1, refuted when it lies wholly below 1.05 (any cost under 5%), inconclusive otherwise. Regime: a sync per batch costs the overlap between the CPU queueing batch i+1 and the GPU computing batch i, which is largest when the two take similar time; if the GPU's work per batch is tiny there is nothing to overlap. The batch grows (×4, from 256 up to 16384) until a synchronised batch takes at least 2× its launches alone (the naive time); if it never does, not_applicable (launch-bound). Gradless queues each batch from Rust through libtorch, without Python's per-op cost: in Python the CPU's share of each batch is larger, and so is the overlap a per-batch sync throws away. Where the server has a Python, the same loops are also timed from it at the same batch (figures \"Python: …\", and \"Python / Gradless: …\", Python's time over Gradless's; a batch's launches alone only on CUDA), what a team's code sees; they do not decide the verdict. On a CPU there is no device to wait for: not_applicable, with both loop times reported",
    question: super::ratio("The Tiny MLP on a GPU, a loop of 20 batches, at a batch where a synchronised batch takes at least 2× its launches alone: the loop's p50 with .item() on every batch (A) as a multiple of its p50 accumulating on the device and reading once (B)?", "loop with .item() per batch", "loop accumulating on device", super::SAME_TIME),
    experiment: item_sync,
};

/// How many times its launches a synchronised batch must take (see the threshold).
const OVERLAP: f64 = 2.0;

/// The item-sync rule: `launch_ms`/`synced_ms` are one batch's naive and synchronised p50s
/// at the chosen batch; `item`/`acc` the loop times.
pub fn item_sync_rule(
    device: DeviceKind,
    launch_ms: f64,
    synced_ms: f64,
    item: &[f64],
    acc: &[f64],
) -> Decision {
    let shift = Shift::of(item, acc);
    let (i, a) = (shift.slow_p50, shift.fast_p50);
    if device == DeviceKind::Cpu {
        return Decision::not_applicable(format!("On a CPU, .item() has no device to wait for: {i:.3} vs {a:.3} ms ({}), only bookkeeping differs. The pitfall needs an asynchronous device such as a CUDA GPU.", shift.describe()));
    }
    if synced_ms < OVERLAP * launch_ms {
        return Decision::not_applicable(format!("Launch-bound: a synchronised batch took {synced_ms:.3} ms against {launch_ms:.3} ms of launches, at the largest batch tried; the GPU has too little work to overlap."));
    }
    Decision::latency(
        &shift,
        1.0,
        1.05,
        format!("The loop with .item() per batch took {i:.3} ms, accumulating on the device {a:.3} ms: {}.", shift.describe()),
        format!("No cost beyond noise here: {i:.3} vs {a:.3} ms, {}.", shift.describe()),
    )
}

/// The batches per loop, and the loops of each kind, item-sync times.
const LOOP_BATCHES: usize = 20;
const ITEM_ROUNDS: usize = 15;
/// The largest batch item-sync grows to on a GPU.
const ITEM_MAX_BATCH: u32 = 16384;

/// What item-sync starts from, and the line its report is measured on (on a GPU, the batch
/// range; the batch chosen follows it).
fn item_plan(ctx: &Ctx) -> (Setup, String) {
    let setup = Setup::new(ctx, ModelId::TinyMlp, (64, 256), GradMode::NoGrad);
    let line = if ctx.cuda() {
        describe(
            setup.model,
            format!("{} to {ITEM_MAX_BATCH} (×4 until a synchronised batch takes at least {OVERLAP}× the time of its launches alone)", setup.batch),
            setup.size,
        )
    } else {
        setup.describe()
    };
    (setup, line)
}

fn item_sync_setup(ctx: &Ctx) -> Vec<String> {
    let (s, line) = item_plan(ctx);
    let mut lines = vec![
        line,
        format!("A: a loop of {LOOP_BATCHES} batches adding each batch's mean output to a float on the host with .item(); B: the same loop adding it to a tensor on the device, read with .item() once at the end"),
        format!("{ITEM_ROUNDS} loops of each kind, alternating, each timed whole (eval(), torch.no_grad(), fp32); the {LOOP_BATCHES} inputs are on the device before the loop starts"),
        from_rust(s.model),
        python::SETUP.into(),
    ];
    lines.extend(super::memory::architecture(s.model, s.size));
    lines
}

fn item_sync(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let (mut setup, measured_on) = item_plan(ctx);
    let i = setup.cached(lab, ctx)?;
    let model = lab.model(i);
    // One batch's launches alone (naive) and with the device's work (synchronised).
    let batch_times = |setup: &Setup| -> Result<(f64, f64), RunFailure> {
        let x = setup.input(model, ctx)?;
        let t = time_passes(ctx, 5, 2, |variant, clock| {
            let out = forward(model, &x, &setup.spec, ctx.device)?;
            if variant == 0 {
                clock.stop();
            }
            Ok(out)
        })?;
        Ok((p(&t[0], 50.0), p(&t[1], 50.0)))
    };
    let (mut launch, mut synced) = batch_times(&setup)?;
    while ctx.cuda() && synced < OVERLAP * launch && setup.batch * 4 <= ITEM_MAX_BATCH {
        setup = Setup::with_batch(ctx, setup.model, setup.batch * 4, GradMode::NoGrad);
        (launch, synced) = batch_times(&setup)?;
    }
    let batches = (0..LOOP_BATCHES)
        .map(|_| setup.input(model, ctx))
        .collect::<Result<Vec<Input>, RunFailure>>()?;
    let device = tch_device(ctx.device);
    let spec: &RunSpec = &setup.spec;
    let run_loop = |per_batch_item: bool| -> Result<f64, RunFailure> {
        let mut host_total = 0.0;
        let mut device_total = catch_torch(|| Tensor::zeros([], (Kind::Float, device)))?;
        for x in &batches {
            let out = forward(model, x, spec, ctx.device)?;
            catch_torch(|| {
                let loss = out.mean(Kind::Float);
                if per_batch_item {
                    host_total += loss.double_value(&[]);
                } else {
                    device_total += loss;
                }
            })?;
        }
        catch_torch(|| host_total + device_total.double_value(&[]))
    };
    run_loop(true)?;
    run_loop(false)?;
    let rounds = ITEM_ROUNDS;
    let times = time_passes(ctx, rounds, 2, |variant, _| {
        run_loop(variant == 0).map(std::hint::black_box)
    })?;
    let (item, acc) = (&times[0], &times[1]);
    let shift = Shift::of(item, acc);
    let figures: Vec<protocol::Figure> = vec![
        fig("loop with .item() per batch", shift.slow_p50, "ms"),
        fig("loop accumulating on device", shift.fast_p50, "ms"),
        fig("ratio", shift.slow_p50 / shift.fast_p50, "ratio"),
        fig("ratio, 95% interval low", shift.bounds().0, "ratio"),
        fig("ratio, 95% interval high", shift.bounds().1, "ratio"),
        fig("one batch: launches alone (naive p50)", launch, "ms"),
        fig("one batch: synchronised p50", synced, "ms"),
    ]
    .into_iter()
    .chain(super::kit::interval_figures(&ITEM_SYNC.question, &shift))
    .collect();
    // The same loops from Python, at the batch chosen here: beside, never deciding.
    let mut notes = vec![];
    let request = python::request(
        ITEM_SYNC.id,
        ctx.device,
        lab.config().threads,
        lab.config().seed,
        serde_json::json!({
            "model": setup.model.as_str(),
            "size": setup.size,
            "batch": setup.batch,
            "rounds": rounds,
            "loop_batches": LOOP_BATCHES,
            "batch_rounds": 5,
        }),
    );
    let mut from_python = vec![];
    if let Some(t) = python::ask(ctx.python, ctx.control, &request, &mut notes)? {
        if let Some(naive) = t.arm("batch naive") {
            from_python.extend(beside(&figures, "one batch: launches alone (naive p50)", p(naive, 50.0), "ms"));
        }
        if let Some(one) = t.arm("batch synchronised") {
            from_python.extend(beside(&figures, "one batch: synchronised p50", p(one, 50.0), "ms"));
        }
        if let (Some(py_item), Some(py_acc)) = (t.arm("item"), t.arm("accumulate")) {
            let py = Shift::of(py_item, py_acc);
            from_python.extend(beside(&figures, "loop with .item() per batch", py.slow_p50, "ms"));
            from_python.extend(beside(&figures, "loop accumulating on device", py.fast_p50, "ms"));
            from_python.extend(beside(&figures, "ratio", py.slow_p50 / py.fast_p50, "ratio"));
            from_python.extend(beside(&figures, "ratio, 95% interval low", py.bounds().0, "ratio"));
            from_python.extend(beside(&figures, "ratio, 95% interval high", py.bounds().1, "ratio"));
            notes.push(format!(
                "From Python: the .item() loop took {:.3} ms, the accumulating loop {:.3} ms ({}); the accumulating loop took {:.2}× Gradless's.",
                py.slow_p50,
                py.fast_p50,
                py.describe(),
                py.fast_p50 / shift.fast_p50
            ));
        }
    }
    Ok(Outcome::new(
        item_sync_rule(ctx.device, launch, synced, item, acc),
        if ctx.cuda() {
            format!("{measured_on}: batch {} here, {LOOP_BATCHES} batches per loop, {rounds} loops of each kind (alternating)", setup.batch)
        } else {
            format!("{measured_on}, {LOOP_BATCHES} batches per loop, {rounds} loops of each kind (alternating)")
        },
        ChartKind::Bar,
    )
    .figures(figures.into_iter().chain(from_python).collect())
    .notes(notes)
    .series(vec![series(
        "20-batch loop, p50 (ms)",
        "ms",
        vec![
            ".item() per batch".into(),
            "accumulate, .item() once".into(),
        ],
        vec![shift.slow_p50, shift.fast_p50],
    )]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::Verdict;

    fn around(x: f64) -> Vec<f64> {
        (0..20).map(|i| x * (1.0 + (i % 5) as f64 * 0.01)).collect()
    }

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

    #[test]
    fn sync_timing_is_not_applicable_on_a_synchronous_cpu_and_decided_on_cuda() {
        use DeviceKind::*;
        // CPU: the timers agree → not applicable; they disagree → refuted, never confirmed.
        assert_eq!(
            sync_timing_rule(Cpu, None, &around(10.0), &around(10.2)).verdict,
            Verdict::NotApplicable
        );
        assert_eq!(
            sync_timing_rule(Cpu, None, &around(1.0), &around(10.0)).verdict,
            Verdict::Refuted
        );
        // CUDA, GPU-bound: a naive timer reading launches only → confirmed.
        assert_eq!(
            sync_timing_rule(Cuda, Some(0.5), &around(0.4), &around(8.0)).verdict,
            Verdict::Confirmed
        );
        // CUDA, GPU-bound, but the pass synchronises inside → refuted.
        assert_eq!(
            sync_timing_rule(Cuda, Some(0.5), &around(7.9), &around(8.0)).verdict,
            Verdict::Refuted
        );
        // CUDA, a ratio near 2 within wide noise → inconclusive, with what would decide it.
        let wide = |x: f64| -> Vec<f64> { (0..20).map(|i| x * (0.6 + (i % 7) as f64 * 0.15)).collect() };
        let d = sync_timing_rule(Cuda, Some(0.5), &wide(4.0), &wide(8.4));
        assert_eq!(d.verdict, Verdict::Inconclusive, "{}", d.reason);
        assert!(d.reason.contains("more iterations"), "{}", d.reason);
        // CUDA, launch-bound → not applicable, whatever the timers say.
        assert_eq!(
            sync_timing_rule(Cuda, Some(0.5), &around(0.4), &around(1.0)).verdict,
            Verdict::NotApplicable
        );
    }

    #[test]
    fn item_sync_is_not_applicable_on_a_cpu_and_noise_aware_on_cuda() {
        use DeviceKind::*;
        let (fast, slow) = (around(10.0), around(12.0));
        // CPU: not applicable even with a difference.
        assert_eq!(
            item_sync_rule(Cpu, 1.0, 1.0, &slow, &fast).verdict,
            Verdict::NotApplicable
        );
        // CUDA with work to overlap: a shift beyond noise confirms, none refutes.
        assert_eq!(
            item_sync_rule(Cuda, 0.1, 0.4, &slow, &fast).verdict,
            Verdict::Confirmed
        );
        assert_eq!(
            item_sync_rule(Cuda, 0.1, 0.4, &fast, &fast).verdict,
            Verdict::Refuted
        );
        // A difference within the noise (interleaved samples) does not confirm: it is
        // refuted where the interval rules out a 5% cost, inconclusive where it cannot.
        let jitter: Vec<f64> = (0..20)
            .map(|i| 10.0 + if i % 2 == 0 { 0.5 } else { -0.4 })
            .collect();
        let jitter2: Vec<f64> = (0..20)
            .map(|i| 10.0 + if i % 2 == 0 { -0.5 } else { 0.45 })
            .collect();
        assert_eq!(
            item_sync_rule(Cuda, 0.1, 0.4, &jitter, &jitter2).verdict,
            Verdict::Inconclusive
        );
        // CUDA, launch-bound → not applicable.
        assert_eq!(
            item_sync_rule(Cuda, 0.1, 0.15, &slow, &fast).verdict,
            Verdict::NotApplicable
        );
    }
}
