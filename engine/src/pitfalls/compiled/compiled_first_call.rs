//! The `compiled-first-call` card ([`COMPILED_FIRST_CALL`]): Compiling costs the first call hundreds of passes or more, paid once per shape range

use super::*;

// The figures this file's cards report, each defined once (see `kit::figure`).
pub const PYTHON_PROCESS_IN_ALL: FigureName = FigureName::new("Python process, in all", Unit::Ms);
pub const EXPORT: FigureName = FigureName::new("export", Unit::Ms);
pub const COMPILE: FigureName = FigureName::new("compile", Unit::Ms);
pub const ONE_TIME_COST_OVER_EAGER_PASS: FigureName = FigureName::new("one-time cost / eager pass", Unit::Ratio);
pub const LOAD_THE_PACKAGE: FigureName = FigureName::new("load the package", Unit::Ms);
pub const P50_COMPILED_PASS: FigureName = FigureName::new("p50 compiled pass", Unit::Ms);
pub const P50_EAGER_PASS: FigureName = FigureName::new("p50 eager pass", Unit::Ms);
pub const THE_C_BUILD_WITHIN_THE_COMPILE: FigureName = FigureName::new("the C++ build, within the compile", Unit::Ms);
pub const FIRST_COMPILED_CALL: FigureName = FigureName::new("first compiled call", Unit::Ms);
pub const EAGER_OVER_COMPILED_CI_LOW: FigureName = FigureName::new("eager / compiled, 95% interval low", Unit::Ratio);
pub const EAGER_OVER_COMPILED_CI_HIGH: FigureName = FigureName::new("eager / compiled, 95% interval high", Unit::Ratio);
pub const PASSES_TO_BREAK_EVEN: FigureName = FigureName::new("passes to break even", Unit::Count);
pub const PACKAGE_FROM_THE_CACHE: FigureName = FigureName::new("package from the cache", Unit::Bool);
pub const PACKAGE_SIZE: FigureName = FigureName::new("package size", Unit::Bytes);
pub const EACH_TORCH_COMPILE_FIRST_CALL: FigureName = FigureName::new("{}torch.compile, first call", Unit::Ms);
pub const EACH_TORCH_COMPILE_FIRST_CALL_AT_BATCH: FigureName = FigureName::new("{}torch.compile, first call at batch {}", Unit::Ms);
pub const EACH_EAGER_P50_PASS: FigureName = FigureName::new("{}eager p50 pass", Unit::Ms);
pub const EACH_TORCH_COMPILE_P50_PASS: FigureName = FigureName::new("{}torch.compile p50 pass", Unit::Ms);
pub const MILLISECONDS: FigureName = FigureName::new("milliseconds", Unit::Ms);

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
        Said::run("Exporting and compiling the model took a Python process this long: the export, then Inductor's lowering and code generation, and the C++ compiler's build of the package's library.", &[PYTHON_PROCESS_IN_ALL, EXPORT, COMPILE, THE_C_BUILD_WITHIN_THE_COMPILE]),
        Said::run("That one-time cost is reported as a number of this model's eager passes.", &[ONE_TIME_COST_OVER_EAGER_PASS, P50_EAGER_PASS]),
        Said::run("Loading the built package into this process took the time reported, and its first call the time reported beside it.", &[LOAD_THE_PACKAGE, FIRST_COMPILED_CALL]),
        Said::run("The compiled and eager passes then alternate, and the number of passes after which compiling has paid for itself follows from their medians (0 when the compiled pass is not faster: it never pays).", &[P50_COMPILED_PASS, P50_EAGER_PASS, PASSES_TO_BREAK_EVEN]),
        Said::torch("torch.compile's just-in-time path compiles in its first call and, by default, once more in the first call with a second batch size, with the batch made symbolic (automatic dynamic shapes), which later batch sizes reuse; switching the module between eval() and train() compiles again (its guards fail).", "test_compile.py::test_it_compiles_at_the_first_call_once_more_at_a_second_batch_and_at_a_mode_switch"),
    ],
    source: "https://pytorch.org/docs/stable/torch.compiler_aot_inductor.html",
    pitfall: "model.eval()\nwith torch.no_grad():\n    y = model(x)",
    fix: "ep = torch.export.export(model.eval(), (x,), dynamic_shapes=({0: Dim(\"batch\", min=1, max=64)},))\npath = torch._inductor.aoti_compile_and_package(ep)\nrunner = torch._inductor.aoti_load_package(path)\nwith torch.no_grad():\n    y = runner(x)",
    threshold: "confirmed when the one-time cost (the Python process that exports and compiles, plus loading the package) is at least 100 of this run's eager passes (their median); refuted when it is under 10; inconclusive between. A package taken from the server's cache reports the export and compile measured when it was built (said in the reason), and its load measured now. The passes alternate with the eager model's on the same input (5 of each on a CPU beyond one untimed, 20 on a GPU). Where the server has a Python, torch.compile's just-in-time path is timed from it beside (figures \"Python: torch.compile, …\"): they do not decide the verdict",
    question: super::super::value("ResNet-18 at batch 8: the one-time cost of compiling it ahead of time (export, Inductor, the kernels' build, loading the package) as a number of its eager passes?", ONE_TIME_COST_OVER_EAGER_PASS, protocol::Ask::LogScale { min: 1.0, max: 1e7, within: 3.0 }),
    experiment: first_call,
};

/// The model and batch compiled-first-call runs, and its alternating passes of each.
pub(super) fn first_call_plan(ctx: &Ctx) -> (Setup, usize) {
    (Setup::new(ctx, ModelId::Resnet18, (8, 8), GradMode::NoGrad), if ctx.cuda() { 20 } else { 5 })
}

pub(super) fn first_call_line(setup: &Setup, rounds: usize) -> String {
    format!("{}, eval(), torch.no_grad(), fp32, a package for batches {}..={}, {rounds} passes of each, alternating", setup.describe(), protocol::compiled_batch_range(setup.batch).0, protocol::compiled_batch_range(setup.batch).1)
}

pub(super) fn first_call_setup(ctx: &Ctx) -> Vec<String> {
    let (setup, rounds) = first_call_plan(ctx);
    vec![
        first_call_line(&setup, rounds),
        how_compiled(ctx),
        "Timed: the export and the compile (in the Python process), the whole process with the interpreter's start and imports, loading the package, its first call, then the eager and the compiled passes alternating".into(),
        "Where this server has a Python with PyTorch, torch.compile's just-in-time path is timed from it beside: its first call (Inductor's on-disk graph cache off), its passes against eager's, and its first call at two more batches".into(),
    ]
}

pub(super) fn first_call(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
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
        fig(EXPORT, c.export_ms),
        fig(COMPILE, c.compile_ms),
        fig(THE_C_BUILD_WITHIN_THE_COMPILE, c.build_ms),
        fig(PYTHON_PROCESS_IN_ALL, c.subprocess_ms),
        fig(LOAD_THE_PACKAGE, c.load_ms),
        fig(FIRST_COMPILED_CALL, first_ms),
        fig(P50_EAGER_PASS, eager),
        fig(P50_COMPILED_PASS, compiled),
        fig(EAGER_OVER_COMPILED_CI_LOW, shift.bounds().0),
        fig(EAGER_OVER_COMPILED_CI_HIGH, shift.bounds().1),
        fig(ONE_TIME_COST_OVER_EAGER_PASS, passes),
        fig(PASSES_TO_BREAK_EVEN, break_even.round()),
        fig(PACKAGE_FROM_THE_CACHE, if c.cached { 1.0 } else { 0.0 }),
        fig(PACKAGE_SIZE, c.package_bytes as f64),
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
            figures.push(fig_of(EACH_TORCH_COMPILE_FIRST_CALL, &[&python::PYTHON], ms));
        }
        for b in [setup.batch + 1, setup.batch + 2] {
            if let Some(ms) = one(&format!("torch.compile: first call at batch {b}")) {
                figures.push(fig_of(EACH_TORCH_COMPILE_FIRST_CALL_AT_BATCH, &[&python::PYTHON, &b], ms));
            }
        }
        if let (Some(e), Some(j)) = (t.arm("eager: pass"), t.arm("torch.compile: pass")) {
            figures.push(fig_of(EACH_EAGER_P50_PASS, &[&python::PYTHON], super::super::kit::p(e, 50.0)));
            figures.push(fig_of(EACH_TORCH_COMPILE_P50_PASS, &[&python::PYTHON], super::super::kit::p(j, 50.0)));
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
            MILLISECONDS,
            vec!["Python: export + Inductor".into(), "the C++ build".into(), "load".into(), "first call".into(), "eager pass (p50)".into(), "compiled pass (p50)".into()],
            vec![c.subprocess_ms - c.build_ms, c.build_ms, c.load_ms, first_ms, eager, compiled],
        )])
        .notes(notes))
}
