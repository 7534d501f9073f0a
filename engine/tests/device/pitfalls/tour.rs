//! The tour-order test: a card answers the same wherever it sits in the guided tour. The
//! same per-run, one-worker comparison on every device: the CPU runs it in `cargo test`, a
//! GPU host in the GPU check's `tour` step (scripts/gpu-check/tour.sh).
//!
//! Why one worker and per-run deltas: on CUDA the allocator's statistics are the whole
//! process's. A second worker's thread holds cuBLAS workspaces of its own (32 MiB on sm_90)
//! and its cached models, and a card that captures a CUDA graph leaves a workspace for its
//! capture stream; none of that is the card's. So every run here starts with the worker's
//! own reset (models dropped, the CUDA cache emptied, peaks reset, as `Card::run` does),
//! the test reads what the process holds right then, and a figure that reads the whole
//! process is compared as its excess over that start. Two runs' figures are then compared
//! by the one byte rule (`protocol::bytes_rule`): exact on the CPU, within the caching
//! allocator's remainders on CUDA.

use super::*;

use engine::pitfalls::allocator;
use engine::pitfalls::kit::FigureName;
use protocol::Unit;

/// The cards the test compares alone and after the tour: memory cards of both halves of the
/// tour, and on CUDA the two that read the caching allocator's pool (a tour would otherwise
/// leave them its high-water mark).
fn tour_order_cards(device: DeviceKind) -> Vec<&'static str> {
    let mut ids = vec!["eval-and-autograd", "freeze-vs-nograd", "kv-dtype"];
    if device == DeviceKind::Cuda {
        ids.extend(["allocated-vs-reserved", "empty-cache"]);
    }
    ids
}

/// Which of the process's readings a whole-process figure lies above.
#[derive(Clone, Copy)]
enum Pool {
    Allocated,
    Reserved,
}

/// The cards' byte figures that read the whole process (the allocator's statistics as
/// `torch.cuda.memory_allocated()` and `memory_reserved()` return them), not a difference the
/// card took itself: compared as their excess over the run's start. Every other byte
/// figure is already a difference inside the run (a peak above its baseline, a change).
const WHOLE_PROCESS: [(FigureName, Pool); 5] = [
    (allocator::ALLOCATED_AT_THE_RUNS_BASELINE_WEIGHTS_AND_INPUT, Pool::Allocated),
    (allocator::ALLOCATED_ONCE_THE_OUTPUT_WAS_FREED_WEIGHTS_AND_INPUT, Pool::Allocated),
    (allocator::ALLOCATED_AFTER_RELEASE, Pool::Allocated),
    (allocator::RESERVED_AFTER_RELEASE, Pool::Reserved),
    (allocator::PEAK_RESERVED_DURING_THE_RUN, Pool::Reserved),
];

/// What the process held when a run began, after the worker's reset.
#[derive(Clone, Copy, Debug)]
struct Start {
    allocated: u64,
    reserved: u64,
}

/// The options of every run of the test: the CPU's small sizes on the CPU; on CUDA the
/// cards' own sizes, with batch-scaling's search held to 2 GiB so the tour fits its step.
fn tour_options(device: DeviceKind) -> PitfallOptions {
    PitfallOptions {
        device: common::choice(device),
        budget_bytes: (device == DeviceKind::Cuda).then_some(2 << 30),
        ..defaults()
    }
}

/// Runs card `id` on `w`, and what the process held when it began.
fn run_from_start(w: &Worker, device: DeviceKind, id: &'static str) -> (PitfallReport, Start) {
    let options = tour_options(device);
    w.call(move |lab| {
        lab.fresh_state(device)?;
        engine::torch_call::synchronize(device)?;
        let r = lab.meter(device).read().map_err(engine::torch_call::torch_failure)?;
        let start = Start { allocated: r.allocated, reserved: r.reserved.unwrap_or(0) };
        Ok((pitfalls::run(lab, id, options, &RunControl::default())?, start))
    })
    .expect("worker alive")
    .unwrap_or_else(|f: protocol::RunFailure| panic!("{id}: {}", f.message))
}

/// A figure of `r` as the test compares it: its excess over the run's start where it reads
/// the whole process.
fn comparable(name: &str, value: f64, start: Start) -> f64 {
    match WHOLE_PROCESS.iter().find(|(n, _)| n.name() == name).map(|(_, p)| *p) {
        Some(Pool::Allocated) => value - start.allocated as f64,
        Some(Pool::Reserved) => value - start.reserved as f64,
        None => value,
    }
}

/// A card gives the same answer wherever it sits in the tour: on one worker, run alone
/// first, then after every card of the tour, its verdict is the same and its byte figures
/// agree by the one byte rule, each taken above its own run's start.
pub(super) fn a_card_answers_the_same_wherever_it_sits_in_the_tour(device: DeviceKind) {
    let w = common::worker();
    let alone: Vec<(PitfallReport, Start)> = tour_order_cards(device).into_iter().map(|id| run_from_start(&w, device, id)).collect();
    for card in pitfalls::CARDS {
        if card.not_here(device).is_none() {
            run_from_start(&w, device, card.id);
        }
    }
    for (first, s0) in alone {
        let (after, s1) = run_from_start(&w, device, pitfalls::card(&first.id).unwrap().id);
        assert_eq!(first.verdict, after.verdict, "{}: alone {} / after the tour {}", first.id, first.reason, after.reason);
        // The driver's count of the whole device (CUDA context, lazily loaded kernels,
        // cuDNN's handle) is not the card's: only what the allocator and the counters hold.
        for f in first.figures.iter().filter(|f| f.unit == "bytes" && !f.name.contains("device used")) {
            let (a, b) = (comparable(&f.name, f.value, s0), comparable(&f.name, figure(&after, &f.name), s1));
            assert!(a >= 0.0 && b >= 0.0, "{}: `{}` lies below its run's start ({a} B alone, {b} B after the tour; starts {s0:?}, {s1:?})", first.id, f.name);
            assert!(
                protocol::bytes_rule::same_peak(device, a as u64, b as u64),
                "{}: `{}` alone {a} B above its start, after the tour {b} B (starts {s0:?}, {s1:?}; allowed {} B)",
                first.id,
                f.name,
                protocol::bytes_rule::peak_slack(device, a as u64, b as u64)
            );
        }
    }
}

#[test]
fn the_whole_process_figures_are_the_ones_the_cards_report() {
    // A renamed figure would silently be compared whole again: each name here is a const
    // (a misspelt one does not compile) that allocated-vs-reserved's own file defines, a
    // byte figure.
    let source = include_str!("../../../src/pitfalls/allocator/allocated_vs_reserved.rs");
    for (name, _) in WHOLE_PROCESS {
        assert!(source.contains(&format!("\"{}\"", name.name())), "`{}` is no figure of engine/src/pitfalls/allocator/allocated_vs_reserved.rs", name.name());
        assert_eq!(name.unit(), Unit::Bytes, "`{}`", name.name());
    }
}
