//! The compiled-model lessons: `torch.compile` ahead of time, as a C++ server runs it
//! (`torch.export`, then AOTInductor's `.pt2` package, loaded into this process through
//! `crate::torch_ext::AotiPackage`), against the eager model in the same run.
//!
//! - this module: what the cards share (the package of a card's model, the one per-pass
//!   memory reading of a call, the plan's words) and the two cards about cost:
//!   [`COMPILED_FIRST_CALL`] (what the first call waits for) and [`COMPILED_BATCH`] (per
//!   pass, at batch 1 and at a large batch: time and peak memory).
//! - [`shapes`]: a batch outside the range the package was exported for.
//! - [`outputs`]: the compiled output against eager's ([`outputs::COMPILED_OUTPUTS`]) and
//!   the settings inside a package ([`outputs::COMPILED_SETTINGS`]).
//!
//! Every card compiles with this server's Python (`--python`); without one it says so and
//! grades nothing. Packages are cached on disk (`crate::lab::compiled`), so the cards share
//! one dynamic package per model, input size and thread count: only the first card a
//! server runs pays the compile, and it reports that cost.

pub mod outputs;
pub mod shapes;

use std::path::PathBuf;
use std::time::Instant;

use protocol::{ChartKind, GradMode, ModelId, RunFailure, RunSpec, FailureKind};

use super::kit::{fig, interval_figures, mib, series, time_passes, Ctx, Decision, Outcome, Setup, Shift};
use super::python;
use super::{Card, Needs, Said};
use crate::lab::compiled::{prepare, Compiled, Job};
use crate::lab::{forward, Lab};
use crate::torch_call::{failure, synchronize, torch_failure};

/// The models a package can be compiled from: the built-in forward models, whose PyTorch
/// definitions the compile script has, and team models whose sidecar names theirs.
fn compilable(model: ModelId) -> bool {
    match model {
        ModelId::TinyMlp | ModelId::Resnet18 | ModelId::Resnet50 | ModelId::MobilenetV2 | ModelId::Transformer => true,
        // A team model whose sidecar names its Python definition.
        ModelId::Team(m) => m.sidecar.source.is_some(),
        ModelId::Decoder(_) | ModelId::Named(_) => false,
    }
}

/// This server's Python, or the outcome that says a card cannot compile here.
fn python_or_absent(lab: &Lab) -> Result<PathBuf, Outcome> {
    lab.config().python.clone().ok_or_else(|| {
        Outcome::new(
            Decision::not_applicable("This server has no Python with PyTorch (--python, GRADLESS_PYTHON) to export and compile the model with, so nothing was compiled or measured."),
            String::new(),
            ChartKind::Bar,
        )
    })
}

/// Refuses a model the cards cannot compile, before anything runs.
fn check_model(model: ModelId) -> Result<(), RunFailure> {
    if compilable(model) {
        return Ok(());
    }
    Err(failure(
        FailureKind::Invalid,
        format!("{model}: the compiled-model cards compile a built-in forward model (tiny_mlp, resnet18, resnet50, mobilenet_v2, transformer) or a team model whose sidecar names its `source`"),
    ))
}

/// The package of the lab's cached model for `setup`, exported for `batches` (`(min, max)`,
/// a static batch when equal), compiled with `python` or taken from the cache.
fn package(lab: &mut Lab, ctx: &Ctx, setup: &Setup, python: &std::path::Path, batches: (u32, u32)) -> Result<(usize, Compiled), RunFailure> {
    check_model(setup.model)?;
    let i = setup.cached(lab, ctx)?;
    let threads = lab.config().threads;
    let job = Job { model: lab.model(i), spec: &setup.spec, device: ctx.device, threads, batches };
    let c = prepare(&job, Some(python), ctx.control)?;
    Ok((i, c))
}

/// What one call held, by the run's memory source: after one unmeasured call, the highest
/// allocation during the next above what was allocated before it, and what stays allocated
/// while its output lives.
fn call_memory(lab: &Lab, ctx: &Ctx, mut call: impl FnMut() -> Result<tch::Tensor, RunFailure>) -> Result<(u64, u64), RunFailure> {
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

/// What every compiled card's plan says of how the package is made.
fn how_compiled(ctx: &Ctx) -> String {
    format!(
        "The package: the model in eval(), fp32, exported by torch.export and compiled by AOTInductor (torch._inductor.aoti_compile_and_package) in this server's Python, {} kernels, then loaded into this process and called from libtorch (AOTIModelPackageLoader); one already built for this model, its weights, shapes, threads and PyTorch comes from the server's cache",
        if ctx.cuda() { "Triton" } else { "C++" }
    )
}

// ---------------------------------------------------------------------------------------
// The first call.

pub const COMPILED_FIRST_CALL: Card = Card {
    id: "compiled-first-call",
    title: "Compiling costs the first call hundreds of passes or more, paid once per shape range",
    asks: "What does the first call of a model compiled ahead of time wait for, against one eager pass?",
    labels: ["the eager model, called", "the model exported, compiled ahead of time, loaded, then called"],
    setup: first_call_setup,
    needs: Needs::Any,
    claim: "Before a compiled model answers its first call, torch.export traces it and Inductor generates and builds its kernels: a hundred eager passes or more. It is paid once for each model, shape range, device, thread count and PyTorch version; a package already built loads from disk in a small fraction of that, and the compiled passes repay the compile only after the number of passes reported.",
    statements: &[
        Said::run("Exporting and compiling the model took a Python process this long: the export, then Inductor's lowering and code generation, and the C++ compiler's build of the package's library.", &["Python process, in all", "export", "compile", "the C++ build, within the compile"]),
        Said::run("That one-time cost is reported as a number of this model's eager passes.", &["one-time cost / eager pass", "p50 eager pass"]),
        Said::run("Loading the built package into this process took the time reported, and its first call the time reported beside it.", &["load the package", "first compiled call"]),
        Said::run("The compiled and eager passes then alternate, and the number of passes after which compiling has paid for itself follows from their medians (0 when the compiled pass is not faster: it never pays).", &["p50 compiled pass", "p50 eager pass", "passes to break even"]),
        Said::torch("torch.compile's just-in-time path compiles in its first call and, by default, once more in the first call with a second batch size, with the batch made symbolic (automatic dynamic shapes), which later batch sizes reuse; switching the module between eval() and train() compiles again (its guards fail).", "test_compile.py::test_it_compiles_at_the_first_call_once_more_at_a_second_batch_and_at_a_mode_switch"),
    ],
    source: "https://pytorch.org/docs/stable/torch.compiler_aot_inductor.html",
    pitfall: "model.eval()\nwith torch.no_grad():\n    y = model(x)",
    fix: "ep = torch.export.export(model.eval(), (x,), dynamic_shapes=({0: Dim(\"batch\", min=1, max=64)},))\npath = torch._inductor.aoti_compile_and_package(ep)\nrunner = torch._inductor.aoti_load_package(path)\nwith torch.no_grad():\n    y = runner(x)",
    threshold: "confirmed when the one-time cost (the Python process that exports and compiles, plus loading the package) is at least 100 of this run's eager passes (their median); refuted when it is under 10; inconclusive between. A package taken from the server's cache reports the export and compile measured when it was built (said in the reason), and its load measured now. The passes alternate with the eager model's on the same input (5 of each on a CPU beyond one untimed, 20 on a GPU). Where the server has a Python, torch.compile's just-in-time path is timed from it beside (figures \"Python: torch.compile, …\"): they do not decide the verdict",
    question: super::value("ResNet-18 at batch 8: the one-time cost of compiling it ahead of time (export, Inductor, the kernels' build, loading the package) as a number of its eager passes?", "one-time cost / eager pass", "ratio", protocol::Ask::LogScale { min: 1.0, max: 1e7, within: 3.0 }),
    experiment: first_call,
};

/// The model and batch compiled-first-call runs, and its alternating passes of each.
fn first_call_plan(ctx: &Ctx) -> (Setup, usize) {
    (Setup::new(ctx, ModelId::Resnet18, (8, 8), GradMode::NoGrad), if ctx.cuda() { 20 } else { 5 })
}

fn first_call_line(setup: &Setup, rounds: usize) -> String {
    format!("{}, eval(), torch.no_grad(), fp32, a package for batches {}..={}, {rounds} passes of each, alternating", setup.describe(), protocol::compiled_batch_range(setup.batch).0, protocol::compiled_batch_range(setup.batch).1)
}

fn first_call_setup(ctx: &Ctx) -> Vec<String> {
    let (setup, rounds) = first_call_plan(ctx);
    vec![
        first_call_line(&setup, rounds),
        how_compiled(ctx),
        "Timed: the export and the compile (in the Python process), the whole process with the interpreter's start and imports, loading the package, its first call, then the eager and the compiled passes alternating".into(),
        "Where this server has a Python with PyTorch, torch.compile's just-in-time path is timed from it beside: its first call (Inductor's on-disk graph cache off), its passes against eager's, and its first call at two more batches".into(),
    ]
}

fn first_call(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let interpreter = match python_or_absent(lab) {
        Ok(p) => p,
        Err(absent) => return Ok(absent),
    };
    let (setup, rounds) = first_call_plan(ctx);
    let (i, c) = package(lab, ctx, &setup, &interpreter, protocol::compiled_batch_range(setup.batch))?;
    let model = lab.model(i);
    let input = setup.input(model, ctx)?;
    let spec: &RunSpec = &setup.spec;
    synchronize(ctx.device)?;
    let start = Instant::now();
    drop(c.forward(&input, spec, ctx.device)?);
    synchronize(ctx.device)?;
    let first_ms = start.elapsed().as_secs_f64() * 1000.0;
    // One untimed pass of each, then the two alternate.
    drop(forward(model, &input, spec, ctx.device)?);
    let times = time_passes(ctx, rounds, 2, |v, _| match v {
        0 => forward(model, &input, spec, ctx.device),
        _ => c.forward(&input, spec, ctx.device),
    })?;
    let shift = Shift::of(&times[0], &times[1]);
    let (eager, compiled) = (shift.slow_p50, shift.fast_p50);
    let one_time = c.subprocess_ms + c.load_ms;
    let passes = one_time / eager;
    let break_even = if eager > compiled { one_time / (eager - compiled) } else { 0.0 };
    let figures = vec![
        fig("export", c.export_ms, "ms"),
        fig("compile", c.compile_ms, "ms"),
        fig("the C++ build, within the compile", c.build_ms, "ms"),
        fig("Python process, in all", c.subprocess_ms, "ms"),
        fig("load the package", c.load_ms, "ms"),
        fig("first compiled call", first_ms, "ms"),
        fig("p50 eager pass", eager, "ms"),
        fig("p50 compiled pass", compiled, "ms"),
        fig("eager / compiled, 95% interval low", shift.bounds().0, "ratio"),
        fig("eager / compiled, 95% interval high", shift.bounds().1, "ratio"),
        fig("one-time cost / eager pass", passes, "ratio"),
        fig("passes to break even", break_even.round(), "count"),
        fig("package from the cache", if c.cached { 1.0 } else { 0.0 }, "bool"),
        fig("package size", c.package_bytes as f64, "bytes"),
    ];
    let whence = if c.cached {
        "The package came from the server's cache: its export and compile are the times measured when it was built here; its load is this run's."
    } else {
        "The package was compiled for this run."
    };
    let text = format!(
        "Export {:.0} ms and compile {:.0} ms ({:.0} ms of it the C++ build) in a Python process of {:.0} ms, load {:.1} ms: {:.0} ms before the first call, {passes:.0} eager passes of {eager:.3} ms. {whence} Eager / compiled per pass: {}; {}.",
        c.export_ms,
        c.compile_ms,
        c.build_ms,
        c.subprocess_ms,
        c.load_ms,
        one_time,
        shift.describe(),
        if break_even > 0.0 { format!("compiling pays for itself after {break_even:.0} passes") } else { "the compiled pass is not faster, so compiling never pays for itself here".into() }
    );
    let decision = if passes >= 100.0 {
        Decision::rule(true, text, "")
    } else if passes < 10.0 {
        Decision::rule(false, "", text)
    } else {
        Decision::inconclusive(format!("{text} Between 10 and 100 passes: neither the claim nor its opposite."))
    };
    // torch.compile's just-in-time path, from this server's Python, beside: the first call
    // compiles in the call itself, and a new batch compiles again. It never decides.
    let mut figures = figures;
    let mut notes = vec![];
    let request = python::request(
        COMPILED_FIRST_CALL.id,
        ctx.device,
        lab.config().threads,
        lab.config().seed,
        serde_json::json!({"model": setup.model.as_str(), "size": setup.size, "batch": setup.batch, "iters": rounds}),
    );
    if let Some(t) = python::ask(ctx.python, ctx.control, &request, &mut notes)? {
        let one = |arm: &str| t.arm(arm).and_then(|s| s.first().copied());
        if let Some(ms) = one("torch.compile: first call") {
            figures.push(fig(&format!("{}torch.compile, first call", python::PYTHON), ms, "ms"));
        }
        for b in [setup.batch + 1, setup.batch + 2] {
            if let Some(ms) = one(&format!("torch.compile: first call at batch {b}")) {
                figures.push(fig(&format!("{}torch.compile, first call at batch {b}", python::PYTHON), ms, "ms"));
            }
        }
        if let (Some(e), Some(j)) = (t.arm("eager: pass"), t.arm("torch.compile: pass")) {
            figures.push(fig(&format!("{}eager p50 pass", python::PYTHON), super::kit::p(e, 50.0), "ms"));
            figures.push(fig(&format!("{}torch.compile p50 pass", python::PYTHON), super::kit::p(j, 50.0), "ms"));
        }
    }
    notes.insert(0, format!(
        "Package {} ({} bytes), PyTorch {}, built for {} thread(s) and batches {}..={}.",
        c.file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        c.package_bytes,
        c.torch_version,
        c.threads,
        c.batch_min,
        c.batch_max
    ));
    Ok(Outcome::new(decision, first_call_line(&setup, rounds), ChartKind::Bar)
        .figures(figures)
        .series(vec![series(
            "milliseconds",
            "ms",
            vec!["Python: export + Inductor".into(), "the C++ build".into(), "load".into(), "first call".into(), "eager pass (p50)".into(), "compiled pass (p50)".into()],
            vec![c.subprocess_ms - c.build_ms, c.build_ms, c.load_ms, first_ms, eager, compiled],
        )])
        .notes(notes))
}

// ---------------------------------------------------------------------------------------
// Batch 1 and a large batch.

/// The batches compiled-batch compares at.
const BATCHES: [u32; 2] = [1, 32];

pub const COMPILED_BATCH: Card = Card {
    id: "compiled-batch",
    title: "Compiled, a large batch runs faster in less memory; batch 1 is the device's answer",
    asks: "How does a model compiled ahead of time compare with the eager model per pass, at batch 1 and at batch 32: time and peak memory?",
    labels: ["the eager model", "the same model compiled ahead of time (AOTInductor)"],
    setup: batch_setup,
    needs: Needs::Any,
    claim: "At batch 32 the compiled pass is faster than the eager one and its peak memory above the baseline is lower: Inductor fuses the elementwise work around the convolutions and matrix products (BatchNorm, ReLU, the residual adds) into fewer kernels that keep fewer intermediate tensors, and plans its buffers so later ones reuse earlier ones. At batch 1 the gain depends on the device: the figures say what this one does.",
    statements: &[
        Said::run("At batch 32 the compiled pass was faster than the eager one: the 95% interval of eager / compiled lies above 1.", &["batch 32: p50 eager", "batch 32: p50 compiled", "batch 32: eager / compiled, 95% interval low", "batch 32: eager / compiled, 95% interval high"]),
        Said::run("Its peak memory above the baseline was lower than the eager pass's.", &["batch 32: peak above baseline, eager", "batch 32: peak above baseline, compiled"]),
        Said::run("At batch 1 the two p50s and their interval are this device's answer.", &["batch 1: p50 eager", "batch 1: p50 compiled"]),
        Said::run("Both ran the same exported package, compiled once for batches 1 to 64.", &["package batch range, max"]),
    ],
    source: "https://pytorch.org/docs/stable/torch.compiler_aot_inductor.html",
    pitfall: "with torch.no_grad():\n    y = model(x)",
    fix: "runner = torch._inductor.aoti_load_package(path)\nwith torch.no_grad():\n    y = runner(x)",
    threshold: "At batch 32: confirmed when the 95% bootstrap interval of the p50 ratio eager / compiled lies wholly above 1 and the compiled pass's peak above the baseline is lower than eager's beyond 1%; refuted when that interval lies wholly below 1 or the compiled peak is not lower; inconclusive otherwise. Batch 1 is reported, not judged. The passes alternate on the same input, one untimed of each first (12 of each on a CPU, 30 on a GPU); each peak is the highest allocation during one call above what was allocated before it, by the run's memory source",
    question: super::ratio("ResNet-18 at batch 1: the p50 of the compiled pass as a multiple of the eager pass's?", "batch 1: p50 compiled", "batch 1: p50 eager", super::SAME_TIME),
    experiment: batch,
};

fn batch_plan(ctx: &Ctx) -> (ModelId, usize) {
    (ctx.model(ModelId::Resnet18), if ctx.cuda() { 30 } else { 12 })
}

fn batch_line(ctx: &Ctx) -> String {
    let (model, rounds) = batch_plan(ctx);
    let size = Setup::with_batch(ctx, model, 1, GradMode::NoGrad).size;
    let [a, b] = BATCHES;
    format!("{}, batches {a} and {b}, {}, eval(), torch.no_grad(), fp32, {rounds} passes of each, alternating", model.display_name(), model.describe_sample(size))
}

fn batch_setup(ctx: &Ctx) -> Vec<String> {
    vec![
        batch_line(ctx),
        how_compiled(ctx),
        "Timed: the eager and the compiled pass alternating at each batch; also read: each one's peak memory above what was allocated before the call".into(),
    ]
}

fn batch(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let python = match python_or_absent(lab) {
        Ok(p) => p,
        Err(absent) => return Ok(absent),
    };
    let (model_id, rounds) = batch_plan(ctx);
    let range = protocol::compiled_batch_range(BATCHES[1]);
    let mut figures = vec![fig("package batch range, max", range.1 as f64, "count")];
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
            fig(&format!("batch {b}: p50 eager"), shift.slow_p50, "ms"),
            fig(&format!("batch {b}: p50 compiled"), shift.fast_p50, "ms"),
            fig(&format!("batch {b}: eager / compiled, 95% interval low"), shift.bounds().0, "ratio"),
            fig(&format!("batch {b}: eager / compiled, 95% interval high"), shift.bounds().1, "ratio"),
            fig(&format!("batch {b}: peak above baseline, eager"), eager_peak as f64, "bytes"),
            fig(&format!("batch {b}: peak above baseline, compiled"), compiled_peak as f64, "bytes"),
        ]);
        if b == BATCHES[0] {
            figures.extend(interval_figures(&COMPILED_BATCH.question, &Shift::of(&times[1], &times[0])));
        }
        labels.extend([format!("eager, batch {b}"), format!("compiled, batch {b}")]);
        p50s.extend([shift.slow_p50, shift.fast_p50]);
        let (_, memory) = super::kit::bytes_compared(compiled_peak as f64, eager_peak as f64);
        texts.push(format!("Batch {b}: eager / compiled {}; peak above baseline, compiled against eager: {memory}.", shift.describe()));
        if b == BATCHES[1] {
            at_large = Some((shift, compiled_peak, eager_peak));
        }
    }
    let text = texts.join(" ");
    let (shift, compiled_peak, eager_peak) = at_large.expect("the large batch was measured");
    let lower = super::kit::bytes_compared(compiled_peak as f64, eager_peak as f64).0 == protocol::Choice::Lower;
    let decision = match (Decision::latency(&shift, 1.0, 1.0, "", "").verdict, lower) {
        (protocol::Verdict::Confirmed, true) => Decision::rule(true, text, ""),
        (protocol::Verdict::Refuted, _) | (_, false) => Decision::rule(false, "", text),
        _ => Decision::inconclusive(format!("{text} At batch 32 the time ratio's interval straddles 1: {}.", shift.more(&[1.0]))),
    };
    Ok(Outcome::new(decision, batch_line(ctx), ChartKind::Bar)
        .figures(figures.clone())
        .series(vec![
            series("p50 latency (ms)", "ms", labels.clone(), p50s),
            series(
                "peak above baseline (MiB)",
                "MiB",
                labels,
                BATCHES
                    .iter()
                    .flat_map(|b| {
                        let get = |n: &str| figures.iter().find(|f| f.name == n).map_or(0.0, |f| mib(f.value as u64));
                        [get(&format!("batch {b}: peak above baseline, eager")), get(&format!("batch {b}: peak above baseline, compiled"))]
                    })
                    .collect(),
            ),
        ]))
}
