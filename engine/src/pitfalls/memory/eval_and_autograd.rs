//! The `eval-and-autograd` card ([`EVAL_AND_AUTOGRAD`]): eval() does not switch autograd off

use super::*;

pub const EVAL_GRAD_PEAK_ABOVE_BASELINE: FigureName = FigureName::new("eval+grad peak above baseline", Unit::Bytes);
pub const MEMORY_RATIO_GRAD_OVER_NO_GRAD: FigureName = FigureName::new("memory ratio grad / no_grad", Unit::Ratio);
pub const EVAL_GRAD_P50: FigureName = FigureName::new("eval+grad p50", Unit::Ms);
pub const EVAL_NO_GRAD_P50: FigureName = FigureName::new("eval+no_grad p50", Unit::Ms);

pub const EVAL_AND_AUTOGRAD: Card = Card {
    id: "eval-and-autograd",
    title: "eval() does not switch autograd off",
    asks: "What does wrapping an eval() model's forward pass in torch.no_grad() do to its peak memory?",
    labels: ["eval() only", "eval() inside torch.no_grad()"],
    setup: eval_and_autograd_setup,
    needs: Needs::Any,
    claim: "model.eval() does not switch autograd off: with autograd on, an eval() model keeps the activations its backward would need, which under torch.no_grad() are freed as soon as they are used.",
    statements: &[
        Said::torch("model.eval() sets training = False on every module and leaves grad mode on: an eval() model's output still carries a graph.", "test_grad_modes.py::test_eval_leaves_grad_mode_on"),
        Said::torch("With autograd on, every op downstream of a parameter (parameters require grad) records, and saves what its backward needs, activations included, in eval() as in train().", "test_grad_modes.py::test_an_eval_model_saves_activations_for_backward"),
        Said::torch("Under torch.no_grad() no op saves anything for backward, so an activation is freed once the ops that read it are done.", "test_grad_modes.py::test_no_grad_saves_nothing"),
        Said::run("Here the eval() model's pass peaked higher above the baseline with autograd on than under torch.no_grad().", &[EVAL_GRAD_PEAK_ABOVE_BASELINE, EVAL_NO_GRAD_PEAK_ABOVE_BASELINE]),
    ],
    source: "https://pytorch.org/docs/stable/notes/autograd.html#locally-disabling-gradient-computation",
    pitfall: "model.eval()\ny = model(x)",
    fix: "model.eval()\nwith torch.no_grad():\n    y = model(x)",
    threshold: "confirmed when eval+grad's peak above baseline exceeds eval+no_grad's by more than 20% (autograd must keep at least one activation per layer; 20% is far above run-to-run variation, which is zero for memory). Regime: any; on a GPU (ResNet-18, batch 64, 224²) grad keeps every layer's saved activations (over a GB), several times no_grad's peak of a few activations at a time, so the margin is large at any scale",
    question: super::super::ratio("ResNet-18 in eval() mode, one forward pass each way: the peak memory above baseline under torch.no_grad() as a multiple of the peak with autograd on?", EVAL_NO_GRAD_PEAK_ABOVE_BASELINE, EVAL_GRAD_PEAK_ABOVE_BASELINE, super::super::PEAKS),
    experiment: eval_and_autograd,
};

/// What eval-and-autograd runs: the model and batch, on the context's device.
pub(super) fn eval_plan(ctx: &Ctx) -> Setup {
    Setup::new(ctx, ModelId::Resnet18, (8, 64), GradMode::Enabled)
}

/// "N warm-up and M timed iterations": how a measured run of `spec` runs.
pub(in crate::pitfalls) fn iterations(spec: &RunSpec) -> String {
    format!("{} warm-up and {} timed iterations", spec.warmup, spec.iters)
}

pub(super) fn eval_and_autograd_setup(ctx: &Ctx) -> Vec<String> {
    let s = eval_plan(ctx);
    let mut lines = vec![
        s.describe(),
        crate::pitfalls::kit::arms("model.eval(), autograd on", "model.eval(), forward pass inside torch.no_grad()"),
        format!(
            "fp32 weights and input (4 bytes an element); each arm is one run of {}, whose peak allocated memory is read above the baseline (the weights and the input)",
            iterations(&s.spec)
        ),
    ];
    lines.extend(architecture(s.model, s.size));
    lines
}

pub(super) fn eval_and_autograd(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let setup = eval_plan(ctx);
    let grad = measure(lab, ctx, setup.spec.clone())?;
    let nograd = measure(lab, ctx, RunSpec { grad: GradMode::NoGrad, ..setup.spec.clone() })?;
    let (g, n) = (
        grad.memory.peak_above_baseline_bytes,
        nograd.memory.peak_above_baseline_bytes,
    );
    let ratio = g as f64 / n.max(1) as f64;
    let figures = format!(
        "eval()+grad peaked {:.1} MiB above baseline, eval()+no_grad {:.1} MiB: {ratio:.2}×",
        mib(g),
        mib(n)
    );
    let decision = Decision::rule(
        ratio > 1.2,
        format!("{figures} (eval() alone left autograd on)."),
        format!("{figures} (no meaningful difference here)."),
    );
    let labels = || vec!["eval + grad".to_string(), "eval + no_grad".into()];
    let traces = vec![named("eval + grad", &grad), named("eval + no_grad", &nograd)];
    Ok(Outcome::new(
        decision,
        format!("{} on {}", setup.describe(), grad.env.device_name),
        ChartKind::Bar,
    )
    .figures(vec![
        fig(EVAL_GRAD_PEAK_ABOVE_BASELINE, g as f64),
        fig(EVAL_NO_GRAD_PEAK_ABOVE_BASELINE, n as f64),
        fig(MEMORY_RATIO_GRAD_OVER_NO_GRAD, ratio),
        fig(EVAL_GRAD_P50, grad.latency_ms.p50),
        fig(EVAL_NO_GRAD_P50, nograd.latency_ms.p50),
    ])
    .series(vec![
        series(
            PEAK_ABOVE_BASELINE_MIB,
            labels(),
            vec![mib(g), mib(n)],
        ),
        series(
            P50_LATENCY_MS,
            labels(),
            vec![grad.latency_ms.p50, nograd.latency_ms.p50],
        ),
    ])
    .traces(traces))
}
