//! Team models (TorchScript files of a models directory): the tests make their own with the
//! venv's PyTorch (`fixtures/make_team_models.py`: a scripted module with Dropout and
//! BatchNorm, a traced torchvision ResNet-18, a module that raises above batch 4, a
//! two-input module (token ids and an attention mask, with Dropout), a file that is not
//! TorchScript, mismatched sidecars (a wrong rank; float ids; one input of two), a sidecar
//! without its module) and check the same physical invariants as the built-in models, and
//! the messages for the bad ones.

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

/// The catalog serving what [`loaded`] found, built once per test process.
fn catalog() -> &'static protocol::Catalog {
    static CATALOG: OnceLock<protocol::Catalog> = OnceLock::new();
    CATALOG.get_or_init(|| loaded().1.catalog())
}

fn id(name: &str) -> ModelId {
    catalog().parse(name).unwrap_or_else(|e| panic!("{e}"))
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
    Worker::start(WorkerConfig { catalog: catalog().clone(), ..WorkerConfig::default() }).expect("worker starts")
}

fn measure(w: &Worker, s: RunSpec) -> Report {
    let label = format!("{} {}", s.model, s.label());
    w.measure(s, |_| {})
        .unwrap_or_else(|e| panic!("{label}: the run fails: {e}"))
}

#[test]
fn good_files_are_served_and_each_bad_one_is_named_with_its_reason() {
    let (_, loaded) = loaded();
    let mut served: Vec<&str> = loaded.models.iter().map(|m| m.name.as_str()).collect();
    served.sort();
    assert_eq!(served, ["drop_batch", "picky", "token_mask", "traced_resnet18"]);
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
    // Two inputs: the one at fault is named, with what the sidecar gave and why the module
    // refused it; a count that cannot fit is said from the forward's own declaration.
    let ids = reason("mismatched_ids.pt");
    assert!(
        ids.starts_with("its sidecar mismatched_ids.json does not fit the module: input 0 (`ids`), given as ids [batch, size] float32, fails in the module: RuntimeError: Expected tensor for argument #1 'indices'"),
        "{ids}"
    );
    let count = reason("mismatched_count.pt");
    assert!(
        count.contains("lists 1 input ([batch, size] int64 in 0..1000) but the module's forward takes 2: forward(Tensor ids, Tensor mask)"),
        "{count}"
    );
    // A built-in model's name: refused, the built-in one is served under it.
    let builtin = reason("mobilenet_v2.pt");
    assert!(
        builtin.contains("is the name of a built-in model") && builtin.contains("team_mobilenet_v2.pt"),
        "{builtin}"
    );
    assert_eq!(loaded.problems.len(), 6, "{:?}", loaded.problems);
    // A request for a refused file's model says why, not just "unknown".
    let why = catalog().unknown_message("broken");
    assert!(
        why.starts_with("team model `broken` is not served: broken.pt: does not load as TorchScript"),
        "{why}"
    );
    assert!(catalog().unknown_message("orphan").contains("orphan.json: a sidecar without its module"));
    assert!(catalog().unknown_message("nothing_here").starts_with("unknown model `nothing_here`"));

    // Served like built-in models: listed, parsed, displayed by the sidecar's name.
    assert!(catalog().models().contains(&id("drop_batch")));
    assert_eq!(id("drop_batch").display_name(), "Drop + Batch (test)");
    let e = catalog().parse("nonexistent").unwrap_err();
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
    assert_eq!(x.first().size(), [8, 32]);
    let pass = |train| tch::no_grad(|| m.net.forward_t(x.first(), train));
    let (e1, e2) = (pass(false), pass(false));
    assert!(e1.equal(&e2), "eval is deterministic");
    let (t1, t2) = (pass(true), pass(true));
    assert!(!t1.equal(&t2), "train mode draws new Dropout masks");
    // Parameters are counted like a built-in model's: 32*256+256 + 2*256 + 256*10+10.
    assert_eq!(m.parameters(), 32 * 256 + 256 + 2 * 256 + 256 * 10 + 10);
}

#[test]
fn a_two_input_model_gets_each_input_as_its_sidecar_says() {
    let (_, loaded) = loaded();
    let m = loaded.models.iter().find(|m| m.name == "token_mask").unwrap();
    assert!(m.training.random_in_train, "its Dropout was seen at load");
    assert_eq!(
        m.input_meaning,
        "sequence length in tokens (inputs ids [batch, size] int64 in 0..1000 + mask [batch, size] int64 all 1)"
    );
    let model = Model::build(id("token_mask"), Device::Cpu, 24);
    let x = model.input(3, 24, Device::Cpu);
    let (ids, mask) = (&x.tensors()[0], &x.tensors()[1]);
    assert_eq!((ids.size(), ids.kind()), (vec![3, 24], tch::Kind::Int64));
    assert_eq!((mask.size(), mask.kind()), (vec![3, 24], tch::Kind::Int64));
    assert!(ids.min().int64_value(&[]) >= 0 && ids.max().int64_value(&[]) < 1000);
    assert_eq!(mask.sum(tch::Kind::Int64).int64_value(&[]), 3 * 24, "a mask of ones");
    // The embedding (1000 × 64), the head (64 × 8 + 8), as the file holds them.
    assert_eq!(model.parameters(), 1000 * 64 + 64 * 8 + 8);
    let pass = |train| {
        tch::no_grad(|| {
            model
                .net
                .forward_inputs(&x, train, &mut engine::trace::Probe::off())
        })
    };
    let (e1, e2) = (pass(false), pass(false));
    assert_eq!(e1.size(), [3, 8]);
    assert!(e1.equal(&e2), "eval is deterministic");
    assert!(!pass(true).equal(&pass(true)), "train mode draws new Dropout masks");
}

#[test]
fn grad_peak_exceeds_no_grad_peak_and_memory_returns_to_baseline() {
    let w = worker();
    // In this order on purpose: after grad-mode passes, a TorchScript module's executor
    // holds autodiff plans an inference_mode pass trips on; each run loads the file afresh.
    for model in ["drop_batch", "traced_resnet18", "token_mask"] {
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

    // Two inputs: the size reaches both (a longer sequence needs more memory), and every
    // setting that moves or casts the input applies to each and leaves nothing behind.
    let tokens = |size, grad| RunSpec {
        input_size: Some(size),
        ..spec("token_mask", 4, true, grad)
    };
    let short = measure(&w, tokens(16, GradMode::Enabled));
    let long = measure(&w, tokens(64, GradMode::Enabled));
    assert!(long.memory.peak_above_baseline_bytes > short.memory.peak_above_baseline_bytes);
    // Both inputs are in the baseline: ids and mask, 4 × size int64 each.
    assert_eq!(
        long.memory.baseline_bytes - short.memory.baseline_bytes,
        2 * 4 * (64 - 16) * 8
    );
    assert_eq!(long.memory.leaked_bytes, 0);
    let mut advanced = vec![];
    for source in [protocol::InputSource::Pageable, protocol::InputSource::Device] {
        for weights in [protocol::WeightsDtype::Fp32, protocol::WeightsDtype::Bf16] {
            let r = measure(
                &w,
                RunSpec {
                    advanced: protocol::Advanced {
                        input_source: source,
                        weights,
                        ..Default::default()
                    },
                    ..tokens(64, GradMode::NoGrad)
                },
            );
            assert_eq!(r.memory.leaked_bytes, 0, "{}", r.spec.label());
            advanced.push((source, weights, r));
        }
    }
    let peak = |s, w| {
        advanced
            .iter()
            .find(|(a, b, _)| *a == s && *b == w)
            .map(|(_, _, r)| r.memory.peak_above_baseline_bytes)
            .unwrap()
    };
    use protocol::{InputSource::*, WeightsDtype::*};
    // A pass from pageable memory copies both inputs inside the pass: 2 × 4 × 64 × 8 bytes
    // more at its peak (the copies are alive while the module runs).
    assert!(
        peak(Pageable, Fp32) >= peak(Device, Fp32) + 2 * 4 * 64 * 8,
        "pageable {} vs device {}",
        peak(Pageable, Fp32),
        peak(Device, Fp32)
    );
    // bf16 weights: the ids and the mask stay int64 (an embedding takes no bf16 indices),
    // and the activations halve.
    assert!(peak(Device, Bf16) < peak(Device, Fp32));
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

/// A team model whose sidecar names its Python definition (`source`, which
/// bench/export_model.py writes) compiles ahead of time like a built-in model: built from its
/// source, filled with its TorchScript file's weights, exported with its batch dynamic on
/// every input, and its package's output matches the TorchScript module's (the eager model
/// of the run). Two inputs, integer token ids and a mask, travel to the package as they do
/// to the module. A team model without a source is refused naming the field.
#[test]
fn a_team_model_with_its_source_compiles_and_matches_its_torchscript() {
    let (dir, _) = loaded();
    let sidecar: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("token_mask.json")).unwrap()).unwrap();
    assert_eq!(sidecar["source"], "team_nets.py:TokenMask", "the exporter writes the source beside the module");
    assert!(dir.join("team_nets.py").is_file(), "... and copies the file into the models directory");
    let config = WorkerConfig { lab: engine::LabConfig { python: Some(python().into()), threads: 1, ..Default::default() }, catalog: catalog().clone(), ..Default::default() };
    let w = Worker::start(config).unwrap();
    let mut s = spec("token_mask", 4, true, GradMode::NoGrad);
    s.advanced.compiled = true;
    s.threads = Some(1);
    let r = measure(&w, s);
    let c = r.compiled.expect("a compiled run reports its compile");
    eprintln!(
        "token_mask compiled: p50 {:.4} ms against the TorchScript module's {:.4} ms; export {:.0} ms, compile {:.0} ms; max |Δ| {:.2e}",
        r.latency_ms.p50, c.eager_p50_ms, c.export_ms, c.compile_ms, c.max_abs_diff
    );
    assert!(c.max_abs_diff < 1e-4, "the package against the TorchScript module: {}", c.max_abs_diff);
    assert!(c.export_ms > 0.0 && c.compile_ms > 0.0 && (c.batch_min..=c.batch_max).contains(&4));
    // The exporter left picky's source out (--no-source): nothing to export it from.
    let mut picky = spec("picky", 2, true, GradMode::NoGrad);
    picky.advanced.compiled = true;
    let e = w.check(picky).unwrap_err();
    assert_eq!(e.field, "advanced.compiled");
    assert!(e.message.contains("source"), "{}", e.message);
}
