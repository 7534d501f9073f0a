//! Each pitfall experiment, one test per card, with one body per card run on every device
//! the build tests: the CPU always, CUDA on a GPU host (see the
//! `per_device!` list at the end, `common`'s macro). Each body asserts the invariant its verdict rests on and
//! the verdict that device must give (CUDA-only effects are not_applicable on a CPU, never
//! confirmed by accident). On the CPU, options keep every experiment to seconds on two
//! cores; on CUDA the cards run with their defaults, as the page runs them.
//!
//! The rules themselves (including when a card is not applicable) are tested with synthetic
//! CPU-like and CUDA-like figures next to them, in `engine/src/pitfalls/`.
//!
//! All tests share one worker, so experiments run one at a time on its device thread: the
//! timing cards never compete with another experiment for the cores or the GPU.

use crate::common;

use std::sync::OnceLock;

use engine::pitfalls;
use engine::{RunControl, Worker, WorkerConfig};
use protocol::{DeviceKind, FailureKind, ModelId, PitfallOptions, PitfallReport, Verdict};

fn worker() -> &'static Worker {
    static WORKER: OnceLock<Worker> = OnceLock::new();
    WORKER.get_or_init(|| Worker::start(WorkerConfig::default()).expect("worker starts"))
}

/// Runs card `id` on `device`; on the CPU with the `small` options, on CUDA with the card's
/// defaults (batch, budget) and only the model chosen.
fn run(device: DeviceKind, id: &'static str, small: PitfallOptions) -> PitfallReport {
    let small_copy = small.clone();
    let options = options_for(device, &small);
    let r = worker()
        .call(move |lab| pitfalls::run(lab, id, options, &RunControl::default()))
        .expect("worker alive")
        .unwrap_or_else(|f| panic!("{id}: {}", f.message));
    assert_eq!(r.id, id);
    answers_its_question(device, &r);
    check_report(device, id, r, small_copy)
}

/// The options a test runs card `id` with on `device` (see [`run`]).
fn options_for(device: DeviceKind, small: &PitfallOptions) -> PitfallOptions {
    let small = small.clone();
    match device {
        DeviceKind::Cpu => PitfallOptions {
            device: common::choice(device),
            ..small
        },
        DeviceKind::Cuda => PitfallOptions {
            device: common::choice(device),
            model: small.model,
            ..Default::default()
        },
    }
}

/// What every report of every card keeps (see [`run`]).
fn check_report(device: DeviceKind, id: &str, r: PitfallReport, small_copy: PitfallOptions) -> PitfallReport {
    let card = pitfalls::card(id).expect("a card");
    if r.verdict != Verdict::NotApplicable {
        // Every measured result names what it was measured on.
        assert!(r.reason.contains("Measured on"), "{id}: the reason states no setup: {}", r.reason);
        // ... and it is what the card said before the lock-in it would measure: the setup
        // is generated from the experiment's own settings, so the two cannot drift.
        let control = RunControl::default();
        let ctx = pitfalls::kit::Ctx { device, opts: options_for(device, &small_copy), control: &control, python: None };
        let planned = card.planned(&ctx);
        assert!(r.reason.contains(&planned[0]), "{id}: the card said it would measure `{}`, the run measured: {}", planned[0], r.reason);
    }
    // Every statement the card says this run decides names figures the report has.
    if r.verdict != Verdict::NotApplicable {
        for said in card.statements {
            if let pitfalls::How::Run(names) = said.known {
                for figure in names {
                    let name = figure.name();
                    let found = match name.strip_prefix('*') {
                        Some(suffix) => r.figures.iter().find(|f| f.name.ends_with(suffix)),
                        None => r.figures.iter().find(|f| f.name == name),
                    };
                    let found = found.unwrap_or_else(|| panic!("{id}: `{}` rests on figure `{name}`, which the report lacks: {:?}", said.text, r.figures.iter().map(|f| &f.name).collect::<Vec<_>>()));
                    assert_eq!(found.unit, figure.unit().as_str(), "{id}: `{name}` is reported in another unit than its const's");
                }
            }
        }
    }
    // An effect that cannot show on this device was said so before the lock-in, and a
    // prediction is never graded against the figure measured here.
    if card.not_here(device).is_some() {
        assert_eq!(r.verdict, Verdict::NotApplicable, "{id}: the card says a {device:?} cannot show it, yet: {}", r.reason);
    }
    if r.verdict == Verdict::NotApplicable {
        let scored = card.question.score_card(protocol::Prediction::Value(1.0), &r.figures, r.verdict, &r.reason);
        assert!(scored.right.is_none(), "{id}: graded where not applicable");
    }
    r
}

/// The cards whose effect needs a GPU and whose CPU report therefore has no figures: their
/// question is asked, and its answer recorded as not measured on the CPU.
const MEASURED_ON_CUDA_ONLY: [&str; 5] = ["allocated-vs-reserved", "empty-cache", "tf32", "cudnn-benchmark", "cuda-graphs"];

/// The card's question names figures its report has (every run of every card passes here),
/// so a prediction is always decided by the report of its own run.
fn answers_its_question(device: DeviceKind, r: &PitfallReport) {
    let question = &pitfalls::card(&r.id).expect("a card").question;
    let measured = question.measured(&r.figures);
    if device == DeviceKind::Cpu && MEASURED_ON_CUDA_ONLY.contains(&r.id.as_str()) {
        assert!(r.verdict == Verdict::NotApplicable && measured.is_none(), "{}: {:?}", r.id, r.figures);
        let scored = question.score(protocol::Prediction::Value(1.0), &r.figures);
        assert!(scored.right.is_none() && scored.sentence().contains("not measured"), "{}", r.id);
        return;
    }
    if r.figures.is_empty() && r.verdict == Verdict::NotApplicable {
        // A model that cannot show the effect at all (channels_last on an MLP).
        return;
    }
    let m = measured.unwrap_or_else(|| {
        panic!("{}: the question asks for `{}`{} but the report has {:?}", r.id, question.figure, question.over.as_deref().map(|o| format!(" / `{o}`")).unwrap_or_default(), r.figures.iter().map(|f| &f.name).collect::<Vec<_>>())
    });
    assert!(m.is_finite(), "{}: {m}", r.id);
    // A direction question is graded by the interval its verdict reads: the report has it.
    if question.ask == (protocol::Ask::Direction { timed: true }) {
        let [lo, hi] = question.interval(&r.figures).unwrap_or_else(|| panic!("{}: no interval figures {:?}", r.id, question.interval_names()));
        assert!(lo <= m && m <= hi, "{}: {m} outside its interval {lo}..{hi}", r.id);
    }
    // A byte question's verdict words its comparison by the rule that grades it: the
    // reason says "no difference" exactly where "about the same" is right.
    if let protocol::Ask::SameBytes { .. } = question.ask {
        let over = question.over.as_deref().expect("a ratio");
        let value = |name: &str| match name.strip_prefix('*') {
            Some(suffix) => r.figures.iter().find(|f| f.name.ends_with(suffix)),
            None => r.figures.iter().find(|f| f.name == name),
        }.map(|f| f.value).expect("figure");
        let (band, words) = pitfalls::kit::bytes_compared(value(&question.figure), value(over));
        assert!(r.reason.contains(&words), "{}: the verdict does not word its question's comparison (`{words}`): {}", r.id, r.reason);
        for c in [protocol::Choice::Lower, protocol::Choice::Same, protocol::Choice::Higher] {
            let right = question.score(protocol::Prediction::Choice(c), &r.figures).right;
            assert_eq!(right, Some(c == band), "{}: `{}` graded {right:?} while the verdict says {words}", r.id, c.as_str());
        }
    }
    // The value is one the question can be answered with: a scale covers it.
    if let protocol::Ask::LogScale { min, max, .. } | protocol::Ask::Bytes { min, max, .. } = question.ask {
        assert!((min..=max).contains(&m), "{}: measured {m} is off the question's scale {min}..{max}", r.id);
    }
}

fn defaults() -> PitfallOptions {
    PitfallOptions::default()
}

fn with_model(model: ModelId) -> PitfallOptions {
    PitfallOptions {
        model: Some(model),
        ..Default::default()
    }
}

fn figure(r: &PitfallReport, name: &str) -> f64 {
    r.figures
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("{}: no figure `{name}` in {:?}", r.id, r.figures))
        .value
}

/// `cpu` on the CPU, `cuda` on CUDA.
fn expect(device: DeviceKind, cpu: Verdict, cuda: Verdict) -> Verdict {
    if device == DeviceKind::Cpu {
        cpu
    } else {
        cuda
    }
}

mod forward;
mod generation;
mod tour;

use forward::*;
use generation::*;
use tour::*;

per_device!(
    a_card_answers_the_same_wherever_it_sits_in_the_tour,
    eval_and_autograd,
    nograd_and_dropout,
    inference_vs_nograd,
    inference_vs_nograd_from_python,
    autocast,
    autocast_transformer,
    batch_scaling,
    allocated_vs_reserved,
    empty_cache,
    output_lifetime,
    warm_up,
    timing_gpu_work,
    item_per_batch,
    freeze_vs_nograd,
    seed_table,
    unknown_cards_are_refused_by_name,
    a_cancelled_experiment_stops,
    predictions_are_scored_by_their_own_run,
    half_weights,
    channels_last,
    input_copy,
    cuda_only_cards,
    generation_cards,
);
