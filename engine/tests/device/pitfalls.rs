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
                for name in names {
                    let found = match name.strip_prefix('*') {
                        Some(suffix) => r.figures.iter().any(|f| f.name.ends_with(suffix)),
                        None => r.figures.iter().any(|f| f.name == *name),
                    };
                    assert!(found, "{id}: `{}` rests on figure `{name}`, which the report lacks: {:?}", said.text, r.figures.iter().map(|f| &f.name).collect::<Vec<_>>());
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

fn eval_not_nograd(device: DeviceKind) {
    let r = run(device, "eval-not-nograd", defaults());
    assert!(
        figure(&r, "eval+grad peak above baseline")
            > figure(&r, "eval+no_grad peak above baseline")
    );
    assert_eq!(r.verdict, Verdict::Confirmed, "{}", r.reason);
}

fn nograd_not_eval(device: DeviceKind) {
    let r = run(device, "nograd-not-eval", defaults());
    assert!(
        figure(&r, "train+no_grad: max |Δ| same input twice") > 0.0,
        "dropout differs in train mode"
    );
    assert_eq!(
        figure(&r, "eval+no_grad: max |Δ| same input twice"),
        0.0,
        "eval is deterministic"
    );
    assert!(figure(&r, "train+no_grad: max |Δ| sample 0 with other batch-mates") > 0.0);
    assert_eq!(
        figure(&r, "eval+no_grad: max |Δ| sample 0 with other batch-mates"),
        0.0
    );
    assert!(
        figure(&r, "train+no_grad: running mean change") > 0.0,
        "BatchNorm stats move under no_grad"
    );
    assert_eq!(r.verdict, Verdict::Confirmed, "{}", r.reason);
}

fn inference_vs_nograd(device: DeviceKind) {
    let r = run(device, "inference-vs-nograd", defaults());
    assert_eq!(figure(&r, "error raised"), 1.0);
    assert_eq!(figure(&r, "clone() fix works"), 1.0);
    // The verdict rests on memory only; each model's latency is labelled against its noise.
    let latency_notes = r
        .notes
        .iter()
        .filter(|n| n.contains("not part of the verdict") && n.contains("noise"))
        .count();
    assert_eq!(latency_notes, 2, "{:?}", r.notes);
    assert!(!r.claim.contains("overhead, not memory"));
    assert_eq!(r.verdict, Verdict::Confirmed, "{}", r.reason);
    // This worker has no Python: a note says so, never an error, and no Python figure.
    assert!(r.notes.iter().any(|n| n.starts_with("Not timed from Python: this server has no Python configured")), "{:?}", r.notes);
    assert!(!r.figures.iter().any(|f| f.name.starts_with("Python")), "{:?}", r.figures);
}

/// The venv's Python (scripts/test.sh exports GRADLESS_PYTHON), which the build's libtorch
/// comes from unless LIBTORCH names another: `None` only then, when it is absent.
fn venv_python() -> Option<std::path::PathBuf> {
    let path = std::env::var_os("GRADLESS_PYTHON").map(std::path::PathBuf::from).unwrap_or_else(|| {
        let venv = std::env::var_os("GRADLESS_VENV").map(std::path::PathBuf::from);
        venv.unwrap_or_else(|| std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/gradless/venv")).join("bin/python")
    });
    if path.is_file() {
        return Some(path);
    }
    assert!(std::env::var_os("LIBTORCH").is_some(), "no Python at {} (set GRADLESS_PYTHON)", path.display());
    eprintln!("skipped: no Python at {} (a LIBTORCH build)", path.display());
    None
}

/// With a Python configured, inference-vs-nograd carries the same runs timed from Python
/// beside Gradless's figures (each finite and positive, with Python / Gradless), while its
/// question is still answered by Gradless's own figure.
fn inference_vs_nograd_from_python(device: DeviceKind) {
    let Some(python) = venv_python() else { return };
    let peer = pitfalls::PythonPeer::new(python);
    let options = options_for(device, &defaults());
    let r = worker()
        .call(move |lab| pitfalls::run_with(lab, "inference-vs-nograd", options, &RunControl::default(), Some(&peer)))
        .expect("worker alive")
        .unwrap_or_else(|f| panic!("inference-vs-nograd: {}", f.message));
    answers_its_question(device, &r);
    let r = check_report(device, "inference-vs-nograd", r, defaults());
    assert!(r.notes.iter().any(|n| n.starts_with("Also timed from Python")), "{:?}", r.notes);
    let ours: Vec<_> = r.figures.iter().filter(|f| !f.name.starts_with("Python") && (f.name.ends_with(" no_grad p50") || f.name.ends_with(" inference_mode p50"))).collect();
    assert_eq!(ours.len(), 4, "{:?}", r.figures);
    for f in ours {
        for name in [format!("Python: {}", f.name), format!("Python / Gradless: {}", f.name)] {
            let v = figure(&r, &name);
            assert!(v.is_finite() && v > 0.0, "{name}: {v}");
        }
    }
    let ratio = figure(&r, "Python: tiny_mlp b1 latency ratio inference_mode / no_grad");
    assert!(ratio.is_finite() && ratio > 0.0, "{ratio}");
    let question = &pitfalls::card("inference-vs-nograd").unwrap().question;
    assert_eq!(question.measured(&r.figures), Some(figure(&r, "tiny_mlp b1 latency ratio inference_mode / no_grad")));
    println!("{}", r.notes.iter().filter(|n| n.contains("Python")).cloned().collect::<Vec<_>>().join("\n"));
    for f in r.figures.iter().filter(|f| f.name.contains(" p50")) {
        println!("{}: {:.4} {}", f.name, f.value, f.unit);
    }
}

fn autocast(device: DeviceKind) {
    let r = run(device, "autocast", with_model(ModelId::TinyMlp));
    assert_eq!(figure(&r, "weights still float32"), 1.0);
    if device == DeviceKind::Cpu {
        assert!(
            r.notes.iter().any(|n| n == "bf16 output dtype: BFloat16"),
            "{:?}",
            r.notes
        );
        assert_eq!(figure(&r, "bf16 linear layer output is bf16"), 1.0);
    }
    assert_eq!(r.verdict, Verdict::Confirmed, "{}", r.reason);
}

/// The transformer ends in LayerNorm, which autocast keeps in fp32: the card must look at a
/// linear layer inside the model, not at the output.
fn autocast_transformer(device: DeviceKind) {
    let r = run(device, "autocast", with_model(ModelId::Transformer));
    let low = if device == DeviceKind::Cpu {
        "bf16"
    } else {
        "fp16"
    };
    assert!(
        r.notes
            .iter()
            .any(|n| n == &format!("{low} output dtype: Float")),
        "the output stays fp32: {:?}",
        r.notes
    );
    assert_eq!(
        figure(&r, &format!("{low} linear layer output is {low}")),
        1.0
    );
    assert_eq!(r.verdict, Verdict::Confirmed, "{}", r.reason);
}

fn batch_scaling(device: DeviceKind) {
    let r = run(
        device,
        "batch-scaling",
        PitfallOptions {
            budget_bytes: Some(96 << 20),
            ..Default::default()
        },
    );
    assert!(
        figure(&r, "no_grad: largest batch within budget")
            > figure(&r, "grad enabled: largest batch within budget"),
        "{}",
        r.reason
    );
    assert!(
        figure(&r, "grad enabled: memory per sample (slope)")
            > figure(&r, "no_grad: memory per sample (slope)")
    );
    // Each sweep says why it ended.
    for mode in ["grad enabled:", "no_grad:"] {
        assert!(
            r.notes.iter().any(|n| n.starts_with(mode)),
            "{mode} {:?}",
            r.notes
        );
    }
    if device != DeviceKind::Cpu {
        assert_eq!(
            figure(&r, "memory budget"),
            protocol::DEFAULT_CUDA_BUDGET_BYTES as f64
        );
        assert_eq!(r.verdict, Verdict::Confirmed, "{}", r.reason);
    }
}

fn allocated_vs_reserved(device: DeviceKind) {
    let r = run(device, "allocated-vs-reserved", defaults());
    let want = expect(device, Verdict::NotApplicable, Verdict::Confirmed);
    assert_eq!(r.verdict, want, "{}", r.reason);
    if want == Verdict::Confirmed {
        assert!(figure(&r, "reserved after release") > figure(&r, "allocated after release"));
    }
}

fn empty_cache(device: DeviceKind) {
    let r = run(device, "empty-cache", defaults());
    let want = expect(device, Verdict::NotApplicable, Verdict::Confirmed);
    assert_eq!(r.verdict, want, "{}", r.reason);
    if want == Verdict::NotApplicable {
        assert!(r.reason.contains("CUDA"), "{}", r.reason);
    } else {
        assert_eq!(figure(&r, "allocated change from empty_cache"), 0.0);
    }
}

fn output_lifetime(device: DeviceKind) {
    let r = run(device, "output-lifetime", with_model(ModelId::TinyMlp));
    let with_grad = figure(&r, "growth per request, kept with grad");
    let kept = figure(&r, "growth per request, kept on device");
    assert_eq!(
        figure(&r, "growth per request, dropped"),
        0.0,
        "dropped outputs free everything"
    );
    assert!(kept > 0.0 && with_grad > kept);
    assert_eq!(r.verdict, Verdict::Confirmed, "{}", r.reason);
}

fn warm_up(device: DeviceKind) {
    // On a CPU the first pass of a new shape pays for oneDNN's primitive creation, a few
    // milliseconds against a pass of tens: real, but small enough that a busy 2-core machine
    // can hide it once. Three fresh shapes; the effect must show in at least one.
    let attempts: Vec<String> = (0..3)
        .map(|_| run(device, "warm-up", with_model(ModelId::Resnet18)))
        .map(|r| {
            let slower = figure(&r, "first iteration") > figure(&r, "median of iterations 6-15");
            format!(
                "{}{}",
                if slower { "slower: " } else { "not slower: " },
                r.reason
            )
        })
        .collect();
    assert!(
        attempts.iter().any(|a| a.starts_with("slower")),
        "{attempts:#?}"
    );
}

fn sync_timing(device: DeviceKind) {
    let r = run(device, "sync-timing", with_model(ModelId::Resnet18));
    let want = expect(device, Verdict::NotApplicable, Verdict::Confirmed);
    assert_eq!(r.verdict, want, "{}", r.reason);
}

fn item_sync(device: DeviceKind) {
    let r = run(device, "item-sync", defaults());
    let want = expect(device, Verdict::NotApplicable, Verdict::Confirmed);
    assert_eq!(r.verdict, want, "{}", r.reason);
    assert!(figure(&r, "loop with .item() per batch") > 0.0);
}

fn freeze_vs_nograd(device: DeviceKind) {
    let r = run(device, "freeze-vs-nograd", defaults());
    let (full, partial, frozen, nograd) = (
        figure(&r, "all trainable"),
        figure(&r, "backbone frozen (last stage + head trainable)"),
        figure(&r, "all frozen"),
        figure(&r, "no_grad"),
    );
    assert!(nograd < partial && partial < full, "{}", r.reason);
    // The question's band: the same bytes within 1%.
    assert!((frozen - nograd).abs() <= 0.01 * nograd, "{}", r.reason);
    assert_eq!(r.verdict, Verdict::Confirmed, "{}", r.reason);
}

fn seed_table(device: DeviceKind) {
    // Batch 8 on the CPU: at batch 2 the no_grad peak is dominated by weight-sized
    // workspace, not activations.
    let r = run(
        device,
        "seed-table",
        PitfallOptions {
            model: Some(ModelId::Resnet18),
            batch: Some(8),
            ..Default::default()
        },
    );
    let table = r.table.as_ref().expect("a table");
    assert_eq!(table.rows.len(), 5);
    assert_eq!(table.rows[0][0], "train");
    assert_eq!(r.verdict, Verdict::Confirmed, "{}", r.reason);
}

fn unknown_cards_are_refused_by_name(_device: DeviceKind) {
    assert!(pitfalls::card("nope").is_none());
    let err = worker()
        .call(|lab| {
            pitfalls::run(
                lab,
                "nope",
                PitfallOptions::default(),
                &RunControl::default(),
            )
        })
        .unwrap()
        .unwrap_err();
    assert_eq!(err.kind, FailureKind::Invalid);
    assert!(err.message.contains("unknown pitfall `nope`"));
    assert_eq!(pitfalls::catalogue(DeviceKind::Cpu).len(), pitfalls::CARDS.len());
    assert!(pitfalls::catalogue(DeviceKind::Cpu).iter().any(|c| c.id == "generate-no-grad"));
}

/// A prediction sent with the options is scored in the report against its own figures; one
/// the question cannot take is refused, naming the field, before anything runs.
fn predictions_are_scored_by_their_own_run(device: DeviceKind) {
    let predicted = PitfallOptions {
        prediction: Some(protocol::Prediction::Value(0.25)),
        ..defaults()
    };
    let r = run(device, "gqa", predicted);
    let scored = r.prediction.expect("scored");
    // Exactly 2 of 8 KV heads: a quarter of the bytes, so ×0.25 is right.
    assert_eq!(scored.measured, Some(0.25));
    assert_eq!(scored.right, Some(true), "{}", scored.sentence());
    assert_eq!(scored.sentence(), "predicted ×0.25, measured ×0.25: right");
    let skipped = run(device, "gqa", PitfallOptions { prediction: Some(protocol::Prediction::Skipped), ..defaults() });
    assert!(skipped.prediction.unwrap().sentence().starts_with("run without predicting"));
    assert!(run(device, "gqa", defaults()).prediction.is_none());
    let options = PitfallOptions {
        device: common::choice(device),
        prediction: Some(protocol::Prediction::Value(50.0)),
        ..defaults()
    };
    let err = worker().check_experiment("gqa", options).unwrap_err().to_string();
    assert!(err.contains("prediction") && err.contains("×10"), "{err}");
}

fn a_cancelled_experiment_stops(device: DeviceKind) {
    let control = RunControl::default();
    control
        .cancel
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let options = PitfallOptions {
        device: common::choice(device),
        ..Default::default()
    };
    let err = worker()
        .call(move |lab| pitfalls::run(lab, "sync-timing", options, &control))
        .unwrap()
        .unwrap_err();
    assert_eq!(err.kind, FailureKind::Cancelled, "{}", err.message);
}

fn half_weights(device: DeviceKind) {
    let r = run(device, "half-weights", with_model(ModelId::Resnet18));
    let low = if device == DeviceKind::Cpu { "bf16" } else { "fp16" };
    // The invariant: exactly half the parameter bytes; autocast keeps fp32's.
    let fp32 = figure(&r, "fp32 parameters");
    assert_eq!(2.0 * figure(&r, &format!("{low} weights parameters")), fp32);
    assert_eq!(figure(&r, &format!("{low} autocast parameters")), fp32);
    assert_eq!(r.verdict, Verdict::Confirmed, "{}", r.reason);
}

fn channels_last(device: DeviceKind) {
    let r = run(device, "channels-last", with_model(ModelId::Resnet18));
    assert_eq!(figure(&r, "input has NHWC strides"), 1.0);
    assert_eq!(figure(&r, "conv weights with NHWC strides"), figure(&r, "conv weights"));
    assert_eq!(r.verdict, Verdict::Confirmed, "{}", r.reason);
    // A model without convolutions: nothing to lay out.
    let mlp = run(device, "channels-last", with_model(ModelId::TinyMlp));
    assert_eq!(mlp.verdict, Verdict::NotApplicable, "{}", mlp.reason);
}

fn input_copy(device: DeviceKind) {
    let r = run(device, "input-copy", with_model(ModelId::Resnet18));
    // Each copy adds exactly the input's bytes to the pass's peak.
    assert_eq!(
        figure(&r, "peak above baseline, copied from pageable"),
        figure(&r, "peak above baseline, input on the device") + figure(&r, "input bytes")
    );
    let want = expect(device, Verdict::NotApplicable, Verdict::Confirmed);
    assert_eq!(r.verdict, want, "{}", r.reason);
}

fn cuda_only_cards(device: DeviceKind) {
    for id in ["tf32", "cudnn-benchmark", "cuda-graphs"] {
        let r = run(device, id, defaults());
        let want = expect(device, Verdict::NotApplicable, Verdict::Confirmed);
        assert_eq!(r.verdict, want, "{id}: {}", r.reason);
        if device == DeviceKind::Cpu {
            assert!(r.reason.contains("Not on a CPU"), "{}", r.reason);
        }
    }
}

/// Every generation card ends with a verdict on the CPU, and the ones decided by exact
/// byte counts (no timing) are confirmed there.
fn generation_cards(device: DeviceKind) {
    let exact = [
        "generate-no-grad",
        "kv-cache-size",
        "gqa",
        "static-cache",
        "padding-waste",
        "inference-tensor-cache",
        "quantized-weights-not-kv",
        "kv-dtype",
        "int4-on-a-trained-model",
        "fp16-overflow",
        "sdpa-backend",
        "sliding-window-kv",
        "moe-memory-is-total",
        "moe-batch-reads-more",
    ];
    let generation = pitfalls::CARDS.iter().skip_while(|c| c.id != "generate-no-grad");
    for card in generation {
        let r = run(device, card.id, defaults());
        if exact.contains(&card.id) {
            assert_eq!(r.verdict, Verdict::Confirmed, "{}: {}", card.id, r.reason);
        }
        assert!(!r.reason.is_empty() && (!r.series.is_empty() || !r.figures.is_empty()), "{}", card.id);
        decoder_settings_physics(&r);
    }
}

/// The physical facts under the decoder-settings cards' verdicts, checked on the figures
/// themselves (not only through the verdict).
fn decoder_settings_physics(r: &PitfallReport) {
    let f = |name: &str| figure(r, name);
    match r.id.as_str() {
        "quantized-weights-not-kv" => {
            assert_eq!(f("int4: KV cache"), f("unquantized: KV cache"), "int4 changed the cache");
            assert_eq!(f("int4: other weights"), f("unquantized: other weights"));
            // int4 with fp32 scales: under 0.2× of fp32 weights on the CPU; on CUDA the
            // kernel takes bf16 only, so the reference is bf16 and the ratio about 0.28×.
            let bound = if r.env.device == DeviceKind::Cpu { 0.2 } else { 0.35 };
            assert!(f("int4: linear layers") < bound * f("unquantized: linear layers"), "int4 under {bound}× of the unquantized linear layers");
        }
        "kv-dtype" => {
            assert_eq!(2.0 * f("bf16 cache: KV cache"), f("fp32 cache: KV cache"));
            assert_eq!(2.0 * f("fp16 cache: KV cache"), f("fp32 cache: KV cache"));
        }
        "int4-on-a-trained-model" => {
            assert!(f("fp32: bits per byte") < f("gzip -9: bits per byte"), "the trained model beats gzip -9");
            assert!(f("int4: bits per byte") < 1.05 * f("fp32: bits per byte"));
            assert!(f("trained: greedy agreement") > f("random: greedy agreement"));
            // Random weights leave more positions whose top-1 margin int4 can flip.
            assert!(f("random: low-margin share") > f("trained: low-margin share"));
        }
        "fp16-overflow" => {
            assert!(f("fp32: largest |activation|") > 65504.0);
            assert!(f("fp16: non-finite values") > 0.0 && f("bf16: non-finite values") == 0.0);
        }
        "sdpa-backend" => {
            assert!(f("math only: peak above the inputs") >= f("score matrix"));
            assert!(4.0 * f("is_causal: peak above the inputs") < f("score matrix"));
        }
        "sliding-window-kv" => {
            assert!(f("measured KV cache, longest context") < f("every-layer formula, longest context"));
            assert_eq!(f("positions held by a sliding layer, longest context"), f("window") - 1.0);
        }
        "moe-memory-is-total" => {
            assert_eq!(f("weights in memory"), f("every parameter's bytes"), "every expert held");
            assert!(f("weights in memory") > 1.5 * f("active parameters' bytes"));
        }
        "moe-batch-reads-more" => {
            assert_eq!(f("distinct experts per layer per step, batch 1"), 2.0, "top-2 at batch 1");
            assert!(f("distinct experts per layer per step, largest batch") <= f("experts per layer"));
        }
        "int8-speed-depends" => {
            assert_ne!(r.verdict, Verdict::NotApplicable, "{}", r.reason);
            // int8 reads about a quarter of fp32's linear bytes (the rest is unquantized).
            assert!(f("int8: weights read per step") < f("unquantized: weights read per step"));
        }
        _ => {}
    }
}

/// The cards whose answer the tour-order test compares alone and after the tour: memory
/// cards of both halves of the tour, and on CUDA the two that read the caching allocator's
/// pool (a tour would otherwise leave them its high-water mark).
fn tour_order_cards(device: DeviceKind) -> Vec<&'static str> {
    let mut ids = vec!["eval-not-nograd", "freeze-vs-nograd", "kv-dtype"];
    if device == DeviceKind::Cuda {
        ids.extend(["allocated-vs-reserved", "empty-cache"]);
    }
    ids
}

/// A card gives the same answer wherever it sits in the tour: run alone on a fresh worker,
/// then after every card of the tour on the same worker, its verdict is the same and its
/// byte figures are equal (on CUDA, within the byte rule's 1%: the allocator rounds).
fn a_card_answers_the_same_wherever_it_sits_in_the_tour(device: DeviceKind) {
    let fresh = common::worker();
    let run_on = |w: &Worker, id: &'static str| {
        let options = options_for(device, &defaults());
        w.call(move |lab| pitfalls::run(lab, id, options, &RunControl::default())).expect("worker alive").unwrap_or_else(|f| panic!("{id}: {}", f.message))
    };
    let alone: Vec<PitfallReport> = tour_order_cards(device).into_iter().map(|id| run_on(&fresh, id)).collect();
    let tour = common::worker();
    for card in pitfalls::CARDS {
        if card.not_here(device).is_none() {
            run_on(&tour, card.id);
        }
    }
    for first in alone {
        let after = run_on(&tour, pitfalls::card(&first.id).unwrap().id);
        assert_eq!(first.verdict, after.verdict, "{}: alone {} / after the tour {}", first.id, first.reason, after.reason);
        // The driver's count of the whole device (CUDA context, lazily loaded kernels,
        // cuDNN's handle) is not the card's: only what the allocator and the counters hold.
        for f in first.figures.iter().filter(|f| f.unit == "bytes" && !f.name.contains("device used")) {
            let g = figure(&after, &f.name);
            match device {
                DeviceKind::Cpu => assert_eq!(f.value, g, "{}: `{}` alone {} B, after the tour {g} B", first.id, f.name, f.value),
                DeviceKind::Cuda => assert!(
                    protocol::bytes_direction(g / f.value.max(1.0), protocol::SAME_BYTES_WITHIN) == protocol::Choice::Same || (g - f.value).abs() <= 2.0 * 1024.0 * 1024.0,
                    "{}: `{}` alone {} B, after the tour {g} B", first.id, f.name, f.value
                ),
            }
        }
    }
}

per_device!(
    a_card_answers_the_same_wherever_it_sits_in_the_tour,
    eval_not_nograd,
    nograd_not_eval,
    inference_vs_nograd,
    inference_vs_nograd_from_python,
    autocast,
    autocast_transformer,
    batch_scaling,
    allocated_vs_reserved,
    empty_cache,
    output_lifetime,
    warm_up,
    sync_timing,
    item_sync,
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
