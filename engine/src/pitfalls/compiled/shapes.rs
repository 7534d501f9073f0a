//! compiled-shapes: what a package does with a batch outside the range it was exported
//! for (it runs it, unless its process asks it to check its inputs), and what the dynamic
//! batch costs against a package exported for one batch.
//!
//! The check is read once per process, from the environment (`AOTI_RUNTIME_CHECK_INPUTS`,
//! in the wrapper Inductor generates: `torch/_inductor/codegen/cpp_wrapper_cpu.py`), so the
//! checked calls run in a Python process of their own on the same package; the unchecked
//! call is this process's, handed the out-of-range batch on purpose and said so.

use std::time::Duration;

use protocol::{ChartKind, GradMode, ModelId, RunFailure};

use super::super::kit::{fig, fig_of, series, time_passes, Ctx, Decision, Outcome, Setup, Shift};
use super::super::precision::max_rel_diff;
use super::super::{Card, Needs, Said};
use super::{how_compiled, package, python_or_absent};
use crate::lab::{forward, run_python, Lab};
use crate::torch_call::catch_torch;
use crate::pitfalls::figures::{P50_LATENCY_MS};
use crate::pitfalls::kit::FigureName;
use protocol::Unit;

// The figures this file's cards report, each defined once (see `kit::figure`).
pub const CHECKED_OUTSIDE_THE_RANGE_REFUSED: FigureName = FigureName::new("checked: outside the range refused", Unit::Bool);
pub const CHECKED_BATCH_1_REFUSED: FigureName = FigureName::new("checked: batch 1 refused", Unit::Bool);
pub const DYNAMIC_OVER_STATIC_CI_LOW: FigureName = FigureName::new("dynamic / static, 95% interval low", Unit::Ratio);
pub const OUTSIDE_THE_RANGE_UNCHECKED_RAN: FigureName = FigureName::new("outside the range, unchecked: ran", Unit::Bool);
pub const OUTSIDE_THE_RANGE_LARGEST_DIFFERENCE_FROM_EAGER_RELATIVE: FigureName = FigureName::new("outside the range: largest difference from eager, relative", Unit::Plain);
pub const BATCH_P50_DYNAMIC_PACKAGE: FigureName = FigureName::new("batch {}: p50 dynamic package", Unit::Ms);
pub const BATCH_P50_STATIC_PACKAGE: FigureName = FigureName::new("batch {}: p50 static package", Unit::Ms);
pub const DYNAMIC_OVER_STATIC_CI_HIGH: FigureName = FigureName::new("dynamic / static, 95% interval high", Unit::Ratio);
pub const STATIC_PACKAGE_COMPILE: FigureName = FigureName::new("static package: compile", Unit::Ms);
pub const CHECKED_BATCH_RAN: FigureName = FigureName::new("checked: batch {} ran", Unit::Bool);
pub const BATCH_8_P50_DYNAMIC_PACKAGE: FigureName = BATCH_P50_DYNAMIC_PACKAGE.instance("batch 8: p50 dynamic package");
pub const BATCH_8_P50_STATIC_PACKAGE: FigureName = BATCH_P50_STATIC_PACKAGE.instance("batch 8: p50 static package");
pub const CHECKED_BATCH_8_RAN: FigureName = CHECKED_BATCH_RAN.instance("checked: batch 8 ran");

/// The batch both packages are timed at (the static one is exported for it alone).
const STATIC_BATCH: u32 = 8;

pub const COMPILED_SHAPES: Card = Card {
    id: "compiled-shapes",
    title: "A package runs a batch outside its exported range without a word, unless its process asks it to check",
    asks: "A model exported for batches 1 to 64 and compiled ahead of time is handed a batch of 128 from C++: what happens, and what does the dynamic batch cost against a package for one batch?",
    labels: ["a package exported with a dynamic batch, 1 to 64", "a package exported for batch 8 alone"],
    setup: shapes_setup,
    needs: Needs::Any,
    claim: "An AOTInductor package checks the shapes of its inputs only when the process that runs it sets AOTI_RUNTIME_CHECK_INPUTS=1: otherwise a batch twice the largest it was exported for runs without an error. With the check on it refuses that batch, and batch 1 as well, though the exported program's batch range starts at 1 and the exported program runs batch 1: the refusal is the compiled package's own input check. Gradless therefore checks the range itself and refuses such a batch before the call. torch.compile's just-in-time path differs: its guards compile again for a shape they do not cover.",
    statements: &[
        Said::run("Handed a batch twice the largest it was exported for, the package ran it here without an error.", &[OUTSIDE_THE_RANGE_UNCHECKED_RAN]),
        Said::run("Its output at that batch was compared with the eager model's: the largest difference, relative to the output's largest magnitude, is reported.", &[OUTSIDE_THE_RANGE_LARGEST_DIFFERENCE_FROM_EAGER_RELATIVE]),
        Said::run("With AOTI_RUNTIME_CHECK_INPUTS=1 set in the process that loads it (a Python process here), the same package refused that batch and refused batch 1, and ran batch 8.", &[CHECKED_OUTSIDE_THE_RANGE_REFUSED, CHECKED_BATCH_1_REFUSED, CHECKED_BATCH_8_RAN]),
        Said::torch("Before compilation, the exported program guards its batch range in Python: a batch outside it raises.", "test_compile.py::test_the_exported_program_in_python_guards_its_batch_range"),
        Said::torch("torch.export keeps the batch range it is given: exported for batches 1 to 64, its program's range_constraints read [1, 64], and it runs batch 1, so the refusal of batch 1 above comes from the compiled package's input check, not from the export.", "test_compile.py::test_export_keeps_a_dynamic_batchs_range_from_1_and_runs_batch_1"),
        Said::torch("torch.compile with dynamic=False compiles again for every new batch it is called with.", "test_compile.py::test_a_static_compile_recompiles_for_every_new_batch"),
        Said::torch("By default torch.compile specialises on the first batch, compiles once more with the batch symbolic when a second batch comes, and reuses that for the batches after.", "test_compile.py::test_by_default_the_second_batch_recompiles_once_as_dynamic"),
        Said::run("At batch 8 the dynamic package's pass is timed against a package exported for batch 8 alone: their p50s and the interval of their ratio.", &[BATCH_8_P50_DYNAMIC_PACKAGE, BATCH_8_P50_STATIC_PACKAGE, DYNAMIC_OVER_STATIC_CI_LOW, DYNAMIC_OVER_STATIC_CI_HIGH]),
    ],
    source: "https://pytorch.org/docs/stable/export.html#expressing-dynamism",
    pitfall: "batch = Dim(\"batch\", min=1, max=64)\nep = torch.export.export(model.eval(), (x,), dynamic_shapes=({0: batch},))\nrunner = torch._inductor.aoti_load_package(torch._inductor.aoti_compile_and_package(ep))\ny = runner(torch.randn(128, *x.shape[1:]))",
    fix: "x8 = torch.randn(8, *x.shape[1:])\nep = torch.export.export(model.eval(), (x8,))\nrunner = torch._inductor.aoti_load_package(torch._inductor.aoti_compile_and_package(ep))\ny = runner(x8)",
    threshold: "confirmed when the package, called from this process with twice the largest batch it was exported for, runs it, and the same package in a Python process with AOTI_RUNTIME_CHECK_INPUTS=1 refuses that batch and batch 1 while it runs batch 8; refuted when the unchecked call refuses the batch, or the checked process runs it or batch 1, or refuses batch 8; inconclusive when the Python process could not answer. The output at the large batch is compared with eager's and reported; the dynamic package against the static one at batch 8 (passes alternating, one untimed of each first, 10 of each on a CPU, 30 on a GPU) is reported, not judged",
    question: super::super::value_in("A package exported for batches 1 to 64 is called from C++ (AOTIModelPackageLoader) with a batch of 128, and nothing else set: does it run it? (A knowledge check: what a package does with a batch outside the range it was exported for.)", OUTSIDE_THE_RANGE_UNCHECKED_RAN, protocol::Unit::Plain, protocol::Ask::YesNo),
    experiment: shapes,
};

fn shapes_plan(ctx: &Ctx) -> (Setup, usize) {
    (Setup::with_batch(ctx, ctx.model(ModelId::Resnet18), STATIC_BATCH, GradMode::NoGrad), if ctx.cuda() { 30 } else { 10 })
}

fn shapes_line(ctx: &Ctx) -> String {
    let (setup, rounds) = shapes_plan(ctx);
    let (_, max) = protocol::compiled_batch_range(STATIC_BATCH);
    format!(
        "{}, {}, a package for batches 1..={max} handed batch {}, and batch {STATIC_BATCH} against a package for it alone, {rounds} passes of each",
        setup.model.display_name(),
        setup.model.describe_sample(setup.size),
        2 * max
    )
}

fn shapes_setup(ctx: &Ctx) -> Vec<String> {
    let (_, max) = protocol::compiled_batch_range(STATIC_BATCH);
    vec![
        shapes_line(ctx),
        how_compiled(ctx),
        format!("Called with batch {} from this process, nothing else set; the same package also loaded in a Python process with AOTI_RUNTIME_CHECK_INPUTS=1 and called with batches {}, 1 and {STATIC_BATCH}", 2 * max, 2 * max),
        format!("Timed: the dynamic package and one exported for batch {STATIC_BATCH} alone, alternating at batch {STATIC_BATCH} (eval(), torch.no_grad(), fp32)"),
    ]
}

/// What the Python process reports for each batch it calls the package with.
#[derive(serde::Deserialize)]
struct Checked {
    batch: u32,
    ran: bool,
    error: String,
}

/// Loads `package` in a Python process with the input check on and calls it once with each
/// of `batches` (the input's other dimensions `rest`); `Err` with a reason when the process
/// could not answer.
fn checked_calls(python: &std::path::Path, ctx: &Ctx, package: &std::path::Path, rest: &[i64], batches: &[u32]) -> Result<Result<Vec<Checked>, String>, RunFailure> {
    const SCRIPT: &str = r#"
import json, os, sys, tempfile
import torch, torch._inductor
path, device, rest, batches = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
runner = torch._inductor.aoti_load_package(path)
answers = []

def call(b):
    # The package's check writes its reason to the C++ stderr ("Error: input_handles[0]:
    # ..."), and the exception only names the failed call: read the reason from fd 2.
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as err:
        os.dup2(err.fileno(), 2)
        try:
            runner(torch.zeros([b] + rest, device=device))
            failure = None
        except Exception as e:
            failure = (str(e).strip().splitlines() or [type(e).__name__])[0]
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        said = [l.strip() for l in err.read().decode(errors="replace").splitlines() if l.strip().startswith("Error:")]
    if failure is None:
        return {"batch": b, "ran": True, "error": ""}
    return {"batch": b, "ran": False, "error": (said[0] if said else failure)[:300]}

with torch.no_grad():
    for b in batches:
        answers.append(call(b))
print(json.dumps(answers))
"#;
    let (rest, batches) = (serde_json::to_string(rest).unwrap_or_default(), serde_json::to_string(batches).unwrap_or_default());
    let path = package.to_string_lossy();
    let args = ["-c", SCRIPT, &path, ctx.device.as_str(), &rest, &batches];
    let one = std::ffi::OsStr::new("1");
    let env = [("AOTI_RUNTIME_CHECK_INPUTS", one), ("OMP_NUM_THREADS", one), ("KINETO_LOG_LEVEL", std::ffi::OsStr::new("5"))];
    Ok(run_python(python, &args, &env, Duration::from_secs(120), ctx.control)?.and_then(|out| {
        let line = out.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
        serde_json::from_str(line).map_err(|e| format!("its answer could not be read ({e}): `{}`", line.chars().take(200).collect::<String>()))
    }))
}

fn shapes(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let python = match python_or_absent(lab) {
        Ok(p) => p,
        Err(absent) => return Ok(absent),
    };
    let (setup, rounds) = shapes_plan(ctx);
    let range = protocol::compiled_batch_range(STATIC_BATCH);
    let outside = 2 * range.1;
    let (_, fixed) = package(lab, ctx, &setup, &python, (STATIC_BATCH, STATIC_BATCH))?;
    let (i, dynamic) = package(lab, ctx, &setup, &python, range)?;
    let model = lab.model(i);
    let spec = &setup.spec;

    // The out-of-range call, on purpose, against the eager model on the same input.
    let big = Setup::with_batch(ctx, setup.model, outside, GradMode::NoGrad);
    let x = big.input(model, ctx)?;
    let (ran, diff, why) = match dynamic.forward(&x, spec, ctx.device) {
        Ok(out) => {
            let eager = forward(model, &x, spec, ctx.device)?;
            let same_shape = out.size() == eager.size();
            let (d, scale) = if same_shape { max_rel_diff(&out, &eager)? } else { (f64::INFINITY, 1.0) };
            (true, if same_shape { d / scale.max(f64::MIN_POSITIVE) } else { -1.0 }, String::new())
        }
        Err(e) => (false, -1.0, e.message),
    };
    let rest: Vec<i64> = catch_torch(|| x.first().size())?.into_iter().skip(1).collect();
    drop(x);

    let asked = [outside, 1, STATIC_BATCH];
    let checked = checked_calls(&python, ctx, &dynamic.file, &rest, &asked)?;

    // The dynamic package against the static one, at the static one's batch.
    let input = setup.input(model, ctx)?;
    drop((dynamic.forward(&input, spec, ctx.device)?, fixed.forward(&input, spec, ctx.device)?));
    let times = time_passes(ctx, rounds, 2, |v, _| match v {
        0 => dynamic.forward(&input, spec, ctx.device),
        _ => fixed.forward(&input, spec, ctx.device),
    })?;
    let shift = Shift::of(&times[0], &times[1]);

    let flag = |b: bool| if b { 1.0 } else { 0.0 };
    let mut figures = vec![
        fig(OUTSIDE_THE_RANGE_UNCHECKED_RAN, flag(ran)),
        fig(OUTSIDE_THE_RANGE_LARGEST_DIFFERENCE_FROM_EAGER_RELATIVE, diff.max(0.0)),
        fig_of(BATCH_P50_DYNAMIC_PACKAGE, &[&STATIC_BATCH], shift.slow_p50),
        fig_of(BATCH_P50_STATIC_PACKAGE, &[&STATIC_BATCH], shift.fast_p50),
        fig(DYNAMIC_OVER_STATIC_CI_LOW, shift.bounds().0),
        fig(DYNAMIC_OVER_STATIC_CI_HIGH, shift.bounds().1),
        fig(STATIC_PACKAGE_COMPILE, fixed.compile_ms),
    ];
    let mut notes = vec![];
    if !ran {
        notes.push(format!("The unchecked call of batch {outside} failed: {why}"));
    }
    let unchecked = if ran {
        format!("Called from this process with batch {outside}, outside 1..={}, the package ran it; its output differs from eager's by {diff:.2e} of the largest magnitude.", range.1)
    } else {
        format!("Called from this process with batch {outside}, the package refused it: {why}.")
    };
    let timing = format!("At batch {STATIC_BATCH}, dynamic / static per pass: {}.", shift.describe());
    let decision = match checked {
        Err(why) => {
            notes.push(format!("The Python process with AOTI_RUNTIME_CHECK_INPUTS=1 could not answer: {why}"));
            Decision::inconclusive(format!("{unchecked} The checked calls could not be made: {why}. {timing}"))
        }
        Ok(answers) => {
            let refused = |b: u32| answers.iter().find(|a| a.batch == b).map(|a| !a.ran);
            let (big_refused, one_refused, ours_ran) = (refused(outside), refused(1), refused(STATIC_BATCH).map(|r| !r));
            figures.extend([
                fig(CHECKED_OUTSIDE_THE_RANGE_REFUSED, flag(big_refused == Some(true))),
                fig(CHECKED_BATCH_1_REFUSED, flag(one_refused == Some(true))),
                fig_of(CHECKED_BATCH_RAN, &[&STATIC_BATCH], flag(ours_ran == Some(true))),
            ]);
            for a in answers.iter().filter(|a| !a.ran) {
                notes.push(format!("With AOTI_RUNTIME_CHECK_INPUTS=1, batch {} was refused: {}", a.batch, a.error));
            }
            let said = |r: Option<bool>, yes: &str, no: &str| match r {
                Some(true) => yes.to_string(),
                _ => no.to_string(),
            };
            let text = format!(
                "{unchecked} With AOTI_RUNTIME_CHECK_INPUTS=1 in a Python process, the same package {} batch {outside}, {} batch 1 and {} batch {STATIC_BATCH}. {timing}",
                said(big_refused, "refused", "ran"),
                said(one_refused, "refused", "ran"),
                said(ours_ran, "ran", "refused"),
            );
            let holds = ran && big_refused == Some(true) && one_refused == Some(true) && ours_ran == Some(true);
            Decision::rule(holds, text.clone(), text)
        }
    };
    Ok(Outcome::new(decision, shapes_line(ctx), ChartKind::Bar)
        .figures(figures)
        .series(vec![series(P50_LATENCY_MS, vec![format!("dynamic package, batch {STATIC_BATCH}"), format!("static package, batch {STATIC_BATCH}")], vec![shift.slow_p50, shift.fast_p50])])
        .notes(notes))
}
