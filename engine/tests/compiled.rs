//! A forward model compiled ahead of time (`advanced.compiled`): exported and compiled by
//! AOTInductor in the venv's Python on Gradless's own weights, run from libtorch. The run
//! reports the compile's cost, its passes and the eager model's beside them, and the
//! largest difference between their outputs; a second run takes the package from the
//! cache. The same package run from Python (`torch._inductor.aoti_load_package`) gives the
//! same bits as Gradless's call on the same input: the peer. Needs a Python with torch:
//! `GRADLESS_PYTHON` (scripts/test.sh points it at the venv). A small MLP keeps the compile
//! to tens of seconds on a 2-core CPU; the compiled-model cards run on the same package.

use engine::{LabConfig, Worker, WorkerConfig};
use protocol::{GradMode, ModelId, RunSpec};

fn spec(batch: u32) -> RunSpec {
    let mut s = RunSpec {
        model: ModelId::TinyMlp,
        batch,
        eval: true,
        grad: GradMode::NoGrad,
        threads: Some(1),
        // The Tiny MLP's default width (512): the cards below compile the same package, and
        // scripts/test.sh's peer benchmark runs it too, so one compile serves all three.
        input_size: None,
        warmup: 2,
        iters: 12,
        device: protocol::DeviceChoice::Cpu,
        ..RunSpec::default()
    };
    s.advanced.compiled = true;
    s
}

#[test]
fn a_compiled_model_runs_its_package_beside_the_eager_model() {
    let Some(python) = std::env::var_os("GRADLESS_PYTHON") else {
        eprintln!("GRADLESS_PYTHON is not set: the compiled model was not compiled");
        return;
    };
    let config = WorkerConfig {
        lab: LabConfig { python: Some(python.clone().into()), threads: 1, ..Default::default() },
        ..Default::default()
    };
    let worker = Worker::start(config).unwrap();
    let r = worker.measure(spec(8), |_| {}).unwrap_or_else(|e| panic!("{e}"));
    let c = r.compiled.clone().expect("a compiled run reports its compile");
    eprintln!(
        "tiny_mlp batch 8: compiled p50 {:.4} ms, eager p50 {:.4} ms; export {:.0} ms, compile {:.0} ms, load {:.0} ms (cached: {}); max |Δ| {:.2e}, bitwise {}",
        r.latency_ms.p50, c.eager_p50_ms, c.export_ms, c.compile_ms, c.load_ms, c.cached, c.max_abs_diff, c.bitwise_equal
    );
    assert!(c.max_abs_diff < 1e-4, "compiled against eager: {}", c.max_abs_diff);
    assert!(c.export_ms > 0.0 && c.compile_ms > 0.0 && c.load_ms > 0.0 && c.package_bytes > 0);
    // The C++ compiler's part of the compile is measured apart, and is a part of it.
    assert!(c.build_ms > 0.0 && c.build_ms < c.compile_ms, "build {} of compile {}", c.build_ms, c.compile_ms);
    assert!(c.eager_p50_ms > 0.0 && c.eager_iters == 12 && r.samples.len() == 12);
    // Both sides' activations are counted by the same memory source, above the same baseline.
    assert!(c.eager_peak_above_baseline_bytes > 0 && r.memory.peak_above_baseline_bytes > 0, "{c:?}");
    assert!((c.batch_min..=c.batch_max).contains(&8));
    assert_eq!(r.output.shape, vec![8, 10], "the package's output is the model's");
    assert!(r.trace.is_empty(), "a compiled model is one opaque call: no module boundaries");
    // The second run of the same model and weights loads the cached package.
    let again = worker.measure(spec(4), |_| {}).unwrap();
    let c2 = again.compiled.unwrap();
    assert!(c2.cached && c2.package == c.package, "{} then {}", c.package, c2.package);

    // The peer: Python's aoti_load_package on the same package and the same input gives the
    // same bits as Gradless's call.
    let path = engine::lab::compiled_cache_dir().join(&c.package);
    let package = engine::torch_ext::AotiPackage::load(&path).unwrap();
    let x = (tch::Tensor::arange(8 * 512, (tch::Kind::Double, tch::Device::Cpu)) * 0.001).sin().to_kind(tch::Kind::Float).view([8, 512]);
    let ours = {
        let _g = tch::no_grad_guard();
        package.run(&[&x]).unwrap().remove(0)
    };
    let ours: Vec<f32> = Vec::try_from(ours.flatten(0, -1)).unwrap();
    let script = format!(
        "import torch, torch._inductor\ntorch.set_num_threads(1)\nm = torch._inductor.aoti_load_package({:?})\nx = torch.sin(torch.arange(8 * 512, dtype=torch.float64) * 0.001).float().view(8, 512)\nwith torch.no_grad():\n    y = m(x)\nprint(y.contiguous().numpy().tobytes().hex())\n",
        path.to_string_lossy()
    );
    let out = std::process::Command::new(&python).args(["-c", &script]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let theirs = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let ours_hex: String = ours.iter().flat_map(|v| v.to_le_bytes()).map(|b| format!("{b:02x}")).collect();
    assert_eq!(ours_hex, theirs, "Gradless's call and Python's aoti_load_package give the same bits");

    // What cannot be compiled here is refused naming the field, before anything runs.
    let mut train = spec(8);
    train.eval = false;
    assert_eq!(worker.check(train).unwrap_err().field, "advanced.compiled");
    let mut decoder = spec(1);
    decoder.model = "llama_tiny".parse().unwrap();
    assert_eq!(worker.check(decoder).unwrap_err().field, "advanced.compiled");
}

/// The compiled-model cards on the Tiny MLP (a compile of tens of seconds at most; the
/// cards share its package, and compiled-shapes compiles one more, for batch 8 alone). Each
/// card answers with a verdict, names what it measured as its plan said, has every figure
/// its statements and its question rest on, and its invariants hold: the package runs the
/// out-of-range batch unchecked and the checked process refuses it; the package's output
/// never requires grad; the compiled output is close to eager's.
#[test]
fn the_compiled_cards_run_and_keep_their_invariants() {
    use engine::pitfalls::{self, How};
    use protocol::{PitfallOptions, Verdict};
    let Some(python) = std::env::var_os("GRADLESS_PYTHON") else {
        eprintln!("GRADLESS_PYTHON is not set: the compiled cards were not run");
        return;
    };
    let config = WorkerConfig { lab: LabConfig { python: Some(python.clone().into()), threads: 1, ..Default::default() }, ..Default::default() };
    let worker = Worker::start(config).unwrap();
    let ids = ["compiled-first-call", "compiled-batch", "compiled-shapes", "compiled-outputs", "compiled-settings"];
    for id in ids {
        let opts = PitfallOptions { model: Some(ModelId::TinyMlp), device: protocol::DeviceChoice::Cpu, ..Default::default() };
        let run_opts = opts.clone();
        let start = std::time::Instant::now();
        // The first card also times torch.compile's just-in-time path from the Python peer.
        let peer = (id == "compiled-first-call").then(|| pitfalls::PythonPeer::new(std::path::PathBuf::from(&python)));
        let r = worker
            .call(move |lab| pitfalls::run_with(lab, id, run_opts, &engine::RunControl::default(), peer.as_ref()))
            .unwrap()
            .unwrap_or_else(|f| panic!("{id}: {}", f.message));
        eprintln!("{id}: {:?} in {:.1} s: {}", r.verdict, start.elapsed().as_secs_f64(), r.reason);
        assert_ne!(r.verdict, Verdict::NotApplicable, "{id}: {}", r.reason);
        let card = pitfalls::card(id).unwrap();
        let control = engine::RunControl::default();
        let ctx = pitfalls::kit::Ctx { device: protocol::DeviceKind::Cpu, opts, control: &control, python: None };
        assert!(r.reason.contains(&card.planned(&ctx)[0]), "{id}: planned `{}`, measured: {}", card.planned(&ctx)[0], r.reason);
        let figure = |name: &str| r.figures.iter().find(|f| f.name == name).unwrap_or_else(|| panic!("{id}: no figure `{name}`")).value;
        for said in card.statements {
            if let How::Run(names) = said.known {
                for name in names {
                    figure(name.name());
                }
            }
        }
        assert!(card.question.measured(&r.figures).is_some(), "{id}: its question has no answer in {:?}", r.figures.iter().map(|f| &f.name).collect::<Vec<_>>());
        match id {
            "compiled-first-call" => {
                assert!(figure(pitfalls::compiled::PYTHON_PROCESS_IN_ALL.name()) >= figure(pitfalls::compiled::EXPORT.name()) + figure(pitfalls::compiled::COMPILE.name()));
                assert!(figure(pitfalls::compiled::ONE_TIME_COST_OVER_EAGER_PASS.name()) > 1.0, "compiling costs more than one eager pass");
                // From Python, torch.compile pays its compile in the first call itself: far
                // more than a compiled pass, and the second batch compiles again.
                let first = figure(&pitfalls::compiled::EACH_TORCH_COMPILE_FIRST_CALL.label(&[&pitfalls::python::PYTHON]));
                assert!(first > 10.0 * figure(&pitfalls::compiled::EACH_TORCH_COMPILE_P50_PASS.label(&[&pitfalls::python::PYTHON])), "{first} ms: {:?}", r.notes);
                assert!(figure(&pitfalls::compiled::EACH_TORCH_COMPILE_FIRST_CALL_AT_BATCH.label(&[&pitfalls::python::PYTHON, &9])) > figure(&pitfalls::compiled::EACH_TORCH_COMPILE_FIRST_CALL_AT_BATCH.label(&[&pitfalls::python::PYTHON, &10])), "{:?}", r.notes);
            }
            "compiled-shapes" => {
                assert_eq!(figure(pitfalls::compiled::shapes::OUTSIDE_THE_RANGE_UNCHECKED_RAN.name()), 1.0, "{}", r.reason);
                assert!(figure(pitfalls::compiled::shapes::OUTSIDE_THE_RANGE_LARGEST_DIFFERENCE_FROM_EAGER_RELATIVE.name()) < 1e-4, "{}", r.reason);
                assert_eq!(figure(pitfalls::compiled::shapes::CHECKED_OUTSIDE_THE_RANGE_REFUSED.name()), 1.0, "{}", r.reason);
                assert_eq!(figure(pitfalls::compiled::shapes::CHECKED_BATCH_8_RAN.name()), 1.0, "{}", r.reason);
            }
            "compiled-outputs" => {
                assert_eq!(figure(pitfalls::compiled::outputs::EAGER_TWO_CALLS_BITWISE_EQUAL.name()), 1.0);
                assert_eq!(figure(pitfalls::compiled::outputs::COMPILED_TWO_CALLS_BITWISE_EQUAL.name()), 1.0);
                assert!(figure(pitfalls::compiled::outputs::LARGEST_DIFFERENCE_RELATIVE.name()) < 1e-4, "{}", r.reason);
            }
            "compiled-settings" => {
                for mode in ["grad enabled", "no_grad", "inference_mode"] {
                    assert_eq!(figure(&pitfalls::compiled::outputs::COMPILED_OUTPUT_REQUIRES_GRAD.label(&[&mode])), 0.0, "{mode}");
                }
                assert_eq!(figure(pitfalls::compiled::outputs::COMPILED_TWO_CALLS_BITWISE_EQUAL.name()), 1.0);
                assert_eq!(figure(pitfalls::compiled::outputs::EAGER_IN_TRAIN_TWO_CALLS_BITWISE_EQUAL.name()), 0.0, "the Tiny MLP's Dropout is live in train()");
                // Autograd keeps the eager model's activations; the package keeps none.
                assert!(figure(pitfalls::compiled::outputs::EAGER_GRAD_ENABLED_RETAINED.name()) > figure(pitfalls::compiled::outputs::EAGER_NO_GRAD_RETAINED.name()), "{}", r.reason);
                assert_eq!(figure(pitfalls::compiled::outputs::COMPILED_GRAD_ENABLED_RETAINED.name()), figure(pitfalls::compiled::outputs::COMPILED_NO_GRAD_RETAINED.name()), "{}", r.reason);
            }
            _ => {}
        }
    }
}

/// A model that ran in train mode first (BatchNorm's running statistics updated by the
/// passes, Dropout live) compiles to a package that computes what the eager model computes:
/// the weights the package is built from are the model's as it stands.
#[test]
fn a_package_compiled_after_a_train_mode_run_matches_the_eager_model() {
    let Some(python) = std::env::var_os("GRADLESS_PYTHON") else {
        eprintln!("GRADLESS_PYTHON is not set: nothing was compiled");
        return;
    };
    let config = WorkerConfig { lab: LabConfig { python: Some(python.into()), threads: 1, ..Default::default() }, ..Default::default() };
    let worker = Worker::start(config).unwrap();
    let mut train = spec(16);
    train.advanced.compiled = false;
    train.eval = false;
    train.grad = GradMode::Enabled;
    worker.measure(train, |_| {}).unwrap();
    let r = worker.measure(spec(8), |_| {}).unwrap_or_else(|e| panic!("{e}"));
    let c = r.compiled.unwrap();
    assert!(c.max_abs_diff.is_finite() && c.max_abs_diff < 1e-4, "the package against eager after a train-mode run: {}", c.max_abs_diff);
}
