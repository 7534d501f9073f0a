//! What autograd keeps alive: eval() leaves it on, kept outputs keep their graph, and
//! freezing parameters is a partial no_grad.

use protocol::{ChartKind, GradMode, ModelId, RunFailure, RunSpec};

use super::kit::{
    bytes_compared, fig, measure, mib, named, pass_memory, series, trace_pass, Ctx, Decision,
    Outcome, Setup, MIB,
};
use protocol::NamedTrace;
use super::{Card, Needs, Said};
use crate::lab::{forward, Lab};
use crate::torch_call::{catch_torch, synchronize, torch_failure};

pub const EVAL_NOT_NOGRAD: Card = Card {
    id: "eval-not-nograd",
    title: "eval() does not switch autograd off",
    asks: "What does wrapping an eval() model's forward pass in torch.no_grad() do to its peak memory?",
    labels: ["eval() only", "eval() inside torch.no_grad()"],
    setup: eval_not_nograd_setup,
    needs: Needs::Any,
    claim: "model.eval() does not switch autograd off: with autograd on, an eval() model keeps the activations its backward would need, which under torch.no_grad() are freed as soon as they are used.",
    statements: &[
        Said::torch("model.eval() sets training = False on every module and leaves grad mode on: an eval() model's output still carries a graph.", "test_grad_modes.py::test_eval_leaves_grad_mode_on"),
        Said::torch("With autograd on, every op downstream of a parameter (parameters require grad) records, and saves what its backward needs, activations included, in eval() as in train().", "test_grad_modes.py::test_an_eval_model_saves_activations_for_backward"),
        Said::torch("Under torch.no_grad() no op saves anything for backward, so an activation is freed once the ops that read it are done.", "test_grad_modes.py::test_no_grad_saves_nothing"),
        Said::run("Here the eval() model's pass peaked higher above the baseline with autograd on than under torch.no_grad().", &["eval+grad peak above baseline", "eval+no_grad peak above baseline"]),
    ],
    source: "https://pytorch.org/docs/stable/notes/autograd.html#locally-disabling-gradient-computation",
    pitfall: "model.eval()\ny = model(x)",
    fix: "model.eval()\nwith torch.no_grad():\n    y = model(x)",
    threshold: "confirmed when eval+grad's peak above baseline exceeds eval+no_grad's by more than 20% (autograd must keep at least one activation per layer; 20% is far above run-to-run variation, which is zero for memory). Regime: any; on a GPU (ResNet-18, batch 64, 224²) grad keeps every layer's saved activations (over a GB), several times no_grad's peak of a few activations at a time, so the margin is large at any scale",
    question: super::ratio("ResNet-18 in eval() mode, one forward pass each way: the peak memory above baseline of B (under torch.no_grad()) as a multiple of A's (autograd on)?", "eval+no_grad peak above baseline", "eval+grad peak above baseline", super::PEAKS),
    experiment: eval_not_nograd,
};

/// What eval-not-nograd runs: the model and batch, on the context's device.
fn eval_plan(ctx: &Ctx) -> Setup {
    Setup::new(ctx, ModelId::Resnet18, (8, 64), GradMode::Enabled)
}

/// "N warm-up and M timed iterations": how a measured run of `spec` runs.
pub(super) fn iterations(spec: &RunSpec) -> String {
    format!("{} warm-up and {} timed iterations", spec.warmup, spec.iters)
}

/// The layers of `model` with the sizes a memory estimate needs (the ResNet-18 and the
/// tiny MLP, which the memory cards run by default); `None` for the other models.
pub(super) fn architecture(model: ModelId, size: u32) -> Option<String> {
    match model {
        ModelId::Resnet18 => Some("ResNet-18: a 7×7 stride-2 convolution to 64 channels and a 3×3 stride-2 max-pool; then four stages of two residual blocks (two 3×3 convolutions each; the first block of stages 2–4 also has a 1×1 stride-2 shortcut convolution) at 64, 128, 256 and 512 channels, each stage after the first halving the side; every convolution followed by BatchNorm, ReLUs in place; global average pooling and a linear layer to 1000 classes".into()),
        ModelId::TinyMlp => Some(format!("Tiny MLP: Linear({size} → 512) → BatchNorm → ReLU → Dropout(p = 0.5), then Linear(512 → 512) → BatchNorm → ReLU → Dropout(p = 0.5), then Linear(512 → 10)")),
        _ => None,
    }
}

fn eval_not_nograd_setup(ctx: &Ctx) -> Vec<String> {
    let s = eval_plan(ctx);
    let mut lines = vec![
        s.describe(),
        "A: model.eval(), autograd on; B: model.eval(), forward pass inside torch.no_grad()".into(),
        format!(
            "fp32 weights and input (4 bytes an element); each arm is one run of {}, whose peak allocated memory is read above the baseline (the weights and the input)",
            iterations(&s.spec)
        ),
    ];
    lines.extend(architecture(s.model, s.size));
    lines
}

fn eval_not_nograd(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
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
        fig("eval+grad peak above baseline", g as f64, "bytes"),
        fig("eval+no_grad peak above baseline", n as f64, "bytes"),
        fig("memory ratio grad / no_grad", ratio, "ratio"),
        fig("eval+grad p50", grad.latency_ms.p50, "ms"),
        fig("eval+no_grad p50", nograd.latency_ms.p50, "ms"),
    ])
    .series(vec![
        series(
            "peak above baseline (MiB)",
            "MiB",
            labels(),
            vec![mib(g), mib(n)],
        ),
        series(
            "p50 latency (ms)",
            "ms",
            labels(),
            vec![grad.latency_ms.p50, nograd.latency_ms.p50],
        ),
    ])
    .traces(traces))
}

pub const OUTPUT_LIFETIME: Card = Card {
    id: "output-lifetime",
    title: "Outputs kept on the device pile up — with their graph, fast",
    asks: "What happens to allocated memory, request after request, when each request's output is kept in a list?",
    labels: ["keep model(x), autograd on", "keep model(x).cpu(), under torch.no_grad()"],
    setup: output_lifetime_setup,
    needs: Needs::Any,
    claim: "Outputs kept across requests grow memory request by request; kept with autograd on, each keeps its graph and every activation the graph saved, and memory grows much faster.",
    statements: &[
        Said::run("Here outputs dropped after each request left allocated memory flat.", &["growth per request, dropped"]),
        Said::run("Outputs kept on the device under torch.no_grad() grew it by about one output's bytes a request.", &["growth per request, kept on device", "one output"]),
        Said::source("On a GPU the caching allocator counts each tensor in blocks rounded up to a multiple of 512 bytes, so a small output counts a little more than its bytes.", "c10/cuda/CUDACachingAllocator.cpp", "round_size", "more-cards"),
        Said::torch("An output that requires grad references its graph, and the graph holds every tensor its ops saved for backward: those activations live as long as the output.", "test_grad_modes.py::test_a_kept_output_holds_the_activations_its_graph_saved"),
        Said::torch("Under torch.no_grad() the output has no graph and nothing is saved, so only the output itself stays.", "test_grad_modes.py::test_no_grad_saves_nothing"),
        Said::run("Here outputs kept with autograd on grew memory more than twice as fast as outputs kept under torch.no_grad().", &["growth per request, kept with grad", "growth per request, kept on device"]),
        Said::torch("On a CPU, .cpu() returns the very same tensor: an output moved there stays in the memory it was made in.", "test_grad_modes.py::test_cpu_on_a_cpu_tensor_is_the_same_tensor"),
        Said::run("So outputs moved with .cpu() grow this device's memory where the device is the CPU, and leave it flat on a GPU.", &["growth per request, moved to CPU"]),
    ],
    source: "https://pytorch.org/docs/stable/notes/faq.html#my-model-reports-cuda-runtime-error-2-out-of-memory",
    pitfall: "results.append(model(x))  # autograd on",
    fix: "with torch.no_grad():\n    results.append(model(x).cpu())",
    threshold: "confirmed when, after one warm-up request, allocated memory grows over the requests for outputs kept under no_grad, grows more than 2× as fast when they are kept with autograd on, and does not grow at all when outputs are dropped. Regime: any; allocated memory counts live tensors exactly (on a GPU the caching allocator's pool is not counted), and on a GPU (ResNet-18, batch 16, 224²) eight kept graphs hold a few GB, far within 139 GB",
    question: super::value("ResNet-18, 8 requests, each request's output appended to a list with autograd on (A): by how many bytes does allocated memory grow per request?", "growth per request, kept with grad", "bytes", super::BYTES),
    experiment: output_lifetime,
};

/// What output-lifetime runs: the model and batch, the requests per variant, and the line
/// its report is measured on.
fn output_plan(ctx: &Ctx) -> (Setup, usize, String) {
    let setup = Setup::new(ctx, ModelId::Resnet18, (2, 16), GradMode::NoGrad);
    let requests = 8;
    let line = format!("{}, {requests} requests per variant", setup.describe());
    (setup, requests, line)
}

/// The variants output-lifetime runs: name, grad mode, whether the output is kept.
const OUTPUT_VARIANTS: [(&str, GradMode, bool); 4] = [
    ("dropped", GradMode::NoGrad, false),
    ("kept on device (no_grad)", GradMode::NoGrad, true),
    ("kept with grad (graph alive)", GradMode::Enabled, true),
    ("moved to CPU (no_grad)", GradMode::NoGrad, true),
];

/// "2×3×96×96 fp32 values = 221,184 bytes": one batch of input, where its shape is plain.
pub(super) fn input_bytes_line(s: &Setup) -> Option<String> {
    let (b, n) = (s.batch as u64, s.size as u64);
    let (shape, values) = match s.model.facts().input {
        protocol::InputKind::Image => (format!("{b}×3×{n}×{n}"), b * 3 * n * n),
        protocol::InputKind::Features => (format!("{b}×{n}"), b * n),
        _ => return None,
    };
    Some(format!("Each batch of input: {shape} fp32 values, 4 bytes each = {} bytes", values * 4))
}

fn output_lifetime_setup(ctx: &Ctx) -> Vec<String> {
    let (s, _, line) = output_plan(ctx);
    let mut lines = vec![
        line,
        "A: each request's output appended to a list, autograd on; B: under torch.no_grad(), each output moved to the CPU and appended".into(),
        "Also run: outputs dropped (no_grad); outputs kept on the device (no_grad). The model is in eval(), its weights fp32".into(),
    ];
    lines.extend(input_bytes_line(&s));
    lines.extend(architecture(s.model, s.size));
    lines.push("Memory: the bytes allocated by live tensors after each request, above the reading after one untimed first request".into());
    lines
}

fn output_lifetime(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let (setup, requests, measured_on) = output_plan(ctx);
    let i = setup.cached(lab, ctx)?;
    let variants = OUTPUT_VARIANTS;
    let labels: Vec<String> = (1..=requests).map(|r| r.to_string()).collect();
    let mut out_series = vec![];
    let mut growth = vec![];
    let mut output_bytes = 0u64;
    for (name, grad, keep) in variants {
        let model = lab.model(i);
        let meter = lab.meter(ctx.device);
        let x = setup.input(model, ctx)?;
        let s = RunSpec {
            grad,
            ..setup.spec.clone()
        };
        // One pass first, so one-time caches (oneDNN primitives, allocator pools) are not
        // mistaken for growth.
        let first = forward(model, &x, &s, ctx.device)?;
        output_bytes = first.numel() as u64 * first.kind().elt_size_in_bytes() as u64;
        drop(first);
        synchronize(ctx.device)?;
        let start = meter.read().map_err(torch_failure)?.allocated;
        let mut kept = vec![];
        let mut ys = vec![];
        for _ in 0..requests {
            ctx.check()?;
            let mut out = forward(model, &x, &s, ctx.device)?;
            if name.starts_with("moved") {
                out = catch_torch(|| out.to_device(tch::Device::Cpu))?;
            }
            if keep {
                kept.push(out);
            } else {
                drop(out);
            }
            synchronize(ctx.device)?;
            let now = meter.read().map_err(torch_failure)?.allocated;
            ys.push(mib(now.saturating_sub(start)));
        }
        drop(kept);
        growth.push(ys.last().copied().unwrap_or(0.0) / requests as f64);
        out_series.push(series(
            &format!("{name} (MiB above start)"),
            "MiB",
            labels.clone(),
            ys,
        ));
    }
    let (dropped, kept, with_grad, moved) = (growth[0], growth[1], growth[2], growth[3]);
    let mut notes = vec![];
    if !ctx.cuda() {
        notes.push(
            "On a CPU, \"moved to CPU\" stays in the same memory; on a GPU it frees the device."
                .into(),
        );
    }
    let figures = format!("Per request: dropped {dropped:.3} MiB, kept {kept:.3} MiB, kept with grad {with_grad:.3} MiB, moved to CPU {moved:.3} MiB (device memory).");
    Ok(Outcome::new(
        Decision::rule(
            dropped == 0.0 && kept > 0.0 && with_grad > 2.0 * kept,
            figures.clone(),
            figures,
        ),
        measured_on,
        ChartKind::Line,
    )
    .figures(vec![
        fig("growth per request, dropped", dropped * MIB, "bytes"),
        fig("growth per request, kept on device", kept * MIB, "bytes"),
        fig(
            "growth per request, kept with grad",
            with_grad * MIB,
            "bytes",
        ),
        fig("growth per request, moved to CPU", moved * MIB, "bytes"),
        fig("one output", output_bytes as f64, "bytes"),
    ])
    .series(out_series)
    .notes(notes))
}

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
        Said::run("Here the fully frozen pass retained the same bytes as the pass under torch.no_grad(), within 1%.", &["all frozen", "no_grad"]),
        Said::torch("With the backbone frozen, the ops of the trainable part still record and save their inputs, the backbone's last activation among them; the frozen ops save nothing.", "test_grad_modes.py::test_a_partly_frozen_model_saves_only_for_its_trainable_part"),
        Said::run("Here the partly frozen pass retained more than no_grad and less than the all-trainable pass.", &["backbone frozen (last stage + head trainable)", "no_grad", "all trainable"]),
    ],
    source: "https://pytorch.org/docs/stable/notes/autograd.html#setting-requires-grad",
    pitfall: "for p in backbone.parameters(): p.requires_grad_(False)\ny = model(x)  # layer4 and fc keep requires_grad=True",
    fix: "with torch.no_grad():\n    y = model(x)",
    threshold: "compares the memory retained while the output is alive (allocated minus the baseline, read right after the pass), which is the output plus the graph's saved tensors — not the peak, which on a GPU is the stem's outputs in every variant. Confirmed when all-frozen retains the same bytes as no_grad within 1% (the band the question is graded by), and the partly frozen model retains strictly more than no_grad and strictly less than all trainable. Regime: any; byte counts repeat exactly, and on a GPU (ResNet-18, batch 64, 224²) all trainable retains every layer's saved activations (over a GB), the frozen backbone only what layer 4 and the classifier save (tens of MB), no_grad only the output",
    question: super::ratio("ResNet-18 with every parameter frozen (requires_grad_(False)) and autograd on, its input not requiring grad: the memory retained while its output is alive, against the same pass under torch.no_grad()?", "all frozen", "no_grad", super::SAME_BYTES),
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
fn freeze_plan(ctx: &Ctx) -> (Setup, String) {
    let setup = Setup::new(ctx, ModelId::Resnet18, (8, 64), GradMode::Enabled);
    let line = format!("{}, a fresh model", setup.describe());
    (setup, line)
}

fn freeze_setup(ctx: &Ctx) -> Vec<String> {
    vec![
        freeze_plan(ctx).1,
        "Four forward passes: all parameters trainable; backbone frozen (the last stage and the classifier trainable); every parameter frozen; all trainable under torch.no_grad()".into(),
        "The input never requires grad; weights and input in fp32; the model in eval()".into(),
        "Memory: the bytes still allocated right after the pass while its output is alive, above the weights and the input".into(),
    ]
}

fn freeze_vs_nograd(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
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
        fig("all trainable", full.retained as f64, "bytes"),
        fig(
            "backbone frozen (last stage + head trainable)",
            partial.retained as f64,
            "bytes",
        ),
        fig("all frozen", frozen.retained as f64, "bytes"),
        fig("no_grad", nograd.retained as f64, "bytes"),
        fig(
            "all trainable: peak above baseline",
            full.peak_above as f64,
            "bytes",
        ),
        fig(
            "no_grad: peak above baseline",
            nograd.peak_above as f64,
            "bytes",
        ),
    ])
    .series(vec![
        series(
            "retained while the output is alive (MiB)",
            "MiB",
            labels.clone(),
            all.iter().map(|m| mib(m.retained)).collect(),
        ),
        series(
            "peak above baseline (MiB)",
            "MiB",
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

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::Verdict;

    #[test]
    fn the_freeze_rule_needs_frozen_like_no_grad_and_partial_strictly_between() {
        let m = 1 << 20;
        assert_eq!(
            freeze_rule(100 * m, 10 * m, m, m).verdict,
            Verdict::Confirmed
        );
        // Frozen retaining a graph: refuted.
        assert_eq!(
            freeze_rule(100 * m, 10 * m, 5 * m, m).verdict,
            Verdict::Refuted
        );
        // Partial equal to full (freezing did nothing): refuted.
        assert_eq!(
            freeze_rule(100 * m, 100 * m, m, m).verdict,
            Verdict::Refuted
        );
        // Partial equal to no_grad: refuted.
        assert_eq!(freeze_rule(100 * m, m, m, m).verdict, Verdict::Refuted);
        // "Like no_grad" is the question's band: within 1%, not beyond.
        assert_eq!(
            freeze_rule(m, 1 << 18, 32_000 + 300, 32_000).verdict,
            Verdict::Confirmed
        );
        assert_eq!(
            freeze_rule(m, 1 << 18, 32_000 + 400, 32_000).verdict,
            Verdict::Refuted
        );
    }

    /// The verdict words its question's comparison by the rule that grades it.
    #[test]
    fn the_freeze_reason_words_the_question_band() {
        let m = 1 << 20;
        for (frozen, nograd) in [(m, m), (5 * m, m), (32_400, 32_000)] {
            let words = bytes_compared(frozen as f64, nograd as f64).1;
            let reason = freeze_rule(100 * m, 10 * m, frozen, nograd).reason;
            assert!(reason.contains(&words), "{reason} lacks {words}");
        }
    }
}
