//! The launch lesson: a captured CUDA graph replays a forward pass's kernels without the
//! CPU launching each one, which pays where launches dominate (small batches), and keeps
//! its own memory pool reserved while it lives.

use protocol::{cpu_reason, Advanced, ChartKind, GradMode, ModelId, Report, RunFailure, RunSpec};

use super::kit::{fig_of, measure, mib, series, Ctx, Decision, Outcome, Setup, Shift};
use super::precision::max_rel_diff;
use super::python::{self, beside};
use super::{Card, Needs, Said};
use crate::lab::{cuda_graph, forward, Lab};
use crate::torch_call::synchronize;
use crate::pitfalls::figures::{BATCH_1_P50_EAGER, BATCH_P50_EAGER, P50_LATENCY_MS};
use crate::pitfalls::kit::FigureName;
use protocol::Unit;

// The figures this file's cards report, each defined once (see `kit::figure`).
pub const BATCH_P50_REPLAY: FigureName = FigureName::new("batch {}: p50 replay", Unit::Ms);
pub const BATCH_EAGER_OVER_REPLAY_CI_LOW: FigureName = FigureName::new("batch {}: eager / replay, 95% interval low", Unit::Ratio);
pub const BATCH_EAGER_OVER_REPLAY_CI_HIGH: FigureName = FigureName::new("batch {}: eager / replay, 95% interval high", Unit::Ratio);
pub const BATCH_RESERVED_EAGER: FigureName = FigureName::new("batch {}: reserved, eager", Unit::Mib);
pub const BATCH_RESERVED_REPLAY: FigureName = FigureName::new("batch {}: reserved, replay", Unit::Mib);
pub const BATCH_REPLAY_VS_EAGER_OUTPUT_MAX_DIFFERENCE: FigureName = FigureName::new("batch {}: replay vs eager output, max difference", Unit::Plain);
pub const BATCH_1_P50_REPLAY: FigureName = BATCH_P50_REPLAY.instance("batch 1: p50 replay");
pub const BATCH_1_EAGER_OVER_REPLAY_CI_LOW: FigureName = BATCH_EAGER_OVER_REPLAY_CI_LOW.instance("batch 1: eager / replay, 95% interval low");
pub const ANY_P50_REPLAY: FigureName = BATCH_P50_REPLAY.ending("* p50 replay");
pub const ANY_P50_EAGER: FigureName = BATCH_P50_EAGER.ending("* p50 eager");
pub const BATCH_1_EAGER_OVER_REPLAY_CI_HIGH: FigureName = BATCH_EAGER_OVER_REPLAY_CI_HIGH.instance("batch 1: eager / replay, 95% interval high");
pub const BATCH_1_REPLAY_VS_EAGER_OUTPUT_MAX_DIFFERENCE: FigureName = BATCH_REPLAY_VS_EAGER_OUTPUT_MAX_DIFFERENCE.instance("batch 1: replay vs eager output, max difference");

pub const CUDA_GRAPHS: Card = Card {
    id: "cuda-graphs",
    title: "CUDA graphs: replay the launches, reserve the memory",
    asks: "What does capturing a forward pass as a CUDA graph and replaying it change, against running it eagerly, at batch 1 and at batch 32?",
    labels: ["eager forward pass for each batch", "forward pass captured once as a CUDA graph, replayed for each batch"],
    setup: cuda_graphs_setup,
    needs: Needs::Cuda("CUDA graphs record and replay GPU kernel launches; a CPU has no graphs to capture."),
    claim: "Capturing a forward pass once and replaying it (torch.cuda.CUDAGraph) removes the CPU's work of issuing every op and launching its kernels: at batch 1, where each kernel's GPU work is small, replay is faster than eager with the same output. The graph keeps the memory of its capture reserved for as long as it lives, and its input and output are fixed buffers. Gradless issues the eager ops from Rust through libtorch, with no Python interpreter per op; from Python, as a team's code runs, each eager op also pays the interpreter, so a graph saves more there, and where this server has a Python the same runs timed from it are shown beside.",
    statements: &[
        Said::torch("Eager, the CPU issues ResNet-18's 69 operators one after another, each launching its own kernels.", "test_runtime.py::test_resnet18_forward_calls_69_operators"),
        Said::source("A replay launches the whole captured pass as one unit (one cudaGraphLaunch), with no per-op work on the CPU.", "aten/src/ATen/cuda/CUDAGraph.cpp", "CUDAGraph::replay", "cards"),
        Said::run("At batch 1 the replay was faster than the eager pass.", &[BATCH_1_P50_EAGER, BATCH_1_P50_REPLAY, BATCH_1_EAGER_OVER_REPLAY_CI_LOW, BATCH_1_EAGER_OVER_REPLAY_CI_HIGH]),
        Said::run("It computed the same output: the replayed output matches the eager one within 1e-3 of its largest magnitude.", &[BATCH_1_REPLAY_VS_EAGER_OUTPUT_MAX_DIFFERENCE]),
        Said::source("During capture every allocation comes from a private memory pool, whose addresses the graph bakes in: a new input must be copied into the captured input tensor, and each replay overwrites the captured output.", "c10/cuda/CUDACachingAllocator.cpp", "beginAllocateToPool", "cards"),
        Said::source("That pool stays reserved while the graph lives; once the graph is destroyed its blocks go back to the driver only at the next empty_cache() (or an out-of-memory retry).", "c10/cuda/CUDACachingAllocator.cpp", "releasePool", "cards"),
    ],
    source: "https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs",
    pitfall: "with torch.inference_mode():\n    for x in batches:          # batch 1\n        y = model(x)           # each kernel launched in turn",
    fix: "g = torch.cuda.CUDAGraph()\nstatic_x = torch.empty_like(x)\nwith torch.inference_mode():\n    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())\n    with torch.cuda.stream(s): model(static_x)   # warm up off the default stream\n    torch.cuda.current_stream().wait_stream(s)\n    with torch.cuda.graph(g): static_y = model(static_x)\nfor x in batches:\n    static_x.copy_(x); g.replay()               # static_y holds the result",
    threshold: "CUDA: ResNet-18 under inference_mode, eager against graph replay, 20 timed iterations each at batch 1 and at batch 32. Confirmed when the replayed output equals eager's within 1e-3 of its largest magnitude and, at batch 1, the 95% bootstrap interval of the p50 ratio eager / replay lies wholly above 1; refuted when the outputs differ or that interval lies below 1.05; inconclusive otherwise. Batch 32 and the reserved memory of both are reported, not judged: each reserved figure is the allocator's whole pool during that run, which also holds what the runs before it cached, the pools of the graphs captured before it included. Gradless issues the eager ops from Rust through libtorch, without Python's per-op cost, and replays with the input already in the captured buffer (no copy): from Python the eager pass costs the CPU more per op, so a graph saves more there: where the server has a Python, the same runs are also timed from it with torch.cuda.graph (figures \"Python: …\", and \"Python / Gradless: …\", Python's time over Gradless's), what a team's code sees; they do not decide the verdict. Not applicable on a CPU, or where this build cannot capture graphs (the reason is shown)",
    question: super::ratio("ResNet-18 at batch 1, 224², under inference_mode: the p50 of replaying the captured CUDA graph as a multiple of the eager pass's p50? (A judgment: about 70 ops, each issued by the CPU in eager, against their GPU time at batch 1.)", ANY_P50_REPLAY, ANY_P50_EAGER, super::PEAKS),
    experiment: cuda_graphs,
};

/// The batches cuda-graphs compares eager and replay at, and its warm-up and timed
/// iterations for each.
const GRAPH_BATCHES: [u32; 2] = [1, 32];
const GRAPH_WARMUP: u32 = 3;
const GRAPH_ITERS: u32 = 20;

/// The line cuda-graphs' report is measured on.
fn cuda_graphs_line(ctx: &Ctx) -> String {
    let [a, b] = GRAPH_BATCHES;
    let model = ctx.model(ModelId::Resnet18);
    let size = Setup::with_batch(ctx, model, a, GradMode::InferenceMode).size;
    format!(
        "{}, inference_mode, batches {a} and {b}, {}, {GRAPH_ITERS} timed iterations each",
        model.display_name(),
        model.describe_sample(size)
    )
}

fn cuda_graphs_setup(ctx: &Ctx) -> Vec<String> {
    vec![
        cuda_graphs_line(ctx),
        crate::pitfalls::kit::arms("eager forward passes", "the forward pass captured once as a CUDA graph (after one warm-up pass on a side stream) and replayed, the input staying in the captured buffer, so a replay copies nothing"),
        format!("Each is one run of {GRAPH_WARMUP} warm-up and {GRAPH_ITERS} timed iterations at each batch (eval(), fp32)"),
        super::timing::from_rust(ctx.model(ModelId::Resnet18)),
        python::SETUP.into(),
        "Also read: the largest difference between the replayed and the eager output, and the allocator's reserved memory during each run".into(),
    ]
}

fn cuda_graphs(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    if !ctx.cuda() {
        return Ok(Outcome::new(
            Decision::not_applicable(format!("Not on a CPU: {}.", cpu_reason(protocol::settings::SettingId::CudaGraph))),
            String::new(),
            ChartKind::Bar,
        )
        .notes(vec![format!("Not timed from Python on this device: {}", CUDA_GRAPHS.not_here(ctx.device).unwrap_or("CUDA graphs need a CUDA GPU."))]));
    }
    if let Err(why) = crate::torch_ext::cuda_graphs_built() {
        return Ok(Outcome::new(
            Decision::not_applicable(format!("This server cannot capture CUDA graphs: {why}.")),
            String::new(),
            ChartKind::Bar,
        ));
    }
    let model_id = ctx.model(ModelId::Resnet18);
    let mut figures = vec![];
    let (mut labels, mut p50s) = (vec![], vec![]);
    let mut at_one: Option<(Shift, f64, f64)> = None;
    let mut texts = vec![];
    for batch in GRAPH_BATCHES {
        let setup = Setup::with_batch(ctx, model_id, batch, GradMode::InferenceMode);
        let eager_spec = RunSpec { iters: GRAPH_ITERS, warmup: GRAPH_WARMUP, ..setup.spec.clone() };
        let graph_spec = RunSpec {
            advanced: Advanced { cuda_graph: true, ..Advanced::default() },
            ..eager_spec.clone()
        };
        // The same input through both: the replay must reproduce eager's output.
        let i = setup.cached(lab, ctx)?;
        let model = lab.model(i);
        let x = setup.input(model, ctx)?;
        let eager_out = forward(model, &x, &eager_spec, ctx.device)?;
        let captured = cuda_graph::capture(model, &x, &graph_spec, ctx.device)?;
        let replayed = captured.replay()?;
        synchronize(ctx.device)?;
        let (diff, scale) = max_rel_diff(&replayed, &eager_out)?;
        drop((replayed, captured, eager_out, x));

        let eager = measure(lab, ctx, eager_spec)?;
        let replay = measure(lab, ctx, graph_spec)?;
        let shift = Shift::of(&eager.latencies(), &replay.latencies());
        let reserved = |r: &Report| r.memory.peak_reserved_bytes.map_or(0.0, mib);
        figures.extend([
            fig_of(BATCH_P50_EAGER, &[&batch], eager.latency_ms.p50),
            fig_of(BATCH_P50_REPLAY, &[&batch], replay.latency_ms.p50),
            fig_of(BATCH_EAGER_OVER_REPLAY_CI_LOW, &[&batch], shift.bounds().0),
            fig_of(BATCH_EAGER_OVER_REPLAY_CI_HIGH, &[&batch], shift.bounds().1),
            fig_of(BATCH_RESERVED_EAGER, &[&batch], reserved(&eager)),
            fig_of(BATCH_RESERVED_REPLAY, &[&batch], reserved(&replay)),
            fig_of(BATCH_REPLAY_VS_EAGER_OUTPUT_MAX_DIFFERENCE, &[&batch], diff),
        ]);
        labels.extend([format!("eager, batch {batch}"), format!("replay, batch {batch}")]);
        p50s.extend([eager.latency_ms.p50, replay.latency_ms.p50]);
        texts.push(format!(
            "Batch {batch}: eager / replay {}; output difference {diff:.2e} at scale {scale:.2e}; reserved {:.1} MiB eager, {:.1} MiB replay.",
            shift.describe(),
            reserved(&eager),
            reserved(&replay)
        ));
        if batch == GRAPH_BATCHES[0] {
            at_one = Some((shift, diff, scale));
        }
    }
    let text = texts.join(" ");
    let (shift, diff, scale) = at_one.expect("batch 1 measured");
    let decision = if diff > 1e-3 * scale {
        Decision::rule(false, "", format!("The replay did not reproduce eager's output. {text}"))
    } else {
        Decision::latency(&shift, 1.0, 1.05, text.clone(), text)
    };
    // The same runs from Python, with torch.cuda.graph: beside, never deciding.
    let mut notes = vec![];
    let request = python::request(
        CUDA_GRAPHS.id,
        ctx.device,
        lab.config().threads,
        lab.config().seed,
        serde_json::json!({
            "model": model_id.as_str(),
            "size": Setup::with_batch(ctx, model_id, GRAPH_BATCHES[0], GradMode::InferenceMode).size,
            "batches": GRAPH_BATCHES,
            "warmup": GRAPH_WARMUP,
            "iters": GRAPH_ITERS,
        }),
    );
    let mut from_python = vec![];
    if let Some(t) = python::ask(ctx.python, ctx.control, &request, &mut notes)? {
        for batch in GRAPH_BATCHES {
            let (Some(eager), Some(replay)) = (t.arm(&format!("batch {batch}: eager")), t.arm(&format!("batch {batch}: replay"))) else {
                continue;
            };
            let py = Shift::of(eager, replay);
            from_python.extend(beside(&figures, &format!("batch {batch}: p50 eager"), py.slow_p50, "ms"));
            from_python.extend(beside(&figures, &format!("batch {batch}: p50 replay"), py.fast_p50, "ms"));
            from_python.extend(beside(&figures, &format!("batch {batch}: eager / replay, 95% interval low"), py.bounds().0, "ratio"));
            from_python.extend(beside(&figures, &format!("batch {batch}: eager / replay, 95% interval high"), py.bounds().1, "ratio"));
            notes.push(format!("Batch {batch} from Python: eager / replay {}.", py.describe()));
        }
    }
    figures.extend(from_python);
    Ok(Outcome::new(
        decision,
        cuda_graphs_line(ctx),
        ChartKind::Bar,
    )
    .figures(figures)
    .series(vec![series(P50_LATENCY_MS, labels, p50s)])
    .notes(notes))
}
