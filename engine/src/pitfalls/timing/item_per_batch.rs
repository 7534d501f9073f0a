//! item-per-batch: .item() on every batch makes the CPU wait for the GPU, which then idles while
//! the CPU queues the next batch.

use protocol::{ChartKind, DeviceKind, GradMode, ModelId, RunFailure, RunSpec};
use tch::{Kind, Tensor};

use super::super::kit::{describe, fig, p, series, time_passes, Ctx, Decision, Outcome, Setup, Shift};
use super::super::python::{self, beside};
use super::super::{Card, Needs, Said};
use super::from_rust;
use crate::input::Input;
use crate::lab::{forward, Lab};
use crate::torch_call::{catch_torch, tch_device};
use crate::pitfalls::kit::FigureName;
use protocol::Unit;

// The figures this file's cards report, each defined once (see `kit::figure`).
pub const ONE_BATCH_LAUNCHES_ALONE_NAIVE_P50: FigureName = FigureName::new("one batch: launches alone (naive p50)", Unit::Ms);
pub const LOOP_WITH_ITEM_PER_BATCH: FigureName = FigureName::new("loop with .item() per batch", Unit::Ms);
pub const LOOP_ACCUMULATING_ON_DEVICE: FigureName = FigureName::new("loop accumulating on device", Unit::Ms);
pub const RATIO: FigureName = FigureName::new("ratio", Unit::Ratio);
pub const RATIO_CI_LOW: FigureName = FigureName::new("ratio, 95% interval low", Unit::Ratio);
pub const RATIO_CI_HIGH: FigureName = FigureName::new("ratio, 95% interval high", Unit::Ratio);
pub const ONE_BATCH_SYNCHRONISED_P50: FigureName = FigureName::new("one batch: synchronised p50", Unit::Ms);
pub const F_20_BATCH_LOOP_P50_MS: FigureName = FigureName::new("20-batch loop, p50 (ms)", Unit::Ms);

pub const ITEM_PER_BATCH: Card = Card {
    id: "item-per-batch",
    title: ".item() every batch stalls the GPU pipeline",
    asks: "What does reading loss.item() on every batch do to a validation loop's time on a GPU?",
    labels: ["total += loss.item() on every batch", "total += loss.detach() on the device, one .item() at the end"],
    setup: item_per_batch_setup,
    needs: Needs::Cuda(".item() on a CPU tensor reads host memory: there is no CUDA device in this server's run of the card."),
    claim: "On a GPU, .item() on every batch makes the CPU wait until the GPU has finished that batch before it queues the next, so the GPU sits idle while the CPU queues each batch; accumulating on the device and reading once at the end lets the CPU queue batch i+1 while the GPU runs batch i, which is faster where the GPU has work to overlap. Gradless queues each batch from Rust through libtorch, with no Python interpreter per op; from Python, as a team's code runs, the CPU's share of each batch is larger, and where this server has a Python the same loops timed from it are shown beside.",
    statements: &[
        Said::torch(".item() runs aten::_local_scalar_dense, which copies one element to the host.", "test_runtime.py::test_item_reads_the_value_through_local_scalar_dense"),
        Said::source("On a GPU that copy synchronises the stream: it returns only once every kernel queued before it has finished.", "aten/src/ATen/native/cuda/CUDAScalar.cu", "_local_scalar_dense_cuda", "more-cards"),
        Said::run("Without a read-back, a batch's forward pass returns before the GPU has run it: issuing its ops took less than the synchronised batch.", &[ONE_BATCH_LAUNCHES_ALONE_NAIVE_P50, ONE_BATCH_SYNCHRONISED_P50]),
        Said::run("The loop reading .item() on every batch took longer than the loop accumulating on the device and reading once: each read stops the CPU from queueing the next batch while the GPU works.", &[LOOP_WITH_ITEM_PER_BATCH, LOOP_ACCUMULATING_ON_DEVICE, RATIO, RATIO_CI_LOW, RATIO_CI_HIGH]),
    ],
    source: "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#avoid-unnecessary-cpu-gpu-synchronization",
    pitfall: "total += loss.item()  # every batch",
    fix: "total += loss.detach()  # on the device; total.item() once",
    threshold: "CUDA: over 15 alternating loops of 20 batches each, confirmed when the 95% bootstrap interval of the p50 ratio (.item() loop / accumulating loop) lies wholly above 1, refuted when it lies wholly below 1.05 (any cost under 5%), inconclusive otherwise. Regime: a sync per batch costs the overlap between the CPU queueing batch i+1 and the GPU computing batch i, which is largest when the two take similar time; if the GPU's work per batch is tiny there is nothing to overlap. The batch grows (×4, from 256 up to 16384) until a synchronised batch takes at least 2× its launches alone (the naive time); if it never does, not_applicable (launch-bound). Gradless queues each batch from Rust through libtorch, without Python's per-op cost: in Python the CPU's share of each batch is larger, and so is the overlap a per-batch sync throws away. Where the server has a Python, the same loops are also timed from it at the same batch (figures \"Python: …\", and \"Python / Gradless: …\", Python's time over Gradless's; a batch's launches alone only on CUDA), what a team's code sees; they do not decide the verdict. On a CPU there is no device to wait for: not_applicable, with both loop times reported",
    question: super::super::ratio("The Tiny MLP on a GPU, a loop of 20 batches, at a batch where a synchronised batch takes at least 2× its launches alone: the loop's p50 with .item() on every batch as a multiple of its p50 accumulating on the device and reading once?", LOOP_WITH_ITEM_PER_BATCH, LOOP_ACCUMULATING_ON_DEVICE, super::super::SAME_TIME),
    experiment: item_per_batch,
};

/// How many times its launches a synchronised batch must take (see the threshold).
const OVERLAP: f64 = 2.0;

/// The item-per-batch rule: `launch_ms`/`synced_ms` are one batch's naive and synchronised p50s
/// at the chosen batch; `item`/`acc` the loop times.
pub fn item_per_batch_rule(
    device: DeviceKind,
    launch_ms: f64,
    synced_ms: f64,
    item: &[f64],
    acc: &[f64],
) -> Decision {
    let shift = Shift::of(item, acc);
    let (i, a) = (shift.slow_p50, shift.fast_p50);
    if device == DeviceKind::Cpu {
        return Decision::not_applicable(format!("On a CPU, .item() has no device to wait for: {i:.3} vs {a:.3} ms ({}), only bookkeeping differs. The pitfall needs an asynchronous device such as a CUDA GPU.", shift.describe()));
    }
    if synced_ms < OVERLAP * launch_ms {
        return Decision::not_applicable(format!("Launch-bound: a synchronised batch took {synced_ms:.3} ms against {launch_ms:.3} ms of launches, at the largest batch tried; the GPU has too little work to overlap."));
    }
    Decision::latency(
        &shift,
        1.0,
        1.05,
        format!("The loop with .item() per batch took {i:.3} ms, accumulating on the device {a:.3} ms: {}.", shift.describe()),
        format!("No cost beyond noise here: {i:.3} vs {a:.3} ms, {}.", shift.describe()),
    )
}

/// The batches per loop, and the loops of each kind, item-per-batch times.
const LOOP_BATCHES: usize = 20;
const ITEM_ROUNDS: usize = 15;
/// The largest batch item-per-batch grows to on a GPU.
const ITEM_MAX_BATCH: u32 = 16384;

/// What item-per-batch starts from, and the line its report is measured on (on a GPU, the batch
/// range; the batch chosen follows it).
fn item_plan(ctx: &Ctx) -> (Setup, String) {
    let setup = Setup::new(ctx, ModelId::TinyMlp, (64, 256), GradMode::NoGrad);
    let line = if ctx.cuda() {
        describe(
            setup.model,
            format!("{} to {ITEM_MAX_BATCH} (×4 until a synchronised batch takes at least {OVERLAP}× the time of its launches alone)", setup.batch),
            setup.size,
        )
    } else {
        setup.describe()
    };
    (setup, line)
}

fn item_per_batch_setup(ctx: &Ctx) -> Vec<String> {
    let (s, line) = item_plan(ctx);
    let mut lines = vec![
        line,
        crate::pitfalls::kit::arms(format!("a loop of {LOOP_BATCHES} batches adding each batch's mean output to a float on the host with .item()"), format!("a loop of {LOOP_BATCHES} batches adding it to a tensor on the device, read with .item() once at the end")),
        format!("{ITEM_ROUNDS} loops of each kind, alternating, each timed whole (eval(), torch.no_grad(), fp32); the {LOOP_BATCHES} inputs are on the device before the loop starts"),
        from_rust(s.model),
        python::SETUP.into(),
    ];
    lines.extend(super::super::memory::architecture(s.model, s.size));
    lines
}

fn item_per_batch(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let (mut setup, measured_on) = item_plan(ctx);
    let i = setup.cached(lab, ctx)?;
    let model = lab.model(i);
    // One batch's launches alone (naive) and with the device's work (synchronised).
    let batch_times = |setup: &Setup| -> Result<(f64, f64), RunFailure> {
        let x = setup.input(model, ctx)?;
        let t = time_passes(ctx, 5, 2, |variant, clock| {
            let out = forward(model, &x, &setup.spec, ctx.device)?;
            if variant == 0 {
                clock.stop();
            }
            Ok(out)
        })?;
        Ok((p(&t[0], 50.0), p(&t[1], 50.0)))
    };
    let (mut launch, mut synced) = batch_times(&setup)?;
    while ctx.cuda() && synced < OVERLAP * launch && setup.batch * 4 <= ITEM_MAX_BATCH {
        setup = Setup::with_batch(ctx, setup.model, setup.batch * 4, GradMode::NoGrad);
        (launch, synced) = batch_times(&setup)?;
    }
    let batches = (0..LOOP_BATCHES)
        .map(|_| setup.input(model, ctx))
        .collect::<Result<Vec<Input>, RunFailure>>()?;
    let device = tch_device(ctx.device);
    let spec: &RunSpec = &setup.spec;
    let run_loop = |per_batch_item: bool| -> Result<f64, RunFailure> {
        let mut host_total = 0.0;
        let mut device_total = catch_torch(|| Tensor::zeros([], (Kind::Float, device)))?;
        for x in &batches {
            let out = forward(model, x, spec, ctx.device)?;
            catch_torch(|| {
                let loss = out.mean(Kind::Float);
                if per_batch_item {
                    host_total += loss.double_value(&[]);
                } else {
                    device_total += loss;
                }
            })?;
        }
        catch_torch(|| host_total + device_total.double_value(&[]))
    };
    run_loop(true)?;
    run_loop(false)?;
    let rounds = ITEM_ROUNDS;
    let times = time_passes(ctx, rounds, 2, |variant, _| {
        run_loop(variant == 0).map(std::hint::black_box)
    })?;
    let (item, acc) = (&times[0], &times[1]);
    let shift = Shift::of(item, acc);
    let figures: Vec<protocol::Figure> = vec![
        fig(LOOP_WITH_ITEM_PER_BATCH, shift.slow_p50),
        fig(LOOP_ACCUMULATING_ON_DEVICE, shift.fast_p50),
        fig(RATIO, shift.slow_p50 / shift.fast_p50),
        fig(RATIO_CI_LOW, shift.bounds().0),
        fig(RATIO_CI_HIGH, shift.bounds().1),
        fig(ONE_BATCH_LAUNCHES_ALONE_NAIVE_P50, launch),
        fig(ONE_BATCH_SYNCHRONISED_P50, synced),
    ]
    .into_iter()
    .chain(super::super::kit::interval_figures(&ITEM_PER_BATCH.question, &shift))
    .collect();
    // The same loops from Python, at the batch chosen here: beside, never deciding.
    let mut notes = vec![];
    let request = python::request(
        ITEM_PER_BATCH.id,
        ctx.device,
        lab.config().threads,
        lab.config().seed,
        serde_json::json!({
            "model": setup.model.as_str(),
            "size": setup.size,
            "batch": setup.batch,
            "rounds": rounds,
            "loop_batches": LOOP_BATCHES,
            "batch_rounds": 5,
        }),
    );
    let mut from_python = vec![];
    if let Some(t) = python::ask(ctx.python, ctx.control, &request, &mut notes)? {
        if let Some(naive) = t.arm("batch naive") {
            from_python.extend(beside(&figures, "one batch: launches alone (naive p50)", p(naive, 50.0), "ms"));
        }
        if let Some(one) = t.arm("batch synchronised") {
            from_python.extend(beside(&figures, "one batch: synchronised p50", p(one, 50.0), "ms"));
        }
        if let (Some(py_item), Some(py_acc)) = (t.arm("item"), t.arm("accumulate")) {
            let py = Shift::of(py_item, py_acc);
            from_python.extend(beside(&figures, "loop with .item() per batch", py.slow_p50, "ms"));
            from_python.extend(beside(&figures, "loop accumulating on device", py.fast_p50, "ms"));
            from_python.extend(beside(&figures, "ratio", py.slow_p50 / py.fast_p50, "ratio"));
            from_python.extend(beside(&figures, "ratio, 95% interval low", py.bounds().0, "ratio"));
            from_python.extend(beside(&figures, "ratio, 95% interval high", py.bounds().1, "ratio"));
            notes.push(format!(
                "From Python: the .item() loop took {:.3} ms, the accumulating loop {:.3} ms ({}); the accumulating loop took {:.2}× Gradless's.",
                py.slow_p50,
                py.fast_p50,
                py.describe(),
                py.fast_p50 / shift.fast_p50
            ));
        }
    }
    Ok(Outcome::new(
        item_per_batch_rule(ctx.device, launch, synced, item, acc),
        if ctx.cuda() {
            format!("{measured_on}: batch {} here, {LOOP_BATCHES} batches per loop, {rounds} loops of each kind (alternating)", setup.batch)
        } else {
            format!("{measured_on}, {LOOP_BATCHES} batches per loop, {rounds} loops of each kind (alternating)")
        },
        ChartKind::Bar,
    )
    .figures(figures.into_iter().chain(from_python).collect())
    .notes(notes)
    .series(vec![series(
        F_20_BATCH_LOOP_P50_MS,
        vec![
            ".item() per batch".into(),
            "accumulate, .item() once".into(),
        ],
        vec![shift.slow_p50, shift.fast_p50],
    )]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use super::super::around;
    use protocol::Verdict;

    #[test]
    fn item_per_batch_is_not_applicable_on_a_cpu_and_noise_aware_on_cuda() {
        use DeviceKind::*;
        let (fast, slow) = (around(10.0), around(12.0));
        // CPU: not applicable even with a difference.
        assert_eq!(
            item_per_batch_rule(Cpu, 1.0, 1.0, &slow, &fast).verdict,
            Verdict::NotApplicable
        );
        // CUDA with work to overlap: a shift beyond noise confirms, none refutes.
        assert_eq!(
            item_per_batch_rule(Cuda, 0.1, 0.4, &slow, &fast).verdict,
            Verdict::Confirmed
        );
        assert_eq!(
            item_per_batch_rule(Cuda, 0.1, 0.4, &fast, &fast).verdict,
            Verdict::Refuted
        );
        // A difference within the noise (interleaved samples) does not confirm: it is
        // refuted where the interval rules out a 5% cost, inconclusive where it cannot.
        let jitter: Vec<f64> = (0..20)
            .map(|i| 10.0 + if i % 2 == 0 { 0.5 } else { -0.4 })
            .collect();
        let jitter2: Vec<f64> = (0..20)
            .map(|i| 10.0 + if i % 2 == 0 { -0.5 } else { 0.45 })
            .collect();
        assert_eq!(
            item_per_batch_rule(Cuda, 0.1, 0.4, &jitter, &jitter2).verdict,
            Verdict::Inconclusive
        );
        // CUDA, launch-bound → not applicable.
        assert_eq!(
            item_per_batch_rule(Cuda, 0.1, 0.15, &slow, &fast).verdict,
            Verdict::NotApplicable
        );
    }
}
