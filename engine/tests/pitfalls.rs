//! Each pitfall experiment on the CPU: the invariant its verdict rests on, and the verdict
//! a CPU must give (CUDA-only effects are not_applicable, never confirmed by accident).
//! Options keep every experiment to a few seconds on two cores.

use engine::pitfalls;
use engine::{Worker, WorkerConfig};
use protocol::{DeviceChoice, ModelId, PitfallOptions, PitfallReport, Verdict};

fn run(worker: &Worker, id: &'static str, options: PitfallOptions) -> PitfallReport {
    worker
        .call(move |lab| pitfalls::run(lab, id, options))
        .unwrap()
        .unwrap_or_else(|f| panic!("{id}: {}", f.message))
}

fn cpu() -> PitfallOptions {
    PitfallOptions {
        device: DeviceChoice::Cpu,
        ..Default::default()
    }
}

fn figure(r: &PitfallReport, name: &str) -> f64 {
    r.figures
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("{}: no figure `{name}`", r.id))
        .value
}

#[test]
fn cpu_verdicts_rest_on_their_invariants() {
    let worker = Worker::start(WorkerConfig::default()).unwrap();

    let r = run(&worker, "eval-not-nograd", cpu());
    assert!(
        figure(&r, "eval+grad peak above baseline")
            > figure(&r, "eval+no_grad peak above baseline")
    );
    assert_eq!(r.verdict, Verdict::Confirmed, "{}", r.reason);

    let r = run(&worker, "nograd-not-eval", cpu());
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

    let r = run(&worker, "inference-vs-nograd", cpu());
    assert_eq!(figure(&r, "error raised"), 1.0);
    assert_eq!(figure(&r, "clone() fix works"), 1.0);
    assert_eq!(r.verdict, Verdict::Confirmed, "{}", r.reason);

    let r = run(
        &worker,
        "autocast",
        PitfallOptions {
            model: Some(ModelId::TinyMlp),
            ..cpu()
        },
    );
    assert_eq!(figure(&r, "weights still float32"), 1.0);
    assert!(
        r.notes.iter().any(|n| n == "bf16 output dtype: BFloat16"),
        "{:?}",
        r.notes
    );
    assert_eq!(r.verdict, Verdict::Confirmed, "{}", r.reason);

    let r = run(
        &worker,
        "output-lifetime",
        PitfallOptions {
            model: Some(ModelId::TinyMlp),
            ..cpu()
        },
    );
    let with_grad = figure(&r, "growth per request, kept with grad");
    let kept = figure(&r, "growth per request, kept on device");
    assert_eq!(
        figure(&r, "growth per request, dropped"),
        0.0,
        "dropped outputs free everything"
    );
    assert!(kept > 0.0 && with_grad > kept);
    assert_eq!(r.verdict, Verdict::Confirmed, "{}", r.reason);

    // On a CPU the first pass of a new shape pays for oneDNN's primitive creation, a few
    // milliseconds against a pass of tens: real, but small enough that a busy 2-core machine
    // (the other test of this binary runs alongside) can hide it once. Three fresh shapes;
    // the effect must show in at least one.
    let attempts: Vec<String> = (0..3)
        .map(|_| {
            run(
                &worker,
                "warm-up",
                PitfallOptions {
                    model: Some(ModelId::Resnet18),
                    ..cpu()
                },
            )
        })
        .map(|r| {
            let slower = figure(&r, "first iteration") > figure(&r, "median of iterations 6-10");
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

    let r = run(&worker, "freeze-vs-nograd", cpu());
    let (full, partial, frozen, nograd) = (
        figure(&r, "all trainable"),
        figure(&r, "backbone frozen (last stage + head trainable)"),
        figure(&r, "all frozen"),
        figure(&r, "no_grad"),
    );
    assert!(nograd < partial && partial < full, "{}", r.reason);
    assert!((frozen - nograd).abs() <= 0.1 * nograd);

    let r = run(
        &worker,
        "batch-scaling",
        PitfallOptions {
            budget_bytes: Some(96 << 20),
            ..cpu()
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

    // Batch 8: at batch 2 the no_grad peak is dominated by weight-sized workspace, not activations.
    let r = run(
        &worker,
        "seed-table",
        PitfallOptions {
            model: Some(ModelId::Resnet18),
            batch: Some(8),
            ..cpu()
        },
    );
    assert_eq!(r.verdict, Verdict::Confirmed, "{}", r.reason);

    // CUDA-only effects: a CPU cannot confirm them.
    for id in ["allocated-vs-reserved", "empty-cache", "item-sync"] {
        assert_eq!(
            run(&worker, id, cpu()).verdict,
            Verdict::NotApplicable,
            "{id}"
        );
    }
    // CPU ops are synchronous: the naive timer equals the synchronised one within noise.
    let r = run(
        &worker,
        "sync-timing",
        PitfallOptions {
            model: Some(ModelId::Resnet18),
            ..cpu()
        },
    );
    assert_eq!(r.verdict, Verdict::NotApplicable, "{}", r.reason);
}

#[test]
fn unknown_pitfalls_are_refused_by_name() {
    let worker = Worker::start(WorkerConfig::default()).unwrap();
    let err = worker
        .call(|lab| pitfalls::run(lab, "nope", PitfallOptions::default()))
        .unwrap()
        .unwrap_err();
    assert!(err.message.contains("unknown pitfall `nope`"));
    assert_eq!(pitfalls::catalogue().len(), 13);
}
