//! Team models (TorchScript files of a models directory): the tests make their own with the
//! venv's PyTorch (`fixtures/make_team_models.py`: a scripted module with Dropout and
//! BatchNorm, a traced torchvision ResNet-18, a module that raises above batch 4, a file
//! that is not TorchScript, a mismatched sidecar, a sidecar without its module) and check
//! the same physical invariants as the built-in models, and the messages for the bad ones.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use engine::models::Model;
use engine::team::{self, Loaded};
use engine::{MeasureError, Worker, WorkerConfig};
use protocol::{Autocast, DeviceChoice, GradMode, ModelId, Report, RunSpec};
use tch::Device;

/// The venv's Python (scripts/test.sh exports GRADLESS_PYTHON), which has torch and
/// torchvision. Without it these tests fail: they must not pass by doing nothing.
fn python() -> String {
    std::env::var("GRADLESS_PYTHON").unwrap_or_else(|_| {
        let home = std::env::var("HOME").unwrap_or_default();
        format!("{home}/.cache/gradless/venv/bin/python")
    })
}

/// The models directory, made once per test process, and what loading it found.
fn loaded() -> &'static (PathBuf, Loaded) {
    static DIR: OnceLock<(PathBuf, Loaded)> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("gradless-team-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/make_team_models.py"
        );
        let out = Command::new(python())
            .arg(script)
            .arg(&dir)
            .output()
            .expect("the venv's Python runs (set GRADLESS_PYTHON)");
        assert!(
            out.status.success(),
            "making the test models failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let loaded = team::load_dir(&dir, None).expect("the directory reads");
        (dir, loaded)
    })
}

fn id(name: &str) -> ModelId {
    loaded();
    name.parse().unwrap_or_else(|e| panic!("{e}"))
}

fn spec(model: &str, batch: u32, eval: bool, grad: GradMode) -> RunSpec {
    RunSpec {
        model: id(model),
        device: DeviceChoice::Cpu,
        batch,
        eval,
        grad,
        autocast: Autocast::Off,
        warmup: 1,
        iters: 3,
        threads: Some(1),
        ..RunSpec::default()
    }
}

fn worker() -> Worker {
    Worker::start(WorkerConfig::default()).expect("worker starts")
}

fn measure(w: &Worker, s: RunSpec) -> Report {
    w.measure(s, |_| {}).expect("run succeeds")
}

#[test]
fn good_files_are_served_and_each_bad_one_is_named_with_its_reason() {
    let (_, loaded) = loaded();
    let mut served: Vec<&str> = loaded.models.iter().map(|m| m.name.as_str()).collect();
    served.sort();
    assert_eq!(served, ["drop_batch", "picky", "traced_resnet18"]);
    let reason = |file: &str| {
        loaded
            .problems
            .iter()
            .find(|p| p.file == file)
            .unwrap_or_else(|| panic!("no problem reported for {file}: {:?}", loaded.problems))
            .reason
            .clone()
    };
    assert!(
        reason("broken.pt").contains("does not load as TorchScript"),
        "{}",
        reason("broken.pt")
    );
    let mismatched = reason("mismatched.pt");
    assert!(
        mismatched.contains("does not fit the module")
            && mismatched.contains("[batch, 3, 32, 32] float32")
            && mismatched.contains("Error"),
        "{mismatched}"
    );
    assert!(
        reason("orphan.json").contains("no orphan.pt"),
        "{}",
        reason("orphan.json")
    );
    assert_eq!(loaded.problems.len(), 3, "{:?}", loaded.problems);

    // Served like built-in models: listed, parsed, displayed by the sidecar's name.
    assert!(ModelId::served().contains(&id("drop_batch")));
    assert_eq!(id("drop_batch").display_name(), "Drop + Batch (test)");
    let e = "nonexistent".parse::<ModelId>().unwrap_err();
    assert!(e.contains("drop_batch") && e.contains("resnet18"), "{e}");
}

#[test]
fn what_train_mode_changes_is_measured_at_load() {
    let (_, loaded) = loaded();
    let get = |n: &str| loaded.models.iter().find(|m| m.name == n).unwrap();
    let scripted = get("drop_batch").training;
    assert!(scripted.random_in_train && scripted.train_differs_from_eval);
    // A trace freezes the mode it was traced in: train() no longer changes anything.
    let traced = get("traced_resnet18").training;
    assert!(!traced.random_in_train && !traced.train_differs_from_eval);
    assert!(!id("traced_resnet18").has_dropout() && !id("traced_resnet18").has_batchnorm());
    // The same count as torchvision's resnet18 (11,689,512), read from the file.
    assert_eq!(get("traced_resnet18").parameters, 11_689_512);
}

#[test]
fn dropout_differs_in_train_mode_only() {
    let m = Model::build(id("drop_batch"), Device::Cpu, 0);
    let x = m.input(8, 0, Device::Cpu);
    assert_eq!(x.size(), [8, 32]);
    let pass = |train| tch::no_grad(|| m.net.forward_t(&x, train));
    let (e1, e2) = (pass(false), pass(false));
    assert!(e1.equal(&e2), "eval is deterministic");
    let (t1, t2) = (pass(true), pass(true));
    assert!(!t1.equal(&t2), "train mode draws new Dropout masks");
    // Parameters are counted like a built-in model's: 32*256+256 + 2*256 + 256*10+10.
    assert_eq!(m.parameters(), 32 * 256 + 256 + 2 * 256 + 256 * 10 + 10);
}

#[test]
fn grad_peak_exceeds_no_grad_peak_and_memory_returns_to_baseline() {
    let w = worker();
    for model in ["drop_batch", "traced_resnet18"] {
        let grad = measure(&w, spec(model, 8, true, GradMode::Enabled));
        let no_grad = measure(&w, spec(model, 8, true, GradMode::NoGrad));
        let inference = measure(&w, spec(model, 8, true, GradMode::InferenceMode));
        let (g, n) = (
            grad.memory.peak_above_baseline_bytes,
            no_grad.memory.peak_above_baseline_bytes,
        );
        assert!(g > n, "{model}: grad {g} vs no_grad {n}");
        assert!(
            grad.output.requires_grad && !no_grad.output.requires_grad,
            "{model}"
        );
        assert!(
            inference.output.is_inference && !no_grad.output.is_inference,
            "{model}"
        );
        for r in [&grad, &no_grad, &inference] {
            assert_eq!(
                r.memory.after_release_bytes,
                r.memory.baseline_bytes,
                "{model} {}",
                r.spec.label()
            );
            assert_eq!(r.memory.leaked_bytes, 0);
        }
    }
    // Train mode and bf16 autocast run too, and leave nothing behind.
    for (eval, autocast) in [(false, Autocast::Off), (true, Autocast::Bf16)] {
        let r = measure(
            &w,
            RunSpec {
                autocast,
                ..spec("drop_batch", 8, eval, GradMode::NoGrad)
            },
        );
        assert_eq!(r.memory.leaked_bytes, 0, "{}", r.spec.label());
    }
    // The adjustable size reaches the input: a larger image needs more memory.
    let small = measure(
        &w,
        RunSpec {
            input_size: Some(32),
            ..spec("traced_resnet18", 2, true, GradMode::NoGrad)
        },
    );
    let large = measure(
        &w,
        RunSpec {
            input_size: Some(96),
            ..spec("traced_resnet18", 2, true, GradMode::NoGrad)
        },
    );
    assert!(large.memory.peak_above_baseline_bytes > small.memory.peak_above_baseline_bytes);
}

#[test]
fn a_forward_that_raises_fails_its_run_with_the_reason_and_the_worker_goes_on() {
    let w = worker();
    match w.measure(spec("picky", 8, true, GradMode::NoGrad), |_| {}) {
        Err(MeasureError::Failed(f)) => {
            assert!(
                f.message.contains("Picky takes at most 4 samples"),
                "{}",
                f.message
            )
        }
        other => panic!("expected a failed run, got {other:?}"),
    }
    let r = measure(&w, spec("picky", 2, true, GradMode::NoGrad));
    assert_eq!(r.output.shape, [2, 4]);
    // A fixed-shape model takes no input_size.
    let e = w
        .measure(
            RunSpec {
                input_size: Some(8),
                ..spec("picky", 2, true, GradMode::NoGrad)
            },
            |_| {},
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("fixed input shape"), "{e}");
}

#[test]
fn a_model_larger_than_the_memory_limit_is_refused_at_load() {
    let (dir, _) = loaded();
    // Check only: registering again would change the models the other tests use.
    let limited = team::scan_dir(dir, Some(1024 * 1024)).expect("the directory reads");
    let p = limited
        .problems
        .iter()
        .find(|p| p.file == "traced_resnet18.pt")
        .expect("ResNet-18's 45 MiB of weights are above a 1 MiB limit");
    assert!(
        p.reason.contains("--memory-limit-mib") && p.reason.contains("44.6 MiB"),
        "{}",
        p.reason
    );
    assert!(limited.models.iter().any(|m| m.name == "drop_batch"));
}
