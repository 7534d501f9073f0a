//! The `output-lifetime` card ([`OUTPUT_LIFETIME`]): Outputs kept on the device pile up — with their graph, fast

use super::*;

pub const GROWTH_PER_REQUEST_KEPT_ON_DEVICE: FigureName = FigureName::new("growth per request, kept on device", Unit::Bytes);
pub const GROWTH_PER_REQUEST_KEPT_WITH_GRAD: FigureName = FigureName::new("growth per request, kept with grad", Unit::Bytes);
pub const EACH_MIB_ABOVE_START: FigureName = FigureName::new("{} (MiB above start)", Unit::Mib);
pub const GROWTH_PER_REQUEST_DROPPED: FigureName = FigureName::new("growth per request, dropped", Unit::Bytes);
pub const GROWTH_PER_REQUEST_MOVED_TO_CPU: FigureName = FigureName::new("growth per request, moved to CPU", Unit::Bytes);
pub const ONE_OUTPUT: FigureName = FigureName::new("one output", Unit::Bytes);

pub const OUTPUT_LIFETIME: Card = Card {
    id: "output-lifetime",
    title: "Outputs kept on the device pile up — with their graph, fast",
    asks: "What happens to allocated memory, request after request, when each request's output is kept in a list?",
    labels: ["keep model(x), autograd on", "keep model(x).cpu(), under torch.no_grad()"],
    setup: output_lifetime_setup,
    needs: Needs::Any,
    claim: "Outputs kept across requests grow memory request by request; kept with autograd on, each keeps its graph and every activation the graph saved, and memory grows much faster.",
    statements: &[
        Said::run("Here outputs dropped after each request left allocated memory flat.", &[GROWTH_PER_REQUEST_DROPPED]),
        Said::run("Outputs kept on the device under torch.no_grad() grew it by about one output's bytes a request.", &[GROWTH_PER_REQUEST_KEPT_ON_DEVICE, ONE_OUTPUT]),
        Said::source("On a GPU the caching allocator counts each tensor in blocks rounded up to a multiple of 512 bytes, so a small output counts a little more than its bytes.", "c10/cuda/CUDACachingAllocator.cpp", "round_size", "more-cards"),
        Said::torch("An output that requires grad references its graph, and the graph holds every tensor its ops saved for backward: those activations live as long as the output.", "test_grad_modes.py::test_a_kept_output_holds_the_activations_its_graph_saved"),
        Said::torch("Under torch.no_grad() the output has no graph and nothing is saved, so only the output itself stays.", "test_grad_modes.py::test_no_grad_saves_nothing"),
        Said::run("Here outputs kept with autograd on grew memory more than twice as fast as outputs kept under torch.no_grad().", &[GROWTH_PER_REQUEST_KEPT_WITH_GRAD, GROWTH_PER_REQUEST_KEPT_ON_DEVICE]),
        Said::torch("On a CPU, .cpu() returns the very same tensor: an output moved there stays in the memory it was made in.", "test_grad_modes.py::test_cpu_on_a_cpu_tensor_is_the_same_tensor"),
        Said::run("So outputs moved with .cpu() grow this device's memory where the device is the CPU, and leave it flat on a GPU.", &[GROWTH_PER_REQUEST_MOVED_TO_CPU]),
    ],
    source: "https://pytorch.org/docs/stable/notes/faq.html#my-model-reports-cuda-runtime-error-2-out-of-memory",
    pitfall: "results.append(model(x))  # autograd on",
    fix: "with torch.no_grad():\n    results.append(model(x).cpu())",
    threshold: "confirmed when, after one warm-up request, allocated memory grows over the requests for outputs kept under no_grad, grows more than 2× as fast when they are kept with autograd on, and does not grow at all when outputs are dropped. Regime: any; allocated memory counts live tensors exactly (on a GPU the caching allocator's pool is not counted), and on a GPU (ResNet-18, batch 16, 224²) eight kept graphs hold a few GB, far within 139 GB",
    question: super::super::value("ResNet-18, 8 requests, each request's output appended to a list with autograd on: by how many bytes does allocated memory grow per request?", GROWTH_PER_REQUEST_KEPT_WITH_GRAD, super::super::BYTES),
    experiment: output_lifetime,
};

/// What output-lifetime runs: the model and batch, the requests per variant, and the line
/// its report is measured on.
pub(super) fn output_plan(ctx: &Ctx) -> (Setup, usize, String) {
    let setup = Setup::new(ctx, ModelId::Resnet18, (2, 16), GradMode::NoGrad);
    let requests = 8;
    let line = format!("{}, {requests} requests per variant", setup.describe());
    (setup, requests, line)
}

/// The variants output-lifetime runs: name, grad mode, whether the output is kept.
pub(super) const OUTPUT_VARIANTS: [(&str, GradMode, bool); 4] = [
    ("dropped", GradMode::NoGrad, false),
    ("kept on device (no_grad)", GradMode::NoGrad, true),
    ("kept with grad (graph alive)", GradMode::Enabled, true),
    ("moved to CPU (no_grad)", GradMode::NoGrad, true),
];

/// "2×3×96×96 fp32 values = 221,184 bytes": one batch of input, where its shape is plain.
pub(in crate::pitfalls) fn input_bytes_line(s: &Setup) -> Option<String> {
    let (b, n) = (s.batch as u64, s.size as u64);
    let (shape, values) = match s.model.facts().input {
        protocol::InputKind::Image => (format!("{b}×3×{n}×{n}"), b * 3 * n * n),
        protocol::InputKind::Features => (format!("{b}×{n}"), b * n),
        _ => return None,
    };
    Some(format!("Each batch of input: {shape} fp32 values, 4 bytes each = {} bytes", values * 4))
}

pub(super) fn output_lifetime_setup(ctx: &Ctx) -> Vec<String> {
    let (s, _, line) = output_plan(ctx);
    let mut lines = vec![
        line,
        crate::pitfalls::kit::arms("each request's output appended to a list, autograd on", "under torch.no_grad(), each output moved to the CPU and appended"),
        "Also run: outputs dropped (no_grad); outputs kept on the device (no_grad). The model is in eval(), its weights fp32".into(),
    ];
    lines.extend(input_bytes_line(&s));
    lines.extend(architecture(s.model, s.size));
    lines.push("Memory: the bytes allocated by live tensors after each request, above the reading after one untimed first request".into());
    lines
}

pub(super) fn output_lifetime(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
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
        out_series.push(series_of(
            EACH_MIB_ABOVE_START, &[&name],
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
        fig(GROWTH_PER_REQUEST_DROPPED, dropped * MIB),
        fig(GROWTH_PER_REQUEST_KEPT_ON_DEVICE, kept * MIB),
        fig(
            GROWTH_PER_REQUEST_KEPT_WITH_GRAD,
            with_grad * MIB,
        ),
        fig(GROWTH_PER_REQUEST_MOVED_TO_CPU, moved * MIB),
        fig(ONE_OUTPUT, output_bytes as f64),
    ])
    .series(out_series)
    .notes(notes))
}
