//! nograd-and-dropout: torch.no_grad() stops graph recording and nothing else; Dropout and
//! BatchNorm read the module's training flag, which only train()/eval() set.

use protocol::{ChartKind, FailureKind, GradMode, ModelId, RunFailure, RunSpec};
use tch::{Kind, Tensor};

use super::super::kit::{describe, fig, series, Ctx, Decision, Outcome};
use super::super::{Card, Needs, Said};
use super::max_abs_diff;
use crate::input::Input;
use crate::lab::{forward, Lab};
use crate::models::Model;
use crate::torch_call::{catch_torch, failure, tch_device};
use crate::pitfalls::kit::FigureName;
use protocol::Unit;

// The figures this file's cards report, each defined once (see `kit::figure`).
pub const TRAIN_NO_GRAD_MAX_DELTA_SAMPLE_0_WITH_OTHER_BATCH_MATES: FigureName = FigureName::new("train+no_grad: max |Δ| sample 0 with other batch-mates", Unit::Abs);
pub const EVAL_NO_GRAD_MAX_DELTA_SAME_INPUT_TWICE: FigureName = FigureName::new("eval+no_grad: max |Δ| same input twice", Unit::Abs);
pub const EVAL_NO_GRAD_MAX_DELTA_SAMPLE_0_WITH_OTHER_BATCH_MATES: FigureName = FigureName::new("eval+no_grad: max |Δ| sample 0 with other batch-mates", Unit::Abs);
pub const TRAIN_NO_GRAD_MAX_DELTA_SAME_INPUT_TWICE: FigureName = FigureName::new("train+no_grad: max |Δ| same input twice", Unit::Abs);
pub const TRAIN_NO_GRAD_RUNNING_MEAN_CHANGE: FigureName = FigureName::new("train+no_grad: running mean change", Unit::Abs);
pub const EVAL_NO_GRAD_RUNNING_MEAN_CHANGE: FigureName = FigureName::new("eval+no_grad: running mean change", Unit::Abs);
pub const TRAIN_NO_GRAD: FigureName = FigureName::new("train + no_grad", Unit::MaxAbsDelta);
pub const EVAL_NO_GRAD: FigureName = FigureName::new("eval + no_grad", Unit::MaxAbsDelta);

pub const NOGRAD_AND_DROPOUT: Card = Card {
    id: "nograd-and-dropout",
    title: "no_grad() does not switch Dropout and BatchNorm to inference",
    asks: "What does torch.no_grad() change about Dropout and BatchNorm in a model left in train() mode?",
    labels: ["torch.no_grad() only, model in train()", "model.eval() and torch.no_grad()"],
    setup: nograd_and_dropout_setup,
    needs: Needs::Any,
    claim: "torch.no_grad() leaves Dropout and BatchNorm in training behaviour: outputs are random, depend on batch-mates, and BatchNorm's running statistics change during \"inference\".",
    statements: &[
        Said::torch("torch.no_grad() only stops graph recording: a model in train() stays in train(), every module's training flag still True.", "test_grad_modes.py::test_no_grad_leaves_train_mode_on"),
        Said::torch("Dropout reads that flag, not grad mode: in train() it zeroes a random share of the units and scales up the rest, under no_grad as with grad.", "test_grad_modes.py::test_dropout_stays_random_under_no_grad_in_train"),
        Said::run("Here the same input run twice in train() under torch.no_grad() gave different outputs.", &[TRAIN_NO_GRAD_MAX_DELTA_SAME_INPUT_TWICE]),
        Said::torch("BatchNorm in train() normalises with the batch's own mean and variance and updates its running statistics, under no_grad too.", "test_grad_modes.py::test_batchnorm_uses_the_batch_and_updates_its_running_stats_under_no_grad"),
        Said::run("Here one sample's output changed with its batch-mates, and BatchNorm's running mean moved during a pass under torch.no_grad().", &[TRAIN_NO_GRAD_MAX_DELTA_SAMPLE_0_WITH_OTHER_BATCH_MATES, TRAIN_NO_GRAD_RUNNING_MEAN_CHANGE]),
        Said::run("In eval() under the same torch.no_grad(), none of the three moved: Dropout passes every unit through and BatchNorm uses its running statistics.", &[EVAL_NO_GRAD_MAX_DELTA_SAME_INPUT_TWICE, EVAL_NO_GRAD_MAX_DELTA_SAMPLE_0_WITH_OTHER_BATCH_MATES, EVAL_NO_GRAD_RUNNING_MEAN_CHANGE]),
    ],
    source: "https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.eval",
    pitfall: "with torch.no_grad():\n    y = model(x)  # the model is in train() mode",
    fix: "model.eval()\nwith torch.no_grad():\n    y = model(x)",
    threshold: "confirmed when, in train mode under no_grad, the same input twice differs by more than 1e-6 (Dropout), one sample's output changes with its batch-mates by more than 1e-6 (BatchNorm), and a running mean changes; repeating the same computation on the same kernels is bit-identical (the eval() figures read 0), so rounding cannot reach 1e-6. Regime: any; the effects are of order one (Dropout with p = 0.5 zeroes about half the units), whatever the device",
    question: super::super::value("The Tiny MLP (BatchNorm + Dropout) in train() mode under torch.no_grad(): does the same input give a different output when run twice?", TRAIN_NO_GRAD_MAX_DELTA_SAME_INPUT_TWICE, super::super::Ask::YesNo),
    experiment: nograd_and_dropout,
};

/// What nograd-and-dropout runs (always the tiny MLP: it has both Dropout and BatchNorm):
/// its input size, its batch, and the line its report is measured on.
fn nograd_plan() -> (u32, i64, String) {
    let size = ModelId::TinyMlp.input().default;
    let batch = 16;
    let line = format!(
        "{}, a fresh model so the cached one keeps its statistics",
        describe(ModelId::TinyMlp, batch, size)
    );
    (size, batch, line)
}

fn nograd_and_dropout_setup(_: &Ctx) -> Vec<String> {
    let (size, _, line) = nograd_plan();
    vec![
        line,
        super::super::memory::architecture(ModelId::TinyMlp, size).unwrap_or_default(),
        crate::pitfalls::kit::arms("model in train() mode, forward passes under torch.no_grad()", "model.eval(), forward passes under torch.no_grad()"),
        "Each mode runs: the same input twice; sample 0 with two different sets of batch-mates; one pass, reading BatchNorm's running mean before and after".into(),
        "Differences are the largest absolute difference between the two outputs, in fp32".into(),
    ]
}

fn nograd_and_dropout(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let device = tch_device(ctx.device);
    let (size, batch, measured_on) = nograd_plan();
    // A fresh model: train-mode passes change BatchNorm's running statistics, and the lab's
    // cached models must stay as other runs left them.
    tch::manual_seed(lab.config().seed);
    let model = catch_torch(|| Model::build(ModelId::TinyMlp, device, size))?;
    let x = catch_torch(|| Tensor::randn([batch, size as i64], (Kind::Float, device)))?;
    let mates = x.copy();
    catch_torch(|| {
        mates.narrow(0, 1, batch - 1).copy_(&Tensor::randn(
            [batch - 1, size as i64],
            (Kind::Float, device),
        ))
    })?;
    let spec = |eval| RunSpec {
        eval,
        grad: GradMode::NoGrad,
        ..RunSpec::default()
    };
    let run = |x: &Tensor, eval: bool| {
        forward(&model, &Input::one(x.shallow_clone()), &spec(eval), ctx.device)
    };

    let dropout_train = max_abs_diff(&run(&x, false)?, &run(&x, false)?);
    let dropout_eval = max_abs_diff(&run(&x, true)?, &run(&x, true)?);
    // Batch-mates: compare sample 0 with Dropout out of the way (the same seed for both
    // passes), so only BatchNorm's batch statistics can make them differ.
    let first = |x: &Tensor, eval: bool| -> Result<Tensor, RunFailure> {
        tch::manual_seed(7);
        Ok(run(x, eval)?.get(0))
    };
    let mates_train = max_abs_diff(&first(&x, false)?, &first(&mates, false)?);
    let mates_eval = max_abs_diff(&first(&x, true)?, &first(&mates, true)?);
    let running_mean = model
        .vs
        .variables()
        .into_iter()
        .find(|(n, _)| n.ends_with("running_mean"))
        .map(|(_, t)| t)
        .ok_or_else(|| {
            failure(
                FailureKind::Internal,
                "the MLP has no BatchNorm running mean",
            )
        })?;
    let before = running_mean.copy();
    drop(run(&x, false)?);
    let stats_train = max_abs_diff(&before, &running_mean);
    let before = running_mean.copy();
    drop(run(&x, true)?);
    let stats_eval = max_abs_diff(&before, &running_mean);

    let tol = 1e-6;
    let labels = vec![
        "same input twice (Dropout)".to_string(),
        "sample 0, other batch-mates (BatchNorm)".into(),
        "running mean change".into(),
    ];
    let figures = format!(
        "Under no_grad in train mode: same input twice differed by {dropout_train:.3e}, sample 0 changed by {mates_train:.3e} with other batch-mates, BatchNorm's running mean moved by {stats_train:.3e}. In eval mode: {dropout_eval:.1e}, {mates_eval:.1e}, {stats_eval:.1e}."
    );
    Ok(Outcome::new(
        Decision::rule(
            dropout_train > tol && mates_train > tol && stats_train > 0.0,
            figures.clone(),
            figures,
        ),
        measured_on,
        ChartKind::Bar,
    )
    .figures(vec![
        fig(
            TRAIN_NO_GRAD_MAX_DELTA_SAME_INPUT_TWICE,
            dropout_train,
        ),
        fig(
            EVAL_NO_GRAD_MAX_DELTA_SAME_INPUT_TWICE,
            dropout_eval,
        ),
        fig(
            TRAIN_NO_GRAD_MAX_DELTA_SAMPLE_0_WITH_OTHER_BATCH_MATES,
            mates_train,
        ),
        fig(
            EVAL_NO_GRAD_MAX_DELTA_SAMPLE_0_WITH_OTHER_BATCH_MATES,
            mates_eval,
        ),
        fig(TRAIN_NO_GRAD_RUNNING_MEAN_CHANGE, stats_train),
        fig(EVAL_NO_GRAD_RUNNING_MEAN_CHANGE, stats_eval),
    ])
    .series(vec![
        series(
            TRAIN_NO_GRAD,
            labels.clone(),
            vec![dropout_train, mates_train, stats_train],
        ),
        series(
            EVAL_NO_GRAD,
            labels,
            vec![dropout_eval, mates_eval, stats_eval],
        ),
    ]))
}
