//! The `compiled-outputs` card ([`COMPILED_OUTPUTS`]): Compiled, the output is close to eager's but not the same bits

use super::*;

// The figures this file's cards report, each defined once (see `kit::figure`).
pub const EAGER_TWO_CALLS_BITWISE_EQUAL: FigureName = FigureName::new("eager, two calls: bitwise equal", Unit::Bool);
pub const COMPILED_EQUALS_EAGER_BIT_FOR_BIT: FigureName = FigureName::new("compiled equals eager bit for bit", Unit::Bool);
pub const LARGEST_DIFFERENCE_COMPILED_AGAINST_EAGER: FigureName = FigureName::new("largest difference, compiled against eager", Unit::Plain);
pub const ELEMENTS_THAT_DIFFER: FigureName = FigureName::new("elements that differ", Unit::Ratio);
pub const LARGEST_DIFFERENCE_RELATIVE: FigureName = FigureName::new("largest difference, relative", Unit::Plain);
pub const OUTPUTS_LARGEST_MAGNITUDE: FigureName = FigureName::new("output's largest magnitude", Unit::Plain);

/// The largest difference from eager, relative to the output's largest magnitude, that
/// float rounding in another order stays within (fp32 carries 24 bits: 6e-8 per operation).
pub(super) const CLOSE: f64 = 1e-4;

pub const COMPILED_OUTPUTS: Card = Card {
    id: "compiled-outputs",
    title: "Compiled, the output is close to eager's but not the same bits",
    asks: "In fp32, is the output of a model compiled ahead of time the same as the eager model's?",
    labels: ["the package's output checked against eager's with torch.equal", "the package's output checked against eager's with assert_close (rtol and atol 1e-4)"],
    setup: outputs_setup,
    needs: Needs::Any,
    claim: "The compiled output is not the eager one bit for bit, yet it lies within 1e-4 of the output's largest magnitude, and each of them gives the same bits call after call. Inductor's kernels compute the same sums and products in another order (BatchNorm fused into its neighbours, loops and vector widths of their own), and float addition is not associative: a different order rounds differently in the last bits. Compare compiled and eager outputs with a tolerance, never with equality.",
    statements: &[
        Said::run("Called twice on the same input, the eager model gave the same bits, and so did the package.", &[EAGER_TWO_CALLS_BITWISE_EQUAL, COMPILED_TWO_CALLS_BITWISE_EQUAL]),
        Said::run("The compiled output differed from the eager one in some elements.", &[COMPILED_EQUALS_EAGER_BIT_FOR_BIT, ELEMENTS_THAT_DIFFER]),
        Said::run("The largest difference stayed within 1e-4 of the output's largest magnitude.", &[LARGEST_DIFFERENCE_COMPILED_AGAINST_EAGER, LARGEST_DIFFERENCE_RELATIVE]),
        Said::torch("In fp32 the same numbers added in another order give another sum in the last bits.", "test_compile.py::test_fp32_sums_depend_on_their_order"),
    ],
    source: "https://pytorch.org/docs/stable/notes/numerical_accuracy.html",
    pitfall: "assert torch.equal(runner(x), model(x))",
    fix: "torch.testing.assert_close(runner(x), model(x), rtol=1e-4, atol=1e-4)",
    threshold: "confirmed when each side gives the same bits on two calls with one input, the compiled output differs from eager's in at least one element, and the largest difference is at most 1e-4 of the eager output's largest magnitude; refuted otherwise (the same bits, a side that changes from call to call, or a larger difference). fp32, eval(), torch.no_grad()",
    question: super::super::super::value_in("ResNet-18 in fp32 at batch 8, compiled ahead of time: is its output equal to the eager model's, bit for bit?", COMPILED_EQUALS_EAGER_BIT_FOR_BIT, protocol::Unit::Plain, protocol::Ask::YesNo),
    experiment: outputs,
};

pub(super) fn outputs_plan(ctx: &Ctx) -> Setup {
    Setup::new(ctx, ModelId::Resnet18, (8, 8), GradMode::NoGrad)
}

pub(super) fn outputs_line(ctx: &Ctx) -> String {
    format!("{}, eval(), torch.no_grad(), fp32", outputs_plan(ctx).describe())
}

pub(super) fn outputs_setup(ctx: &Ctx) -> Vec<String> {
    vec![
        outputs_line(ctx),
        how_compiled(ctx),
        "Compared: two eager calls on one input, two calls of the package on it, and the package's output against eager's (the largest difference, and the share of elements that differ)".into(),
    ]
}

pub(super) fn outputs(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
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
        fig(EAGER_TWO_CALLS_BITWISE_EQUAL, flag(eager_same)),
        fig(COMPILED_TWO_CALLS_BITWISE_EQUAL, flag(compiled_same)),
        fig(COMPILED_EQUALS_EAGER_BIT_FOR_BIT, flag(equal)),
        fig(ELEMENTS_THAT_DIFFER, share),
        fig(LARGEST_DIFFERENCE_COMPILED_AGAINST_EAGER, diff),
        fig(LARGEST_DIFFERENCE_RELATIVE, relative),
        fig(OUTPUTS_LARGEST_MAGNITUDE, scale),
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
        .series(vec![series(LARGEST_DIFFERENCE_RELATIVE, vec!["compiled against eager".into(), "tolerance".into()], vec![relative, CLOSE])]))
}
