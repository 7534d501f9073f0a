//! Physical invariants the engine's numbers must obey, per device (see `common`): on the
//! CPU always, on CUDA by the GPU check. Nothing here compares against a
//! number copied from an earlier run.

use crate::common;

use engine::{EngineError, Worker, WorkerConfig};
use engine::lab::{forward, Lab, LabConfig};
use engine::torch_call::tch_device;
use protocol::{
    Autocast, DeviceChoice, DeviceKind, FailureKind, GradMode, ModelId, Report, RunSpec,
};
use tch::{Device, Kind, Tensor};

fn spec(model: ModelId, batch: u32, eval: bool, grad: GradMode) -> RunSpec {
    on(DeviceKind::Cpu, model, batch, eval, grad)
}

fn on(device: DeviceKind, model: ModelId, batch: u32, eval: bool, grad: GradMode) -> RunSpec {
    RunSpec {
        eval,
        ..common::small_run(device, model, batch, grad)
    }
}

use crate::common::worker;

fn measure(w: &Worker, s: RunSpec) -> Report {
    w.measure(s, |_| {}).expect("run succeeds")
}

per_device! {
fn grad_peak_exceeds_no_grad_peak_and_inference_mode_matches_no_grad(device) {
    let w = worker();
    let grad = measure(&w, on(device, ModelId::Resnet18, 4, true, GradMode::Enabled));
    let no_grad = measure(&w, on(device, ModelId::Resnet18, 4, true, GradMode::NoGrad));
    let inference = measure(
        &w,
        on(device, ModelId::Resnet18, 4, true, GradMode::InferenceMode),
    );
    let (g, n, i) = (
        grad.memory.peak_above_baseline_bytes,
        no_grad.memory.peak_above_baseline_bytes,
        inference.memory.peak_above_baseline_bytes,
    );
    // With grad, activations are kept for backward; without, they are freed as used. The
    // gap is at least the first convolution's output (64 channels at half the input side),
    // which backward needs and no_grad frees at once.
    let side = 64 / 2;
    let first_conv_output = 4 * 64 * side * side * 4;
    assert!(g > n + first_conv_output, "grad {g} vs no_grad {n}");
    // inference_mode saves CPU overhead, not memory: it needs no more than no_grad (two
    // runs' peaks, by the one rule for peaks: exact on the CPU; on CUDA within the caching
    // allocator's unsplit remainders and cuDNN's workspace from the same large pool).
    common::bytes(device).assert_peak_le(i, n, "inference_mode's peak against no_grad's");
    assert!(grad.output.requires_grad && !no_grad.output.requires_grad);
    assert!(inference.output.is_inference && !no_grad.output.is_inference);
}
}

per_device! {
fn memory_returns_to_baseline_after_every_kind_of_run(device) {
    let w = worker();
    for grad in GradMode::ALL {
        for eval in [true, false] {
            for autocast in [Autocast::Off, Autocast::Bf16] {
                let r = measure(
                    &w,
                    RunSpec {
                        autocast,
                        ..on(device, ModelId::TinyMlp, 16, eval, grad)
                    },
                );
                assert_eq!(
                    r.memory.after_release_bytes,
                    r.memory.baseline_bytes,
                    "{}",
                    r.spec.label()
                );
                assert_eq!(r.memory.leaked_bytes, 0);
                assert!(r.memory.peak_allocated_bytes >= r.memory.baseline_bytes);
                assert_eq!(
                    r.memory.peak_reserved_bytes.is_none(),
                    device == DeviceKind::Cpu,
                    "the CPU has no caching pool; CUDA's is read"
                );
            }
        }
    }
}
}

per_device! {
fn reports_keep_warmup_apart_and_order_their_statistics(device) {
    let w = worker();
    let mut events = Vec::new();
    let r = w.measure(
        RunSpec {
            warmup: 2,
            iters: 5,
            ..on(device, ModelId::TinyMlp, 8, true, GradMode::NoGrad)
        },
        |e| events.push(e.clone()),
    );
    let r = r.unwrap();
    assert_eq!(r.warmup.len(), 2);
    assert_eq!(r.samples.len(), 5);
    let l = &r.latency_ms;
    assert!(0.0 < l.min && l.min <= l.p50 && l.p50 <= l.p95 && l.p95 <= l.p99 && l.p99 <= l.max);
    assert!(r.throughput_per_s > 0.0);
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| match e {
            protocol::Event::Queued { .. } => "queued",
            protocol::Event::Started { .. } => "started",
            protocol::Event::Warmup { .. } => "warmup",
            protocol::Event::Sample { .. } => "sample",
            protocol::Event::Step { .. } => "step",
            protocol::Event::Progress { .. } => "progress",
            protocol::Event::Done { .. } => "done",
            protocol::Event::Failed { .. } => "failed",
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "queued", "started", "warmup", "warmup", "sample", "sample", "sample", "sample",
            "sample", "done"
        ]
    );
}
}

per_device! {
fn autocast_bf16_yields_bf16_output(device) {
    let w = worker();
    let r = measure(
        &w,
        RunSpec {
            autocast: Autocast::Bf16,
            ..on(device, ModelId::TinyMlp, 8, true, GradMode::NoGrad)
        },
    );
    assert_eq!(r.output.dtype, "BFloat16");
    let r = measure(&w, on(device, ModelId::TinyMlp, 8, true, GradMode::NoGrad));
    assert_eq!(r.output.dtype, "Float");
}
}

per_device! {
fn dropout_differs_between_calls_in_train_mode_only(device) {
    let mut lab = Lab::new(LabConfig::default()).unwrap();
    let i = lab
        .model_index(ModelId::TinyMlp, device, 64)
        .unwrap();
    let model = lab.model(i);
    let x = Tensor::randn([8, 64], (Kind::Float, tch_device(device)));
    let run = |eval| {
        let s = RunSpec {
            eval,
            input_size: Some(64),
            ..on(device, ModelId::TinyMlp, 8, eval, GradMode::NoGrad)
        };
        forward(model, &x.shallow_clone().into(), &s, device).unwrap()
    };
    assert!(
        !run(false).allclose(&run(false), 1e-6, 1e-6, false),
        "train mode: dropout must differ"
    );
    assert!(run(true).equal(&run(true)), "eval mode: identical outputs");
}
}

per_device! {
fn batchnorm_couples_batch_mates_in_train_mode_only_and_updates_running_stats(device) {
    let mut lab = Lab::new(LabConfig::default()).unwrap();
    let i = lab
        .model_index(ModelId::Resnet18, device, 64)
        .unwrap();
    let model = lab.model(i);
    let a = Tensor::randn([4, 3, 64, 64], (Kind::Float, tch_device(device)));
    let b = a.copy();
    // Same first sample, different batch-mates.
    b.narrow(0, 1, 3)
        .copy_(&Tensor::randn([3, 3, 64, 64], (Kind::Float, tch_device(device))));
    let first = |x: &Tensor, eval: bool| {
        let s = RunSpec {
            eval,
            ..on(device, ModelId::Resnet18, 4, eval, GradMode::NoGrad)
        };
        forward(model, &x.shallow_clone().into(), &s, device)
            .unwrap()
            .get(0)
    };
    assert!(
        first(&a, true).allclose(&first(&b, true), 1e-5, 1e-5, false),
        "eval: independent of batch-mates"
    );
    assert!(
        !first(&a, false).allclose(&first(&b, false), 1e-3, 1e-3, false),
        "train: depends on batch-mates"
    );

    let running_mean = model
        .vs
        .variables()
        .into_iter()
        .find(|(name, _)| name.ends_with("running_mean"))
        .map(|(_, t)| t)
        .unwrap();
    let before = running_mean.copy();
    let _ = first(&a, false); // train mode under no_grad: still "inference" to many readers
    assert!(
        !before.equal(&running_mean),
        "BatchNorm running stats change in train mode even under no_grad"
    );
    let before = running_mean.copy();
    let _ = first(&a, true);
    assert!(
        before.equal(&running_mean),
        "eval mode leaves running stats alone"
    );
}
}

#[test]
fn inference_tensors_cannot_be_saved_for_backward_until_cloned() {
    let _one_at_a_time = crate::common::cpu_lock();
    let w = worker();
    let r = measure(&w, spec(ModelId::TinyMlp, 4, true, GradMode::InferenceMode));
    assert!(r.output.is_inference);
    let x = {
        let _g = engine::torch_ext::InferenceModeGuard::enter().unwrap();
        Tensor::ones([2, 2], (Kind::Float, Device::Cpu)) * 3
    };
    let weight = Tensor::ones([2, 2], (Kind::Float, Device::Cpu)).set_requires_grad(true);
    let err = x.f_matmul(&weight).unwrap_err().to_string();
    assert!(
        err.contains("Inference tensors cannot be saved for backward"),
        "{err}"
    );
    // The documented fix: a copy made outside inference mode is a normal tensor.
    let fixed = x.copy();
    assert!(!fixed.is_inference());
    assert!(fixed.f_matmul(&weight).is_ok());
}

#[test]
fn invalid_specs_are_rejected_naming_the_field() {
    let _one_at_a_time = crate::common::cpu_lock();
    let w = worker();
    let cases = [
        (
            RunSpec {
                batch: 0,
                ..Default::default()
            },
            "batch",
        ),
        (
            RunSpec {
                batch: 1_000_000,
                ..Default::default()
            },
            "batch",
        ),
        (
            RunSpec {
                iters: 0,
                ..Default::default()
            },
            "iters",
        ),
    ];
    for (s, field) in cases {
        match w.submit(s, Box::new(|_| {})) {
            Err(EngineError::InvalidSpec(e)) => assert_eq!(e.field, field),
            other => panic!("expected an invalid spec, got {other:?}"),
        }
    }
    if !engine::torch_ext::cuda_available() {
        match w.submit(
            RunSpec {
                device: DeviceChoice::Cuda,
                ..Default::default()
            },
            Box::new(|_| {}),
        ) {
            Err(EngineError::InvalidSpec(e)) => assert_eq!(e.field, "device"),
            other => panic!("expected an invalid spec, got {other:?}"),
        }
    }
}

per_device! {
fn out_of_memory_is_a_result_and_the_worker_carries_on(device) {
    let w = worker();
    // A 48 MiB device: ResNet-18's weights alone take 45 MiB, its activations cannot fit.
    // The budget counts what the worker holds, and on CUDA the meter reads the whole
    // process (sm_90's cuBLAS and cuBLASLt workspaces alone are 32 MiB per handle and
    // stream): so 48 MiB above what this worker held once its lab had started and primed
    // them (`common::Bytes::held`), given to the run as its task's budget, as the worker
    // gives a run the server's.
    let budget = common::bytes(device).held(&w) + (48 << 20);
    let checked = w.check(on(device, ModelId::Resnet18, 16, false, GradMode::Enabled)).unwrap();
    let result = w
        .call(move |lab| {
            let control = engine::RunControl { budget_bytes: Some(budget), ..Default::default() };
            let result = lab
                .with_task(control.clone(), |lab| {
                    lab.admit(&checked, &control)?;
                    lab.measure(&checked, &control, &mut |_| {})
                })
                .and_then(|r| r);
            if let Err(f) = &result {
                // What the worker does after an out-of-memory failure.
                if f.kind == FailureKind::OutOfMemory {
                    lab.clear_models();
                }
                lab.recover(device);
            }
            result
        })
        .unwrap();
    match result {
        Err(f) => {
            assert_eq!(f.kind, FailureKind::OutOfMemory, "{}", f.message);
            assert!(f.message.contains("batch 16"), "{}", f.message);
        }
        Ok(r) => panic!("expected an out-of-memory result, got a report with a peak of {} B", r.memory.peak_allocated_bytes),
    }
    // The next run measures correctly, and its memory returns to its baseline.
    let r = measure(&w, on(device, ModelId::TinyMlp, 8, true, GradMode::NoGrad));
    assert_eq!(r.memory.leaked_bytes, 0);
}
}

per_device! {
fn a_full_queue_refuses_and_a_cancelled_run_never_runs(device) {
    let config = WorkerConfig {
        queue_capacity: 1,
        ..Default::default()
    };
    let w = Worker::start(config).unwrap();
    // Occupy the device thread so that submissions wait in the queue.
    common::with_device_busy(&w, |busy| {
        let (tx, rx) = std::sync::mpsc::channel();
        let ticket = w
            .submit(
                on(device, ModelId::TinyMlp, 2, true, GradMode::NoGrad),
                Box::new(move |e| tx.send(e).unwrap()),
            )
            .unwrap();
        assert!(matches!(
            w.submit(
                on(device, ModelId::TinyMlp, 2, true, GradMode::NoGrad),
                Box::new(|_| {})
            ),
            Err(EngineError::QueueFull { capacity: 1 })
        ));
        ticket.cancel();
        busy.release();
        // The sink is dropped once the worker has dealt with the run, ending the stream.
        let events: Vec<_> = rx.iter().collect();
        assert!(
            matches!(events[0], protocol::Event::Queued { position: 0 }),
            "{events:?}"
        );
        assert!(
            matches!(events.last(), Some(protocol::Event::Failed { failure }) if failure.kind == FailureKind::Cancelled),
            "{events:?}"
        );
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, protocol::Event::Started { .. })),
            "a cancelled run never starts"
        );
    });
}
}

#[test]
fn shutting_down_finishes_the_current_run_and_cancels_the_queued_ones() {
    let _one_at_a_time = crate::common::cpu_lock();
    let w = Worker::start(WorkerConfig {
        queue_capacity: 4,
        ..Default::default()
    })
    .unwrap();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let (busy_tx, busy_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        // The current task: holds the device until released.
        let current = s.spawn(|| {
            w.call(move |_| {
                busy_tx.send(()).unwrap();
                release_rx.recv().unwrap();
                "finished"
            })
        });
        busy_rx.recv().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        w.submit(
            spec(ModelId::TinyMlp, 2, true, GradMode::NoGrad),
            Box::new(move |e| tx.send(e).unwrap()),
        )
        .unwrap();
        w.close();
        // Closed: nothing new is taken, and what waited is told why it will not run.
        assert!(matches!(
            w.submit(
                spec(ModelId::TinyMlp, 2, true, GradMode::NoGrad),
                Box::new(|_| {})
            ),
            Err(EngineError::WorkerGone)
        ));
        let events: Vec<_> = rx.iter().collect();
        assert!(
            matches!(events.last(), Some(protocol::Event::Failed { failure }) if failure.kind == FailureKind::Cancelled && failure.message.contains("shutting down")),
            "{events:?}"
        );
        release_tx.send(()).unwrap();
        assert_eq!(
            current.join().unwrap().unwrap(),
            "finished",
            "the task under way finishes"
        );
        w.shutdown();
    });
}
