//! The `compiled-settings` card ([`COMPILED_SETTINGS`]): A package keeps the mode it was exported in and records no autograd graph

use super::*;

pub const EAGER_IN_TRAIN_TWO_CALLS_BITWISE_EQUAL: FigureName = FigureName::new("eager in train(), two calls: bitwise equal", Unit::Bool);
pub const COMPILED_OUTPUT_REQUIRES_GRAD: FigureName = FigureName::new("compiled, {}: output requires grad", Unit::Bool);
pub const COMPILED_RETAINED: FigureName = FigureName::new("compiled, {}: retained", Unit::Bytes);
pub const EAGER_RETAINED: FigureName = FigureName::new("eager, {}: retained", Unit::Bytes);
pub const COMPILED_P50: FigureName = FigureName::new("compiled, {}: p50", Unit::Ms);
pub const KEPT_WHILE_THE_OUTPUT_LIVES_BYTES: FigureName = FigureName::new("kept while the output lives (bytes)", Unit::Bytes);
pub const COMPILED_GRAD_ENABLED_OUTPUT_REQUIRES_GRAD: FigureName = COMPILED_OUTPUT_REQUIRES_GRAD.instance("compiled, grad enabled: output requires grad");
pub const COMPILED_NO_GRAD_OUTPUT_REQUIRES_GRAD: FigureName = COMPILED_OUTPUT_REQUIRES_GRAD.instance("compiled, no_grad: output requires grad");
pub const COMPILED_GRAD_ENABLED_RETAINED: FigureName = COMPILED_RETAINED.instance("compiled, grad enabled: retained");
pub const COMPILED_NO_GRAD_RETAINED: FigureName = COMPILED_RETAINED.instance("compiled, no_grad: retained");
pub const EAGER_GRAD_ENABLED_RETAINED: FigureName = EAGER_RETAINED.instance("eager, grad enabled: retained");
pub const COMPILED_GRAD_ENABLED_P50: FigureName = COMPILED_P50.instance("compiled, grad enabled: p50");
pub const COMPILED_NO_GRAD_P50: FigureName = COMPILED_P50.instance("compiled, no_grad: p50");
pub const COMPILED_INFERENCE_MODE_OUTPUT_REQUIRES_GRAD: FigureName = COMPILED_OUTPUT_REQUIRES_GRAD.instance("compiled, inference_mode: output requires grad");
pub const COMPILED_INFERENCE_MODE_P50: FigureName = COMPILED_P50.instance("compiled, inference_mode: p50");
pub const EAGER_NO_GRAD_RETAINED: FigureName = EAGER_RETAINED.instance("eager, no_grad: retained");

// ---------------------------------------------------------------------------------------
// The settings inside a package.

/// The grad modes a package is called under, in order.
pub(super) const MODES: [GradMode; 3] = [GradMode::Enabled, GradMode::NoGrad, GradMode::InferenceMode];

pub(super) fn mode_name(g: GradMode) -> &'static str {
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
        Said::run("The package, exported in eval(), gave the same bits on two calls with one input, where the eager model in train() gave different ones (its Dropout is live).", &[COMPILED_TWO_CALLS_BITWISE_EQUAL, EAGER_IN_TRAIN_TWO_CALLS_BITWISE_EQUAL]),
        Said::run("Called with autograd on, under no_grad and under inference_mode, its output required grad in none.", &[COMPILED_GRAD_ENABLED_OUTPUT_REQUIRES_GRAD, COMPILED_NO_GRAD_OUTPUT_REQUIRES_GRAD, COMPILED_INFERENCE_MODE_OUTPUT_REQUIRES_GRAD]),
        Said::run("With autograd on it kept no more memory while its output lived than under no_grad, where the eager model with autograd on kept its activations.", &[COMPILED_GRAD_ENABLED_RETAINED, COMPILED_NO_GRAD_RETAINED, EAGER_GRAD_ENABLED_RETAINED, EAGER_NO_GRAD_RETAINED]),
        Said::run("Its passes under the three modes are timed side by side.", &[COMPILED_GRAD_ENABLED_P50, COMPILED_NO_GRAD_P50, COMPILED_INFERENCE_MODE_P50]),
        Said::torch("torch.compile's just-in-time path guards the module's mode: switching it to train() compiles again.", "test_compile.py::test_switching_to_train_recompiles"),
        Said::source("Under mode=\"reduce-overhead\" on a GPU, torch.compile replays CUDA graphs whose outputs live in the graphs' memory pool: once it replays, every call returns the same output tensors, rewritten in place, so an output kept from an earlier call silently holds the next call's values, with no error (only an output of the recording call raises \"overwritten by a subsequent run\" when read after the next call); a clone taken before the next call keeps its own.", "torch/_inductor/cudagraph_trees.py", "CUDAGraphNode.reconstruct_outputs", "compiled-cards"),
    ],
    source: "https://pytorch.org/docs/stable/export.html",
    pitfall: "runner = torch._inductor.aoti_load_package(path)\ny = runner(x)",
    fix: "runner = torch._inductor.aoti_load_package(path)\nwith torch.inference_mode():\n    y = runner(x)",
    threshold: "confirmed when the package gives the same bits on two calls with one input, its output requires grad under none of the three grad modes, and the memory it keeps while its output lives with autograd on is the same as under no_grad (the byte rule: within 1%); refuted otherwise. The eager model in train() and with autograd on is measured beside for contrast, and the three modes' p50s (5 passes of each on a CPU, 20 on a GPU, alternating) are reported, not judged. Tiny MLP by default: it has Dropout and BatchNorm",
    question: super::super::super::value_in("A package is called with autograd on (no torch.no_grad() around it), its weights having required grad when it was exported: does its output require grad? (A knowledge check.)", COMPILED_GRAD_ENABLED_OUTPUT_REQUIRES_GRAD, protocol::Unit::Plain, protocol::Ask::YesNo),
    experiment: settings,
};

pub(super) fn settings_plan(ctx: &Ctx) -> (Setup, usize) {
    (Setup::new(ctx, ModelId::TinyMlp, (32, 32), GradMode::NoGrad), if ctx.cuda() { 20 } else { 5 })
}

pub(super) fn settings_line(ctx: &Ctx) -> String {
    let (setup, rounds) = settings_plan(ctx);
    format!("{}, exported in eval(), fp32, called under each grad mode, {rounds} passes of each", setup.describe())
}

pub(super) fn settings_setup(ctx: &Ctx) -> Vec<String> {
    vec![
        settings_line(ctx),
        how_compiled(ctx),
        "Called: the package twice on one input; then with autograd on, under torch.no_grad() and under torch.inference_mode(), reading whether its output requires grad and the memory kept while it lives; beside, the eager model in train() twice, and with autograd on and under no_grad".into(),
    ]
}

pub(super) fn settings(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
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
    figures.extend([fig(COMPILED_TWO_CALLS_BITWISE_EQUAL, flag(compiled_same)), fig(EAGER_IN_TRAIN_TWO_CALLS_BITWISE_EQUAL, flag(train_same))]);

    let mut requires = vec![];
    let mut kept = vec![];
    for g in MODES {
        let spec = under(g, true);
        let out = c.forward(&input, &spec, ctx.device)?;
        let r = out.requires_grad();
        drop(out);
        let (_, retained) = call_memory(lab, ctx, || c.forward(&input, &spec, ctx.device))?;
        figures.push(fig_of(COMPILED_OUTPUT_REQUIRES_GRAD, &[&mode_name(g)], flag(r)));
        figures.push(fig_of(COMPILED_RETAINED, &[&mode_name(g)], retained as f64));
        requires.push(r);
        kept.push(retained);
    }
    let mut eager_kept = vec![];
    for g in [GradMode::Enabled, GradMode::NoGrad] {
        let spec = under(g, true);
        let (_, retained) = call_memory(lab, ctx, || forward(model, &input, &spec, ctx.device))?;
        figures.push(fig_of(EAGER_RETAINED, &[&mode_name(g)], retained as f64));
        eager_kept.push(retained);
    }
    let specs: Vec<RunSpec> = MODES.iter().map(|&g| under(g, true)).collect();
    let times = time_passes(ctx, rounds, MODES.len(), |v, _| c.forward(&input, &specs[v], ctx.device))?;
    let p50s: Vec<f64> = times.iter().map(|t| super::super::super::kit::p(t, 50.0)).collect();
    for (g, p) in MODES.iter().zip(&p50s) {
        figures.push(fig_of(COMPILED_P50, &[&mode_name(*g)], *p));
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
            KEPT_WHILE_THE_OUTPUT_LIVES_BYTES,
            vec!["compiled, autograd on".into(), "compiled, no_grad".into(), "compiled, inference_mode".into(), "eager, autograd on".into(), "eager, no_grad".into()],
            kept.iter().chain(&eager_kept).map(|&b| b as f64).collect(),
        )]))
}
