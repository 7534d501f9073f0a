//! The `freeze-vs-nograd` card ([`FREEZE_VS_NOGRAD`]): Freezing all parameters builds no graph; partial freezing is in between

use super::*;

pub const NO_GRAD_PEAK_ABOVE_BASELINE: FigureName = FigureName::new("no_grad: peak above baseline", Unit::Bytes);
pub const NO_GRAD: FigureName = FigureName::new("no_grad", Unit::Bytes);
pub const ALL_FROZEN: FigureName = FigureName::new("all frozen", Unit::Bytes);
pub const BACKBONE_FROZEN_LAST_STAGE_HEAD_TRAINABLE: FigureName = FigureName::new("backbone frozen (last stage + head trainable)", Unit::Bytes);
pub const ALL_TRAINABLE: FigureName = FigureName::new("all trainable", Unit::Bytes);
pub const ALL_TRAINABLE_PEAK_ABOVE_BASELINE: FigureName = FigureName::new("all trainable: peak above baseline", Unit::Bytes);
pub const RETAINED_WHILE_THE_OUTPUT_IS_ALIVE_MIB: FigureName = FigureName::new("retained while the output is alive (MiB)", Unit::Mib);

pub const FREEZE_VS_NOGRAD: Card = Card {
    id: "freeze-vs-nograd",
    title: "Freezing all parameters builds no graph; partial freezing is in between",
    asks: "How does freezing parameters with requires_grad_(False) compare with torch.no_grad() in the memory a forward pass leaves behind?",
    labels: ["backbone frozen with requires_grad_(False)", "forward pass under torch.no_grad()"],
    setup: freeze_setup,
    needs: Needs::Any,
    claim: "With an input that does not require grad, requires_grad_(False) on every parameter records no graph and retains what torch.no_grad() retains; freezing only the backbone still keeps the activations the trainable part saves for backward.",
    statements: &[
        Said::torch("requires_grad_(False) leaves grad mode on: autograd records an op when any of its inputs requires grad, so a frozen model records again for an input that requires grad.", "test_grad_modes.py::test_a_frozen_model_records_again_for_an_input_that_requires_grad"),
        Said::torch("With every parameter frozen and an input that does not require grad, no op records or saves anything, and the output has no graph.", "test_grad_modes.py::test_every_parameter_frozen_records_no_graph"),
        Said::run("Here the fully frozen pass retained the same bytes as the pass under torch.no_grad(), within 1%.", &[ALL_FROZEN, NO_GRAD]),
        Said::torch("With the backbone frozen, the ops of the trainable part still record and save their inputs, the backbone's last activation among them; the frozen ops save nothing.", "test_grad_modes.py::test_a_partly_frozen_model_saves_only_for_its_trainable_part"),
        Said::run("Here the partly frozen pass retained more than no_grad and less than the all-trainable pass.", &[BACKBONE_FROZEN_LAST_STAGE_HEAD_TRAINABLE, NO_GRAD, ALL_TRAINABLE]),
    ],
    source: "https://pytorch.org/docs/stable/notes/autograd.html#setting-requires-grad",
    pitfall: "for p in backbone.parameters(): p.requires_grad_(False)\ny = model(x)  # layer4 and fc keep requires_grad=True",
    fix: "with torch.no_grad():\n    y = model(x)",
    threshold: "compares the memory retained while the output is alive (allocated minus the baseline, read right after the pass), which is the output plus the graph's saved tensors — not the peak, which on a GPU is the stem's outputs in every variant. Confirmed when all-frozen retains the same bytes as no_grad within 1% (the band the question is graded by), and the partly frozen model retains strictly more than no_grad and strictly less than all trainable. Regime: any; byte counts repeat exactly, and on a GPU (ResNet-18, batch 64, 224²) all trainable retains every layer's saved activations (over a GB), the frozen backbone only what layer 4 and the classifier save (tens of MB), no_grad only the output",
    question: super::super::ratio("ResNet-18 with every parameter frozen (requires_grad_(False)) and autograd on, its input not requiring grad: the memory retained while its output is alive, against the same pass under torch.no_grad()?", ALL_FROZEN, NO_GRAD, super::super::SAME_BYTES),
    experiment: freeze_vs_nograd,
};

/// The freeze card's rule over the retained bytes (see its threshold): all frozen against
/// no_grad by the band its question is graded by ([`bytes_compared`]), in the words the
/// reason carries.
pub fn freeze_rule(full: u64, partial: u64, frozen: u64, nograd: u64) -> Decision {
    let (band, words) = bytes_compared(frozen as f64, nograd as f64);
    let same = band == protocol::Choice::Same;
    let between = nograd < partial && partial < full;
    let figures = format!(
        "Retained while the output is alive, above the weights and input: all frozen against no_grad, {words}; all trainable {:.2} MiB, backbone frozen {:.2} MiB.",
        mib(full),
        mib(partial),
    );
    Decision::rule(same && between, figures.clone(), figures)
}

/// What freeze-vs-nograd runs, and the line its report is measured on.
pub(super) fn freeze_plan(ctx: &Ctx) -> (Setup, String) {
    let setup = Setup::new(ctx, ModelId::Resnet18, (8, 64), GradMode::Enabled);
    let line = format!("{}, a fresh model", setup.describe());
    (setup, line)
}

pub(super) fn freeze_setup(ctx: &Ctx) -> Vec<String> {
    vec![
        freeze_plan(ctx).1,
        "Four forward passes: all parameters trainable; backbone frozen (the last stage and the classifier trainable); every parameter frozen; all trainable under torch.no_grad()".into(),
        "The input never requires grad; weights and input in fp32; the model in eval()".into(),
        "Memory: the bytes still allocated right after the pass while its output is alive, above the weights and the input".into(),
    ]
}

pub(super) fn freeze_vs_nograd(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let (setup, measured_on) = freeze_plan(ctx);
    // A fresh model: freezing changes requires_grad, which the cached model must keep.
    let mut model = setup.fresh(lab, ctx)?;
    let x = setup.input(&model, ctx)?;
    let spec = |grad| RunSpec {
        grad,
        ..setup.spec.clone()
    };
    let full = pass_memory(lab, ctx, &model, &x, &spec(GradMode::Enabled))?;
    let nograd = pass_memory(lab, ctx, &model, &x, &spec(GradMode::NoGrad))?;
    let mut traces = vec![
        trace_pass(lab, ctx, &model, &x, &spec(GradMode::Enabled))?,
        trace_pass(lab, ctx, &model, &x, &spec(GradMode::NoGrad))?,
    ];
    // The last stage and the classifier stay trainable: a common fine-tuning setup.
    let trainable = |name: &str| {
        name.starts_with("layer4") || name.starts_with("fc") || name.starts_with("classifier")
    };
    for (name, t) in model.vs.variables() {
        // Only parameters: BatchNorm's running statistics are buffers and never require grad.
        if t.requires_grad() {
            let _ = t.set_requires_grad(trainable(&name));
        }
    }
    let partial = pass_memory(lab, ctx, &model, &x, &spec(GradMode::Enabled))?;
    traces.insert(1, trace_pass(lab, ctx, &model, &x, &spec(GradMode::Enabled))?);
    model.vs.freeze();
    let frozen = pass_memory(lab, ctx, &model, &x, &spec(GradMode::Enabled))?;
    traces.insert(2, trace_pass(lab, ctx, &model, &x, &spec(GradMode::Enabled))?);
    let all = [full, partial, frozen, nograd];
    let labels = vec![
        "all trainable".to_string(),
        "backbone frozen".into(),
        "all frozen".into(),
        "no_grad".into(),
    ];
    let labels_for_traces = labels.clone();
    Ok(Outcome::new(
        freeze_rule(
            full.retained,
            partial.retained,
            frozen.retained,
            nograd.retained,
        ),
        measured_on,
        ChartKind::Bar,
    )
    .figures(vec![
        fig(ALL_TRAINABLE, full.retained as f64),
        fig(
            BACKBONE_FROZEN_LAST_STAGE_HEAD_TRAINABLE,
            partial.retained as f64,
        ),
        fig(ALL_FROZEN, frozen.retained as f64),
        fig(NO_GRAD, nograd.retained as f64),
        fig(
            ALL_TRAINABLE_PEAK_ABOVE_BASELINE,
            full.peak_above as f64,
        ),
        fig(
            NO_GRAD_PEAK_ABOVE_BASELINE,
            nograd.peak_above as f64,
        ),
    ])
    .series(vec![
        series(
            RETAINED_WHILE_THE_OUTPUT_IS_ALIVE_MIB,
            labels.clone(),
            all.iter().map(|m| mib(m.retained)).collect(),
        ),
        series(
            PEAK_ABOVE_BASELINE_MIB,
            labels,
            all.iter().map(|m| mib(m.peak_above)).collect(),
        ),
    ])
    .traces(
        labels_for_traces
            .into_iter()
            .zip(traces)
            .map(|(label, trace)| NamedTrace { label, trace })
            .collect(),
    ))
}
