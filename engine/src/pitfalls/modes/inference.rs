//! inference-vs-nograd: torch.inference_mode() saves what torch.no_grad() saves (nothing)
//! and skips autograd's dispatch; the tensors it makes cannot be saved for backward outside it.

use protocol::{ChartKind, GradMode, ModelId, Report, RunFailure, RunSpec};
use tch::{Kind, Tensor};

use super::super::kit::{describe, fig, fig_of, measure, named, series, Ctx, Decision, Outcome, Shift};
use super::super::python::{self, beside};
use super::super::{Card, Needs, Said};
use crate::lab::Lab;
use crate::torch_call::{catch_torch, tch_device, torch_failure};
use crate::torch_ext::InferenceModeGuard;
use crate::pitfalls::figures::{ERROR_RAISED};
use crate::pitfalls::kit::{FigureName, INTERVAL_HIGH, INTERVAL_LOW};
use protocol::Unit;

// The figures this file's cards report, each defined once (see `kit::figure`).
pub const EACH_NO_GRAD_P50: FigureName = FigureName::new("{} no_grad p50", Unit::Ms);
pub const EACH_INFERENCE_MODE_P50: FigureName = FigureName::new("{} inference_mode p50", Unit::Ms);
pub const EACH_LATENCY_RATIO_INFERENCE_MODE_OVER_NO_GRAD: FigureName = FigureName::new("{} latency ratio inference_mode / no_grad", Unit::Ratio);
pub const EACH_LATENCY_RATIO_CI_LOW: FigureName = FigureName::new("{} latency ratio, 95% interval low", Unit::Ratio);
pub const EACH_LATENCY_RATIO_CI_HIGH: FigureName = FigureName::new("{} latency ratio, 95% interval high", Unit::Ratio);
pub const EACH_NO_GRAD_PEAK_ABOVE_BASELINE: FigureName = FigureName::new("{} no_grad peak above baseline", Unit::Bytes);
pub const EACH_INFERENCE_MODE_PEAK_ABOVE_BASELINE: FigureName = FigureName::new("{} inference_mode peak above baseline", Unit::Bytes);
pub const CLONE_FIX_WORKS: FigureName = FigureName::new("clone() fix works", Unit::Bool);
pub const NO_GRAD_P50_MS: FigureName = FigureName::new("no_grad p50 (ms)", Unit::Ms);
pub const INFERENCE_MODE_P50_MS: FigureName = FigureName::new("inference_mode p50 (ms)", Unit::Ms);
pub const ANY_LATENCY_RATIO_INFERENCE_MODE_OVER_NO_GRAD: FigureName = EACH_LATENCY_RATIO_INFERENCE_MODE_OVER_NO_GRAD.ending("* latency ratio inference_mode / no_grad");
pub const ANY_LATENCY_RATIO_INFERENCE_MODE_OVER_NO_GRAD_CI_LOW: FigureName = INTERVAL_LOW.ending("* latency ratio inference_mode / no_grad, 95% interval low");
pub const ANY_LATENCY_RATIO_INFERENCE_MODE_OVER_NO_GRAD_CI_HIGH: FigureName = INTERVAL_HIGH.ending("* latency ratio inference_mode / no_grad, 95% interval high");

pub const INFERENCE_VS_NOGRAD: Card = Card {
    id: "inference-vs-nograd",
    title: "inference_mode uses the memory no_grad uses, and its tensors cannot be saved for backward",
    asks: "How does torch.inference_mode() compare with torch.no_grad(): in memory, in speed, and in what its outputs can be used for?",
    labels: ["backbone under inference_mode, its features straight into the head", "backbone under inference_mode, feats.clone() before the head"],
    setup: inference_setup,
    needs: Needs::Any,
    claim: "torch.inference_mode() records no graph, exactly as torch.no_grad() does, so it uses the same memory; it also skips autograd's dispatch, and the tensors it makes carry no version counter, track no views and cannot be saved for backward once outside it. What skipping that work saves per op is timed here from Rust through libtorch, which pays no Python interpreter per op; a team's Python code pays the interpreter on every op as well, and where this server has a Python the same runs timed from it are shown beside Gradless's: the gap that code sees.",
    statements: &[
        Said::torch("Neither torch.no_grad() nor torch.inference_mode() saves anything for backward: both free each activation once it is used.", "test_grad_modes.py::test_inference_mode_saves_nothing_like_no_grad"),
        Said::run("Here inference_mode's peak memory matched no_grad's on both models, within 5%.", &[INFERENCE_PEAK_GAP]),
        Said::torch("Under torch.no_grad() every op still passes through autograd's dispatch kernel, which then records nothing; torch.inference_mode() excludes autograd's dispatch keys for every op, and the tensors it makes carry none.", "test_grad_modes.py::test_inference_mode_skips_autograds_dispatch_and_no_grad_does_not"),
        Said::torch("Tensors made under inference_mode (inference tensors) have no version counter.", "test_grad_modes.py::test_inference_tensors_have_no_version_counter"),
        Said::torch("A view of an inference tensor is not tracked as a view (it has no base), inside the mode or out; a view of a normal tensor made inside the mode is still tracked, and is a normal tensor.", "test_grad_modes.py::test_views_of_inference_tensors_are_not_tracked_as_views"),
        Said::run("What skipping that work saves per op is known here for libtorch called from Rust, with no Python interpreter per op: the Tiny MLP's p50 ratio at batch 1 and its 95% interval say whether it shows beyond this run's noise.", &[ANY_LATENCY_RATIO_INFERENCE_MODE_OVER_NO_GRAD, ANY_LATENCY_RATIO_INFERENCE_MODE_OVER_NO_GRAD_CI_LOW, ANY_LATENCY_RATIO_INFERENCE_MODE_OVER_NO_GRAD_CI_HIGH]),
        Said::torch("An inference tensor cannot be saved for backward: outside the mode, an op that must save it (a matmul with a weight that requires grad) raises.", "test_grad_modes.py::test_inference_tensors_cannot_be_saved_for_backward"),
        Said::torch("An op whose backward needs no saved input, such as an addition, accepts an inference tensor.", "test_grad_modes.py::test_an_op_that_saves_nothing_accepts_an_inference_tensor"),
        Said::torch("A clone made outside the mode is a normal tensor, which autograd can save.", "test_grad_modes.py::test_a_clone_outside_the_mode_is_a_normal_tensor"),
        Said::run("Here libtorch raised that error for the matmul, and the clone() fix worked.", &[ERROR_RAISED, CLONE_FIX_WORKS]),
        Said::torch("An in-place update to an inference tensor outside the mode raises too.", "test_grad_modes.py::test_inplace_on_an_inference_tensor_outside_the_mode_raises"),
    ],
    source: "https://pytorch.org/docs/stable/generated/torch.inference_mode.html",
    pitfall: "with torch.inference_mode():\n    feats = backbone(x)\nloss = head(feats).sum()  # head trainable, autograd on",
    fix: "with torch.inference_mode():\n    feats = backbone(x)\nloss = head(feats.clone()).sum()  # clone outside the mode",
    threshold: "confirmed when inference_mode's peak memory is within 5% of no_grad's on every model tried, saving an inference tensor for backward raises libtorch's error, and the clone() fix works. Latency does not decide the verdict: the figures show each model's latency ratio, timed from Rust through libtorch (no Python per op), labelled within or beyond noise by the 95% bootstrap interval of the ratio of medians over the timed iterations. Where the server has a Python, the same runs are timed from it too (figures \"Python: …\", and \"Python / Gradless: …\", Python's time over Gradless's): they pay the interpreter's per-op cost as a team's code does, are labelled against their noise the same way, and do not decide the verdict either. Regime: any; peaks are exact byte counts, and on a GPU (tiny MLP batch 1, launch-bound; ResNet-18 batch 32, 224², GPU-bound) no_grad and inference_mode free the same activations",
    question: super::super::value("The Tiny MLP at batch 1 (the first model): its p50 latency under torch.inference_mode() as a multiple of its p50 under torch.no_grad()? Timed from Rust through libtorch, so no Python interpreter runs per op; in eval(), a pass is about ten small ops on one 512-feature sample (linear layers 512 → 512, 512 → 512 and 512 → 10, two BatchNorms, two ReLUs, two Dropouts that pass everything through). A judgment about what dominates a pass this small — the framework's per-op work or the arithmetic — and whether any difference shows beyond the run's noise.", ANY_LATENCY_RATIO_INFERENCE_MODE_OVER_NO_GRAD, super::super::SAME_TIME),
    experiment: inference_vs_nograd,
};

/// The runs inference-vs-nograd alternates, per model: the no_grad spec (inference_mode's
/// is the same with its grad mode). Per-op overhead shows with many short iterations; the
/// larger model gets enough for the interval to be able to tell a difference from noise.
fn inference_plan(ctx: &Ctx) -> Vec<(ModelId, u32, RunSpec)> {
    [
        (ModelId::TinyMlp, 1),
        (ctx.model(ModelId::Resnet18), ctx.batch(4, 32)),
    ]
    .into_iter()
    .map(|(model, batch)| {
        let mut spec = ctx.spec(model, batch, true, GradMode::NoGrad);
        spec.iters = if model == ModelId::TinyMlp { 100 } else { spec.iters.max(5) };
        (model, batch, spec)
    })
    .collect()
}

/// How many runs of each mode alternate, per model: drift on a busy machine then does not
/// read as a difference between the modes.
const INFERENCE_ROUNDS: usize = 2;

/// The line inference-vs-nograd's report is measured on: its models, in order.
fn inference_measured_on(plan: &[(ModelId, u32, RunSpec)]) -> String {
    plan.iter()
        .map(|(model, batch, spec)| describe(*model, batch, spec.resolved_input_size()))
        .collect::<Vec<_>>()
        .join("; ")
}

fn inference_setup(ctx: &Ctx) -> Vec<String> {
    let plan = inference_plan(ctx);
    let runs: Vec<String> = plan
        .iter()
        .map(|(model, _, spec)| {
            format!(
                "{}: {INFERENCE_ROUNDS} runs of each mode, alternating, {} timed iterations each",
                model.display_name(),
                spec.iters
            )
        })
        .collect();
    vec![
        inference_measured_on(&plan),
        "Timed and measured for memory: forward passes under torch.no_grad(), and the same under torch.inference_mode(); both in eval(), fp32".into(),
        runs.join("; "),
        crate::pitfalls::kit::arms_after("Also tried, as in the code: ", "a tensor made under inference_mode, then used by an op whose other input requires grad", "a tensor made under inference_mode and .clone()d outside the mode, then used by that op"),
        "Timed from Rust through libtorch: no Python interpreter runs per op".into(),
        python::SETUP.into(),
    ]
}

fn inference_vs_nograd(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let mut figures = vec![];
    let mut labels = vec![];
    let mut notes = vec![];
    let (mut p50_ng, mut p50_im) = (vec![], vec![]);
    let mut traces = vec![];
    let mut memory_equal = true;
    let mut largest_gap: f64 = 0.0;
    let plan = inference_plan(ctx);
    for (i, (model, batch, ng_spec)) in plan.iter().cloned().enumerate() {
        let rounds = INFERENCE_ROUNDS;
        let im_spec = RunSpec {
            grad: GradMode::InferenceMode,
            ..ng_spec.clone()
        };
        let (mut ng, mut im) = (vec![], vec![]);
        for _ in 0..rounds {
            ng.push(measure(lab, ctx, ng_spec.clone())?);
            im.push(measure(lab, ctx, im_spec.clone())?);
        }
        let peak = |rs: &[Report]| {
            rs.iter()
                .map(|r| r.memory.peak_above_baseline_bytes)
                .max()
                .unwrap_or(0) as f64
        };
        if model != ModelId::TinyMlp {
            let name = model.as_str();
            traces.push(named(&format!("{name} no_grad"), &ng[0]));
            traces.push(named(&format!("{name} inference_mode"), &im[0]));
        }
        let (a, b) = (peak(&ng), peak(&im));
        let gap = (a - b).abs() / a.max(b).max(1.0);
        largest_gap = largest_gap.max(gap);
        memory_equal &= gap <= 0.05;
        let latencies = |rs: &[Report]| {
            rs.iter()
                .flat_map(|r| r.samples.iter().map(|s| s.latency_ms))
                .collect::<Vec<_>>()
        };
        let (ng_ms, im_ms) = (latencies(&ng), latencies(&im));
        let shift = Shift::of(&im_ms, &ng_ms);
        if i == 0 {
            // The question's arms, in its order: inference_mode over no_grad.
            figures.extend(super::super::kit::interval_figures(&INFERENCE_VS_NOGRAD.question, &shift));
        }
        let name = format!("{} b{batch}", model.as_str());
        figures.push(fig_of(EACH_NO_GRAD_P50, &[&name], shift.fast_p50));
        figures.push(fig_of(
            EACH_INFERENCE_MODE_P50, &[&name],
            shift.slow_p50,
        ));
        figures.push(fig_of(
            EACH_LATENCY_RATIO_INFERENCE_MODE_OVER_NO_GRAD, &[&name],
            shift.slow_p50 / shift.fast_p50,
        ));
        let (lo, hi) = shift.bounds();
        figures.push(fig_of(
            EACH_LATENCY_RATIO_CI_LOW, &[&name],
            lo,
        ));
        figures.push(fig_of(
            EACH_LATENCY_RATIO_CI_HIGH, &[&name],
            hi,
        ));
        figures.push(fig_of(
            EACH_NO_GRAD_PEAK_ABOVE_BASELINE, &[&name],
            a,
        ));
        figures.push(fig_of(
            EACH_INFERENCE_MODE_PEAK_ABOVE_BASELINE, &[&name],
            b,
        ));
        notes.push(format!(
            "{name}: inference_mode / no_grad latency {} over {} iterations each ({rounds} alternating runs); not part of the verdict.",
            shift.describe(),
            ng_ms.len()
        ));
        labels.push(name);
        p50_ng.push(shift.fast_p50);
        p50_im.push(shift.slow_p50);
    }
    // The same runs timed from Python, when the server has one: beside, never deciding.
    let mut from_python = vec![];
    let request = python::request(
        INFERENCE_VS_NOGRAD.id,
        ctx.device,
        lab.config().threads,
        lab.config().seed,
        serde_json::json!({
            "rounds": INFERENCE_ROUNDS,
            "models": plan.iter().map(|(model, batch, spec)| serde_json::json!({
                "label": format!("{} b{batch}", model.as_str()),
                "model": model.as_str(),
                "batch": batch,
                "size": spec.resolved_input_size(),
                "warmup": spec.warmup,
                "iters": spec.iters,
            })).collect::<Vec<_>>(),
        }),
    );
    let mut python_notes = vec![];
    if let Some(t) = python::ask(ctx.python, ctx.control, &request, &mut python_notes)? {
        for (model, batch, _) in &plan {
            let name = format!("{} b{batch}", model.as_str());
            let (Some(ng), Some(im)) = (t.arm(&format!("{name} no_grad")), t.arm(&format!("{name} inference_mode"))) else {
                continue;
            };
            let shift = Shift::of(im, ng);
            let (lo, hi) = shift.bounds();
            from_python.extend(beside(&figures, &EACH_NO_GRAD_P50.label(&[&name]), shift.fast_p50, "ms"));
            from_python.extend(beside(&figures, &format!("{name} inference_mode p50"), shift.slow_p50, "ms"));
            from_python.extend(beside(&figures, &format!("{name} latency ratio inference_mode / no_grad"), shift.slow_p50 / shift.fast_p50, "ratio"));
            from_python.extend(beside(&figures, &format!("{name} latency ratio, 95% interval low"), lo, "ratio"));
            from_python.extend(beside(&figures, &format!("{name} latency ratio, 95% interval high"), hi, "ratio"));
            let gradless = figures.iter().find(|f| f.name == EACH_NO_GRAD_P50.label(&[&name])).map_or(f64::NAN, |f| f.value);
            python_notes.push(format!(
                "{name} from Python: inference_mode / no_grad latency {} over {} iterations each; a no_grad pass took {:.3} ms from Python against {gradless:.3} ms from Rust (×{:.2}).",
                shift.describe(),
                ng.len(),
                shift.fast_p50,
                shift.fast_p50 / gradless
            ));
        }
    }
    // The live error, and the fix.
    let device = tch_device(ctx.device);
    let x = {
        let _g = InferenceModeGuard::enter().map_err(torch_failure)?;
        catch_torch(|| Tensor::ones([2, 2], (Kind::Float, device)) * 3)?
    };
    let w = catch_torch(|| Tensor::ones([2, 2], (Kind::Float, device)).set_requires_grad(true))?;
    let error = x
        .f_matmul(&w)
        .err()
        .map(|e| crate::torch_call::first_line(&e.to_string()));
    let fixed = x.copy().f_matmul(&w).is_ok();
    let raised = error
        .as_deref()
        .is_some_and(|e| e.contains("Inference tensors cannot be saved for backward"));
    let decision = if !memory_equal {
        Decision::rule(
            false,
            "",
            "inference_mode's peak memory differed from no_grad's by more than 5% here.",
        )
    } else {
        Decision::rule(
            raised && fixed,
            "Memory within 5% of no_grad on both models; saving an inference tensor for backward raised libtorch's error and clone() fixed it. Latency is shown apart, labelled against its noise.",
            "The inference-tensor error did not behave as documented here.",
        )
    };
    notes.insert(
        0,
        match &error {
            Some(e) => format!("libtorch said: {e}"),
            None => "no error was raised when saving an inference tensor for backward".into(),
        },
    );
    notes.insert(
        1,
        format!(
            "x.clone() outside the mode, then the same op: {}",
            if fixed { "works" } else { "fails" }
        ),
    );
    figures.push(fig(INFERENCE_PEAK_GAP, largest_gap));
    figures.push(fig(ERROR_RAISED, f64::from(u8::from(raised))));
    figures.push(fig(CLONE_FIX_WORKS, f64::from(u8::from(fixed))));
    // Python's figures after all of Gradless's: a question's `*` name finds Gradless's first.
    figures.extend(from_python);
    notes.extend(python_notes);
    Ok(Outcome::new(decision, inference_measured_on(&plan), ChartKind::Bar)
        .figures(figures)
        .series(vec![
            series(NO_GRAD_P50_MS, labels.clone(), p50_ng),
            series(INFERENCE_MODE_P50_MS, labels, p50_im),
        ])
        .notes(notes)
        .traces(traces))
}

/// inference-vs-nograd's figure for its memory statement: the largest gap, over the models
/// tried, between the two modes' peaks, as a share of the larger.
const INFERENCE_PEAK_GAP: FigureName = FigureName::new("peak above baseline: largest gap between the modes, share of the larger", Unit::Ratio);
