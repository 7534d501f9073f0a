//! The forward-model cards' tests (eval, grad modes, autocast, memory, timing, layout,
//! precision, the CUDA-only cards): each asserts the invariant its verdict rests on and the
//! verdict its device must give.

use super::*;

pub(super) fn eval_and_autograd(device: DeviceKind) {
    let r = run(device, "eval-and-autograd", defaults());
    assert!(
        figure(&r, pitfalls::memory::EVAL_GRAD_PEAK_ABOVE_BASELINE.name())
            > figure(&r, pitfalls::memory::EVAL_NO_GRAD_PEAK_ABOVE_BASELINE.name())
    );
    assert_eq!(r.verdict, Verdict::Confirmed, "{}", r.reason);
}

pub(super) fn nograd_and_dropout(device: DeviceKind) {
    let r = run(device, "nograd-and-dropout", defaults());
    assert!(
        figure(&r, pitfalls::modes::nograd::TRAIN_NO_GRAD_MAX_DELTA_SAME_INPUT_TWICE.name()) > 0.0,
        "dropout differs in train mode"
    );
    assert_eq!(
        figure(&r, pitfalls::modes::nograd::EVAL_NO_GRAD_MAX_DELTA_SAME_INPUT_TWICE.name()),
        0.0,
        "eval is deterministic"
    );
    assert!(figure(&r, pitfalls::modes::nograd::TRAIN_NO_GRAD_MAX_DELTA_SAMPLE_0_WITH_OTHER_BATCH_MATES.name()) > 0.0);
    assert_eq!(
        figure(&r, pitfalls::modes::nograd::EVAL_NO_GRAD_MAX_DELTA_SAMPLE_0_WITH_OTHER_BATCH_MATES.name()),
        0.0
    );
    assert!(
        figure(&r, pitfalls::modes::nograd::TRAIN_NO_GRAD_RUNNING_MEAN_CHANGE.name()) > 0.0,
        "BatchNorm stats move under no_grad"
    );
    assert_eq!(r.verdict, Verdict::Confirmed, "{}", r.reason);
}

pub(super) fn inference_vs_nograd(device: DeviceKind) {
    let r = run(device, "inference-vs-nograd", defaults());
    assert_eq!(figure(&r, pitfalls::figures::ERROR_RAISED.name()), 1.0);
    assert_eq!(figure(&r, pitfalls::modes::inference::CLONE_FIX_WORKS.name()), 1.0);
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
pub(super) fn venv_python() -> Option<std::path::PathBuf> {
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
pub(super) fn inference_vs_nograd_from_python(device: DeviceKind) {
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
    let ratio = figure(&r, &format!("{}{}", pitfalls::python::PYTHON, pitfalls::modes::inference::EACH_LATENCY_RATIO_INFERENCE_MODE_OVER_NO_GRAD.label(&[&"tiny_mlp b1"])));
    assert!(ratio.is_finite() && ratio > 0.0, "{ratio}");
    let question = &pitfalls::card("inference-vs-nograd").unwrap().question;
    assert_eq!(question.measured(&r.figures), Some(figure(&r, &pitfalls::modes::inference::EACH_LATENCY_RATIO_INFERENCE_MODE_OVER_NO_GRAD.label(&[&"tiny_mlp b1"]))));
    println!("{}", r.notes.iter().filter(|n| n.contains("Python")).cloned().collect::<Vec<_>>().join("\n"));
    for f in r.figures.iter().filter(|f| f.name.contains(" p50")) {
        println!("{}: {:.4} {}", f.name, f.value, f.unit);
    }
}

pub(super) fn autocast(device: DeviceKind) {
    let r = run(device, "autocast", with_model(ModelId::TinyMlp));
    assert_eq!(figure(&r, pitfalls::modes::autocast::WEIGHTS_STILL_FLOAT32.name()), 1.0);
    if device == DeviceKind::Cpu {
        assert!(
            r.notes.iter().any(|n| n == "bf16 output dtype: BFloat16"),
            "{:?}",
            r.notes
        );
        assert_eq!(figure(&r, &pitfalls::modes::autocast::EACH_LINEAR_LAYER_OUTPUT_IS.label(&[&"bf16", &"bf16"])), 1.0);
    }
    assert_eq!(r.verdict, Verdict::Confirmed, "{}", r.reason);
}

/// The transformer ends in LayerNorm, which autocast keeps in fp32: the card must look at a
/// linear layer inside the model, not at the output.
pub(super) fn autocast_transformer(device: DeviceKind) {
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
        figure(&r, &pitfalls::modes::autocast::EACH_LINEAR_LAYER_OUTPUT_IS.label(&[&low, &low])),
        1.0
    );
    assert_eq!(r.verdict, Verdict::Confirmed, "{}", r.reason);
}

pub(super) fn batch_scaling(device: DeviceKind) {
    let r = run(
        device,
        "batch-scaling",
        PitfallOptions {
            budget_bytes: Some(96 << 20),
            ..Default::default()
        },
    );
    assert!(
        figure(&r, pitfalls::allocator::NO_GRAD_LARGEST_BATCH_WITHIN_BUDGET.name())
            > figure(&r, pitfalls::allocator::GRAD_ENABLED_LARGEST_BATCH_WITHIN_BUDGET.name()),
        "{}",
        r.reason
    );
    assert!(
        figure(&r, pitfalls::allocator::GRAD_ENABLED_MEMORY_PER_SAMPLE_SLOPE.name())
            > figure(&r, pitfalls::allocator::NO_GRAD_MEMORY_PER_SAMPLE_SLOPE.name())
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
            figure(&r, pitfalls::allocator::MEMORY_BUDGET.name()),
            protocol::DEFAULT_CUDA_BUDGET_BYTES as f64
        );
        assert_eq!(r.verdict, Verdict::Confirmed, "{}", r.reason);
    }
}

pub(super) fn allocated_vs_reserved(device: DeviceKind) {
    let r = run(device, "allocated-vs-reserved", defaults());
    let want = expect(device, Verdict::NotApplicable, Verdict::Confirmed);
    assert_eq!(r.verdict, want, "{}", r.reason);
    if want == Verdict::Confirmed {
        assert!(figure(&r, pitfalls::allocator::RESERVED_AFTER_RELEASE.name()) > figure(&r, pitfalls::allocator::ALLOCATED_AFTER_RELEASE.name()));
    }
}

pub(super) fn empty_cache(device: DeviceKind) {
    let r = run(device, "empty-cache", defaults());
    let want = expect(device, Verdict::NotApplicable, Verdict::Confirmed);
    assert_eq!(r.verdict, want, "{}", r.reason);
    if want == Verdict::NotApplicable {
        assert!(r.reason.contains("CUDA"), "{}", r.reason);
    } else {
        assert_eq!(figure(&r, pitfalls::allocator::ALLOCATED_CHANGE_FROM_EMPTY_CACHE.name()), 0.0);
    }
}

pub(super) fn output_lifetime(device: DeviceKind) {
    let r = run(device, "output-lifetime", with_model(ModelId::TinyMlp));
    let with_grad = figure(&r, pitfalls::memory::GROWTH_PER_REQUEST_KEPT_WITH_GRAD.name());
    let kept = figure(&r, pitfalls::memory::GROWTH_PER_REQUEST_KEPT_ON_DEVICE.name());
    assert_eq!(
        figure(&r, pitfalls::memory::GROWTH_PER_REQUEST_DROPPED.name()),
        0.0,
        "dropped outputs free everything"
    );
    assert!(kept > 0.0 && with_grad > kept);
    assert_eq!(r.verdict, Verdict::Confirmed, "{}", r.reason);
}

pub(super) fn warm_up(device: DeviceKind) {
    // On a CPU the first pass of a new shape pays for oneDNN's primitive creation, a few
    // milliseconds against a pass of tens: real, but small enough that a busy 2-core machine
    // can hide it once. Three fresh shapes; the effect must show in at least one.
    let attempts: Vec<String> = (0..3)
        .map(|_| run(device, "warm-up", with_model(ModelId::Resnet18)))
        .map(|r| {
            let slower = figure(&r, pitfalls::timing::warm_up::FIRST_ITERATION.name()) > figure(&r, pitfalls::timing::warm_up::MEDIAN_OF_ITERATIONS_6_15.name());
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

pub(super) fn timing_gpu_work(device: DeviceKind) {
    let r = run(device, "timing-gpu-work", with_model(ModelId::Resnet18));
    let want = expect(device, Verdict::NotApplicable, Verdict::Confirmed);
    assert_eq!(r.verdict, want, "{}", r.reason);
}

pub(super) fn item_per_batch(device: DeviceKind) {
    let r = run(device, "item-per-batch", defaults());
    let want = expect(device, Verdict::NotApplicable, Verdict::Confirmed);
    assert_eq!(r.verdict, want, "{}", r.reason);
    assert!(figure(&r, pitfalls::timing::item_per_batch::LOOP_WITH_ITEM_PER_BATCH.name()) > 0.0);
}

pub(super) fn freeze_vs_nograd(device: DeviceKind) {
    let r = run(device, "freeze-vs-nograd", defaults());
    let (full, partial, frozen, nograd) = (
        figure(&r, pitfalls::memory::ALL_TRAINABLE.name()),
        figure(&r, pitfalls::memory::BACKBONE_FROZEN_LAST_STAGE_HEAD_TRAINABLE.name()),
        figure(&r, pitfalls::memory::ALL_FROZEN.name()),
        figure(&r, pitfalls::memory::NO_GRAD.name()),
    );
    assert!(nograd < partial && partial < full, "{}", r.reason);
    // The question's band: the same bytes within 1%.
    assert!((frozen - nograd).abs() <= 0.01 * nograd, "{}", r.reason);
    assert_eq!(r.verdict, Verdict::Confirmed, "{}", r.reason);
}

pub(super) fn seed_table(device: DeviceKind) {
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

pub(super) fn unknown_cards_are_refused_by_name(_device: DeviceKind) {
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
pub(super) fn predictions_are_scored_by_their_own_run(device: DeviceKind) {
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

pub(super) fn a_cancelled_experiment_stops(device: DeviceKind) {
    let control = RunControl::default();
    control
        .cancel
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let options = PitfallOptions {
        device: common::choice(device),
        ..Default::default()
    };
    let err = worker()
        .call(move |lab| pitfalls::run(lab, "timing-gpu-work", options, &control))
        .unwrap()
        .unwrap_err();
    assert_eq!(err.kind, FailureKind::Cancelled, "{}", err.message);
}

pub(super) fn half_weights(device: DeviceKind) {
    let r = run(device, "half-weights", with_model(ModelId::Resnet18));
    let low = if device == DeviceKind::Cpu { "bf16" } else { "fp16" };
    // The invariant: exactly half the parameter bytes; autocast keeps fp32's.
    let fp32 = figure(&r, pitfalls::precision::FP32_PARAMETERS.name());
    assert_eq!(2.0 * figure(&r, &pitfalls::precision::EACH_WEIGHTS_PARAMETERS.label(&[&low])), fp32);
    assert_eq!(figure(&r, &pitfalls::precision::EACH_AUTOCAST_PARAMETERS.label(&[&low])), fp32);
    assert_eq!(r.verdict, Verdict::Confirmed, "{}", r.reason);
}

pub(super) fn channels_last(device: DeviceKind) {
    let r = run(device, "channels-last", with_model(ModelId::Resnet18));
    assert_eq!(figure(&r, pitfalls::layout::INPUT_HAS_NHWC_STRIDES.name()), 1.0);
    assert_eq!(figure(&r, pitfalls::layout::CONV_WEIGHTS_WITH_NHWC_STRIDES.name()), figure(&r, pitfalls::layout::CONV_WEIGHTS.name()));
    assert_eq!(r.verdict, Verdict::Confirmed, "{}", r.reason);
    // A model without convolutions: nothing to lay out.
    let mlp = run(device, "channels-last", with_model(ModelId::TinyMlp));
    assert_eq!(mlp.verdict, Verdict::NotApplicable, "{}", mlp.reason);
}

pub(super) fn input_copy(device: DeviceKind) {
    let r = run(device, "input-copy", with_model(ModelId::Resnet18));
    // Each copy adds exactly the input's bytes to the pass's peak.
    assert_eq!(
        figure(&r, pitfalls::layout::PEAK_ABOVE_BASELINE_COPIED_FROM_PAGEABLE.name()),
        figure(&r, pitfalls::layout::PEAK_ABOVE_BASELINE_INPUT_ON_THE_DEVICE.name()) + figure(&r, pitfalls::layout::INPUT_BYTES.name())
    );
    let want = expect(device, Verdict::NotApplicable, Verdict::Confirmed);
    assert_eq!(r.verdict, want, "{}", r.reason);
}

pub(super) fn cuda_only_cards(device: DeviceKind) {
    for id in ["tf32", "cudnn-benchmark", "cuda-graphs"] {
        let r = run(device, id, defaults());
        let want = expect(device, Verdict::NotApplicable, Verdict::Confirmed);
        assert_eq!(r.verdict, want, "{id}: {}", r.reason);
        if device == DeviceKind::Cpu {
            assert!(r.reason.contains("Not on a CPU"), "{}", r.reason);
        }
    }
}
