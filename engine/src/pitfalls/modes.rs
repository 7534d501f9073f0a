//! The switches people conflate: train/eval, the grad modes, autocast, and the classic
//! table that sets them side by side.

use protocol::{
    Autocast, ChartKind, DeviceKind, FailureKind, GradMode, ModelId, Report, RunFailure, RunSpec,
};
use tch::{Kind, Tensor};

use super::kit::{
    describe, fig, measure, mib, named, series, Ctx, Decision, Outcome, Setup, Shift,
};
use super::python::{self, beside};
use super::{Card, Needs, Said};
use crate::input::Input;
use crate::lab::{forward, Lab};
use crate::models::Model;
use crate::torch_call::{catch_torch, failure, tch_device, torch_failure};
use crate::torch_ext::{AutocastGuard, InferenceModeGuard, LowPrecision};

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    (a.to_kind(Kind::Float) - b.to_kind(Kind::Float))
        .abs()
        .max()
        .double_value(&[])
}

pub const NOGRAD_NOT_EVAL: Card = Card {
    id: "nograd-not-eval",
    title: "no_grad() does not switch Dropout and BatchNorm to inference",
    asks: "What does torch.no_grad() change about Dropout and BatchNorm in a model left in train() mode?",
    labels: ["torch.no_grad() only, model in train()", "model.eval() and torch.no_grad()"],
    setup: nograd_not_eval_setup,
    needs: Needs::Any,
    claim: "torch.no_grad() leaves Dropout and BatchNorm in training behaviour: outputs are random, depend on batch-mates, and BatchNorm's running statistics change during \"inference\".",
    statements: &[
        Said::torch("torch.no_grad() only stops graph recording: a model in train() stays in train(), every module's training flag still True.", "test_grad_modes.py::test_no_grad_leaves_train_mode_on"),
        Said::torch("Dropout reads that flag, not grad mode: in train() it zeroes a random share of the units and scales up the rest, under no_grad as with grad.", "test_grad_modes.py::test_dropout_stays_random_under_no_grad_in_train"),
        Said::run("Here the same input run twice in train() under torch.no_grad() gave different outputs.", &["train+no_grad: max |Δ| same input twice"]),
        Said::torch("BatchNorm in train() normalises with the batch's own mean and variance and updates its running statistics, under no_grad too.", "test_grad_modes.py::test_batchnorm_uses_the_batch_and_updates_its_running_stats_under_no_grad"),
        Said::run("Here one sample's output changed with its batch-mates, and BatchNorm's running mean moved during a pass under torch.no_grad().", &["train+no_grad: max |Δ| sample 0 with other batch-mates", "train+no_grad: running mean change"]),
        Said::run("In eval() under the same torch.no_grad(), none of the three moved: Dropout passes every unit through and BatchNorm uses its running statistics.", &["eval+no_grad: max |Δ| same input twice", "eval+no_grad: max |Δ| sample 0 with other batch-mates", "eval+no_grad: running mean change"]),
    ],
    source: "https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.eval",
    pitfall: "with torch.no_grad():\n    y = model(x)  # the model is in train() mode",
    fix: "model.eval()\nwith torch.no_grad():\n    y = model(x)",
    threshold: "confirmed when, in train mode under no_grad, the same input twice differs by more than 1e-6 (Dropout), one sample's output changes with its batch-mates by more than 1e-6 (BatchNorm), and a running mean changes; repeating the same computation on the same kernels is bit-identical (the eval() figures read 0), so rounding cannot reach 1e-6. Regime: any; the effects are of order one (Dropout with p = 0.5 zeroes about half the units), whatever the device",
    question: super::value("The Tiny MLP (BatchNorm + Dropout) in train() mode under torch.no_grad() (A): does the same input give a different output when run twice?", "train+no_grad: max |Δ| same input twice", "abs", super::Ask::YesNo),
    experiment: nograd_not_eval,
};

/// What nograd-not-eval runs (always the tiny MLP: it has both Dropout and BatchNorm):
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

fn nograd_not_eval_setup(_: &Ctx) -> Vec<String> {
    let (size, _, line) = nograd_plan();
    vec![
        line,
        super::memory::architecture(ModelId::TinyMlp, size).unwrap_or_default(),
        "A: model in train() mode, forward passes under torch.no_grad(); B: model.eval(), forward passes under torch.no_grad()".into(),
        "Each mode runs: the same input twice; sample 0 with two different sets of batch-mates; one pass, reading BatchNorm's running mean before and after".into(),
        "Differences are the largest absolute difference between the two outputs, in fp32".into(),
    ]
}

fn nograd_not_eval(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
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
            "train+no_grad: max |Δ| same input twice",
            dropout_train,
            "abs",
        ),
        fig(
            "eval+no_grad: max |Δ| same input twice",
            dropout_eval,
            "abs",
        ),
        fig(
            "train+no_grad: max |Δ| sample 0 with other batch-mates",
            mates_train,
            "abs",
        ),
        fig(
            "eval+no_grad: max |Δ| sample 0 with other batch-mates",
            mates_eval,
            "abs",
        ),
        fig("train+no_grad: running mean change", stats_train, "abs"),
        fig("eval+no_grad: running mean change", stats_eval, "abs"),
    ])
    .series(vec![
        series(
            "train + no_grad",
            "max |Δ|",
            labels.clone(),
            vec![dropout_train, mates_train, stats_train],
        ),
        series(
            "eval + no_grad",
            "max |Δ|",
            labels,
            vec![dropout_eval, mates_eval, stats_eval],
        ),
    ]))
}

pub const INFERENCE_VS_NOGRAD: Card = Card {
    id: "inference-vs-nograd",
    title: "inference_mode uses the memory no_grad uses, and its tensors cannot be saved for backward",
    asks: "How does torch.inference_mode() compare with torch.no_grad(): in memory, in speed, and in what its outputs can be used for?",
    labels: ["backbone under inference_mode, its features straight into the head", "the same, with feats.clone() before the head"],
    setup: inference_setup,
    needs: Needs::Any,
    claim: "torch.inference_mode() records no graph, exactly as torch.no_grad() does, so it uses the same memory; it also skips autograd's dispatch, version counters and view tracking, and the tensors it makes cannot be saved for backward once outside it. What skipping that work saves per op is timed here from Rust through libtorch, which pays no Python interpreter per op; a team's Python code pays the interpreter on every op as well, and where this server has a Python the same runs timed from it are shown beside Gradless's: the gap that code sees.",
    statements: &[
        Said::torch("Neither torch.no_grad() nor torch.inference_mode() saves anything for backward: both free each activation once it is used.", "test_grad_modes.py::test_inference_mode_saves_nothing_like_no_grad"),
        Said::run("Here inference_mode's peak memory matched no_grad's on both models, within 5%.", &[INFERENCE_PEAK_GAP]),
        Said::torch("Under torch.no_grad() every op still passes through autograd's dispatch kernel, which then records nothing; torch.inference_mode() excludes autograd's dispatch keys for every op, and the tensors it makes carry none.", "test_grad_modes.py::test_inference_mode_skips_autograds_dispatch_and_no_grad_does_not"),
        Said::torch("Tensors made under inference_mode (inference tensors) have no version counter.", "test_grad_modes.py::test_inference_tensors_have_no_version_counter"),
        Said::torch("Views made under inference_mode are not tracked as views.", "test_grad_modes.py::test_inference_mode_does_not_track_views"),
        Said::run("What skipping that work saves per op is known here for libtorch called from Rust, with no Python interpreter per op: the Tiny MLP's p50 ratio at batch 1 and its 95% interval say whether it shows beyond this run's noise.", &["* latency ratio inference_mode / no_grad", "* latency ratio inference_mode / no_grad, 95% interval low", "* latency ratio inference_mode / no_grad, 95% interval high"]),
        Said::torch("An inference tensor cannot be saved for backward: outside the mode, an op that must save it (a matmul with a weight that requires grad) raises.", "test_grad_modes.py::test_inference_tensors_cannot_be_saved_for_backward"),
        Said::torch("An op whose backward needs no saved input, such as an addition, accepts an inference tensor.", "test_grad_modes.py::test_an_op_that_saves_nothing_accepts_an_inference_tensor"),
        Said::torch("A clone made outside the mode is a normal tensor, which autograd can save.", "test_grad_modes.py::test_a_clone_outside_the_mode_is_a_normal_tensor"),
        Said::run("Here libtorch raised that error for the matmul, and the clone() fix worked.", &["error raised", "clone() fix works"]),
        Said::torch("An in-place update to an inference tensor outside the mode raises too.", "test_grad_modes.py::test_inplace_on_an_inference_tensor_outside_the_mode_raises"),
    ],
    source: "https://pytorch.org/docs/stable/generated/torch.inference_mode.html",
    pitfall: "with torch.inference_mode():\n    feats = backbone(x)\nloss = head(feats).sum()  # head trainable, autograd on",
    fix: "with torch.inference_mode():\n    feats = backbone(x)\nloss = head(feats.clone()).sum()  # clone outside the mode",
    threshold: "confirmed when inference_mode's peak memory is within 5% of no_grad's on every model tried, saving an inference tensor for backward raises libtorch's error, and the clone() fix works. Latency does not decide the verdict: the figures show each model's latency ratio, timed from Rust through libtorch (no Python per op), labelled within or beyond noise by the 95% bootstrap interval of the ratio of medians over the timed iterations. Where the server has a Python, the same runs are timed from it too (figures \"Python: …\", and \"Python / Gradless: …\", Python's time over Gradless's): they pay the interpreter's per-op cost as a team's code does, are labelled against their noise the same way, and do not decide the verdict either. Regime: any; peaks are exact byte counts, and on a GPU (tiny MLP batch 1, launch-bound; ResNet-18 batch 32, 224², GPU-bound) no_grad and inference_mode free the same activations",
    question: super::value("The Tiny MLP at batch 1 (the first model): its p50 latency under torch.inference_mode() as a multiple of its p50 under torch.no_grad()? Timed from Rust through libtorch, so no Python interpreter runs per op; in eval(), a pass is about ten small ops on one 512-feature sample (linear layers 512 → 512, 512 → 512 and 512 → 10, two BatchNorms, two ReLUs, two Dropouts that pass everything through). A judgment about what dominates a pass this small — the framework's per-op work or the arithmetic — and whether any difference shows beyond the run's noise.", "* latency ratio inference_mode / no_grad", "ratio", super::SAME_TIME),
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
        "Also tried, as in A and B: a tensor made under inference_mode, then used by an op whose other input requires grad (A); the same after .clone() outside the mode (B)".into(),
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
            figures.extend(super::kit::interval_figures(&INFERENCE_VS_NOGRAD.question, &shift));
        }
        let name = format!("{} b{batch}", model.as_str());
        figures.push(fig(&format!("{name} no_grad p50"), shift.fast_p50, "ms"));
        figures.push(fig(
            &format!("{name} inference_mode p50"),
            shift.slow_p50,
            "ms",
        ));
        figures.push(fig(
            &format!("{name} latency ratio inference_mode / no_grad"),
            shift.slow_p50 / shift.fast_p50,
            "ratio",
        ));
        let (lo, hi) = shift.bounds();
        figures.push(fig(
            &format!("{name} latency ratio, 95% interval low"),
            lo,
            "ratio",
        ));
        figures.push(fig(
            &format!("{name} latency ratio, 95% interval high"),
            hi,
            "ratio",
        ));
        figures.push(fig(
            &format!("{name} no_grad peak above baseline"),
            a,
            "bytes",
        ));
        figures.push(fig(
            &format!("{name} inference_mode peak above baseline"),
            b,
            "bytes",
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
            from_python.extend(beside(&figures, &format!("{name} no_grad p50"), shift.fast_p50, "ms"));
            from_python.extend(beside(&figures, &format!("{name} inference_mode p50"), shift.slow_p50, "ms"));
            from_python.extend(beside(&figures, &format!("{name} latency ratio inference_mode / no_grad"), shift.slow_p50 / shift.fast_p50, "ratio"));
            from_python.extend(beside(&figures, &format!("{name} latency ratio, 95% interval low"), lo, "ratio"));
            from_python.extend(beside(&figures, &format!("{name} latency ratio, 95% interval high"), hi, "ratio"));
            let gradless = figures.iter().find(|f| f.name == format!("{name} no_grad p50")).map_or(f64::NAN, |f| f.value);
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
    figures.push(fig(INFERENCE_PEAK_GAP, largest_gap, "ratio"));
    figures.push(fig("error raised", f64::from(u8::from(raised)), "bool"));
    figures.push(fig("clone() fix works", f64::from(u8::from(fixed)), "bool"));
    // Python's figures after all of Gradless's: a question's `*` name finds Gradless's first.
    figures.extend(from_python);
    notes.extend(python_notes);
    Ok(Outcome::new(decision, inference_measured_on(&plan), ChartKind::Bar)
        .figures(figures)
        .series(vec![
            series("no_grad p50 (ms)", "ms", labels.clone(), p50_ng),
            series("inference_mode p50 (ms)", "ms", labels, p50_im),
        ])
        .notes(notes)
        .traces(traces))
}

/// inference-vs-nograd's figure for its memory statement: the largest gap, over the models
/// tried, between the two modes' peaks, as a share of the larger.
const INFERENCE_PEAK_GAP: &str = "peak above baseline: largest gap between the modes, share of the larger";

pub const AUTOCAST: Card = Card {
    id: "autocast",
    title: "autocast lowers the math, not the weights",
    asks: "What does running a model under torch.autocast change, compared with plain fp32: the weights, the math, the output, the latency?",
    labels: ["model.half()", "fp32 model, forward pass inside torch.autocast(fp16)"],
    setup: autocast_setup,
    needs: Needs::Any,
    claim: "Autocast runs convolutions and matmuls (linear layers included) in fp16 or bf16 and leaves the weights in fp32, casting them as those ops run; the output differs a little from fp32, and whether it is faster depends on the hardware.",
    statements: &[
        Said::torch("Inside torch.autocast, convolutions and linear layers with fp32 weights return the low-precision dtype, and the weights stay fp32.", "test_grad_modes.py::test_autocast_runs_convolutions_and_linear_layers_low_and_keeps_fp32_weights"),
        Said::run("Here a linear layer of the model returned fp16 inside the fp16 region.", &["fp16 linear layer output is fp16"]),
        Said::run("Here the weights were still float32 after the passes.", &["weights still float32"]),
        Said::torch("With autograd on and under torch.no_grad(), autocast casts each weight that requires grad once and keeps the copy until the region ends.", "test_autocast.py::test_weights_are_cast_once_with_grad_and_under_no_grad"),
        Said::torch("Under torch.inference_mode() it casts the weights again at every call.", "test_autocast.py::test_inference_mode_skips_the_cast_cache"),
        Said::source("On CUDA, autocast runs layer_norm and group_norm in fp32 whatever the region's dtype.", "aten/src/ATen/autocast_mode.h", "AT_FORALL_FP32", "more-cards"),
        Said::source("On CUDA, it runs softmax, log_softmax and sum in fp32 too.", "aten/src/ATen/autocast_mode.h", "AT_FORALL_FP32_SET_OPT_DTYPE", "more-cards"),
        Said::torch("A CPU's autocast has no such rule for them: BatchNorm, LayerNorm, softmax and sum keep a low-precision input's dtype there.", "test_grad_modes.py::test_cpu_autocast_leaves_batchnorm_layer_norm_and_softmax_in_the_input_dtype"),
        Said::torch("An fp32 tensor plus a low-precision one is fp32 by type promotion, so a residual sum, and a model ending in one, can return fp32 under autocast.", "test_grad_modes.py::test_a_residual_sum_of_fp32_and_low_precision_is_fp32"),
        Said::torch("16-bit floats keep fewer mantissa bits, so the output differs from fp32 by a little, never by nothing.", "test_grad_modes.py::test_autocast_output_differs_a_little_from_fp32"),
        Said::run("Here the model's output under fp16 autocast differed from the fp32 output by a non-zero amount below 10% of its largest magnitude.", &["fp16 max |output - fp32 output|", "fp32 output max |value|"]),
        Said::run("Whether autocast is faster depends on the hardware's 16-bit arithmetic: this run's fp16 / fp32 p50 ratio and its 95% interval say it for this device.", &["fp16 p50", "fp32 p50", "fp16 p50 / fp32 p50, 95% interval low", "fp16 p50 / fp32 p50, 95% interval high"]),
    ],
    source: "https://pytorch.org/docs/stable/amp.html",
    pitfall: "model.half()  # casts the stored weights to fp16",
    fix: "with torch.autocast(device_type=\"cuda\", dtype=torch.float16):\n    y = model(x)",
    threshold: "confirmed when, for every low precision the device runs, a linear layer of the model (its own fp32 weight, inside the same autocast region) yields the low-precision dtype, the weights are still float32 afterwards, and the model's output differs from fp32 by a non-zero amount below 10% of the fp32 output's largest magnitude. The model's own output dtype is reported but does not decide: an output that comes from a residual sum or, on CUDA, from a norm is fp32 under autocast (the transformer's is: its residual sums add fp32 to the low-precision branch, and on CUDA autocast runs its LayerNorm in fp32). Regime: any; dtypes and differences do not depend on scale. Latency is reported, not judged: it depends on the device's 16-bit arithmetic (tensor cores on a GPU; on a CPU, fp16 or bf16 units, without which the 16-bit kernels are slower)",
    question: super::ratio("ResNet-18 on this device: its p50 latency inside torch.autocast(fp16) as a multiple of its p50 in plain fp32?", "fp16 p50", "fp32 p50", super::SAME_TIME),
    experiment: autocast,
};

/// The first (by name) 2-D weight of the model: a linear layer's, which autocast must run in
/// low precision.
fn a_linear_weight(model: &Model) -> Option<(String, Tensor)> {
    let mut weights: Vec<(String, Tensor)> = model
        .vs
        .variables()
        .into_iter()
        .filter(|(n, t)| n.ends_with("weight") && t.dim() == 2)
        .collect();
    weights.sort_by(|a, b| a.0.cmp(&b.0));
    weights.into_iter().next()
}

/// The dtypes ops return inside one autocast region.
struct Dtypes {
    /// `weight` applied as a linear layer to an fp32 input.
    linear: Kind,
    /// layer_norm of that (low-precision) output.
    layer_norm: Kind,
    /// softmax of it.
    softmax: Kind,
}

/// The dtype of `weight` applied as a linear layer inside an autocast region, and of a
/// layer_norm and a softmax of its output in the same region (fp32 on CUDA, whose autocast
/// lists them; the input's dtype on a CPU, whose autocast does not).
fn dtypes_under(
    device: DeviceKind,
    autocast: Autocast,
    weight: &Tensor,
    batch: i64,
) -> Result<Dtypes, RunFailure> {
    let precision = match autocast {
        Autocast::Fp16 => LowPrecision::Fp16,
        _ => LowPrecision::Bf16,
    };
    let _region = AutocastGuard::enter(device, precision).map_err(torch_failure)?;
    let _no_grad = tch::no_grad_guard();
    catch_torch(|| {
        let probe = Tensor::randn([batch, weight.size()[1]], (Kind::Float, weight.device()));
        let out = probe.linear(weight, None::<Tensor>);
        let width = out.size()[1];
        Dtypes {
            linear: out.kind(),
            layer_norm: out.layer_norm([width], None::<Tensor>, None::<Tensor>, 1e-5, true).kind(),
            softmax: out.softmax(-1, None::<Kind>).kind(),
        }
    })
}

/// What the autocast card runs: the model, batch and base (fp32, no_grad) spec.
fn autocast_plan(ctx: &Ctx) -> Setup {
    Setup::new(ctx, ModelId::Resnet18, (4, 64), GradMode::NoGrad)
}

fn autocast_setup(ctx: &Ctx) -> Vec<String> {
    let s = autocast_plan(ctx);
    vec![
        s.describe(),
        "Measured: fp32 weights and input with autocast off; then the same model inside torch.autocast in fp16, and in bf16, each where this device runs it (B's way; A's model.half() is not run here)".into(),
        format!(
            "eval() and torch.no_grad(); each arm is one run of {}; also read: the dtype a linear layer's output has inside the region (and a layer_norm's and a softmax's of it), the weights' dtype afterwards, and the largest difference from the fp32 output",
            super::memory::iterations(&s.spec)
        ),
        "Each pass under autocast also casts the weights and the activations fed to its convolutions and linear layers from fp32 to 16 bits".into(),
        sixteen_bit_arithmetic(ctx.device),
    ]
}

/// The device facts a guess at autocast's speed needs: the CPU's 16-bit arithmetic units
/// (from its flags), or the GPU's math for each precision.
fn sixteen_bit_arithmetic(device: DeviceKind) -> String {
    match device {
        DeviceKind::Cpu => {
            static FLAGS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
            let flags = FLAGS.get_or_init(|| {
                let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
                info.lines()
                    .find(|l| l.starts_with("flags"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.split_whitespace().map(String::from).collect())
                    .unwrap_or_default()
            });
            let has = |names: [&str; 2]| {
                if names.iter().any(|n| flags.iter().any(|f| f == n)) { "present" } else { "none" }
            };
            format!(
                "This CPU's fp16 arithmetic units (AVX512-FP16 or AMX-FP16): {}; its bf16 units (AVX512-BF16 or AMX-BF16): {}; fp32 runs on its vector units",
                has(["avx512_fp16", "amx_fp16"]),
                has(["avx512_bf16", "amx_bf16"])
            )
        }
        DeviceKind::Cuda => "On this GPU, fp16 convolutions and matmuls run on tensor cores (Volta and newer); fp32 ones run without TF32 here (both TF32 switches off)".into(),
    }
}

fn autocast(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let setup = autocast_plan(ctx);
    let (model_id, b, size) = (setup.model, setup.batch, setup.size);
    let base = setup.spec.clone();
    let fp32 = measure(lab, ctx, base.clone())?;
    // Output comparison on one fixed input through the cached model.
    let i = lab.model_index(model_id, ctx.device, size)?;
    let model = lab.model(i);
    tch::manual_seed(1);
    let x = catch_torch(|| model.input(b, size, tch_device(ctx.device)))?;
    let reference = forward(model, &x, &base, ctx.device)?;
    let scale = catch_torch(|| reference.abs().max().double_value(&[]))?;
    let (weight_name, weight) = a_linear_weight(model)
        .ok_or_else(|| failure(FailureKind::Internal, "the model has no linear layer"))?;
    let mut figures = vec![
        fig("fp32 p50", fp32.latency_ms.p50, "ms"),
        fig(
            "fp32 peak above baseline",
            fp32.memory.peak_above_baseline_bytes as f64,
            "bytes",
        ),
    ];
    let mut labels = vec!["fp32".to_string()];
    let (mut p50, mut peak) = (
        vec![fp32.latency_ms.p50],
        vec![mib(fp32.memory.peak_above_baseline_bytes)],
    );
    let mut notes = vec![];
    let mut ok = true;
    for autocast in [Autocast::Fp16, Autocast::Bf16] {
        let support = lab
            .machine()
            .autocast_support(ctx.device)
            .into_iter()
            .find(|s| s.autocast == autocast);
        if let Some(s) = support.as_ref().filter(|s| !s.supported) {
            notes.push(format!("{} skipped: {}", autocast.as_str(), s.note));
            continue;
        }
        if let Some(s) = support.filter(|s| !s.note.is_empty()) {
            notes.push(format!("{}: {}", autocast.as_str(), s.note));
        }
        let spec = RunSpec {
            autocast,
            ..base.clone()
        };
        let model = lab.model(i);
        let out = forward(model, &x, &spec, ctx.device)?;
        let diff = catch_torch(|| max_abs_diff(&out, &reference))?;
        let low = if autocast == Autocast::Fp16 {
            Kind::Half
        } else {
            Kind::BFloat16
        };
        let dtypes = dtypes_under(ctx.device, autocast, &weight, b as i64)?;
        let linear = dtypes.linear;
        ok &= linear == low && diff > 0.0 && diff < 0.1 * scale;
        notes.push(format!(
            "{} linear layer ({weight_name}) output dtype: {linear:?}",
            autocast.as_str()
        ));
        notes.push(format!(
            "{}: layer_norm of that output: {:?}; softmax of it: {:?}",
            autocast.as_str(),
            dtypes.layer_norm,
            dtypes.softmax
        ));
        notes.push(format!(
            "{} output dtype: {:?}",
            autocast.as_str(),
            out.kind()
        ));
        drop(out);
        let r = measure(lab, ctx, spec)?;
        let name = autocast.as_str();
        if autocast == Autocast::Fp16 {
            // The question's arms, in its order: fp16 over fp32.
            figures.extend(super::kit::interval_figures(
                &AUTOCAST.question,
                &Shift::of(&r.latencies(), &fp32.latencies()),
            ));
        }
        figures.push(fig(&format!("{name} p50"), r.latency_ms.p50, "ms"));
        figures.push(fig(
            &format!("{name} peak above baseline"),
            r.memory.peak_above_baseline_bytes as f64,
            "bytes",
        ));
        figures.push(fig(
            &format!("{name} max |output - fp32 output|"),
            diff,
            "abs",
        ));
        figures.push(fig(
            &format!("{name} linear layer output is {name}"),
            f64::from(u8::from(linear == low)),
            "bool",
        ));
        figures.push(fig(
            &format!("{name} layer_norm output is fp32"),
            f64::from(u8::from(dtypes.layer_norm == Kind::Float)),
            "bool",
        ));
        figures.push(fig(
            &format!("{name} softmax output is fp32"),
            f64::from(u8::from(dtypes.softmax == Kind::Float)),
            "bool",
        ));
        figures.push(fig(
            &format!("{name} latency vs fp32"),
            r.latency_ms.p50 / fp32.latency_ms.p50,
            "ratio",
        ));
        labels.push(name.into());
        p50.push(r.latency_ms.p50);
        peak.push(mib(r.memory.peak_above_baseline_bytes));
    }
    let weights_fp32 = lab
        .model(i)
        .vs
        .trainable_variables()
        .iter()
        .all(|t| t.kind() == Kind::Float);
    ok &= weights_fp32;
    figures.push(fig(
        "weights still float32",
        f64::from(u8::from(weights_fp32)),
        "bool",
    ));
    figures.push(fig("fp32 output max |value|", scale, "abs"));
    let decision = if labels.len() == 1 {
        Decision::not_applicable("This device runs neither fp16 nor bf16 autocast.")
    } else {
        Decision::rule(
            ok,
            "Inside autocast a linear layer ran in low precision, the output differed slightly from fp32, and the weights stayed float32. Latency depends on the hardware: see the figures.",
            "A linear layer under autocast had an unexpected dtype, the output difference was zero or too large, or the weights changed dtype.",
        )
    };
    Ok(
        Outcome::new(decision, setup.describe(), ChartKind::Bar)
            .figures(figures)
            .series(vec![
                series("p50 latency (ms)", "ms", labels.clone(), p50),
                series("peak above baseline (MiB)", "MiB", labels, peak),
            ])
            .notes(notes),
    )
}
