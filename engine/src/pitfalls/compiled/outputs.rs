//! What a package computes: its output against the eager model's in fp32
//! ([`COMPILED_OUTPUTS`]: close, not the same bits, the same from call to call), and the
//! settings a package carries inside it ([`COMPILED_SETTINGS`]: the mode it was exported in;
//! no autograd graph whatever the grad mode around the call).

use protocol::{ChartKind, GradMode, ModelId, RunFailure, RunSpec};

use super::super::kit::{bytes_compared, fig, series, time_passes, Ctx, Decision, Outcome, Setup};
use super::super::precision::max_rel_diff;
use super::super::{Card, Needs, Said};
use super::{call_memory, how_compiled, package, python_or_absent};
use crate::lab::{forward, Lab};
use crate::torch_call::catch_torch;

/// The largest difference from eager, relative to the output's largest magnitude, that
/// float rounding in another order stays within (fp32 carries 24 bits: 6e-8 per operation).
const CLOSE: f64 = 1e-4;

pub const COMPILED_OUTPUTS: Card = Card {
    id: "compiled-outputs",
    title: "Compiled, the output is close to eager's but not the same bits",
    asks: "In fp32, is the output of a model compiled ahead of time the same as the eager model's?",
    labels: ["the eager model, called twice on one input", "the compiled package, called twice on the same input"],
    setup: outputs_setup,
    needs: Needs::Any,
    claim: "The compiled output is not the eager one bit for bit, yet it lies within 1e-4 of the output's largest magnitude, and each of them gives the same bits call after call. Inductor's kernels compute the same sums and products in another order (BatchNorm fused into its neighbours, loops and vector widths of their own), and float addition is not associative: a different order rounds differently in the last bits. Compare compiled and eager outputs with a tolerance, never with equality.",
    statements: &[
        Said::run("Called twice on the same input, the eager model gave the same bits, and so did the package.", &["eager, two calls: bitwise equal", "compiled, two calls: bitwise equal"]),
        Said::run("The compiled output differed from the eager one in some elements.", &["compiled equals eager bit for bit", "elements that differ"]),
        Said::run("The largest difference stayed within 1e-4 of the output's largest magnitude.", &["largest difference, compiled against eager", "largest difference, relative"]),
        Said::torch("In fp32 the same numbers added in another order give another sum in the last bits.", "test_compile.py::test_fp32_sums_depend_on_their_order"),
    ],
    source: "https://pytorch.org/docs/stable/notes/numerical_accuracy.html",
    pitfall: "assert torch.equal(runner(x), model(x))",
    fix: "torch.testing.assert_close(runner(x), model(x), rtol=1e-4, atol=1e-4)",
    threshold: "confirmed when each side gives the same bits on two calls with one input, the compiled output differs from eager's in at least one element, and the largest difference is at most 1e-4 of the eager output's largest magnitude; refuted otherwise (the same bits, a side that changes from call to call, or a larger difference). fp32, eval(), torch.no_grad()",
    question: super::super::value("ResNet-18 in fp32 at batch 8, compiled ahead of time: is its output equal to the eager model's, bit for bit?", "compiled equals eager bit for bit", "", protocol::Ask::YesNo),
    experiment: outputs,
};

fn outputs_plan(ctx: &Ctx) -> Setup {
    Setup::new(ctx, ModelId::Resnet18, (8, 8), GradMode::NoGrad)
}

fn outputs_line(ctx: &Ctx) -> String {
    format!("{}, eval(), torch.no_grad(), fp32", outputs_plan(ctx).describe())
}

fn outputs_setup(ctx: &Ctx) -> Vec<String> {
    vec![
        outputs_line(ctx),
        how_compiled(ctx),
        "Compared: two eager calls on one input, two calls of the package on it, and the package's output against eager's (the largest difference, and the share of elements that differ)".into(),
    ]
}

fn outputs(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let python = match python_or_absent(lab) {
        Ok(p) => p,
        Err(absent) => return Ok(absent),
    };
    let setup = outputs_plan(ctx);
    let (i, c) = package(lab, ctx, &setup, &python, protocol::compiled_batch_range(setup.batch))?;
    let model = lab.model(i);
    let input = setup.input(model, ctx)?;
    let spec = &setup.spec;
    let (e1, e2) = (forward(model, &input, spec, ctx.device)?, forward(model, &input, spec, ctx.device)?);
    let (c1, c2) = (c.forward(&input, spec, ctx.device)?, c.forward(&input, spec, ctx.device)?);
    let (diff, scale) = max_rel_diff(&c1, &e1)?;
    let (eager_same, compiled_same, equal, share) = catch_torch(|| {
        let differ = c1.ne_tensor(&e1).to_kind(tch::Kind::Double).mean(tch::Kind::Double).double_value(&[]);
        (e1.equal(&e2), c1.equal(&c2), c1.equal(&e1), differ)
    })?;
    let relative = diff / scale.max(f64::MIN_POSITIVE);
    let flag = |b: bool| if b { 1.0 } else { 0.0 };
    let figures = vec![
        fig("eager, two calls: bitwise equal", flag(eager_same), "bool"),
        fig("compiled, two calls: bitwise equal", flag(compiled_same), "bool"),
        fig("compiled equals eager bit for bit", flag(equal), "bool"),
        fig("elements that differ", share, "ratio"),
        fig("largest difference, compiled against eager", diff, ""),
        fig("largest difference, relative", relative, ""),
        fig("output's largest magnitude", scale, ""),
    ];
    let yes = |b: bool| if b { "the same bits" } else { "different bits" };
    let text = format!(
        "Eager twice: {}; compiled twice: {}; compiled against eager: {}, {:.1}% of the elements differ, the largest by {diff:.2e} ({relative:.2e} of the largest magnitude, {scale:.3}).",
        yes(eager_same),
        yes(compiled_same),
        yes(equal),
        100.0 * share
    );
    let holds = eager_same && compiled_same && !equal && relative <= CLOSE;
    Ok(Outcome::new(Decision::rule(holds, text.clone(), text), outputs_line(ctx), ChartKind::Bar)
        .figures(figures)
        .series(vec![series("largest difference, relative", "", vec!["compiled against eager".into(), "tolerance".into()], vec![relative, CLOSE])]))
}

// ---------------------------------------------------------------------------------------
// The settings inside a package.

/// The grad modes a package is called under, in order.
const MODES: [GradMode; 3] = [GradMode::Enabled, GradMode::NoGrad, GradMode::InferenceMode];

fn mode_name(g: GradMode) -> &'static str {
    match g {
        GradMode::Enabled => "grad enabled",
        GradMode::NoGrad => "no_grad",
        GradMode::InferenceMode => "inference_mode",
    }
}

pub const COMPILED_SETTINGS: Card = Card {
    id: "compiled-settings",
    title: "A package keeps the mode it was exported in and records no autograd graph",
    asks: "Once a model is compiled ahead of time, what do eval(), Dropout, and the grad mode around the call still change?",
    labels: ["the package called with autograd on", "the package called under torch.no_grad() or torch.inference_mode()"],
    setup: settings_setup,
    needs: Needs::Any,
    claim: "A package runs the graph exported in eval(): Dropout passes everything through and BatchNorm uses its running statistics, call after call, and nothing switches it back, for it has no train(). It records no autograd graph whatever the grad mode: called with autograd on, its output does not require grad and it keeps no more memory than under no_grad, where the eager model keeps its activations for a backward pass. torch.compile's just-in-time path differs: it follows the module's mode and compiles again when it changes.",
    statements: &[
        Said::torch("torch.export records the module in its mode at export: a train-mode export keeps Dropout live, and the exported module refuses eval().", "test_compile.py::test_a_train_mode_export_keeps_dropout_and_refuses_eval"),
        Said::run("The package, exported in eval(), gave the same bits on two calls with one input, where the eager model in train() gave different ones (its Dropout is live).", &["compiled, two calls: bitwise equal", "eager in train(), two calls: bitwise equal"]),
        Said::run("Called with autograd on, under no_grad and under inference_mode, its output required grad in none.", &["compiled, grad enabled: output requires grad", "compiled, no_grad: output requires grad", "compiled, inference_mode: output requires grad"]),
        Said::run("With autograd on it kept no more memory while its output lived than under no_grad, where the eager model with autograd on kept its activations.", &["compiled, grad enabled: retained", "compiled, no_grad: retained", "eager, grad enabled: retained", "eager, no_grad: retained"]),
        Said::run("Its passes under the three modes are timed side by side.", &["compiled, grad enabled: p50", "compiled, no_grad: p50", "compiled, inference_mode: p50"]),
        Said::torch("torch.compile's just-in-time path guards the module's mode: switching it to train() compiles again.", "test_compile.py::test_switching_to_train_recompiles"),
        Said::source("Under mode=\"reduce-overhead\" on a GPU, torch.compile replays CUDA graphs whose outputs live in the graphs' memory pool: once it replays, every call returns the same output tensors, rewritten in place, so an output kept from an earlier call silently holds the next call's values, with no error (only an output of the recording call raises \"overwritten by a subsequent run\" when read after the next call); a clone taken before the next call keeps its own.", "torch/_inductor/cudagraph_trees.py", "CUDAGraphNode.reconstruct_outputs", "compiled-cards"),
    ],
    source: "https://pytorch.org/docs/stable/export.html",
    pitfall: "runner = torch._inductor.aoti_load_package(path)\ny = runner(x)",
    fix: "runner = torch._inductor.aoti_load_package(path)\nwith torch.inference_mode():\n    y = runner(x)",
    threshold: "confirmed when the package gives the same bits on two calls with one input, its output requires grad under none of the three grad modes, and the memory it keeps while its output lives with autograd on is the same as under no_grad (the byte rule: within 1%); refuted otherwise. The eager model in train() and with autograd on is measured beside for contrast, and the three modes' p50s (5 passes of each on a CPU, 20 on a GPU, alternating) are reported, not judged. Tiny MLP by default: it has Dropout and BatchNorm",
    question: super::super::value("A package is called with autograd on (no torch.no_grad() around it), its weights having required grad when it was exported: does its output require grad?", "compiled, grad enabled: output requires grad", "", protocol::Ask::YesNo),
    experiment: settings,
};

fn settings_plan(ctx: &Ctx) -> (Setup, usize) {
    (Setup::new(ctx, ModelId::TinyMlp, (32, 32), GradMode::NoGrad), if ctx.cuda() { 20 } else { 5 })
}

fn settings_line(ctx: &Ctx) -> String {
    let (setup, rounds) = settings_plan(ctx);
    format!("{}, exported in eval(), fp32, called under each grad mode, {rounds} passes of each", setup.describe())
}

fn settings_setup(ctx: &Ctx) -> Vec<String> {
    vec![
        settings_line(ctx),
        how_compiled(ctx),
        "Called: the package twice on one input; then with autograd on, under torch.no_grad() and under torch.inference_mode(), reading whether its output requires grad and the memory kept while it lives; beside, the eager model in train() twice, and with autograd on and under no_grad".into(),
    ]
}

fn settings(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let python = match python_or_absent(lab) {
        Ok(p) => p,
        Err(absent) => return Ok(absent),
    };
    let (setup, rounds) = settings_plan(ctx);
    let (i, c) = package(lab, ctx, &setup, &python, protocol::compiled_batch_range(setup.batch))?;
    let model = lab.model(i);
    let input = setup.input(model, ctx)?;
    let under = |grad: GradMode, eval: bool| RunSpec { grad, eval, ..setup.spec.clone() };
    let flag = |b: bool| if b { 1.0 } else { 0.0 };
    let mut figures = vec![];

    let (c1, c2) = (c.forward(&input, &setup.spec, ctx.device)?, c.forward(&input, &setup.spec, ctx.device)?);
    let compiled_same = catch_torch(|| c1.equal(&c2))?;
    drop((c1, c2));
    let train = under(GradMode::NoGrad, false);
    // The cached model goes back to eval() at its next run (`forward` sets the mode).
    let (t1, t2) = (forward(model, &input, &train, ctx.device)?, forward(model, &input, &train, ctx.device)?);
    let train_same = catch_torch(|| t1.equal(&t2))?;
    drop((t1, t2));
    figures.extend([fig("compiled, two calls: bitwise equal", flag(compiled_same), "bool"), fig("eager in train(), two calls: bitwise equal", flag(train_same), "bool")]);

    let mut requires = vec![];
    let mut kept = vec![];
    for g in MODES {
        let spec = under(g, true);
        let out = c.forward(&input, &spec, ctx.device)?;
        let r = out.requires_grad();
        drop(out);
        let (_, retained) = call_memory(lab, ctx, || c.forward(&input, &spec, ctx.device))?;
        figures.push(fig(&format!("compiled, {}: output requires grad", mode_name(g)), flag(r), "bool"));
        figures.push(fig(&format!("compiled, {}: retained", mode_name(g)), retained as f64, "bytes"));
        requires.push(r);
        kept.push(retained);
    }
    let mut eager_kept = vec![];
    for g in [GradMode::Enabled, GradMode::NoGrad] {
        let spec = under(g, true);
        let (_, retained) = call_memory(lab, ctx, || forward(model, &input, &spec, ctx.device))?;
        figures.push(fig(&format!("eager, {}: retained", mode_name(g)), retained as f64, "bytes"));
        eager_kept.push(retained);
    }
    let specs: Vec<RunSpec> = MODES.iter().map(|&g| under(g, true)).collect();
    let times = time_passes(ctx, rounds, MODES.len(), |v, _| c.forward(&input, &specs[v], ctx.device))?;
    let p50s: Vec<f64> = times.iter().map(|t| super::super::kit::p(t, 50.0)).collect();
    for (g, p) in MODES.iter().zip(&p50s) {
        figures.push(fig(&format!("compiled, {}: p50", mode_name(*g)), *p, "ms"));
    }

    let (band, memory) = bytes_compared(kept[0] as f64, kept[1] as f64);
    let text = format!(
        "The package twice on one input: {}; the eager model in train() twice: {}. Its output required grad with autograd on: {}, under no_grad: {}, under inference_mode: {}. Kept while its output lived, autograd on against no_grad: {memory}; the eager model kept {} with autograd on and {} under no_grad. p50 with autograd on {:.3} ms, no_grad {:.3} ms, inference_mode {:.3} ms.",
        if compiled_same { "the same bits" } else { "different bits" },
        if train_same { "the same bits" } else { "different bits" },
        requires[0],
        requires[1],
        requires[2],
        protocol::format_bytes(eager_kept[0]),
        protocol::format_bytes(eager_kept[1]),
        p50s[0],
        p50s[1],
        p50s[2],
    );
    let holds = compiled_same && requires.iter().all(|r| !r) && band == protocol::Choice::Same;
    Ok(Outcome::new(Decision::rule(holds, text.clone(), text), settings_line(ctx), ChartKind::Bar)
        .figures(figures)
        .series(vec![series(
            "kept while the output lives (bytes)",
            "bytes",
            vec!["compiled, autograd on".into(), "compiled, no_grad".into(), "compiled, inference_mode".into(), "eager, autograd on".into(), "eager, no_grad".into()],
            kept.iter().chain(&eager_kept).map(|&b| b as f64).collect(),
        )]))
}
